"""The aic timing model (``simmodel.engine.aic_timing``): pass times against direct calls
of NVIDIA's ``aiconfigurator-core`` library (Llama-3.1-8B on an H200, its current vLLM,
SGLang and TRT-LLM databases).  Every expected value is the library's own answer for the
pass's composition, on the reference's nanosecond grid; the inputs are chosen on exact
memoisation buckets (multiples of the bucket step), so the comparison is exact.

The kernel-composition tests build their engine with ``prefill_overhead_ms: 0``; the
dispatch cost a prefill pass adds by default is tested on its own, from the library's
calibration by hand: Llama-3.1-8B has 32 layers (``num_hidden_layers`` of its shipped
config), and the vLLM backend charges 0.8 ms a layer (``VLLMBackend.
_prefill_dispatch_overhead_ms``), SGLang and TRT-LLM nothing."""
from __future__ import annotations

import numpy as np
import pytest

from simmodel.config import EngineConfig, TimingConfig
from simmodel.engine.aic_library import engine_handle, resolve_spec
from simmodel.engine.aic_timing import AicTiming, bucket
from simmodel.engine.api import PassPlan
from simmodel.engine.clock import duration_ns
from simmodel.engine.factory import make_scheduler
from simmodel.engine.request import EngineRequest
from simmodel.engine.scheduler import VllmScheduler
from simmodel.engine.tokens import TokenSequence
from simmodel.workload.model import Prompt

from hand_timing import approx, row, run_one_worker

MODEL = "meta-llama/Meta-Llama-3.1-8B"
AIC = {"type": "aic", "model": MODEL, "system": "h200_sxm"}


#: the default dispatch cost of a pass with prefill work (ms), by backend (see above)
DISPATCH_MS = {"vllm": 32 * 0.8, "sglang": 0.0, "trtllm": 0.0}


def engine(backend: str = "vllm", overhead=0.0, **kw) -> EngineConfig:
    """An engine of ``backend`` with the aic model (``overhead``: its
    ``prefill_overhead_ms``; None: the library's)."""
    tm = TimingConfig(**AIC, prefill_overhead_ms=overhead)
    return EngineConfig(backend=backend, timing_model=tm, **kw)


@pytest.fixture(scope="module")
def lib():
    """The library's engine for the default engine, called directly."""
    return engine_handle(resolve_spec(engine()))


def ns(ms: float) -> float:
    """A library time (ms) on the reference's nanosecond grid, in ms."""
    return duration_ns(ms) / 1e6


def test_a_mixed_pass_is_one_mixed_step_of_the_library(lib):
    # 2 entries of 512 new tokens over 256 computed, 8 decoders at context 2,048: the
    # library's mixed step of 2 requests of isl 768 with prefix 256 (its context tokens
    # count the prefix: 1,536), 8 decode requests, and the osl putting its decoders at
    # isl + osl // 2 + 1 = 2,048.
    t = AicTiming(engine())
    got = t.pass_ms([(512, 256), (512, 256)], 8, 8 * 2048)
    assert got == approx(ns(lib.mixed_step_latency(1536, 8, 768, 2 * (2048 - 769), 256)))


def test_the_shared_ops_are_paid_once_not_added(lib):
    t = AicTiming(engine())
    mixed = t.pass_ms([(1024, 0)], 64, 64 * 1024)
    alone = t.pass_ms([(1024, 0)], 0, 0) + t.pass_ms((), 64, 64 * 1024)
    _, shared, _, _ = lib.mixed_step_breakdown(0, 64, 1022, 2, 0)
    assert mixed < alone - shared / 2


def test_entries_of_different_shapes_take_their_own_attention(lib):
    # one entry of 1,024 new tokens on a cached prefix of 3,072, one fresh of 256: shared
    # ops over the 1,280 tokens, each entry's context attention at its own prefix
    t = AicTiming(engine())
    shared = lib.mixed_step_breakdown(1280, 0, 1280, 2, 0)[1]
    first = lib.mixed_step_breakdown(4096, 0, 4096, 2, 3072)[2]
    second = lib.mixed_step_breakdown(256, 0, 256, 2, 0)[2]
    assert t.pass_ms([(1024, 3072), (256, 0)], 0, 0) == approx(ns(shared + first + second))


