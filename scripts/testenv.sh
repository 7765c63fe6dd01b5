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
# Run `scripts/testenv.sh --help` for the subcommands.

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
  install          Build/install every peer (cached by version), write the Terraform CLI config
                   $TF_RC and the env file $ENV_FILE
                   (export lines: KRAKEN_TEST_ETCD, KRAKEN_TEST_KUBE_APISERVER, KRAKEN_TEST_KUBECTL,
                   KRAKEN_TEST_TERRAFORM, KRAKEN_TEST_HELM, KRAKEN_TEST_MOTO, KRAKEN_TEST_PLUGIN_DIR,
                   KRAKEN_TEST_TF_CLI_CONFIG, KRAKEN_TEST_PROVIDER_<NAME>[_VERSION], ...).
                   Prints the env file path.
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
  KUBECONFIG=\$(scripts/testenv.sh up /tmp/run1) kubectl get ns
  scripts/testenv.sh down /tmp/run1

Environment: KRAKEN_TESTENV_DIR (cache root), KRAKEN_FIXTURE_DIR (fixture provider source),
GO (go binary), PYTHON (python3 used for the moto venv).
EOF
}

# --------------------------------------------------------------------------------------------
# Building the Go peers (through wrapper modules: see scripts/lib/go.sh)
# --------------------------------------------------------------------------------------------

