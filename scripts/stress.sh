#!/usr/bin/env bash
# `make stress`: the long reliability runs, one heavy thing at a time, then a summary.
#
#   1. torture     tests/torture.rs for STRESS_TORTURE_SECS (default 240) with
#                  STRESS_TORTURE_WORKERS clients (default 16): mutual exclusion, fences, fairness;
#                  then at its short length on the other servers of the matrix; then
#                  tests/multi_torture.rs (multi-key locks: random 2-3-key subsets of 5 keys in
#                  random order with BLOCK; no overlap, no stale fence, no timeout, progress)
#                  for STRESS_MULTI_TORTURE_SECS (default 120) with STRESS_MULTI_TORTURE_WORKERS
#                  (default 12), and at its short length on the other servers
#   2. fuzz        the fuzz/ targets (args, record, packed, fence, holders): the seeded random driver
#                  for STRESS_FUZZ_ITERS cases each (default 2000000) or STRESS_FUZZ_DRIVER_SECS
#                  seconds each (default 60), whichever ends first, then libFuzzer through
#                  cargo-fuzz for STRESS_FUZZ_SECS each (default 45; 0 skips it)
#   3. commands    tests/fuzz_commands.rs with STRESS_COMMAND_CASES cases (default 100000),
#                  then tests/restore_fuzz.rs with STRESS_RESTORE_CASES mutated DUMP payloads
#                  (default 200000)
#   4. valgrind    a subset of the integration suite against redis-server under valgrind
#                  (STRESS_VALGRIND=0 skips it), then stress/valgrind-report.sh
#   5. known bugs  the ignored tests of known module bugs, to see whether they still fail
#   6. mutants     cargo-mutants over src/core against the unit tests (STRESS_MUTANTS=0 skips it):
#                  every mutant must be caught, or be listed in .cargo/mutants.toml with a reason
#   7. upgrade     tests/upgrade.rs against the previous release's module (built once by
#                  scripts/previous-module.sh into target/previous/), on each server of the matrix
#   8. soak        tests/soak/ (random commands between restarts, reloads, rewrites, syncs,
#                  failovers and, in Cluster, slot moves, checked against a model) for
#                  STRESS_SOAK_SECS (default 150) each, twice (plain and Cluster) on each
#                  server of the matrix, seed STRESS_SEED
#   9. long tests  integration tests too slow for make test (REDISLOCK_LONG_TESTS=1)
#  10. failover    stress/failover_soak.py: Sentinel over a master and two replicas with AOF,
#                  workers on the Python client writing to a resource that checks fences, faults
#                  kill -9, SIGSTOP/SIGCONT (split brain) and a cut replication link, in legs
#                  fences only, min-replicas-to-write, replicas=1 and both; STRESS_FAILOVER_SECS
#                  of faults (default 480, about 8 minutes in all), up to STRESS_FAILOVER_ROUNDS
#                  of each fault per leg (default 3), on STRESS_FAILOVER_SERVER (default
#                  /usr/bin/redis-server); its table goes into the summary
#
# Logs go to stress/logs/<time>/ (stress/logs/latest points there). Exits non-zero if a step
# found a problem; every step runs regardless. Loopback only; about 28 minutes on 2 cores, plus
# about 20 for the mutants and twice STRESS_SOAK_SECS per server for the soak.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
stamp=$(date +%Y%m%d-%H%M%S)
logs="$root/stress/logs/$stamp"
mkdir -p "$logs"
ln -sfn "$stamp" "$root/stress/logs/latest"

TORTURE_SECS=${STRESS_TORTURE_SECS:-240}
TORTURE_WORKERS=${STRESS_TORTURE_WORKERS:-16}
MULTI_TORTURE_SECS=${STRESS_MULTI_TORTURE_SECS:-120}
MULTI_TORTURE_WORKERS=${STRESS_MULTI_TORTURE_WORKERS:-12}
FUZZ_ITERS=${STRESS_FUZZ_ITERS:-2000000}
FUZZ_DRIVER_SECS=${STRESS_FUZZ_DRIVER_SECS:-60}
FUZZ_SECS=${STRESS_FUZZ_SECS:-45}
FUZZ_TARGETS="args record packed fence holders"
COMMAND_CASES=${STRESS_COMMAND_CASES:-100000}
RESTORE_CASES=${STRESS_RESTORE_CASES:-200000}
VALGRIND=${STRESS_VALGRIND:-1}
MUTANTS=${STRESS_MUTANTS:-1}
SOAK_SECS=${STRESS_SOAK_SECS:-150}
SEED=${STRESS_SEED:-$(date +%s)}
FAILOVER_SECS=${STRESS_FAILOVER_SECS:-480}
FAILOVER_ROUNDS=${STRESS_FAILOVER_ROUNDS:-3}
FAILOVER_SERVER=${STRESS_FAILOVER_SERVER:-$(command -v redis-server)}

