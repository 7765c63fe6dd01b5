# shellcheck shell=bash
#
# scripts/lib/go.sh — building Go programs (Kubernetes, etcd, helm, Terraform, Terraform providers)
# from their Go modules through wrapper modules, and placing providers in a Terraform filesystem
# mirror. Sourced by scripts/testenv.sh and scripts/aws-schema.sh, never run.
#
# Needs lib/common.sh, and from the caller: GO_CMD (set it from find_go), SRC_DIR (where wrapper
# modules live and `go mod download` runs), PLUGIN_DIR and PLATFORM (for place_in_mirror).
#
# Why wrapper modules: `go install module/cmd@version` refuses modules whose go.mod has replace
# directives (k8s.io/kubernetes replaces all its k8s.io/* staging modules with ./staging/... paths).
# The workaround: a tiny wrapper module that requires the upstream module and, where needed,
# re-states those replaces with the published versions of the staging modules. The wrapper also
# copies upstream's `go` and `godebug` lines so the binary keeps upstream's language version and
# GODEBUG defaults.

# Fail loudly if a module asks for a newer Go instead of silently downloading a toolchain.
export GOTOOLCHAIN=local

# Where this file is, for the helpers beside it.
GO_SH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

find_go() {
	if [[ -n ${GO:-} ]]; then
		printf '%s\n' "$GO"
	elif command -v go >/dev/null 2>&1; then
		command -v go
	elif [[ -x /usr/local/go/bin/go ]]; then
		printf '%s\n' /usr/local/go/bin/go
	else
		return 1
	fi
}

# json_field NAME < go-mod-download-json: prints the string field NAME of the top-level object.
json_field() { sed -n "s/^[[:space:]]*\"$1\": \"\(.*\)\",*\$/\1/p" | head -n 1; }

# go_mod_download MODULE VERSION: downloads MODULE@VERSION into the module cache and prints what
# `go mod download -json` says about it (Dir, GoMod, Sum, GoModSum, ...). Fails, saying why on
# stderr, when the download failed.
go_mod_download() {
	local json rc=0 err
	json=$(cd "$SRC_DIR" && "$GO_CMD" mod download -json "$1@$2" 2>&1) || rc=$?
	err=$(json_field Error <<<"$json")
	if ((rc != 0)) || [[ -n $err ]]; then
		printf 'cannot download %s@%s:\n%s\n' "$1" "$2" "${err:-$json}" >&2
		return 1
	fi
	printf '%s\n' "$json"
}

# gomod_of MODULE VERSION: downloads the module and prints the path of its cached go.mod.
gomod_of() {
	local json gomod
	json=$(go_mod_download "$1" "$2") || return 1
	gomod=$(json_field GoMod <<<"$json")
	[[ -f $gomod ]] || {
		printf 'no go.mod for %s@%s in:\n%s\n' "$1" "$2" "$json" >&2
		return 1
	}
	printf '%s\n' "$gomod"
}

# upstream_replaces GOMOD STAGING: re-states GOMOD's replace directives for the wrapper module
# (replaces only take effect in the main module, so the wrapper has to repeat them).
#   - `M => other/module vX` is copied as is;
#   - `M => ./path` (a directory of upstream's repository) becomes `M => M STAGING`, i.e. the
#     published version of that module. With STAGING "-" such lines are dropped (for etcd, whose
#     local replaces only point at sibling modules its require block already pins); with STAGING
#     empty they are an error, since the wrapper cannot reproduce them.
upstream_replaces() {
	awk -v ver="$2" '
		/^replace[ \t]*\([ \t]*$/ { blk = 1; next }
		blk && /^[ \t]*\)/        { blk = 0; next }
		blk || /^replace[ \t]/ {
			sub(/^replace[ \t]+/, "")
			$0 = $0
			for (i = 1; i < NF && $i != "=>"; i++) {}
			if ($i != "=>") next
			if ($(i + 1) ~ /^\.\.?\//) {
				if (ver == "-") next
				if (ver == "") { bad = bad " " $1; next }
				printf "\t%s => %s %s\n", $1, $1, ver
			} else {
				print "\t" $0
			}
		}
		END {
			if (bad != "") {
				print "go.mod replaces these modules with local paths, which a wrapper cannot reproduce:" bad > "/dev/stderr"
				exit 3
			}
		}' "$1"
}

