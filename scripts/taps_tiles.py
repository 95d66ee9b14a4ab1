"""Time grad_input_taps and grad_weight_taps with each of their tiles.

Usage (on a GPU machine): ``python scripts/taps_tiles.py X2,X3 tf32,float16``.
One Markdown row per (problem, mode, pass, tile): median ms of the pass
alone (output_mask), with that tile forced.
"""

import sys

import numpy

from cupyconv import _cuda, _kernels, bench


def main(problem_ids, modes):
    import cupyconv

    print("| id | mode | pass | tile | ms |")
    print("|---|---|---|---|---|")
    original = _cuda._pick
    for mode in modes:
        dtype, precision = bench.MODES[mode]
        for pid in problem_ids:
            problem = bench.PROBLEMS[pid]
            rng, x, w = bench._inputs(problem)
            gy = rng.standard_normal(problem.geometry().output_shape, dtype=numpy.float32)
            x, w, gy = (a.astype(bench._cupy_dtype(dtype)) for a in (x, w, gy))
            for family, mask, tiles in (
                ("grad_input_taps", (True, False, False), _kernels.GRAD_INPUT_TAPS_TILES),
                ("grad_weight_taps", (False, True, False), _kernels.GRAD_WEIGHT_TAPS_TILES),
            ):
                for tile in tiles:
                    ran = []

                    def pick(name, key, candidates, heuristic, launch, family=family, tile=tile, ran=ran):
                        if name == family:
                            ran.append(name)
                            return tile
                        return original(name, key, candidates, heuristic, launch)

                    _cuda._pick = pick
                    try:
                        ms = bench._median_ms(
                            lambda: cupyconv.conv_transpose1d_backward(gy, x, w, **problem.kwargs, output_mask=mask, precision=precision), 3, 10
                        )
                    finally:
                        _cuda._pick = original
                    label = "-".join(map(str, tile)) + ("" if ran else " (not routed)")
                    print(f"| {pid} | {mode} | {family} | {label} | {ms:.3f} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1].split(","), sys.argv[2].split(","))
