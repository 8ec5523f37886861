#!/usr/bin/env bash
# Per-packet cost of the XDP balancer, this tree against an older commit,
# side by side: the same benchmark code (this tree's bpf/bench_test.go,
# copied into a worktree of OLD) and the same frames run against both
# programs, in interleaved rounds pinned to one CPU; every figure is the
# median over the rounds, the empty program's time subtracted (ns/pkt-net)
# for the one-packet-per-run paths. Prints a markdown table.
#
#   scripts/bench-xdp-compare.sh                 # OLD=7e7867e REPS=7 N=20000x CPU=1
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
N=${N:-20000x}
CPU=${CPU:-1}
BENCH=${BENCH:-XDPLB}
GO=${GO:-go}
OUT=${OUT-docs/bench-xdp.md}
cmd="OLD=$OLD REPS=$REPS N=$N CPU=$CPU BENCH=$BENCH scripts/bench-xdp-compare.sh"
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
raw="$tmp/raw"
for r in $(seq "$REPS"); do
  for side in old new; do
    echo "round $r/$REPS: $side" >&2
    (cd bpf && taskset -c "$CPU" "$tmp/$side.test" -test.run '^$' -test.bench "$BENCH" -test.benchtime "$N") |
      awk -v side="$side" '/^Benchmark/ { v = ""; for (i = 3; i < NF; i += 2) { if ($(i+1) == "ns/pkt" && v == "") v = $i; if ($(i+1) == "ns/pkt-net") v = $i } print $1, side, v }' >>"$raw"
  done
done
table=$(
  echo "| benchmark | $OLD ns/pkt | $(git rev-parse --short HEAD) ns/pkt | new / old |"
  echo "|---|---:|---:|---:|"
# Median per benchmark and side (the input sorted by both, then value),
# then one row per benchmark.
sort -k1,1 -k2,2 -k3,3n "$raw" |
  awk '{ k = $1 " " $2; if (k != key) { if (n) print key, v[int((n + 1) / 2)]; key = k; n = 0 } v[++n] = $3 }
       END { if (n) print key, v[int((n + 1) / 2)] }' |
  awk -v old="$OLD" '
    { sub(/^Benchmark/, "", $1); if ($1 != b) { row(); b = $1; o = "-"; w = "-" } if ($2 == "old") o = $3; else w = $3 }
    function row() { if (b != "") printf "| %s | %s | %s | %s |\n", b, o, w, (o != "-" && w != "-" && o > 0 ? sprintf("%.2fx", w / o) : "-") }
    END { row() }'
)
section=$(
  echo "<!-- bench-xdp-compare -->"
  echo "## Per packet, against $OLD (side by side)"
  echo
  echo "Produced by \`$cmd\`: this tree's BPF_PROG_TEST_RUN benchmarks (bpf/bench_test.go) built twice, once"
  echo "against $OLD's program and maps (an empty benchNextHops there when it has no nexthops map), run in $REPS"
  echo "interleaved rounds pinned to CPU $CPU, $N runs per figure; medians over the rounds. once paths show"
  echo "ns/pkt-net (the empty program's time subtracted), repeat paths the kernel's mean. ipip-be4/-be6 pin every"
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
