"""Command line: `python -m cupyconv bench [options]` (see `bench --help`),
`python -m cupyconv explain [options]` (see `explain --help`) and
`python -m cupyconv --version`."""

from __future__ import annotations

import sys


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m cupyconv [--version] {bench,explain} [--help] [options]\n\n"
              "commands:\n  bench    time cupyconv against torch (cuDNN) on the benchmark problems (bench --list: the problems)\n"
              "  explain  which kernel family runs a call, and why the others do not")  # fmt: skip
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        from . import __version__

        print(f"cupyconv {__version__}")
        return 0
    if argv[0] == "bench":
        from . import bench

        return bench.main(argv[1:])
    if argv[0] == "explain":
        return explain_main(argv[1:])
    print(f"unknown command {argv[0]!r}; try: python -m cupyconv bench --help", file=sys.stderr)
    return 2


def _ints(text: str):
    values = tuple(int(v) for v in text.split(",") if v.strip())
    return values[0] if len(values) == 1 else values


def explain_main(argv) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m cupyconv explain",
        description="For a call given by its shapes and arguments (or a benchmark problem), each kernel family of its "
        "priority lists in order: chosen, rejected (and why), or taking it too; then the chosen plan's launches. "
        "Planned for a described device; needs CuPy importable, not a GPU.",
    )
    parser.add_argument("--problem", help="a benchmark problem id (P1 ... X5) in place of the shapes")
    parser.add_argument("--input", type=_ints, help="input shape, e.g. 16,512,4096 (N, C_in, L) or N,C_in,H,W")
    parser.add_argument("--weight", type=_ints, help="weight shape, e.g. 512,256,16 (C_in, C_out/groups, K...)")
    for name, default in (("stride", 1), ("padding", 0), ("output-padding", 0), ("dilation", 1)):
        parser.add_argument(f"--{name}", type=_ints, default=default, help=f"an int or one per spatial axis (default {default})")
    parser.add_argument("--groups", type=int, default=1)
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16", "float64"])
    parser.add_argument("--precision", default=None, help="float32: highest (default) or tf32")
    parser.add_argument("--backward", action="store_true", help="the backward pass (grad_input, grad_weight, grad_bias)")
    parser.add_argument("--device", default="sm_90", choices=["sm_80", "sm_90"], help="sm_80: an A100; sm_90: an H200 (default)")
    args = parser.parse_args(argv)
    if args.problem:
        from .bench import PROBLEMS

        if args.problem not in PROBLEMS:
            parser.error(f"unknown problem {args.problem!r}; choose from {list(PROBLEMS)}")
        p = PROBLEMS[args.problem]
        dims, input_shape = p.dims, (p.batch, p.in_channels) + p.size
        weight_shape = (p.in_channels, p.out_channels // p.groups) + p.kernel
        kwargs = p.kwargs
    else:
        if args.input is None or args.weight is None:
            parser.error("give --problem, or --input and --weight")
        input_shape = args.input if isinstance(args.input, tuple) else (args.input,)
        weight_shape = args.weight if isinstance(args.weight, tuple) else (args.weight,)
        dims = len(weight_shape) - 2
        kwargs = dict(stride=args.stride, padding=args.padding, output_padding=args.output_padding, groups=args.groups, dilation=args.dilation)
    from ._explain import explain

    try:
        print(explain(dims, input_shape, weight_shape, **kwargs, dtype=args.dtype, precision=args.precision, backward=args.backward, device=args.device))
    except (TypeError, ValueError) as error:
        parser.error(str(error))
    return 0


if __name__ == "__main__":
    sys.exit(main())
