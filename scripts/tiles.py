"""Time conv_window, grad_input_taps and grad_weight_taps with each of their tiles.

Usage (on a GPU machine): ``python scripts/tiles.py X2,X3 highest,tf32,float16``.
One Markdown row per (problem, mode, kernel, tile): median ms of the pass the
kernel serves (the forward pass for conv_window; grad_input or grad_weight
alone, through output_mask, for the taps kernels), with that tile forced.
A tile the kernel cannot take for the problem (shared memory, say) is
marked "not routed" and timed with the heuristic's tile (settings.tile
forces a tile only where it is one of the family's candidates).
"""

import sys

import numpy

import cupyconv._launch  # noqa: F401 (observe_plans)
import cupyconv.settings  # noqa: F401 (override)

from cupyconv import _kernels, bench


def main(problem_ids, modes):
    import cupyconv

    print("| id | mode | kernel | tile | ms |")
    print("|---|---|---|---|---|")
    for mode in modes:
        dtype, precision = bench.MODES[mode]
        for pid in problem_ids:
            problem = bench.PROBLEMS[pid]
            rng, x, w = bench._inputs(problem)
            gy = rng.standard_normal(problem.geometry().output_shape, dtype=numpy.float32)
            x, w, gy = (a.astype(bench._cupy_dtype(dtype)) for a in (x, w, gy))
            forward = lambda: cupyconv.conv_transpose1d(x, w, **problem.kwargs, precision=precision)  # noqa: E731
            for family, run, tiles in (
                ("conv_window", forward, _kernels.WINDOW_TUNE_TILES),
                ("grad_input_taps", (True, False, False), _kernels.GRAD_INPUT_TAPS_TILES),
                ("grad_weight_taps", (False, True, False), _kernels.GRAD_WEIGHT_TAPS_TILES),
            ):
                if isinstance(run, tuple):
                    run = lambda mask=run: cupyconv.conv_transpose1d_backward(gy, x, w, **problem.kwargs, output_mask=mask, precision=precision)  # noqa: E731
                for tile in tiles:
                    with cupyconv.settings.override(tile=(family, tile)):
                        with cupyconv._launch.observe_plans() as served:  # one untimed call: did the family run the tile?
                            run()
                        ran = [plan for _, plan in served if plan.family == family and plan.tile == tile]
                        ms = bench._median_ms(run, 3, 10)
                    label = "-".join(map(str, tile)) + ("" if ran else " (not routed)")
                    print(f"| {pid} | {mode} | {family} | {label} | {ms:.3f} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1].split(","), sys.argv[2].split(","))
