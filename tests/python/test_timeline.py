"""hvd.start_timeline / stop_timeline: rank 0 writes a Chrome trace with Horovod's names, valid
JSON once stop_timeline() returns; another file, the same file twice, stop without start."""
import json

import pytest
import torch

import hvd.torch as hvd


def _ops(tag):
    out = hvd.allreduce(torch.ones(100000), name=f'{tag}.grad', op=hvd.Sum)
    assert out[0].item() == hvd.size()
    w = hvd.broadcast(torch.full((3,), hvd.rank(), dtype=torch.int16), 0, name=f'{tag}.w')
    assert w.tolist() == [0, 0, 0]


def _events(path):
    with open(path) as f:
        return json.load(f)  # the whole file must be valid JSON


def _rows(events):
    """The tensors whose op ran while the file recorded. Another rank may submit its next op
    before rank 0 stops the timeline (the ops between two files, or, on a rank other than 0,
    the next test's first ops: rank 0 alone writes, the others go on at once): its request's
    arrival is recorded (NEGOTIATE_<OP> and that rank's mark), nothing else of it."""
    names = {e['pid']: e['args']['name'] for e in events
             if e.get('name') == 'process_name' and 'name' in e.get('args', {})}
    phases = {}
    for e in events:
        if e['ph'] == 'B':
            phases.setdefault(e['pid'], set()).add(e['name'])
    ran = set()
    for pid, name in names.items():
        if phases.get(pid, set()) & {'ALLREDUCE', 'BROADCAST'}:
            ran.add(name)
        else:
            assert len(phases.get(pid, set())) <= 1, (name, phases.get(pid))  # NEGOTIATE_<OP>
    return ran


def test_start_run_stop_then_another_file(tmp_path):
    first, second = tmp_path / 'first.json', tmp_path / 'second.json'
    hvd.stop_timeline()  # nothing records: harmless
    hvd.start_timeline(str(first), mark_cycles=True)
    _ops('tl.first')
    hvd.stop_timeline()
    _ops('tl.between')  # runs in no file (its request may reach rank 0 before the stop: _rows)
    hvd.start_timeline(second)  # a path-like object is fine too
    hvd.start_timeline(second)  # the same file again: it goes on
    _ops('tl.second')
    hvd.stop_timeline()
    hvd.stop_timeline()
    if hvd.rank() != 0:  # Horovod's rule: the coordinator alone writes
        assert not first.exists() and not second.exists()
        return
    a, b = _events(first), _events(second)
    assert _rows(a) == {'allreduce.tl.first.grad', 'broadcast.tl.first.w'}
    assert _rows(b) == {'allreduce.tl.second.grad', 'broadcast.tl.second.w'}
    for events in (a, b):
        begun = {e['name'] for e in events if e['ph'] == 'B'}
        assert {'NEGOTIATE_ALLREDUCE', 'ALLREDUCE', 'NEGOTIATE_BROADCAST', 'BROADCAST',
                'QUEUE'} <= begun, begun
        assert any(name.endswith('_ALLREDUCE') and not name.startswith('NEGOTIATE')
                   for name in begun), begun  # GLOO_ALLREDUCE or MPI_ALLREDUCE
        meta = [e for e in events if e.get('pid') == 0 and e['ph'] == 'M']
        assert any('start_time_since_epoch_in_micros' in e['args'] for e in meta), meta
        ranks = {e['name'] for e in events if e['ph'] == 'X'}
        assert ranks == {str(r) for r in range(hvd.size())}
        ends = [e for e in events if e['ph'] == 'E' and 'dtype' in e.get('args', {})]
        assert {e['args']['dtype'] for e in ends} == {'float32', 'int16'}
    assert any(e['name'] == 'CYCLE_START' for e in a if e['ph'] == 'i')
    assert not any(e['ph'] == 'i' for e in b)  # mark_cycles=False


def test_an_unwritable_path_is_a_value_error_on_rank_0(tmp_path):
    bad = tmp_path / 'no' / 'such' / 'dir.json'
    if hvd.rank() == 0:
        with pytest.raises(ValueError, match='cannot write it'):
            hvd.start_timeline(str(bad))
    else:
        hvd.start_timeline(str(bad))  # not collective: only rank 0 opens the file
        hvd.stop_timeline()
    with pytest.raises(ValueError, match='empty'):
        hvd.start_timeline('')


