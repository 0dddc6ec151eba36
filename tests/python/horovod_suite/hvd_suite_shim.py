"""A pytest plugin of our own for running Horovod's test/parallel/test_torch.py under hvdrun
(tests/python/horovod_suite.sh loads it with `-p hvd_suite_shim`).

Horovod's test helpers (test/utils/common.py) import `horovod.runner.util.threads.in_thread`,
part of Horovod's Python launcher, which hvdrun's `horovod` compatibility package does not ship.
This provides that one function (our own code) before the tests are collected. It is test
support, never installed with the package."""
import json
import os
import sys
import threading
import types


def in_thread(target, args=(), name=None, daemon=True, silent=False):
    """Runs target(*args) in a new started thread and returns the thread; with silent=True an
    exception in target is swallowed."""
    if not isinstance(args, tuple):
        raise ValueError(f'args must be a tuple, not {type(args).__name__}')

    def run(*a):
        try:
            target(*a)
        except Exception:
            if not silent:
                raise
    thread = threading.Thread(target=run, args=args, name=name, daemon=daemon)
    thread.start()
    return thread


def _install():
    import horovod  # hvdrun's compatibility package
    names = ['horovod.runner', 'horovod.runner.util', 'horovod.runner.util.threads']
    for name in names:
        if name not in sys.modules:
            sys.modules[name] = types.ModuleType(name)
    sys.modules['horovod.runner.util.threads'].in_thread = in_thread
    sys.modules['horovod.runner.util'].threads = sys.modules['horovod.runner.util.threads']
    sys.modules['horovod.runner'].util = sys.modules['horovod.runner.util']
    horovod.runner = sys.modules['horovod.runner']


_install()


def pytest_runtest_logreport(report):
    """Each test's result, appended to $HVD_SUITE_RESULTS as it happens (one JSON line per phase
    that decided it): junit-xml is written only when pytest ends, so a rank that hvdrun stopped
    after another rank failed would leave no result at all."""
    path = os.environ.get('HVD_SUITE_RESULTS')
    if not path or (report.when == 'call' and report.passed is False and report.skipped is False
                    and not report.failed):
        return
    if report.when != 'call' and report.passed:
        return  # setup or teardown that went well says nothing about the test
    name = report.nodeid.rsplit('::', 1)[-1]
    outcome = 'skipped' if report.skipped else 'failed' if report.failed else 'passed'
    reason = ''
    if report.skipped and isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2])
    elif report.failed:
        reason = (getattr(report.longrepr, 'reprcrash', None) and report.longrepr.reprcrash.message
                  or str(report.longrepr).splitlines()[-1:][0] if report.longrepr else 'failed')
        if report.when != 'call':
            reason = f'failed on {report.when} with "{reason}"'
    with open(path, 'a') as f:
        f.write(json.dumps({'name': name, 'outcome': outcome, 'reason': reason[:300]}) + '\n')
