#!/usr/bin/env bash
# Runs the libFuzzer harnesses (tests/fuzz/README.md).
#
#   tests/fuzz/run.sh NAME SECONDS [libFuzzer flags...]   fuzz one harness for SECONDS
#   tests/fuzz/run.sh all SECONDS [libFuzzer flags...]    each harness in turn, SECONDS each
#   tests/fuzz/run.sh minimize NAME|all                   merge corpus/NAME down to the inputs
#                                                         that keep its coverage (before a commit)
#   tests/fuzz/run.sh replay                              every harness over its whole corpus and
#                                                         regressions, under ASan+UBSan (CI)
#   tests/fuzz/run.sh list                                the harness names
#
# Configures and builds a clang build dir (build-fuzz/, or $HVD_FUZZ_BUILD) when needed: clang-14
# with -DHVD_FUZZ=ON, only the fuzz targets. One fuzzer runs at a time, in one process (with
# -jobs, libFuzzer forks workers that log to ./fuzz-N.log), on corpus/NAME (new interesting
# inputs are written there) with regressions/NAME as extra seeds.
# A crash, leak, timeout or broken property leaves its input under build-fuzz/fuzz-artifacts/NAME/
# and ends the run with libFuzzer's status.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${HVD_FUZZ_BUILD:-$root/build-fuzz}"
harnesses=(host_list scheduler_hosts hello rendezvous frame_reader job_spec probe engine_messages
  world topology port_range ssh_config discovery
  config_file output_ranks)

usage() {
  sed -n '4,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

configure() {
  if [ ! -f "$build/CMakeCache.txt" ]; then
    local launcher=()
    command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache
      -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DHVD_FUZZ=ON \
      -DHVD_WITH_MPI=OFF -DHVD_WITH_GLOO=OFF -DHVD_WITH_NCCL=OFF "${launcher[@]}" >/dev/null
  fi
}

build_targets() {
  configure
  cmake --build "$build" -j "${HVD_FUZZ_BUILD_JOBS:-2}" --target "$@"
}

known() {
  local n
  for n in "${harnesses[@]}"; do [ "$n" = "$1" ] && return 0; done
  echo "run.sh: no harness '$1' (tests/fuzz/run.sh list)" >&2
  exit 2
}

fuzz_one() {
  local name="$1" seconds="$2"
  shift 2
  local corpus="$here/corpus/$name" regressions="$here/regressions/$name"
  local artifacts="$build/fuzz-artifacts/$name/" log="$build/fuzz-logs/$name.log"
  mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
  local seeds=("$corpus")
  [ -d "$regressions" ] && seeds+=("$regressions")
  echo "== $name: ${seconds}s on $(find "$corpus" -type f | wc -l) corpus inputs"
  local rc=0
  "$build/tests/fuzz/hvd_fuzz_$name" -max_total_time="$seconds" \
    -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$artifacts" \
    "$@" "${seeds[@]}" >"$log" 2>&1 || rc=$?
  # The last status line (#N DONE/pulse cov: C ft: F corp: ...) and the final stats.
  grep -E '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)' "$log" | tail -1 || true
  grep -E '^stat::(number_of_executed_units|peak_rss_mb)' "$log" || true
  if [ "$rc" -ne 0 ]; then
    echo "== $name: libFuzzer exited $rc; see $log and $artifacts" >&2
    grep -E 'ERROR|fuzz check failed|uncaught|Test unit written' "$log" | head -5 >&2 || true
  fi
  return "$rc"
}

minimize_one() {
  local name="$1"
  local corpus="$here/corpus/$name"
  local fresh="$build/fuzz-merge/$name"
  rm -rf "$fresh" && mkdir -p "$fresh"
  # Edges only (-use_counters=0): a few dozen inputs per harness instead of one per hit count.
  "$build/tests/fuzz/hvd_fuzz_$name" -merge=1 -use_counters=0 -timeout=10 "$fresh" "$corpus" \
    >"$build/fuzz-merge/$name.log" 2>&1
  local before after
  before=$(find "$corpus" -type f | wc -l)
  find "$corpus" -type f -delete
  cp "$fresh"/* "$corpus"/
  after=$(find "$corpus" -type f | wc -l)
  echo "== $name: corpus $before -> $after inputs"
}

# Each committed input once through the instrumented harness (-runs=0: read the corpus, fuzz
# nothing): a finding fails the harness with the sanitizer's report.
replay_one() {
  local name="$1" log="$build/fuzz-logs/$1.replay.log"
  local seeds=("$here/corpus/$name")
  [ -d "$here/regressions/$name" ] && seeds+=("$here/regressions/$name")
  mkdir -p "$(dirname "$log")"
  local rc=0
  "$build/tests/fuzz/hvd_fuzz_$name" -runs=0 -timeout=10 -rss_limit_mb=2048 "${seeds[@]}" \
    >"$log" 2>&1 || rc=$?
  echo "== $name: $(find "${seeds[@]}" -type f | wc -l) inputs, exit $rc"
  if [ "$rc" -ne 0 ]; then
    grep -E 'ERROR|runtime error|fuzz check failed|uncaught' "$log" | head -5 >&2 || true
    echo "== $name: the whole report is in $log" >&2
  fi
  return "$rc"
}

[ $# -ge 1 ] || usage
case "$1" in
  replay)
    [ $# -eq 1 ] || usage
    build_targets hvd_fuzzers
    status=0
    for n in "${harnesses[@]}"; do replay_one "$n" || status=$?; done
    exit "$status"
    ;;
  list)
    printf '%s\n' "${harnesses[@]}"
    ;;
  minimize)
    [ $# -eq 2 ] || usage
    if [ "$2" = all ]; then names=("${harnesses[@]}"); else known "$2"; names=("$2"); fi
    build_targets "${names[@]/#/hvd_fuzz_}"
    for n in "${names[@]}"; do minimize_one "$n"; done
    ;;
  *)
    [ $# -ge 2 ] || usage
    name="$1" seconds="$2"
    shift 2
    [[ "$seconds" =~ ^[0-9]+$ ]] || usage
    if [ "$name" = all ]; then names=("${harnesses[@]}"); else known "$name"; names=("$name"); fi
    build_targets "${names[@]/#/hvd_fuzz_}"
    status=0
    for n in "${names[@]}"; do fuzz_one "$n" "$seconds" "$@" || status=$?; done
    exit "$status"
    ;;
esac
