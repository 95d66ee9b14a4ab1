#!/usr/bin/env bash
# On a machine with a CUDA GPU and compute-sanitizer: every kernel the library
# launches (scripts/sanitize.py chooses the calls) under memcheck, racecheck,
# initcheck and synccheck, and one summary line per tool.
# SHARDS select processes, then each tool's runs in parts (racecheck, the
# slowest, in RACE_PARTS), all side by side on the one GPU; NVRTC compiles are
# cached on disk by CuPy.  SELECTED=DIR reuses the selected-*.json of an
# earlier run instead of selecting again.  memcheck and initcheck run the
# default routes' forward and backward calls five times (remembered calls
# record, check and replay), racecheck and synccheck once (the same kernels).
# Logs go to $OUT (default ./sanitize-logs).  Exit status 1 if any tool
# reports an error or a part does not finish.
set -uo pipefail
OUT=${OUT:-sanitize-logs}
SHARDS=${SHARDS:-8}
PARTS=${PARTS:-2}
RACE_PARTS=${RACE_PARTS:-6}
TOOLS=${TOOLS:-"memcheck racecheck initcheck synccheck"}
TIMEOUT=${TIMEOUT:-420}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TQDM_DISABLE=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
here=$(dirname "$0")
start=$(date +%s)

if [ -n "${SELECTED:-}" ]; then
    cp "$SELECTED"/selected-*.json "$OUT"/
else
    for ((k = 0; k < SHARDS; k++)); do
        python3 "$here/sanitize.py" select --shard "$k/$SHARDS" --out "$OUT/selected-$k.json" >"$OUT/select-$k.log" 2>&1 &
    done
    wait
    grep -h "^shard" "$OUT"/select-*.log
fi
python3 "$here/sanitize.py" coverage "$OUT"/selected-*.json >"$OUT/coverage.txt" 2>&1
head -n 2 "$OUT/coverage.txt"
echo "$(grep -c ^FAILED "$OUT/coverage.txt") pool calls failed natively (listed in coverage.txt)"
echo "select: $(( $(date +%s) - start )) s"

parts_of() { if [ "$1" = racecheck ]; then echo "$RACE_PARTS"; else echo "$PARTS"; fi; }
repeats_of() { case "$1" in memcheck | initcheck) echo 5 ;; *) echo 1 ;; esac; }
pids=()
for tool in $TOOLS; do
    n=$(parts_of "$tool")
    for ((k = 0; k < n; k++)); do
        timeout "$TIMEOUT" compute-sanitizer --tool "$tool" --print-limit 20 --error-exitcode 99 \
            python3 "$here/sanitize.py" run "$OUT"/selected-*.json --part "$k/$n" --repeats "$(repeats_of "$tool")" \
            >"$OUT/$tool-$k.log" 2>&1 &
        pids+=("$!:$tool:$k")
    done
done
status=0
declare -A rcs
for entry in "${pids[@]}"; do
    wait "${entry%%:*}"
    rcs[${entry#*:}]=$?
done
echo "sanitizers: $(( $(date +%s) - start )) s"
for tool in $TOOLS; do
    errors=0 warnings=0 note="" n=$(parts_of "$tool")
    for ((k = 0; k < n; k++)); do
        log="$OUT/$tool-$k.log" rc=${rcs[$tool:$k]}
        # racecheck ends with "RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)", the others with "ERROR SUMMARY: N errors"
        found=$(grep -oE "ERROR SUMMARY: [0-9]+ error|\([0-9]+ errors, [0-9]+ warnings\)" "$log" | grep -oE "[0-9]+" | head -n 1)
        warned=$(grep -oE "[0-9]+ warnings\)" "$log" | grep -oE "[0-9]+" | tail -n 1)
        warnings=$(( ${warnings:-0} + ${warned:-0} ))
        if [ -z "$found" ] || ! grep -q "part $k/$n: " "$log"; then note="$note part $k/$n did not finish (rc=$rc);"; status=1; fi
        errors=$(( errors + ${found:-0} ))
    done
    [ "$errors" -ne 0 ] && status=1
    extra=""; [ "$tool" = racecheck ] && extra=" ($warnings warnings)"
    echo "$tool: $errors errors$extra, $(head -n 1 "$OUT/coverage.txt" | cut -d';' -f1)${note:+ -$note}"
done
exit $status
