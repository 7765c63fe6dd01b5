#!/usr/bin/env python3
"""Runs the workspace's test binaries side by side: what `cargo test --workspace` does, but
several binaries at once instead of one after the other.

Most of Kraken's end-to-end tests wait (on a control plane, an operator's reconcile, a
provider), so one binary at a time left the 2 cores of the CI machine idle for most of the run.
Each binary still runs its own tests in threads, as cargo runs them.

    run_tests.py [--jobs N] [--timeout SECONDS] [--log-dir DIR] [--times FILE] [-- CARGO_ARGS...]

It builds the tests with `cargo test --no-run --message-format=json CARGO_ARGS`, then runs every
test executable with the environment and working directory cargo gives it. Binaries are started
longest first (the durations of the last run are kept in --times), and a binary counts as
`HEAVY` weight when it keeps the cores busy by itself (the API server installing 1,616 CRDs, the
hashicorp/aws provider, three operators), so two heavy ones share the machine with nothing else.
A binary's output goes to its own log; a failed binary's failures are printed when it ends and
again, with the summary, at the very end, where CI's excerpt of the output shows them.
Exits 1 if any binary failed or timed out.

Benchmarks built with the tests (CARGO_ARGS with `--all-targets` or `--benches`) run too, once
each at a tiny size (`KRAKEN_BENCH_SMOKE=1`, what scripts/bench-smoke.sh does one after the
other), named `bench:NAME`: a broken bench fails the run like a failed test, and its smoke run
overlaps the tests instead of following them. A bench passes when it exits 0.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

# Binaries that load the machine by themselves; they count twice against --jobs.
HEAVY = {
    "aws_crds",  # the API server validates and stores 1,616 large CRDs
    "aws_bridge",  # hashicorp/aws (~870 MB binary) and moto
    "aws_chaos",
    "convert_aws",
    "operator_shards",  # three operators over thousands of objects
    # Two operators, 200 objects and a bound on the handover's time: beside three other
    # binaries on 2 cores the new leader's first write came 5 s after it led instead of 1.5 s.
    "operator_failover",
    "bench:aws",  # hashicorp/aws, moto and Terraform at two parallelism levels
}


def log(msg):
    print(f"run-tests: {msg}", file=sys.stderr, flush=True)


def build(cargo_args):
    """Builds every test target and returns [(name, executable, manifest_dir, package)]."""
    cmd = ["cargo", "test", "--no-run", "--message-format=json-render-diagnostics", *cargo_args]
    log(" ".join(cmd))
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    found = []
    for line in proc.stdout.splitlines():
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        target = msg["target"]
        # Bins are also built as plain executables for the tests to run; benches without
        # libtest's harness are not built in test mode at all.
        if not msg.get("profile", {}).get("test") and target["kind"][0] != "bench":
            continue
        if any(f[1] == msg["executable"] for f in found):
            continue
        package = msg["package_id"]
        manifest_dir = str(Path(msg["manifest_path"]).parent)
        pkg_name = package_name(msg["manifest_path"])
        kind = target["kind"][0]
        if kind == "bench":
            name = f"bench:{target['name']}"
        elif kind == "test":
            name = target["name"]
        else:
            name = f"{pkg_name} ({kind})"
        found.append((name, msg["executable"], manifest_dir, package))
    if proc.returncode != 0:
        log(f"building the tests failed (exit {proc.returncode})")
        sys.exit(proc.returncode)
    return found


def package_name(manifest_path):
    """The `name` of a Cargo.toml's [package]."""
    text = Path(manifest_path).read_text()
    m = re.search(r'^\[package\][^\[]*?^name\s*=\s*"([^"]+)"', text, re.M | re.S)
    return m.group(1) if m else Path(manifest_path).parent.name


