"""Our own pytest suite for hvd.torch / horovod.torch (tests/python/run_pytest.sh runs it alone
and under hvdrun). Every rank runs the same tests in the same order: they are collective."""
import pytest

hvd = pytest.importorskip('hvd.torch')


@pytest.fixture(autouse=True, scope='session')
def initialized():
    hvd.init()
    yield
    hvd.shutdown()
