#!/usr/bin/env bash
# On a machine with a CUDA GPU: the whole test suite (GPU tests included, and
# required: a missing GPU fails instead of skipping), then the benchmark.
# Logs go to $OUT (default ./gpu-logs); a short summary is printed last.
# BENCH_ARGS is appended to both bench commands (e.g. BENCH_ARGS=--autotune).
set -uo pipefail
OUT=${OUT:-gpu-logs}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUPYCONV_REQUIRE_GPU=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
python3 -m pytest tests -q -p no:cacheprovider -rf "$@" >"$OUT/tests.log" 2>&1
tests_rc=$?
python3 -m cupyconv bench --problems all --modes all --adapter --markdown "$OUT/bench.md" --plot "$OUT/bench.png" ${BENCH_ARGS:-} >"$OUT/bench.log" 2>&1
bench_rc=$?
python3 -m cupyconv bench --backward --problems P1,P2,P3,P4,X1,X2,X3 --modes all --markdown "$OUT/bench-backward.md" ${BENCH_ARGS:-} >"$OUT/bench-backward.log" 2>&1
bench_rc=$(( bench_rc || $? ))
echo "== failures (if any)"; grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -40
echo "== bench (rc=$bench_rc)"; tail -n 52 "$OUT/bench.log" | cut -d"|" -f2,4-7,11
echo "== backward"; tail -n 30 "$OUT/bench-backward.log" | cut -d"|" -f2,4-7,11-13
echo "== tests (rc=$tests_rc)"; tail -n 1 "$OUT/tests.log"
exit $(( tests_rc != 0 || bench_rc != 0 ))
