#!/usr/bin/env bash
# A stand-in for redis-server that runs it under valgrind memcheck: point the test harness at it
# with REDIS_SERVER=stress/valgrind-redis.sh (scripts/stress.sh does). One report per server
# process goes to $REDISLOCK_VALGRIND_DIR/vg-<pid>.log; stress/valgrind-report.sh reads them.
#
# redis-server links jemalloc (Debian's, as libjemalloc.so.2); --soname-synonyms makes valgrind
# replace its malloc family, so that the module's allocations (Rust's global allocator ->
# RedisModule_Alloc -> zmalloc -> malloc) are tracked. Forked children (BGSAVE, AOF rewrite)
# are not reported: their memory is the parent's. There is no --error-exitcode: a forked child
# exits through valgrind too, and a non-zero code from it would fail the BGSAVE or AOF rewrite;
# the reports are judged from the logs instead.
set -euo pipefail
dir=${REDISLOCK_VALGRIND_DIR:?set REDISLOCK_VALGRIND_DIR to a directory for the reports}
mkdir -p "$dir"
exec valgrind \
    --tool=memcheck \
    --leak-check=full \
    --show-leak-kinds=definite \
    --errors-for-leak-kinds=definite \
    --child-silent-after-fork=yes \
    --soname-synonyms=somalloc=libjemalloc.so* \
    --num-callers=40 \
    --suppressions="$(dirname "$(readlink -f "$0")")/valgrind.sup" \
    --log-file="$dir/vg-%p.log" \
    "${REDISLOCK_VALGRIND_SERVER:-redis-server}" "$@"
