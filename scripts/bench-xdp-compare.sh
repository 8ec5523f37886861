#!/usr/bin/env bash
# Per-packet cost of the XDP balancer, this tree against an older commit,
# side by side: the same benchmark code (this tree's bpf/bench_test.go,
# copied into a worktree of OLD) and the same frames run against both
# programs, in interleaved rounds pinned to one CPU (the side that goes
# first alternates). A figure depends on the maps' setup (where their
# memory lies) as much as on the program, so every round builds COUNT
# fresh setups per side and benchmark (go test -count); a figure is the
# median over all setups of all rounds, and the table gives the spread of
# the ratio over the rounds beside it. One-packet-per-run paths report the
# interquartile mean of their runs with the empty program's subtracted
# (ns/pkt-iqm-net: a single run's time is quantized, the mean of the middle
# half is not), repeat paths the kernel's mean. Prints a markdown table.
#
#   scripts/bench-xdp-compare.sh        # OLD=7e7867e REPS=7 COUNT=3 N=20000x CPU=1
#   OLD=main REPS=9 scripts/bench-xdp-compare.sh
#
# A tree from before the nexthops map gets an empty benchNextHops (its
# ipip packets take bpf_fib_lookup, as its control plane would have them).
# Everything runs in namespaces the benchmarks make; nothing in the root
# namespace is touched. The table replaces the section between the
# bench-xdp-compare markers of docs/bench-xdp.md (OUT to change it, OUT=
# to only print it).
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=${OLD:-7e7867e}
REPS=${REPS:-7}
COUNT=${COUNT:-3}
N=${N:-20000x}
CPU=${CPU:-1}
BENCH=${BENCH:-XDPLB}
GO=${GO:-go}
OUT=${OUT-docs/bench-xdp.md}
RAW=${RAW:-} # a file to keep the per-setup figures in
cmd="OLD=$OLD REPS=$REPS COUNT=$COUNT N=$N CPU=$CPU BENCH=$BENCH scripts/bench-xdp-compare.sh"
tmp=$(mktemp -d)
old="$tmp/old"
cleanup() {
  git worktree remove --force "$old" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
git worktree add --detach "$old" "$OLD" >/dev/null 2>&1
cp bpf/bench_test.go "$old/bpf/bench_test.go"
if ! grep -q 'func (lb \*LB) SetNextHop' "$old"/bpf/*.go; then
  printf 'package bpf\n\nimport "testing"\n\nfunc benchNextHops(testing.TB, *LB, *fibNet, uint32) {}\n' >"$old/bpf/bench_nexthop_test.go"
fi
(cd "$old" && $GO test -c -o "$tmp/old.test" ./bpf)
$GO test -c -o "$tmp/new.test" ./bpf
$GO build -o "$tmp/xdpcompare" ./scripts/bench/xdpcompare
raw="$tmp/raw"
for r in $(seq "$REPS"); do
  sides="old new"
  [ $((r % 2)) -eq 1 ] || sides="new old"
  for side in $sides; do
    echo "round $r/$REPS: $side" >&2
    # One line per setup: the net interquartile mean where there is one,
    # else the net median, else the kernel's mean (repeat paths).
    (cd bpf && taskset -c "$CPU" "$tmp/$side.test" -test.run '^$' -test.bench "$BENCH" -test.benchtime "$N" -test.count "$COUNT") |
      awk -v side="$side" -v r="$r" '/^Benchmark/ { v = ""; p = 0; for (i = 3; i < NF; i += 2) { u = $(i+1); q = (u == "ns/pkt-iqm-net") ? 3 : (u == "ns/pkt-net") ? 2 : (u == "ns/pkt") ? 1 : 0; if (q > p) { p = q; v = $i } } print $1, side, r, v }' >>"$raw"
  done
done
[ -z "$RAW" ] || cp "$raw" "$RAW"
table=$("$tmp/xdpcompare" -old "$OLD" -new "$(git rev-parse --short HEAD)" <"$raw")
section=$(
  echo "<!-- bench-xdp-compare -->"
  echo "## Per packet, against $OLD (side by side)"
  echo
  echo "Produced by \`$cmd\`: this tree's BPF_PROG_TEST_RUN benchmarks (bpf/bench_test.go) built twice, once"
  echo "against $OLD's program and maps (an empty benchNextHops there when it has no nexthops map), run in $REPS"
  echo "interleaved rounds pinned to CPU $CPU (the side that goes first alternates), each round $COUNT fresh map setups"
  echo "per side and benchmark, $N runs per setup; a figure is the median over every setup of every round, the"
  echo "spread column each round's ratio of its own medians. once paths show the interquartile mean of their runs"
  echo "net of the empty program's (ns/pkt-iqm-net), repeat paths the kernel's mean. ipip-be4/-be6 pin every"
  echo "flow to an IPv4 or an IPv6 backend; plain ipip mixes them (odd backends IPv4, even IPv6)."
  echo
  echo "$table"
  echo
  echo "Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs, kernel $(uname -r), on $(date -u +%Y-%m-%d); other work shared the machine."
  echo "<!-- /bench-xdp-compare -->"
)
echo "$section"
if [ -n "$OUT" ]; then
  if grep -q '^<!-- bench-xdp-compare -->$' "$OUT"; then
    awk -v sec="$section" '/^<!-- bench-xdp-compare -->$/ { print sec; skip = 1; next } /^<!-- \/bench-xdp-compare -->$/ { skip = 0; next } !skip' "$OUT" >"$tmp/out"
    cat "$tmp/out" >"$OUT"
  else
    printf '\n%s\n' "$section" >>"$OUT"
  fi
  echo "written to $OUT" >&2
fi
