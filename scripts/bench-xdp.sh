#!/usr/bin/env bash
# The XDP fast path's benchmarks: end to end in a one-arm DSR network in
# namespaces (udp request/reply and tcp connections through an xdp VIP, a
# proxy VIP and directly, in one run, interleaved round after round), and
# the programs' per-packet cost under BPF_PROG_TEST_RUN. Writes
# docs/bench-xdp.md (OUT to change it).
#
#   scripts/bench-xdp.sh            # 5 rounds, about 4 minutes
#   REPS=3 BENCHTIME=2s scripts/bench-xdp.sh
#
# Everything runs in namespaces the Go benchmarks make and remove; nothing
# in the root namespace is touched.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-5}
BENCHTIME=${BENCHTIME:-3s}
OUT=${OUT-docs/bench-xdp.md}
GO=${GO:-go}
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
e2e="$GO test ./cmd/l4lb -run '^\$' -bench XDPDataPath -benchtime $BENCHTIME -count $REPS"
pkt="$GO test ./bpf -run '^\$' -bench 'XDPLB|XDPDecap|Timer' -benchtime 100000x -count $REPS"
echo "== $e2e" >&2
eval "$e2e" | tee -a "$raw" >&2
echo "== $pkt" >&2
eval "$pkt" | tee -a "$raw" >&2
report=$($GO run ./scripts/bench/xdpreport -cmd "scripts/bench-xdp.sh (REPS=$REPS BENCHTIME=$BENCHTIME), that is: $e2e; $pkt" <"$raw")
echo "$report"
if [ -n "$OUT" ]; then
  # Keep the section scripts/bench-xdp-compare.sh writes and the notes after it.
  kept=$( [ -f "$OUT" ] && sed -n '/^<!-- bench-xdp-compare -->$/,$p' "$OUT" || true)
  printf '%s\n\nMachine: %s, %s CPUs, kernel %s, on %s.\n' "$report" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" "$(nproc)" "$(uname -r)" "$(date -u +%Y-%m-%d)" >"$OUT"
  [ -z "$kept" ] || printf '\n%s\n' "$kept" >>"$OUT"
  echo "written to $OUT" >&2
fi
