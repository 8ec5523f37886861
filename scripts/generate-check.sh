#!/usr/bin/env bash
# Regenerates the BPF objects and Go bindings and fails if they differ from
# the ones in the tree: the committed output must be what the C sources
# give (so that `go build` needs no clang and never builds stale programs).
set -euo pipefail
cd "$(dirname "$0")/.."
saved=$(mktemp -d)
trap 'rm -rf "$saved"' EXIT
cp bpf/*_bpfel.go bpf/*_bpfel.o "$saved"/
mkdir -p "$saved/sockfwd" && cp l4/sockfwd/*_bpfel.go l4/sockfwd/*_bpfel.o "$saved/sockfwd"/
${GO:-go} generate ./bpf/ ./l4/sockfwd/
status=0
for f in "$saved"/*_bpfel.*; do
  if ! cmp -s "$f" "bpf/$(basename "$f")"; then
    echo "bpf/$(basename "$f"): differs from what its C source compiles to; run make generate and commit" >&2
    status=1
  fi
done
for f in "$saved"/sockfwd/*; do
  if ! cmp -s "$f" "l4/sockfwd/$(basename "$f")"; then
    echo "l4/sockfwd/$(basename "$f"): differs from what its C source compiles to; run make generate and commit" >&2
    status=1
  fi
done
exit $status
