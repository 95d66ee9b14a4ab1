"""Run the forward pass of chosen benchmark problems once each, for a profiler.

Usage (on a GPU machine): ``ncu [options] python scripts/ncu_probe.py X1:highest P2:tf32``.
Each argument is PROBLEM:MODE with MODE one of bench.MODES; the kernels are
compiled and run once untimed first, so a profiler filtering on launch count
sees the second launch.
"""

import sys

import cupy

import cupyconv
from cupyconv import bench


def main(specs):
    for spec in specs:
        problem_id, mode = spec.split(":")
        problem = bench.PROBLEMS[problem_id]
        dtype, precision = bench.MODES[mode]
        rng = cupy.random.default_rng(0)
        x = rng.standard_normal((problem.batch, problem.in_channels) + problem.size, dtype=cupy.float32).astype(bench._cupy_dtype(dtype))
        w = rng.standard_normal((problem.in_channels, problem.out_channels // problem.groups) + problem.kernel, dtype=cupy.float32)
        w = w.astype(bench._cupy_dtype(dtype))
        fn = cupyconv.conv_transpose1d if problem.dims == 1 else cupyconv.conv_transpose2d
        for _ in range(2):
            fn(x, w, **problem.kwargs, precision=precision)
        cupy.cuda.get_current_stream().synchronize()


if __name__ == "__main__":
    main(sys.argv[1:])
