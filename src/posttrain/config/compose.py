"""Compose the config outside @hydra.main (pre-flight for the CLI, tests, notebooks) with one-line errors."""

from __future__ import annotations

from collections.abc import Sequence

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from posttrain.config.auto_hw import resolve_auto_hw
from posttrain.config.precision import resolve_precision
from posttrain.config.registry import register
from posttrain.config.validate import ConfigError, validate
from posttrain.paths import CONF_DIR


def override_keys(overrides: Sequence[str]) -> set[str]:
    """The config keys that Hydra override strings set: `+trainer.lr=1e-4` -> `trainer.lr`, `model@x=y` -> `model`."""
    return {item.split("=", 1)[0].lstrip("+~").split("@", 1)[0] for item in overrides}


def _one_line(ex: BaseException) -> str:
    """Hydra/OmegaConf errors span several lines; keep what names the bad key or choice."""
    msg = str(ex).strip()
    cause = ex.__cause__
    if "Could not find" in msg or "Could not load" in msg:
        first = msg.splitlines()[0].strip()
        lines = msg.splitlines()
        start = next((i for i, ln in enumerate(lines) if ln.startswith("Available options")), len(lines))
        options = []
        for ln in lines[start + 1 :]:
            if not ln.startswith("\t"):
                break
            options.append(ln.strip())
        return f"{first}" + (f" (available: {', '.join(options)})" if options else "")
    if isinstance(cause, OmegaConfBaseException) or isinstance(ex, OmegaConfBaseException):
        inner = cause if isinstance(cause, OmegaConfBaseException) else ex
        key = getattr(inner, "full_key", None)
        text = str(inner).splitlines()[0].strip()
        return f"{key}: {text}" if key else text
    return " ".join(line.strip() for line in msg.splitlines() if line.strip())


def check_added_keys(cfg: DictConfig, overrides: Sequence[str]) -> None:
    """`+key=value` adds a key Hydra does not check: refuse one a schema does not have (a typo such as
    `+trainer.max_step=3` would otherwise train the default), naming the closest field. Adding to a free dict
    (`+model.arch.x=...`, `+data.params.x=...`) and appending a config group (`+experiment=...`) stay allowed."""
    import difflib
    import re

    for override in overrides:
        m = re.match(r"^\+(?!\+)([\w.]+)=", override)
        if not m or "." not in m.group(1) or m.group(1).startswith("hydra."):
            continue
        parent, _, leaf = m.group(1).rpartition(".")
        node = OmegaConf.select(cfg, parent, default=None)
        if not isinstance(node, DictConfig):
            continue
        schema = OmegaConf.get_type(node)
        fields = getattr(schema, "__dataclass_fields__", None)
        if fields is None or leaf in fields:  # a free dict, or a key the schema has (`+` was not needed)
            continue
        close = difflib.get_close_matches(leaf, list(fields), n=1)
        hint = f" (did you mean {parent}.{close[0]}?)" if close else f" (its keys: {', '.join(sorted(fields))})"
        raise ConfigError(f"+{parent}.{leaf}: {parent} has no key {leaf!r}{hint}")


def _task_of_another_algorithm(ex: BaseException, overrides: Sequence[str]) -> str | None:
    """`algo=d2l data=add`: a data file that sets its algorithm's keys (a GRPO task's rewards) under another one."""
    import re

    text = str(ex)
    task = re.match(r"In 'data/(\w+)'", text)
    key = re.search(r"full_key: (algo\.[\w.]+)", text)
    if not task or not key:
        return None
    algo = next((o.split("=", 1)[1] for o in reversed(overrides) if o.startswith("algo=")), "grpo")
    name = task.group(1)
    return (
        f"data={name} sets {key.group(1)}, which algo={algo} does not have: data={name} is another algorithm's task "
        f"(algo={algo} trains on e.g. data={_default_data(algo)})"
    )


def _default_data(algo: str) -> str:
    """The data choice conf/data/<algo>_default.yaml stands for (its defaults list's first entry)."""
    import yaml

    path = CONF_DIR / "data" / f"{algo}_default.yaml"
    if not path.is_file():
        return f"{algo}_default"
    entries = (yaml.safe_load(path.read_text()) or {}).get("defaults") or []
    return str(entries[0]) if entries and isinstance(entries[0], str) else f"{algo}_default"


def _unknown_key_hint(ex: BaseException, overrides: Sequence[str]) -> str:
    """For an override of a key the schema lacks: the setting it derives from, the same name deeper in the tree
    (`algo.beta` -> `algo.trl.beta`) or the closest sibling; "" for other errors."""
    import difflib

    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    inner = ex.__cause__ if isinstance(ex.__cause__, OmegaConfBaseException) else ex
    key = getattr(inner, "full_key", None)
    if not isinstance(inner, (ConfigKeyError, ConfigAttributeError)) or not key:
        return ""
    groups = [o for o in overrides if "." not in o.split("=", 1)[0] and not o.startswith(("+", "~"))]
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            base = compose(config_name="config", overrides=groups)
    except (HydraException, OmegaConfBaseException):
        return ""
    from posttrain.algos.registry import algorithms

    algorithm = algorithms().get(str(OmegaConf.select(base, "algo.name", default="")))
    if algorithm is not None and key in algorithm.derived_keys:
        return f" (posttrain sets it from {algorithm.derived_keys[key]})"
    parent_key, _, leaf = key.rpartition(".")
    parent = OmegaConf.select(base, parent_key, default=None) if parent_key else base
    if not isinstance(parent, DictConfig):
        return ""
    deeper = [
        f"{parent_key}.{name!s}.{leaf}".lstrip(".")
        for name, child in parent.items_ex(resolve=False)
        if isinstance(child, DictConfig) and leaf in child
    ]
    close = deeper or [f"{parent_key}.{c}".lstrip(".") for c in difflib.get_close_matches(leaf, list(parent), n=1)]
    return f" (did you mean {close[0]}?)" if close else ""


def load_config(overrides: Sequence[str] = (), validate_rules: bool = True, hf_names: bool = True) -> DictConfig:
    """Compose conf/config.yaml with overrides; raise ConfigError (one line) on any problem."""
    from hydra.core.global_hydra import GlobalHydra

    register()
    running = GlobalHydra.instance().hydra  # inside a Hydra app (e.g. the plan re-planning other profiles)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="config", overrides=list(overrides))
    except (HydraException, OmegaConfBaseException) as ex:
        message = _task_of_another_algorithm(ex, overrides) or _one_line(ex) + _unknown_key_hint(ex, overrides)
        raise ConfigError(message) from None
    finally:
        if running is not None:
            GlobalHydra.instance().initialize(running)
    check_added_keys(cfg, overrides)
    resolve_auto_hw(cfg, override_keys(overrides))  # hw=auto: this machine's profile, as `posttrain.run.run` does
    resolve_precision(cfg)  # hw.precision=auto: the value for this machine, as `apply_profile` sets it
    if validate_rules:
        validate(cfg, hf_names=hf_names)
    return cfg


def to_yaml(cfg: DictConfig) -> str:
    return OmegaConf.to_yaml(cfg, resolve=True)
