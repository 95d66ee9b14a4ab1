"""conv_direct against the polyphase GEMMs on the benchmark problems, with torch.

Usage (on a GPU machine): ``python scripts/direct_compare.py P3,P4,P5 highest,tf32,float16,bfloat16``.
For each problem and mode, runs bench's forward row three ways in one process:
the GEMM kernels (conv_direct off), and conv_direct with each of its tiles
(every problem forced onto it), and prints one Markdown row per run: our ms,
torch's ms (cuDNN in the matching setting), the speed-up and both relative
errors against float64.  The heuristic's choice is marked.
"""

import sys

import cupyconv.settings
from cupyconv import _kernels, bench
from cupyconv.kernels import conv_direct


def main(problem_ids, modes):
    print("| id | mode | kernel | ms | torch ms | speed-up | error | torch error |")
    print("|---|---|---|---|---|---|---|---|")
    tiles = _kernels.DIRECT_TILES
    for pid in problem_ids:
        problem = bench.PROBLEMS[pid]
        heuristic = _kernels.direct_heuristic(problem.geometry().out_channels_per_group)
        for mode in modes:
            dtype, precision = bench.MODES[mode]
            runs = [("GEMMs", -1, tiles)] + [(f"direct {t.bm}x{t.tn}" + (" (heuristic)" if t == heuristic else ""), 10**9, (t,)) for t in tiles]
            for label, limit, only in runs:
                limits = {"direct_max_products_tensor_cores": limit, "direct_max_products_cuda_cores": limit, "direct_max_products_full_rows": limit}
                _kernels.DIRECT_TILES = conv_direct.DIRECT_TILES = only  # the candidates and direct_heuristic's
                try:
                    with cupyconv.settings.override(**limits):
                        (row,) = bench.run_gpu([problem], dtype, precision, 5, 20, use_torch=True)
                finally:
                    _kernels.DIRECT_TILES = conv_direct.DIRECT_TILES = tiles
                print(
                    f"| {pid} | {mode} | {label} | {row.ours_ms:.3f} | {row.torch_ms:.3f} | {row.torch_ms / row.ours_ms:.2f}x "
                    f"| {row.ours_error:.2e} | {row.torch_error:.2e} |",
                    flush=True,
                )


if __name__ == "__main__":
    main(sys.argv[1].split(","), sys.argv[2].split(",") if len(sys.argv) > 2 else list(bench.ALL_MODES))
