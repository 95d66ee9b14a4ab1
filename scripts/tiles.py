"""Time conv_window, grad_input_taps and grad_weight_taps with each of their tiles.

Usage (on a GPU machine): ``python scripts/tiles.py X2,X3 highest,tf32,float16``.
One Markdown row per (problem, mode, kernel, tile): median ms of the pass the
kernel serves (the forward pass for conv_window; grad_input or grad_weight
alone, through output_mask, for the taps kernels), with that tile forced.
A tile the kernel cannot take for the problem (shared memory, say) is
marked "not routed" and timed with the heuristic's tile.
"""

import sys

import numpy

from cupyconv import _autotune, _cuda, _kernels, bench


def main(problem_ids, modes):
    import cupyconv

    print("| id | mode | kernel | tile | ms |")
    print("|---|---|---|---|---|")
    original_pick, original_enabled = _cuda._pick, _autotune.enabled
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
                    ran = []

                    def pick(name, key, candidates, heuristic, launch, family=family, tile=tile, ran=ran):
                        if name == family and (tile in candidates or not candidates):
                            ran.append(name)
                            return tile
                        return heuristic

                    # candidates are listed (and checked to fit) only when autotuning is on
                    _cuda._pick, _autotune.enabled = pick, lambda: True
                    try:
                        ms = bench._median_ms(run, 3, 10)
                    finally:
                        _cuda._pick, _autotune.enabled = original_pick, original_enabled
                    label = "-".join(map(str, tile)) + ("" if ran else " (not routed)")
                    print(f"| {pid} | {mode} | {family} | {label} | {ms:.3f} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1].split(","), sys.argv[2].split(","))
