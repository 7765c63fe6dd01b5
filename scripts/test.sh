#!/usr/bin/env bash
# Kraken's one test command: installs the real test peers (cached under ~/.cache/kraken-testenv),
# then checks formatting and lints and runs every test in the workspace — unit tests, the
# provider-level tests against real provider binaries, and the end-to-end tests against a real
# kube-apiserver + etcd.
set -euo pipefail
cd "$(dirname "$0")/.."
# An exported KRAKEN_UPDATE_GOLDEN turns the golden tests into writers that always pass.
unset KRAKEN_UPDATE_GOLDEN

step() { printf '\n== %s\n' "$*" >&2; }

step "test peers (scripts/testenv.sh install)"
scripts/testenv.sh install

step "fixture provider (go vet, go test)"
(cd tests/fixtures/terraform-provider-fixture && go vet ./... && go test ./...)

step "generated files are current (scripts/generate.sh --check)"
scripts/generate.sh --check

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo test"
cargo test --workspace --locked --no-fail-fast
