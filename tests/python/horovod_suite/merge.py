#!/usr/bin/env python3
"""Merges per-rank pytest junit-xml files of one run into one verdict per test: passed only if
it passed on every rank, failed if it failed (or errored) on any rank or is missing on a rank
(a hang or a crash there), skipped if skipped on a rank and failed on none.

Usage: merge.py RANKS OUT.json PREFIX   (reads PREFIX.rank<R>.xml, or PREFIX.rank<R>.jsonl from
tests/python/horovod_suite/hvd_suite_shim.py where pytest did not end; writes OUT.json:
{test: {"verdict": ..., "reason": first line of the first failure or skip}})"""
import json
import re
import sys
import xml.etree.ElementTree as ET


def results(path):
    out = {}
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return out
    for case in root.iter('testcase'):
        name = case.get('name')
        if not name or case.get('classname') == 'pytest':
            continue  # pytest's own "internal error" entry (e.g. a timeout in teardown)
        verdict, reason = 'passed', ''
        for tag in ('failure', 'error', 'skipped'):
            node = case.find(tag)
            if node is not None:
                verdict = 'skipped' if tag == 'skipped' else 'failed'
                text = (node.get('message') or node.text or '').strip()
                reason = text.splitlines()[0][:160] if text else tag
                break
        out[name] = (verdict, reason)
    return out


def streamed(path):
    """The results hvd_suite_shim appended as the tests ran (the last word on each test wins,
    a failure over a pass: a teardown can fail a test that passed)."""
    out = {}
    try:
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if out.get(r['name'], ('',))[0] != 'failed':
                    out[r['name']] = (r['outcome'], r['reason'])
    except (OSError, ValueError):
        pass
    return out


def main():
    ranks, out_path, prefix = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    prefix = re.sub(r'\.rank\d+\.xml$', '', prefix)  # also given as PREFIX.rank0.xml ...
    # junit-xml when pytest ended on that rank; else what the shim streamed before it was stopped.
    per_rank = [results(f'{prefix}.rank{r}.xml') or streamed(f'{prefix}.rank{r}.jsonl')
                for r in range(ranks)]
    names = sorted(set().union(*[set(r) for r in per_rank]))
    merged = {}
    for name in names:
        seen = [r.get(name) for r in per_rank]
        failed = [(i, s) for i, s in enumerate(seen) if s and s[0] == 'failed']
        missing = [i for i, s in enumerate(seen) if s is None]
        skipped = [(i, s) for i, s in enumerate(seen) if s and s[0] == 'skipped']
        if failed:
            i, s = failed[0]
            merged[name] = {'verdict': 'failed', 'reason': f'rank {i}: {s[1]}'}
        elif missing:
            merged[name] = {'verdict': 'failed',
                            'reason': f'no result from rank(s) {missing} (hung or crashed)'}
        elif skipped:
            merged[name] = {'verdict': 'skipped', 'reason': skipped[0][1][1]}
        else:
            merged[name] = {'verdict': 'passed', 'reason': ''}
    with open(out_path, 'w') as f:
        json.dump(merged, f, indent=1, sort_keys=True)


if __name__ == '__main__':
    main()
