#!/usr/bin/env bash
# Builds Kraken's OCI image with buildah: no daemon, no base image, no network.
#
# Usage: scripts/image.sh build [options]
#
#   --binary PATH        put this kraken binary in the image (default: build one with
#                        `cargo build --release --locked -p kraken-bridge`)
#   --tag NAME           the image's name (default: kraken:<version>)
#   --oci-archive FILE   also write the image as an OCI archive (a tar of an OCI image layout),
#                        ready for `skopeo copy oci-archive:FILE docker://...` or `buildah push`
#   --storage DIR        keep buildah's images under DIR instead of its default store
#                        (/var/lib/containers as root); DIR/run holds its run state
#   --source URL         the org.opencontainers.image.source label (default: none)
#
# Environment: SOURCE_DATE_EPOCH (default: the last commit's time) fixes every timestamp in
# the image; KRAKEN_IMAGE_STORAGE_DRIVER (default vfs, which needs no kernel overlay support).
#
# What goes in (image/Containerfile lays it out, FROM scratch): the stripped binary, the C
# runtime it links (found with ldd: libc, libm, libgcc_s and the loader, copied from this
# machine), the CA certificates of this machine, /etc/passwd and /etc/group naming the
# unprivileged user kraken (65532), and its writable directories. No shell, no package manager.
#
# Reproducible: the same binary, the same libraries and certificates and the same
# SOURCE_DATE_EPOCH give the same image digest (tests/tests/image.rs builds twice and compares).
# The binary itself is reproducible from the same sources only with the same toolchain, the
# same dependency sources and the same paths (rustc embeds the paths of the crates it
# compiles in panic messages).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
LOG_TAG=image
# shellcheck source=scripts/lib/common.sh
source scripts/lib/common.sh

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

[[ ${1:-} == build ]] || {
	usage >&2
	exit 2
}
shift
binary="" tag="" archive="" storage="" source_url=""
while (($#)); do
	case $1 in
	--binary) binary=${2:?--binary needs a path} && shift 2 ;;
	--tag) tag=${2:?--tag needs a name} && shift 2 ;;
	--oci-archive) archive=${2:?--oci-archive needs a file} && shift 2 ;;
	--storage) storage=${2:?--storage needs a directory} && shift 2 ;;
	--source) source_url=${2:?--source needs a URL} && shift 2 ;;
	-h | --help) usage && exit 0 ;;
	*) die "unknown option $1 (see scripts/image.sh --help)" ;;
	esac
done

command -v buildah >/dev/null || die "buildah is required (Debian: apt-get install buildah)"
command -v strip >/dev/null || die "strip is required (Debian: apt-get install binutils)"
[[ $(id -u) == 0 ]] || die "buildah with --isolation chroot needs root here (run as root)"

version=$(sed -n '/^\[workspace.package\]/,/^\[/{s/^version = "\(.*\)"/\1/p}' Cargo.toml)
[[ -n $version ]] || die "no version in Cargo.toml's [workspace.package]"
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if [[ $revision != unknown ]] && [[ -n $(git status --porcelain 2>/dev/null) ]]; then
	revision=$revision-dirty
fi
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
[[ $epoch =~ ^[0-9]+$ ]] || die "SOURCE_DATE_EPOCH must be seconds since 1970, not $epoch"
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
tag=${tag:-kraken:$version}

if [[ -z $binary ]]; then
	log "building kraken (cargo build --release --locked -p kraken-bridge)"
	cargo build --release --locked -p kraken-bridge --bin kraken
	binary=${CARGO_TARGET_DIR:-$root/target}/release/kraken
fi
[[ -x $binary ]] || die "$binary is not an executable"

ctx=$(mktemp -d "${TMPDIR:-/tmp}/kraken-image.XXXXXX")
trap 'rm -rf "$ctx"' EXIT
rootfs=$ctx/rootfs
# The parents of the kraken user's directories exist first, so that they stay root's.
mkdir -p "$rootfs/usr/local/bin" "$rootfs/etc/ssl/certs" "$rootfs/tmp" "$rootfs/home" \
	"$rootfs/var/cache/kraken" "$ctx/empty"

strip --strip-all -o "$rootfs/usr/local/bin/kraken" "$binary"

# The dynamic loader and every library ldd resolves, at the same paths as here.
libs=$(ldd "$rootfs/usr/local/bin/kraken" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}')
[[ -n $libs ]] || die "ldd found no libraries for $binary (a static binary needs none: remove this check)"
for lib in $libs; do
	mkdir -p "$rootfs$(dirname "$lib")"
	cp -L "$lib" "$rootfs$lib"
done

ca=${KRAKEN_IMAGE_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
[[ -s $ca ]] || die "no CA bundle at $ca (Debian: apt-get install ca-certificates)"
cp -L "$ca" "$rootfs/etc/ssl/certs/ca-certificates.crt"

printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' \
	'kraken:x:65532:65532:kraken:/home/kraken:/sbin/nologin' >"$rootfs/etc/passwd"
printf '%s\n' 'root:x:0:' 'kraken:x:65532:' >"$rootfs/etc/group"
# Name lookups: /etc/hosts first, then DNS (the runtime mounts /etc/hosts and /etc/resolv.conf).
printf '%s\n' 'passwd: files' 'group: files' 'hosts: files dns' >"$rootfs/etc/nsswitch.conf"

chmod -R u=rwX,go=rX "$rootfs" "$ctx/empty"
chmod 0755 "$rootfs/usr/local/bin/kraken"
chmod 1777 "$rootfs/tmp"
find "$ctx" -exec touch -h -d "@$epoch" {} +

storage_args=(--storage-driver "${KRAKEN_IMAGE_STORAGE_DRIVER:-vfs}")
if [[ -n $storage ]]; then
	mkdir -p "$storage/run"
	storage_args+=(--root "$storage" --runroot "$storage/run")
fi
labels=()
[[ -z $source_url ]] || labels+=(--label "org.opencontainers.image.source=$source_url")

log "building $tag (version $version, revision $revision, created $created)"
buildah "${storage_args[@]}" bud --quiet --isolation chroot --timestamp "$epoch" \
	--build-arg "VERSION=$version" --build-arg "REVISION=$revision" \
	--build-arg "CREATED=$created" "${labels[@]}" \
	-f "$root/image/Containerfile" -t "$tag" "$ctx" >/dev/null

size=$(buildah "${storage_args[@]}" images --format '{{.Size}}' "$tag" | head -n1)
if [[ -n $archive ]]; then
	mkdir -p "$(dirname "$archive")"
	rm -f "$archive"
	buildah "${storage_args[@]}" push --quiet "$tag" "oci-archive:$archive:$tag" >/dev/null
	# The OCI manifest's digest: what a registry shows after `skopeo copy` of the archive.
	digest=$(tar -xOf "$archive" index.json | grep -o '"digest":"sha256:[0-9a-f]*"' | head -n1 | cut -d'"' -f4)
else
	digest=$(buildah "${storage_args[@]}" images --digests --format '{{.Digest}}' "$tag" | head -n1)
fi
log "built $tag: digest $digest, size $size${archive:+, archive $archive}"
printf '%s\n' "$digest"
