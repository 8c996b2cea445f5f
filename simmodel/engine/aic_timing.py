"""Pass costs from NVIDIA AIConfigurator's measured kernel database
(``timing_model: {type: aic}``).  Pure, no SimPy; the library is imported only here, when
such a model is built (``simmodel.engine.aic_library``).

A pass is costed from its real composition, through the library's mixed-step estimate:
``AicEngine.mixed_step_breakdown`` splits a mixed prefill/decode step into three parts,
and the pass takes each part at its own shape:

* **shared** (every op but attention: GEMMs, MoE, norms, communication) over all tokens of
  the pass together: ``T = Σ`` new prompt tokens, plus the ``n`` decoders (each
  ``1 + aic_nextn`` query tokens, the library's own scaling);
* **context attention** per group of prefill entries of the same (bucketed) shape: ``k``
  entries each computing ``t`` new tokens on top of ``p`` already computed (a cached
  prefix or earlier chunks) cost the library's context attention of ``k`` whole requests
  of ``isl = p + t`` with ``prefix = p`` (its ``ctx_tokens = k·(p + t)``: the library
  counts a request's prefix in its context tokens, and a ``ctx_tokens`` below ``isl`` as
  a proportional share of one request's attention, which a later chunk is not);
* **decode attention** of the ``n`` decoders at their mean context ``s = ⌊Σ/n⌋``
  (prompt plus tokens so far; the library's ``isl + osl // 2 + 1`` with ``osl = 2``).

So a pass of ``k`` equal entries plus ``n`` decoders at ``s`` costs exactly
``mixed_step_latency(k·(p + t), n, p + t, osl, p)`` for the ``osl`` that puts the decoders at
``s`` (``tests/micro/test_aic_timing.py``); a prefill-only and a decode-only estimate are
never added (their shared parts would be paid twice).  A pass of a prefill worker has no
decoders, and a pass of a decode worker no prefill entries.

**Prefill dispatch.**  The kernel database measures GPU kernels alone; a serving engine
also spends CPU time dispatching a prefill pass (tensor creation and kernel launches
across every layer), which the library adds to its own TTFT estimates
(``_prefill_dispatch_overhead_ms`` of its backend: vLLM 0.8 ms per layer, calibrated by
NVIDIA on its measured serving runs; SGLang and TRT-LLM none).  A pass with prefill work
pays it once (``prefill_overhead_ms``, default the library's; decode-only passes, run
from CUDA graphs, pay none): the library charges it per request, but its estimates
assume one prefill per step, and paying it per entry would make a pass of many short
prompts cost their count times the dispatch of one forward pass (measured against real
runs in benchmarks/README.md, "End to end against real GPUs").  The total becomes the
reference's nanosecond ``Duration`` and is divided by ``speedup_ratio``.

**Memoisation.**  Each part is memoised on bucketed integer inputs (``bucket``): token
counts, prefixes and mean contexts below 256 are exact, above they are rounded to the
nearest of 64 steps per octave (relative rounding at most 1/128 = 0.78 %); the numbers of
entries and of decoders are exact.  The error this adds to a pass time is measured in
``benchmarks/aic_validation.py`` (benchmarks/README.md, "aic timing").
"""
from __future__ import annotations

import numpy as np

from simmodel.config import EngineConfig
from simmodel.engine.aic_library import (AicSpec, dispatch_overhead_ms, engine_handle,
                                         resolve_spec)
from simmodel.engine.clock import (batch_new_tokens, div_ns, div_ns_array, duration_ns,
                                   duration_ns_array, speedup_divisor)

EXACT_BELOW = 256          # inputs below are memoised exactly
STEP_BITS = 6              # above: 2**6 = 64 steps per octave


def bucket(x: int) -> int:
    """``x`` rounded to its memoisation bucket (exact below ``EXACT_BELOW``)."""
    if x < EXACT_BELOW:
        return x
    step = 1 << (x.bit_length() - 1 - STEP_BITS)
    return (x + (step >> 1)) // step * step


