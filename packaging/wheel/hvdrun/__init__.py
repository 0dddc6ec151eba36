"""hvdrun's binaries in the wheel, and the console entry points that run them.

pip puts `hvdrun` and `hvdrun-agent` into the environment's bin folder as small Python scripts
that call main() and agent() here; each execs the binary of its name in bin/ beside this file
(`python -m hvdrun` does the same as `hvdrun`). Not the binaries themselves in the bin folder: a
binary knows itself by its real path (/proc/self/exe), and hvdrun takes from it
  - the agent it starts on every host (--agent-path's default): this same path, so a host with the
    same environment at the same path has it; and hvdrun-agent beside it (srun's agents);
  - where --check-build looks for libhvd: bin/../lib, this package's lib/.
Those hold for bin/ here, inside site-packages, whatever the environment's layout.
"""
import os
import signal
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _exec(name):
    binary = os.path.join(_HERE, "bin", name)
    # Python ignores SIGPIPE and SIGXFSZ for itself, and an ignored signal stays ignored across
    # exec: hvdrun would run, and start its ranks, so. Give back the defaults a shell gives.
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_DFL)
    try:
        os.execv(binary, [name] + sys.argv[1:])
    except OSError as e:
        sys.stderr.write(f"{name}: cannot run the wheel's {binary}: {e.strerror} "
                         f"(reinstall the hvdrun wheel)\n")
        sys.exit(127 if e.errno == 2 else 126)


def _environment_first_on_path():
    """Make `python` in the job's command this environment's Python.

    A rank runs its command as found on PATH, and hvdrun forwards its PATH to every host. Once
    the environment is activated its bin folder comes first there; run from it without that
    (/venv/bin/hvdrun -np 2 python train.py), put the folder first, as activating it would, so
    that every rank, on every host with the same environment at the same path, runs the Python
    that has these packages. A PATH that already names the folder is left as it is.
    """
    bindir = os.path.dirname(sys.executable) if sys.executable else ""
    if not bindir:
        return
    path = os.environ.get("PATH") or os.defpath  # unset: what exec's search would use
    if bindir not in path.split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + path


def main():
    """The `hvdrun` command: hvdrun's own binary, with this environment's bin folder on PATH."""
    _environment_first_on_path()
    _exec("hvdrun")


def agent():
    """The `hvdrun-agent` command (hvdrun starts the one in bin/ itself; this is for people)."""
    _exec("hvdrun-agent")
