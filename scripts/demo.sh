#!/usr/bin/env bash
# Kraken's demo, on a local control plane, in one command.
#
# Usage: scripts/demo.sh         install what is missing, start etcd + kube-apiserver and the
#                                operator, apply examples/, wait until everything is Ready, print
#                                `kubectl get kraken` and what to try next, then keep running
#                                until Ctrl-C, and clean up
#        scripts/demo.sh up      the same control plane and operator, left running in the
#                                background for your own experiments (examples/ not applied);
#                                prints the kubeconfig path last
#        scripts/demo.sh down    stop what `up` (or an interrupted demo) started
#
# Everything lives in ~/.cache/kraken-demo (KRAKEN_DEMO_DIR): the control plane's run directory,
# the plugin cache Providers install into, and the logs of the operator and of moto (the EC2
# emulator examples/20-ec2.yaml talks to, on 127.0.0.1:5000 or KRAKEN_DEMO_MOTO_PORT). The first
# run builds, side by side, the test peers the demo needs (scripts/testenv.sh install --only demo)
# and Kraken in the quick-to-compile demo profile (cargo build --profile demo, log in
# ~/.cache/kraken-demo/cargo-build.log); see README.md for how long that takes. Later runs take
# seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

demo_dir=${KRAKEN_DEMO_DIR:-$HOME/.cache/kraken-demo}
run_dir=$demo_dir/run
kubeconfig=$run_dir/kubeconfig
log=$demo_dir/operator.log
pidfile=$demo_dir/operator.pid
moto_pidfile=$demo_dir/moto.pid
moto_port=${KRAKEN_DEMO_MOTO_PORT:-5000}

# Never fails: cleanup must go on when stderr is gone (a closed pipe, a closed terminal).
say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2 2>/dev/null || true; }
die() { printf 'demo: %s\n' "$*" >&2; exit 1; }

# Builds the test peers and Kraken at the same time (both are cached: seconds after the first
# run), printing every 30 s how far Kraken got while it still compiles. Each build runs in a
# process group of its own (setsid), so that a failure or Ctrl-C stops all of it.
prepare() {
  local cargo_log=$demo_dir/cargo-build.log cargo_pid peers_pid cargo_rc=0 peers_rc=0 start=$SECONDS
  local next=$((SECONDS + 30)) crates now
  mkdir -p "$demo_dir"
  say "building kraken in the background: cargo build --profile demo (log: $cargo_log)"
  setsid cargo build --profile demo -p kraken-bridge --bin kraken >"$cargo_log" 2>&1 </dev/null &
  cargo_pid=$!
  say "test peers the demo needs (cached after the first run): scripts/testenv.sh install --only demo"
  setsid scripts/testenv.sh install --only demo >&2 </dev/null &
  peers_pid=$!
  # shellcheck disable=SC2064 # the pids are known now
  trap "kill -TERM -- -$cargo_pid -$peers_pid 2>/dev/null; exit 130" INT TERM HUP
  while [ -n "$cargo_pid$peers_pid" ]; do
    if [ -n "$peers_pid" ] && ! kill -0 "$peers_pid" 2>/dev/null; then
      wait "$peers_pid" || peers_rc=$?
      peers_pid=""
      if [ "$peers_rc" != 0 ]; then
        [ -z "$cargo_pid" ] || kill -TERM -- "-$cargo_pid" 2>/dev/null || true
        die "scripts/testenv.sh install --only demo failed (exit $peers_rc; see its messages above)"
      fi
    fi
    if [ -n "$cargo_pid" ] && ! kill -0 "$cargo_pid" 2>/dev/null; then
      wait "$cargo_pid" || cargo_rc=$?
      cargo_pid=""
      if [ "$cargo_rc" != 0 ]; then
        [ -z "$peers_pid" ] || kill -TERM -- "-$peers_pid" 2>/dev/null || true
        tail -n 30 "$cargo_log" >&2
        die "cargo build failed (exit $cargo_rc; log: $cargo_log)"
      fi
    fi
    if [ -n "$cargo_pid" ] && [ "$SECONDS" -ge "$next" ]; then
      crates=$(grep -c '^ *Compiling ' "$cargo_log" || true)
      # The crates rustc is compiling right now (aws_sdk_ec2 alone takes minutes).
      now=$(pgrep -a -g "$cargo_pid" rustc 2>/dev/null | sed -n 's/.* --crate-name \([^ ]*\).*/\1/p' |
        sort -u | paste -sd ' ' - || true)
      say "$((SECONDS - start))s: kraken: crates started: $crates${now:+, compiling: $now}${peers_pid:+; test peers still building}"
      next=$((SECONDS + 30))
    fi
    [ -z "$cargo_pid$peers_pid" ] || sleep 1
  done
  trap - INT TERM HUP
  say "kraken and the test peers are ready ($((SECONDS - start))s)"
  # shellcheck source=/dev/null
  . "${KRAKEN_TESTENV_DIR:-$HOME/.cache/kraken-testenv}/env"
  kraken="${CARGO_TARGET_DIR:-$root/target}/demo/kraken"
  kubectl() { "$KRAKEN_TEST_KUBECTL" --kubeconfig "$kubeconfig" "$@"; }
}

