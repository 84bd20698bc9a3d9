"""Register schemas with Hydra's ConfigStore: the root `Config`, each algorithm's own schema, the kernel choices.

A group file opts into its schema with `defaults: [/schema/<group>/<name>@_here_, _self_]`. An algorithm without a
`conf/algo/<name>.yaml` (a plugin) is also stored as the choice `algo/<name>` itself, so `algo=<name>` composes its
schema's defaults; and without a `conf/data/<name>_default.yaml` (config.yaml's default data is `${algo}_default`) as
the choice `data/<name>_default`, a data config named after the algorithm (a plugin that builds its own data ignores
it; one that reads a data set stores its own `data/<name>_default`). The `kernels` group has no files: its choices
are the rows of `posttrain.kernels.registry`.
"""

from __future__ import annotations

from hydra.core.config_store import ConfigStore

from posttrain.config.schema import Config, DataConfig, KernelsConfig
from posttrain.kernels.registry import CHOICES as KERNEL_CHOICES
from posttrain.paths import CONF_DIR


def register() -> ConfigStore:
    """Store every schema; idempotent, called before any compose."""
    from posttrain.algos.registry import algorithms

    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    for backend in KERNEL_CHOICES:  # kernels=<backend>
        cs.store(group="kernels", name=backend, node=KernelsConfig(backend=backend))
    for name, algorithm in algorithms().items():
        cs.store(group="schema/algo", name=name, node=algorithm.schema)
        if not (CONF_DIR / "algo" / f"{name}.yaml").is_file():
            cs.store(group="algo", name=name, node=algorithm.schema)
        default_data = f"{name}_default"
        stored = f"{default_data}.yaml" in cs.repo.get("data", {})
        if not stored and not (CONF_DIR / "data" / f"{default_data}.yaml").is_file():
            cs.store(group="data", name=default_data, node=DataConfig(name=name))
    return cs
