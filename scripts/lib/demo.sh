# Shared by scripts/demo.sh and scripts/demo-ecmp.sh (sourced, not run):
# step titles and running a command in a namespace.

# step TITLE: a title line, bold only on a terminal and not under NO_COLOR
# (no-color.org): a log or a pipe gets plain text.
if [ -t 1 ] && [ -z "${NO_COLOR:-}" ]; then
  DEMO_BOLD=$'\033[1m' DEMO_PLAIN=$'\033[0m'
else
  DEMO_BOLD='' DEMO_PLAIN=''
fi
step() { printf '\n%s== %s%s\n' "$DEMO_BOLD" "$*" "$DEMO_PLAIN"; }

# inns NS CMD...: run CMD in network namespace NS.
inns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

# wait_running LOG PID [WHAT]: wait (up to 15 s) until the l4lb writing
# LOG says it runs. The admin socket appears before its VIPs and XDP
# program are up (it is bound first, so that a clash fails at once), so
# its presence does not say l4lb serves. Prints the log and exits 1 when
# l4lb died or did not get there.
wait_running() {
  local log=$1 pid=$2 what=${3:-l4lb}
  for _ in $(seq 300); do
    grep -q 'l4lb running' "$log" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  cat "$log" >&2
  echo "$what did not start" >&2
  exit 1
}
