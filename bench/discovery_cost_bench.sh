#!/usr/bin/env bash
# What a long host discovery list costs an elastic job (issue 51 finding 5): the same job twice,
# its discovery script printing either one host or 4096 hosts x 1024 slots (40 KB, inside the
# parser's bounds), ROUNDS rounds each (default 3), alternating. Each job is
#   hvdrun --host-discovery-script S --discovery-interval 1 -np 1 --min-np 1 --max-np 1 sleep SECONDS
# on this machine (--max-np 1: the listed hosts are never joined, only listed). Measured: the CPU
# time (user + system) of hvdrun and everything it started, and the largest RSS among them
# (GNU time). Goal: the long list costs at most 1.2x the CPU and at most 10 MiB more RSS.
# Usage: bench/discovery_cost_bench.sh [ROUNDS] [SECONDS]   (BUILD_DIR=build, or HVDRUN=PATH)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
rounds=${1:-3}
seconds=${2:-20}
hvdrun=${HVDRUN:-$build/cli/hvdrun}
[ -x "$hvdrun" ] || { echo "build first: ninja -C $build hvdrun" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "needs GNU time (/usr/bin/time)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo localhost:1 >"$work/one.txt"
{
  echo localhost:1
  for i in $(seq 1 4095); do echo "h$i:1024"; done
} >"$work/many.txt"
for kind in one many; do
  printf '#!/bin/sh\ncat %s\n' "$work/$kind.txt" >"$work/$kind.sh"
  chmod +x "$work/$kind.sh"
done

# run KIND: prints "CPU_SECONDS MAX_RSS_KIB WALL_SECONDS"
run() {
  /usr/bin/time -f '%U %S %M %e' -o "$work/time" "$hvdrun" --host-discovery-script \
    "$work/$1.sh" --discovery-interval 1 -np 1 --min-np 1 --max-np 1 sleep "$seconds" \
    >"$work/out" 2>"$work/err" || { cat "$work/err" >&2; echo "the $1 job failed" >&2; exit 1; }
  awk '{printf "%.2f %d %.1f\n", $1 + $2, $3, $4}' "$work/time"
}

printf '%-5s %-5s %8s %10s %7s\n' round list cpu_s rss_kib wall_s
for r in $(seq 1 "$rounds"); do
  for kind in one many; do
    read -r cpu rss wall < <(run "$kind")
    printf '%-5s %-5s %8s %10s %7s\n' "$r" "$kind" "$cpu" "$rss" "$wall"
    echo "$cpu $rss" >>"$work/$kind.results"
  done
done
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
one_cpu=$(cut -d' ' -f1 "$work/one.results" | median)
many_cpu=$(cut -d' ' -f1 "$work/many.results" | median)
one_rss=$(cut -d' ' -f2 "$work/one.results" | median)
many_rss=$(cut -d' ' -f2 "$work/many.results" | median)
awk -v a="$many_cpu" -v b="$one_cpu" -v ra="$many_rss" -v rb="$one_rss" 'BEGIN {
  printf "median CPU: one host %.2f s, 4096 x 1024 %.2f s: ratio %.2f (goal <= 1.2)\n", b, a, a / b
  printf "median max RSS: one host %d KiB, 4096 x 1024 %d KiB: +%.1f MiB (goal <= 10)\n", rb, ra,
         (ra - rb) / 1024 }'
