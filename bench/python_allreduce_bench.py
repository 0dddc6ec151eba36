#!/usr/bin/env python3
"""The Python binding's own cost: a synchronous allreduce (float32, sum, in place) from Python
(hvd.torch) against the same call through libhvd's C++ API, timed in C++, in the same processes
and the same run. Blocks alternate (and alternate which goes first) so machine noise hits both;
the median per-call time over blocks is reported, with the difference and the ratio.

Usage: PYTHONPATH=build/python hvdrun [--mpi] -np 2 -H localhost:2 /usr/bin/python3 \\
           bench/python_allreduce_bench.py [--sizes 4096,67108864] [--blocks 9] [--calls N]
Rank 0 prints the table. Not part of ctest (a benchmark, not a timed test)."""
import argparse
import statistics
import time

import torch

import hvd.torch as hvd
from hvd import _native


def python_block(t, calls, name):
    start = time.perf_counter()
    for _ in range(calls):
        hvd.allreduce_(t, op=hvd.Sum, name=name)
    return (time.perf_counter() - start) / calls


def cpp_block(t, calls):
    return _native.bench_cpp_allreduce(t.data_ptr(), t.numel(), calls) / calls


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--sizes', default='4096,67108864', help='bytes, comma-separated')
    parser.add_argument('--blocks', type=int, default=9)
    parser.add_argument('--calls', type=int, default=0, help='calls per block (0: by size)')
    args = parser.parse_args()
    hvd.init()
    rows = []
    for nbytes in [int(s) for s in args.sizes.split(',')]:
        t = torch.ones(nbytes // 4)
        calls = args.calls or max(3, min(2000, (1 << 23) // nbytes))
        for _ in range(3):
            python_block(t, 3, 'bench.py')
            cpp_block(t, 3)
        py_times, cpp_times = [], []
        for block in range(args.blocks):
            order = [('py', python_block), ('cpp', None)] if block % 2 == 0 else \
                [('cpp', None), ('py', python_block)]
            for kind, _ in order:
                hvd.barrier()
                if kind == 'py':
                    py_times.append(python_block(t, calls, 'bench.py'))
                else:
                    cpp_times.append(cpp_block(t, calls))
        # The slowest rank's median.
        medians = torch.tensor([statistics.median(py_times), statistics.median(cpp_times)],
                               dtype=torch.float64)
        medians = hvd.allreduce(medians, op=hvd.Max, name='bench.medians')
        rows.append((nbytes, calls, float(medians[0]), float(medians[1])))
    if hvd.rank() == 0:
        print(f'python_allreduce_bench: {hvd.size()} ranks, backend {hvd.backend_name()}, '
              f'{args.blocks} blocks, median per call (slowest rank)')
        print(f'{"bytes":>10} {"calls":>6} {"python us":>10} {"c++ us":>10} {"diff us":>8} '
              f'{"c++/python":>10}')
        for nbytes, calls, py, cpp in rows:
            print(f'{nbytes:>10} {calls:>6} {py * 1e6:>10.1f} {cpp * 1e6:>10.1f} '
                  f'{(py - cpp) * 1e6:>8.1f} {cpp / py:>10.3f}')
    hvd.shutdown()


if __name__ == '__main__':
    main()
