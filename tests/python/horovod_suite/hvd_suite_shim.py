"""A pytest plugin of our own for running Horovod's test/parallel/test_torch.py under hvdrun
(tests/python/horovod_suite.sh loads it with `-p hvd_suite_shim`).

Horovod's test helpers (test/utils/common.py) import `horovod.runner.util.threads.in_thread`,
part of Horovod's Python launcher, which hvdrun's `horovod` compatibility package does not ship.
This provides that one function (our own code) before the tests are collected. It is test
support, never installed with the package."""
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
