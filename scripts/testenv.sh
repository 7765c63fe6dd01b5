#!/usr/bin/env bash
#
# testenv.sh — install and run Kraken's real test peers.
#
# Kraken's end-to-end tests talk to real programs, not mocks: etcd + kube-apiserver (started
# the way controller-runtime's envtest does it), kubectl, helm, a Terraform CLI (benchmark
# baseline), moto (EC2 emulator) and unmodified Terraform provider binaries laid out as a
# Terraform filesystem mirror.
#
# Why everything is built from source: the developer machines and CI reach only package
# registries (the Go module proxy, PyPI, ...), never release-binary downloads. So every Go peer
# is compiled from its Go module, and moto comes from PyPI into a private venv.
#
# Why it is fast the second time: each artifact is named after its version
# ($CACHE/bin/<name>-<version>); if that file exists nothing is rebuilt. Bumping a pinned version
# below changes the file name, which forces exactly that peer to rebuild. Go's own default caches
# (GOMODCACHE, GOCACHE) are left alone so a rebuild after a bump reuses downloaded modules and
# compiled packages.
#
# Run `scripts/testenv.sh --help` for the subcommands. This file holds the pinned versions, the
# locations, --help and the dispatch; the code is in
#   scripts/testenv/peers.sh    how each peer is built (Go wrapper modules, the moto venv)
#   scripts/testenv/install.sh  install, env
#   scripts/testenv/servers.sh  up, down, stop-apiserver, start-apiserver (certificates, kubeconfig)
#   scripts/lib/common.sh, scripts/lib/go.sh  helpers shared with scripts/aws-schema.sh

set -euo pipefail

# --------------------------------------------------------------------------------------------
# Pinned versions. Change a value here and the next `install` rebuilds only that peer.
# --------------------------------------------------------------------------------------------

# kube-apiserver and kubectl come from k8s.io/kubernetes. 1.35.4 is the newest 1.35.x that the
# module proxy serves; its go.mod asks for Go 1.25, so Go 1.26 builds it.
K8S_VERSION=v1.35.4

# etcd 3.6 is the line Kubernetes 1.35 is tested against. Built from go.etcd.io/etcd/server/v3
# (which has the etcd main package) rather than taken from apt, whose etcd-server is 3.4.
ETCD_VERSION=v3.6.16

HELM_VERSION=v3.22.0

# Terraform CLI (benchmark baseline only): real HashiCorp Terraform. 1.8.5 is the newest release
# whose go.mod has no local-path replace directives; from 1.9 on, go.mod replaces
# github.com/hashicorp/terraform/internal/... modules with ./internal/... directories that are
# not published as modules, so no wrapper module can reproduce them. (1.8.x is BUSL-licensed;
# v1.5.7 is the last MPL release and builds the same way. OpenTofu, github.com/opentofu/opentofu,
# whose only replace points at a published module, is the substitute if this stops building.)
TERRAFORM_MODULE=github.com/hashicorp/terraform
TERRAFORM_VERSION=v1.8.5

# moto[server] from PyPI, in a venv of its own.
MOTO_VERSION=5.2.5

# hashicorp/aws is pinned in scripts/aws-schema.sh, which builds it (install calls it).
#
# Terraform providers: <NAME>_VERSION is the release (the mirror's version directory);
# <NAME>_MODULE / <NAME>_MODVER is the Go module version that holds that release's source.
#
# time tags v0.x, which Go accepts as is.
PROVIDER_TIME_VERSION=0.13.1
PROVIDER_TIME_MODULE=github.com/hashicorp/terraform-provider-time
PROVIDER_TIME_MODVER=v0.13.1
# random and null declare `module github.com/terraform-providers/terraform-provider-*` and tag
# v2.x/v3.x without a /vN suffix, so Go ignores their release tags: the module proxy only has
# them as pseudo-versions of commits, and only of commits someone fetched before (it refuses
# the rest). These two are release commits: their CHANGELOG starts with that release, dated the
# day of the commit. No v3 commit of null is served, hence null 2.1.2 (a protocol-5 release,
# Terraform 0.12+).
PROVIDER_RANDOM_VERSION=3.6.0
PROVIDER_RANDOM_MODULE=github.com/terraform-providers/terraform-provider-random
PROVIDER_RANDOM_MODVER=v1.3.2-0.20231204135814-c6e90de46687
PROVIDER_NULL_VERSION=2.1.2
PROVIDER_NULL_MODULE=github.com/terraform-providers/terraform-provider-null
PROVIDER_NULL_MODVER=v1.0.1-0.20190430203517-8d3d85a60e20

# Kraken's own fixture provider (tests/fixtures/terraform-provider-fixture), keyed by a hash of
# its sources so that editing it rebuilds it.
FIXTURE_VERSION=1.0.0
FIXTURE_ADDR=registry.kraken.dev/kraken/fixture

# --------------------------------------------------------------------------------------------
# Locations
# --------------------------------------------------------------------------------------------