def bucket_array(x: np.ndarray) -> np.ndarray:
    """``bucket`` of each of the non-negative integers ``x``."""
    x = np.asarray(x, dtype=np.int64)
    bits = np.frexp(np.maximum(x, 1).astype(np.float64))[1]      # bit length
    step = np.left_shift(np.int64(1), np.maximum(bits - 1 - STEP_BITS, 0))
    return np.where(x < EXACT_BELOW, x, (x + (step >> 1)) // step * step)


def prefill_overhead_ms(engine: EngineConfig, spec: AicSpec) -> float:
    """The dispatch cost (ms) added to a pass with prefill work: ``prefill_overhead_ms``
    of the timing model, or (null, ``auto``) the library's own for the backend."""
    given = engine.timing_model.prefill_overhead_ms
    if given is None or given == "auto":
        return dispatch_overhead_ms(spec)
    return float(given)


class AicTiming:
    """The ``aic`` timing model of one pool (its workers share it and its memo)."""

    composed = True        # ``SchedulerBase._charge`` passes the pass composition

    def __init__(self, engine: EngineConfig, spec: AicSpec | None = None):
        self.spec = spec if spec is not None else resolve_spec(engine)
        self.handle = engine_handle(self.spec)
        self.scale = speedup_divisor(engine.speedup_ratio)
        self.overhead_ms = prefill_overhead_ms(engine, self.spec)
        self._shared: dict = {}
        self._context: dict = {}
        self._decode: dict = {}

    # -- the three parts, memoised (ms, before the clock and the speed-up) ---------------
    def shared_ms(self, tokens: int, n_dec: int) -> float:
        key = (tokens, n_dec)
        ms = self._shared.get(key)
        if ms is None:
            ms = self._shared[key] = self.handle.mixed_step_breakdown(
                tokens, n_dec, max(tokens, 1), 2, 0)[1]
        return ms

    def context_ms(self, k: int, new: int, prefix: int) -> float:
        key = (k, new, prefix)
        ms = self._context.get(key)
        if ms is None:
            # the library counts a request's cached prefix in its context tokens
            ms = self._context[key] = self.handle.mixed_step_breakdown(
                k * (prefix + new), 0, prefix + new, 2, prefix)[2]
        return ms

    def decode_attention_ms(self, n_dec: int, context: int) -> float:
        key = (n_dec, context)
        ms = self._decode.get(key)
        if ms is None:
            ms = self._decode[key] = self.handle.mixed_step_breakdown(
                0, n_dec, max(context - 2, 1), 2, 0)[3]
        return ms

    def raw_pass_ms(self, chunks, n_dec: int, dec_tokens: int) -> float:
        """The library's time (ms) of a pass of prefill ``chunks`` ((new tokens, tokens
        computed before), ...) and ``n_dec`` decoders holding ``dec_tokens`` tokens."""
        total = 0
        groups: dict = {}
        for new, before in chunks:
            total += new
            key = (bucket(new), bucket(before))
            groups[key] = groups.get(key, 0) + 1
        ms = self.shared_ms(bucket(total), n_dec)
        for (new, before), k in groups.items():
            ms += self.context_ms(k, new, before)
        if n_dec:
            ms += self.decode_attention_ms(n_dec, bucket(dec_tokens // n_dec))
        if chunks:
            ms += self.overhead_ms
        return ms

    # -- TimingModel -----------------------------------------------------------------------
    def pass_ms(self, chunks, n_dec: int, dec_tokens: int) -> float:
        """The duration of a pass from its composition (see the module docstring)."""
        if not chunks and not n_dec:
            return 0.0
        return div_ns(duration_ns(self.raw_pass_ms(chunks, n_dec, dec_tokens)),
                      self.scale) / 1e6

    def prefill_ms(self, n: int, sum_isl: int, sum_prefix: int) -> float:
        """``n`` prompt entries known only by their sums: ``n`` equal entries."""
        if n == 0:
            return 0.0
        new = batch_new_tokens(n, sum_isl, sum_prefix) // n
        return self.pass_ms([(new, sum_prefix // n)] * n, 0, 0)

    def decode_ms(self, n: int, active_tokens: int) -> float:
        return self.pass_ms((), n, active_tokens)

    def decode_ms_array(self, n: int, active_tokens: np.ndarray) -> np.ndarray:
        """``decode_ms(n, a)`` for each ``a`` of ``active_tokens`` (same arithmetic)."""
        active = np.asarray(active_tokens, dtype=np.int64)
        if n == 0:
            return np.zeros(len(active))
        # a run's contexts grow pass by pass: cost each stretch of one bucket once
        means = bucket_array(active // n)
        starts = np.flatnonzero(np.concatenate(([True], means[1:] != means[:-1])))
        shared = self.shared_ms(0, n)
        raw = np.array([shared + self.decode_attention_ms(n, int(c)) for c in means[starts]])
        raw = np.repeat(raw, np.diff(np.append(starts, len(means))))
        return div_ns_array(duration_ns_array(raw), self.scale) / 1e6