def load_times(path):
    try:
        return {k: float(v) for k, v in json.loads(Path(path).read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def save_times(path, times):
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(times, indent=1, sort_keys=True))
    except OSError as err:
        log(f"could not record the durations in {path}: {err}")


def failures(log_path, limit=200):
    """The part of a test binary's output that says what failed: cargo's `failures:` sections
    (each failed test's output and panic), else the tail."""
    try:
        text = Path(log_path).read_text(errors="replace")
    except OSError:
        return "(no output)"
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if l.strip() == "failures:"), None)
    part = lines[start:] if start is not None else lines[-60:]
    if len(part) > limit:
        part = part[: limit // 2] + [f"... ({len(part) - limit} lines cut; whole log: {log_path})"] + part[-limit // 2 :]
    return "\n".join(part)


class Run:
    def __init__(self, name, exe, cwd, log_dir):
        self.name, self.exe, self.cwd = name, exe, cwd
        self.log_path = Path(log_dir) / (re.sub(r"[^A-Za-z0-9_.-]", "_", name) + ".log")
        self.weight = 2 if name in HEAVY else 1
        self.proc = None
        self.start = 0.0
        self.elapsed = 0.0
        self.result = None  # "ok" | "FAILED" | "TIMED OUT"

    def launch(self):
        env = dict(os.environ)
        env["CARGO_MANIFEST_DIR"] = self.cwd
        if self.name.startswith("bench:"):
            env["KRAKEN_BENCH_SMOKE"] = "1"
        self.out = open(self.log_path, "w")
        self.start = time.monotonic()
        # A session of its own, so a timeout can stop the binary and everything it started.
        self.proc = subprocess.Popen(
            [self.exe], cwd=self.cwd, env=env, stdout=self.out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )

    def poll(self, timeout):
        self.elapsed = time.monotonic() - self.start
        rc = self.proc.poll()
        if rc is None and self.elapsed > timeout:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.result = "TIMED OUT"
        elif rc is not None:
            self.result = "ok" if rc == 0 else "FAILED"
        if self.result:
            self.out.close()
        return self.result


def summary_counts(log_path):
    """passed/failed/ignored summed over the binary's `test result:` lines."""
    counts = [0, 0, 0]
    try:
        for m in re.finditer(r"test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored",
                             Path(log_path).read_text(errors="replace")):
            for i in range(3):
                counts[i] += int(m.group(i + 1))
    except OSError:
        pass
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("KRAKEN_TEST_JOBS", "4")),
                    help="weight of binaries run at once (a heavy binary weighs 2; default 4, or KRAKEN_TEST_JOBS)")
    ap.add_argument("--timeout", type=float, default=1500, help="seconds one binary may take (default 1500)")
    ap.add_argument("--log-dir", default="target/test-logs")
    ap.add_argument("--times", default=os.path.expanduser("~/.cache/kraken/test-times.json"))
    ap.add_argument("cargo_args", nargs="*")
    args = ap.parse_args()
    Path(args.log_dir).mkdir(parents=True, exist_ok=True)

    times = load_times(args.times)
    runs = [Run(n, e, d, args.log_dir) for n, e, d, _ in build(args.cargo_args)]
    # Longest first; a binary not timed before is assumed long.
    runs.sort(key=lambda r: -times.get(r.name, 1e9))
    log(f"{len(runs)} test binaries, up to {args.jobs} at once (heavy ones count twice); logs in {args.log_dir}")

    started = time.monotonic()
    pending, running, done = list(runs), [], []
    while pending or running:
        load = sum(r.weight for r in running)
        for r in list(pending):
            if load + r.weight <= args.jobs or not running:
                pending.remove(r)
                r.launch()
                running.append(r)
                load += r.weight
        time.sleep(0.2)
        for r in list(running):
            if r.poll(args.timeout):
                running.remove(r)
                done.append(r)
                passed, failed, ignored = summary_counts(r.log_path)
                log(f"{r.result:9} {r.name} in {r.elapsed:.1f}s ({passed} passed, {failed} failed, {ignored} ignored)")
                if r.result != "ok":
                    print(f"\n---- {r.name}: {r.result}\n{failures(r.log_path)}\n", file=sys.stderr, flush=True)

    total = time.monotonic() - started
    for r in done:
        if r.result == "ok":
            times[r.name] = round(r.elapsed, 1)
    save_times(args.times, times)
    bad = [r for r in done if r.result != "ok"]
    print("\n== test binaries by wall time", file=sys.stderr)
    for r in sorted(done, key=lambda r: -r.elapsed):
        passed, failed, ignored = summary_counts(r.log_path)
        print(f"{r.elapsed:8.1f}s  {r.result:9} {r.name} ({passed} passed)", file=sys.stderr)
    tests = sum(summary_counts(r.log_path)[0] for r in done)
    log(f"{len(done)} binaries, {tests} tests passed, in {total:.0f}s of wall time "
        f"(the binaries' own times add up to {sum(r.elapsed for r in done):.0f}s)")
    if bad:
        for r in bad:
            print(f"\n---- {r.name}: {r.result} (log: {r.log_path})\n{failures(r.log_path)}", file=sys.stderr)
        log(f"failed: {', '.join(r.name for r in bad)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
