"""Command line: `python -m cupyconv bench [options]` (see `bench --help`) and
`python -m cupyconv --version`."""

from __future__ import annotations

import sys


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m cupyconv [--version] bench [--help] [options]\n\n"
              "commands:\n  bench   time cupyconv against torch (cuDNN) on the benchmark problems (bench --list: the problems)")  # fmt: skip
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        from . import __version__

        print(f"cupyconv {__version__}")
        return 0
    if argv[0] == "bench":
        from . import bench

        return bench.main(argv[1:])
    print(f"unknown command {argv[0]!r}; try: python -m cupyconv bench --help", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
