#!/usr/bin/env bash
# make fuzz: every Go fuzz target of the repository (each `func FuzzXxx(f
# *testing.F)` in a _test.go file), one after the other, FUZZTIME each.
# `go test -fuzz` takes one target of one package at a time, hence this
# list. An input that fails is written by go test to the package's
# testdata/fuzz/<target>/ and the run goes on with the next target; the
# script exits 1 if any failed. Commit such a file as a regression seed
# (plain `go test` runs it from then on) and fix the bug.
#
#   make fuzz                          # 1m per target
#   FUZZTIME=10s scripts/fuzz.sh       # shorter (make test runs 3s each)
#   FUZZ=UDP scripts/fuzz.sh           # only targets whose name matches the regexp
#   FUZZFLAGS=-race scripts/fuzz.sh    # extra go test flags
#
# Privileged targets (the XDP programs through BPF_PROG_TEST_RUN) need
# root; without it they skip, unless L4LB_REQUIRE_PRIV=1 makes them fail.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-1m}
FUZZ=${FUZZ:-.}
read -r -a flags <<<"${FUZZFLAGS:-}"

# targets: "dir name" per fuzz target, sorted, from the tracked and new
# (not ignored) test files.
targets() {
  git ls-files -co --exclude-standard '*_test.go' |
    xargs grep -H -E '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' |
    sed -E 's#^(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\(.*#\1 \2#; s#^[^/ ]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\(.*#. \1#' |
    sort -u
}

mapfile -t list < <(targets | awk -v re="$FUZZ" '$2 ~ re')
[ ${#list[@]} -gt 0 ] || { echo "no fuzz target matches FUZZ=$FUZZ" >&2; exit 1; }
echo "fuzz: ${#list[@]} targets, $FUZZTIME each" >&2
failed=()
start=$(date +%s)
for entry in "${list[@]}"; do
  read -r dir name <<<"$entry"
  t0=$(date +%s)
  if "$GO" test "${flags[@]}" -run '^$' -fuzz "^$name\$" -fuzztime "$FUZZTIME" "./$dir/" >"${TMPDIR:-/tmp}/fuzz-$$.log" 2>&1; then
    printf 'ok   %-28s %-14s %3ds  %s\n' "$name" "./$dir" $(($(date +%s) - t0)) \
      "$(grep -E '^fuzz: elapsed' "${TMPDIR:-/tmp}/fuzz-$$.log" | tail -n 1 | sed -E 's/.*execs: ([0-9]+).*/\1 execs/')" >&2
  elif grep -q -x -E '[[:space:]]*context deadline exceeded' "${TMPDIR:-/tmp}/fuzz-$$.log" &&
    ! grep -q 'Failing input written' "${TMPDIR:-/tmp}/fuzz-$$.log"; then
    # go test's engine can report its own deadline as the target's error
    # when FUZZTIME ends while it gathers the cached corpus' coverage or
    # minimises a new input: no input failed.
    printf 'ok   %-28s %-14s %3ds  (FUZZTIME ended before the engine settled: "context deadline exceeded", no failing input)\n' \
      "$name" "./$dir" $(($(date +%s) - t0)) >&2
  else
    printf 'FAIL %-28s %-14s %3ds\n' "$name" "./$dir" $(($(date +%s) - t0)) >&2
    grep -v -E '^fuzz: elapsed' "${TMPDIR:-/tmp}/fuzz-$$.log" | sed 's/^/     /' >&2
    failed+=("$name")
  fi
done
rm -f "${TMPDIR:-/tmp}/fuzz-$$.log"
echo "fuzz: $(($(date +%s) - start))s in all" >&2
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failed: ${failed[*]} (the failing inputs are in the packages' testdata/fuzz/)" >&2
  exit 1
fi
