#!/usr/bin/env bash
# Checks that docs/benchmarks.md, docs/experiments.md and the figure scripts docs/img/*.gp are what
# the committed data set docs/data/ gives: regenerates them with experiments/benchmarks_doc into a
# temporary directory and compares byte for byte. The PNGs are not compared (they need gnuplot and
# their bytes depend on its version and fonts); the .gp scripts, which hold every plotted number
# and the series files they read, are.
#
#   scripts/check-docs.sh [--tool PATH/benchmarks_doc] [--build DIR]
#
# Without --tool it uses DIR/experiments/benchmarks_doc (default DIR: build), building that target
# first when it is missing. Exit 0: up to date; 1: a difference (shown as a diff); 2: usage or a
# missing tool. ctest runs it as "docs: ..." (label docs). To refresh the docs after changing the
# generator or the template: scripts/run-benchmarks.sh --doc-only --out docs/data
set -u -o pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD="$ROOT/build"
TOOL=""
while [ $# -gt 0 ]; do
  case "$1" in
    --tool) TOOL="$2"; shift 2 ;;
    --build) BUILD="$2"; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "check-docs.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$TOOL" ]; then
  TOOL="$BUILD/experiments/benchmarks_doc"
  if [ ! -x "$TOOL" ]; then
    cmake --build "$BUILD" --target benchmarks_doc >&2 || {
      echo "check-docs.sh: cannot build benchmarks_doc in $BUILD (configure it with scripts/build.sh first)" >&2
      exit 2
    }
  fi
fi
[ -x "$TOOL" ] || { echo "check-docs.sh: $TOOL is not an executable" >&2; exit 2; }
for f in docs/data/status.tsv docs/experiments.md.in docs/benchmarks.md docs/experiments.md; do
  [ -e "$ROOT/$f" ] || { echo "check-docs.sh: $f is missing" >&2; exit 1; }
done

TMP=$(mktemp -d "${TMPDIR:-/tmp}/edl-check-docs.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
# The same layout as docs/ (the outputs name paths relative to the documents' directory).
mkdir -p "$TMP/docs"
cp -r "$ROOT/docs/data" "$TMP/docs/data"
cp "$ROOT/docs/experiments.md.in" "$TMP/docs/"
"$TOOL" --in "$TMP/docs/data" --doc "$TMP/docs/benchmarks.md" --img-dir "$TMP/docs/img" \
  --experiments-in "$TMP/docs/experiments.md.in" --experiments "$TMP/docs/experiments.md" > /dev/null || {
  echo "check-docs.sh: benchmarks_doc failed on docs/data" >&2
  exit 1
}

rc=0
for f in benchmarks.md experiments.md; do
  if ! diff -u "$ROOT/docs/$f" "$TMP/docs/$f" > "$TMP/diff" 2>&1; then
    echo "check-docs.sh: docs/$f differs from what docs/data gives:" >&2
    head -n 80 "$TMP/diff" >&2
    rc=1
  fi
done
# The figure scripts: the same set, the same bytes.
(cd "$ROOT/docs/img" 2>/dev/null && ls -1 -- *.gp 2>/dev/null) | sort > "$TMP/have"
(cd "$TMP/docs/img" 2>/dev/null && ls -1 -- *.gp 2>/dev/null) | sort > "$TMP/want"
if ! diff -u "$TMP/have" "$TMP/want" > "$TMP/diff"; then
  echo "check-docs.sh: docs/img/*.gp is not the set of figures docs/data gives (- committed, + expected):" >&2
  cat "$TMP/diff" >&2
  rc=1
fi
while read -r gp; do
  [ -e "$ROOT/docs/img/$gp" ] || continue
  if ! diff -u "$ROOT/docs/img/$gp" "$TMP/docs/img/$gp" > "$TMP/diff" 2>&1; then
    echo "check-docs.sh: docs/img/$gp differs:" >&2
    head -n 40 "$TMP/diff" >&2
    rc=1
  fi
done < "$TMP/want"
[ $rc -eq 0 ] && echo "check-docs.sh: docs/benchmarks.md, docs/experiments.md and docs/img/*.gp match docs/data"
exit $rc
