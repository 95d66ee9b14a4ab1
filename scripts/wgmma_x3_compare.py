"""float32 "highest" on conv_window (3xTF32 on mma.sync) against conv_wgmma_x3
(3xTF32 on wgmma), with torch.

Usage (on an H100): ``python scripts/wgmma_x3_compare.py P1,P2,X2,X3 [rounds] [--backward]``.
For each problem, runs bench's forward rows (and backward with
``--backward``) in float32
"highest" with settings.use_wgmma_x3 off, then on with each of conv_wgmma_x3's
tiles (CHAIN 0) and its 64 x 256 tile with each CHAIN (how many MMAs share a
fresh accumulator), `rounds` times interleaved (default 2), in one process, and prints one
Markdown row per (problem, pass, setting): our ms, torch's ms (cuDNN, TF32
off), the speed-up, both relative errors against float64 (backward: the
larger of grad_input's and grad_weight's), and how many passes
conv_wgmma_x3 served.
"""

import sys

import cupyconv._launch
import cupyconv.settings
from cupyconv import _kernels, bench
from cupyconv.kernels import conv_wgmma


def main(problem_ids, rounds=2, backward=False):
    print("| id | pass | setting | ms | torch ms | speed-up | error | torch error | x3 passes |")
    print("|---|---|---|---|---|---|---|---|---|")
    original = (conv_wgmma.WGMMA_X3_TILES, conv_wgmma.WGMMA_X3_CHAIN)  # (not settings: module constants)
    settings = [("conv_window", False, None, 0)] + [(f"x3 {t.bm}x{t.bn}", True, t, 0) for t in _kernels.WGMMA_TILES]
    settings += [(f"x3 64x256 chain {c}", True, _kernels.WGMMA_TILES[1], c) for c in (1, 2)]
    try:
        for _ in range(rounds):
            for pid in problem_ids:
                problem = bench.PROBLEMS[pid]
                for name, on, tile, chain in settings:
                    conv_wgmma.WGMMA_X3_TILES = (tile,) if tile is not None else original[0]
                    conv_wgmma.WGMMA_X3_CHAIN = chain  # read by wgmma_x3_name
                    conv_wgmma._wgmma_plan.cache_clear()
                    with cupyconv._launch.observe_plans() as served:  # (remembered calls off: every timed call plans)
                        with cupyconv.settings.override(use_wgmma_x3=on):
                            rows = bench.run_gpu([problem], "float32", "highest", 5, 20, use_torch=True)
                            if backward:
                                rows += bench.run_gpu_backward([problem], "float32", "highest", 3, 10)
                    x3 = sum(plan.family == "conv_wgmma_x3" for _, plan in served)
                    for row in rows:
                        what = "backward" if row.backward else "forward"
                        print(
                            f"| {pid} | {what} | {name} | {row.ours_ms:.3f} | {row.torch_ms:.3f} | {row.torch_ms / row.ours_ms:.2f}x "
                            f"| {row.ours_error:.2e} | {row.torch_error:.2e} | {x3} |",
                            flush=True,
                        )
    finally:
        conv_wgmma.WGMMA_X3_TILES, conv_wgmma.WGMMA_X3_CHAIN = original
        conv_wgmma._wgmma_plan.cache_clear()


if __name__ == "__main__":
    main(sys.argv[1].split(","), int(sys.argv[2]) if len(sys.argv) > 2 else 2, "--backward" in sys.argv)
