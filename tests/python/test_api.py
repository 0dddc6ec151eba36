"""Import names, lifecycle, topology and build facts."""
import os
import pathlib
import subprocess
import sys
import tempfile

import pytest
import torch

import hvd.torch as hvd


def test_horovod_torch_is_hvd_torch():
    import horovod
    import horovod.common.exceptions
    import horovod.torch
    import horovod.torch.compression
    import horovod.torch.mpi_ops
    from hvd.common import exceptions as hvd_exceptions
    assert horovod.torch is hvd
    assert horovod.torch.mpi_ops is hvd.mpi_ops
    assert horovod.torch.compression.Compression is hvd.Compression
    assert horovod.common.exceptions.HorovodInternalError is hvd.HorovodInternalError
    assert hvd_exceptions.HorovodInternalError is hvd.HorovodInternalError
    assert issubclass(hvd.HorovodInternalError, RuntimeError)
    with pytest.raises(RuntimeError, match='hvdrun'):
        horovod.run(print, np=2)


def test_topology_matches_the_launcher():
    size = int(os.environ.get('HOROVOD_SIZE', os.environ.get('OMPI_COMM_WORLD_SIZE', '1')))
    assert hvd.size() == size
    assert 0 <= hvd.rank() < size
    if 'HOROVOD_RANK' in os.environ:
        assert hvd.rank() == int(os.environ['HOROVOD_RANK'])
        assert hvd.local_rank() == int(os.environ['HOROVOD_LOCAL_RANK'])
    assert hvd.local_size() * hvd.cross_size() == size
    assert hvd.is_homogeneous()
    assert hvd.is_initialized()
    hvd.init()  # again: a no-op
    assert hvd.size() == size


def test_build_facts():
    assert hvd.gloo_built() or hvd.mpi_built()
    assert isinstance(hvd.nccl_built(), int)
    assert hvd.ddl_built() is False and hvd.ccl_built() is False and hvd.rocm_built() is False
    assert hvd.mpi_enabled() != hvd.gloo_enabled()
    if hvd.mpi_enabled():
        assert hvd.mpi_threads_supported()
    else:
        with pytest.raises(ValueError):
            hvd.mpi_threads_supported()


def run_alone(code, env=None):
    # A process of its own, outside the job (and outside srun's task, inside Slurm).
    full = dict(os.environ)
    for name in list(full):
        if name.startswith(('HOROVOD_', 'HVD_', 'OMPI_', 'PMIX_', 'SLURM_')):
            del full[name]
    full.update(env or {})
    return subprocess.run([sys.executable, '-c', code], env=full, capture_output=True, text=True,
                          timeout=60)


def test_an_op_before_init_is_a_value_error():
    r = run_alone('import hvd.torch as hvd, torch\n'
                  'for f in (hvd.size, lambda: hvd.allreduce(torch.ones(1))):\n'
                  '    try:\n        f()\n    except ValueError as e:\n        print("VE", e)\n'
                  'hvd.init(); hvd.shutdown()\n'
                  'try:\n    hvd.rank()\nexcept ValueError as e:\n    print("AFTER", e)\n')
    assert r.returncode == 0, r.stderr
    assert r.stdout.count('VE Horovod has not been initialized; use hvd.init().') == 2, r.stdout
    assert 'AFTER Horovod has not been initialized' in r.stdout, r.stdout


def test_import_horovod_refuses_beside_another_horovod():
    with tempfile.TemporaryDirectory() as scratch:  # not tmp_path: ranks would share its root
        refuses_beside(pathlib.Path(scratch))


def refuses_beside(tmp_path):
    dist = tmp_path / 'horovod-0.28.1.dist-info'
    dist.mkdir()
    (dist / 'METADATA').write_text('Metadata-Version: 2.1\nName: horovod\nVersion: 0.28.1\n')
    path = os.environ.get('PYTHONPATH', '')
    r = run_alone('import hvd.torch\nprint("hvd ok")\nimport horovod\n',
                  {'PYTHONPATH': f'{path}:{tmp_path}'})
    assert 'hvd ok' in r.stdout
    assert r.returncode != 0
    assert 'ImportError' in r.stderr and str(tmp_path) in r.stderr and 'hvd.torch' in r.stderr


def test_alone_the_size_is_one():
    r = run_alone('import horovod.torch as hvd, torch\nhvd.init()\n'
                  'print(hvd.size(), hvd.rank(), hvd.allreduce(torch.ones(2)).tolist())\n')
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == '1 0 [1.0, 1.0]'
