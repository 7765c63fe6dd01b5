#!/usr/bin/env bash
# scripts/bench-smoke.sh — every benchmark once at a tiny size (KRAKEN_BENCH_SMOKE=1), so a
# broken bench fails CI: each one runs every code path it has (the Terraform side of every
# comparison included) against the real test peers, and exits non-zero when anything in it
# fails. Prints how long each took; stops at the first failure with its output.
#
#   scripts/bench-smoke.sh                 # every bench, the tests' build (cargo test --bench)
#   scripts/bench-smoke.sh plan convert    # some of them
#   scripts/bench-smoke.sh --release       # through `cargo bench` (the bench profile)
#
# The tests' build by default: CI has compiled the workspace's dependencies in that profile
# already, so only the bench binaries are new, where the bench profile would be a second,
# optimised build of everything (aws-sdk-ec2 and kube included). A smoke run measures nothing,
# so an unoptimised operator is fine. Needs the test peers (scripts/testenv.sh install,
# hashicorp/aws included).
set -euo pipefail
cd "$(dirname "$0")/.."
LOG_TAG=bench-smoke
# shellcheck source=lib/common.sh
. scripts/lib/common.sh

ALL=(provider codegen fetch install hub plan convert operator ec2 aws shards)
profile=test
benches=()
for arg in "$@"; do
	case $arg in
	--release) profile=bench ;;
	-h | --help)
		sed -n '2,15p' "$0"
		exit 0
		;;
	-*) die "unknown option $arg" ;;
	*)
		[[ " ${ALL[*]} " == *" $arg "* ]] || die "unknown bench $arg (${ALL[*]})"
		benches+=("$arg")
		;;
	esac
done
((${#benches[@]})) || benches=("${ALL[@]}")

if [[ $profile == test ]]; then
	run=(cargo test --locked -p kraken-tests --bench)
	build=(cargo test --locked -p kraken-tests --benches --no-run)
else
	run=(cargo bench --locked -p kraken-tests --bench)
	build=(cargo bench --locked -p kraken-tests --benches --no-run)
fi

export KRAKEN_BENCH_SMOKE=1
logs=${KRAKEN_BENCH_SMOKE_LOGS:-$(mktemp -d -t kraken-bench-smoke-XXXXXX)}
mkdir -p "$logs"
start=$(date +%s)
log "building the benches (${build[*]})"
"${build[@]}" >"$logs/build.log" 2>&1 || {
	tail -n 60 "$logs/build.log" >&2
	die "building the benches failed; log $logs/build.log"
}
log "built in $(($(date +%s) - start)) s; logs in $logs"

total=0
for bench in "${benches[@]}"; do
	t0=$(date +%s)
	run_logged "$logs/$bench.log" "${run[@]}" "$bench"
	took=$(($(date +%s) - t0))
	total=$((total + took))
	if ((RUN_RC != 0)); then
		tail -n 80 "$logs/$bench.log" >&2
		die "$bench failed (exit $RUN_RC) after ${took} s; log $logs/$bench.log"
	fi
	printf '%s: %-9s %4d s\n' "$LOG_TAG" "$bench" "$took" >&2
done
log "all ${#benches[@]} benches passed in ${total} s (building aside)"