def test_after_shutdown_a_value_error_and_a_timeline_left_running_is_closed(tmp_path):
    path = tmp_path / 'left.json'
    hvd.start_timeline(str(path))
    _ops('tl.left')
    hvd.shutdown()  # closes the file, as Horovod's shutdown does
    try:
        with pytest.raises(ValueError, match='not been initialized'):
            hvd.start_timeline(str(tmp_path / 'late.json'))
        with pytest.raises(ValueError, match='not been initialized'):
            hvd.stop_timeline()
    finally:
        hvd.init()  # for the tests after this one
    if hvd.rank() == 0:
        assert _rows(_events(path)) == {'allreduce.tl.left.grad', 'broadcast.tl.left.w'}


def test_horovod_timeline_mark_cycles_at_init(tmp_path, monkeypatch):
    """HOROVOD_TIMELINE=FILE with HOROVOD_TIMELINE_MARK_CYCLES=1 (hvdrun --timeline-filename
    --timeline-mark-cycles) read at init: the file has CYCLE_START marks; without the second, none."""
    marked, plain = tmp_path / 'marked.json', tmp_path / 'plain.json'
    try:
        for path, marks in ((marked, '1'), (plain, '0')):
            hvd.shutdown()
            monkeypatch.setenv('HOROVOD_TIMELINE', str(path))
            monkeypatch.setenv('HOROVOD_TIMELINE_MARK_CYCLES', marks)
            hvd.init()
            _ops(f'tl.env{marks}')
    finally:
        hvd.shutdown()  # closes the file
        monkeypatch.delenv('HOROVOD_TIMELINE')
        monkeypatch.delenv('HOROVOD_TIMELINE_MARK_CYCLES')
        hvd.init()
    if hvd.rank() != 0:
        return
    a, b = _events(marked), _events(plain)
    assert _rows(a) == {'allreduce.tl.env1.grad', 'broadcast.tl.env1.w'}
    assert any(e['name'] == 'CYCLE_START' for e in a if e['ph'] == 'i')
    assert not any(e['ph'] == 'i' for e in b)


def test_a_process_set_s_ops_name_the_set(tmp_path):
    """An op on a process set other than the global one: its row is "<name> [process set N]"
    (a set's names are its own: the same name runs in both sets here), its NEGOTIATE_<OP> and its
    op's end carry "process_set": N, and its requests' marks are global ranks."""
    if hvd.size() < 2:
        pytest.skip('a set of rank 0 alone is the global set at size 1')
    path = tmp_path / 'sets.json'
    evens = list(range(0, hvd.size(), 2))  # has rank 0, which writes the file
    hvd.shutdown()
    hvd.init(process_sets='dynamic')
    try:
        ps = hvd.add_process_set(evens)
        set_id = ps.process_set_id
        hvd.start_timeline(str(path))
        hvd.barrier()  # the ops below reach rank 0 after it started recording (marks checked)
        if ps.included():
            out = hvd.allreduce(torch.ones(8), name='tl.set.grad', op=hvd.Sum, process_set=ps)
            assert out[0].item() == len(evens)
        out = hvd.allreduce(torch.ones(8), name='tl.set.grad', op=hvd.Sum)
        assert out[0].item() == hvd.size()
        hvd.stop_timeline()
    finally:
        hvd.shutdown()
        hvd.init()  # for the tests after this one
    if hvd.rank() != 0:
        return
    events = _events(path)
    in_set = f'allreduce.tl.set.grad [process set {set_id}]'
    pids = {e['args']['name']: e['pid'] for e in events
            if e.get('name') == 'process_name' and 'name' in e.get('args', {})}
    ran = {name for name, pid in pids.items()
           if any(e.get('pid') == pid and e.get('name') == 'ALLREDUCE' for e in events)}
    assert ran == {'allreduce.tl.set.grad', in_set}
    of_set = [e for e in events if e.get('pid') == pids[in_set]]
    global_ = [e for e in events if e.get('pid') == pids['allreduce.tl.set.grad']]
    negotiate = [e for e in of_set if e.get('name') == 'NEGOTIATE_ALLREDUCE']
    assert negotiate and negotiate[0]['args']['process_set'] == set_id
    ends = [e for e in of_set if e['ph'] == 'E' and 'dtype' in e.get('args', {})]
    assert ends and ends[0]['args']['process_set'] == set_id
    assert {e['name'] for e in of_set if e['ph'] == 'X'} == {str(r) for r in evens}
    assert not any('process_set' in e.get('args', {}) for e in global_)
    assert {e['name'] for e in global_ if e['ph'] == 'X'} == {str(r) for r in range(hvd.size())}
