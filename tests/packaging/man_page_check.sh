#!/usr/bin/env bash
# The generated man page hvdrun(1) (cli/option_docs.h) renders and lists every option that
# `hvdrun --help` shows, by every name --help gives it; hvdrun.1.gz is the same page.
# Usage: man_page_check.sh HVDRUN SHARE_DIR   (SHARE_DIR: the build's share/, from hvdrun-docgen)
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: man_page_check.sh HVDRUN SHARE_DIR" >&2; exit 2; }
hvdrun=$1 share=$2
fail() { echo "FAIL: $*"; exit 1; }

command -v groff >/dev/null || { echo "skipped: groff is not installed (Debian's groff-base)"; exit 77; }
[ -s "$share/hvdrun.1" ] || fail "no $share/hvdrun.1"
cmp -s <(gzip -dc "$share/hvdrun.1.gz") "$share/hvdrun.1" || fail "hvdrun.1.gz is not hvdrun.1"

# Plain text, as man shows it (no overstrike, no colour), wide lines so names stay whole.
page=$(groff -t -man -Tutf8 -P-cbou -rLL=200n "$share/hvdrun.1" 2>&1)
grep -q 'groff: ' <<<"$page" && fail "groff warns about the page: $(grep 'groff: ' <<<"$page" | head -3)"
for section in NAME SYNOPSIS DESCRIPTION OPTIONS "EXIT STATUS" ENVIRONMENT "SEE ALSO"; do
  grep -q "^$section\$" <<<"$page" || fail "the page has no $section section"
done
grep -q "hvdrun $("$hvdrun" --version | awk '{print $2}')" <<<"$page" || fail "the page does not name hvdrun's version"

# Every name of every option in --help (its first column: "-H,--hosts LIST").
mapfile -t names < <("$hvdrun" --help | grep -oE '^ {1,4}-[^ ]+' | tr ',' '\n' | sed 's/^ *//' | sort -u)
[ ${#names[@]} -ge 50 ] || fail "found only ${#names[@]} option names in hvdrun --help"
options=$(sed -n '/^OPTIONS$/,/^EXIT STATUS$/p' <<<"$page")
missing=()
for name in "${names[@]}"; do
  grep -qE -- "(^|[ ,])${name}([ ,]|\$)" <<<"$options" || missing+=("$name")
done
[ ${#missing[@]} -eq 0 ] || fail "the man page's OPTIONS lack ${#missing[@]} option(s) of --help: ${missing[*]}"
echo "man page: ${#names[@]} option names of --help, all under OPTIONS; sections and version present"
