"""Unit tier: every scheduler backend offers the declared engine interface.

``simmodel.engine.api.Scheduler`` is the only view a worker and the disaggregated
handoff have of a backend; each backend must provide every member, methods with the
Protocol's parameters (names, kinds, defaults)."""
from __future__ import annotations

import inspect

import pytest

from simmodel.config import EngineConfig
from simmodel.engine.api import PassPlan, RunOutcome, Scheduler
from simmodel.engine.dp import DpScheduler
from simmodel.engine.factory import make_scheduler
from simmodel.engine.scheduler import PassPlan as OldPassPlan
from simmodel.engine.scheduler import VllmScheduler
from simmodel.engine.sglang import SglangScheduler
from simmodel.engine.timing import make_timing
from simmodel.engine.trtllm import TrtllmScheduler


def protocol_members(proto) -> tuple[set[str], set[str]]:
    """(attribute names, method names) declared by ``proto`` itself."""
    attrs = set(proto.__annotations__)
    methods = {name for name, v in vars(proto).items()
               if inspect.isfunction(v) and not name.startswith("_")}
    return attrs, methods


def build(backend: str, dp: int = 1):
    eng = EngineConfig(backend=backend, dp_size=dp)
    return make_scheduler(eng, make_timing(eng))


SCHEDULERS = {
    VllmScheduler: lambda: build("vllm"),
    TrtllmScheduler: lambda: build("trtllm"),
    SglangScheduler: lambda: build("sglang"),
    DpScheduler: lambda: build("vllm", dp=2),
}


def test_the_protocol_declares_the_worker_and_handoff_operations():
    attrs, methods = protocol_members(Scheduler)
    assert methods == {"enqueue", "has_work", "cancel", "schedule", "settle", "decode_run",
                       "queue_shut", "commit_decode_run", "reserve", "unreserve", "activate",
                       "release_source", "waiting_on_holds"}
    assert {"waiting", "running", "kv", "bs", "num_blocks", "held",
            "committed_prefill_tokens", "preemptions", "cache_hit_tokens",
            "mtp_emissions", "mtp_tokens"} == attrs
    for name in methods:
        assert inspect.getdoc(getattr(Scheduler, name)), name


@pytest.mark.parametrize("cls", list(SCHEDULERS), ids=lambda c: c.__name__)
def test_each_backend_provides_every_member_with_the_declared_signature(cls):
    sched = SCHEDULERS[cls]()
    assert type(sched) is cls
    attrs, methods = protocol_members(Scheduler)
    for name in attrs:
        assert hasattr(sched, name), f"{cls.__name__} lacks attribute {name}"
    for name in methods:
        impl = getattr(sched, name, None)
        assert callable(impl), f"{cls.__name__} lacks method {name}"
        want = list(inspect.signature(getattr(Scheduler, name)).parameters.values())[1:]
        got = list(inspect.signature(impl).parameters.values())
        assert [(p.name, p.kind, p.default) for p in got] == \
            [(p.name, p.kind, p.default) for p in want], f"{cls.__name__}.{name}"
    for kv_member in ("active_blocks", "inactive_blocks", "free", "drain_events"):
        assert hasattr(sched.kv, kv_member), f"{cls.__name__}.kv lacks {kv_member}"


def test_pass_plan_keeps_its_former_import_path():
    assert OldPassPlan is PassPlan


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
def test_committing_no_pass_reports_nothing(backend):
    out = build(backend).commit_decode_run(None, 0, 0, 0.0, 0, True)
    assert isinstance(out, RunOutcome)
    assert out.done == [] and len(out.stops) == 0 and not out.kv_events


def test_the_engine_imports_no_cluster_metrics_or_workload_module():
    import ast
    import pathlib

    import simmodel.engine as engine
    for path in pathlib.Path(engine.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith(("simmodel.cluster", "simmodel.metrics",
                                                   "simmodel.workload")), (path.name,
                                                                           node.module)


@pytest.mark.parametrize("cls", list(SCHEDULERS), ids=lambda c: c.__name__)
def test_settling_a_pass_returns_a_frozen_outcome(cls):
    """One 100-token prompt, 3 output tokens, arriving at 0: the first pass prefills it
    and emits its first token (hand-counted: 2 blocks of 64 stored); the third pass
    completes it.  The outcome is frozen and lists exactly that."""
    import dataclasses

    from simmodel.engine.api import PassOutcome
    from simmodel.engine.request import EngineRequest
    from simmodel.engine.tokens import TokenSequence
    from simmodel.workload.model import Prompt
    sched = SCHEDULERS[cls]()
    req = EngineRequest(0, TokenSequence(Prompt((7, 8), 64, 100), 64, 0), 3, arrival_ms=0.0)
    sched.enqueue(req)
    outs, now = [], 0.0
    for idx in range(3):
        plan = sched.schedule(now)
        now += plan.duration_ms
        outs.append(sched.settle(plan, now, idx, True))
    first, _, last = outs
    assert isinstance(first, PassOutcome)
    assert first.first_tokens == (req,) and first.ended == () and not first.preempted
    assert last.ended == (req,) and last.first_tokens == () and last.rejected == ()
    assert isinstance(first.kv_events, list)
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.ended = ()
