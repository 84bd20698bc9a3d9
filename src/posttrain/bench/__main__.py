"""`python -m posttrain.bench <name> ...` dispatches to `posttrain.bench.<name>.main`."""

from __future__ import annotations

import importlib
import sys

from . import BENCHES


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    usage = f"usage: python -m posttrain.bench {{{'|'.join(BENCHES)}}} [options]  (--help per benchmark)"
    if argv and argv[0] in ("-h", "--help"):
        print(usage)
        return 0
    if not argv or argv[0] not in BENCHES:
        print(usage, file=sys.stderr)
        return 2
    return importlib.import_module(f"posttrain.bench.{argv[0]}").main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
