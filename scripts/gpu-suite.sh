#!/usr/bin/env bash
# On a machine with a CUDA GPU: every GPU test (marked gpu: tests/gpu/,
# tests/test_torch_gpu.py, and the CUDA cases of tests/test_torch.py and
# tests/test_autotune.py) with the GPU required, as SHARDS (default 8)
# pytest processes in parallel on the one GPU.  A cold machine spends most of
# the suite in NVRTC compiles, which one process does one at a time: in one
# process it ran past 10 minutes, in four shards 4 minutes (perf notes v28);
# at 2153 tests four shards took 551 s, near the device's 600-s limit a
# command, and six 353 s (perf notes v48); at 2325 tests six took 415 s; at
# 2737 (every test marked gpu) eight took 474 s on a fresh machine, the
# longest shard 447 s (perf notes v51).
# Each test function's cases stay in one shard (they share compiled kernels);
# functions are dealt largest first to the shard with the fewest cases.
# Logs go to $OUT (default ./gpu-logs): shards.txt, suite-K.log; failures and
# each shard's summary line are printed last.  Extra arguments go to every
# pytest (e.g. -x, or -k EXPRESSION to run a subset).
set -uo pipefail
OUT=${OUT:-gpu-logs}
SHARDS=${SHARDS:-8}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUPYCONV_REQUIRE_GPU=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

python3 -m pytest --collect-only -q -p no:cacheprovider -m gpu tests "$@" >"$OUT/collect.log" 2>&1
collect_rc=$?
if [ "$collect_rc" -ne 0 ]; then
    echo "collection failed (rc=$collect_rc):"; tail -n 20 "$OUT/collect.log"; exit 1
fi
python3 - "$OUT/collect.log" "$SHARDS" "$OUT" <<'EOF'
import collections, sys

log, shards, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
cases = collections.Counter()
for line in open(log):
    line = line.strip()
    if "::" in line and not line.startswith(("=", "<")):
        cases[line.split("[", 1)[0]] += 1  # the test function's id
if not cases:
    sys.exit("no tests collected")
loads, members = [0] * shards, [[] for _ in range(shards)]
for function, count in sorted(cases.items(), key=lambda item: -item[1]):
    k = loads.index(min(loads))
    loads[k] += count
    members[k].append(function)
for k in range(shards):
    with open(f"{out}/shard-{k}.txt", "w") as f:
        f.write("\n".join(members[k]) + "\n")
print(f"{sum(cases.values())} tests in {len(cases)} functions, shards of {loads} cases", file=open(f"{out}/shards.txt", "w"))
EOF
[ $? -eq 0 ] || exit 1
cat "$OUT/shards.txt"

pids=()
for ((k = 0; k < SHARDS; k++)); do
    if [ -s "$OUT/shard-$k.txt" ] && [ "$(head -c1 "$OUT/shard-$k.txt")" != $'\n' ]; then
        mapfile -t ids <"$OUT/shard-$k.txt"
        python3 -m pytest -q -p no:cacheprovider -rf -m gpu "${ids[@]}" "$@" >"$OUT/suite-$k.log" 2>&1 &
        pids+=("$!:$k")
    fi
done
failed=0
for entry in "${pids[@]}"; do
    wait "${entry%%:*}"
    rc=$?
    # pytest's 5 is "no tests ran": a shard that ran nothing fails too
    if [ "$rc" -ne 0 ]; then failed=1; echo "shard ${entry#*:}: rc=$rc"; fi
done
echo "== failures (if any)"
grep -hE "^(FAILED|ERROR)" "$OUT"/suite-*.log | head -40
echo "== shards"
for entry in "${pids[@]}"; do k=${entry#*:}; echo "shard $k: $(tail -n 1 "$OUT/suite-$k.log")"; done
exit $failed
