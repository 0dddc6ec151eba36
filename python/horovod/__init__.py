"""Horovod's import name, a compatibility layer over hvdrun's own package `hvd`.

`import horovod.torch as hvd` gives hvd.torch, so a script written for Horovod runs unmodified
under hvdrun. This is not Horovod: when a real Horovod is installed in this Python as well, this
package refuses to stand in for it (ImportError naming both), since a script would not know which
one it got; `import hvd.torch` keeps working.
"""
import importlib.metadata as _metadata
import os as _os


def _other_horovod():
    """Where another distribution named horovod (a pip Horovod) is installed, or None."""
    try:
        dist = _metadata.distribution('horovod')
    except _metadata.PackageNotFoundError:
        return None
    return str(dist.locate_file('')) + f' (horovod {dist.version})'


_other = _other_horovod()
if _other is not None:
    raise ImportError(
        f'`horovod` here is hvdrun\'s compatibility layer ({_os.path.dirname(__file__)}), but a '
        f'Horovod distribution is also installed in this Python: {_other}. Use one: uninstall '
        f'that Horovod (pip uninstall horovod) to run this script under hvdrun, or import '
        f'hvdrun\'s package by its own name (import hvd.torch as hvd), or take hvdrun\'s '
        f'directory off PYTHONPATH to use Horovod.')

__version__ = '0.28.1'  # the Horovod API version this layer follows


def run(*args, **kwargs):
    """Horovod's Python launcher; not provided: start the script with hvdrun."""
    raise RuntimeError('horovod.run() is Horovod\'s Python launcher, which hvdrun does not '
                       'provide: start the script itself with hvdrun instead, e.g. '
                       '`hvdrun -np 2 -H host1:1,host2:1 python3 script.py` (without --num-proc)')