start() {
  mkdir -p "$demo_dir"
  say "starting etcd + kube-apiserver on loopback"
  scripts/testenv.sh up "$run_dir" >/dev/null
  kubectl apply --server-side -k generated-crds/core >/dev/null
  if ! { [ -f "$moto_pidfile" ] && kill -0 "$(cat "$moto_pidfile")" 2>/dev/null; }; then
    say "starting moto's EC2 emulator on 127.0.0.1:$moto_port (for examples/20-ec2.yaml)"
    setsid "$KRAKEN_TEST_MOTO" -H 127.0.0.1 -p "$moto_port" >"$demo_dir/moto.log" 2>&1 </dev/null &
    echo $! >"$moto_pidfile"
  fi
  if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    say "operator already running (pid $(cat "$pidfile"))"
    return
  fi
  say "starting kraken operator (log: $log)"
  # The Providers of examples/ install from the local filesystem mirror the test peers live in;
  # the EC2 example's AwsConfig points at moto on loopback, which the operator must allow.
  # One user on their own machine: providers run as the operator's children (inProcess); a
  # shared cluster keeps the default, local (docs/operations.md, "Where providers run").
  RUST_LOG=${RUST_LOG:-info} setsid "$kraken" operator --kubeconfig "$kubeconfig" \
    --no-leader-elect --metrics-addr 127.0.0.1:0 --runner-placement inProcess \
    --plugin-cache "$demo_dir/plugins" --provider-mirror "$KRAKEN_TEST_PLUGIN_DIR" \
    --aws-endpoint "http://127.0.0.1:*" \
    >"$log" 2>&1 </dev/null &
  echo $! >"$pidfile"
}

stop() {
  if [ -f "$pidfile" ]; then
    local pid
    pid=$(cat "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then
      say "stopping the operator"
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
  fi
  if [ -f "$moto_pidfile" ]; then
    kill -TERM "$(cat "$moto_pidfile")" 2>/dev/null || true
    rm -f "$moto_pidfile"
  fi
  say "stopping the control plane"
  scripts/testenv.sh down "$run_dir" >/dev/null 2>&1 || true
}

# kubectl wait, but showing the operator's log tail when it times out.
wait_for() {
  if ! kubectl wait --timeout=120s "$@" >&2; then
    echo "--- last lines of $log:" >&2
    tail -n 30 "$log" >&2 || true
    die "timed out waiting for $*"
  fi
}

next_steps() {
  cat <<EOF

Kraken is running. In another terminal:

  export KUBECONFIG=$kubeconfig
  alias kubectl=$KRAKEN_TEST_KUBECTL
  kubectl get kraken                          # every managed resource: READY, SYNCED, EXTERNAL-ID
  kubectl get providers.core.kraken.dev       # installed providers, versions, kinds
  kubectl describe pet web                    # conditions, status.atProvider, Events
  kubectl explain pets.spec.forProvider       # the provider's own documentation
  kubectl patch pet web --type merge -p '{"spec":{"forProvider":{"length":3}}}'   # a replacement
  $kraken activate random random_id           # install one more kind, on demand
  kubectl delete pet db                       # destroyed through the provider
  kubectl get ec2 app -o yaml                 # native EC2 instances (moto on 127.0.0.1:$moto_port)
  kubectl patch ec2 app --type merge -p '{"spec":{"count":3}}'                    # scale up
  kubectl get configmap app-endpoint -o yaml  # the first instance's address, exported
  kubectl delete -f examples/                 # all of it, configuration too: completes in any order

Operator log: $log
EOF
}

case "${1:-demo}" in
  demo)
    prepare
    # Cleanup ignores further interrupts and a closed stdout/stderr.
    stop_on_exit() { trap '' INT TERM PIPE HUP; set +e; stop; }
    trap stop_on_exit EXIT
    trap 'exit 130' INT TERM HUP
    start
    say "applying examples/00-providers.yaml: two Providers and their ProviderConfigs"
    kubectl apply -f examples/00-providers.yaml >&2
    wait_for --for=condition=Ready providers.core.kraken.dev/random providers.core.kraken.dev/time
    say "applying examples/10-resources.yaml"
    kubectl apply -f examples/10-resources.yaml >&2
    wait_for --for=condition=Ready -n default pets.random.tf.kraken.dev/web \
      pets.random.tf.kraken.dev/db strings.random.tf.kraken.dev/token statics.time.tf.kraken.dev/launched
    say "applying examples/20-ec2.yaml: EC2 instances against moto, and a ConfigExport"
    sed "s#http://127.0.0.1:5000#http://127.0.0.1:$moto_port#" examples/20-ec2.yaml | kubectl apply -f - >&2
    wait_for --for=condition=Ready -n default ec2instances.aws.kraken.dev/app configexports.core.kraken.dev/app-endpoint
    kubectl get providers.core.kraken.dev
    echo
    kubectl get kraken -A
    next_steps
    say "press Ctrl-C to stop and clean up"
    # In the background and waited for, so a TERM (not only a terminal's Ctrl-C, which reaches
    # the sleep too) runs the clean-up at once.
    while :; do sleep 3600 & wait $!; done
    ;;
  up)
    prepare
    start
    for _ in $(seq 100); do
      kubectl get crd providers.core.kraken.dev >/dev/null 2>&1 && break
      sleep 0.1
    done
    next_steps >&2
    echo "stop it with: scripts/demo.sh down" >&2
    printf '%s\n' "$kubeconfig"
    ;;
  down)
    stop
    ;;
  -h|--help)
    sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
    ;;
  *)
    die "unknown command ${1} (see scripts/demo.sh --help)"
    ;;
esac
