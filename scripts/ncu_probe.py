"""Run the forward (or backward) pass of chosen benchmark problems, for a profiler.

Usage (on a GPU machine): ``ncu [options] python scripts/ncu_probe.py X1:highest P2:tf32 X2:float16:backward``.
Each argument is PROBLEM:MODE or PROBLEM:MODE:backward with MODE one of
bench.MODES; each pass runs twice, so a profiler filtering on launch count
can skip the first (compiling) run.
"""

import sys

import cupy

import cupyconv
from cupyconv import bench


def main(specs):
    for spec in specs:
        problem_id, mode, *rest = spec.split(":")
        backward = rest == ["backward"]
        problem = bench.PROBLEMS[problem_id]
        dtype, precision = bench.MODES[mode]
        rng = cupy.random.default_rng(0)
        x = rng.standard_normal((problem.batch, problem.in_channels) + problem.size, dtype=cupy.float32).astype(bench._cupy_dtype(dtype))
        w = rng.standard_normal((problem.in_channels, problem.out_channels // problem.groups) + problem.kernel, dtype=cupy.float32)
        w = w.astype(bench._cupy_dtype(dtype))
        fn = cupyconv.conv_transpose1d if problem.dims == 1 else cupyconv.conv_transpose2d
        if backward:
            gy = fn(x, w, **problem.kwargs, precision=precision)
            fn = cupyconv.conv_transpose1d_backward if problem.dims == 1 else cupyconv.conv_transpose2d_backward
            for _ in range(2):
                fn(gy, x, w, **problem.kwargs, precision=precision)
        else:
            for _ in range(2):
                fn(x, w, **problem.kwargs, precision=precision)
        cupy.cuda.get_current_stream().synchronize()


if __name__ == "__main__":
    main(sys.argv[1:])
