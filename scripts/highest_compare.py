"""float32 "highest" on CUDA cores against 3xTF32 tensor cores, with torch.

Usage (on a GPU machine): ``python scripts/highest_compare.py P1,P2,X2,X3``.
For each problem, runs bench's forward and backward rows in float32
"highest" once per settings.float32_highest value (SETTINGS), in one process,
and prints one Markdown row per (problem, pass, setting): our ms,
torch's ms (cuDNN, TF32 off), the speed-up, and both relative errors against
float64 (backward: the larger of grad_input's and grad_weight's).
"""

import sys

import cupyconv.settings
from cupyconv import bench


SETTINGS = ("simt", "3xtf32")


def main(problem_ids):
    print("| id | pass | float32 highest as | ms | torch ms | speed-up | error | torch error |")
    print("|---|---|---|---|---|---|---|---|")
    for pid in problem_ids:
        problem = bench.PROBLEMS[pid]
        for setting in SETTINGS:
            with cupyconv.settings.override(float32_highest=setting):
                rows = bench.run_gpu([problem], "float32", "highest", 5, 20, use_torch=True)
                rows += bench.run_gpu_backward([problem], "float32", "highest", 3, 10)
            for row in rows:
                what = "backward" if row.backward else "forward"
                print(
                    f"| {pid} | {what} | {setting} | {row.ours_ms:.3f} | {row.torch_ms:.3f} | {row.torch_ms / row.ours_ms:.2f}x "
                    f"| {row.ours_error:.2e} | {row.torch_error:.2e} |",
                    flush=True,
                )


if __name__ == "__main__":
    main(sys.argv[1].split(","))
