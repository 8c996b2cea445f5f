"""Workload shapes of ``long_runs.py``: each draws a Mooncake trace and a cluster from a seed.

A shape is a function ``(rnd, long) -> Case``: ``rnd`` a ``random.Random`` seeded with
``"<shape>/<seed>"`` (so a case never depends on which other cases run), ``long`` the
``--scale long`` flag.  The trace is Mooncake JSONL (``hash_ids`` of 512-token trace
blocks, explicit ``timestamp`` arrivals, so both simulators see the same requests);
single-turn rows carry no session id (the comparison then matches by shape and arrival,
see ``vs_dynamo.match_by_shape``), multi-turn sessions carry one and later turns an
explicit ``delay``.  Not part of the test suite.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

TRACE_BLOCK = 512


@dataclass
class Case:
    """One generated case: the trace rows (file order) and the scenario's ``cluster``."""
    rows: list
    cluster: dict
    note: str = ""
    ref_runs: int = 1              # > 1: run the reference again to see if it varies
    relabel_workers: bool = False  # worker ids may differ by a permutation (KV router ties)
    extra: dict = field(default_factory=dict)   # other scenario sections (run, sla, ...)


class Ids:
    """Fresh hash ids (one per 512-token trace block)."""

    def __init__(self, start: int = 1):
        self.next = start

    def take(self, n: int) -> list:
        out = list(range(self.next, self.next + n))
        self.next += n
        return out


def poisson_ms(rnd: random.Random, n: int, rate_per_s: float, start_ms: float = 0.0) -> list:
    """``n`` Poisson arrival times (ms) at ``rate_per_s``."""
    t, out = start_ms, []
    for _ in range(n):
        t += rnd.expovariate(rate_per_s) * 1000.0
        out.append(round(t, 3))
    return out


