#!/usr/bin/env bash
# Bundles libhvd_gpu_check with libhvd, its NCCL plugin and the shared libraries they need from
# this machine (Gloo, Open MPI, spdlog, fmt, ...) into one folder, for a GPU machine that has the
# CUDA runtime and NCCL but not the project's Debian packages. Leaves out what every machine has
# (libc, libm, libstdc++, libgcc_s, the loader) and what the GPU machine brings (libcudart,
# libnccl). The GPU machine's glibc must be at least this one's.
#
# Usage: bundle.sh BUILD_DIR OUT_DIR
# Then, on the GPU machine (LD_LIBRARY_PATH first: the binaries' RUNPATH points at BUILD_DIR):
#   LD_LIBRARY_PATH=OUT_DIR/lib:<NCCL's lib folder>:<the CUDA runtime's lib folder> \
#     OUT_DIR/libhvd_gpu_check
# libhvd loads libhvd_nccl.so from its own folder, OUT_DIR/lib.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: bundle.sh BUILD_DIR OUT_DIR" >&2; exit 2; }
build=$1
out=$2
bin=$build/tests/libhvd_gpu_check
for f in "$bin" "$build/allreduce/libhvd.so.0" "$build/allreduce/libhvd_nccl.so"; do
  [ -e "$f" ] || { echo "bundle.sh: $f not found: build the project with NCCL first" >&2; exit 2; }
done
mkdir -p "$out/lib"
cp "$bin" "$out/"
cp -L "$build/allreduce/libhvd.so.0" "$out/lib/libhvd.so.0"
cp "$build/allreduce/libhvd_nccl.so" "$out/lib/"
ldd "$bin" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
  case $(basename "$lib") in
    libc.so* | libm.so* | libstdc++* | libgcc_s* | ld-linux* | libpthread* | libdl* | librt*) ;;
    libcudart* | libnccl* | libhvd*) ;;
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done
strip --strip-debug "$out/libhvd_gpu_check" "$out"/lib/*
echo "bundled in $out ($(du -sh "$out" | cut -f1)); needs glibc >= $(ldd --version | head -1 | awk '{print $NF}')"
