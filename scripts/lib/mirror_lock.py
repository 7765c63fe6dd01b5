#!/usr/bin/env python3
"""Writes DIR/.terraform.lock.hcl for an unpacked provider mirror: one entry per provider
package in it, with the package's h1: hash.

Kraken launches a provider from a --plugin-dir only when that directory's lock file pins it, as
an administrator pins what may run (docs/security.md, "Only verified binaries run"). The test
peers' mirror is built here, so the test environment writes its lock file the way an
administrator would with `terraform providers lock -fs-mirror` or `kraken fetch --lock-file`.

This is an implementation of the h1: scheme of its own (Go's dirhash Hash1: the SHA-256 of
"<sha256 hex>  <relative path>\n" for every file, sorted by path, base64), apart from Kraken's
Rust one, so the operator's check is held to the scheme, not to itself.

Hashes are kept in DIR/.hashes.json by (path, size, mtime, inode), so a rerun hashes only the
packages that changed (hashicorp/aws is ~700 MB). Written atomically; safe to run concurrently
(the last writer wins, and every writer writes the same text for the same mirror).

Usage: mirror_lock.py DIR
"""

import base64
import hashlib
import json
import os
import sys
import tempfile

HEADER = (
    '# This file is maintained automatically by "terraform init".\n'
    "# Manual edits may be lost in future updates.\n"
)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def h1(pkg):
    files = []
    for root, _dirs, names in os.walk(pkg):
        for name in names:
            full = os.path.join(root, name)
            files.append(os.path.relpath(full, pkg).replace(os.sep, "/"))
    summary = hashlib.sha256()
    for rel in sorted(files, key=lambda s: s.encode()):
        summary.update(f"{sha256_file(os.path.join(pkg, rel))}  {rel}\n".encode())
    return "h1:" + base64.b64encode(summary.digest()).decode()


def stamp(pkg):
    parts = []
    for root, _dirs, names in os.walk(pkg):
        for name in sorted(names):
            st = os.stat(os.path.join(root, name))
            parts.append([os.path.join(root, name), st.st_size, st.st_mtime_ns, st.st_ino])
    return sorted(parts)


def packages(mirror):
    """(address, version, platform dir) for HOST/NAMESPACE/TYPE/VERSION/OS_ARCH."""
    for host in sorted(os.listdir(mirror)):
        if host.startswith("."):
            continue
        for ns in sorted(os.listdir(os.path.join(mirror, host))):
            for typ in sorted(os.listdir(os.path.join(mirror, host, ns))):
                base = os.path.join(mirror, host, ns, typ)
                if not os.path.isdir(base):
                    continue
                for version in sorted(os.listdir(base)):
                    for platform in sorted(os.listdir(os.path.join(base, version))):
                        pkg = os.path.join(base, version, platform)
                        if os.path.isdir(pkg):
                            yield f"{host}/{ns}/{typ}", version, pkg


def write_atomically(path, text):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def main(mirror):
    cache_path = os.path.join(mirror, ".hashes.json")
    try:
        with open(cache_path) as f:
            cache = json.load(f)
    except (OSError, ValueError):
        cache = {}
    entries = {}
    fresh = {}
    for address, version, pkg in packages(mirror):
        st = stamp(pkg)
        known = cache.get(pkg)
        digest = known["h1"] if known and known["stamp"] == st else h1(pkg)
        fresh[pkg] = {"stamp": st, "h1": digest}
        entries.setdefault(address, {}).setdefault(version, set()).add(digest)
    text = HEADER
    for address in sorted(entries):
        versions = entries[address]
        if len(versions) > 1:
            # A lock file pins one version per provider; the mirror keeps one (place_in_mirror).
            sys.exit(f"mirror_lock: {address} has several versions in {mirror}: {sorted(versions)}")
        (version, hashes), = versions.items()
        text += f'\nprovider "{address}" {{\n  version = "{version}"\n  hashes = [\n'
        for h in sorted(hashes):
            text += f'    "{h}",\n'
        text += "  ]\n}\n"
    write_atomically(os.path.join(mirror, ".terraform.lock.hcl"), text)
    write_atomically(cache_path, json.dumps(fresh, sort_keys=True))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