def lone_request_passes(eng: EngineConfig, isl: int, osl: int) -> list[float]:
    """The pass durations of one request alone on a vLLM scheduler."""
    sched = VllmScheduler(eng, AicTiming(eng))
    req = EngineRequest(0, TokenSequence(Prompt((0,) * (-(-isl // 64)), 64, isl), 64, 0),
                        osl, arrival_ms=0.0)
    sched.enqueue(req)
    now, out = 0.0, []
    while sched.has_work():
        plan = sched.schedule(now)
        now += plan.duration_ms
        out.append(plan.duration_ms)
        sched.settle(plan, now, len(out) - 1, False)
    return out


def test_a_lone_request_through_the_scheduler(lib):
    # prefill of 1,024 tokens; then decode passes at contexts 1,025, 1,026 (bucket 1,024:
    # steps of 16 from 1,024), each the library's step with no prefill at isl = s - 2
    passes = lone_request_passes(engine(), 1024, 3)
    assert passes[0] == approx(ns(lib.mixed_step_latency(1024, 0, 1024, 2, 0)))
    decode = ns(lib.mixed_step_latency(0, 1, bucket(1025) - 2, 2, 0))
    assert passes[1:] == [approx(decode)] * 2


def test_chunked_prefill_charges_each_chunk_at_its_prefix(lib):
    # 12,288 tokens in chunks of 8,192 and 4,096 (budget 8,192): the second chunk's
    # attention runs over the 8,192 computed before
    passes = lone_request_passes(engine(), 12288, 1)
    assert passes[0] == approx(ns(lib.mixed_step_latency(8192, 0, 8192, 2, 0)))
    assert passes[1] == approx(ns(lib.mixed_step_latency(12288, 0, 12288, 2, 8192)))


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
def test_ttft_of_a_lone_request_is_the_library_prefill(tmp_path, backend):
    eng = engine(backend)
    h = engine_handle(resolve_spec(eng))             # that backend's own database
    res = run_one_worker(tmp_path, [row(0.0, range(64), 2)],
                         {"backend": backend, "timing_model": AIC}, coalesce=True)
    ttft = res.requests.ttft_ms.iloc[0]             # the default dispatch cost included
    assert ttft == approx(ns(h.mixed_step_latency(1024, 0, 1024, 2, 0) + DISPATCH_MS[backend]))


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
def test_a_prefill_pass_pays_the_dispatch_cost_once_and_a_decode_pass_none(backend):
    bare, auto = AicTiming(engine(backend)), AicTiming(engine(backend, overhead=None))
    assert auto.overhead_ms == pytest.approx(DISPATCH_MS[backend])
    for chunks, n_dec in (([(1024, 0)], 0), ([(512, 0)] * 6, 0), ([(256, 512)], 16)):
        added = auto.pass_ms(chunks, n_dec, n_dec * 700) - bare.pass_ms(chunks, n_dec, n_dec * 700)
        assert added == approx(DISPATCH_MS[backend])        # one pass, however many entries
    assert auto.decode_ms(16, 16 * 700) == bare.decode_ms(16, 16 * 700)


def test_a_given_dispatch_cost_replaces_the_librarys_and_is_sped_up():
    bare = AicTiming(engine(speedup_ratio=2.0))
    given = AicTiming(engine(overhead=5.0, speedup_ratio=2.0))
    assert given.pass_ms([(1024, 0)], 0, 0) - bare.pass_ms([(1024, 0)], 0, 0) == approx(2.5)


def test_coalesced_decode_runs_cost_what_single_passes_cost():
    t = AicTiming(engine())
    active = 40 * 700 + 40 * np.arange(600, dtype=np.int64)
    runs = t.decode_ms_array(40, active)
    assert runs.tolist() == [t.decode_ms(40, int(a)) for a in active]


def test_coalescing_does_not_change_an_aic_run(tmp_path):
    rows = [row(0.0, range(40), 30), row(5.0, range(100, 130), 60)]
    keys = {"timing_model": AIC}
    a = run_one_worker(tmp_path, rows, keys, coalesce=True)
    b = run_one_worker(tmp_path, rows, keys, coalesce=False)
    assert a.requests.e2e_latency_ms.tolist() == b.requests.e2e_latency_ms.tolist()


def test_speedup_ratio_divides_the_pass(lib):
    t = AicTiming(engine(speedup_ratio=2.0))
    raw = lib.mixed_step_latency(1024, 0, 1024, 2, 0)
    # the Duration halved, to the nearest nanosecond
    assert t.pass_ms([(1024, 0)], 0, 0) == pytest.approx(duration_ns(raw) / 2 / 1e6, abs=1e-6)


def test_a_prefill_worker_pays_no_decode_and_a_decode_worker_no_prefill():
    eng = engine()
    timing = AicTiming(eng)
    pre = make_scheduler(eng, timing, role="prefill")
    dec = make_scheduler(eng, timing, role="decode")
    for sched, want in ((pre, timing.pass_ms([(512, 0)], 0, 0)),
                        (dec, timing.pass_ms((), 4, 4 * 512))):
        plan = PassPlan()
        sched._charge(plan, 1, 512, 0, 4, 4 * 512, 512, [(512, 0)])
        assert plan.duration_ms == want
