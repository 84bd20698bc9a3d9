"""The algorithms: every package `posttrain.algos.<name>` with an `ALGORITHM` (see `posttrain.algos.base`).

Found by scanning the `posttrain.algos` namespace package, so an algorithm is named once, in its own package,
and a plugin on another path entry joins without editing this repository. A package that fails to import is an
error, never a silently missing algorithm.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from posttrain.algos.base import Algorithm
from posttrain.errors import UserError


class AlgorithmError(UserError):
    """An unknown algorithm name."""


@lru_cache(maxsize=1)
def _discover(path: tuple[str, ...]) -> dict[str, Algorithm]:
    import posttrain.algos as package

    found: dict[str, Algorithm] = {}
    for info in sorted(pkgutil.iter_modules(list(path)), key=lambda i: i.name):
        if not info.ispkg or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")  # errors propagate: loud, not skipped
        algorithm = getattr(module, "ALGORITHM", None)
        if not isinstance(algorithm, Algorithm):
            raise TypeError(
                f"{module.__name__} is a package in posttrain.algos without an ALGORITHM "
                "(an instance of posttrain.algos.base.Algorithm)"
            )
        if algorithm.name != info.name:
            raise TypeError(f"{module.__name__}.ALGORITHM.name is {algorithm.name!r}; it must be {info.name!r}")
        found[info.name] = algorithm
    return found


def algorithms() -> dict[str, Algorithm]:
    """name -> Algorithm, for every algorithm package on the current `posttrain.algos` path."""
    import posttrain.algos as package

    return _discover(tuple(package.__path__))


def get_algorithm(name: str) -> Algorithm:
    found = algorithms()
    if name not in found:
        raise AlgorithmError(f"algo={name} has no implementation (available: {', '.join(found)})")
    return found[name]
