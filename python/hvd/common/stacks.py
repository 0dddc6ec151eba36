"""Lets hvdrun read this rank's Python stacks when it is stuck (contract/report.h).

A rank that hvdrun's agent started has two descriptors: HVD_REPORT_FD, a pipe to the agent, and
HVD_STACK_FD, a second pipe. On import, faulthandler is registered for one signal that dumps
every thread's stack to HVD_STACK_FD, and the agent is told which signal on HVD_REPORT_FD. When
a job stalls, hvdrun asks the missing ranks' agents, which send that signal and read the dump:
the stacks appear in hvdrun's verdict (docs/why.md). faulthandler needs no GIL, so a rank stuck
in C code holding it is read too. Nothing happens outside such a launch.
"""
import faulthandler
import json
import os
import signal

_STACK_SIGNAL = signal.SIGRTMIN + 5  # a real-time signal: no library of the field uses it
_installed = False


def install():
    """Registers the stack handler once; silent where the launch has no agent."""
    global _installed
    if _installed:
        return
    try:
        report_fd = int(os.environ.get('HVD_REPORT_FD', ''))
        stack_fd = int(os.environ.get('HVD_STACK_FD', ''))
    except ValueError:
        return
    try:
        # Not inherited by what the rank starts (DataLoader workers fork, and keep the handler,
        # which is harmless: the agent signals the rank's own process only).
        os.set_inheritable(report_fd, False)
        os.set_inheritable(stack_fd, False)
        faulthandler.register(_STACK_SIGNAL, file=stack_fd, all_threads=True, chain=False)
        # The pid: the rank may be a shell or a wrapper that started this Python; the agent
        # then reads and signals this process, not the one it started.
        line = json.dumps({'kind': 'stack_handler', 'signal': int(_STACK_SIGNAL),
                           'pid': os.getpid()}) + '\n'
        os.write(report_fd, line.encode())
    except (OSError, ValueError, RuntimeError):
        return  # a descriptor that is not there: the environment was copied from elsewhere
    _installed = True
