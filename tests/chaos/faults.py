"""Where the chaos suite's jobs run (loopback sshd hosts, network-namespace hosts) and the faults
that need more than a signal: an sshd restart, hostile connections (tests/chaos/README.md).
"""

import os
import signal
import socket
import subprocess
import time

from checks import state_of


class Site:
    """Where a round's job runs: its hosts, how to log in, and what runs hvdrun."""

    def __init__(self, hosts, port, ssh_config, known_hosts, wrap=(), netns=None):
        self.hosts, self.port, self.ssh_config, self.known_hosts = hosts, port, ssh_config, known_hosts
        self.wrap = list(wrap)  # a prefix for hvdrun's command line (ip netns exec ...)
        self.netns = netns  # netns hosts.env as a dict, or None


def read_env_file(path):
    out = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                key, value = line.split("=", 1)
                out[key] = value.strip("'")
    return out


def in_netns(env, host_index, *cmd):
    """Runs cmd inside test host h<host_index+1>'s namespace."""
    subprocess.run(["ip", "netns", "exec", env["NETNS_HOST_NS_%d" % (host_index + 1)]] + list(cmd),
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def heal_netns(env, count):
    """Every link as it was: no firewall rule, no token bucket."""
    for k in range(count):
        subprocess.run(["ip", "netns", "exec", env["NETNS_HOST_NS_%d" % (k + 1)], "iptables", "-F"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        subprocess.run(["ip", "netns", "exec", env["NETNS_HOST_NS_%d" % (k + 1)], "tc", "qdisc",
                        "del", "dev", "eth0", "root"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)


def restart_sshd(sshd_dir, down):
    """The test hosts' sshd listener stopped (SIGTERM: its sessions, the agents' links, live on),
    then, `down` seconds after it is gone, started again with the same configuration."""
    with open(os.path.join(sshd_dir, "sshd.1.pid")) as f:
        pid = int(f.read())
    os.kill(pid, signal.SIGTERM)
    end = time.time() + 5
    while state_of(pid) not in ("", "Z") and time.time() < end:
        time.sleep(0.01)
    time.sleep(down)
    subprocess.run(["/usr/sbin/sshd", "-f", os.path.join(sshd_dir, "sshd_config.1"), "-E",
                    os.path.join(sshd_dir, "sshd.1.log")], check=True, stdin=subprocess.DEVNULL)


def hostile(addresses, low, count, flavour):
    """Garbage, half-open and slow connections to every port of the job's range on each address."""
    end = time.time() + 1.5
    while time.time() < end:
        for addr in addresses:
            for port in range(low, low + count):
                try:
                    s = socket.create_connection((addr, port), timeout=0.05)
                except OSError:
                    continue
                try:
                    if flavour < 0.33:
                        s.sendall(os.urandom(64))
                    elif flavour < 0.66:
                        s.sendall(b"GET /")  # half a request, then nothing
                        time.sleep(0.01)
                    s.close()
                except OSError:
                    pass
