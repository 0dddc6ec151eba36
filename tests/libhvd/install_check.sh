#!/usr/bin/env bash
# Installs the built project into a scratch prefix and proves a program outside the tree builds
# against the installed libhvd package and runs:
#   - the installed tree has the headers, libhvd.so, the CMake package and the pkg-config file;
#   - the installed headers include only standard headers (and each other: hvd/hvd.h, hvd.hpp);
#   - libhvd.so exports nothing from gloo, fmt, spdlog, httplib or hvd::contract;
#   - tests/libhvd/consumer (C++, find_package(hvd) -> hvd::hvd) configures, builds and runs;
#   - tests/libhvd/consumer/c_consumer.c (C99, pkg-config hvd) compiles and runs.
# Nothing is written outside SCRATCH_DIR except BUILD_DIR/install_manifest.txt (cmake --install
# always writes it). Usage: install_check.sh SOURCE_DIR BUILD_DIR SCRATCH_DIR
set -euo pipefail

if [ $# -ne 3 ]; then
  echo "usage: install_check.sh SOURCE_DIR BUILD_DIR SCRATCH_DIR" >&2
  exit 2
fi
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
mkdir -p "$3"
scratch=$(cd "$3" && pwd)
case "$scratch" in
  / | "$src" | "$build" | "${HOME:-/}") echo "FAIL: refusing to use '$scratch' as the scratch folder"; exit 1 ;;
esac
prefix=$scratch/prefix
consumer_src=$src/tests/libhvd/consumer
find "$scratch" -mindepth 1 -delete

fail() {  # fail WHAT [LOG]: prints what failed (and the end of LOG), exits 1
  echo "FAIL: $1"
  if [ $# -gt 1 ] && [ -s "$2" ]; then
    echo "---- ${2#"$scratch"/} (last 40 lines) ----"
    tail -n 40 "$2"
    echo "----"
  fi
  echo "install check: FAILED (scratch kept in $scratch)"
  exit 1
}
ok() { echo "ok   $1"; }

# A standalone run: no launcher or MPI environment from whoever runs the test.
for var in $(compgen -e); do
  case "$var" in HOROVOD_* | HVD_* | OMPI_* | PMIX_* | PMI_*) unset "$var" ;; esac
done
unset DESTDIR  # with DESTDIR set, cmake --install would write to $DESTDIR$prefix

# ---- 1. Install ----
rm -f "$build/install_manifest.txt"
if ! cmake --install "$build" --prefix "$prefix" >"$scratch/install.log" 2>&1; then
  fail "cmake --install $build --prefix $prefix" "$scratch/install.log"