declare -a summary=()
failed=0
start_all=$(date +%s)

note() { printf '\n=== %s\n' "$*"; }
result() { summary+=("$1"); }
fail() { failed=1; summary+=("FAILED: $1"); }
elapsed() { echo $(($(date +%s) - $1)); }
# The value of `key=` in the last line of $2 that starts with $1.
field() { grep -h "^$1" "$2" 2>/dev/null | tail -1 | tr ' ' '\n' | sed -n "s/^$3=//p" | head -1; }

note "build"
if ! cargo build --release >"$logs/build.log" 2>&1; then
    tail -20 "$logs/build.log"
    echo "stress: the module does not build" >&2
    exit 1
fi

# 1. Long torture -------------------------------------------------------------------------
note "torture: ${TORTURE_SECS}s, ${TORTURE_WORKERS} workers, seed $SEED"
t0=$(date +%s)
REDISLOCK_STRESS_SECS=$TORTURE_SECS REDISLOCK_STRESS_WORKERS=$TORTURE_WORKERS \
    REDISLOCK_STRESS_SEED=$SEED \
    cargo test --release --test torture -- --nocapture >"$logs/torture.log" 2>&1
rc=$?
grep -h "^TORTURE-SUMMARY" "$logs/torture.log" || tail -30 "$logs/torture.log"
line=$(grep -h "^TORTURE-SUMMARY" "$logs/torture.log" | tail -1)
if [ $rc -eq 0 ]; then
    result "torture: $(field TORTURE-SUMMARY "$logs/torture.log" grants) grants ($(field TORTURE-SUMMARY "$logs/torture.log" blocked_grants) after waiting), $(field TORTURE-SUMMARY "$logs/torture.log" overruns) TTL overruns, $(field TORTURE-SUMMARY "$logs/torture.log" stale_rejected) stale writes refused, fairness max/min $(field TORTURE-SUMMARY "$logs/torture.log" fairness), violations $(field TORTURE-SUMMARY "$logs/torture.log" violations) [$(elapsed $t0)s]"
else
    fail "torture (exit $rc, violations ${line##*violations=}); see $logs/torture.log"
fi

# 1b. The torture test, at its make-test length, on the other servers of the matrix (make test
# runs it on the first only).
n=0
for server in $(scripts/servers.sh --others 2>/dev/null); do
    label=$("$server" --version | cut -d' ' -f1-3)
    n=$((n + 1))
    log="$logs/torture-server-$n.log"
    t0=$(date +%s)
    if REDIS_SERVER=$server cargo test --release --test torture -- --nocapture >"$log" 2>&1; then
        result "torture on $label: violations $(field TORTURE-SUMMARY "$log" violations) [$(elapsed $t0)s]"
    else
        fail "torture on $label; see $log"
    fi
done

# 1c. Multi-key deadlock torture: tests/multi_torture.rs long on the first server, at its
# make-test length on the others.
note "multi-key torture: ${MULTI_TORTURE_SECS}s, ${MULTI_TORTURE_WORKERS} workers, seed $SEED"
t0=$(date +%s)
log="$logs/multi-torture.log"
if REDISLOCK_MULTI_STRESS_SECS=$MULTI_TORTURE_SECS REDISLOCK_MULTI_STRESS_WORKERS=$MULTI_TORTURE_WORKERS \
    REDISLOCK_MULTI_STRESS_SEED=$SEED \
    cargo test --release --test multi_torture -- --nocapture >"$log" 2>&1; then
    result "multi-key torture: $(field MULTI-TORTURE-SUMMARY "$log" multi_grants) multi-key grants, $(field MULTI-TORTURE-SUMMARY "$log" single_grants) single, fewest per worker $(field MULTI-TORTURE-SUMMARY "$log" min_worker), violations $(field MULTI-TORTURE-SUMMARY "$log" violations) [$(elapsed $t0)s]"