CACHE=${KRAKEN_TESTENV_DIR:-$HOME/.cache/kraken-testenv}
BIN_DIR=$CACHE/bin
SRC_DIR=$CACHE/src
LOG_DIR=$CACHE/logs
PLUGIN_DIR=$CACHE/plugins
MOTO_VENV=$CACHE/moto-venv
ENV_FILE=$CACHE/env
TF_RC=$CACHE/terraformrc
DEFAULT_RUN_DIR=$CACHE/run/default

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FIXTURE_DIR=${KRAKEN_FIXTURE_DIR:-$REPO_ROOT/tests/fixtures/terraform-provider-fixture}

PLATFORM=linux_amd64

# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------

LOG_TAG=testenv
# shellcheck source=scripts/lib/common.sh
. "$REPO_ROOT/scripts/lib/common.sh"
# shellcheck source=scripts/lib/go.sh
. "$REPO_ROOT/scripts/lib/go.sh"

usage() {
	cat <<EOF
Usage: scripts/testenv.sh <command> [args]

Installs and runs the real peers Kraken's tests need. Everything lives under
\$KRAKEN_TESTENV_DIR (default ~/.cache/kraken-testenv); currently: $CACHE

Commands:
  install [--only PEER[,PEER...]]
                   Build/install every peer (cached by version), write the Terraform CLI config
                   $TF_RC and the env file $ENV_FILE
                   (export lines: KRAKEN_TEST_ETCD, KRAKEN_TEST_KUBE_APISERVER, KRAKEN_TEST_KUBECTL,
                   KRAKEN_TEST_TERRAFORM, KRAKEN_TEST_HELM, KRAKEN_TEST_MOTO, KRAKEN_TEST_PLUGIN_DIR,
                   KRAKEN_TEST_TF_CLI_CONFIG, KRAKEN_TEST_PROVIDER_<NAME>[_VERSION], ...), and
                   check that terraform init installs the providers offline from the mirror.
                   Prints the env file path.
                   --only builds just the peers named (the others are neither built nor
                   required; those an earlier install built still go into the env file, the
                   rest are left out of it) and skips the terraform init check. PEERs: etcd,
                   kube-apiserver, kubectl, kube-controller-manager, kube-scheduler, helm,
                   terraform, moto, random, time, null, fixture,
                   aws (hashicorp/aws, built by scripts/aws-schema.sh: about 23 minutes of 2
                   cores and 8.6 GB of memory the first time);
                   groups: control-plane (etcd, kube-apiserver, kubectl), providers (random,
                   time, null, fixture), demo (what scripts/demo.sh needs: control-plane, moto,
                   random, time), base (every peer but aws). The tests need a full install.
  up [RUN_DIR]     Start etcd + kube-apiserver on loopback with fresh free ports (envtest-style),
                   in the background. RUN_DIR defaults to $DEFAULT_RUN_DIR; several
                   RUN_DIRs may run at once. The last line of stdout is RUN_DIR/kubeconfig
                   (admin, system:masters). Idempotent: a healthy RUN_DIR is left as it is.
                   Runs 'install' first if needed.
  down [RUN_DIR]   Stop both processes (SIGTERM, then SIGKILL) and delete the etcd data.
                   Idempotent.
  stop-apiserver [RUN_DIR]
                   SIGKILL the kube-apiserver of RUN_DIR, leaving etcd (and so every object)
                   in place: an API server outage for tests.
  start-apiserver [RUN_DIR]
                   Start it again with the command line 'up' used (same port, certificates and
                   etcd) and wait for /readyz. The previous log is kept as kube-apiserver.log.N.
  env              Print the env file path (installs first if there is none).
  help, --help     This text.

Typical use:
  source "\$(scripts/testenv.sh env)"
  scripts/testenv.sh install --only demo     # only what scripts/demo.sh needs
  KUBECONFIG=\$(scripts/testenv.sh up /tmp/run1) kubectl get ns
  scripts/testenv.sh down /tmp/run1

Environment: KRAKEN_TESTENV_DIR (cache root), KRAKEN_FIXTURE_DIR (fixture provider source),
GO (go binary), PYTHON (python3 used for the moto venv).
EOF
}

# --------------------------------------------------------------------------------------------
# The subcommands, one file each group
# --------------------------------------------------------------------------------------------

# shellcheck source=scripts/testenv/peers.sh
. "$REPO_ROOT/scripts/testenv/peers.sh"
# shellcheck source=scripts/testenv/install.sh
. "$REPO_ROOT/scripts/testenv/install.sh"
# shellcheck source=scripts/testenv/servers.sh
. "$REPO_ROOT/scripts/testenv/servers.sh"

main() {
	local cmd=${1:-help}
	(($#)) && shift
	case $cmd in
	install) cmd_install "$@" ;;
	up) cmd_up "$@" ;;
	down) cmd_down "$@" ;;
	stop-apiserver) cmd_stop_apiserver "$@" ;;
	start-apiserver) cmd_start_apiserver "$@" ;;
	env) cmd_env "$@" ;;
	help | -h | --help) usage ;;
	*)
		usage >&2
		die "unknown command: $cmd"
		;;
	esac
}

main "$@"
