#!/usr/bin/env bash
# Start-up and memory of horovod.torch on hvdrun against torch's Gloo process group, at NP ranks
# on localhost under the built hvdrun: bench/python_startup_bench.py in its two modes,
# alternating, REPEATS times each; prints every run's rank-0 line and the medians. A benchmark,
# not a test. Usage: bench/python_startup_bench.sh [BUILD_DIR]   (REPEATS=3 NP=2 STEPS=1000)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
build=${1:-build}
repeats=${REPEATS:-3} np=${NP:-2}
py=${HVD_PYTHON:-/usr/bin/python3}
export PYTHONPATH="$PWD/$build/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1
lines=()
for ((i = 1; i <= repeats; i++)); do
  for mode in hvd ddp; do
    line=$("$build/cli/hvdrun" -np "$np" -H "localhost:$np" "$py" bench/python_startup_bench.py \
      --mode "$mode" --steps "${STEPS:-1000}" 2>&1 | sed -n 's/^\[1,0\]<stdout>://p' | grep "^$mode ") ||
      { echo "the $mode run failed" >&2; exit 1; }
    echo "$line"
    lines+=("$line")
  done
done
echo "medians over $repeats runs, $np ranks (seconds, MiB of rank 0):"
printf '%s\n' "${lines[@]}" | awk '
  { for (i = 2; i <= NF; i++) { split($i, kv, "="); k = $1 "." kv[1]; v[k, ++n[k]] = kv[2]; keys[k] = 1 } }
  END {
    for (k in keys) {
      m = n[k]; for (i = 1; i <= m; i++) a[i] = v[k, i]
      for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
      printf "  %-28s %10.3f\n", k, (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
    }
  }' | sort