fi
[ -s "$build/install_manifest.txt" ] || fail "cmake --install wrote no $build/install_manifest.txt"
while IFS= read -r path; do
  case "$path" in
    "$prefix"/*) ;;
    *) fail "cmake --install wrote '$path', outside the prefix $prefix" ;;
  esac
done <"$build/install_manifest.txt"
ok "cmake --install --prefix: $(wc -l <"$build/install_manifest.txt") files, all under the prefix"

# ---- 2. The installed tree ----
# The library directory: lib, lib64 or lib/<multiarch> depending on GNUInstallDirs.
mapfile -t libs < <(find "$prefix" -name libhvd.so \( -type f -o -type l \))
[ ${#libs[@]} -eq 1 ] || fail "expected one libhvd.so under $prefix, found ${#libs[@]}: ${libs[*]:-none}"
libdir=$(dirname "${libs[0]}")
[ -e "$libdir/libhvd.so" ] || fail "$libdir/libhvd.so is a dangling link"
for f in include/hvd/hvd.h include/hvd/hvd.hpp include/hvd/elastic.hpp; do
  [ -f "$prefix/$f" ] || fail "missing $prefix/$f"
done
for f in cmake/hvd/hvdConfig.cmake cmake/hvd/hvdConfigVersion.cmake pkgconfig/hvd.pc; do
  [ -f "$libdir/$f" ] || fail "missing $libdir/$f (next to libhvd.so)"
done
soname=$(readelf -d "$libdir/libhvd.so" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
[ -n "$soname" ] || fail "$libdir/libhvd.so has no SONAME"
[ -e "$libdir/$soname" ] || fail "libhvd's SONAME is $soname but $libdir/$soname is not installed"
runpath=$(readelf -d "$libdir/libhvd.so" | grep -E 'R(UN)?PATH' || true)
case "$runpath" in
  *"$build"*) fail "the installed libhvd.so still has a RUNPATH into the build tree: $runpath" ;;
esac
ok "installed tree: include/hvd/hvd.h, hvd.hpp, elastic.hpp, ${libdir#"$prefix"/}/libhvd.so -> $soname, cmake/hvd, pkgconfig/hvd.pc"
# hvdrun is installed too, runs from there and finds the installed libhvd (--check-build).
[ -x "$prefix/bin/hvdrun" ] || fail "missing $prefix/bin/hvdrun (a launch needs hvdrun on every host)"
"$prefix/bin/hvdrun" --version >"$scratch/version.log" 2>&1 || fail "$prefix/bin/hvdrun --version" "$scratch/version.log"
"$prefix/bin/hvdrun" --check-build --json >"$scratch/check_build.json" 2>&1 ||
  fail "$prefix/bin/hvdrun --check-build" "$scratch/check_build.json"
grep -q "$libdir/libhvd.so" "$scratch/check_build.json" ||
  fail "the installed hvdrun does not load the installed libhvd" "$scratch/check_build.json"
ok "installed hvdrun: bin/hvdrun --version and --check-build (libhvd from ${libdir#"$prefix"/})"

# ---- 3. The installed headers include only standard headers ----
std_headers=" assert.h complex.h ctype.h errno.h fenv.h float.h inttypes.h iso646.h limits.h
  locale.h math.h setjmp.h signal.h stdalign.h stdarg.h stdatomic.h stdbool.h stddef.h stdint.h
  stdio.h stdlib.h stdnoreturn.h string.h tgmath.h threads.h time.h uchar.h wchar.h wctype.h
  algorithm any array atomic barrier bit bitset cassert cctype cerrno cfenv cfloat charconv chrono
  cinttypes climits clocale cmath codecvt compare complex concepts condition_variable coroutine
  csetjmp csignal cstdarg cstddef cstdint cstdio cstdlib cstring ctime cuchar cwchar cwctype deque
  exception execution expected filesystem format forward_list fstream functional future
  initializer_list iomanip ios iosfwd iostream istream iterator latch limits list locale map
  memory memory_resource mutex new numbers numeric optional ostream queue random ranges ratio
  regex scoped_allocator semaphore set shared_mutex source_location span sstream stack stdexcept
  stop_token streambuf string string_view syncstream system_error thread tuple type_traits
  typeindex typeinfo unordered_map unordered_set utility valarray variant vector version "
std_headers=" $(tr -s '[:space:]' ' ' <<<"$std_headers") "  # one space between names
for header in "$prefix"/include/hvd/*; do
  while IFS= read -r line; do
    target=$(sed -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*//; s/[[:space:]]*(\/[*/].*)?$//' <<<"$line")
    case "$target" in
      '"hvd/hvd.h"' | '"hvd/hvd.hpp"') continue ;;  # our own public headers
      '<'*'>')
        name=${target#<}
        name=${name%>}
        [[ "$std_headers" == *" $name "* ]] && continue
        ;;
    esac
    fail "${header#"$prefix"/} includes a non-standard header: $line"
  done < <(grep -E '^[[:space:]]*#[[:space:]]*include' "$header" || true)
done
ok "installed headers include only standard headers and hvd/hvd.h, hvd/hvd.hpp"

# A sanitizer build (scripts/sanitize.sh): its libhvd exports the sanitizers' type information
# for what it uses (UBSan's vptr check needs it), and a consumer built without the sanitizers
# cannot load it (their runtime must come first). Steps 4-6 are for the builds users get.
if [ -n "${HVDTEST_SANITIZERS:-}" ]; then  # (HVD_* is unset above)
  echo "skipped: exported symbols and the consumers (steps 4-6): this is a $HVDTEST_SANITIZERS build, whose libhvd only instrumented programs can load"
  find "$scratch" -mindepth 1 -delete
  echo "install check: OK (steps 1-3)"
  exit 0
fi

# ---- 4. Exported symbols ----
nm -DC --defined-only "$libdir/libhvd.so" >"$scratch/exports.txt" 2>&1 ||
  fail "nm -DC --defined-only $libdir/libhvd.so" "$scratch/exports.txt"
grep -qE ' hvd_init$' "$scratch/exports.txt" || fail "libhvd.so does not export hvd_init" "$scratch/exports.txt"
grep -qE ' hvd::init\(\)$' "$scratch/exports.txt" || fail "libhvd.so does not export hvd::init()" "$scratch/exports.txt"
if grep -E 'gloo::|fmt::|spdlog::|httplib::|hvd::contract::' "$scratch/exports.txt" >"$scratch/leaked.txt"; then
  fail "libhvd.so exports $(wc -l <"$scratch/leaked.txt") symbol(s) of its private dependencies" "$scratch/leaked.txt"
fi
ok "libhvd.so exports $(wc -l <"$scratch/exports.txt") symbols, none from gloo, fmt, spdlog, httplib or hvd::contract"

# ---- 5. A C++ consumer: find_package(hvd) -> hvd::hvd ----
cbuild=$scratch/consumer-build
if ! cmake -S "$consumer_src" -B "$cbuild" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
    >"$scratch/consumer-configure.log" 2>&1; then
  fail "configuring tests/libhvd/consumer with -DCMAKE_PREFIX_PATH=$prefix" "$scratch/consumer-configure.log"
fi
hvd_dir=$(sed -n 's/^hvd_DIR:PATH=//p' "$cbuild/CMakeCache.txt")
[ "$hvd_dir" = "$libdir/cmake/hvd" ] ||
  fail "find_package(hvd) used '$hvd_dir', not the installed $libdir/cmake/hvd"
if ! cmake --build "$cbuild" -j 1 >"$scratch/consumer-build.log" 2>&1; then
  fail "building tests/libhvd/consumer against the installed package" "$scratch/consumer-build.log"
fi
commands=$(ninja -C "$cbuild" -t commands consumer)
case "$commands" in
  *"$src/allreduce"* | *"$build/allreduce"*)
    fail "the consumer was built against the hvdrun source or build tree, not the install: $commands" ;;
