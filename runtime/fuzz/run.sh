#!/usr/bin/env bash
# Fuzz each target named on the command line for FUZZ_SECONDS; write $B/summary.json with
# seconds, executions, corpus size, crashes (inputs left in $B/artifacts/<target>/) and
# sanitizer reports (AddressSanitizer / UndefinedBehaviorSanitizer / libFuzzer deadly
# signals, leaks, timeouts, out-of-memory) per target. Exit 1 if any target found one.
set -u
cd "$(dirname "$0")"
: "${FUZZ_SECONDS:=600}" "${B:=../build/fuzz}"
status=0
entries=()
for t in "$@"; do
    mkdir -p "$B/corpus/$t" "$B/artifacts/$t" "$B/seeds/$t"
    log="$B/$t.log"
    seeds=("corpus/$t" "$B/seeds/$t")
    [ "$t" = trace ] && seeds+=("../../tests/data" "../tests/fuzz/trace")
    [ "$t" = manifest ] && seeds+=("../tests/fuzz/manifest")
    existing=()
    for s in "${seeds[@]}"; do [ -d "$s" ] && existing+=("$s"); done
    start=$(date +%s)
    FLASHRT_FUZZ_POLICY_SO="$(cd .. && pwd)/build/policies/admitall.so" \
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        "$B/fuzz_$t" -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 \
        -max_len=65536 -dict="$t.dict" -print_final_stats=1 \
        -artifact_prefix="$B/artifacts/$t/" "$B/corpus/$t" "${existing[@]}" > "$log" 2>&1
    rc=$?
    seconds=$(( $(date +%s) - start ))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    reports=$(grep -cE "ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|SUMMARY: UndefinedBehaviorSanitizer|ALARM: working on the last Unit" "$log")
    crashes=$(find "$B/artifacts/$t" -type f | wc -l)
    corpus=$(find "$B/corpus/$t" -type f | wc -l)
    [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ] || [ "$reports" -ne 0 ] && status=1
    echo "fuzz_$t: ${seconds}s, ${execs:-0} executions, corpus $corpus, crashes $crashes, sanitizer reports $reports (exit $rc; log $log)"
    entries+=("\"$t\": {\"seconds\": $seconds, \"executions\": ${execs:-0}, \"corpus\": $corpus, \"crashes\": $crashes, \"sanitizer_reports\": $reports, \"exit_code\": $rc}")
done
( IFS=,; echo "{${entries[*]}}" ) > "$B/summary.json"
exit $status
