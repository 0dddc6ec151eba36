"""The chaos suite's view of processes (/proc) and its invariant checks (tests/chaos/README.md).

Each check returns a list of violations; self_test() shows every one catching a planted violation
before any round runs.
"""

import collections
import os
import signal
import subprocess
import time

MEMORY_LIMIT_KIB = 64 * 1024

# ---------------------------------------------------------------------------------------------
# /proc


def nul_list_of(pid, name):
    """/proc/PID/NAME (environ, cmdline) split at its NULs; [] once the process is gone."""
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def environ_of(pid):
    return nul_list_of(pid, "environ")


def cmdline_of(pid):
    return nul_list_of(pid, "cmdline")


def parent_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def comm_of(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().rstrip("\n")
    except OSError:
        return ""


GUARD_COMM = "hvdrun-guard"  # the agent's parent (agent/agent_guard.h): same cmdline, same env


def session_of(agent):
    """The sshd session process above an agent: its parent is its guard, the guard's parent the
    session (the login shell exec'd the guard). Returns (guard, session), 0 where there is none."""
    parent = parent_of(agent)
    if comm_of(parent) == GUARD_COMM:
        return parent, parent_of(parent)
    return 0, parent


def state_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def pids():
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def marked(mark):
    """Processes whose environment carries CHAOS_MARK=mark (the job's ranks and their children)."""
    needle = b"CHAOS_MARK=" + mark.encode()
    return [p for p in pids() if needle in environ_of(p) and state_of(p) not in ("Z", "")]


def rank_pid(mark, rank):
    for p in marked(mark):
        env = environ_of(p)
        if b"HOROVOD_RANK=%d" % rank in env and any(b"chaos_rank" in c for c in cmdline_of(p)[:1]):
            return p
    return None


def agent_pids(addresses, hvdrun):
    """Agents started over SSH on these test hosts by this build's hvdrun: `HVDRUN --agent` whose
    SSH_CONNECTION ends at one of the addresses (its server side). Another checkout's suite on
    the same machine (its own test hosts, the same addresses) is not ours. The agents' guards
    (agent/agent_guard.h: the agent's parent, same command line and environment) are not
    agents: session_of() finds them."""
    out = {}
    for p in pids():
        cmd = cmdline_of(p)
        if b"--agent" not in cmd or cmd[0] != hvdrun.encode() or state_of(p) in ("Z", ""):
            continue
        if comm_of(p) == GUARD_COMM:
            continue
        for var in environ_of(p):
            if var.startswith(b"SSH_CONNECTION="):
                fields = var.split(b"=", 1)[1].split()
                if len(fields) == 4 and fields[2].decode() in addresses:
                    out[p] = fields[2].decode()
    return out


def rsh_agent_pids(mark, hvdrun):
    """--rsh-agent mode: the job's agents (`HVDRUN --agent`, not their guards), found by the
    job's mark, which the command passed on to them with hvdrun's environment."""
    return [p for p in marked(mark) if cmdline_of(p)[:1] == [hvdrun.encode()] and
            b"--agent" in cmdline_of(p) and comm_of(p) != GUARD_COMM]


def rsh_command_pids(host):
    """--rsh-agent mode: the fake kubectl that carries `host`'s agent."""
    return [p for p in pids() if b"fake_kubectl.py" in b" ".join(cmdline_of(p)[:2]) and
            host.encode() in cmdline_of(p) and state_of(p) not in ("Z", "")]


def peak_rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


# ---------------------------------------------------------------------------------------------
# The invariant checks (each returns a list of violations; the self-test plants one for each)


def check_hang(exit_time, deadline):
    if exit_time is None or exit_time > deadline:
        return ["hang: hvdrun had not exited %.1f s after the deadline" % (
            (exit_time or time.time()) - deadline)]
    return []


def expected_verdict(f, p, h, mode, target, victim_rank):
    """The verdict table for fault `f` landed in phase `p` (aimed at `target`) on host `h` (the
    victim rank's, for rank faults): (exit codes, words the report must hold), a list of such
    alternatives, or None (no verdict)."""
    stopping = target == "stopping"
    if f in ("kill_hvdrun", "stop_hvdrun"):  # hvdrun killed: its verdict is the kill's
        return None
    if stopping:
        return ([143], ["interrupted by SIGTERM"])
    if f == "slow_link":
        return ([0], [])
    # The phase line reaches the suite a moment after hvdrun enters the phase, and the network
    # check lasts tens of milliseconds here: a cut counted in it may come after it passed.
    if f == "drop_link_launcher":  # h1 falls silent: before its job, --start-timeout
        return ([75, 74] if p == "netcheck" else [75] if p == "agents" else [74], [h])
    if f == "drop_link_hosts":  # the network check names the pair; later, the engine fails
        if p == "netcheck":  # the probes see it (68), or they had passed (as rendezvous)
            return ([68, 3, 75], [])
        # in hvd::init(): Gloo's connect errors (3), or libhvd's init watchdog first (75)
        if p == "rendezvous":
            return ([3, 75], [])
        # Running: the ranks' Gloo or engine errors (3); or the stall shutdown first, which
        # hvdrun ends with its verdict (76): the far ranks alive, the network between suspect.
        return [([3], []), ([76], ["alive: is the network between"])]
    if f == "restart_sshd" and p == "ssh":  # a login while it was down is refused
        return ([0, 69], [])
    # A console that paused slowed the ranks, lost nothing; forged tags are a rank's text.
    if f in ("hostile_connections", "none", "restart_sshd", "pause_console", "forged_tags"):
        return ([0], [])
    if f == "kill_rank" and mode == "mpi" and p == "rendezvous":
        # Killed inside MPI_Init, mpirun sometimes ends without its summary naming the rank
        # (about 1 round in 40: hvdrun then says so); or Open MPI's teardown hang (README:
        # found, not ours): an orted deadlocks, mpirun never ends, and hvdrun kills it (71).
        return [([137], ["rank %d" % victim_rank, h]),
                ([137], ["a rank exited with code 137; mpirun did not say which"]),
                ([71], ["Open MPI's daemons hang in their teardown"])]
    if f == "kill_rank":
        return ([137], ["rank %d" % victim_rank, h])
    if f == "stop_rank" and p == "rendezvous":
        # Frozen before the others' hvd::init() returned: a wait with its own timeout names
        # it (3), or libhvd's init watchdog ends them first (75: under MPI always, as MPI
        # cannot say who is missing; under Gloo when the rank froze inside the connect).
        return ([3, 75], [])
    if f == "stop_rank" and mode != "mpi":
        # The stall shutdown ends the job with hvdrun's verdict as its cause (76): the rank, its
        # host, stopped. Or the others' collectives fail first (chaos_rank exits 3) naming it:
        # a rank frozen inside a collective's data plane, which negotiation cannot see, or a
        # failure that reached hvdrun before rank 0's report (docs/why.md, "Not yet").
        return [([76], ["rank %d on %s: pid" % (victim_rank, h), "stopped"]),
                ([3], ["rank %d" % victim_rank])]
    if f == "stop_rank":  # the others' collectives fail (chaos_rank exits 3) naming it
        return ([3], ["rank %d" % victim_rank])
    if f == "kill_rsh_command":  # the agent's link gone: the host is lost, before or after
        # its hello (killed by a signal before it: the command's own report, also 74)
        return ([74], [h])
    if f == "stop_agent":  # before the job is sent: --start-timeout; after: --keepalive
        # As for drop_link_launcher: a stop counted in netcheck may come after the check passed
        # and the job was sent (the phase line reaches the suite late), and then --keepalive
        # ends it (a 60-round run under load: "lost the host ... while the job ran", its ranks
        # never started).
        return ([75, 74] if p == "netcheck" else [75] if p == "agents" else [74], [h])
    return ([74], [h])  # kill_agent, kill_sshd_session: the host is lost


def check_verdict(expected, code, stderr_text):
    """`expected`: (exit codes, words the report must hold), or a list of such alternatives."""
    if expected is None:
        return []
    alternatives = expected if isinstance(expected, list) else [expected]
    missing = None  # what the first alternative with this code lacks
    for codes, words in alternatives:
        if code in codes:
            lacks = ["wrong verdict: the report does not say %r" % w
                     for w in words if w not in stderr_text]
            if not lacks:
                return []
            missing = missing or lacks
    if missing:
        return missing
    every = sorted({c for codes, _ in alternatives for c in codes})
    return ["wrong verdict: exit %s, expected %s" % (code, " or ".join(map(str, every)))]


def check_orphans(mark, agents, sessions, wait):
    """Nothing of the job left: no marked process, no agent, SSH session or MPI daemon of it."""
    end = time.time() + wait
    while True:
        left = marked(mark) + [p for p in list(agents) + list(sessions) if state_of(p) not in ("Z", "")
                               and p not in marked(mark)]
        if not left or time.time() >= end:
            break
        time.sleep(0.2)
    return ["orphan: pid %d (%s) still there %.0f s after hvdrun exited" % (
        p, b" ".join(cmdline_of(p)).decode(errors="replace")[:80], wait) for p in left]


def read_ledger(path):
    entries = []
    try:
        with open(path, errors="replace") as f:
            for line in f:
                stamp, _, text = line.rstrip("\n").partition("\t")
                entries.append((float(stamp), text))
    except (OSError, ValueError):
        pass
    return entries


def check_lost(ledger, output_lines, before, rank):
    """Every line the rank printed before `before` is in its --output-filename file."""
    have = collections.Counter(output_lines)
    lost = [text for stamp, text in ledger if stamp < before and have[text] == 0]
    return ["lost line: rank %d printed %r; its output file lacks it" % (rank, t) for t in lost[:3]] + (
        ["lost line: ... %d more for rank %d" % (len(lost) - 3, rank)] if len(lost) > 3 else [])


def check_memory(peak_kib):
    if peak_kib > MEMORY_LIMIT_KIB:
        return ["memory: hvdrun's peak RSS %d KiB is over %d KiB" % (peak_kib, MEMORY_LIMIT_KIB)]
    return []


def self_test():
    """Each check catches a planted violation, or the suite proves nothing."""
    results = []
    # A double-forked process of the job that escaped (setsid, its parent gone).
    mark = "selftest-%d" % os.getpid()
    env = dict(os.environ, CHAOS_MARK=mark)
    subprocess.run(["sh", "-c", "setsid sleep 60 >/dev/null 2>&1 &"], env=env, check=True)
    # sh returns once it forked; the child may still be inside execve, where /proc/PID/environ
    # reads empty (a CI run's self-test missed it so). Wait until the planted sleep shows.
    end = time.time() + 5.0
    while not any(b"sleep" in c for p in marked(mark) for c in cmdline_of(p)[:1]) and time.time() < end:
        time.sleep(0.05)
    found = check_orphans(mark, [], [], 1.0)
    for p in marked(mark):
        os.kill(p, signal.SIGKILL)
    results.append(("no orphan", "a double-forked sleep carrying the job's mark", found))
    # A line deleted from an output file.
    ledger = [(1.0, "chaos: rank 0 line 1"), (2.0, "chaos: rank 0 line 2"), (3.0, "chaos: rank 0 line 3")]
    results.append(("no lost line", "line 2 deleted from rank 0's file",
                    check_lost(ledger, ["chaos: rank 0 line 1", "chaos: rank 0 line 3"], 10.0, 0)))
    # A wrong verdict.
    results.append(("right verdict", "exit 0 where 137 and 'rank 1' were expected",
                    check_verdict(([137], ["rank 1"]), 0, "all fine")))
    # An overrun deadline: a 'job' that outlives it.
    start = time.time()
    job = subprocess.Popen(["sleep", "3"])
    deadline = start + 1.0
    try:
        job.wait(timeout=max(0.0, deadline + 0.5 - time.time()))
        exit_time = time.time()
    except subprocess.TimeoutExpired:
        exit_time = None
        job.kill()
        job.wait()
    results.append(("no hang", "a job still running past its deadline", check_hang(exit_time, deadline)))
    results.append(("bounded memory", "a peak RSS of 100 MiB", check_memory(100 * 1024)))
    ok = True
    for check, planted, found in results:
        if found:
            print("self-test: %-15s caught %s: %s" % (check, planted, found[0]))
        else:
            print("self-test: %-15s MISSED %s" % (check, planted))
            ok = False
    return ok
