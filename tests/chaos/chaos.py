#!/usr/bin/env python3
"""The chaos suite's driver (tests/chaos/README.md; run it through tests/chaos/run.sh).

Each round starts a real job (hvdrun over two test hosts, natively or with --mpi, 2 ranks each,
chaos_rank printing numbered lines and running allreduces), injects one fault at a random moment
of a chosen phase, and checks the invariants: no hang, the right verdict, no orphan, no lost
line, bounded memory. Before any round, every invariant check is shown catching a planted
violation. checks.py holds the checks and the /proc helpers, faults.py the test hosts' sites and
the faults that need more than a signal.
"""

import argparse
import collections
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

from checks import (agent_pids, check_hang, check_lost, check_memory, check_orphans,
                    check_verdict, cmdline_of, expected_verdict, marked, parent_of, peak_rss_kib,
                    rank_pid, read_ledger, rsh_agent_pids, rsh_command_pids, self_test,
                    session_of)
from faults import Site, heal_netns, hostile, in_netns, read_env_file, restart_sshd

PHASES = ["ssh", "agents", "netcheck", "rendezvous", "running", "stopping"]
# hvdrun's debug lines that start a phase (launcher/native/native_launcher.cpp, native_job*.cpp,
# supervisor.cpp); "rendezvous" starts with the ranks and ends when every rank said "ready".
PHASE_LINES = {
    "hvdrun: debug: phase: ssh": "ssh",
    "hvdrun: debug: phase: agents": "agents",
    "hvdrun: debug: phase: network check": "netcheck",
    "hvdrun: debug: phase: starting ranks": "rendezvous",
    "hvdrun: debug: phase: stopping": "stopping",
}
RANKS, SLOTS = 4, 2
JOB_SECONDS = 4.0
# The job's timeouts: each phase's deadline is its timeout + --grace + 5 s from the fault.
SSH_TIMEOUT, START_TIMEOUT, KEEPALIVE, STALL_SHUTDOWN, GRACE, GLOO_TIMEOUT = 5, 10, 3, 6, 2, 8
PHASE_TIMEOUT = {
    "ssh": SSH_TIMEOUT,
    "agents": START_TIMEOUT,
    "netcheck": START_TIMEOUT,
    "rendezvous": max(START_TIMEOUT, GLOO_TIMEOUT),  # the ranks' own: Gloo's rendezvous
    # the rest of the job, or a frozen peer found by the keepalive or the stall inspector
    "running": JOB_SECONDS + STALL_SHUTDOWN,
    "stopping": GRACE,
}
ORPHAN_WAIT = 15.0
# Lines a rank printed this long before a fault that kills hvdrun or cuts off a host may still be
# in flight (a pipe, the agent's buffer, the SSH channel): those are exempt; older ones are not.
IN_FLIGHT = 1.0

