"""Time grad_input and grad_weight separately, cupyconv and torch side by side.

Usage (on a GPU machine): ``python scripts/backward_split.py P1,P2,X2 tf32,float16``.
Prints one Markdown row per (problem, mode): median ms of cupyconv's
grad_input-only and grad_weight-only calls (output_mask), and of
torch.autograd.grad with respect to the input only and the weight only.
"""

import sys

import numpy

from cupyconv import bench


def main(problem_ids, modes):
    import cupy
    import torch

    import cupyconv

    print("| id | mode | ours grad_input | ours grad_weight | torch grad_input | torch grad_weight |")
    print("|---|---|---|---|---|---|")
    for mode in modes:
        dtype, precision = bench.MODES[mode]
        for pid in problem_ids:
            problem = bench.PROBLEMS[pid]
            g = problem.geometry()
            rng, x, w = bench._inputs(problem)
            gy = rng.standard_normal(g.output_shape, dtype=numpy.float32)
            x, w, gy = (a.astype(bench._cupy_dtype(dtype)) for a in (x, w, gy))
            fn = cupyconv.conv_transpose1d_backward if problem.dims == 1 else cupyconv.conv_transpose2d_backward
            times = []
            for mask in ((True, False, False), (False, True, False)):
                times.append(bench._median_ms(lambda: fn(gy, x, w, **problem.kwargs, output_mask=mask, precision=precision), 3, 10))
            tfn = torch.nn.functional.conv_transpose1d if problem.dims == 1 else torch.nn.functional.conv_transpose2d
            previous = torch.backends.cudnn.allow_tf32
            torch.backends.cudnn.allow_tf32 = precision == "tf32"
            try:
                xt = bench._as_torch(torch, x).clone().requires_grad_()
                wt = bench._as_torch(torch, w).clone().requires_grad_()
                gyt = bench._as_torch(torch, gy)
                yt = tfn(xt, wt, **problem.kwargs)
                for wrt in (xt, wt):
                    times.append(bench._median_ms(lambda: torch.autograd.grad(yt, (wrt,), gyt, retain_graph=True), 3, 10))
            finally:
                torch.backends.cudnn.allow_tf32 = previous
            print(f"| {pid} | {mode} | " + " | ".join(f"{t:.3f}" for t in times) + " |", flush=True)
            x = w = gy = xt = wt = gyt = yt = None  # free before the next problem
            cupy.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main(sys.argv[1].split(","), sys.argv[2].split(","))
