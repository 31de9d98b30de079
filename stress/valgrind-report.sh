#!/usr/bin/env bash
# Reads the valgrind reports that stress/valgrind-redis.sh wrote (one per redis-server process)
# and prints what is attributable to the module: "definitely lost" blocks and memory errors
# (invalid reads/writes/frees, uninitialised values, …) with a libredislock.so frame in their
# stack. Everything else is counted as the server's own. Exits 1 if the module has any.
#
#   stress/valgrind-report.sh DIR
set -euo pipefail
dir=${1:?usage: valgrind-report.sh DIR}
shopt -s nullglob
logs=("$dir"/vg-*.log)
if ((${#logs[@]} == 0)); then
    echo "VALGRIND-SUMMARY servers=0 (no reports in $dir)"
    exit 1
fi
awk '
function flush() {
    if (kind == "") return
    if (module) {
        if (kind == "leak") { mod_leak_blocks += blocks; mod_leak_bytes += bytes; mod_leak_records++ }
        else { mod_errors++ }
        print "---- " FILENAME ": " head
        print body
    } else if (kind == "leak") { other_leak_blocks += blocks }
    else { other_errors++ }
    kind = ""; module = 0; body = ""
}
FNR == 1 { flush(); servers++ }
/ERROR SUMMARY:/ { complete++ }
{
    line = $0
    sub(/^==[0-9]+== ?/, "", line)
}
line == "" { flush(); next }
line ~ /are definitely lost in loss record/ {
    flush(); kind = "leak"; head = line
    b = line; sub(/ \(.*/, "", b); gsub(/,/, "", b); split(b, w, " "); bytes = w[1]
    n = line; sub(/.* bytes in /, "", n); gsub(/,/, "", n); split(n, w2, " "); blocks = w2[1]
    next
}
line ~ /^(Invalid (read|write|free)|Conditional jump|Use of uninitialised|Mismatched free|Syscall param|Source and destination overlap|Argument .* of function)/ {
    flush(); kind = "error"; head = line; next
}
kind != "" {
    body = body "    " line "\n"
    if (line ~ /libredislock\.so|redislock::/) module = 1
}
END {
    flush()
    printf "VALGRIND-SUMMARY servers=%d reports_complete=%d module_definitely_lost_blocks=%d module_definitely_lost_bytes=%d module_leak_records=%d module_memory_errors=%d server_definitely_lost_blocks=%d server_memory_errors=%d\n", \
        servers, complete, mod_leak_blocks, mod_leak_bytes, mod_leak_records, mod_errors, other_leak_blocks, other_errors
    exit (mod_leak_records + mod_errors > 0) ? 1 : 0
}
' "${logs[@]}"