def prompt(rnd: random.Random, ids: Ids, lo: int, hi: int, groups: list, share: float,
           log_scale: bool = False) -> tuple[int, list]:
    """(input_length, hash_ids) of ``lo..hi`` tokens; with probability ``share`` it starts
    with one of ``groups`` (lists of hash ids), possibly only a part of it."""
    n = (int(math.exp(rnd.uniform(math.log(lo), math.log(hi)))) if log_scale
         else rnd.randint(lo, hi))
    if groups and rnd.random() < share:
        pre = rnd.choice(groups)
        blocks = -(-n // TRACE_BLOCK)
        ids_ = pre[:blocks] + ids.take(max(0, blocks - len(pre)))
        return n, ids_
    return n, ids.take(-(-n // TRACE_BLOCK))


def engine(bs: int = 64, blocks: int = 16384, **kw) -> dict:
    return {"block_size": bs, "num_gpu_blocks": blocks, **kw}


def single_turn(arrivals, rnd, ids, lo, hi, groups, share, out_lo, out_hi, **kw) -> list:
    rows = []
    for t in arrivals:
        n, h = prompt(rnd, ids, lo, hi, groups, share, **kw)
        rows.append({"timestamp": t, "input_length": n,
                     "output_length": rnd.randint(out_lo, out_hi), "hash_ids": h})
    return rows


def pressure_groups(rnd: random.Random) -> tuple[Ids, list]:
    """The KV-pressure shapes' prefixes: fresh ids and 3-6 groups of 2-4 trace blocks."""
    ids = Ids()
    return ids, [ids.take(rnd.randint(2, 4)) for _ in range(rnd.randint(3, 6))]


def pressure_rows(rnd: random.Random, ids: Ids, groups: list, n: int, rate: float) -> list:
    """Their traffic: ``n`` Poisson arrivals at ``rate``/s, 500-4,000-token prompts, 30%
    on a group prefix, 20-400 output tokens."""
    return single_turn(poisson_ms(rnd, n, rate), rnd, ids, 500, 4000, groups, 0.3, 20, 400)


# -- the shapes --------------------------------------------------------------------------

def kv_pressure(rnd: random.Random, long: bool) -> Case:
    """One worker, ~1,500 blocks, Poisson overload: preemption (lifo), LRU eviction, shared
    group prefixes (30%), TTFT climbing to minutes."""
    ids, groups = pressure_groups(rnd)
    n = 3000 if long else 1000
    rate = rnd.uniform(5.5, 7.5)
    blocks = rnd.choice([1200, 1500, 1800])
    rows = pressure_rows(rnd, ids, groups, n, rate)
    return Case(rows, {"workers": 1, "engine": engine(64, blocks)},
                f"{n} req at {rate:.2f}/s, {blocks} blocks")


def kv_pressure_fifo(rnd: random.Random, long: bool) -> Case:
    """As ``kv_pressure`` with fifo preemption, small blocks and small budgets."""
    ids = Ids()
    groups = [ids.take(rnd.randint(1, 4)) for _ in range(rnd.randint(2, 5))]
    n = 3000 if long else 600
    bs = rnd.choice([16, 32])
    blocks = 1500 * 64 // bs
    budget, seqs = rnd.choice([2048, 4096]), rnd.choice([16, 64])
    rate = rnd.uniform(4.0, 6.0)
    rows = single_turn(poisson_ms(rnd, n, rate), rnd, ids, 300, 4000, groups, 0.4, 10, 400)
    eng = engine(bs, blocks, preemption_mode="fifo", max_num_batched_tokens=budget,
                 max_num_seqs=seqs)
    return Case(rows, {"workers": 1, "engine": eng},
                f"{n} req at {rate:.2f}/s, bs {bs}, {blocks} blocks, budget {budget}, "
                f"seqs {seqs}")


def sessions(rnd: random.Random, long: bool) -> Case:
    """Long multi-turn chats (prompt = history + new blocks) on 2 workers with a pool that
    evicts: reuse across turns, think times, preemption."""
    ids = Ids()
    systems = [ids.take(rnd.randint(2, 6)) for _ in range(3)]
    users = 120 if long else 40
    max_turns = 30 if long else 12
    rows = []
    for u, t0 in enumerate(poisson_ms(rnd, users, rnd.uniform(0.3, 0.8))):
        hist = list(rnd.choice(systems)) + ids.take(rnd.randint(1, 3))
        for k in range(rnd.randint(2, max_turns)):
            row = {"session_id": f"user-{u}", "input_length": len(hist) * TRACE_BLOCK
                   - rnd.randint(0, TRACE_BLOCK - 1), "output_length": rnd.randint(10, 300),
                   "hash_ids": list(hist)}
            if k == 0:
                row["timestamp"] = t0
            else:
                row["delay"] = round(rnd.uniform(200.0, 8000.0), 3)
            rows.append(row)
            hist += ids.take(rnd.randint(1, 3))
            if len(hist) > 60:                 # (a 30k-token chat starts over)
                break
    blocks = rnd.choice([1500, 2500, 4000])
    return Case(rows, {"workers": 2, "engine": engine(64, blocks)},
                f"{users} users, {len(rows)} turns, {blocks} blocks")


def many_workers(rnd: random.Random, long: bool) -> Case:
    """Many round-robin workers; long prompts (chunked prefill), shared prefixes, some KV
    pressure per worker."""
    ids = Ids()
    groups = [ids.take(rnd.randint(1, 6)) for _ in range(8)]
    w = 48 if long else 16
    n = 150 * w if long else 100 * w
    rate = w * rnd.uniform(0.8, 1.4)
    rows = single_turn(poisson_ms(rnd, n, rate), rnd, ids, 200, 12000, groups, 0.5, 10, 600,
                       log_scale=True)
    return Case(rows, {"workers": w, "engine": engine(64, rnd.choice([3000, 5000]))},
                f"{w} workers, {n} req at {rate:.1f}/s")


def hours(rnd: random.Random, long: bool) -> Case:
    """Hours of simulated time on 2 workers: sparse Poisson traffic plus bursts that
    overload for a while."""
    ids = Ids()
    groups = [ids.take(rnd.randint(2, 5)) for _ in range(4)]
    span_h = 8 if long else 2
    n = 4000 if long else 1200
    base = poisson_ms(rnd, int(n * 0.7), n * 0.7 / (span_h * 3600.0))
    bursts = []
    for _ in range(n - len(base)):
        if not bursts or rnd.random() < 0.03:
            t = rnd.uniform(0.0, span_h * 3.6e6)
        bursts.append(round(t, 3))
        t += rnd.expovariate(30.0) * 1000.0
    arrivals = sorted(base + bursts)
    rows = single_turn(arrivals, rnd, ids, 500, 6000, groups, 0.3, 50, 800)
    return Case(rows, {"workers": 2, "engine": engine(64, 3000)},
                f"{n} req over {span_h} h, {len(bursts)} in bursts")


def kv_router(rnd: random.Random, long: bool) -> Case:
    """KV-aware routing where overlap decides: groups with long prefixes, one per worker.
    The reference breaks cost ties at random; it is run twice and worker ids are compared
    up to a permutation."""
    ids = Ids()
    w = 4
    groups = [ids.take(rnd.randint(6, 10)) for _ in range(w)]
    n = 2000 if long else 400
    rate = rnd.uniform(0.8, 1.5)          # (a loaded holder would tie the others)
    rows = []
    # one request of every group at 0: the reference breaks the ties among idle workers
    # at random, but idle workers are interchangeable, so the outcome is the same up to a
    # permutation of worker ids; later requests find their group's prefix on one worker
    arrivals = [0.0] * w + poisson_ms(rnd, n - w, rate)
    for i, t in enumerate(arrivals):
        g = groups[i] if i < w else rnd.choice(groups)
        suffix = ids.take(rnd.randint(1, 2))
        n_tok = (len(g) + len(suffix)) * TRACE_BLOCK - rnd.randint(0, TRACE_BLOCK - 1)
        rows.append({"timestamp": t, "input_length": n_tok,
                     "output_length": rnd.randint(20, 300), "hash_ids": g + suffix})
    return Case(rows, {"workers": w, "engine": engine(64, 4000), "router": {"mode": "kv"}},
                f"{n} req at {rate:.2f}/s, {w} groups", ref_runs=2, relabel_workers=True)


def kv_router_dp(rnd: random.Random, long: bool) -> Case:
    """As ``kv_router`` with attention DP: one worker of 4 ranks, every rank a routing
    target of its own, one group each (ranks may come out relabelled).  Not 2 workers of
    2 ranks: the first requests' random ties would then decide which groups share a
    worker's lock-step passes, and the reference's own runs differ (measured)."""
    w, dp = 1, 4
    case = kv_router(rnd, long)
    case.cluster["workers"] = w
    case.cluster["engine"] = engine(64, 4000, dp_size=dp)
    case.note = f"{w} workers x dp{dp}, " + case.note
    return case


def sglang_pressure(rnd: random.Random, long: bool) -> Case:
    """Aggregated SGLang (1-token pages) under KV pressure: retraction, radix-tree LRU
    eviction, shared group prefixes (30%), schedule policy fifo or lpm."""
    ids, groups = pressure_groups(rnd)
    w = rnd.choice([1, 2])
    n = 3000 if long else 800
    rate = rnd.uniform(5.0, 7.0) * w
    slots = rnd.choice([80_000, 96_000, 120_000])
    policy = rnd.choice(["fifo", "lpm"])
    rows = pressure_rows(rnd, ids, groups, n, rate)
    eng = {"backend": "sglang", "num_gpu_blocks": slots, "sglang": {"schedule_policy": policy}}
    return Case(rows, {"workers": w, "engine": eng, "router": {"mode": "round_robin"}},
                f"SGLang {w} workers, {n} req at {rate:.2f}/s, {slots} slots, {policy}")


def disagg_traffic(rnd: random.Random, long: bool, slots: int) -> tuple[list, int, float]:
    """The disaggregated shapes' traffic: Poisson arrivals at 3-5/s per 3 decode slots
    (workers x ranks), 500-8,000-token prompts, 30% on one of 4 group prefixes; (rows,
    requests, rate)."""
    ids = Ids()
    groups = [ids.take(rnd.randint(1, 4)) for _ in range(4)]
    n = 3000 if long else 600
    rate = rnd.uniform(3.0, 5.0) * slots / 3
    rows = single_turn(poisson_ms(rnd, n, rate), rnd, ids, 500, 8000, groups, 0.3, 20, 500)
    return rows, n, rate


def disagg(rnd: random.Random, long: bool) -> Case:
    """Disaggregated prefill/decode pools (round robin each), KV transfer time, a decode
    pool small enough for reservations to wait."""
    p, d = (3, 6) if long else (2, 3)
    rows, n, rate = disagg_traffic(rnd, long, d)
    dec_blocks = rnd.choice([1500, 2500])
    cluster = {"prefill": {"workers": p, "engine": engine(64)},
               "decode": {"workers": d, "engine": engine(64, dec_blocks)},
               "kv_transfer": {"bandwidth_gb_s": 25.0, "bytes_per_token": 131072}}
    return Case(rows, cluster, f"{p}P{d}D, {n} req at {rate:.2f}/s, decode {dec_blocks} blocks")


def disagg_dp(rnd: random.Random, long: bool) -> Case:
    """As ``disagg`` with attention DP: decode workers of 2 ranks (each with its own
    blocks and reservations), prefill workers of 1 or 2."""
    p, d = (2, 3) if long else (1, 2)
    rows, n, rate = disagg_traffic(rnd, long, d * 2)
    pdp = rnd.choice([1, 2])
    dec_blocks = rnd.choice([1500, 2500])
    cluster = {"prefill": {"workers": p, "engine": engine(64, dp_size=pdp)},
               "decode": {"workers": d, "engine": engine(64, dec_blocks, dp_size=2)},
               "kv_transfer": {"bandwidth_gb_s": 25.0, "bytes_per_token": 131072}}
    return Case(rows, cluster, f"{p}P(dp{pdp}){d}D(dp2), {n} req at {rate:.2f}/s, "
                f"decode {dec_blocks} blocks a rank")


def dp_pressure(rnd: random.Random, long: bool) -> Case:
    """Aggregated attention DP (2 or 4 ranks a worker, round robin over the ranks) under
    KV pressure with shared prefixes."""
    ids = Ids()
    groups = [ids.take(rnd.randint(1, 4)) for _ in range(6)]
    w, dp = rnd.choice([(1, 4), (2, 2)])
    n = 3000 if long else 600
    rate = rnd.uniform(1.2, 1.8) * w * dp
    rows = pressure_rows(rnd, ids, groups, n, rate)
    blocks = rnd.choice([1500, 2500])
    return Case(rows, {"workers": w, "engine": engine(64, blocks, dp_size=dp),
                       "router": {"mode": "round_robin"}},
                f"{w} workers x dp{dp}, {n} req at {rate:.2f}/s, {blocks} blocks a rank")


def dp_interval(rnd: random.Random, long: bool) -> Case:
    """Aggregated attention DP with ``prefill_schedule_interval`` 2-4 (prefill only every
    k-th lock-step step while ranks decode), chunked prompts, a load that leaves the
    queues empty at times (when decode runs may coalesce) and KV pressure at others."""
    ids = Ids()
    groups = [ids.take(rnd.randint(1, 4)) for _ in range(6)]
    w, dp = rnd.choice([(1, 2), (1, 4), (2, 2)])
    k = rnd.choice([2, 3, 4])
    n = 3000 if long else 600
    rate = rnd.uniform(0.6, 1.5) * w * dp
    rows = single_turn(poisson_ms(rnd, n, rate), rnd, ids, 200, 3000, groups, 0.3, 20, 300)
    blocks = rnd.choice([1500, 4000])
    eng = engine(64, blocks, dp_size=dp, prefill_schedule_interval=k,
                 max_num_batched_tokens=2048)
    return Case(rows, {"workers": w, "engine": eng, "router": {"mode": "round_robin"}},
                f"{w} workers x dp{dp}, prefill every {k} steps, {n} req at {rate:.2f}/s, "
                f"{blocks} blocks a rank")


def disagg_sglang(rnd: random.Random, long: bool) -> Case:
    """As ``disagg`` with the SGLang backend (destination reserved at arrival, 1-token
    pages): decode pools of 96,000-160,000 token slots."""
    p, d = (3, 6) if long else (2, 3)
    rows, n, rate = disagg_traffic(rnd, long, d)
    slots = rnd.choice([96_000, 160_000])
    cluster = {"prefill": {"workers": p, "engine": {"backend": "sglang",
                                                    "num_gpu_blocks": 1_048_576}},
               "decode": {"workers": d, "engine": {"backend": "sglang", "num_gpu_blocks": slots}},
               "kv_transfer": {"bandwidth_gb_s": 25.0, "bytes_per_token": 131072}}
    return Case(rows, cluster, f"SGLang {p}P{d}D, {n} req at {rate:.2f}/s, decode {slots} "
                "slots")


def mtp_pressure(rnd: random.Random, long: bool) -> Case:
    """Speculative decoding (``aic_nextn`` 1-3, acceptance rates of 1.0 or 0.0, so that
    bursts are deterministic) under KV pressure on 1-2 vLLM workers: drafts' KV held
    past the sequence, preemption for it, shared group prefixes (30%)."""
    ids, groups = pressure_groups(rnd)
    w = rnd.choice([1, 2])
    k = rnd.randint(1, 3)
    rates = [rnd.choice([1.0, 1.0, 0.0]) for _ in range(k)]
    n = 3000 if long else 800
    rate = rnd.uniform(5.0, 8.0) * w
    blocks = rnd.choice([1200, 1500, 2500])
    rows = pressure_rows(rnd, ids, groups, n, rate)
    eng = engine(64, blocks, aic_nextn=k, aic_nextn_accept_rates=rates)
    return Case(rows, {"workers": w, "engine": eng, "router": {"mode": "round_robin"}},
                f"{w} workers, nextn {k} rates {rates}, {n} req at {rate:.2f}/s, "
                f"{blocks} blocks")


def trtllm_pressure(rnd: random.Random, long: bool) -> Case:
    """Aggregated TRT-LLM (32-token blocks) under KV pressure on 1-2 workers: its
    guaranteed-no-evict admission, block reuse, shared group prefixes (30%)."""
    ids, groups = pressure_groups(rnd)
    w = rnd.choice([1, 2])
    n = 3000 if long else 800
    rate = rnd.uniform(4.0, 7.0) * w
    blocks = rnd.choice([2400, 3000, 5000])
    rows = pressure_rows(rnd, ids, groups, n, rate)
    eng = {"backend": "trtllm", "block_size": 32, "num_gpu_blocks": blocks}
    return Case(rows, {"workers": w, "engine": eng, "router": {"mode": "round_robin"}},
                f"TRT-LLM {w} workers, {n} req at {rate:.2f}/s, {blocks} blocks")


SHAPES = {f.__name__: f for f in (kv_pressure, kv_pressure_fifo, sessions, many_workers,
                                  hours, kv_router, kv_router_dp, sglang_pressure, disagg,
                                  disagg_dp, dp_pressure, disagg_sglang,
                                  dp_interval, mtp_pressure, trtllm_pressure)}