else
    fail "multi-key torture; see $log"
fi
n=0
for server in $(scripts/servers.sh --others 2>/dev/null); do
    label=$("$server" --version | cut -d' ' -f1-3)
    n=$((n + 1))
    log="$logs/multi-torture-server-$n.log"
    t0=$(date +%s)
    if REDIS_SERVER=$server cargo test --release --test multi_torture -- --nocapture >"$log" 2>&1; then
        result "multi-key torture on $label: violations $(field MULTI-TORTURE-SUMMARY "$log" violations) [$(elapsed $t0)s]"
    else
        fail "multi-key torture on $label; see $log"
    fi
done

# 2. Fuzz targets -------------------------------------------------------------------------
note "fuzz targets: random driver, $FUZZ_ITERS cases or ${FUZZ_DRIVER_SECS}s each"
t0=$(date +%s)
if ! (cd fuzz && cargo build --release >"$logs/fuzz-build.log" 2>&1); then
    tail -20 "$logs/fuzz-build.log"
    fail "fuzz crate does not build; see $logs/fuzz-build.log"
else
    for t in $FUZZ_TARGETS; do
        # The driver stops itself between cases; the timeout catches a case that never ends.
        timeout --kill-after=10 $((FUZZ_DRIVER_SECS + 120)) fuzz/target/release/$t \
            --iterations "$FUZZ_ITERS" --secs "$FUZZ_DRIVER_SECS" --seed "$SEED" \
            >"$logs/fuzz-driver-$t.log" 2>&1
        rc=$?
        grep -h "^FUZZ-DRIVER-SUMMARY" "$logs/fuzz-driver-$t.log" || tail -5 "$logs/fuzz-driver-$t.log"
        cases=$(field FUZZ-DRIVER-SUMMARY "$logs/fuzz-driver-$t.log" cases)
        if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
            fail "fuzz driver $t: a case did not end (timed out); see $logs/fuzz-driver-$t.log"
        elif [ $rc -eq 0 ]; then
            result "fuzz driver $t: ${cases:-0} cases, 0 failures"
        else
            fail "fuzz driver $t: $(field FUZZ-DRIVER-SUMMARY "$logs/fuzz-driver-$t.log" failures) failing inputs; see $logs/fuzz-driver-$t.log"
        fi
    done
fi
if [ "$FUZZ_SECS" != 0 ]; then
    if ! cargo fuzz --version >/dev/null 2>&1; then
        note "installing cargo-fuzz (cargo install cargo-fuzz --locked)"
        cargo install cargo-fuzz --locked >"$logs/cargo-fuzz-install.log" 2>&1 ||
            echo "stress: could not install cargo-fuzz; libFuzzer runs skipped" >&2
    fi
    if cargo fuzz --version >/dev/null 2>&1; then
        note "fuzz targets: libFuzzer, ${FUZZ_SECS}s each"
        for t in $FUZZ_TARGETS; do
            mkdir -p "fuzz/corpus/$t"
            # RUSTC_BOOTSTRAP lets a stable toolchain take cargo-fuzz's -Z flags. -timeout: an
            # input that runs for seconds is a finding, and keeps the run within its time.
            RUSTC_BOOTSTRAP=1 cargo fuzz run --fuzz-dir fuzz "$t" -- \
                -max_total_time="$FUZZ_SECS" -timeout=10 -seed="$SEED" -print_final_stats=1 \
                >"$logs/libfuzzer-$t.log" 2>&1
            rc=$?
            runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$logs/libfuzzer-$t.log" | tail -1)
            if [ $rc -eq 0 ]; then
                result "libFuzzer $t: ${runs:-?} runs in ${FUZZ_SECS}s, no crash"
                echo "libFuzzer $t: ${runs:-?} runs"
            else
                grep -hE "panicked|ERROR: libFuzzer|Test unit written|SUMMARY" "$logs/libfuzzer-$t.log" | head -5
                fail "libFuzzer $t (exit $rc); see $logs/libfuzzer-$t.log and fuzz/artifacts/$t"
            fi
        done
    else
        result "libFuzzer: skipped (no cargo-fuzz)"
    fi
