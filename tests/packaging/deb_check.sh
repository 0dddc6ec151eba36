#!/usr/bin/env bash
# Checks hvdrun's Debian packages (scripts/package.sh, cmake/HvdPackaging.cmake), then installs
# them for real, uses them, and removes them again:
#   1. each package: its fields, its size, the files it must hold (dpkg-deb -x into a scratch root);
#   2. every shared library a binary in a package needs is provided by a package it depends on
#      (or, for the NCCL plugin only, by the CUDA toolkit, which no Debian package provides);
#   3. every Depends is satisfiable from the Debian archive (apt-get install --simulate);
#   4. apt-get install ./*.deb; then the installed hvdrun: --version, --check-build (it loads the
#      installed libhvd, and lists the installed Python binding), man hvdrun, the completion files;
#      python3-hvd (when the build has the binding): Debian's python3 imports horovod.torch from
#      dist-packages, byte-compiled by the package's postinst;
#   5. a consumer built against the installed package: C++ with find_package(hvd), C with
#      pkg-config; the C++ one runs as 2 ranks under the installed hvdrun over two sshd test hosts,
#      and so does a Python script on the installed horovod.torch;
#   6. apt-get purge (also when a step fails), which leaves no file of python3-hvd behind.
# Must run as root (apt-get). Usage: deb_check.sh DEB_DIR
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: deb_check.sh DEB_DIR" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "deb_check.sh: must run as root (it installs the packages)" >&2; exit 2; }
debs=$(cd "$1" && pwd)
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
scratch=$(mktemp -d /tmp/hvd-deb-check.XXXXXX)
installed=0
cleanup() {
  if [ "$installed" -eq 1 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get purge -y -q "${names[@]}" >"$scratch/purge.log" 2>&1 ||
      { echo "deb_check.sh: apt-get purge failed:"; tail -5 "$scratch/purge.log"; }
  fi
  [ -f "$scratch/sshd/hosts.env" ] && bash "$src/tests/sshd/sshd_hosts.sh" stop "$scratch/sshd" >/dev/null 2>&1
  rm -rf "$scratch"
}
trap cleanup EXIT
. "$src/tests/packaging/fail.sh"  # fail WHAT [LOG]
ok() { echo "ok   $1"; }

# ---- 1. The packages, their fields and files ----
names=()
declare -A deb_of
# The build has the Python binding when its native module is in the build folder.
has_python=0
compgen -G "$debs/python/hvd/_native*.so" >/dev/null && has_python=1
for name in hvdrun libhvd0 libhvd-dev libhvd-nccl python3-hvd; do
  mapfile -t found < <(find "$debs" -maxdepth 1 -name "${name}_*.deb")
  if [ ${#found[@]} -eq 0 ]; then
    [ "$name" = libhvd-nccl ] && continue  # only in builds with NCCL
    [ "$name" = python3-hvd ] && [ "$has_python" -eq 0 ] && continue  # only with the binding
    fail "no ${name}_*.deb in $debs"
  fi
  [ ${#found[@]} -eq 1 ] || fail "more than one ${name}_*.deb in $debs: ${found[*]}"
  [ "$(dpkg-deb -f "${found[0]}" Package)" = "$name" ] || fail "${found[0]} is not package $name"
  deb_of[$name]=${found[0]}
  names+=("$name")
  dpkg-deb -x "${found[0]}" "$scratch/root-$name"
done
printf '%-12s %-12s %8s  %s\n' package version size depends
for name in "${names[@]}"; do
  printf '%-12s %-12s %6s K  %s\n' "$name" "$(dpkg-deb -f "${deb_of[$name]}" Version)" \
    "$(( $(stat -c %s "${deb_of[$name]}") / 1024 ))" "$(dpkg-deb -f "${deb_of[$name]}" Depends)"
done
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
libdir=usr/lib/$multiarch
has() {  # has PACKAGE PATH...: each path is in the package (a file or a link)
  local name=$1 path
  shift
  for path in "$@"; do
    [ -e "$scratch/root-$name/$path" ] || [ -L "$scratch/root-$name/$path" ] ||
      fail "$name lacks /$path: $(cd "$scratch/root-$name" && find . -type f -o -type l | sed 's|^\.||' | tr '\n' ' ')"
  done
}
has hvdrun usr/bin/hvdrun usr/bin/hvdrun-agent usr/share/man/man1/hvdrun.1.gz \
  usr/share/bash-completion/completions/hvdrun usr/share/zsh/vendor-completions/_hvdrun
has libhvd0 "$libdir/libhvd.so.0"
has libhvd-dev usr/include/hvd/hvd.h usr/include/hvd/hvd.hpp usr/include/hvd/elastic.hpp \
  "$libdir/libhvd.so" "$libdir/cmake/hvd/hvdConfig.cmake" "$libdir/pkgconfig/hvd.pc"
[ -z "${deb_of[libhvd-nccl]:-}" ] || has libhvd-nccl "$libdir/libhvd_nccl.so"
[ -e "$scratch/root-libhvd0/$libdir/libhvd.so" ] && fail "libhvd0 holds libhvd.so (the link belongs in libhvd-dev)"
pydir=usr/lib/python3/dist-packages
if [ -n "${deb_of[python3-hvd]:-}" ]; then
  has python3-hvd "$pydir/hvd/__init__.py" "$pydir/hvd/torch/__init__.py" \
    "$pydir/hvd/torch/mpi_ops.py" "$pydir/horovod/__init__.py" "$pydir/horovod/torch/__init__.py"
  compgen -G "$scratch/root-python3-hvd/$pydir/hvd/_native.cpython-*.so" >/dev/null ||
    fail "python3-hvd lacks /$pydir/hvd/_native.cpython-*.so"
  [ -z "$(find "$scratch/root-python3-hvd" -name __pycache__ -o -name '*.pyc')" ] ||
    fail "python3-hvd ships byte-compiled files (its postinst makes them)"
fi
ok "files: hvdrun (binaries, man page, bash and zsh completion), libhvd0 (libhvd.so.0), libhvd-dev (headers, libhvd.so, CMake, pkg-config)${deb_of[libhvd-nccl]:+, libhvd-nccl (the plugin)}${deb_of[python3-hvd]:+, python3-hvd (hvd and horovod in /$pydir, the native module)}"

# ---- 2. What the binaries need is what the packages depend on ----
owner_of() {  # the Debian package that holds the shared library named $1, or nothing
  local lib=$1 dir
  for dir in "/lib/$multiarch" "/usr/lib/$multiarch" /lib /usr/lib; do
    if dpkg -S "$dir/$lib" >/dev/null 2>&1; then
      dpkg -S "$dir/$lib" | head -1 | cut -d: -f1
      return
    fi
  done
}
for name in "${names[@]}"; do
  depends=" $(dpkg-deb -f "${deb_of[$name]}" Depends | sed -E 's/\([^)]*\)//g; s/[,|]/ /g' | tr -s ' ') "
  while IFS= read -r -d '' file; do
    readelf -h "$file" >/dev/null 2>&1 || continue
    while IFS= read -r lib; do
      provider=""
      for other in "${names[@]}"; do  # one of ours (libhvd.so.0 in libhvd0)
        [ -e "$scratch/root-$other/$libdir/$lib" ] && provider=$other
      done
      [ -n "$provider" ] || provider=$(owner_of "$lib")
      if [ -z "$provider" ]; then
        [ "$name" = libhvd-nccl ] && case "$lib" in libnccl* | libcudart*) continue ;; esac
        fail "${file#"$scratch/root-$name"} ($name) needs $lib, which no Debian package provides"
      fi
      [ "$provider" = "$name" ] && continue
      # The package itself, or a name it provides (libspdlog1.10 provides libspdlog1.10-fmt9).
      # (One of ours, not installed yet, provides nothing else: dpkg-query fails for it.)
      provides=" $provider $( (dpkg-query -W -f='${Provides}' "$provider" 2>/dev/null || true) | sed -E 's/\([^)]*\)//g; s/,/ /g') "
      found=0
      for dep in $depends; do [[ "$provides" == *" $dep "* ]] && found=1; done
      [ "$found" -eq 1 ] ||
        fail "${file#"$scratch/root-$name"} ($name) needs $lib from $provider, but $name does not depend on it (Depends:$depends)"
    done < <(readelf -d "$file" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  done < <(find "$scratch/root-$name" -type f -print0)
done
ok "every library a packaged binary needs comes from a package it depends on (libhvd-nccl: libnccl and libcudart from the CUDA toolkit)"

# ---- 3. Depends satisfiable from the archive ----
(cd "$debs" && apt-get install --simulate -q "${deb_of[@]}") >"$scratch/simulate.log" 2>&1 ||
  fail "apt-get install --simulate of the packages" "$scratch/simulate.log"
ok "apt-get install --simulate: every Depends is satisfiable ($(grep -c '^Inst ' "$scratch/simulate.log") packages would be installed)"

# ---- 4. Installed for real ----
installed=1
DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${deb_of[@]}" >"$scratch/install.log" 2>&1 ||
  fail "apt-get install ./*.deb" "$scratch/install.log"
[ "$(command -v hvdrun)" = /usr/bin/hvdrun ] || [ -x /usr/bin/hvdrun ] || fail "no /usr/bin/hvdrun after the install"
version=$(/usr/bin/hvdrun --version)
[ "$version" = "hvdrun $(dpkg-deb -f "${deb_of[hvdrun]}" Version | sed 's/-[^-]*$//')" ] ||
  fail "/usr/bin/hvdrun --version says '$version'"
/usr/bin/hvdrun --check-build --json >"$scratch/check_build.json" 2>&1 || fail "hvdrun --check-build" "$scratch/check_build.json"
grep -q "/$libdir/libhvd.so.0" "$scratch/check_build.json" ||
  fail "the installed hvdrun does not load /$libdir/libhvd.so.0" "$scratch/check_build.json"
[ "$(man -w hvdrun)" = /usr/share/man/man1/hvdrun.1.gz ] || fail "man -w hvdrun: $(man -w hvdrun 2>&1)"
MANWIDTH=100 man hvdrun 2>/dev/null | col -b >"$scratch/man.txt"
grep -q -- '--check-ssh' "$scratch/man.txt" || fail "man hvdrun does not render the options" "$scratch/man.txt"
ok "installed: $version, --check-build loads /$libdir/libhvd.so.0, man hvdrun renders ($(wc -l <"$scratch/man.txt") lines)"
if [ -n "${deb_of[python3-hvd]:-}" ]; then
  # Debian's python3, from a neutral folder and without PYTHONPATH: the installed packages.
  (cd "$scratch" && env -u PYTHONPATH /usr/bin/python3 -c '
import horovod.torch as hvd, hvd.torch as own
import horovod.torch.mpi_ops, horovod.torch.compression, horovod.common.exceptions
assert hvd is own, "horovod.torch is not hvd.torch"
hvd.init()
assert (hvd.size(), hvd.rank()) == (1, 0), (hvd.size(), hvd.rank())
print(hvd.__file__, hvd.allreduce(__import__("torch").ones(3), op=hvd.Sum).tolist())
hvd.shutdown()') >"$scratch/py_import.out" 2>&1 || fail "import horovod.torch with Debian's python3" "$scratch/py_import.out"
  grep -q "^/$pydir/hvd/torch/__init__.py \[1.0, 1.0, 1.0\]$" "$scratch/py_import.out" ||
    fail "horovod.torch did not come from /$pydir (or its allreduce of size 1 was wrong)" "$scratch/py_import.out"
  compgen -G "/$pydir/hvd/torch/__pycache__/*.pyc" >/dev/null || fail "python3-hvd's postinst byte-compiled nothing"
  grep -q '"importable": true' "$scratch/check_build.json" ||
    fail "--check-build does not list the installed Python binding as importable" "$scratch/check_build.json"
  ok "python3-hvd: /usr/bin/python3 imports horovod.torch (= hvd.torch) from /$pydir, byte-compiled; --check-build lists it"
fi
echo "---- man hvdrun, first screen ----"
head -n 24 "$scratch/man.txt"
echo "----"

# ---- 5. Consumers built against the installed package, run under the installed hvdrun ----
cmake -S "$src/tests/libhvd/consumer" -B "$scratch/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >"$scratch/consumer.log" 2>&1 ||
  fail "configuring the consumer against the installed package" "$scratch/consumer.log"
hvd_dir=$(sed -n 's/^hvd_DIR:PATH=//p' "$scratch/consumer/CMakeCache.txt")
[ "$hvd_dir" = "/$libdir/cmake/hvd" ] || fail "find_package(hvd) used '$hvd_dir', not /$libdir/cmake/hvd"
cmake --build "$scratch/consumer" >>"$scratch/consumer.log" 2>&1 || fail "building the consumer" "$scratch/consumer.log"
# shellcheck disable=SC2046  # pkg-config's flags are meant to be split
gcc -std=c99 -Wall -Werror "$src/tests/libhvd/consumer/c_consumer.c" $(pkg-config --cflags --libs hvd) \
  -o "$scratch/c_consumer" >"$scratch/c_consumer.log" 2>&1 ||
  fail "gcc c_consumer.c \$(pkg-config --cflags --libs hvd)" "$scratch/c_consumer.log"
"$scratch/c_consumer" >"$scratch/c_consumer.out" 2>&1 || fail "c_consumer" "$scratch/c_consumer.out"
ok "consumers: C++ with find_package(hvd) from /$libdir/cmake/hvd, C with pkg-config ($(tail -n 1 "$scratch/c_consumer.out"))"

HVDTEST_SSHD_OWNER_PID=$$ bash "$src/tests/sshd/sshd_hosts.sh" start "$scratch/sshd" 2 >"$scratch/sshd.log" 2>&1 ||
  fail "starting two sshd test hosts" "$scratch/sshd.log"
set -a
# shellcheck disable=SC1091
. "$scratch/sshd/hosts.env"
set +a
a=${HVDTEST_SSH_ADDRS%%,*} b=${HVDTEST_SSH_ADDRS##*,}
rc=0
timeout 120 /usr/bin/hvdrun -np 2 -H "$a:1,$b:1" -p "$HVDTEST_SSH_PORT" --ssh-config "$HVDTEST_SSH_CONFIG" \
  --ssh-known-hosts "$HVDTEST_SSH_KNOWN_HOSTS" "$scratch/consumer/consumer" >"$scratch/run.out" 2>&1 || rc=$?
[ $rc -eq 0 ] || fail "the consumer under /usr/bin/hvdrun over $a and $b exited $rc" "$scratch/run.out"
for rank in 0 1; do
  grep -qE "^\[1,$rank\]<stdout>:consumer: rank $rank of 2 backend [a-z]+ sum OK$" "$scratch/run.out" ||
    fail "rank $rank printed no 'consumer: rank $rank of 2 ... sum OK'" "$scratch/run.out"
done
grep -E '<stdout>:consumer: rank' "$scratch/run.out" | sed 's/^/     /'
ok "2 ranks of the consumer under the installed hvdrun over sshd hosts $a and $b (agents: /usr/bin/hvdrun)"
if [ -n "${deb_of[python3-hvd]:-}" ]; then
  cp "$src/tests/packaging/py_consumer.py" "$scratch/py_consumer.py"
  rc=0
  timeout 120 /usr/bin/hvdrun -np 2 -H "$a:1,$b:1" -p "$HVDTEST_SSH_PORT" --ssh-config "$HVDTEST_SSH_CONFIG" \
    --ssh-known-hosts "$HVDTEST_SSH_KNOWN_HOSTS" /usr/bin/python3 "$scratch/py_consumer.py" >"$scratch/py_run.out" 2>&1 || rc=$?
  [ $rc -eq 0 ] || fail "py_consumer.py under /usr/bin/hvdrun over $a and $b exited $rc" "$scratch/py_run.out"
  for rank in 0 1; do
    grep -qE "^\[1,$rank\]<stdout>:py_consumer: rank $rank of 2 sum OK /$pydir/hvd/torch/__init__.py$" "$scratch/py_run.out" ||
      fail "rank $rank printed no 'py_consumer: rank $rank of 2 sum OK /$pydir/...'" "$scratch/py_run.out"
  done
  grep -E '<stdout>:py_consumer: rank' "$scratch/py_run.out" | sed 's/^/     /'
  ok "2 ranks of a horovod.torch script (/usr/bin/python3, the installed python3-hvd) under the installed hvdrun over $a and $b"
fi
# Removed again: nothing of python3-hvd stays (prerm's py3clean takes the byte-compiled files).
DEBIAN_FRONTEND=noninteractive apt-get purge -y -q "${names[@]}" >"$scratch/purge.log" 2>&1 ||
  fail "apt-get purge" "$scratch/purge.log"
installed=0
for left in /usr/bin/hvdrun "/$libdir/libhvd.so.0" "/$pydir/hvd" "/$pydir/horovod"; do
  [ ! -e "$left" ] || fail "$left is still there after apt-get purge: $(find "$left" -maxdepth 3 | head -5 | tr '\n' ' ')"
done
ok "apt-get purge ${names[*]}: nothing left behind"
echo "deb check: OK"
