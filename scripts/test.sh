#!/usr/bin/env bash
# Kraken's one test command: installs the real test peers (cached under ~/.cache/kraken-testenv),
# then checks formatting and lints and runs every test in the workspace — unit tests, the
# provider-level tests against real provider binaries, and the end-to-end tests against a real
# kube-apiserver + etcd, moto and the hashicorp/aws provider — and every benchmark once at a tiny
# size (KRAKEN_BENCH_SMOKE=1), so a broken benchmark fails.
#
# The hashicorp/aws build is the long pole of a cold run (about 23 minutes of 2 cores cold), so it
# starts first, in the background, and everything up to compiling the tests runs beside it at a
# lower priority; the tests run once it is there. A warm run finds everything built.
set -euo pipefail
cd "$(dirname "$0")/.."
# An exported KRAKEN_UPDATE_GOLDEN turns the golden tests into writers that always pass.
unset KRAKEN_UPDATE_GOLDEN

step() { printf '\n== %s (%s)\n' "$*" "$(date -u +%H:%M:%S)" >&2; }

cache=${KRAKEN_TESTENV_DIR:-$HOME/.cache/kraken-testenv}
mkdir -p "$cache/logs"
aws_log=$cache/logs/test-sh-aws-build.log
step "hashicorp/aws test peer, in the background (scripts/aws-schema.sh build; log $aws_log)"
scripts/aws-schema.sh build >"$aws_log" 2>&1 &
aws_pid=$!
trap 'kill "$aws_pid" 2>/dev/null || true' EXIT
# Everything else yields to it: it is the critical path.
renice -n 10 -p $$ >/dev/null || true

step "test peers but aws (scripts/testenv.sh install --only base)"
scripts/testenv.sh install --only base

step "fixture provider (go vet, go test)"
(cd tests/fixtures/terraform-provider-fixture && go vet ./... && go test ./...)

step "generated files are current (scripts/generate.sh --check)"
scripts/generate.sh --check

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "compile the tests and the benchmarks"
cargo test --workspace --all-targets --locked --no-run

step "waiting for the hashicorp/aws build"
if ! wait "$aws_pid"; then
	tail -n 30 "$aws_log" >&2
	echo "building the hashicorp/aws test peer failed; log: $aws_log" >&2
	exit 1
fi
trap - EXIT
tail -n 3 "$aws_log" >&2

step "every test peer (scripts/testenv.sh install)"
scripts/testenv.sh install

step "cargo test and a smoke run of every bench, side by side (scripts/lib/run_tests.py)"
# What `cargo test --workspace` runs, several binaries at once: most end-to-end tests wait on a
# control plane or a provider, so one binary at a time left the cores idle. The benches run
# among them, each once at a tiny size (what scripts/bench-smoke.sh does on its own).
python3 scripts/lib/run_tests.py --log-dir "${CARGO_TARGET_DIR:-target}/test-logs" -- \
	--workspace --all-targets --locked
