#!/usr/bin/env bash
# libhvd on a host without CUDA: the CUDA toolkit's library folders are hidden (empty folders
# bind-mounted over them in a private mount namespace), then:
#   - hvdrun --check-build says the NCCL plugin cannot load, and why;
#   - CPU collectives pass, alone and at 2 ranks through hvdrun;
#   - a CUDA tensor is a clear error naming the host and the missing library.
# Usage: no_cuda_check.sh HVDRUN LIBHVD_CHECK PLUGIN. Exit 77 (ctest: skipped) when a mount
# namespace is not available (not root) or the plugin was not built.
set -euo pipefail
hvdrun=$1 check=$2 plugin=$3

if [ ! -f "$plugin" ]; then
  echo "SKIP: no NCCL plugin in this build ($plugin)"; exit 77
fi
if [ "${HVD_NO_CUDA_INNER:-}" != 1 ]; then
  if [ "$(id -u)" -ne 0 ] || ! unshare -m true 2>/dev/null; then
    echo "SKIP: hiding the CUDA toolkit needs root for a private mount namespace"; exit 77
  fi
  exec unshare -m env HVD_NO_CUDA_INNER=1 bash "$0" "$@"
fi

# Inside the private mount namespace: hide every folder that holds the plugin's CUDA/NCCL libs.
empty=$(mktemp -d)
trap 'rmdir "$empty" 2>/dev/null || true' EXIT
mapfile -t dirs < <(ldd "$plugin" | awk '/libcudart|libnccl/ && $3 ~ /^\// {print $3}' |
                    xargs -r -n1 dirname | sort -u)
[ ${#dirs[@]} -gt 0 ] || { echo "FAIL: ldd found no CUDA/NCCL library for $plugin"; exit 1; }
for d in "${dirs[@]}"; do
  mount --bind "$empty" "$d"
  echo "hidden: $d"
done
if ldd "$plugin" | grep -q 'libcudart.*not found'; then echo "the CUDA runtime is hidden"; fi

fail() { echo "FAIL: $*"; exit 1; }

report=$("$hvdrun" --check-build --json)
echo "$report" | grep -q '"loaded": false' || fail "--check-build still loads the plugin: $report"
echo "$report" | grep -q 'cannot load' || fail "--check-build does not say why: $report"
echo "ok   --check-build: the NCCL plugin cannot load, with the reason"

out=$("$check" collectives) || fail "CPU collectives alone: $out"
echo "$out" | grep -q 'rank 0: all checks passed' || fail "CPU collectives alone: $out"
echo "ok   CPU collectives alone"

out=$("$hvdrun" -np 2 "$check" collectives 2>&1) || fail "CPU collectives at 2 ranks: $out"
[ "$(echo "$out" | grep -c 'all checks passed')" -eq 2 ] || fail "CPU collectives at 2 ranks: $out"
echo "ok   CPU collectives at 2 ranks through hvdrun"

out=$("$check" gpu) || fail "GPU refusal: $out"
echo "$out" | grep -q "no NCCL on host .*libcudart" || fail "the GPU error does not name the library: $out"
echo "ok   a CUDA tensor: $(echo "$out" | grep -m1 'refused')"
echo "no-CUDA check: OK"
