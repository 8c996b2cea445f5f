"""Unit tier: the records the metrics are computed from (simmodel.metrics.records) and the
tables and ITL samples built from them (simmodel.metrics.collect), hand-computed."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from simmodel.finish import collect, provisioned_s, result, sim_end_ms, snapshot
from simmodel.metrics.collect import (
    itl_samples,
    pass_durations,
    passes_frame,
    records_frame,
    requests_frame,
)
from simmodel.metrics.records import WorkerRecord, request_record, unreleased_record
from simmodel.result import PASS_COLUMNS, REQUEST_COLUMNS, RequestRecord

NAN = math.nan
TINY = Path(__file__).resolve().parents[2] / "scenarios" / "tiny.yaml"


def turn(**kw):
    base = dict(session_id="s", turn_index=0, request_id=None, play_id=None,
                input_length=100, output_length=10)
    base.update(kw)
    return SimpleNamespace(**base)


def engine_request(**kw):
    """An EngineRequest-like record with a distinct value in every field it reports."""
    base = dict(session_id="s1", turn_index=2, uid=7, meta=turn(request_id="r", play_id="p"),
                arrival_ms=10.0, first_admit_ms=11.0, first_token_ms=20.0,
                second_token_ms=23.0, last_token_ms=50.0, terminal_ms=51.0,
                prompt_len=100, requested_output=12, generated=11, reused=104,
                first_reused=64, worker_idx=3, dp_rank=1, admissions=2,
                status="completed", handoff=None, attempts=2, retried_ms=4.5)
    base.update(kw)
    return SimpleNamespace(**base)


def workers_with(passes):
    """WorkerRecords of pool ``decode`` with the given (start, end) passes per worker."""
    out = []
    for idx, spans in enumerate(passes):
        start = np.array([s for s, _ in spans], dtype=float)
        end = np.array([e for _, e in spans], dtype=float)
        n = len(spans)
        ints = np.zeros(n, dtype=np.int64)
        cols = {"start_ms": start, "end_ms": end, "prefill_tokens": ints,
                "num_prefill": ints, "num_decode": ints + 1, "decode_tokens": ints,
                "kv_blocks_active": ints}
        out.append(WorkerRecord(pool="decode", idx=idx, passes=cols,
                                last_end_ms=float(end[-1]) if n else None))
    return out


def test_request_columns_are_the_record_fields():
    assert REQUEST_COLUMNS == tuple(f.name for f in dataclasses.fields(RequestRecord))
    assert len(set(REQUEST_COLUMNS)) == len(REQUEST_COLUMNS) == 38


def test_released_request_row():
    rec = request_record(engine_request(), dp_size=2)
    assert (rec.session_id, rec.turn_index, rec.uid, rec.request_id, rec.play_id) == (
        "s1", 2, 7, "r", "p")
    assert (rec.arrival_time_ms, rec.first_admit_ms, rec.first_token_ms,
            rec.second_token_ms, rec.last_token_ms, rec.terminal_time_ms) == (
        10.0, 11.0, 20.0, 23.0, 50.0, 51.0)
    assert (rec.ttft_ms, rec.ttst_ms, rec.e2e_latency_ms, rec.tpot_ms) == (10.0, 3.0, 40.0, 3.0)
    assert (rec.input_length, rec.requested_output_length, rec.output_length) == (100, 12, 11)
    # the largest hit (104) reached 4 tokens into the generated ones
    assert (rec.reused_input_tokens, rec.first_admission_reused_input_tokens,
            rec.reused_generated_tokens) == (100, 64, 4)
    assert rec.decode_worker_idx == 3 * 2 + 1
    assert (rec.admission_count, rec.readmission_count, rec.terminal_status) == (
        2, 1, "completed")
    assert (rec.attempts, rec.retried_ms) == (2, 4.5)
    assert rec.prefill_worker_idx == -1 and math.isnan(rec.prefill_admit_ms)


def test_disaggregated_row_takes_admission_and_reuse_from_the_prefill_side():
    prefill = SimpleNamespace(first_admit_ms=12.0, reused=32, first_reused=16, dp_rank=0,
                              admissions=1)
    h = SimpleNamespace(prefill=prefill, prefill_worker_idx=5, source_held_ms=14.0,
                        destination_reserved_ms=15.0, destination_activated_ms=16.0,
                        source_released_ms=18.0, transfer_ms=2.0, transfer_queue_ms=0.5,
                        transfer_gb_s=40.0)
    rec = request_record(engine_request(handoff=h, first_admit_ms=17.0, reused=0))
    assert (rec.first_admit_ms, rec.reused_input_tokens,
            rec.first_admission_reused_input_tokens, rec.reused_generated_tokens,
            rec.decode_reused_input_tokens) == (12.0, 32, 16, 0, 0)
    # the decode side's own hit (a re-admission after preemption) has a column of its own
    rec = request_record(engine_request(handoff=h, first_admit_ms=17.0, reused=64))
    assert (rec.reused_input_tokens, rec.decode_reused_input_tokens) == (32, 64)
    # admissions in either pool count (as the reference's admission history): one at
    # prefill and the decode side's two (a re-admission there)
    assert (rec.admission_count, rec.readmission_count) == (3, 1)
    prefill.admissions = 2                       # a prefill preempted once, too
    rec2 = request_record(engine_request(handoff=h, admissions=1))
    assert (rec2.admission_count, rec2.readmission_count) == (3, 1)
    prefill.admissions = 1
    assert (rec.prefill_worker_idx, rec.prefill_admit_ms, rec.source_held_ms,
            rec.destination_reserved_ms, rec.destination_activated_ms, rec.decode_admit_ms,
            rec.source_released_ms, rec.transfer_ms, rec.transfer_queue_ms,
            rec.transfer_gb_s) == (5, 12.0, 14.0, 15.0, 16.0, 17.0, 18.0, 2.0, 0.5, 40.0)
    # attention DP in both pools: each index is worker x its pool's dp + rank
    prefill.dp_rank = 1
    rec = request_record(engine_request(handoff=h), dp_size=2, prefill_dp=4)
    assert (rec.prefill_worker_idx, rec.decode_worker_idx) == (5 * 4 + 1, 3 * 2 + 1)


def test_single_token_request_has_no_ttst_or_tpot():
    rec = request_record(engine_request(generated=1, second_token_ms=NAN, last_token_ms=20.0))
    assert math.isnan(rec.ttst_ms) and math.isnan(rec.tpot_ms)


def test_unreleased_turn_row_has_the_documented_defaults():
    df = requests_frame([], [(turn(session_id="x", turn_index=3, play_id="p"), "cancelled")])
    row = df.iloc[0]
    assert list(df.columns) == list(REQUEST_COLUMNS)
    assert (row.session_id, row.turn_index, row.uid, row.request_id, row.play_id) == (
        "x", 3, -1, None, "p")
    times = ["arrival_time_ms", "first_admit_ms", "first_token_ms", "second_token_ms",
             "last_token_ms", "terminal_time_ms", "ttft_ms", "ttst_ms", "e2e_latency_ms",
             "tpot_ms", "prefill_admit_ms", "source_held_ms", "destination_reserved_ms",
             "destination_activated_ms", "decode_admit_ms", "source_released_ms",
             "transfer_ms", "transfer_queue_ms", "transfer_gb_s"]
    assert all(math.isnan(row[c]) for c in times)
    assert (row.input_length, row.requested_output_length) == (100, 10)
    assert (row.output_length, row.reused_input_tokens,
            row.first_admission_reused_input_tokens, row.reused_generated_tokens,
            row.decode_reused_input_tokens) == (0, 0, 0, 0, 0)
    assert (row.decode_worker_idx, row.prefill_worker_idx) == (-1, -1)
    assert (row.admission_count, row.readmission_count, row.terminal_status) == (
        0, 0, "cancelled")
    assert unreleased_record(turn(), "incomplete").terminal_status == "incomplete"


@pytest.mark.parametrize("values", [
    [0.0, 1.5], [NAN, 2.5], [0, 1], [0, 1.5], [3, NAN], [NAN, NAN], [None, 1.0],
    [0.0, 0], [0, 0.0], [-1, -1.0], [NAN, float("nan")], [2.0, 2.0],
])
def test_records_frame_infers_the_dtypes_from_records_would(values):
    recs = [RequestRecord(arrival_time_ms=v, uid=i) for i, v in enumerate(values)]
    expected = pd.DataFrame.from_records([dataclasses.astuple(r) for r in recs],
                                         columns=list(REQUEST_COLUMNS))
    pd.testing.assert_frame_equal(records_frame(recs), expected, check_exact=True)


def test_empty_requests_frame_has_the_columns():
    assert list(records_frame([]).columns) == list(REQUEST_COLUMNS)


def test_passes_frame_and_durations_from_worker_records():
    ws = workers_with([[(0.0, 2.0), (2.0, 5.0)], [], [(1.0, 1.5)]])
    df = passes_frame(ws)
    assert list(df.columns) == list(PASS_COLUMNS)
    assert df.worker.tolist() == [0, 0, 2] and df.end_ms.tolist() == [2.0, 5.0, 1.5]
    d = pass_durations(ws)
    assert list(d) == [0, 2]
    assert d[0].tolist() == [2.0, 3.0] and d[2].tolist() == [0.5]
    assert list(passes_frame([]).columns) == list(PASS_COLUMNS)


def test_itl_samples_from_pass_durations():
    # worker 0 passes last 2, 3, 4, 5 ms; worker 1 passes 7, 11 ms
    durations = {0: np.array([2.0, 3.0, 4.0, 5.0]), 1: np.array([7.0, 11.0])}
    # a: gaps in passes 1..2 of worker 0, and one bridge of 9 ms
    # b: gaps in passes 2..3 of worker 0, two burst tokens (speculative decoding)
    # c: gap in pass 1 of worker 1; d: not completed, left out
    reqs = [SimpleNamespace(status="completed", worker_idx=0, segs=[1, 2], bridges=[9.0],
                            zero_gaps=0),
            SimpleNamespace(status="completed", worker_idx=0, segs=[2, 3], bridges=[],
                            zero_gaps=2),
            SimpleNamespace(status="completed", worker_idx=1, segs=[1, 1], bridges=[],
                            zero_gaps=0),
            SimpleNamespace(status="incomplete", worker_idx=1, segs=[0, 1], bridges=[1.0],
                            zero_gaps=5)]
    gaps, weights = itl_samples(reqs, durations)
    # bridges, then the zero gaps, then worker by worker the passes with a weight
    assert gaps.tolist() == [9.0, 0.0, 3.0, 4.0, 5.0, 11.0]
    assert weights.tolist() == [1, 2, 1, 2, 1, 1]


def test_cost_and_end_from_worker_records():
    w = WorkerRecord(pool="decode", idx=0, passes={"end_ms": np.array([])},
                     created_ms=1000.0, removed_ms=4000.0)
    assert provisioned_s(w, 10.0) == 3.0 and provisioned_s(w, 2.5) == 1.5
    assert provisioned_s(dataclasses.replace(w, removed_ms=None), 10.0) == 9.0
    sc = SimpleNamespace(run=SimpleNamespace(max_sim_time_ms=None))
    reqs = pd.DataFrame({"terminal_status": ["completed"], "arrival_time_ms": [1.0],
                         "terminal_time_ms": [30.0]})
    ws = workers_with([[(0.0, 2.0), (2.0, 42.0)], []])
    assert sim_end_ms(sc, ws, reqs) == 42.0
    assert sim_end_ms(sc, ws[1:], reqs) == 30.0


def test_collect_is_the_result_of_a_plain_snapshot():
    import simmodel
    from simmodel.rng import Streams
    from simmodel.sim import build, run_until

    sc = simmodel.load_scenario(TINY)
    cluster = build(sc, Streams(sc.seed))
    run_until(cluster.env, sc.run.max_sim_time_ms)
    snap = snapshot(cluster)
    assert all(type(w) is WorkerRecord for w in snap.all_workers)
    a, b = collect(sc, cluster, 0.0), result(sc, snap, 0.0)
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    pd.testing.assert_frame_equal(a.passes, b.passes, check_exact=True)
    assert a.summary == b.summary
    assert b.summary["decode_worker_seconds"] == pytest.approx(
        len(snap.workers) * b.summary["service_end_ms"] / 1000.0)


def test_a_consumed_snapshot_gives_the_same_result_and_is_emptied(monkeypatch):
    import simmodel
    import simmodel.metrics.collect as collect_module
    from simmodel.rng import Streams
    from simmodel.sim import build, run_until

    monkeypatch.setattr(collect_module, "_CHUNK", 3)     # several chunks of requests
    sc = simmodel.load_scenario(TINY)
    cluster = build(sc, Streams(sc.seed))
    run_until(cluster.env, sc.run.max_sim_time_ms)
    snap = snapshot(cluster)
    assert len(snap.requests) > 3
    kept = result(sc, snap, 0.0)
    consumed = result(sc, snap, 0.0, consume=True)
    assert snap.requests == []
    pd.testing.assert_frame_equal(kept.requests, consumed.requests, check_exact=True)
    assert kept.summary == consumed.summary