k8s_wrapper() {
	local minor_patch=${K8S_VERSION#v1.}
	# Staging modules are published as v0.<minor>.<patch> alongside k8s.io/kubernetes v1.<minor>.<patch>.
	prepare_wrapper "$SRC_DIR/k8s-$K8S_VERSION" k8s.io/kubernetes "$K8S_VERSION" "v0.$minor_patch" \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl
}

# The version that /version reports and kubectl prints; without it both say v0.0.0-master,
# which confuses clients that check the server version.
k8s_ldflags() {
	local minor=${K8S_VERSION#v1.} f=""
	minor=${minor%%.*}
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		f+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
		f+=" -X $pkg.gitTreeState=clean"
	done
	printf '%s' "$f"
}

build_kube_apiserver() {
	k8s_wrapper
	go_build "$SRC_DIR/k8s-$K8S_VERSION" k8s.io/kubernetes/cmd/kube-apiserver "$1" "$(k8s_ldflags)"
}

build_kubectl() {
	k8s_wrapper
	go_build "$SRC_DIR/k8s-$K8S_VERSION" k8s.io/kubernetes/cmd/kubectl "$1" "$(k8s_ldflags)"
}

build_etcd() {
	local dir=$SRC_DIR/etcd-$ETCD_VERSION
	prepare_wrapper "$dir" go.etcd.io/etcd/server/v3 "$ETCD_VERSION" - go.etcd.io/etcd/server/v3
	go_build "$dir" go.etcd.io/etcd/server/v3 "$1"
}

build_helm() {
	local dir=$SRC_DIR/helm-$HELM_VERSION kminor
	prepare_wrapper "$dir" helm.sh/helm/v3 "$HELM_VERSION" "" helm.sh/helm/v3/cmd/helm
	# Same stamping as helm's Makefile: its version, and the Kubernetes version it was built
	# against (used for .Capabilities.KubeVersion when templating offline).
	kminor=$(sed -n 's/^[[:space:]]*k8s.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$dir/go.mod")
	go_build "$dir" helm.sh/helm/v3/cmd/helm "$1" \
		"-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean
		 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$kminor
		 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$kminor"
}

build_terraform() {
	local dir=$SRC_DIR/terraform-$TERRAFORM_VERSION
	prepare_wrapper "$dir" "$TERRAFORM_MODULE" "$TERRAFORM_VERSION" "" "$TERRAFORM_MODULE"
	# As in HashiCorp's release builds: without it the binary calls itself "1.8.5-dev".
	go_build "$dir" "$TERRAFORM_MODULE" "$1" "-X $TERRAFORM_MODULE/version.dev=no"
}

build_provider_time() { build_provider time "$PROVIDER_TIME_MODULE" "$PROVIDER_TIME_MODVER" "$1"; }
build_provider_random() { build_provider random "$PROVIDER_RANDOM_MODULE" "$PROVIDER_RANDOM_MODVER" "$1"; }
build_provider_null() { build_provider null "$PROVIDER_NULL_MODULE" "$PROVIDER_NULL_MODVER" "$1"; }

build_fixture() {
	(cd "$FIXTURE_DIR" && "$GO_CMD" build -buildvcs=false -trimpath -o "$1.tmp" .)
	mv -f "$1.tmp" "$1"
}

# --------------------------------------------------------------------------------------------
# install
# --------------------------------------------------------------------------------------------

FAILED=()   # peers that failed (install exits non-zero)
SKIPPED=()  # optional peers that were left out, with the reason

# ensure_built NAME VERSION BUILD_FN [NOTE]: makes $BIN_DIR/NAME-VERSION exist (building it with
# BUILD_FN OUT when it does not) and points the stable symlink $BIN_DIR/NAME at it. Sets BUILT to
# the artifact, or to "" after reporting a failed build. Call it as a plain statement (run_logged).
BUILT=""
ensure_built() {
	local name=$1 version=$2 fn=$3 note=${4:-} out logfile start
	out=$BIN_DIR/$name-$version
	BUILT=""
	if [[ ! -x $out ]]; then
		logfile=$LOG_DIR/build-$name-$version.log
		log "building $name $version${note:+ ($note)}..."
		start=$SECONDS
		run_logged "$logfile" "$fn" "$out"
		if ((RUN_RC != 0)); then
			log "FAILED to build $name $version (exit $RUN_RC); last lines of $logfile:"
			tail -n 25 "$logfile" | sed 's/^/    /' >&2
			return 0
		fi
		log "built $name $version in $((SECONDS - start))s"
	fi
	ln -sfn "${out##*/}" "$BIN_DIR/$name"
	BUILT=$out
}

install_moto() {
	local py=${PYTHON:-python3}
	rm -rf "$MOTO_VENV"
	"$py" -m venv "$MOTO_VENV"
	"$MOTO_VENV/bin/pip" install --disable-pip-version-check -q "moto[server]==$MOTO_VERSION"
	check_moto
	printf '%s\n' "$MOTO_VERSION" >"$MOTO_VENV/.kraken-moto-version"
}

# Starts moto_server on a free loopback port, waits for an HTTP answer, stops it.
check_moto() {
	local port pid ok=1 i
	port=$(free_ports 1)
	"$MOTO_VENV/bin/moto_server" -H 127.0.0.1 -p "$port" &
	pid=$!
	for ((i = 0; i < 100; i++)); do
		if "$MOTO_VENV/bin/python" -c 'import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=1).read()' "http://127.0.0.1:$port/moto-api/data.json" 2>/dev/null; then
			ok=0
			break
		fi
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	if ((ok != 0)); then
		echo "moto_server did not answer on 127.0.0.1:$port"
		return 1
	fi
	echo "moto_server answered on 127.0.0.1:$port"
}

# Like ensure_built, for the moto venv (the stamp file records the installed version).
ensure_moto() {
	BUILT=$MOTO_VENV/bin/moto_server
	if [[ -x $BUILT && $(cat "$MOTO_VENV/.kraken-moto-version" 2>/dev/null) == "$MOTO_VERSION" ]]; then
		return 0
	fi
	local logfile=$LOG_DIR/install-moto-$MOTO_VERSION.log start=$SECONDS
	log "installing moto[server] $MOTO_VERSION into $MOTO_VENV..."
	run_logged "$logfile" install_moto
	if ((RUN_RC != 0)); then
		log "FAILED to install moto $MOTO_VERSION (exit $RUN_RC); last lines of $logfile:"
		tail -n 25 "$logfile" | sed 's/^/    /' >&2
		BUILT=""
		return 0
	fi
	log "installed and checked moto $MOTO_VERSION in $((SECONDS - start))s"
}

write_terraformrc() {
	# Only the filesystem mirror, no `direct {}` block: every provider must come from the
	# mirror, so `terraform init` never reaches for the network. No checkpoint (version-check)
	# calls either.
	cat >"$TF_RC.tmp" <<EOF
# Generated by scripts/testenv.sh: Terraform CLI config that installs providers only from the
# local filesystem mirror of the test environment.
disable_checkpoint = true

provider_installation {
  filesystem_mirror {
    path = "$PLUGIN_DIR"
  }
}
EOF
	mv -f "$TF_RC.tmp" "$TF_RC"
}

# Checks that `terraform init` installs the mirrored providers offline. HTTPS_PROXY points at a
# dead port so that any network access would fail loudly instead of silently succeeding.
check_terraform_mirror() {
	local tf=$1 dir out rc=0
	dir=$(mktemp -d)
	{
		printf 'terraform {\n  required_providers {\n'
		printf '    random = { source = "hashicorp/random", version = "%s" }\n' "$PROVIDER_RANDOM_VERSION"
		printf '    time = { source = "hashicorp/time", version = "%s" }\n' "$PROVIDER_TIME_VERSION"
		printf '    null = { source = "hashicorp/null", version = "%s" }\n' "$PROVIDER_NULL_VERSION"
		if [[ -n ${KRAKEN_TEST_PROVIDER_FIXTURE:-} ]]; then
			printf '    fixture = { source = "%s", version = "%s" }\n' "$FIXTURE_ADDR" "$FIXTURE_VERSION"
		fi
		printf '  }\n}\n'
	} >"$dir/main.tf"
	out=$(cd "$dir" && TF_CLI_CONFIG_FILE=$TF_RC CHECKPOINT_DISABLE=1 TF_IN_AUTOMATION=1 \
		HTTPS_PROXY=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9 \
		"$tf" init -input=false -no-color 2>&1) || rc=$?
	rm -rf "$dir"
	printf '%s\n' "$out"
	if ((rc != 0)) || grep -qiE 'error|proxyconnect|dial tcp|no such host' <<<"$out"; then
		return 1
	fi
}

cmd_install() {
	local start=$SECONDS
	mkdir -p "$BIN_DIR" "$SRC_DIR" "$LOG_DIR" "$PLUGIN_DIR"

	# One install at a time: tests may call `up` (and so `install`) in parallel.
	exec 9>"$CACHE/.install.lock"
	flock 9

	GO_CMD=$(find_go) || die "no Go toolchain found (looked for \$GO, go on PATH, /usr/local/go/bin/go)"
	command -v openssl >/dev/null || die "openssl is required (apt-get install openssl)"
	command -v "${PYTHON:-python3}" >/dev/null || die "python3 is required (for moto and free ports)"

	local slow="first time takes a few minutes"
	ensure_built kube-apiserver "$K8S_VERSION" build_kube_apiserver "$slow"
	[[ -n $BUILT ]] || FAILED+=(kube-apiserver)
	ensure_built kubectl "$K8S_VERSION" build_kubectl
	[[ -n $BUILT ]] || FAILED+=(kubectl)
	ensure_built etcd "$ETCD_VERSION" build_etcd
	[[ -n $BUILT ]] || FAILED+=(etcd)
	ensure_built helm "$HELM_VERSION" build_helm "$slow"
	[[ -n $BUILT ]] || FAILED+=(helm)
	ensure_built terraform "$TERRAFORM_VERSION" build_terraform "$slow"
	[[ -n $BUILT ]] || FAILED+=(terraform)
	ensure_moto
	[[ -n $BUILT ]] || FAILED+=(moto)

	# Providers are optional one by one: a provider that fails to build is reported and left out.
	declare -A provider_path=()
	local p version
	for p in random time null; do
		version=PROVIDER_${p^^}_VERSION
		ensure_built "terraform-provider-$p" "${!version}" "build_provider_$p"
		if [[ -n $BUILT ]]; then
			provider_path[$p]=$(place_in_mirror "registry.terraform.io/hashicorp/$p" "${!version}" "$BUILT")
		else
			SKIPPED+=("provider $p: build failed, see $LOG_DIR/build-terraform-provider-$p-${!version}.log")
		fi
	done

	# The fixture provider is keyed by a hash of its sources, not by its (fixed) version.
	local fixture_key
	if [[ -f $FIXTURE_DIR/go.mod ]]; then
		# Relative paths, so that the key does not change when the checkout moves.
		fixture_key=$(cd "$FIXTURE_DIR" && find . -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) |
			LC_ALL=C sort | xargs -d '\n' sha256sum | sha256sum | cut -c1-12)
		ensure_built terraform-provider-fixture "$FIXTURE_VERSION-$fixture_key" build_fixture
		if [[ -n $BUILT ]]; then
			provider_path[fixture]=$(place_in_mirror "$FIXTURE_ADDR" "$FIXTURE_VERSION" "$BUILT")
			# Old builds of the fixture are dead weight once its sources changed.
			find "$BIN_DIR" -maxdepth 1 -name 'terraform-provider-fixture-*' \
				! -name "terraform-provider-fixture-$FIXTURE_VERSION-$fixture_key" -delete
		else
			SKIPPED+=("provider fixture: build failed in $FIXTURE_DIR")
		fi
	else
		log "fixture provider source not found at $FIXTURE_DIR (no go.mod); KRAKEN_TEST_PROVIDER_FIXTURE left unset"
		SKIPPED+=("provider fixture: no source at $FIXTURE_DIR")
	fi
	# Keep the mirror in step with the env file: no fixture in one means none in the other.
	[[ -n ${provider_path[fixture]:-} ]] || rm -rf "${PLUGIN_DIR:?}/$FIXTURE_ADDR"

	local note
	for note in "${SKIPPED[@]}"; do log "note: $note"; done
	if ((${#FAILED[@]})); then
		die "install failed for: ${FAILED[*]} (logs in $LOG_DIR); env file not written"
	fi

	write_terraformrc
	{
		printf '# Generated by scripts/testenv.sh install; do not edit. Source it: . %s\n' "$ENV_FILE"
		printf '# Terraform CLI here is HashiCorp Terraform %s built from %s.\n' "$TERRAFORM_VERSION" "$TERRAFORM_MODULE"
		local kv
		for kv in \
			"KRAKEN_TESTENV_DIR=$CACHE" \
			"KRAKEN_TEST_ETCD=$BIN_DIR/etcd-$ETCD_VERSION" \
			"KRAKEN_TEST_ETCD_VERSION=${ETCD_VERSION#v}" \
			"KRAKEN_TEST_KUBE_APISERVER=$BIN_DIR/kube-apiserver-$K8S_VERSION" \
			"KRAKEN_TEST_KUBECTL=$BIN_DIR/kubectl-$K8S_VERSION" \
			"KRAKEN_TEST_KUBE_VERSION=${K8S_VERSION#v}" \
			"KRAKEN_TEST_TERRAFORM=$BIN_DIR/terraform-$TERRAFORM_VERSION" \
			"KRAKEN_TEST_TERRAFORM_VERSION=${TERRAFORM_VERSION#v}" \
			"KRAKEN_TEST_HELM=$BIN_DIR/helm-$HELM_VERSION" \
			"KRAKEN_TEST_HELM_VERSION=${HELM_VERSION#v}" \
			"KRAKEN_TEST_MOTO=$MOTO_VENV/bin/moto_server" \
			"KRAKEN_TEST_MOTO_VERSION=$MOTO_VERSION" \
			"KRAKEN_TEST_PLUGIN_DIR=$PLUGIN_DIR" \
			"KRAKEN_TEST_TF_CLI_CONFIG=$TF_RC"; do
			printf 'export %s=%q\n' "${kv%%=*}" "${kv#*=}"
		done
		for p in random time null fixture; do
			[[ -n ${provider_path[$p]:-} ]] || continue
			version=PROVIDER_${p^^}_VERSION
			[[ $p == fixture ]] && version=FIXTURE_VERSION
			printf 'export KRAKEN_TEST_PROVIDER_%s=%q\n' "${p^^}" "${provider_path[$p]}"
			printf 'export KRAKEN_TEST_PROVIDER_%s_VERSION=%q\n' "${p^^}" "${!version}"
		done
	} >"$ENV_FILE.tmp"
	mv -f "$ENV_FILE.tmp" "$ENV_FILE"

	# The offline `terraform init` check costs a few seconds, so it runs only when the env file,
	# the CLI config, the terraform binary or a mirrored provider changed since the last check.
	local stamp
	stamp=$CACHE/.verified-$({
		cat "$ENV_FILE" "$TF_RC"
		find "$PLUGIN_DIR" "$BIN_DIR/terraform-$TERRAFORM_VERSION" -type f -printf '%p %i %s %T@\n' | LC_ALL=C sort
	} | sha256sum | cut -c1-12)
	if [[ ! -f $stamp ]]; then
		log "checking that terraform init installs the providers offline from the mirror..."
		unset KRAKEN_TEST_PROVIDER_FIXTURE # only the env file decides whether there is a fixture
		# shellcheck source=/dev/null
		. "$ENV_FILE"
		run_logged "$LOG_DIR/check-terraform-mirror.log" check_terraform_mirror "$KRAKEN_TEST_TERRAFORM"
		if ((RUN_RC != 0)); then
			log "FAILED: terraform init from the mirror; output:"
			sed 's/^/    /' "$LOG_DIR/check-terraform-mirror.log" >&2
			die "the provider mirror $PLUGIN_DIR does not work offline"
		fi
		rm -f "$CACHE"/.verified-*
		touch "$stamp"
	fi

	log "install complete in $((SECONDS - start))s; env file: $ENV_FILE"
	printf '%s\n' "$ENV_FILE"
}

# Loads the env file, running install first if it is missing or points at missing binaries.
ensure_installed() {
	if [[ -f $ENV_FILE ]]; then
		# shellcheck source=/dev/null
		. "$ENV_FILE"
		if [[ -x ${KRAKEN_TEST_ETCD:-/nonexistent} && -x ${KRAKEN_TEST_KUBE_APISERVER:-/nonexistent} &&
			-x ${KRAKEN_TEST_KUBECTL:-/nonexistent} && ${KRAKEN_TEST_KUBE_APISERVER} == *"-$K8S_VERSION" &&
			${KRAKEN_TEST_ETCD} == *"-$ETCD_VERSION" ]]; then
			return 0
		fi
	fi
	log "test environment not installed (or outdated); running install first"
	cmd_install >&2
	# shellcheck source=/dev/null
	. "$ENV_FILE"
}

# --------------------------------------------------------------------------------------------
# up / down
# --------------------------------------------------------------------------------------------

# Absolute path of RUN_DIR (default $DEFAULT_RUN_DIR), which need not exist yet. Absolute,
# because the path is how we recognise our own processes (see pid_alive).
resolve_run_dir() {
	realpath -m -- "${1:-$DEFAULT_RUN_DIR}"
}

# Creates (once per RUN_DIR) a CA, the apiserver's serving cert, the admin client cert and the
# service-account signing key pair. RSA keys: every TLS stack (Go, rustls, OpenSSL) takes them.
# Call as a plain statement (see run_logged).
make_certs() {
	local d=$1/pki
	[[ -f $d/.done ]] && return 0
	rm -rf "$d"
	mkdir -p "$d"
	cat >"$d/openssl.cnf" <<'EOF'
[req]
distinguished_name = dn
prompt = no
[dn]
CN = placeholder
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign, digitalSignature
subjectKeyIdentifier = hash
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost, IP:127.0.0.1, DNS:kubernetes, DNS:kubernetes.default, DNS:kubernetes.default.svc, IP:10.0.0.1
authorityKeyIdentifier = keyid
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
authorityKeyIdentifier = keyid
EOF
	run_logged "$d/openssl.log" gen_certs "$d"
	if ((RUN_RC != 0)); then
		log "certificate generation failed; output of openssl:"
		sed 's/^/    /' "$d/openssl.log" >&2
		die "could not create certificates in $d"
	fi
	touch "$d/.done"
}

gen_certs() {
	local name subj
	cd "$1"
	openssl req -x509 -config openssl.cnf -extensions ca -newkey rsa:2048 -nodes \
		-keyout ca.key -out ca.crt -days 3650 -subj "/CN=kraken-testenv-ca"
	for name in server client; do
		subj="/CN=kube-apiserver"
		if [[ $name == client ]]; then subj="/O=system:masters/CN=kraken-admin"; fi
		openssl req -new -config openssl.cnf -newkey rsa:2048 -nodes \
			-keyout "$name.key" -out "$name.csr" -subj "$subj"
		openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key \
			-set_serial "0x$(openssl rand -hex 8)" -days 3650 \
			-extfile openssl.cnf -extensions "$name" -out "$name.crt"
	done
	openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out sa.key
	openssl pkey -in sa.key -pubout -out sa.pub
	chmod 600 ./*.key
}

write_kubeconfig() {
	local run=$1 port=$2 pki=$1/pki
	cat >"$run/kubeconfig.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kraken-testenv
  cluster:
    server: https://127.0.0.1:$port
    certificate-authority-data: $(base64 -w0 "$pki/ca.crt")
users:
- name: kraken-admin
  user:
    client-certificate-data: $(base64 -w0 "$pki/client.crt")
    client-key-data: $(base64 -w0 "$pki/client.key")
contexts:
- name: kraken-testenv
  context:
    cluster: kraken-testenv
    user: kraken-admin
current-context: kraken-testenv
EOF
	chmod 600 "$run/kubeconfig.tmp"
	mv -f "$run/kubeconfig.tmp" "$run/kubeconfig"
}

# start_bg PIDFILE LOGFILE CMD...: starts CMD detached (own session, so it outlives this script and
# the caller's process group) with output to LOGFILE. The wrapper shell writes its own pid and
# then execs CMD, so PIDFILE holds CMD's real pid. Lock fds 8/9 are closed so a server never
# holds our locks.
start_bg() {
	local pidfile=$1 logfile=$2
	shift 2
	rm -f "$pidfile"
	# shellcheck disable=SC2016 # $$, $0 and $@ belong to the inner shell.
	setsid bash -c 'echo $$ >"$0"; exec "$@"' "$pidfile" "$@" </dev/null >"$logfile" 2>&1 8>&- 9>&- &
	local i
	for ((i = 0; i < 100; i++)); do
		[[ -s $pidfile ]] && return 0
		sleep 0.02
	done
	return 1
}

stop_pid() {
	local pidfile=$1 needle=$2 pid i
	if pid_alive "$pidfile" "$needle"; then
		pid=$(<"$pidfile")
		kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < 50; i++)); do
			pid_alive "$pidfile" "$needle" || break
			sleep 0.1
		done
		if pid_alive "$pidfile" "$needle"; then
			log "pid $pid did not stop after SIGTERM; sending SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
			for ((i = 0; i < 20; i++)); do
				pid_alive "$pidfile" "$needle" || break
				sleep 0.1
			done
		fi
	fi
	rm -f "$pidfile"
}

readyz() {
	[[ $("$KRAKEN_TEST_KUBECTL" --kubeconfig "$1/kubeconfig" --request-timeout=2s get --raw /readyz 2>/dev/null) == ok ]]
}

healthy() {
	local run=$1
	[[ -f $run/kubeconfig ]] && pid_alive "$run/etcd.pid" "$run/" &&
		pid_alive "$run/kube-apiserver.pid" "$run/" && readyz "$run"
}

stop_servers() {
	local run=$1
	stop_pid "$run/kube-apiserver.pid" "$run/"
	stop_pid "$run/etcd.pid" "$run/"
	rm -rf "$run/etcd-data" "$run/kubeconfig"
}

# show_failure RUN NAME: prints why NAME failed, with the tail of its log.
show_failure() {
	log "$2 failed to start; last lines of $1/$2.log:"
	tail -n 30 "$1/$2.log" | sed 's/^/    /' >&2
}

# One attempt at starting etcd + kube-apiserver. Returns 0 when /readyz answers ok, 2 when a
# port was taken between choosing and binding it (worth retrying), 1 otherwise.
start_servers() {
	local run=$1 pki=$1/pki etcd_port peer_port api_port i
	read -r etcd_port peer_port api_port < <(free_ports 3) || true
	if [[ -z $api_port ]]; then
		log "could not pick free ports (python3 failed?)"
		return 1
	fi

	# --unsafe-no-fsync: test data is thrown away, and fsync dominates etcd latency on CI disks
	# (envtest does the same).
	start_bg "$run/etcd.pid" "$run/etcd.log" "$KRAKEN_TEST_ETCD" \
		--name=default --data-dir="$run/etcd-data" \
		--listen-client-urls="http://127.0.0.1:$etcd_port" --advertise-client-urls="http://127.0.0.1:$etcd_port" \
		--listen-peer-urls="http://127.0.0.1:$peer_port" --initial-advertise-peer-urls="http://127.0.0.1:$peer_port" \
		--initial-cluster="default=http://127.0.0.1:$peer_port" --initial-cluster-state=new \
		--unsafe-no-fsync || return 1
	for ((i = 0; i < 300; i++)); do
		port_open "$etcd_port" && break
		if ! pid_alive "$run/etcd.pid" "$run/"; then
			grep -q 'address already in use' "$run/etcd.log" && return 2
			show_failure "$run" etcd
			return 1
		fi
		sleep 0.05
	done

	write_kubeconfig "$run" "$api_port"
	# Flags follow envtest: RBAC with a client-CA (the admin cert is system:masters), a service
	# account key pair so tokens can be issued, and the ServiceAccount admission plugin off
	# because nothing (no controller-manager) creates the default service accounts it requires.
	# /debug/pprof stays off unless KRAKEN_APISERVER_PROFILING=true (for profiling a benchmark).
	# No endpoint reconciler: it would try (and fail, loudly) to publish 127.0.0.1 as the
	# `kubernetes` service endpoint; nothing here routes service traffic anyway.
	local apiserver=("$KRAKEN_TEST_KUBE_APISERVER"
		--bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$api_port"
		--etcd-servers="http://127.0.0.1:$etcd_port"
		--cert-dir="$pki" --tls-cert-file="$pki/server.crt" --tls-private-key-file="$pki/server.key"
		--client-ca-file="$pki/ca.crt" --authorization-mode=RBAC
		--service-account-issuer="https://127.0.0.1:$api_port"
		--service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key"
		--service-cluster-ip-range=10.0.0.0/24 --allow-privileged=true
		--disable-admission-plugins=ServiceAccount
		--profiling="${KRAKEN_APISERVER_PROFILING:-false}"
		--endpoint-reconciler-type=none)
	# The exact command line, NUL-separated, so that `start-apiserver` can bring the same server
	# back (same port, same etcd) after `stop-apiserver`.
	printf '%s\0' "${apiserver[@]}" >"$run/kube-apiserver.args"
	start_bg "$run/kube-apiserver.pid" "$run/kube-apiserver.log" "${apiserver[@]}" || return 1
	wait_apiserver_ready "$run"
}

# wait_apiserver_ready RUN: waits (up to 120s) for /readyz. Returns 0 when ready, 2 when the
# apiserver died because its port was taken, 1 otherwise.
wait_apiserver_ready() {
	local run=$1 i
	for ((i = 0; i < 1200; i++)); do
		readyz "$run" && return 0
		if ! pid_alive "$run/kube-apiserver.pid" "$run/"; then
			grep -q 'address already in use' "$run/kube-apiserver.log" && return 2
			show_failure "$run" kube-apiserver
			return 1
		fi
		if ! pid_alive "$run/etcd.pid" "$run/"; then
			show_failure "$run" etcd
			return 1
		fi
		sleep 0.1
	done
	log "kube-apiserver did not become ready within 120s"
	show_failure "$run" kube-apiserver
	return 1
}

cmd_up() {
	local run start=$SECONDS attempt rc
	ensure_installed
	run=$(resolve_run_dir "${1:-}")
	mkdir -p "$run"
	# One `up`/`down` per RUN_DIR at a time; different RUN_DIRs do not wait for each other.
	exec 8>"$run/.lock"
	flock 8

	if healthy "$run"; then
		log "already up: $run"
		printf '%s\n' "$run/kubeconfig"
		return 0
	fi
	stop_servers "$run" # leftovers of a crashed or half-started run
	make_certs "$run"

	for attempt in 1 2 3; do
		rc=0
		start_servers "$run" || rc=$?
		((rc == 0)) && break
		stop_servers "$run"
		((rc == 2)) || die "could not start the test control plane in $run"
		log "a chosen port was taken meanwhile; retrying with new ports ($attempt/3)"
	done
	((rc == 0)) || die "could not start the test control plane in $run (ports kept colliding)"

	log "up in $((SECONDS - start))s: etcd pid $(<"$run/etcd.pid"), kube-apiserver pid $(<"$run/kube-apiserver.pid"), logs in $run"
	printf '%s\n' "$run/kubeconfig"
}

cmd_down() {
	local run
	run=$(resolve_run_dir "${1:-}")
	if [[ ! -d $run ]]; then
		log "down: $run does not exist; nothing to stop"
		return 0
	fi
	exec 8>"$run/.lock"
	flock 8
	stop_servers "$run"
	log "down: $run"
}

# An API server outage for tests: etcd keeps running, so nothing stored is lost, and the
# restarted kube-apiserver serves the same port with the same certificates.
cmd_stop_apiserver() {
	local run pid i port
	run=$(resolve_run_dir "${1:-}")
	[[ -d $run ]] || die "stop-apiserver: $run does not exist"
	exec 8>"$run/.lock"
	flock 8
	if pid_alive "$run/kube-apiserver.pid" "$run/"; then
		pid=$(<"$run/kube-apiserver.pid")
		# SIGKILL, not SIGTERM: an outage, not a graceful shutdown; clients see their
		# connections reset, as when a control-plane node dies.
		kill -KILL "$pid" 2>/dev/null || true
		for ((i = 0; i < 100; i++)); do
			pid_alive "$run/kube-apiserver.pid" "$run/" || break
			sleep 0.05
		done
		pid_alive "$run/kube-apiserver.pid" "$run/" && die "stop-apiserver: pid $pid survived SIGKILL"
		# The command line vanishes from /proc before the kernel closes the process's sockets;
		# wait for the port too, so that an immediate start-apiserver can bind it.
		port=$(tr '\0' '\n' <"$run/kube-apiserver.args" | sed -n 's/^--secure-port=//p')
		for ((i = 0; i < 100; i++)); do
			if [[ -z $port ]] || ! port_open "$port"; then break; fi
			sleep 0.05
		done
		log "stop-apiserver: killed kube-apiserver pid $pid in $run (etcd still running)"
	else
		log "stop-apiserver: kube-apiserver in $run was not running"
	fi
	rm -f "$run/kube-apiserver.pid"
}

cmd_start_apiserver() {
	local run rc=0 n=1 start=$SECONDS attempt
	local -a args
	ensure_installed
	run=$(resolve_run_dir "${1:-}")
	exec 8>"$run/.lock"
	flock 8
	[[ -s $run/kube-apiserver.args ]] || die "start-apiserver: no $run/kube-apiserver.args (was it started by 'up'?)"
	pid_alive "$run/etcd.pid" "$run/" || die "start-apiserver: etcd of $run is not running; use 'up'"
	if pid_alive "$run/kube-apiserver.pid" "$run/"; then
		log "start-apiserver: already running in $run"
		return 0
	fi
	mapfile -d '' args <"$run/kube-apiserver.args"
	# Keep the log of each earlier incarnation: kube-apiserver.log.1, .2, ...
	while [[ -e $run/kube-apiserver.log.$n ]]; do n=$((n + 1)); done
	[[ -f $run/kube-apiserver.log ]] && mv -f "$run/kube-apiserver.log" "$run/kube-apiserver.log.$n"
	# The port is the one clients know; if something still holds it (a socket of the killed
	# server not yet closed), try again shortly rather than move to another port.
	for attempt in 1 2 3 4 5; do
		rc=0
		start_bg "$run/kube-apiserver.pid" "$run/kube-apiserver.log" "${args[@]}" ||
			die "start-apiserver: could not start kube-apiserver"
		wait_apiserver_ready "$run" || rc=$?
		((rc == 2)) || break
		log "start-apiserver: port still in use; retrying ($attempt/5)"
		sleep 1
	done
	((rc == 0)) || die "start-apiserver: kube-apiserver did not become ready in $run"
	log "start-apiserver: up in $((SECONDS - start))s, pid $(<"$run/kube-apiserver.pid")"
}

cmd_env() {
	if [[ ! -f $ENV_FILE ]]; then
		cmd_install >&2
	fi
	printf '%s\n' "$ENV_FILE"
}

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