# fault -> the phases it can land in (a rank cannot be killed before ranks exist).
FAULTS = {
    "none": ["running"],  # the control: the same job, nothing injected
    "kill_rank": ["rendezvous", "running", "stopping"],
    "stop_rank": ["rendezvous", "running"],
    "kill_agent": ["agents", "netcheck", "rendezvous", "running", "stopping"],
    "stop_agent": ["agents", "netcheck", "rendezvous", "running"],
    "kill_sshd_session": ["agents", "netcheck", "rendezvous", "running", "stopping"],
    "kill_hvdrun": PHASES,
    "hostile_connections": ["agents", "netcheck", "rendezvous", "running"],
    "restart_sshd": PHASES,
    # Output that stops flowing (issue 51): the console (the suite) stops reading hvdrun's stdout
    # for twice --keepalive and more while the ranks print megabytes; hvdrun frozen (SIGSTOP)
    # while they print, its agents must stop them anyway.
    "pause_console": ["running"],
    "stop_hvdrun": ["running"],
}
# Under --mpi, mpirun starts the ranks (its daemons log in with the system's ssh): hvdrun's agents
# live only through the network check, so the agent and SSH-session faults are native only. So
# are the hostile connections: --port-range is native only, and the ports an MPI job listens on
# are Open MPI's (unauthenticated by design, docs/security.md) and libhvd's control plane on an
# ephemeral port among them.
FAULTS_MPI = {f: FAULTS[f] for f in ("none", "kill_rank", "stop_rank", "kill_hvdrun")}
# A rank that prints lines shaped like mpirun's tags and abort message (chaos_rank's CHAOS_FORGE):
# its text, never mpirun's.
FAULTS_MPI["forged_tags"] = ["running"]
# Over network-namespace hosts (tests/netns/: real links, a firewall per host), native launches:
# the link faults, which loopback hosts cannot have. h1 is the victim host.
FAULTS_NETNS = {
    "none": ["running"],
    "drop_link_launcher": ["agents", "netcheck", "rendezvous", "running"],
    "drop_link_hosts": ["netcheck", "rendezvous", "running"],
    "slow_link": ["agents", "netcheck", "rendezvous", "running"],
}
# Agents through a command of the user's (--rsh-agent, issue 50) instead of SSH: a fake kubectl
# (tests/support/fake_kubectl.py, which relays the agent's streams as kubectl's client does) on
# the loopback hosts. kill_rsh_command: SIGKILL of one host's command, as when kubectl dies or its
# link to the API server drops: the agent's input ends, its dead-man switch stops its ranks.
FAULTS_RSH = {
    "none": ["running"],
    "kill_rank": ["running"],
    "kill_rsh_command": ["agents", "netcheck", "rendezvous", "running"],
    "kill_hvdrun": ["running"],
}
FAKE_KUBECTL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support",
                            "fake_kubectl.py")
MODES = {"native": FAULTS, "mpi": FAULTS_MPI, "netns": FAULTS_NETNS, "rsh": FAULTS_RSH}
ALL_FAULTS = list(FAULTS) + list(dict.fromkeys(
    f for m in (FAULTS_MPI, FAULTS_NETNS, FAULTS_RSH) for f in m if f not in FAULTS))
# pause_console, stop_hvdrun: each line padded to this many bytes more (chaos_rank's CHAOS_PAD),
# 3.2 MB/s for the job: the console's 8 MiB queue and every buffer on the way fill in seconds.
PAD_BYTES = 16384
# How long the console stops reading: past twice --keepalive, when a blocked pump lost hosts.
PAUSE_SECONDS = 2 * KEEPALIVE + 1
# How long after hvdrun froze its agents must have stopped every rank: their silence limit (twice
# --keepalive), the grace period and a margin.
FROZEN_SECONDS = 2 * KEEPALIVE + GRACE + 4
# slow_link: h1's every packet out leaves through a token bucket of this rate (the kernel here
# has no netem for delays; a slow link is a narrow one).
SLOW_RATE = "1mbit"


# ---------------------------------------------------------------------------------------------
# A round