fi
summary+=("fuzz total [$(elapsed $t0)s]")

# 3. Command fuzzer -----------------------------------------------------------------------
note "command fuzzer: $COMMAND_CASES cases, seed $SEED"
t0=$(date +%s)
REDISLOCK_FUZZ_CASES=$COMMAND_CASES REDISLOCK_FUZZ_SEED=$SEED \
    cargo test --release --test suite fuzz_commands:: -- --nocapture >"$logs/fuzz-commands.log" 2>&1
rc=$?
grep -h "^FUZZ-COMMANDS-SUMMARY" "$logs/fuzz-commands.log" || tail -30 "$logs/fuzz-commands.log"
if [ $rc -eq 0 ]; then
    result "command fuzzer: $(field FUZZ-COMMANDS-SUMMARY "$logs/fuzz-commands.log" cases) cases, 0 problems [$(elapsed $t0)s]"
else
    fail "command fuzzer (exit $rc); see $logs/fuzz-commands.log"
fi

note "RESTORE fuzzer: $RESTORE_CASES mutated payloads, seed $SEED"
t0=$(date +%s)
REDISLOCK_RESTORE_FUZZ_CASES=$RESTORE_CASES REDISLOCK_RESTORE_FUZZ_SEED=$SEED \
    cargo test --release --test suite restore_fuzz:: -- --nocapture >"$logs/restore-fuzz.log" 2>&1
rc=$?
grep -h "^RESTORE-FUZZ-SUMMARY" "$logs/restore-fuzz.log" || tail -30 "$logs/restore-fuzz.log"
if [ $rc -eq 0 ]; then
    result "RESTORE fuzzer: $(field RESTORE-FUZZ-SUMMARY "$logs/restore-fuzz.log" cases) payloads ($(field RESTORE-FUZZ-SUMMARY "$logs/restore-fuzz.log" accepted) accepted), 0 problems [$(elapsed $t0)s]"
else
    fail "RESTORE fuzzer (exit $rc); see $logs/restore-fuzz.log"
fi

# 4. Valgrind -----------------------------------------------------------------------------
if [ "$VALGRIND" != 0 ]; then
    if ! command -v valgrind >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        note "installing valgrind"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >"$logs/valgrind-install.log" 2>&1 ||
            { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind; } >>"$logs/valgrind-install.log" 2>&1
    fi
    if command -v valgrind >/dev/null 2>&1; then
        note "valgrind: integration subset against redis-server under memcheck"
        t0=$(date +%s)
        vgdir="$logs/valgrind"
        mkdir -p "$vgdir"
        REDISLOCK_VALGRIND_DIR="$vgdir" REDIS_SERVER="$root/stress/valgrind-redis.sh" \
            REDISLOCK_TEST_TIME_SCALE=20 REDISLOCK_GRACEFUL_STOP=1 \
            REDISLOCK_LIFECYCLE_ROUNDS=10 REDISLOCK_FUZZ_CASES=2000 REDISLOCK_FUZZ_SEED=$SEED \
            cargo test --release --no-fail-fast --test suite -- \
            blocking:: commands:: persistence:: acl:: faults:: fuzz_commands:: \
            >"$logs/valgrind-tests.log" 2>&1
        rc=$?
        passed=$(sed -n 's/^test result.* \([0-9]*\) passed.*/\1/p' "$logs/valgrind-tests.log" | awk '{s += $1} END {print s + 0}')
        nfail=$(sed -n 's/^test result.* \([0-9]*\) failed.*/\1/p' "$logs/valgrind-tests.log" | awk '{s += $1} END {print s + 0}')
        stress/valgrind-report.sh "$vgdir" >"$logs/valgrind-report.txt" 2>&1
        vrc=$?
        tail -1 "$logs/valgrind-report.txt"
        line=$(tail -1 "$logs/valgrind-report.txt")
        if [ $vrc -eq 0 ]; then
            result "valgrind: ${passed:-0} tests passed, ${nfail:-0} failed under valgrind; ${line#VALGRIND-SUMMARY } [$(elapsed $t0)s]"
        else
            fail "valgrind: ${line#VALGRIND-SUMMARY }; see $logs/valgrind-report.txt"
        fi
        if [ $rc -ne 0 ]; then
            grep -h "^test .*FAILED" "$logs/valgrind-tests.log" | head
            fail "valgrind: ${nfail:-?} integration tests failed under valgrind (slow server?); see $logs/valgrind-tests.log"
        fi
    else
        result "valgrind: skipped (not installed)"
    fi
