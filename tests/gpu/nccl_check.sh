#!/usr/bin/env bash
# Builds the GPU check of libhvd's NCCL plugin (tests/gpu/nccl_check.cpp with
# allreduce/nccl/plugin.cpp compiled in) against only the CUDA toolkit and NCCL, in one compile
# command, and runs it on device 0 unless --build-only. tests/gpu/README.md says what it checks.
#
# Usage: nccl_check.sh [--build-only] [--build-dir DIR] [-- ARGS...]
#   --build-only    build (and check that the binary's libraries resolve), do not run
#   --build-dir DIR build there and keep it (default: a temporary folder, removed at exit)
#   ARGS            passed to nccl_check: --no-perf, --max-mib N
# Finds:
#   CUDA  nvcc on PATH (else $CUDA_HOME/bin, /usr/local/cuda/bin); the toolkit around it
#   NCCL  include/nccl.h + libnccl.so[.2] under, in order: $NCCL_HOME, the CUDA toolkit,
#         /usr/local/cuda, Python's nvidia-nccl-cu13 package (nvidia/<pkg>/{include,lib}), /usr
# Environment: CXX (default g++, else c++, else nvcc as the compiler driver), NCCL_HOME,
#   CUDA_HOME, NCCL_CHECK_TIMEOUT (seconds the run may take, default 240).
# Exit: 0 built (and all checks OK), 1 a check or the build failed, 2 cannot run here (no CUDA
#   device, or nvcc / NCCL not found).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../.." && pwd)
build_only=0
build_dir=""
run_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build-only) build_only=1 ;;
    --build-dir)
      [ $# -ge 2 ] || { echo "nccl_check.sh: --build-dir needs a folder" >&2; exit 2; }
      build_dir=$2
      shift
      ;;
    --) shift; run_args=("$@"); break ;;
    -h | --help) sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "nccl_check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

cannot() { echo "nccl_check.sh: $1" >&2; echo "nccl check: cannot run here"; exit 2; }
arch=$(uname -m)

# ---- CUDA toolkit ----
nvcc=$(command -v nvcc || true)
for cand in "${CUDA_HOME:+$CUDA_HOME/bin/nvcc}" /usr/local/cuda/bin/nvcc; do
  if [ -z "$nvcc" ] && [ -n "$cand" ] && [ -x "$cand" ]; then nvcc=$cand; fi
