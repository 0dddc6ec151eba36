#!/usr/bin/env bash
# Checks hvdrun's wheel (scripts/package.sh --wheel, packaging/wheel/README.md) as a pip user
# gets it: installed into a new venv that sees Debian's torch (--system-site-packages) with
# `pip install --no-index`, and run from there with no LD_LIBRARY_PATH, no PYTHONPATH and a PATH
# without the venv (its hvdrun called by path, as from an unactivated venv):
#   1. the wheel: its name (cpXY-cpXY-linux_<arch> for that Python, not py3-none-any), its files
#      (hvd, horovod, the native module, libhvd.so.0, hvdrun, hvdrun-agent), its metadata (no
#      dependency: no torch), and no ELF file in it that needs libtorch or libc10;
#   2. pip install into the venv: `hvdrun` on the venv's PATH, --version, --check-build loading
#      the venv's libhvd, `import horovod.torch` from the venv (torch from Debian's);
#   3. `ldd` of every installed ELF file: everything found, libhvd from inside the venv, and no
#      RUNPATH that points into a build tree;
#   4. hvdrun -np 2 python -c '...': a 2-rank allreduce whose sum it asserts, each rank running the
#      venv's python (the entry point puts the venv's bin folder first on PATH);
#   5. a 2-rank DistributedOptimizer: 3 SGD steps on different data per rank, then the parameters
#      identical on both ranks (compared bytewise there, by allgather, and here);
#   6. the allreduce again over two sshd test hosts (tests/sshd), whose agent is the venv's binary
#      at the same path (--agent-path's default), skipped without an sshd;
#   7. pip uninstall leaves nothing of the wheel in the venv.
# Prints PASS/FAIL lines; exits non-zero on the first failure; removes what it made.
# Usage: wheel_check.sh [WHEEL]   (without one, it builds it: bash scripts/package.sh --wheel,
#        with BUILD_DIR as that script takes it). HVD_PYTHON: the Python the wheel is for
#        (default /usr/bin/python3, where Debian's torch is).
set -euo pipefail
[ $# -le 1 ] || { echo "usage: wheel_check.sh [WHEEL]" >&2; exit 2; }
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
python=${HVD_PYTHON:-/usr/bin/python3}
scratch=$(mktemp -d /tmp/hvd-wheel-check.XXXXXX)
cleanup() {
  [ -f "$scratch/sshd/hosts.env" ] && bash "$src/tests/sshd/sshd_hosts.sh" stop "$scratch/sshd" >/dev/null 2>&1
  rm -rf "$scratch"
}
trap cleanup EXIT
. "$src/tests/packaging/fail.sh"  # fail WHAT [LOG]
pass() { echo "PASS: $1"; }

if [ $# -eq 1 ]; then
  wheel=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
  [ -f "$wheel" ] || fail "no wheel $1"
else
  bash "$src/scripts/package.sh" --wheel >"$scratch/package.log" 2>&1 ||
    fail "bash scripts/package.sh --wheel" "$scratch/package.log"
  wheel=$(tail -n 1 "$scratch/package.log")
  [ -f "$wheel" ] || fail "package.sh --wheel printed no wheel's path" "$scratch/package.log"
fi

# ---- 1. The wheel itself ----
tag=$("$python" -c 'import sys, sysconfig; v = "%d%d" % sys.version_info[:2]
print(f"cp{v}-cp{v}-" + sysconfig.get_platform().replace("-", "_").replace(".", "_"))')
name=$(basename "$wheel")
[[ $name =~ ^hvdrun-([0-9][0-9a-z.+]*)-$tag\.whl$ ]] ||
  fail "$name is not named hvdrun-VERSION-$tag.whl (the tags of $python)"
version=${BASH_REMATCH[1]}
mkdir "$scratch/unpacked"
"$python" -m zipfile -e "$wheel" "$scratch/unpacked"
listing=$(cd "$scratch/unpacked" && find . -type f | sed 's|^\./||' | sort)
for path in hvd/__init__.py hvd/torch/__init__.py hvd/torch/optimizer.py horovod/__init__.py \
  horovod/torch/__init__.py hvdrun/__init__.py hvdrun/bin/hvdrun hvdrun/bin/hvdrun-agent \
  hvdrun/lib/libhvd.so.0 "hvdrun-$version.dist-info/METADATA" \
  "hvdrun-$version.dist-info/entry_points.txt"; do
  grep -qxF "$path" <<<"$listing" || fail "the wheel lacks $path: $(tr '\n' ' ' <<<"$listing")"
done
grep -qE '^hvd/_native\.cpython-[0-9]+-.*\.so$' <<<"$listing" || fail "the wheel lacks hvd/_native.cpython-*.so"
nccl=""
grep -qxF hvdrun/lib/libhvd_nccl.so <<<"$listing" && nccl=", the NCCL plugin"
! grep -qE '(^|/)__pycache__/|\.pyc$' <<<"$listing" || fail "the wheel holds byte-compiled files"
meta=$scratch/unpacked/hvdrun-$version.dist-info
! grep -q '^Requires-Dist:' "$meta/METADATA" || fail "the wheel depends on something: $(grep '^Requires-Dist:' "$meta/METADATA" | tr '\n' ' ')"
grep -q '^Root-Is-Purelib: false$' "$meta/WHEEL" || fail "the wheel says it is pure Python" "$meta/WHEEL"
elf_files=()
while IFS= read -r -d '' file; do
  readelf -h "$file" >/dev/null 2>&1 && elf_files+=("$file")
done < <(find "$scratch/unpacked" -type f -print0)
for file in "${elf_files[@]}"; do
  if readelf -d "$file" | grep -E '\(NEEDED\).*\[(libtorch|libc10)' >/dev/null; then
    fail "${file#"$scratch/unpacked/"} needs libtorch: $(readelf -d "$file" | grep -E 'libtorch|libc10' | tr -s ' ')"
  fi
done
pass "$name ($(( $(stat -c %s "$wheel") / 1024 )) KiB): hvd, horovod, the native module, hvdrun, hvdrun-agent, libhvd.so.0$nccl; no Requires-Dist, not pure; none of its ${#elf_files[@]} ELF files needs libtorch or libc10"

# ---- 2. Installed into a venv that sees Debian's torch ----
venv=$scratch/venv
"$python" -m venv --system-site-packages "$venv" >"$scratch/venv.log" 2>&1 ||
  fail "$python -m venv --system-site-packages" "$scratch/venv.log"
PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/pip" install --no-index "$wheel" \
  >"$scratch/pip.log" 2>&1 || fail "pip install --no-index $name" "$scratch/pip.log"
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("platlib"))')
# Everything from here on: no LD_LIBRARY_PATH or PYTHONPATH, a PATH without the venv (the
# entry point must find its own), from a folder that is not the source tree.
cd "$scratch"
bare=(env -u LD_LIBRARY_PATH -u PYTHONPATH -u PYTHONHOME -u VIRTUAL_ENV PATH=/usr/sbin:/usr/bin:/sbin:/bin)
[ "$(PATH="$venv/bin:/usr/bin:/bin" command -v hvdrun)" = "$venv/bin/hvdrun" ] ||
  fail "hvdrun is not on the venv's PATH ($venv/bin)"
said=$("${bare[@]}" "$venv/bin/hvdrun" --version 2>&1) || fail "hvdrun --version: $said"
[ "$said" = "hvdrun $version" ] || fail "hvdrun --version says '$said', the wheel is $version"
"${bare[@]}" "$venv/bin/hvdrun" --check-build --json >"$scratch/check_build.json" 2>&1 ||
  fail "hvdrun --check-build" "$scratch/check_build.json"
grep -qF "\"$site/hvdrun/lib/libhvd.so.0\"" "$scratch/check_build.json" ||
  fail "hvdrun --check-build does not load $site/hvdrun/lib/libhvd.so.0" "$scratch/check_build.json"
# With the venv on PATH (as ranks get it), --check-build asks the venv's python3 too, though it
# is a link to the interpreter the binding was built for: there the binding imports.
env -u LD_LIBRARY_PATH -u PYTHONPATH PATH="$venv/bin:/usr/bin:/bin" "$venv/bin/hvdrun" \
  --check-build --json >"$scratch/check_build_path.json" 2>&1 ||
  fail "hvdrun --check-build with the venv on PATH" "$scratch/check_build_path.json"
"$venv/bin/python" -c '
import json, sys
doc = json.load(open(sys.argv[1]))
venv = sys.argv[2]
found = [p for p in doc["python_binding"]["interpreters"]
         if p["python"].startswith(venv) and "module" in p and "error" not in p]
sys.exit(0 if found else 1)' "$scratch/check_build_path.json" "$venv" ||
  fail "hvdrun --check-build does not find the binding importable in the venv's python3" \
    "$scratch/check_build_path.json"
"${bare[@]}" "$venv/bin/python" -c '
import torch, horovod.torch as hvd, hvd.torch as own
assert hvd is own, "horovod.torch is not hvd.torch"
print(hvd.__file__, torch.__file__)' >"$scratch/import.out" 2>&1 ||
  fail "import horovod.torch in the venv" "$scratch/import.out"
read -r hvd_file torch_file <"$scratch/import.out"
[ "$hvd_file" = "$site/hvd/torch/__init__.py" ] || fail "horovod.torch came from $hvd_file, not $site/hvd/torch"
[[ $torch_file != "$venv"/* ]] || fail "torch came from the venv ($torch_file): the wheel brought it?"
pass "pip install --no-index into a --system-site-packages venv: $said, --check-build loads the venv's libhvd and imports the binding in the venv's python3, import horovod.torch from the venv (torch from $(dirname "$torch_file"))"

# ---- 3. What the installed files need, found from inside the venv ----
installed=()
while IFS= read -r -d '' file; do
  readelf -h "$file" >/dev/null 2>&1 && installed+=("$file")
done < <(find "$site/hvd" "$site/hvdrun" -type f -print0)
[ ${#installed[@]} -eq ${#elf_files[@]} ] || fail "${#installed[@]} ELF files installed, ${#elf_files[@]} in the wheel"
build_roots=$(find "$src" -maxdepth 1 -name 'build*' -type d | tr '\n' ' ')
for file in "${installed[@]}"; do
  "${bare[@]}" ldd "$file" >"$scratch/ldd.out" 2>&1 || fail "ldd ${file#"$site/"}" "$scratch/ldd.out"
  ! grep -q 'not found' "$scratch/ldd.out" || fail "ldd ${file#"$site/"}: a library is not found" "$scratch/ldd.out"
  found=$(sed -n 's/^[[:space:]]*libhvd\.so\.0 => \([^ ]*\) .*/\1/p' "$scratch/ldd.out")
  if [ -n "$found" ] && [ "$(readlink -f "$found")" != "$(readlink -f "$site/hvdrun/lib/libhvd.so.0")" ]; then
    fail "ldd ${file#"$site/"}: libhvd.so.0 is not the venv's" "$scratch/ldd.out"
  fi
  [[ $file != */hvd/_native* ]] || [ -n "$found" ] || fail "ldd ${file#"$site/"}: no libhvd.so.0" "$scratch/ldd.out"
  runpath=$(readelf -d "$file" | sed -n 's/.*(\(RUNPATH\|RPATH\)).*\[\(.*\)\]/\2/p')
  for root in "$src" $build_roots; do
    [[ $runpath != *"$root"* ]] || fail "${file#"$site/"} has a RUNPATH into $root: $runpath"
  done
done
pass "ldd of the ${#installed[@]} installed ELF files: all found, hvd/_native's libhvd.so.0 => $site/hvdrun/lib/libhvd.so.0; no RUNPATH into the source or build tree"

# venv_job OUT ARGS...: the venv's hvdrun -np 2 ARGS (bare environment, 120 s at most), its output
# in OUT; a failure if it does not exit 0.
venv_job() {
  local out=$1 rc=0
  shift
  timeout 120 "${bare[@]}" "$venv/bin/hvdrun" -np 2 "$@" >"$out" 2>&1 || rc=$?
  [ $rc -eq 0 ] || fail "hvdrun -np 2 $* exited $rc" "$out"
}

# ---- 4. A 2-rank allreduce under the venv's hvdrun ----
cat >"$scratch/allreduce.py" <<'EOF'
import sys
import torch
import horovod.torch as hvd
hvd.init()
t = hvd.allreduce(torch.full((3,), float(hvd.rank() + 1)), op=hvd.Sum)
print(f"allreduce rank {hvd.rank()} of {hvd.size()} {t.tolist()} {sys.executable} {hvd.__file__}")
hvd.shutdown()
EOF
venv_job "$scratch/run.out" python allreduce.py
for rank in 0 1; do
  grep -qxF "[1,$rank]<stdout>:allreduce rank $rank of 2 [3.0, 3.0, 3.0] $venv/bin/python $site/hvd/torch/__init__.py" "$scratch/run.out" ||
    fail "rank $rank did not print a sum of [3.0, 3.0, 3.0] from the venv's python and horovod.torch" "$scratch/run.out"
done
pass "hvdrun -np 2 python allreduce.py: both ranks sum to [3.0, 3.0, 3.0], running $venv/bin/python (PATH without the venv)"

# ---- 5. DistributedOptimizer, 2 ranks ----
cat >"$scratch/optimizer.py" <<'EOF'
import hashlib
import torch
import horovod.torch as hvd
hvd.init()
torch.manual_seed(1234 + hvd.rank())  # different initial weights and data on each rank
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                               named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(opt, root_rank=0)
start = torch.cat([p.detach().flatten().clone() for p in model.parameters()])
for _ in range(3):
    x, y = torch.randn(32, 8), torch.randn(32, 2)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
flat = torch.cat([p.detach().flatten() for p in model.parameters()])
both = hvd.allgather(flat.unsqueeze(0))
assert torch.equal(both[0], both[1]), "the ranks' parameters differ"
assert not torch.equal(flat, start), "the steps changed nothing"
print(f"optimizer rank {hvd.rank()} params {hashlib.sha256(flat.numpy().tobytes()).hexdigest()}")
hvd.shutdown()
EOF
venv_job "$scratch/opt.out" python optimizer.py
digests=$(sed -n 's/^\[1,[01]\]<stdout>:optimizer rank [01] params \([0-9a-f]\{64\}\)$/\1/p' "$scratch/opt.out" | sort -u)
if [ "$(grep -c '<stdout>:optimizer rank' "$scratch/opt.out")" -ne 2 ] || [ "$(wc -l <<<"$digests")" -ne 1 ]; then
  fail "the two ranks did not print the same parameters after DistributedOptimizer's steps" "$scratch/opt.out"
fi
pass "DistributedOptimizer, 2 ranks, 3 SGD steps on different data: parameters identical on both ranks (sha256 ${digests:0:16}...)"

# ---- 6. Over SSH: the agents are the venv's binary at the same path ----
if [ ! -x /usr/sbin/sshd ]; then
  echo "SKIP: the SSH launch (no /usr/sbin/sshd: apt-get install openssh-server)"
else
  HVDTEST_SSHD_OWNER_PID=$$ bash "$src/tests/sshd/sshd_hosts.sh" start "$scratch/sshd" 2 >"$scratch/sshd.log" 2>&1 ||
    fail "starting two sshd test hosts" "$scratch/sshd.log"
  set -a
  # shellcheck disable=SC1091
  . "$scratch/sshd/hosts.env"
  set +a
  a=${HVDTEST_SSH_ADDRS%%,*} b=${HVDTEST_SSH_ADDRS##*,}
  ssh_args=(-H "$a:1,$b:1" -p "$HVDTEST_SSH_PORT" --ssh-config "$HVDTEST_SSH_CONFIG"
            --ssh-known-hosts "$HVDTEST_SSH_KNOWN_HOSTS")
  "${bare[@]}" "$venv/bin/hvdrun" --dry-run -np 2 "${ssh_args[@]}" python allreduce.py >"$scratch/dry.out" 2>&1 ||
    fail "hvdrun --dry-run over $a and $b" "$scratch/dry.out"
  grep -qF "$site/hvdrun/bin/hvdrun --agent" "$scratch/dry.out" ||
    fail "the dry run does not start the agent $site/hvdrun/bin/hvdrun" "$scratch/dry.out"
  venv_job "$scratch/ssh.out" "${ssh_args[@]}" python allreduce.py
  for rank in 0 1; do
    grep -qxF "[1,$rank]<stdout>:allreduce rank $rank of 2 [3.0, 3.0, 3.0] $venv/bin/python $site/hvd/torch/__init__.py" "$scratch/ssh.out" ||
      fail "rank $rank over SSH did not print the sum from the venv's python" "$scratch/ssh.out"
  done
  pass "over sshd hosts $a and $b: agents $site/hvdrun/bin/hvdrun, both ranks sum to [3.0, 3.0, 3.0] in the venv's python"
fi

# ---- 7. pip uninstall ----
PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/pip" uninstall -y hvdrun >"$scratch/uninstall.log" 2>&1 ||
  fail "pip uninstall hvdrun" "$scratch/uninstall.log"
left=$(find "$site/hvd" "$site/horovod" "$site/hvdrun" "$venv/bin/hvdrun" "$venv/bin/hvdrun-agent" 2>/dev/null || true)
[ -z "$left" ] || fail "pip uninstall left: $(tr '\n' ' ' <<<"$left")"
pass "pip uninstall hvdrun removes all of it"
echo "PASS: wheel_check ($name, ${SECONDS}s)"