fi

# 5. Known module bugs --------------------------------------------------------------------
note "tests of known module bugs (#[ignore = \"module bug: …\"])"
cargo test --release --no-fail-fast --test torture --test suite -- --ignored \
    >"$logs/known-bugs.log" 2>&1
still=$(grep -hE "^test .* FAILED$" "$logs/known-bugs.log" | sed 's/^test \(.*\) \.\.\. FAILED$/\1/' | paste -sd' ')
fixed=$(grep -hE "^test .* ok$" "$logs/known-bugs.log" | sed 's/^test \(.*\) \.\.\. ok$/\1/' | paste -sd' ')
if grep -q "^test result" "$logs/known-bugs.log"; then
    result "known module bugs still failing: ${still:-none}"
    [ -n "$fixed" ] && result "ignored tests that now pass (un-ignore them): $fixed"
else
    tail -5 "$logs/known-bugs.log"
    fail "known-bug tests did not run; see $logs/known-bugs.log"
fi

# 6. Mutants of the core -------------------------------------------------------------------
if [ "$MUTANTS" != 0 ]; then
    if ! cargo mutants --version >/dev/null 2>&1; then
        note "installing cargo-mutants (cargo install cargo-mutants --locked)"
        cargo install cargo-mutants --locked >"$logs/cargo-mutants-install.log" 2>&1 ||
            echo "stress: could not install cargo-mutants; mutants skipped" >&2
    fi
    if cargo mutants --version >/dev/null 2>&1; then
        note "mutants: src/core against the unit tests (the core builds without the module)"
        t0=$(date +%s)
        cargo mutants --no-default-features -f 'src/core/**' -j1 -o "$logs" -- --lib \
            >"$logs/mutants.log" 2>&1
        rc=$?
        tail -1 "$logs/mutants.log"
        out="$logs/mutants.out"
        count() { [ -f "$out/$1.txt" ] && grep -c . "$out/$1.txt" || echo 0; }
        line="$(count caught) caught, $(count missed) missed, $(count timeout) timed out, $(count unviable) unviable"
        if [ $rc -eq 0 ]; then
            result "mutants: $line [$(elapsed $t0)s]"
        else
            sed 's/^/  missed: /' "$out/missed.txt" 2>/dev/null | head -20
            fail "mutants: $line; see $out/missed.txt"
        fi
    else
        result "mutants: skipped (no cargo-mutants)"
    fi
fi

# 7. Upgrade from the previous release ------------------------------------------------------
note "upgrade: tests/upgrade.rs against the previous release's module, on each server"
if previous=$(scripts/previous-module.sh 2>"$logs/previous-module.log"); then
    # Without the other servers (no target/pyenv), the first one alone.
    servers=$(scripts/servers.sh 2>/dev/null) || servers=$(command -v redis-server)
    n=0
    for server in $servers; do
        label=$("$server" --version | cut -d' ' -f1-3)
        n=$((n + 1))
        log="$logs/upgrade-server-$n.log"
        t0=$(date +%s)
        if REDIS_SERVER=$server REDISLOCK_PREVIOUS_MODULE=$previous \
            cargo test --release --test suite upgrade:: >"$log" 2>&1; then
            passed=$(sed -n 's/^test result: ok\. \([0-9]*\) passed.*/\1/p' "$log")
            result "upgrade on $label: ${passed:-0} tests passed [$(elapsed $t0)s]"
        else
            grep -h "^test .*FAILED" "$log" | head
            fail "upgrade on $label; see $log"
        fi
    done
else
    tail -20 "$logs/previous-module.log"
    fail "upgrade: the previous release's module does not build; see $logs/previous-module.log"
fi

