# shellcheck shell=bash
#
# scripts/testenv/peers.sh — how each test peer is built: the Go peers through wrapper modules,
# moto into a venv. `install` (testenv/install.sh) calls these.
#
# Sourced by scripts/testenv.sh (which sets the pinned versions and locations), never run.

# --------------------------------------------------------------------------------------------
# Building the Go peers (through wrapper modules: see scripts/lib/go.sh)
# --------------------------------------------------------------------------------------------

k8s_wrapper() {
	local minor_patch=${K8S_VERSION#v1.}
	# Staging modules are published as v0.<minor>.<patch> alongside k8s.io/kubernetes v1.<minor>.<patch>.
	prepare_wrapper "$SRC_DIR/k8s-$K8S_VERSION" k8s.io/kubernetes "$K8S_VERSION" "v0.$minor_patch" \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl \
		k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler
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

# The controllers (Deployments, ReplicaSets, ServiceAccounts, garbage collection, Namespaces)
# and the scheduler, for the tests whose Pods a test kubelet runs (tests/src/kubelet.rs). There
# is no kubelet: these two make Deployments, scheduling and bound ServiceAccount tokens real.
build_kube_controller_manager() {
	k8s_wrapper
	go_build "$SRC_DIR/k8s-$K8S_VERSION" k8s.io/kubernetes/cmd/kube-controller-manager "$1" "$(k8s_ldflags)"
}

build_kube_scheduler() {
	k8s_wrapper
	go_build "$SRC_DIR/k8s-$K8S_VERSION" k8s.io/kubernetes/cmd/kube-scheduler "$1" "$(k8s_ldflags)"
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

