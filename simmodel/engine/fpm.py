"""Forward-pass metrics (the reference's ``ForwardPassSnapshot``, §9).  Pure.

A planner sees, per worker, the metrics of the latest forward pass that ended since its
previous tick.  They describe the batch *as scheduled* at the pass start and the worker's
waiting queue right after that scheduling:

* ``num_prefill_requests`` / ``sum_prefill_tokens`` / ``var_prefill_length`` /
  ``sum_prefill_kv_tokens``: requests with prompt tokens in the pass, the tokens granted
  to them (not the integer-mean ``t`` of §2.1), the population variance of their prompt lengths, and the
  tokens already in their KV before the pass (prefix hit or earlier chunks);
* ``num_decode_requests`` / ``sum_decode_kv_tokens`` / ``var_decode_kv_tokens``:
  requests decoding in the pass and their sequence lengths.  Unlike the decode term of
  §2.2, a preempted request whose recompute chunk still had prompt tokens counts as a
  prefill request only (measured on the reference);
* ``num_queued_prefill`` / ``sum_queued_prefill_tokens`` / ``var_queued_prefill_length``:
  waiting requests that never ran, their prompt lengths;
  ``num_queued_decode`` / ``sum_queued_decode_kv_tokens`` /
  ``var_queued_decode_kv_tokens``: waiting requests that already produced tokens
  (preempted, or transferred to a decode worker), their sequence lengths;
* ``wall_time``: the pass duration in seconds.

Variances are population variances (0.0 for fewer than two values).

An idle worker reports an all-zero snapshot every ``IDLE_HEARTBEAT_MS`` after its last
pass (measured on the reference: idle workers reappear in the planner's snapshots once a
second).
"""
from __future__ import annotations

import math

FPM_KEYS = (
    "worker_id", "dp_rank", "wall_time",
    "num_prefill_requests", "sum_prefill_tokens", "var_prefill_length",
    "sum_prefill_kv_tokens",
    "num_decode_requests", "sum_decode_kv_tokens", "var_decode_kv_tokens",
    "num_queued_prefill", "sum_queued_prefill_tokens", "var_queued_prefill_length",
    "num_queued_decode", "sum_queued_decode_kv_tokens", "var_queued_decode_kv_tokens",
)


IDLE_HEARTBEAT_MS = 1000.0


def idle(worker_id: int, dp_rank: int = 0) -> dict:
    """The all-zero snapshot of an idle worker."""
    out = {k: 0 for k in FPM_KEYS}
    out.update(worker_id=worker_id, dp_rank=dp_rank, wall_time=0.0)
    for k in FPM_KEYS:
        if k.startswith("var_"):
            out[k] = 0.0
    return out


def last_heartbeat(idle_since: float | None, idle_until: float | None, after: float,
                   upto: float) -> float | None:
    """The last idle heartbeat (``idle_since`` + k x IDLE_HEARTBEAT_MS, k >= 1, before
    the idle period ended at ``idle_until``, if it did) in ``(after, upto]``, or None."""
    if idle_since is None:
        return None
    end = upto if idle_until is None else min(upto, idle_until)
    k = math.floor((end - idle_since) / IDLE_HEARTBEAT_MS)
    if k < 1:
        return None
    t = idle_since + k * IDLE_HEARTBEAT_MS
    if idle_until is not None and t >= idle_until:
        t -= IDLE_HEARTBEAT_MS
        if t <= idle_since:
            return None
    return t if t > after else None


def variance(values) -> float:
    """Population variance of a sequence of numbers (0.0 when it has fewer than two)."""
    n = len(values)
    if n < 2:
        return 0.0
    mean = sum(values) / n
    return sum((v - mean) ** 2 for v in values) / n


def scheduled(entries) -> dict:
    """The batch part of the metrics, from a pass plan's ``(request, computed before,
    granted)`` entries."""
    plens, before_sum, kv, new = [], 0, [], 0
    for r, before, take in entries:
        if before < r.prompt_len and not r.transferred:
            plens.append(r.prompt_len)
            before_sum += before
            new += take
        elif (r.generated or r.transferred) and before + take == r.seq_len:
            kv.append(r.seq_len)            # decoding (a prompt chunk does not count)
    return {
        "num_prefill_requests": len(plens),
        "sum_prefill_tokens": new,
        "var_prefill_length": variance(plens),
        "sum_prefill_kv_tokens": before_sum,
        "num_decode_requests": len(kv),
        "sum_decode_kv_tokens": sum(kv),
        "var_decode_kv_tokens": variance(kv),
    }


def decode_only(lengths, k: int) -> dict:
    """The batch part for pass ``k`` (0-based) of a coalesced decode run whose decoders
    had sequence lengths ``lengths`` in its first pass (every length grows by one per
    pass, so the variance does not change)."""
    n = len(lengths)
    return {
        "num_prefill_requests": 0, "sum_prefill_tokens": 0, "var_prefill_length": 0.0,
        "sum_prefill_kv_tokens": 0,
        "num_decode_requests": n,
        "sum_decode_kv_tokens": sum(lengths) + n * k,
        "var_decode_kv_tokens": variance(lengths),
    }


def queued(waiting, inbound=()) -> dict:
    """The queue part of the metrics, from the waiting requests after scheduling (and,
    on a disaggregated decode worker, the handoffs bound to it but not yet activated:
    deferred or reserved destinations, counted with their prompt length)."""
    fresh, resumed = [], []
    for r in waiting:
        if r.generated or r.transferred:
            resumed.append(r.seq_len)
        else:
            fresh.append(r.prompt_len)
    resumed.extend(r.prompt_len for r in inbound)
    return {
        "num_queued_prefill": len(fresh),
        "sum_queued_prefill_tokens": sum(fresh),
        "var_queued_prefill_length": variance(fresh),
        "num_queued_decode": len(resumed),
        "sum_queued_decode_kv_tokens": sum(resumed),
        "var_queued_decode_kv_tokens": variance(resumed),
    }


def snapshot(worker_id: int, wall_time_ms: float, batch: dict, queue: dict,
             dp_rank: int = 0) -> dict:
    """One worker's metrics dict with the reference's keys, in its order."""
    out = {"worker_id": worker_id, "dp_rank": dp_rank, "wall_time": wall_time_ms / 1000.0}
    out.update(batch)
    out.update(queue)
    return out
