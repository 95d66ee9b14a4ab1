"""conv_wgmma_resident, conv_wgmma and conv_window on the benchmark problems,
with torch.

Usage (on a Hopper GPU): ``python scripts/wgmma_compare.py P1,P2,X2 tf32,float16,bfloat16``.
For each problem and mode, runs bench's forward row (and with ``--backward``
its backward row) with the wgmma kernels off (conv_window), with
conv_wgmma only (its heuristic tile, then each tile), and with
conv_wgmma_resident wherever it fits, not only where it is routed (its
heuristic tile, then each tile), in one process,
and prints one Markdown row per run: our ms, torch's ms (cuDNN in the
matching setting), the speed-up and both relative errors against float64.
A tile that does not fit leaves another kernel to run, which the kernels
column shows.
"""

import sys

import cupyconv.settings
from cupyconv import _cuda, _kernels, bench


def main(problem_ids, modes, backward=False):
    print("| id | mode | pass | run | kernels launched | ms | torch ms | speed-up | error | torch error |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    # a spy on _launch, not _cuda.observe_launches(): that would turn
    # remembered calls off for the timed runs
    launch, launched = _cuda._launch, set()

    def spy(plan, arrays):
        launched.add(plan.name.split("<")[0])
        launch(plan, arrays)

    _cuda._launch = spy
    for pid in problem_ids:
        problem = bench.PROBLEMS[pid]
        for mode in modes:
            dtype, precision = bench.MODES[mode]
            runs = [("conv_window", False, False, None), ("conv_wgmma", True, False, None)]
            runs += [(f"conv_wgmma {t.bm}x{t.bn}", True, False, t) for t in _kernels.WGMMA_TILES]
            runs += [("resident", True, True, None)]
            runs += [(f"resident {t.bm}x{t.bn}", True, True, t) for t in _kernels.WGMMA_TILES]
            for label, on, resident, tile in runs:
                forced = None if tile is None else ("conv_wgmma_resident" if resident else "conv_wgmma", tile)
                launched.clear()
                try:
                    with cupyconv.settings.override(use_wgmma=on, use_resident=resident, use_resident_anywhere=resident, tile=forced):
                        if backward:
                            (row,) = bench.run_gpu_backward([problem], dtype, precision, 5, 20)
                        else:
                            (row,) = bench.run_gpu([problem], dtype, precision, 5, 20, use_torch=True)
                finally:
                    pass
                print(
                    f"| {pid} | {mode} | {'backward' if backward else 'forward'} | {label} | {', '.join(sorted(launched))} | {row.ours_ms:.3f} | {row.torch_ms:.3f} "
                    f"| {row.torch_ms / row.ours_ms:.2f}x | {row.ours_error:.2e} | {row.torch_error:.2e} |",
                    flush=True,
                )


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--backward"]
    main(args[0].split(","), args[1].split(",") if len(args) > 1 else ["tf32", "float16", "bfloat16"], "--backward" in sys.argv)