# prepare_wrapper [--gomod GOMOD] [--source FORK] DIR MODULE VERSION STAGING PKG...: creates (once)
# the wrapper module in DIR that requires MODULE@VERSION and imports PKG... from a build-tagged
# tools.go, so that `go mod tidy` records every dependency. STAGING: see upstream_replaces.
#   --source FORK  build MODULE from FORK@VERSION, a fork whose go.mod declares MODULE: the wrapper
#                  requires MODULE at a placeholder version and replaces it with FORK VERSION
#                  (FORK equal to MODULE means no fork).
#   --gomod GOMOD  the go.mod of the source, already downloaded (and checked) by the caller;
#                  default: gomod_of.
# A directory without the .ready stamp (an interrupted earlier attempt), or whose stamp names
# other packages, is made again from scratch.
prepare_wrapper() {
	local gomod="" source=""
	while (($#)); do
		case $1 in
		--gomod) gomod=$2 && shift 2 ;;
		--source) source=$2 && shift 2 ;;
		*) break ;;
		esac
	done
	local dir=$1 module=$2 version=$3 staging=$4 replaces pkg
	shift 4
	# The stamp holds the packages the wrapper was made for: a wrapper asked for more is made again.
	[[ -f $dir/.ready && $(<"$dir/.ready") == "$*" ]] && return 0
	[[ $source != "$module" ]] || source=""
	rm -rf "$dir"
	mkdir -p "$dir"
	[[ -n $gomod ]] || gomod=$(gomod_of "${source:-$module}" "$version")
	replaces=$(upstream_replaces "$gomod" "$staging")
	if [[ -n $source ]]; then
		replaces+=${replaces:+$'\n'}$'\t'"$module => $source $version"
	fi
	{
		if [[ -n $source ]]; then
			printf '// Generated by scripts/%s: wrapper to build %s from %s@%s.\n' "${0##*/}" "$module" "$source" "$version"
		else
			printf '// Generated by scripts/%s: wrapper to build %s@%s.\n' "${0##*/}" "$module" "$version"
		fi
		printf 'module kraken.local/testenv/%s\n\n' "${dir##*/}"
		grep -E '^(go|godebug)[[:space:]]' "$gomod" || printf 'go 1.21\n'
		if [[ -n $source ]]; then
			# Any version does: the replace below decides what is built.
			printf '\nrequire %s v0.0.0-00010101000000-000000000000\n' "$module"
		else
			printf '\nrequire %s %s\n' "$module" "$version"
		fi
		if [[ -n $replaces ]]; then
			printf '\nreplace (\n%s\n)\n' "$replaces"
		fi
	} >"$dir/go.mod"
	{
		printf '//go:build tools\n\n// Generated by scripts/%s.\npackage tools\n\nimport (\n' "${0##*/}"
		for pkg in "$@"; do printf '\t_ "%s"\n' "$pkg"; done
		printf ')\n'
	} >"$dir/tools.go"
	(cd "$dir" && "$GO_CMD" mod tidy)
	printf '%s' "$*" >"$dir/.ready"
}

# go_build [--timed] DIR PKG OUT [LDFLAGS]: builds PKG inside wrapper DIR into OUT (atomically, so
# an interrupted build never leaves a half-written binary that a later run would take as cached).
# --timed runs the compiler under `/usr/bin/time -v` (if installed), which logs the peak memory.
go_build() {
	local timecmd=()
	if [[ $1 == --timed ]]; then
		shift
		if [[ -x /usr/bin/time ]]; then timecmd=(/usr/bin/time -v); fi
	fi
	local dir=$1 pkg=$2 out=$3 ldflags=${4:-}
	(cd "$dir" && "${timecmd[@]}" "$GO_CMD" build -trimpath -ldflags "-s -w $ldflags" -o "$out.tmp" "$pkg")
	mv -f "$out.tmp" "$out"
}

# build_provider [--gomod GOMOD] [--source FORK] [--timed] NAME MODULE VERSION OUT [LDFLAGS]: builds
# the Terraform provider whose main package is the root of MODULE@VERSION into OUT, through the
# wrapper $SRC_DIR/provider-NAME-VERSION. The options are prepare_wrapper's and go_build's.
build_provider() {
	local wrapper_opts=() build_opts=()
	while (($#)); do
		case $1 in
		--gomod | --source) wrapper_opts+=("$1" "$2") && shift 2 ;;
		--timed) build_opts+=("$1") && shift ;;
		*) break ;;
		esac
	done
	local dir=$SRC_DIR/provider-$1-$3
	prepare_wrapper "${wrapper_opts[@]}" "$dir" "$2" "$3" "" "$2"
	go_build "${build_opts[@]}" "$dir" "$2" "$4" "${5:-}"
}

# place_in_mirror ADDR VERSION BINARY: hard-links BINARY into the unpacked filesystem-mirror layout
# HOST/NAMESPACE/TYPE/VERSION/OS_ARCH/terraform-provider-TYPE_vVERSION under PLUGIN_DIR and drops
# other versions of the same provider, so Terraform never picks a stale build, then writes the
# mirror's lock file (scripts/lib/mirror_lock.py: Kraken launches from a --plugin-dir only what its
# lock file pins). Prints the mirror path.
place_in_mirror() {
	local addr=$1 version=$2 bin=$3 type dir dest old
	type=${addr##*/}
	dir=$PLUGIN_DIR/$addr/$version/$PLATFORM
	dest=$dir/terraform-provider-${type}_v$version
	mkdir -p "$dir"
	# A hard link costs no space; Terraform hashes the file content, so a symlink would also do,
	# but a real file keeps the mirror usable if the cache's bin/ is pruned.
	if [[ ! $dest -ef $bin ]]; then
		ln -f "$bin" "$dest" 2>/dev/null || cp -f "$bin" "$dest"
	fi
	for old in "$PLUGIN_DIR/$addr"/*; do
		[[ -d $old && ${old##*/} != "$version" ]] && rm -rf "$old"
	done
	# The aws build places its package beside the others' from another process: one writer at
	# a time, each writing the lock of the whole mirror.
	flock "$PLUGIN_DIR/.lock-file.lock" "${PYTHON:-python3}" "$GO_SH_DIR/mirror_lock.py" "$PLUGIN_DIR" >&2 ||
		die "writing the lock file of $PLUGIN_DIR failed"
	printf '%s\n' "$dest"
}
