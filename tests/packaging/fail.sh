# Sourced by the packaging checks (deb_check.sh, wheel_check.sh): `fail WHAT [LOG]` says what
# failed, shows the last 30 lines of LOG when it has any, and ends the check with exit 1 (its
# EXIT trap cleans up).
fail() {
  echo "FAIL: $1"
  if [ $# -gt 1 ] && [ -s "$2" ]; then echo "---- $2 (last 30 lines) ----"; tail -n 30 "$2"; echo "----"; fi
  exit 1
}