esac
loads=$(LD_LIBRARY_PATH="$libdir" ldd "$cbuild/consumer")
case "$loads" in
  *"$libdir/$soname"*) ;;
  *) fail "the consumer does not load the installed $libdir/$soname: $loads" ;;
esac
rc=0
LD_LIBRARY_PATH="$libdir" timeout 60 "$cbuild/consumer" >"$scratch/consumer.out" 2>&1 || rc=$?
[ $rc -eq 0 ] || fail "the consumer exited with status $rc" "$scratch/consumer.out"
grep -qE '^consumer: rank 0 of 1 backend [a-z]+ sum OK$' "$scratch/consumer.out" ||
  fail "the consumer printed no 'consumer: rank 0 of 1 backend B sum OK' line" "$scratch/consumer.out"
grep -qE '^consumer: hvd::rank\(\) after shutdown threw hvd::RuntimeError HVD_ERR_NOT_INITIALIZED' \
  "$scratch/consumer.out" ||
  fail "the consumer did not show hvd::rank() throwing HVD_ERR_NOT_INITIALIZED after shutdown" "$scratch/consumer.out"
sed 's/^/     /' "$scratch/consumer.out"
ok "C++ consumer (find_package(hvd), hvd::hvd) built and ran"

# ---- 6. A C99 consumer: pkg-config hvd ----
export PKG_CONFIG_PATH=$libdir/pkgconfig
pcfile=$(pkg-config --path hvd 2>/dev/null || true)
[ "$pcfile" = "$libdir/pkgconfig/hvd.pc" ] ||
  fail "pkg-config found hvd at '${pcfile:-nothing}', not the installed $libdir/pkgconfig/hvd.pc"
pc_include=$(pkg-config --variable=includedir hvd)
pc_lib=$(pkg-config --variable=libdir hvd)
if [ ! -f "$pc_include/hvd/hvd.h" ] || [ ! -e "$pc_lib/libhvd.so" ] ||
   [ "$(realpath "$pc_include/hvd/hvd.h")" != "$(realpath "$prefix/include/hvd/hvd.h")" ] ||
   [ "$(realpath "$pc_lib/libhvd.so")" != "$(realpath "$libdir/libhvd.so")" ]; then
  fail "the installed hvd.pc points outside the install: includedir=$pc_include libdir=$pc_lib (installed at $prefix; hvd.pc says prefix=$(pkg-config --variable=prefix hvd)). The prefix in hvd.pc is fixed when CMake configures, so an install with 'cmake --install --prefix' elsewhere is not relocatable" \
    "$libdir/pkgconfig/hvd.pc"
fi
# shellcheck disable=SC2046  # pkg-config's flags are meant to be split
if ! gcc -std=c99 -Wall -Wextra -pedantic -Werror "$consumer_src/c_consumer.c" \
    $(pkg-config --cflags --libs hvd) -o "$scratch/c_consumer" >"$scratch/c_consumer-build.log" 2>&1; then
  fail "gcc -std=c99 -Wall -Werror c_consumer.c \$(pkg-config --cflags --libs hvd) [$(pkg-config --cflags --libs hvd)]" \
    "$scratch/c_consumer-build.log"
fi
rc=0
LD_LIBRARY_PATH="$libdir" timeout 60 "$scratch/c_consumer" >"$scratch/c_consumer.out" 2>&1 || rc=$?
[ $rc -eq 0 ] || fail "c_consumer exited with status $rc" "$scratch/c_consumer.out"
grep -qE '^c_consumer: rank 0 of 1 backend [a-z]+ allreduce allgather reducescatter OK$' "$scratch/c_consumer.out" ||
  fail "c_consumer printed no OK line" "$scratch/c_consumer.out"
sed 's/^/     /' "$scratch/c_consumer.out"
ok "C99 consumer (pkg-config hvd) built and ran"

find "$scratch" -mindepth 1 -delete
echo "install check: OK"