class Round:
    def __init__(self, args, number, fault, phase, mode, rng):
        self.args, self.number, self.fault, self.target, self.rng = args, number, fault, phase, rng
        self.mode = mode
        self.site = args.sites["netns" if mode == "netns" else "loopback"]
        self.mark = "chaos-%d-%d-%d" % (args.seed, number, os.getpid())
        self.dir = os.path.join(args.work, "round-%03d" % number)
        os.makedirs(os.path.join(self.dir, "ledger"))
        self.phase = "start"
        self.phase_started = {}
        self.ready = set()
        self.lines = []  # hvdrun's stdout and stderr, as they came
        self.fault_time = None
        self.landed = None
        self.victim_host = None
        self.victim_rank = None
        self.agents, self.sessions, self.session_host = {}, set(), {}
        self.peak = 0
        self.console_paused = threading.Event()  # pause_console: stdout is not read meanwhile
        self.frozen_left = []  # stop_hvdrun: what still ran FROZEN_SECONDS after the freeze
        self.lock = threading.RLock()
        self.phase_event = threading.Event()

    def command(self):
        a, site = self.args, self.site
        hosts = ",".join("%s:%d" % (h, SLOTS) for h in site.hosts)
        cmd = site.wrap + [a.hvdrun] + (["--mpi"] if self.mode == "mpi" else [])
        cmd += ["-np", str(RANKS), "-H", hosts]
        if self.mode == "rsh":
            cmd += ["--rsh-agent", "%s %s exec -i {host} --" % (sys.executable, FAKE_KUBECTL)]
        else:
            cmd += ["-p", site.port, "--ssh-config", site.ssh_config, "--ssh-known-hosts",
                    site.known_hosts]
        cmd += ["--log-level", "debug", "--ssh-timeout",
                str(SSH_TIMEOUT), "--start-timeout", str(START_TIMEOUT), "--keepalive",
                str(KEEPALIVE), "--grace", str(GRACE), "--stall-check-shutdown-time-seconds",
                str(STALL_SHUTDOWN), "--stall-check-warning-time-seconds", "2",
                "--gloo-timeout-seconds", str(GLOO_TIMEOUT)]
        if self.mode != "mpi":  # --port-range is native only
            cmd += ["--port-range", "%d-%d" % (a.port_low, a.port_low + 40)]
        # Native ranks start children (a double-forked one too) that only hvdrun's agent and its
        # guard stop; under --mpi, what a rank starts is Open MPI's daemons' to stop.
        children = ["--children"] if self.mode != "mpi" else []
        knobs = [x for name in ("CHAOS_PAD", "CHAOS_FORGE") if name in self.env()
                 for x in ("-x", name)]
        return cmd + ["--output-filename", os.path.join(self.dir, "out"), "-x", "CHAOS_MARK"] + \
            knobs + [a.rank_program, str(JOB_SECONDS), os.path.join(self.dir, "ledger")] + children

    def set_phase(self, phase):
        with self.lock:
            if phase != self.phase:
                self.phase = phase
                self.phase_started[phase] = time.time()
                self.phase_event.set()

    def read_stream(self, stream):
        for raw in stream:
            while stream is self.proc.stdout and self.console_paused.is_set():
                time.sleep(0.05)
            line = raw.decode(errors="replace").rstrip("\n")
            with self.lock:
                self.lines.append(line)
            for prefix, phase in PHASE_LINES.items():
                # Under --mpi the network check's agents stop before mpirun starts: not the job's
                # stopping phase.
                if line.startswith(prefix) and not (
                        self.mode == "mpi" and phase == "stopping" and self.phase == "netcheck"):
                    self.set_phase(phase)
            if "<stdout>:chaos: rank " in line and line.endswith(" ready"):
                with self.lock:
                    self.ready.add(line)
                    if len(self.ready) == RANKS and self.phase == "rendezvous":
                        self.set_phase("running")

    def wait_phase(self, phase, timeout):
        end = time.time() + timeout
        while time.time() < end:
            with self.lock:
                if phase in self.phase_started:
                    return True
                if self.proc.poll() is not None:
                    return False
            self.phase_event.wait(0.01)
            self.phase_event.clear()
        return False

    def watch(self):
        """Peak RSS of hvdrun, and the job's agents and SSH sessions, while it runs."""
        while self.proc.poll() is None:
            self.peak = max(self.peak, peak_rss_kib(self.proc.pid))
            if self.mode == "rsh":  # the agents carry the job's mark (the command passes it)
                for pid in rsh_agent_pids(self.mark, self.args.hvdrun):
                    self.agents[pid] = "?"
            for pid, host in agent_pids(self.site.hosts, self.args.hvdrun).items():
                self.agents[pid] = host
                guard, session = session_of(pid)
                if guard:  # it must end too: recorded as the agent's side
                    self.agents[guard] = host
                if b"@" in b" ".join(cmdline_of(session)):  # "sshd: root@notty", not the listener
                    self.sessions.add(session)
                    self.session_host[session] = host
            if self.mode == "mpi":  # the ranks' Open MPI daemons: started over ssh, unmarked
                for pid in marked(self.mark):
                    daemon = parent_of(pid)
                    if any(b"orted" in c for c in cmdline_of(daemon)[:1]):
                        self.sessions.add(daemon)
            time.sleep(0.1)

    def inject(self):
        f, a = self.fault, self.args
        if f == "none":
            return True
        if f == "kill_hvdrun":
            os.kill(self.proc.pid, signal.SIGKILL)
            return True
        if f == "forged_tags":  # the ranks printed them at their start (CHAOS_FORGE)
            return True
        if f == "pause_console":
            self.console_paused.set()
            threading.Timer(PAUSE_SECONDS, self.console_paused.clear).start()
            return True
        if f == "stop_hvdrun":
            os.kill(self.proc.pid, signal.SIGSTOP)
            threading.Thread(target=self.thaw_after_check, daemon=True).start()
            return True
        if f in ("kill_rank", "stop_rank"):
            rank = self.rng.randrange(RANKS)
            # The ranks may not be there yet at the phase's start (under --mpi, mpirun's daemons
            # log in first): wait for this one, and count the fault where it lands.
            pid = self.wait_for(lambda: rank_pid(self.mark, rank), 10, 0.02)
            if pid is None:
                return False
            self.landing()
            self.victim_rank, self.victim_host = rank, self.site.hosts[rank // SLOTS]
            os.kill(pid, signal.SIGKILL if f == "kill_rank" else signal.SIGSTOP)
            return True
        if f in ("kill_agent", "stop_agent", "kill_sshd_session"):
            host = self.site.hosts[self.rng.randrange(len(self.site.hosts))]
            # At the agents phase's start the agent may not run yet: wait for it, as for a rank.
            found = self.wait_for(lambda: list(agent_pids([host], a.hvdrun)), 5, 0.01)
            if not found:
                return False
            self.landing()
            self.victim_host = host
            pid = found[0]
            if f == "kill_sshd_session":
                pid = session_of(pid)[1]
                if b"sshd" not in b" ".join(cmdline_of(pid)):
                    return False
            os.kill(pid, signal.SIGSTOP if f == "stop_agent" else signal.SIGKILL)
            return True
        if f == "kill_rsh_command":
            host = self.site.hosts[self.rng.randrange(len(self.site.hosts))]
            # As for an agent: the command may not run yet at its phase's start.
            found = self.wait_for(lambda: rsh_command_pids(host), 5, 0.01)
            if not found:
                return False
            self.landing()
            self.victim_host = host
            os.kill(found[0], signal.SIGKILL)
            return True
        if f in ("drop_link_launcher", "drop_link_hosts", "slow_link"):
            env = self.site.netns
            self.victim_host = self.site.hosts[0]
            if f == "drop_link_launcher":  # h1 <-> the launcher, both ways, silently
                launcher = env["NETNS_LAUNCHER_ADDR"]
                in_netns(env, 0, "iptables", "-A", "INPUT", "-s", launcher, "-j", "DROP")
                in_netns(env, 0, "iptables", "-A", "OUTPUT", "-d", launcher, "-j", "DROP")
            elif f == "drop_link_hosts":  # h1 <-> h2, both ways, silently
                in_netns(env, 0, "iptables", "-A", "INPUT", "-s", self.site.hosts[1], "-j", "DROP")
                in_netns(env, 1, "iptables", "-A", "INPUT", "-s", self.site.hosts[0], "-j", "DROP")
            else:
                in_netns(env, 0, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate",
                         SLOW_RATE, "burst", "4kb", "latency", "500ms")
            return True
        if f == "restart_sshd":
            restart_sshd(a.sshd_dir, self.rng.uniform(0, 0.5))
            return True
        if f == "hostile_connections":
            threading.Thread(target=hostile, args=(["127.0.0.1"] + self.site.hosts, a.port_low, 41,
                                                   self.rng.random()), daemon=True).start()
            return True
        raise ValueError(f)

    def wait_for(self, find, seconds, step):
        """What find() returns once it is something, polled every `step` s for up to `seconds`
        while hvdrun runs; None or empty when it never was."""
        end = time.time() + seconds
        found = find()
        while not found and time.time() < end and self.proc.poll() is None:
            time.sleep(step)
            found = find()
        return found

    def landing(self):
        """The fault lands now, in this phase."""
        with self.lock:
            self.landed = self.phase
        self.fault_time = time.time()

    def thaw_after_check(self):
        """stop_hvdrun: while hvdrun stays frozen, its agents must stop the printing ranks (their
        silence limit); what still runs then is recorded. Then hvdrun is killed (and let run,
        so that the kill lands)."""
        end = time.time() + FROZEN_SECONDS
        left = marked(self.mark)
        while time.time() < end:
            left = [p for p in marked(self.mark) if p != self.proc.pid]
            if not left:
                break
            time.sleep(0.2)
        self.frozen_left = [b" ".join(cmdline_of(p)).decode(errors="replace") for p in left]
        for sig in (signal.SIGKILL, signal.SIGCONT):
            try:
                os.kill(self.proc.pid, sig)
            except OSError:
                pass

    def env(self):
        env = dict(os.environ, CHAOS_MARK=self.mark)
        if self.fault in ("pause_console", "stop_hvdrun"):
            env["CHAOS_PAD"] = str(PAD_BYTES)
        if self.fault == "forged_tags":
            env["CHAOS_FORGE"] = "1"
        return env

    def run(self):
        env = self.env()
        start = time.time()
        self.proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env, start_new_session=True)
        readers = [threading.Thread(target=self.read_stream, args=(stream,), daemon=True)
                   for stream in (self.proc.stdout, self.proc.stderr)]
        for reader in readers:
            reader.start()
        watcher = threading.Thread(target=self.watch, daemon=True)
        watcher.start()
        target = self.target
        if target == "stopping":  # the job is stopped (SIGTERM) in its running phase
            if self.wait_phase("running", 30):
                time.sleep(self.rng.uniform(0.2, 1.5))
                os.kill(self.proc.pid, signal.SIGTERM)
        injected = False
        if self.wait_phase(target, 30):
            # agents, netcheck: they last tens of milliseconds; inject at once to land in them
            delay = {"ssh": 0.15, "agents": 0.0, "netcheck": 0.0, "running": 2.0,
                     "stopping": 0.3}.get(target, 0.03)
            time.sleep(self.rng.uniform(0, delay))
            self.landing()
            try:
                injected = self.inject()
            except ProcessLookupError:  # the target ended between finding it and the signal
                injected = False
        if not injected:
            self.fault_time = None
        timeout = PHASE_TIMEOUT.get(self.landed or target, 30)
        if self.fault == "slow_link":  # not a failure: the whole job, slower (3 x its length)
            timeout = 3 * (JOB_SECONDS + START_TIMEOUT)
        if self.fault == "pause_console":  # the job waits for the console, then goes on
            timeout += PAUSE_SECONDS
        if self.fault == "stop_hvdrun":  # frozen until the suite's check, then killed
            timeout += FROZEN_SECONDS
        deadline = (self.fault_time or start) + timeout + GRACE + 5
        if self.fault_time is None:
            deadline = start + 60
        exit_time = None
        try:
            self.proc.wait(timeout=max(0.1, deadline - time.time()))
            exit_time = time.time()
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for reader in readers:
            reader.join(5)
        watcher.join(5)
        with open(os.path.join(self.dir, "console"), "w") as f:
            f.write("\n".join(self.lines) + "\n")
        # A frozen process may not be stopped for good: let it see its SIGTERM/SIGKILL.
        if self.fault in ("stop_rank", "stop_agent"):
            for pid in marked(self.mark) + list(self.agents):
                try:
                    os.kill(pid, signal.SIGCONT)
                except OSError:
                    pass
        result = self.evaluate(injected, exit_time, deadline)  # the link still cut: no help
        if self.site.netns:  # every link healed, and whatever the round left killed, for the next
            heal_netns(self.site.netns, len(self.site.hosts))
            for pid in marked(self.mark) + list(self.agents) + list(self.sessions - {0}):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        else:  # an orphan found (the ranks' `sleep 300` children): gone before the next round
            for pid in marked(self.mark):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        return result

    def evaluate(self, injected, exit_time, deadline):
        violations = []
        code = self.proc.returncode
        if not injected and code != 0:  # the job failed before the fault's phase: nothing tested
            violations.append("not injected: hvdrun exited %s before the %s phase" % (code, self.target))
        if injected and self.fault == "stop_hvdrun" and self.frozen_left:
            violations.append("frozen hvdrun: %d s after it froze, still running: %s" % (
                FROZEN_SECONDS, "; ".join(self.frozen_left[:4])))
        if injected:
            if self.fault not in ("kill_hvdrun", "stop_hvdrun"):
                violations += check_hang(exit_time, deadline)
                violations += check_verdict(
                    expected_verdict(self.fault, self.landed, self.victim_host, self.mode,
                                     self.target, self.victim_rank), code, "\n".join(self.lines))
        sessions = self.sessions - {0}
        if injected and self.fault == "drop_link_launcher":
            # The cut-off host's sshd session: its TCP connection to the launcher ends only by the
            # kernel's retransmission timeout (or sshd's ClientAliveInterval); it runs nothing of
            # the job once the agent is gone (docs/security.md), and the agent is checked.
            sessions = {p for p in sessions if self.session_host.get(p) != self.victim_host}
        violations += check_orphans(self.mark, self.agents, sessions, ORPHAN_WAIT)
        # Lines in flight when hvdrun died or a host was cut off are exempt; older ones are not.
        cut = self.fault_time or time.time()
        for rank in range(RANKS):
            before = cut
            host = self.site.hosts[rank // SLOTS]
            if injected and (self.fault in ("kill_hvdrun", "stop_hvdrun") or (
                    self.fault in ("kill_agent", "stop_agent", "kill_sshd_session",
                                   "drop_link_launcher", "kill_rsh_command") and
                    host == self.victim_host)):
                before = cut - IN_FLIGHT
            ledger = read_ledger(os.path.join(self.dir, "ledger", "rank.%d" % rank))
            out_file = os.path.join(self.dir, "out", "rank.%d" % rank, "stdout")
            try:
                with open(out_file, errors="replace") as f:
                    lines = f.read().splitlines()
            except OSError:
                lines = []
            violations += check_lost(ledger, lines, before, rank)
        violations += check_memory(self.peak)
        # What hvdrun and the ranks said went wrong: a failed round must be diagnosable from a log
        # read elsewhere (CI keeps no files).
        self.said = [l for l in self.lines if "debug:" not in l and
                     not re.search(r"chaos: rank \d+ (line \d+|before init|ready|done)", l)]
        if not violations:
            subprocess.run(["rm", "-rf", self.dir])
        return code, violations


# ---------------------------------------------------------------------------------------------


def cells_of(modes):
    return [(m, f, p) for m in modes for f, phases in MODES[m].items() for p in phases]


def schedule(rounds, rng, modes):
    """Every (mode, fault, phase) cell in turn, shuffled per pass: each is covered evenly."""
    cells = cells_of(modes)
    out = []
    while len(out) < rounds:
        batch = cells[:]
        rng.shuffle(batch)
        out += batch
    return out[:rounds]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--hvdrun", required=True)
    ap.add_argument("--rank-program", required=True)
    ap.add_argument("--hosts", required=True, help="two sshd test host addresses, a,b")
    ap.add_argument("--port", required=True)
    ap.add_argument("--ssh-config", required=True)
    ap.add_argument("--known-hosts", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--sshd-dir", required=True, help="the test hosts' sshd_hosts.sh DIR")
    ap.add_argument("--netns-dir", default="", help="tests/netns/netns_hosts.sh DIR (2 hosts), "
                    "for the netns mode")
    ap.add_argument("--netns-skip", default="", help="why there are no netns hosts")
    # Below the kernel's ephemeral range (32768-60999 by default) and below the sshd test hosts'
    # ports (20000-40000): Gloo's pair listeners take ephemeral ports, and Gloo accepts any
    # connection to them as the peer (docs/security.md), so a range in the ephemeral range lets
    # the hostile connections hit a Gloo pair by chance (1 round in a few hundred, CI, seed 1).
    ap.add_argument("--port-low", type=int, default=10100)
    ap.add_argument("--modes", default="native,mpi,netns,rsh",
                    help="launch modes to mix, a comma list of native, mpi (hvdrun --mpi), rsh "
                    "(native, agents through --rsh-agent and a fake kubectl) and "
                    "netns (native, over network-namespace hosts)")
    ap.add_argument("--only", help="[MODE:]FAULT:PHASE: every round that cell (to chase one "
                    "failure); MODE is native unless given")
    args = ap.parse_args()
    args.hvdrun = os.path.realpath(args.hvdrun)  # as hvdrun names itself for its agents
    args.hosts = args.hosts.split(",")
    if args.rounds < 1:
        ap.error("--rounds %d: give 1 or more" % args.rounds)
    modes = args.modes.split(",")
    for m in modes:
        if m not in MODES:
            ap.error("--modes %s: %r is not a mode; the modes: %s" % (args.modes, m, ", ".join(MODES)))
    args.sites = {"loopback": Site(args.hosts, args.port, args.ssh_config, args.known_hosts)}
    if args.netns_dir:
        env = read_env_file(os.path.join(args.netns_dir, "hosts.env"))
        args.sites["netns"] = Site(env["NETNS_HOSTS_ADDRS"].split(","), "22",
                                   env["NETNS_SSH_CONFIG"], env["NETNS_SSH_KNOWN_HOSTS"],
                                   wrap=["ip", "netns", "exec", env["NETNS_LAUNCHER_NS"]], netns=env)
    elif "netns" in modes:
        print("chaos: the netns mode is skipped: %s" % (args.netns_skip or "no --netns-dir"))
        modes.remove("netns")
        if not modes:
            return 77
    only = None
    if args.only:
        parts = args.only.split(":")
        only = tuple(parts) if len(parts) == 3 else ("native",) + tuple(parts)
        if only[0] == "netns" and not args.netns_dir:
            ap.error("--only %s: no netns hosts here (%s)" % (args.only, args.netns_skip))
        if only not in cells_of(MODES):
            ap.error("--only %s: not a [MODE:]FAULT:PHASE cell; the cells: %s" % (
                args.only, ", ".join(":".join(c) for c in cells_of(MODES))))
    if not self_test():
        print("chaos: an invariant check missed its planted violation; no round is worth running")
        return 2
    rng = random.Random(args.seed)
    table = collections.OrderedDict()
    failures = 0
    plan = schedule(args.rounds, rng, modes)
    if only:
        plan = [only] * args.rounds
    for number, (mode, fault, phase) in enumerate(plan, 1):
        r = Round(args, number, fault, phase, mode, random.Random(rng.random()))
        code, violations = r.run()
        landed = r.landed if r.fault_time else "not injected"
        row = table.setdefault((mode, fault, landed), collections.Counter())
        row["rounds"] += 1
        for v in violations:
            row[v.split(":", 1)[0]] += 1
        status = "ok" if not violations else "VIOLATION"
        victim = ("rank %d" % r.victim_rank if r.victim_rank is not None else
                  r.victim_host if r.victim_host else "")
        print("round %3d: %-6s %-19s aimed at %-10s landed in %-12s exit %-4s %-9s %s" % (
            number, mode, fault, phase, landed, code, status, victim), flush=True)
        for v in violations:
            print("           " + v)
        if violations and r.said:
            print("           what the job said (the last %d of %d lines that are neither debug nor "
                  "numbered):" % (min(len(r.said), 12), len(r.said)))
            for line in r.said[-12:]:
                print("             | " + line[:200])
        if violations:
            failures += 1
            print("           replay: tests/chaos/run.sh --rounds %d --seed %d --modes %s (work dir "
                  "%s), or this cell alone: --only %s:%s:%s" % (number, args.seed, args.modes, r.dir,
                                                               mode, fault, phase))
    print()
    print("%-6s %-19s %-12s %6s %5s %7s %5s %7s %6s %12s" % (
        "mode", "fault", "phase", "rounds", "hangs", "orphans", "lost", "verdict", "memory",
        "not injected"))
    phase_order = {p: i for i, p in enumerate(PHASES)}
    for (mode, fault, phase), row in sorted(table.items(), key=lambda kv: (
            kv[0][0], ALL_FAULTS.index(kv[0][1]), phase_order.get(kv[0][2], len(PHASES)))):
        print("%-6s %-19s %-12s %6d %5d %7d %5d %7d %6d %12d" % (
            mode, fault, phase, row["rounds"], row["hang"], row["orphan"], row["lost line"],
            row["wrong verdict"], row["memory"], row["not injected"]))
    print()
    print("chaos: %d rounds, %d with a violation (seed %d)" % (args.rounds, failures, args.seed))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
