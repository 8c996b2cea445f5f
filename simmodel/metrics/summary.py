"""The run summary: per-request records and pooled ITL samples in, one flat dict out.

Pure numpy, no SimPy: the requests arrive as a DataFrame or as the columns of a
``simmodel.metrics.tables.RequestsTable`` (a run's own summary needs no pandas).  Every
key is the reference's (``dynamo-mocker`` §8) and is defined, with its formula, in
``docs/metrics.md``; this module is the executable form of that glossary.

Only requests whose ``terminal_status`` is ``"completed"`` enter the statistics: rejected
requests and those still running when the simulation stopped are excluded (the arrival
count ``num_requests`` is passed in separately).

Statistics (``mean min max median p75 p90 p95 p99 std``) are exact:

* percentiles are nearest-rank, the sorted value at index ``round((n-1)·p/100)`` with
  ties rounded half away from zero (:func:`percentile_index`);
* ``std`` is the population standard deviation;
* the inter-token-latency samples arrive run-length encoded, ``gaps[i]`` occurring
  ``weights[i]`` times, and :func:`weighted_stats` computes the statistics of the
  expanded sequence without expanding it (sort + cumulative weights, O(n log n); one
  sort gives the ITL and the per-user speed: ``simmodel.metrics.weighted``).

An empty sample set gives ``0.0`` for each of its nine statistics in the summary (as the
reference reports them; ``weighted_stats`` itself returns ``None``), and a ratio or
throughput whose denominator is zero is ``0.0``.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from simmodel.config import SlaConfig
from simmodel.metrics.columns import Rows, floats, int_sum
from simmodel.metrics.weighted import (PERCENTILES, STAT_NAMES, Ranked, checked_samples,
                                       percentile_index, weighted_stats)

__all__ = ["GOODPUT_KEYS", "LATENCY_METRICS", "PERCENTILES", "PER_USER_THROUGHPUT",
           "STAT_NAMES", "SUMMARY_KEYS", "percentile_index", "summarize", "weighted_stats",
           "trajectory_summary"]
from simmodel.result import LazyTable

#: Sample sets reported in milliseconds (keys ``<stat>_<name>_ms``), in report order.
LATENCY_METRICS = ("ttft", "ttst", "tpot", "itl", "e2e_latency")

#: The per-user decode speed (keys ``<stat>_output_token_throughput_per_user``).
PER_USER_THROUGHPUT = "output_token_throughput_per_user"

_HEAD_KEYS = (
    "kv_eviction_policy",
    "committed_prefill_tokens",
    "num_requests",
    "completed_requests",
    "total_input_tokens",
    "total_output_tokens",
    "duration_ms",
    "wall_time_ms",
    "request_throughput_rps",
    "input_throughput_tok_s",
    "output_throughput_tok_s",
    "total_throughput_tok_s",
    "prefill_worker_seconds",
    "decode_worker_seconds",
    "prefill_gpus_per_worker",
    "decode_gpus_per_worker",
    "gpu_hours",
    "power_w",
    "power_coverage",
    "processed_tokens",
    "processed_tokens_per_s",
    "processed_output_tokens_per_s",
    "prefix_cache_reused_ratio",
    "first_admission_prefix_cache_reused_ratio",
    "num_ttft_samples",
    "num_tpot_samples",
    "num_e2e_latency_samples",
)

#: Every summary key, in order, when no SLA is set.
SUMMARY_KEYS = (
    _HEAD_KEYS
    + tuple(f"{stat}_{metric}_ms" for metric in LATENCY_METRICS for stat in STAT_NAMES)
    + tuple(f"{stat}_{PER_USER_THROUGHPUT}" for stat in STAT_NAMES)
)

#: Keys appended after ``SUMMARY_KEYS`` when ``sla.is_set``.
GOODPUT_KEYS = (
    "goodput_completed_requests",
    "goodput_request_throughput_rps",
    "goodput_output_throughput_tok_s",
)

_REQUIRED_COLUMNS = (
    "terminal_status", "terminal_time_ms", "ttft_ms", "ttst_ms", "tpot_ms", "e2e_latency_ms",
    "input_length", "output_length", "reused_input_tokens",
    "first_admission_reused_input_tokens",
)


def _per_second(count: float, duration_ms: float) -> float:
    return float(count / (duration_ms / 1000.0)) if duration_ms > 0 else 0.0


def _ratio(numerator: float, denominator: float) -> float:
    return float(numerator / denominator) if denominator > 0 else 0.0


def _good_mask(done: Rows, sla: SlaConfig) -> np.ndarray:
    """Completed requests meeting every SLA threshold that is set (NaN never meets one)."""
    ttft = floats(done["ttft_ms"])
    e2e = floats(done["e2e_latency_ms"])
    n = floats(done["output_length"])
    good = np.ones(len(done), dtype=bool)
    if sla.ttft_ms is not None:
        good &= ttft <= sla.ttft_ms
    if sla.itl_ms is not None:
        multi = n >= 2
        with np.errstate(invalid="ignore", divide="ignore"):
            itl = (e2e - ttft) / np.where(multi, n - 1, 1.0)
        good &= ~multi | (itl <= sla.itl_ms)
    if sla.e2e_ms is not None:
        good &= e2e <= sla.e2e_ms
    return good


def _samples(done: Rows, column: str) -> np.ndarray:
    """The non-NaN values of ``column`` over the completed requests."""
    col = floats(done[column])
    return col[~np.isnan(col)]


def summarize(requests, itl_gaps_ms: np.ndarray, itl_weights: np.ndarray, *,
              num_requests: int, committed_prefill_tokens: int,
              decode_worker_seconds: float, prefill_worker_seconds: float,
              decode_gpus_per_worker: int, prefill_gpus_per_worker: int,
              wall_time_ms: float, sla: SlaConfig, trajectories: bool = False,
              window_start_ms: float = 0.0) -> dict:
    """The run's summary dict, keys in the reference's order (``SUMMARY_KEYS`` then, if
    ``sla.is_set``, ``GOODPUT_KEYS``); values are plain ``int``/``float``/``str``/``None``.

    ``requests`` has ``REQUEST_COLUMNS``; ``itl_gaps_ms[i]`` is a gap between consecutive
    tokens of a completed request occurring ``itl_weights[i]`` times in the pooled ITL
    distribution.  The scalar arguments are the collector's run totals, reported as given.
    ``window_start_ms``: ``duration_ms`` (and so every throughput) runs from this time to
    the last completion instead of from 0 (a warm-up left out of the statistics).
    """
    gaps, weights = _checked_inputs(requests, itl_gaps_ms, itl_weights)
    done = Rows(requests, np.asarray(requests["terminal_status"] == "completed", dtype=bool))
    end_times = _samples(done, "terminal_time_ms")
    duration_ms = max(0.0, float(end_times.max()) - window_start_ms) if end_times.size else 0.0
    samples = {metric: weighted_stats(_samples(done, f"{metric}_ms"))
               for metric in LATENCY_METRICS if metric != "itl"}
    samples["itl"], speed = _itl_stats(gaps, weights)
    out = _totals(done, duration_ms, float(wall_time_ms), num_requests,
                  committed_prefill_tokens)
    out.update(_cost(decode_worker_seconds, prefill_worker_seconds,
                     decode_gpus_per_worker, prefill_gpus_per_worker))
    out.update(_tokens_and_reuse(done, out["total_input_tokens"], out["total_output_tokens"],
                                 float(wall_time_ms)))
    out.update({f"num_{m}_samples": int(_samples(done, f"{m}_ms").size)
                for m in ("ttft", "tpot", "e2e_latency")})
    out.update(_latency_stats(samples, _frame(requests) if trajectories else None))
    out.update({f"{stat}_{PER_USER_THROUGHPUT}": _or_zero(speed[stat]) for stat in STAT_NAMES})
    if sla.is_set:
        out.update(_goodput(done, sla, duration_ms))
    return out


def _frame(requests):
    """``requests`` as a DataFrame."""
    return requests.frame() if isinstance(requests, LazyTable) else requests


def _checked_inputs(requests, itl_gaps_ms, itl_weights):
    """The ITL samples as flat arrays, after checking them and the request columns."""
    missing = [c for c in _REQUIRED_COLUMNS if c not in requests]
    if missing:
        raise ValueError(f"requests is missing columns: {', '.join(missing)}")
    gaps = np.asarray(itl_gaps_ms, dtype=float).ravel()
    weights = np.asarray(itl_weights).ravel()
    if gaps.shape != weights.shape:
        raise ValueError(f"{gaps.size} ITL gaps but {weights.size} weights")
    if gaps.size and not (np.all(np.isfinite(gaps)) and np.all(gaps >= 0)):
        raise ValueError("ITL gaps must be finite and non-negative")
    return gaps, weights


def _totals(done: Rows, duration_ms: float, wall_time_ms: float,
            num_requests: int, committed_prefill_tokens: int) -> dict:
    """Counts, token totals, durations and throughputs (``kv_eviction_policy`` …
    ``total_throughput_tok_s``)."""
    completed = int(len(done))
    total_in = int_sum(done["input_length"])
    total_out = int_sum(done["output_length"])
    return {
        "kv_eviction_policy": "lru",
        "committed_prefill_tokens": int(committed_prefill_tokens),
        "num_requests": int(num_requests),
        "completed_requests": completed,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "duration_ms": duration_ms,
        "wall_time_ms": wall_time_ms,
        "request_throughput_rps": _per_second(completed, duration_ms),
        "input_throughput_tok_s": _per_second(total_in, duration_ms),
        "output_throughput_tok_s": _per_second(total_out, duration_ms),
        "total_throughput_tok_s": _per_second(total_in + total_out, duration_ms),
    }


def _cost(decode_worker_seconds: float, prefill_worker_seconds: float,
          decode_gpus_per_worker: int, prefill_gpus_per_worker: int) -> dict:
    """Worker-seconds and GPU-hours (``prefill_worker_seconds`` … ``power_coverage``)."""
    gpu_hours = (prefill_worker_seconds * prefill_gpus_per_worker
                 + decode_worker_seconds * decode_gpus_per_worker) / 3600.0
    return {
        "prefill_worker_seconds": float(prefill_worker_seconds),
        "decode_worker_seconds": float(decode_worker_seconds),
        "prefill_gpus_per_worker": int(prefill_gpus_per_worker),
        "decode_gpus_per_worker": int(decode_gpus_per_worker),
        "gpu_hours": float(gpu_hours),
        "power_w": None,
        "power_coverage": None,
    }


def _tokens_and_reuse(done: Rows, total_in: int, total_out: int,
                      wall_time_ms: float) -> dict:
    """Tokens processed per wall-clock second and the prefix-cache reuse ratios."""
    return {
        "processed_tokens": total_in + total_out,
        "processed_tokens_per_s": _per_second(total_in + total_out, wall_time_ms),
        "processed_output_tokens_per_s": _per_second(total_out, wall_time_ms),
        "prefix_cache_reused_ratio": _ratio(_largest_hits(done), total_in),
        "first_admission_prefix_cache_reused_ratio": _ratio(
            int_sum(done["first_admission_reused_input_tokens"]), total_in),
    }


def _largest_hits(done: Rows) -> int:
    """Σ over requests of the largest cache hit of any admission, as the reference's
    summary counts it: generated tokens a re-admission found included, and a decode
    worker's re-admission after a preemption (measured with vLLM and SGLang: a prefill
    hit of 1,536 and a decode re-admission hit of 3,530 count 3,530)."""
    def tokens(c: str) -> np.ndarray:                  # missing values count 0
        return np.nan_to_num(done[c].astype(np.float64)) if c in done else 0.0
    hits = np.maximum(tokens("reused_input_tokens") + tokens("reused_generated_tokens"),
                      tokens("decode_reused_input_tokens"))
    return int_sum(np.asarray(hits, dtype=np.float64))


def _latency_stats(samples: dict, trajectory_requests) -> dict:
    """The nine statistics of each of ``LATENCY_METRICS`` (``samples[metric]``: their
    ``weighted_stats``); the trajectory keys of ``trajectory_requests``, if given, go
    before the E2E latency's (where the reference puts them)."""
    out: dict = {}
    for metric in LATENCY_METRICS:
        if metric == "e2e_latency" and trajectory_requests is not None:
            out.update(trajectory_summary(trajectory_requests))
        stats = samples[metric]
        out.update({f"{stat}_{metric}_ms": _or_zero(stats[stat]) for stat in STAT_NAMES})
    return out