done
[ -n "$nvcc" ] || cannot "nvcc not found on PATH (nor in \$CUDA_HOME/bin or /usr/local/cuda/bin): install the CUDA toolkit or put its bin folder on PATH"
# nvcc may be a wrapper script (CI machines have /usr/local/bin/nvcc = `exec /usr/local/cuda-X/bin/nvcc`),
# so ask nvcc where it really lives (its dry run prints `#$ _HERE_=<its bin folder>`).
nvcc_here=$("$nvcc" --dryrun -E -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ _HERE_=//p' | head -n1 || true)
if [ -n "$nvcc_here" ] && [ -d "$nvcc_here" ]; then
  cuda_root=$(dirname "$(readlink -f "$nvcc_here")")
else
  cuda_root=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
fi

cuda_inc=""
for d in "$cuda_root/include" "$cuda_root/targets/$arch-linux/include"; do
  if [ -z "$cuda_inc" ] && [ -f "$d/cuda_runtime_api.h" ]; then cuda_inc=$d; fi
done
[ -n "$cuda_inc" ] || cannot "cuda_runtime_api.h not found in the toolkit of $nvcc (looked in $cuda_root/include and $cuda_root/targets/$arch-linux/include)"

lib_dirs() {  # ROOT: the folders that may hold its libraries
  printf '%s\n' "$1/lib64" "$1/lib" "$1/lib/$arch-linux-gnu" "$1/targets/$arch-linux/lib"
}
cudart=""        # the static runtime, or the shared one (then cudart_dir goes on the rpath)
cudart_dir=""
while read -r d; do
  if [ -z "$cudart" ] && [ -f "$d/libcudart_static.a" ]; then cudart=$d/libcudart_static.a; fi
done < <(lib_dirs "$cuda_root")
if [ -z "$cudart" ]; then
  while read -r d; do
    for f in "$d/libcudart.so" "$d"/libcudart.so.[0-9]*; do
      if [ -z "$cudart" ] && [ -e "$f" ]; then cudart=$f; cudart_dir=$d; fi
    done
  done < <(lib_dirs "$cuda_root")
fi
[ -n "$cudart" ] || cannot "no CUDA runtime library (libcudart_static.a or libcudart.so) under $cuda_root"

# ---- NCCL ----
nccl_inc=""
nccl_lib=""
nccl_from=""
try_nccl() {  # ROOT WHAT: sets nccl_inc / nccl_lib if ROOT has include/nccl.h and the library
  local root=$1 inc="" lib="" d f
  [ -n "$nccl_lib" ] && return 0
  if [ -z "$root" ] || [ ! -d "$root" ]; then return 0; fi
  for d in "$root/include" "$root/targets/$arch-linux/include"; do
    if [ -z "$inc" ] && [ -f "$d/nccl.h" ]; then inc=$d; fi
  done
  [ -n "$inc" ] || return 0
  while read -r d; do
    for f in "$d/libnccl.so.2" "$d/libnccl.so" "$d"/libnccl.so.2.*; do
      if [ -z "$lib" ] && [ -e "$f" ]; then lib=$f; fi
    done
  done < <(lib_dirs "$root")
  [ -n "$lib" ] || return 0
  nccl_inc=$inc
  nccl_lib=$lib
  nccl_from="$2 ($root)"
}

python_nccl_roots() {  # the nvidia/<pkg> folders of Python packages that ship include/nccl.h
  local py
  for py in python3 python; do
    command -v "$py" >/dev/null 2>&1 || continue
    "$py" - <<'EOF' 2>/dev/null || true
import os, site, sys
roots = []
try:
    import nvidia.nccl as m
    roots += list(getattr(m, "__path__", []))
    if getattr(m, "__file__", None):
        roots.append(os.path.dirname(m.__file__))
except Exception:
    pass
dirs = []
for get in (getattr(site, "getsitepackages", None), getattr(site, "getusersitepackages", None)):
    try:
        got = get() if get else []
        dirs += [got] if isinstance(got, str) else list(got)
    except Exception:
        pass
dirs += [p for p in sys.path if p.endswith("-packages")]
for d in dirs:
    nv = os.path.join(d, "nvidia")
    if os.path.isdir(nv):
        for sub in sorted(os.listdir(nv)):
            if os.path.isfile(os.path.join(nv, sub, "include", "nccl.h")):
                roots.append(os.path.join(nv, sub))
seen = set()
for r in roots:
    if r not in seen:
        seen.add(r)
        print(r)
EOF
  done
  # Without a Python that sees it: look in the usual site-packages places.
  find /usr/local/lib /usr/lib /opt "${HOME:-/nonexistent}/.local/lib" -maxdepth 8 \
    -path '*-packages/nvidia/*/include/nccl.h' 2>/dev/null | sed 's#/include/nccl.h$##' || true
}

try_nccl "${NCCL_HOME:-}" "\$NCCL_HOME"
try_nccl "$cuda_root" "the CUDA toolkit"
try_nccl /usr/local/cuda "/usr/local/cuda"
if [ -z "$nccl_lib" ]; then
  while read -r r; do try_nccl "$r" "Python package nvidia-nccl"; done < <(python_nccl_roots)
fi
try_nccl /usr "the system"
[ -n "$nccl_lib" ] || cannot "NCCL not found: set NCCL_HOME to a folder with include/nccl.h and lib/libnccl.so.2, or pip install nvidia-nccl-cu13"
nccl_lib_dir=$(dirname "$nccl_lib")
nccl_h_version=$(sed -n 's/^#define NCCL_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\).*/\2/p' "$nccl_inc/nccl.h" |
  paste -sd. -)
echo "CUDA: $nvcc (toolkit $cuda_root; runtime $cudart)"
echo "NCCL: found in $nccl_from: $nccl_inc/nccl.h (${nccl_h_version:-version unknown}), $nccl_lib"

# ---- build ----
if [ -n "$build_dir" ]; then
  mkdir -p "$build_dir"
  build=$(cd "$build_dir" && pwd)
else
  build=$(mktemp -d "${TMPDIR:-/tmp}/nccl_check.XXXXXX")
  trap 'rm -rf "$build"' EXIT
fi
# A link name for NCCL (the Python package has only libnccl.so.2); the binary records the soname
# and finds the real file through its rpath.
mkdir -p "$build/lib"
ln -sfn "$nccl_lib" "$build/lib/libnccl.so"

cxx=${CXX:-}
if [ -z "$cxx" ]; then
  for c in g++ c++; do
    if [ -z "$cxx" ] && command -v "$c" >/dev/null 2>&1; then cxx=$c; fi
  done
fi
[ -n "$cxx" ] || cxx=$nvcc
includes=(-I"$src" -I"$src/allreduce/include")
for d in "$cuda_inc" "$nccl_inc"; do  # never /usr/include as -isystem (breaks #include_next)
  if [ "$d" != /usr/include ] && [[ " ${includes[*]} " != *" $d "* ]]; then
    includes+=(-isystem "$d")
  fi
done
rpath_dirs=("$nccl_lib_dir")
if [ -n "$cudart_dir" ] && [ "$cudart_dir" != "$nccl_lib_dir" ]; then rpath_dirs+=("$cudart_dir"); fi
sources=("$src/tests/gpu/nccl_check.cpp" "$src/tests/gpu/nccl_check_perf.cpp"
  "$src/allreduce/nccl/plugin.cpp")
bin=$build/nccl_check
if [ "$(basename "$cxx")" = nvcc ]; then
  cmd=("$cxx" -std=c++20 -O2 "-Xcompiler=-Wall,-Wextra" "${includes[@]}" "${sources[@]}" -o "$bin"
    -L"$build/lib" -lnccl)
  if [ -n "$cudart_dir" ]; then cmd+=(--cudart=shared); else cmd+=(--cudart=static); fi
  for d in "${rpath_dirs[@]}"; do cmd+=(-Xlinker -rpath -Xlinker "$d"); done
else
  cmd=("$cxx" -std=c++20 -O2 -Wall -Wextra "${includes[@]}" "${sources[@]}" -o "$bin"
    -L"$build/lib" -lnccl "$cudart")
  for d in "${rpath_dirs[@]}"; do cmd+=("-Wl,-rpath,$d"); done
  cmd+=(-ldl -lpthread -lrt)
fi
echo "build: ${cmd[*]}"
start=$SECONDS
if ! "${cmd[@]}" >"$build/build.log" 2>&1; then
  cat "$build/build.log"
  echo "nccl check: the build FAILED"
  exit 1
fi
if [ -s "$build/build.log" ]; then cat "$build/build.log"; fi  # warnings
echo "built $bin in $((SECONDS - start)) s"

# Its libraries must resolve without LD_LIBRARY_PATH (NCCL through the rpath).
if command -v ldd >/dev/null 2>&1; then
  libs=$(env -u LD_LIBRARY_PATH ldd "$bin" 2>&1 || true)
  if grep -q 'not found' <<<"$libs"; then
    echo "$libs"
    echo "nccl check: the binary's libraries do not resolve (above)"
    exit 1
  fi
  echo "links: $(grep -E 'libnccl|libcudart' <<<"$libs" | sed 's/^[[:space:]]*//; s/ (0x[0-9a-f]*)//' |
    paste -sd';' -)"
fi

if [ "$build_only" = 1 ]; then
  echo "nccl check: built (not run: --build-only)"
  exit 0
fi

# ---- run ----
limit=${NCCL_CHECK_TIMEOUT:-240}
echo "run: $bin ${run_args[*]} (limit ${limit} s)"
rc=0
timeout --kill-after=10 "$limit" "$bin" "${run_args[@]}" || rc=$?
case "$rc" in
  0) ;;
  124 | 137) echo "nccl check: FAILED (did not finish in $limit s)" ;;
  2) ;;  # it said why (no CUDA device)
  *) if [ "$rc" -gt 128 ]; then echo "nccl check: FAILED (killed by signal $((rc - 128)))"; fi ;;
esac
exit "$rc"
