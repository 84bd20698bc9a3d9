"""`python -m posttrain.bench <name> ...` dispatches to `posttrain.bench.<name>.main`."""

from __future__ import annotations

import importlib
import sys

from . import BENCHES


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in BENCHES:
        print(
            f"usage: python -m posttrain.bench {{{'|'.join(BENCHES)}}} [options]  (--help per benchmark)",
            file=sys.stderr,
        )
        return 2
    return importlib.import_module(f"posttrain.bench.{argv[0]}").main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
