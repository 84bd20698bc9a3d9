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
        raise ConfigError(_one_line(ex)) from None
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
