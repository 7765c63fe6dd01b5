# shellcheck shell=bash
#
# scripts/testenv/servers.sh — `up`, `down`, `stop-apiserver`, `start-apiserver`: etcd +
# kube-apiserver on loopback (certificates, kubeconfig, start/stop, readiness).
#
# Sourced by scripts/testenv.sh (which sets the pinned versions and locations), never run.

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
	cd "$1" || return
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
		if pid_gone "$run/etcd.pid" "$run/"; then
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
		if pid_gone "$run/kube-apiserver.pid" "$run/"; then
			grep -q 'address already in use' "$run/kube-apiserver.log" && return 2
			show_failure "$run" kube-apiserver
			return 1
		fi
		if pid_gone "$run/etcd.pid" "$run/"; then
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

