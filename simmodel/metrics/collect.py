"""Turn what the processes recorded into tidy tables, once, after ``env.run()``.

The hot path only appended tuples (pass log) and set fields on request records; when the
run ends they are taken as plain records (``simmodel.metrics.records``) and here become
tables with the columns declared in ``simmodel.result`` (``simmodel.metrics.tables``:
DataFrames when read).  Nothing here reads a live
worker: pass logs arrive as ``WorkerRecord``s.

ITL samples are rebuilt without a per-token list: a request's gap to a token emitted in
the pass right after the pass of its previous token equals that pass's duration, so each
pass carries a weight (how many completed requests had such a gap in it, from the
requests' ``segs`` ranges via a difference array); the other gaps (``bridges``) are
individual samples of weight 1.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields
from operator import attrgetter

import numpy as np

from simmodel.metrics.records import WorkerRecord, request_record, unreleased_record
from simmodel.metrics.tables import PassesTable, RequestsTable
from simmodel.result import REQUEST_COLUMNS, RequestRecord

#: (column, getter, numeric) per field of ``RequestRecord``, in column order
_COLUMNS = tuple((f.name, attrgetter(f.name), f.type in ("int", "float", int, float))
                 for f in fields(RequestRecord))
#: the dtypes pandas infers for a numeric column of Python ints / floats (NaN included)
_NUMERIC = (np.dtype(np.int64), np.dtype(np.float64))
#: requests whose records are held at once (a long run has hundreds of thousands)
_CHUNK = 16384


def requests_table(requests, unreleased, dp_size: int = 1,
                   prefill_dp: int = 1, consume: bool = False) -> RequestsTable:
    """``requests``: EngineRequests in release order; ``unreleased``: (turn, status) of
    workload turns that never reached the cluster (cut short: ``incomplete``; left behind
    by a cancelled turn: ``cancelled``).  With attention DP the worker index is reported
    as ``worker × dp_size + rank`` (a prefill worker's with ``prefill_dp``).
    ``consume``: ``requests`` is emptied as its rows are made (a long run's request
    objects are freed a chunk at a time while the table grows)."""
    parts = []
    for i in range(0, len(requests), _CHUNK):       # a chunk's records at a time
        chunk = requests[i:i + _CHUNK]
        if consume:
            requests[i:i + _CHUNK] = [None] * len(chunk)
        parts.append(records_table([request_record(r, dp_size, prefill_dp) for r in chunk]))
        chunk = None
    if consume:
        requests.clear()
    parts.append(records_table([unreleased_record(t, status) for t, status in unreleased]))
    return _concat(parts)


def _concat(parts: list[RequestsTable]) -> RequestsTable:
    """The rows of ``parts`` in order, with the dtypes ``records_table`` gives all their
    rows at once: a numeric column stays an array if it is one in every part (float64 if
    it is in one), else it is a list (of the parts' values)."""
    parts = [p for p in parts if p.n] or parts[:1]
    if len(parts) == 1:
        return parts[0]
    data = {}
    for name in REQUEST_COLUMNS:
        pieces = [p.columns[name] for p in parts]
        if all(isinstance(v, np.ndarray) for v in pieces):
            data[name] = np.concatenate(pieces)
        else:
            data[name] = [x for v in pieces
                          for x in (v.tolist() if isinstance(v, np.ndarray) else v)]
    return RequestsTable(data, sum(p.n for p in parts))


def requests_frame(requests, unreleased, dp_size: int = 1, prefill_dp: int = 1):
    """``Result.requests`` (the DataFrame of ``requests_table``)."""
    return requests_table(requests, unreleased, dp_size, prefill_dp).frame()


def records_table(records: Sequence[RequestRecord]) -> RequestsTable:
    """The requests table of its rows (columns ``REQUEST_COLUMNS``), by column.

    The dtypes are those ``pd.DataFrame.from_records`` would infer from the values, but
    a numeric column is converted by numpy in one call (int64 if every value is an int,
    else float64), which skips pandas' per-object inference (the bulk of the cost); a
    column numpy would type otherwise (``None`` in it, say) is left to pandas."""
    n = len(records)
    data = {}
    for name, get, numeric in _COLUMNS:
        values = list(map(get, records))
        if numeric and n:
            first = values[0]
            if type(first) is float and values.count(first) == n:
                # one float throughout (a default: the lifecycle of aggregated runs); ints
                # equal to it would make a float column too
                arr = np.full(n, first)
            else:
                arr = np.array(values)
            if arr.dtype in _NUMERIC:
                values = arr
        data[name] = values
    return RequestsTable(data, n)


def records_frame(records: Sequence[RequestRecord]):
    """``Result.requests`` from its rows (the DataFrame of ``records_table``)."""
    return records_table(records).frame()


def passes_frame(workers: Iterable[WorkerRecord]):
    """``Result.passes``: every worker's passes, worker by worker in the given order."""
    return PassesTable(workers).frame()


def pass_durations(workers: Iterable[WorkerRecord]) -> Mapping[int, np.ndarray]:
    """Worker idx -> the durations of its passes (ms, in pass order), for ``itl_samples``;
    ``workers``: one pool (the pool the requests decoded in).  Computed when looked up
    (one worker's at a time: a long run logs millions of passes)."""
    return _Durations({w.idx: w for w in workers if w.num_passes})


class _Durations(Mapping):
    def __init__(self, workers: dict):
        self.workers = workers

    def __getitem__(self, idx: int) -> np.ndarray:
        return self.workers[idx].durations_ms

    def __iter__(self):
        return iter(self.workers)

    def __len__(self) -> int:
        return len(self.workers)


def itl_samples(requests, durations: Mapping[int, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Weighted pooled ITL gaps of the *completed* ``requests``: (gaps_ms, weights).

    ``durations``: worker idx -> its pass durations in pass order (``pass_durations``),
    for the pool the requests decoded in; the pass-run gaps are taken worker by worker in
    its order."""
    by_worker: dict[int, list[int]] = {}
    bridges: list[float] = []
    zeros = 0                          # speculative decoding: tokens of a burst after its first
    for r in requests:
        if r.status != "completed":
            continue
        if r.segs:
            by_worker.setdefault(r.worker_idx, []).extend(r.segs)
        if r.bridges:
            bridges.extend(r.bridges)
        zeros += r.zero_gaps
    # filled in place, one worker at a time: a long run has tens of millions of passes,
    # and untouched pages of the allocation (passes no completed request decoded in)
    # cost nothing; weights in 32 bits unless a count needs more
    room = len(bridges) + 1 + sum(len(dur) for dur in durations.values())
    gaps = np.empty(room, dtype=np.float64)
    weights = np.empty(room, dtype=np.int64 if zeros >> 31 else np.int32)
    n = len(bridges)
    gaps[:n], weights[:n] = bridges, 1
    if zeros:
        gaps[n], weights[n] = 0.0, zeros
        n += 1
    for idx, dur in durations.items():
        segs = by_worker.pop(idx, None)
        if not segs:
            continue
        wt = _pass_weights(segs, len(dur))
        keep = wt > 0
        m = int(np.count_nonzero(keep))
        gaps[n:n + m] = dur[keep]
        weights[n:n + m] = wt[keep]          # (at most the requests: fits in 32 bits)
        n += m
    return gaps[:n], weights[:n]


def _pass_weights(segs: Sequence[int], num_passes: int) -> np.ndarray:
    """How many of the ``[first, last]`` pass-index ranges in ``segs`` (flat pairs) cover
    each pass: a difference array, cumulated."""
    se = np.asarray(segs, dtype=np.int64).reshape(-1, 2)
    diff = np.zeros(num_passes + 1, dtype=np.int64)
    np.add.at(diff, se[:, 0], 1)
    np.add.at(diff, se[:, 1] + 1, -1)
    return np.cumsum(diff[:-1])
