"""Turn what the processes recorded into tidy tables, once, after ``env.run()``.

The hot path only appended tuples (pass log) and set fields on request records; here
they become DataFrames with the columns declared in ``simmodel.result``.

ITL samples are rebuilt without a per-token list: a request's gap to a token emitted in
the pass right after the pass of its previous token equals that pass's duration, so each
pass carries a weight (how many completed requests had such a gap in it, from the
requests' ``segs`` ranges via a difference array); the other gaps (``bridges``) are
individual samples of weight 1.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from simmodel.result import PASS_COLUMNS, REQUEST_COLUMNS


def requests_frame(requests, unreleased, dp_size: int = 1) -> pd.DataFrame:
    """``requests``: EngineRequests in release order; ``unreleased``: (turn, status) of
    workload turns that never reached the cluster (cut short: ``incomplete``; left behind
    by a cancelled turn: ``cancelled``).  With attention DP the worker index is reported
    as ``worker × dp_size + rank``."""
    rows = []
    nan = math.nan
    for r in requests:
        n = r.generated
        h = r.handoff
        if h is None:
            lifecycle = (-1, nan, nan, nan, nan, nan, nan, nan, nan, nan)
            first_admit, reused, first_reused = r.first_admit_ms, r.reused, r.first_reused
        else:
            p = h.prefill
            lifecycle = (h.prefill_worker_idx, p.first_admit_ms, h.source_held_ms,
                         h.destination_reserved_ms, h.destination_activated_ms,
                         r.first_admit_ms, h.source_released_ms, h.transfer_ms,
                         h.transfer_queue_ms, h.transfer_gb_s)
            first_admit, reused, first_reused = p.first_admit_ms, p.reused, p.first_reused
        first, last = r.first_token_ms, r.last_token_ms
        # the largest hit may reach into generated tokens (a re-admission after preemption)
        reused_prompt = reused if reused < r.prompt_len else r.prompt_len
        turn = r.meta
        rows.append((
            r.session_id, r.turn_index, r.uid, turn.request_id, turn.play_id,
            r.arrival_ms, first_admit,
            first, r.second_token_ms, last, r.terminal_ms,
            first - r.arrival_ms, r.second_token_ms - first, last - r.arrival_ms,
            (last - first) / (n - 1) if n >= 2 else math.nan,
            r.prompt_len, r.requested_output, n, reused_prompt, first_reused,
            reused - reused_prompt,
            r.worker_idx * dp_size + r.dp_rank if r.worker_idx >= 0 else -1, r.admissions, max(0, r.admissions - 1), r.status,
        ) + lifecycle)
    for t, status in unreleased:
        rows.append((t.session_id, t.turn_index, -1, t.request_id, t.play_id,
                     nan, nan, nan, nan, nan, nan, nan, nan, nan, nan,
                     t.input_length, t.output_length, 0, 0, 0, 0, -1, 0, 0, status,
                     -1, nan, nan, nan, nan, nan, nan, nan, nan, nan))
    df = pd.DataFrame.from_records(rows, columns=list(REQUEST_COLUMNS))
    return df


def passes_frame(workers) -> pd.DataFrame:
    frames = []
    for w in workers:
        if not len(w.passes):
            continue
        f = pd.DataFrame(w.passes.arrays())
        f.insert(0, "worker", w.idx)
        f.insert(0, "pool", w.pool)
        frames.append(f)
    if not frames:
        return pd.DataFrame(columns=list(PASS_COLUMNS))
    return pd.concat(frames, ignore_index=True)


def itl_samples(requests, workers) -> tuple[np.ndarray, np.ndarray]:
    """Weighted pooled ITL gaps of the *completed* requests: (gaps_ms, weights)."""
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
    gaps = [np.asarray(bridges, dtype=float)]
    weights = [np.ones(len(bridges), dtype=np.int64)]
    if zeros:
        gaps.append(np.zeros(1))
        weights.append(np.array([zeros], dtype=np.int64))
    for w in workers:
        segs = by_worker.get(w.idx)
        if not segs:
            continue
        cols = w.passes.arrays()
        durations = cols["end_ms"] - cols["start_ms"]
        se = np.asarray(segs, dtype=np.int64).reshape(-1, 2)
        diff = np.zeros(len(durations) + 1, dtype=np.int64)
        np.add.at(diff, se[:, 0], 1)
        np.add.at(diff, se[:, 1] + 1, -1)
        wt = np.cumsum(diff[:-1])
        keep = wt > 0
        gaps.append(durations[keep])
        weights.append(wt[keep])
    return np.concatenate(gaps), np.concatenate(weights)
