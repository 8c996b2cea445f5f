"""SGLang ``schedule_policy: lpm`` with incremental prefix matching (simmodel.engine.lpm).

* unit: a remembered match (``cached_match``) always equals a fresh ``RadixCache.match``
  (same length, same node) through random inserts, locks and evictions;
* micro: the in-batch rule and the stable longest-first order on a hand-made queue;
* cost: under a long queue held back by a full pool the number of tree lookups grows with
  the passes, not with passes x queue length (it did: 40 queued requests took 21.5 s);
* identical results: the incremental path against the original full recompute
  (``SglangScheduler.lpm_full_recompute``) on workloads with KV pressure, retraction,
  chunking, pages of 1 and 16, two workers with KV events.
"""
from __future__ import annotations

import dataclasses
import random
from types import SimpleNamespace

import pytest

import simmodel
from simmodel.config import Scenario
from simmodel.engine import lpm
from simmodel.engine.radix_cache import RadixCache
from simmodel.engine.sglang import SglangScheduler, _Lease
from simmodel.scenario import load_scenario


# -- unit: remembered matches ------------------------------------------------------------
def _sequences(rng, page):
    fams = [[(rng.randrange(5), -1, page * rng.randint(1, 3)) for _ in range(3)]
            for _ in range(4)]
    out = []
    for _ in range(30):
        segs = list(rng.choice(fams)) + [(100 + rng.randrange(8), -1, page * rng.randint(1, 4))
                                         for _ in range(rng.randint(0, 3))]
        out.append(segs)
    return out


