# Shared by the bash e2e scripts (tests/netns/netns_net_check.sh, tests/e2e/rsh_agent_check.sh):
# one line per check, and on a failure the command's exit code and output. The caller sets $rc,
# $out and $err (its run helper) and starts `failures=0`.
pass() { echo "ok: $1"; }
fail() {
  echo "FAIL: $1"
  echo "  exit code $rc"
  echo "  --- stdout ---"; sed 's/^/  /' <<<"$out" | head -40
  echo "  --- stderr ---"; sed 's/^/  /' <<<"$err" | head -40
  failures=$((failures + 1))
}
expect() {  # DESCRIPTION CONDITION...
  local what=$1
  shift
  if "$@"; then pass "$what"; else fail "$what"; fi
}
has() { grep -qF -- "$1" <<<"$2"; }
