# shellcheck shell=bash
#
# scripts/lib/common.sh — helpers shared by scripts/testenv.sh and scripts/aws-schema.sh: messages,
# running a step into a log file, free loopback ports, recognising our own processes.
#
# Sourced, never run. The caller sets LOG_TAG (the prefix of every message) before using log/die.

log() { printf '%s: %s\n' "${LOG_TAG:-${0##*/}}" "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

# run_logged LOGFILE CMD...: runs CMD with `set -e` in force and its output in LOGFILE, and stores
# its exit status in RUN_RC. Bash ignores `set -e` in everything called from an if/||/&& context,
# subshells included, which would let a half-failed build look successful. So run_logged and its
# callers are invoked as plain statements and report through variables, not exit codes.
RUN_RC=0
# shellcheck disable=SC2034 # RUN_RC is read by the callers.
run_logged() {
	local logfile=$1
	shift
	set +e
	(
		set -e
		"$@"
	) >"$logfile" 2>&1 </dev/null
	RUN_RC=$?
	set -e
}

# Prints N distinct free TCP ports on 127.0.0.1. All sockets are held open until all ports
# are chosen, so the N ports differ; like envtest, there is a small window before the server
# binds in which another process could take one (`up` retries on "address already in use").
free_ports() {
	"${PYTHON:-python3}" - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

# True if something accepts TCP connections on 127.0.0.1:$1 (bash's /dev/tcp, no curl needed).
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# True if pid file $1 names a live process whose command line mentions $2. The second check
# keeps us from signalling an unrelated process that reused a stale pid.
pid_alive() {
	local pidfile=$1 needle=$2 pid
	[[ -s $pidfile ]] || return 1
	pid=$(<"$pidfile")
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	[[ -r /proc/$pid/cmdline ]] || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$needle"
}

# pid_gone PIDFILE NEEDLE: whether the process is gone, seen so twice 0.2 s apart. While a
# server is starting, its wrapper shell execs it, and /proc/PID/cmdline reads empty during the
# exec: one look can take a starting server for a dead one (seen under load, as "etcd failed to
# start" with an empty log).
pid_gone() {
	pid_alive "$1" "$2" && return 1
	sleep 0.2
	! pid_alive "$1" "$2"
}