@pytest.mark.parametrize("page", [1, 4])
@pytest.mark.parametrize("seed", range(6))
def test_cached_match_equals_fresh_match(page, seed):
    rng = random.Random(seed)
    kv = RadixCache(400 // page, page)
    seqs = _sequences(rng, page)
    reqs = [SimpleNamespace(uid=i, generated=0, seq_len=sum(c for *_, c in s), segs=s)
            for i, s in enumerate(seqs)]
    sched = SimpleNamespace(kv=kv, bs=page, _segs=lambda r, lease: r.segs)
    leases = {r.uid: _Lease(kv.root, r.segs) for r in reqs}
    locked = []
    for _ in range(300):
        op = rng.random()
        if op < 0.35:
            s = rng.choice(seqs)
            n = sum(c for *_, c in s)
            n -= n % page
            if kv.free_tokens + kv.evictable >= n:
                kv.alloc(n)
                already, node = kv.insert(s, n)
                kv.free_private(already)
                if rng.random() < 0.3:
                    kv.lock(node)
                    locked.append(node)
        elif op < 0.45 and locked:
            kv.unlock(locked.pop(rng.randrange(len(locked))))
        elif op < 0.7:
            kv.alloc(rng.randint(1, 60))
            kv.free_private(kv.private)
        for r in rng.sample(reqs, 8):
            got = lpm.cached_match(sched, r, leases[r.uid])
            want = kv.match(r.segs, r.seq_len - 1)
            assert got[0] == want[0] and got[1] is want[1]
        kv.check()


# -- micro: order and the in-batch rule ---------------------------------------------------
def _sched(block_size=1):
    from simmodel.config import EngineConfig, SglangConfig
    from simmodel.engine.timing import make_timing
    eng = EngineConfig(backend="sglang", block_size=block_size, num_gpu_blocks=10_000,
                       sglang=SglangConfig(schedule_policy="lpm"))
    return SglangScheduler(eng, make_timing(eng))


def _req(uid, runs):
    from simmodel.engine.request import EngineRequest
    from simmodel.engine.tokens import TokenSequence
    from simmodel.workload.model import RunPrompt
    prompt = RunPrompt(tuple(runs), sum(c for _, c in runs))
    return EngineRequest(uid, TokenSequence(prompt, 1, uid, None), 10, arrival_ms=0.0)


@pytest.mark.parametrize("full", [False, True])
def test_order_by_hand(full, monkeypatch):
    """Cached: 100 tokens of id 1, then 40 of id 2 below them.  A (1x100 + 9x50) hits
    100; B (1x100, 2x40, 9x10) hits 140; C, D, E start with 50 tokens of id 7 (nothing
    cached): C is the first low-hit request with that 32-token head, D shares it and goes
    last, E (7x20, then 8) shares only 20 tokens and keeps its place.  Order: B, A, C, E, D."""
    monkeypatch.setattr(SglangScheduler, "lpm_full_recompute", full)
    s = _sched()
    s.kv.alloc(140)
    s.kv.insert([(1, -1, 100), (2, -1, 40)], 140)
    reqs = {"C": _req(0, [(7, 50)]), "A": _req(1, [(1, 100), (9, 50)]),
            "D": _req(2, [(7, 50), (3, 5)]), "B": _req(3, [(1, 100), (2, 40), (9, 10)]),
            "E": _req(4, [(7, 20), (8, 30)])}
    for name in "CADBE":
        s.enqueue(reqs[name])
    for _ in range(2):                     # the second time from the memo (same order)
        lpm.lpm_order(s)
        names = {id(r): k for k, r in reqs.items()}
        assert [names[id(r)] for r in s.waiting] == ["B", "A", "C", "E", "D"]


# -- cost ---------------------------------------------------------------------------------------
LONG_QUEUE = """name: lpm_queue
workload: {synthetic: {requests: 40, input_tokens: 3000, output_tokens: 300,
           arrival_interval_ms: 0, shared_prefix_ratio: 0.5, num_prefix_groups: 4}}
cluster: {workers: 1, engine: {backend: sglang, sglang: {schedule_policy: lpm}}}
"""


def test_lookups_grow_with_passes_not_queue(tmp_path, monkeypatch):
    p = tmp_path / "q.yaml"
    p.write_text(LONG_QUEUE)
    calls = [0]
    real = RadixCache.match

    def counting(self, *a, **k):
        calls[0] += 1
        return real(self, *a, **k)
    monkeypatch.setattr(RadixCache, "match", counting)
    res = simmodel.run(load_scenario(str(p)))
    passes = len(res.passes)
    assert res.summary["completed_requests"] == 40 and passes > 1000
    # the full recompute looked up every waiting request in every pass (~30 per pass)
    assert calls[0] < 2 * passes, (calls[0], passes)


# -- identical results -------------------------------------------------------------------------
CASES = {
    "synthetic_bs1": LONG_QUEUE.replace("requests: 40", "requests: 60"),
    "synthetic_bs16_retraction": """name: b16
workload: {synthetic: {requests: 50, input_tokens: 2000, output_tokens: 400,
           arrival_interval_ms: 15, shared_prefix_ratio: 0.4, num_prefix_groups: 3}}
cluster: {workers: 1, engine: {backend: sglang, block_size: 16, num_gpu_blocks: 900,
          sglang: {schedule_policy: lpm, schedule_conservativeness: 0.3,
                   chunked_prefill_size: 1024}}}
""",
    "sessions_kv_pressure": """name: sess
workload: {trace: TRACES/prefix_sessions.jsonl, format: mooncake, trace_block_size: 512,
           arrival_speedup_ratio: 4.0}
cluster: {workers: 1, engine: {backend: sglang, num_gpu_blocks: 9000,
          sglang: {schedule_policy: lpm, chunked_prefill_size: 2048}}}
run: {record_kv_events: true}
""",
    "sessions_two_workers_kv_router": """name: sess2
workload: {trace: TRACES/prefix_sessions.jsonl, format: mooncake, trace_block_size: 512,
           arrival_speedup_ratio: 8.0}
cluster: {workers: 2, router: {mode: kv}, engine: {backend: sglang, num_gpu_blocks: 12000,
          block_size: 16, sglang: {schedule_policy: lpm, chunked_prefill_size: 1024}}}
run: {record_kv_events: true}
""",
    "fifo_walk_memo": """name: fifo
workload: {trace: TRACES/prefix_sessions.jsonl, format: mooncake, trace_block_size: 512,
           arrival_speedup_ratio: 4.0}
cluster: {workers: 1, engine: {backend: sglang, num_gpu_blocks: 8000}}
run: {record_kv_events: true}
""",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_incremental_equals_full_recompute(case, tmp_path, monkeypatch):
    import os
    traces = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                          "benchmarks", "traces")
    p = tmp_path / f"{case}.yaml"
    p.write_text(CASES[case].replace("TRACES", traces))
    sc: Scenario = load_scenario(str(p))
    out = []
    for full in (False, True):
        monkeypatch.setattr(SglangScheduler, "lpm_full_recompute", full)
        out.append(simmodel.run(dataclasses.replace(sc)))
    a, b = out
    assert a.requests.equals(b.requests)
    assert a.passes.equals(b.passes)
    if a.kv_events is not None:
        assert a.kv_events.equals(b.kv_events)
    skip = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}
    assert {k: v for k, v in a.summary.items() if k not in skip} == \
        {k: v for k, v in b.summary.items() if k not in skip}
    assert (a.requests.admission_count > 1).any() or case != "synthetic_bs16_retraction"
