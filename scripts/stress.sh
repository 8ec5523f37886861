#!/usr/bin/env bash
# make stress: the whole suite (what `make test` runs) RUNS times in a
# row with every core kept busy by LOAD busy loops, then a table of every
# test that failed in any run (scripts/stress/flaketable). A flaky test is
# a bug in the code or the test: this is how to find them on a machine
# like CI's, which is often busy.
#
#   make stress                 # 10 runs, one busy loop per core
#   RUNS=3 LOAD=4 make stress   # 3 runs, 4 busy loops
#   KEEP=1 ...                  # keep the runs' logs (printed at the end)
#
# Each run is `make test` with the go test step writing JSON (TEST_FLAGS=-json),
# under the same timeout; the busy loops are bounded (timeout) and killed
# by PID after each run. Exit status: 0 when every run passed.
set -uo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-10}
LOAD=${LOAD:-$(nproc)}
MAKE=${MAKE:-make}
OUT=$(mktemp -d "${TMPDIR:-/tmp}/l4lb-stress.XXXXXX")
BUSY=()
stop_load() {
  for p in "${BUSY[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${BUSY[@]}"; do wait "$p" 2>/dev/null; done
  BUSY=()
}
cleanup() {
  stop_load
  if [ "${KEEP:-0}" = 1 ]; then echo "logs kept in $OUT" >&2; else rm -rf "$OUT"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

go build -o "$OUT/flaketable" ./scripts/stress/flaketable || exit 2
passed=0
files=()
for i in $(seq "$RUNS"); do
  for _ in $(seq "$LOAD"); do
    timeout 3h sh -c 'while :; do :; done' &
    BUSY+=($!)
  done
  start=$(date +%s)
  if $MAKE test TEST_FLAGS=-json >"$OUT/run$i.json" 2>&1; then
    verdict=PASS
    passed=$((passed + 1))
  else
    verdict=FAIL
  fi
  stop_load
  files+=("$OUT/run$i.json")
  printf 'run %d/%d: %s in %ds (%d busy loops on %d cores, load average %s)\n' "$i" "$RUNS" "$verdict" \
    $(($(date +%s) - start)) "$LOAD" "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)" >&2
  if [ $verdict = FAIL ] && ! grep -q '"Action":"fail"' "$OUT/run$i.json"; then
    echo "  not a test failure (build, lint, generate-check or fuzz):" >&2
    grep -v '^{' "$OUT/run$i.json" | tail -n 15 | sed 's/^/    /' >&2
  fi
done
echo "$passed of $RUNS loaded runs passed" >&2
"$OUT/flaketable" "${files[@]}"
[ "$passed" = "$RUNS" ]
