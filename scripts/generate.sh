#!/usr/bin/env bash
# Regenerates every generated file in the repository, with one command:
#   - codegen/testdata/schemas/*.json: the test providers' schemas, read from the real provider
#     binaries with `kraken schema` (needs `scripts/testenv.sh install`);
#   - generated-crds/<provider>/: the CRDs codegen makes from those schemas (codegen's golden
#     test rewrites them);
#   - generated-crds/core/: the CRDs of Kraken's own kinds, derived from their Rust types;
#   - charts/kraken/crds/: a copy of those, which Helm installs before the chart.
#
# Usage: scripts/generate.sh           regenerate in place
#        scripts/generate.sh --check   regenerate, then fail if anything differs from what is
#                                      committed (CI runs this)
set -euo pipefail
cd "$(dirname "$0")/.."

check=0
case "${1:-}" in
  --check) check=1 ;;
  -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "generate.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
esac

envfile="${KRAKEN_TESTENV_DIR:-$HOME/.cache/kraken-testenv}/env"
if [ ! -f "$envfile" ]; then
  echo "generate.sh: $envfile is missing; run scripts/testenv.sh install first" >&2
  exit 1
fi
# shellcheck disable=SC1090
. "$envfile"

cargo build --quiet -p kraken-bridge --bin kraken
kraken="${CARGO_TARGET_DIR:-target}/debug/kraken"

schemas=codegen/testdata/schemas
mkdir -p "$schemas"
"$kraken" schema "$KRAKEN_TEST_PROVIDER_RANDOM" --pretty > "$schemas/random.json"
"$kraken" schema "$KRAKEN_TEST_PROVIDER_TIME" --pretty > "$schemas/time.json"
"$kraken" schema "$KRAKEN_TEST_PROVIDER_NULL" --pretty > "$schemas/null.json"
"$kraken" schema "$KRAKEN_TEST_PROVIDER_FIXTURE" --pretty \
  --address registry.kraken.dev/kraken/fixture > "$schemas/fixture.json"

KRAKEN_UPDATE_GOLDEN=1 cargo test --quiet -p kraken-codegen --test golden >/dev/null
# The core kinds (ProviderConfig, …) are derived from Rust types in bridge/core-kinds.
KRAKEN_UPDATE_GOLDEN=1 cargo test --quiet -p kraken-core-kinds --lib core_crds >/dev/null
rm -rf charts/kraken/crds
mkdir -p charts/kraken/crds
cp generated-crds/core/*.kraken.dev_*.yaml charts/kraken/crds/

if [ "$check" = 1 ]; then
  stale=$(git status --porcelain -- "$schemas" generated-crds charts/kraken/crds)
  if [ -n "$stale" ]; then
    echo "generate.sh: generated files differ from what is committed:" >&2
    echo "$stale" >&2
    git --no-pager diff --stat -- "$schemas" generated-crds charts/kraken/crds >&2
    echo "run scripts/generate.sh and commit the result" >&2
    exit 1
  fi
  echo "generated files are up to date" >&2
fi