def _itl_stats(gaps: np.ndarray, weights: np.ndarray) -> tuple[dict, dict]:
    """The ``weighted_stats`` of the ITL gaps and of the per-user decode speed (1000 /
    gap, positive gaps only), from one sort of the gaps (``simmodel.metrics.weighted``)."""
    v, w = checked_samples(gaps, weights)
    if v.size == 0:
        none = {name: None for name in STAT_NAMES}
        return none, dict(none)
    ranked = Ranked(v, w)
    return ranked.stats(), ranked.speed_stats()


def _goodput(done: Rows, sla: SlaConfig, duration_ms: float) -> dict:
    """``GOODPUT_KEYS``: the completed requests meeting the SLA, and their throughputs."""
    good = _good_mask(done, sla)
    good_count = int(good.sum())
    good_out = int_sum(done["output_length"][good])
    return {
        "goodput_completed_requests": good_count,
        "goodput_request_throughput_rps": _per_second(good_count, duration_ms),
        "goodput_output_throughput_tok_s": _per_second(good_out, duration_ms),
    }


def _or_zero(x: Optional[float]) -> float:
    """The reference reports the statistics of an empty sample set as 0.0."""
    return 0.0 if x is None else x


def trajectory_summary(requests) -> dict:
    """Agentic trajectories (plays): how many there are, how many completed (every node
    completed), and the E2E latency of completed ones: last token of the play minus the
    first arrival in it.  Keys as the reference's (including its extra ``p50_``)."""
    plays = requests[requests["play_id"].notna()]
    groups = plays.groupby("play_id", sort=False)
    total = int(groups.ngroups)
    ok = groups["terminal_status"].agg(lambda s: bool((s == "completed").all()))
    done_ids = ok[ok].index
    e2e = np.asarray([
        float(g["last_token_ms"].max() - g["arrival_time_ms"].min())
        for pid, g in groups if pid in set(done_ids)], dtype=float)
    out: dict = {
        "total_trajectories": total,
        "completed_trajectories": int(len(done_ids)),
        "incomplete_trajectories": total - int(len(done_ids)),
    }
    stats = weighted_stats(e2e)
    out.update({f"{stat}_trajectory_e2e_latency_ms": stats[stat] for stat in STAT_NAMES})
    out["p50_trajectory_e2e_latency_ms"] = stats["median"]
    return out
