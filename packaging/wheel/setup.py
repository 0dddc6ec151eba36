"""The one thing pyproject.toml cannot say: the wheel is not pure Python.

It holds a native module built for one Python (hvd/_native.cpython-XY-*.so) and ELF binaries and
libraries built for one platform, none of which setuptools compiles (CMake did). A distribution
with extension modules gets the interpreter's tags (cpXY-cpXY-linux_x86_64, not py3-none-any) and
is installed in platlib; this one says it has them.
"""
from setuptools import setup
from setuptools.dist import Distribution


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


setup(distclass=BinaryDistribution)
