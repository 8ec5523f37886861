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