# 8. Operations soak -----------------------------------------------------------------------
note "soak: ${SOAK_SECS}s on each server, seed $SEED"
servers=$(scripts/servers.sh 2>/dev/null) || servers=$(command -v redis-server)
n=0
for server in $servers; do
    label=$("$server" --version | cut -d' ' -f1-3)
    n=$((n + 1))
    for soak in random_commands_and_operations random_commands_while_slots_move; do
        log="$logs/soak-server-$n-$soak.log"
        where=$([ $soak = random_commands_while_slots_move ] && echo " in Cluster" || true)
        t0=$(date +%s)
        # The soak stops itself after SOAK_SECS; the timeout catches a step that never ends.
        REDIS_SERVER=$server SEED=$SEED SOAK_SECS=$SOAK_SECS REDISLOCK_LONG_TESTS=1 \
            timeout --kill-after=10 $((SOAK_SECS + 300)) \
            cargo test --release --test suite "soak::$soak" -- --exact --nocapture >"$log" 2>&1
        rc=$?
        grep -h "^SOAK-SUMMARY" "$log" || grep -h -A3 "soak failed" "$log" || tail -20 "$log"
        if [ $rc -eq 0 ]; then
            result "soak$where on $label: $(field SOAK-SUMMARY "$log" steps) steps, $(field SOAK-SUMMARY "$log" operations) operations ($(field SOAK-SUMMARY "$log" restarts) restarts or failovers, $(field SOAK-SUMMARY "$log" moves) slot moves), $(field SOAK-SUMMARY "$log" grants) grants, $(field SOAK-SUMMARY "$log" handoffs) handoffs, 0 problems [$(elapsed $t0)s]"
        else
            fail "soak$where on $label (exit $rc); see $log"
        fi
    done
done

# 9. Long tests ----------------------------------------------------------------------------
# Tests too slow for make test (REDISLOCK_LONG_TESTS): a lock migrating between Cluster nodes
# many config epochs apart, on the first server of the matrix.
note "long tests"
t0=$(date +%s)
if REDISLOCK_LONG_TESTS=1 cargo test --release --test suite resharding:: >"$logs/long-tests.log" 2>&1; then
    result "long tests: $(grep -h '^test result' "$logs/long-tests.log" | tail -1) [$(elapsed $t0)s]"
else
    tail -20 "$logs/long-tests.log"
    fail "long tests; see $logs/long-tests.log"
fi

# 10. Failover soak -------------------------------------------------------------------------
note "failover soak: Sentinel, ${FAILOVER_SECS}s of faults, up to $FAILOVER_ROUNDS rounds of each, seed $SEED"
t0=$(date +%s)
log="$logs/failover.log"
if ! scripts/clients.sh >"$logs/failover-clients.log" 2>&1; then
    tail -5 "$logs/failover-clients.log"
    fail "failover soak: the Python client's libraries could not be installed; see $logs/failover-clients.log"
else
    # The soak stops itself after its time; the timeout catches a wait that never ends.
    timeout --kill-after=10 $((FAILOVER_SECS + 300)) target/pyenv/bin/python stress/failover_soak.py \
        --server "$FAILOVER_SERVER" --secs "$FAILOVER_SECS" --rounds "$FAILOVER_ROUNDS" --seed "$SEED" \
        --logs "$logs/failover" >"$log" 2>&1
    rc=$?
    table=$(sed -n '/^| leg/,/^$/p' "$log")
    echo "$table"
    grep -h "^VIOLATION\|^FAILOVER-SUMMARY" "$log" || tail -20 "$log"
    label=$("$FAILOVER_SERVER" --version | cut -d' ' -f1-3)
    if [ $rc -eq 0 ]; then
        result "failover soak on $label: $(field FAILOVER-SUMMARY "$log" failovers) failovers, $(field FAILOVER-SUMMARY "$log" grants) grants, $(field FAILOVER-SUMMARY "$log" lost) acknowledged grants lost (none where replicas=1 must keep them), 0 stale writes accepted [$(elapsed $t0)s]:"
    else
        fail "failover soak on $label (exit $rc): $(grep -h "^VIOLATION" "$log" | paste -sd';')$(grep -h "harness failure" "$log"); see $log [$(elapsed $t0)s]"
    fi
    while IFS= read -r line; do
        [ -n "$line" ] && summary+=("  $line")
    done <<<"$table"
fi

note "stress summary ($(elapsed $start_all)s, seed $SEED, logs in $logs)"
for s in "${summary[@]}"; do
    echo "  $s"
done
exit $failed
