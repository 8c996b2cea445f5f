"""Micro-scenarios for the workload driver: sessions, closed loop, delta prompts, agentic
graphs and cancellation, with times computed by hand.

Most cases use the fixed timing model, prefill_ms = 10 and decode_ms = 1, so a pass
costs 10 ms if any request has prompt tokens in it, plus 1 ms if any request decodes.  A
lone request of n output tokens therefore has its first token 10 ms after it starts and
its last token n - 1 ms later.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

import simmodel
from simmodel.config import (ClusterConfig, EngineConfig, Scenario, TimingConfig,
                             WorkloadConfig)
from simmodel.workload.model import Dependency, Prompt, Session, Turn, Workload

FIXED = TimingConfig(type="fixed", prefill_ms=10.0, decode_ms=1.0)


def scenario(workers=1, concurrency=None, fixed=True, **engine) -> Scenario:
    eng = EngineConfig(timing_model=FIXED if fixed else TimingConfig(), **engine)
    return Scenario(workload=WorkloadConfig(trace="(python)", concurrency=concurrency),
                    cluster=ClusterConfig(workers=workers, engine=eng))


_next_id = iter(range(10**9))


def prompt(tokens: int, ids=None) -> Prompt:
    """A prompt of fresh 512-token blocks (no sharing) unless ids are given."""
    n = -(-tokens // 512)
    ids = tuple(ids) if ids is not None else tuple(next(_next_id) + 10**6 for _ in range(n))
    return Prompt(ids, 512, tokens)


def session(sid, *turns) -> Session:
    """turns: (output_length, arrival_ms or None, delay_ms or None[, prompt])."""
    out = []
    for k, spec in enumerate(turns):
        out_len, arrival, delay = spec[:3]
        p = spec[3] if len(spec) > 3 else prompt(100)
        out.append(Turn(sid, k, p, out_len, arrival_ms=arrival if k == 0 else None,
                        delay_ms=delay if k else None))
    return Session(sid, tuple(out))


def run(sc, sessions, **kw):
    wl = Workload(tuple(sessions), source="test", **kw)
    return simmodel.run(sc, workload=wl).requests.set_index(["session_id", "turn_index"])


def test_next_turn_waits_for_completion_plus_delay():
    # s/0: 0 -> first token 10, 3 tokens -> ends 12; s/1 ready at 12 + 5 = 17, ends 29.
    r = run(scenario(), [session("s", (3, 0.0, None), (3, None, 5.0))])
    assert r.loc[("s", 0), "terminal_time_ms"] == pytest.approx(12.0)
    assert r.loc[("s", 1), "arrival_time_ms"] == pytest.approx(17.0)
    assert r.loc[("s", 1), "terminal_time_ms"] == pytest.approx(29.0)


def test_rejected_turn_still_releases_the_next_one():
    # max_model_len 1000 rejects s/0 (2000 tokens) at the end of the pass that examined
    # it: that pass is t's prefill (0 -> 10).  s/1 is released 5 ms later, at 15.
    sc = scenario(max_model_len=1000)
    r = run(sc, [session("s", (3, 0.0, None, prompt(2000)), (3, None, 5.0)),
                 session("t", (3, 0.0, None))])
    assert r.loc[("s", 0), "terminal_status"] == "rejected"
    assert r.loc[("s", 0), "terminal_time_ms"] == pytest.approx(10.0)
    assert r.loc[("s", 1), "arrival_time_ms"] == pytest.approx(15.0)
    assert r.loc[("s", 1), "terminal_status"] == "completed"


def test_closed_loop_holds_the_slot_depth_first_across_think_time():
    # C = 1: a/0 0 -> 12; think 5; a/1 17 -> 29; only then b starts: 29 -> 41.
    sc = scenario(concurrency=1)
    r = run(sc, [session("a", (3, 500.0, None), (3, None, 5.0)), session("b", (3, 0.0, None))])
    assert r.loc[("a", 0), "arrival_time_ms"] == pytest.approx(0.0)   # timestamps ignored
    assert r.loc[("a", 1), "arrival_time_ms"] == pytest.approx(17.0)
    assert r.loc[("b", 0), "arrival_time_ms"] == pytest.approx(29.0)
    assert r.loc[("b", 0), "terminal_time_ms"] == pytest.approx(41.0)


def test_closed_loop_cap_two_admits_the_next_session_when_one_ends():
    # C = 2: a and b share the first pass (10), decode together (11, 12); c starts at 12.
    sc = scenario(concurrency=2)
    r = run(sc, [session("a", (3, 0.0, None)), session("b", (3, 0.0, None)),
                 session("c", (3, 0.0, None))])
    assert r.loc[("a", 0), "terminal_time_ms"] == pytest.approx(12.0)
    assert r.loc[("b", 0), "terminal_time_ms"] == pytest.approx(12.0)
    assert r.loc[("c", 0), "arrival_time_ms"] == pytest.approx(12.0)
    assert r.loc[("c", 0), "terminal_time_ms"] == pytest.approx(24.0)


def test_uncapped_concurrency_admits_every_session_at_once():
    sc = scenario(concurrency=10**6)
    r = run(sc, [session(f"s{i}", (2, 1000.0 * i, None)) for i in range(5)])
    assert (r["arrival_time_ms"] == 0.0).all()


def test_same_instant_releases_follow_session_order():
    # Both sessions' second turns become ready at 12 (delay 0 after completions in the
    # same pass); the one of the earlier session is released first (lower uid).
    r = run(scenario(workers=2), [session("a", (3, 0.0, None), (2, None, 0.0)),
                                  session("b", (3, 0.0, None), (2, None, 0.0))])
    assert r.loc[("a", 1), "arrival_time_ms"] == r.loc[("b", 1), "arrival_time_ms"]
    assert r.loc[("a", 1), "uid"] < r.loc[("b", 1), "uid"]


def test_delta_prompt_contains_previous_prompt_and_emitted_outputs():
    # Reference §7.2: turn 1 = 1000 prompt + 100 outputs + 200 new = 1300 tokens, and it
    # reuses floor(1100 / 64) * 64 = 1088 cached tokens (prompt and output blocks).
    outs = tuple(range(50_000, 50_100))
    t0 = Turn("s", 0, Prompt((1, 2), 512, 1000), 100, arrival_ms=0.0, output_token_ids=outs)
    t1 = Turn("s", 1, Prompt((3,), 512, 200), 10, delay_ms=0.0)
    r = run(scenario(fixed=False), [Session("s", (t0, t1))], prompt_mode="delta")
    assert r.loc[("s", 1), "input_length"] == 1300
    assert r.loc[("s", 1), "reused_input_tokens"] == 1088


def test_delta_prompt_skips_the_outputs_of_a_rejected_turn():
    sc = scenario(max_model_len=1500)
    t0 = Turn("s", 0, prompt(1600), 50, arrival_ms=0.0)
    t1 = Turn("s", 1, prompt(200), 5, delay_ms=0.0)
    r = run(sc, [Session("s", (t0, t1))], prompt_mode="delta")
    assert r.loc[("s", 0), "terminal_status"] == "rejected"
    assert r.loc[("s", 1), "input_length"] == 1800        # 1600 + 200, no outputs


def test_delta_generated_outputs_are_deterministic_for_a_seed():
    t0 = Turn("s", 0, prompt(300), 70, arrival_ms=0.0)
    t1 = Turn("s", 1, prompt(100), 5, delay_ms=0.0)
    sessions = [Session("s", (t0, t1))]
    a = run(scenario(fixed=False), sessions, prompt_mode="delta")
    b = run(scenario(fixed=False), sessions, prompt_mode="delta")
    # 300 + 70 = 370 tokens of history: 5 full blocks (320 tokens) are cached.
    assert a.loc[("s", 1), "input_length"] == 470
    assert a.loc[("s", 1), "reused_input_tokens"] == 320
    assert a.equals(b)


def node(rid, out, not_before=0.0, deps=(), play="p", tokens=100):
    return Session(rid, (Turn(rid, 0, prompt(tokens), out, arrival_ms=not_before,
                              request_id=rid, play_id=play, deps=tuple(deps)),))


def test_agentic_node_waits_for_its_slowest_dependency():
    # a (3 tokens) and b (10 tokens) share the first pass on one worker: a ends at 12,
    # b at 19.  c waits for both + 5 ms -> ready at max(17, 24) = 24, ends 24 + 12 = 36.
    r = run(scenario(), [
        node("a", 3), node("b", 10),
        node("c", 3, deps=[Dependency("a", "completion", 5.0), Dependency("b", "completion", 5.0)]),
    ], kind="agentic")
    assert r.loc[("c", 0), "arrival_time_ms"] == pytest.approx(24.0)
    assert r.loc[("c", 0), "terminal_time_ms"] == pytest.approx(36.0)


def test_agentic_dispatch_trigger_and_not_before():
    # d waits for a's dispatch (0) + 2 ms, but not before 50: released at 50.
    # e waits for a's dispatch + 60: released at 60.
    r = run(scenario(workers=3), [
        node("a", 3), node("d", 3, not_before=50.0, deps=[Dependency("a", "dispatch", 2.0)]),
        node("e", 3, deps=[Dependency("a", "dispatch", 60.0)]),
    ], kind="agentic")
    assert r.loc[("d", 0), "arrival_time_ms"] == pytest.approx(50.0)
    assert r.loc[("e", 0), "arrival_time_ms"] == pytest.approx(60.0)


def test_agentic_rejected_dependency_still_releases_dependents():
    sc = scenario(max_model_len=1000)
    r = run(sc, [
        Session("big", (Turn("big", 0, prompt(2000), 3, arrival_ms=0.0, request_id="big",
                             play_id="p"),)),
        node("after", 3, deps=[Dependency("big", "completion", 1.0)]),
    ], kind="agentic")
    assert r.loc[("big", 0), "terminal_status"] == "rejected"
    assert r.loc[("after", 0), "terminal_status"] == "completed"


def test_agentic_trajectory_summary():
    wl = Workload((node("a", 3, play="p1"), node("b", 3, play="p1", deps=[Dependency("a")]),
                   node("x", 3, play="p2")), kind="agentic")
    res = simmodel.run(scenario(workers=2), workload=wl)
    s = res.summary
    assert (s["total_trajectories"], s["completed_trajectories"]) == (2, 2)
    # p1: a 0 -> 12, b released at 12, ends 24: e2e 24.  p2: x alone on worker 1: 12.
    assert s["max_trajectory_e2e_latency_ms"] == pytest.approx(24.0)
    assert s["min_trajectory_e2e_latency_ms"] == pytest.approx(12.0)


def test_cancellation_frees_the_slot_and_ends_the_session():
    # C = 1.  a/0 would run 0 -> 109 (100 tokens) but is cancelled at 30.5: the worker drops
    # it at the end of the pass in flight (31), a/1 never runs, and b starts at 31.
    wl = Workload((session("a", (100, 0.0, None), (3, None, 0.0)), session("b", (3, 0.0, None))))
    sc = scenario(concurrency=1)
    from simmodel.rng import Streams
    from simmodel.finish import collect
    from simmodel.sim import build, run_until
    cluster = build(sc, Streams(0), wl)

    def canceller(env):
        yield env.timeout(30.5)
        cluster.driver.cancel(cluster.driver.requests[0])

    cluster.env.process(canceller(cluster.env))
    run_until(cluster.env, None)
    r = collect(sc, cluster, 0.0).requests.set_index(["session_id", "turn_index"])
    assert r.loc[("a", 0), "terminal_status"] == "cancelled"
    assert r.loc[("a", 0), "terminal_time_ms"] == pytest.approx(31.0)
    assert r.loc[("a", 1), "terminal_status"] == "cancelled"
    assert r.loc[("b", 0), "arrival_time_ms"] == pytest.approx(31.0)
    assert r.loc[("b", 0), "terminal_status"] == "completed"


# -- invariants over random session sets and DAGs ---------------------------------------------

@st.composite
def session_sets(draw):
    n = draw(st.integers(1, 6))
    sessions = []
    for i in range(n):
        k = draw(st.integers(1, 3))
        turns = []
        for j in range(k):
            turns.append(Turn(f"s{i}", j, prompt(draw(st.integers(1, 3000))),
                              draw(st.integers(1, 40)),
                              arrival_ms=draw(st.floats(0, 200)) if j == 0 else None,
                              delay_ms=draw(st.floats(0, 50)) if j else None))
        sessions.append(Session(f"s{i}", tuple(turns)))
    return sessions


@settings(max_examples=40, deadline=None)
@given(session_sets(), st.sampled_from([None, 1, 2, 100]), st.integers(1, 3),
       st.sampled_from([60, 400]))
def test_sessions_drain_and_respect_turn_order(sessions, concurrency, workers, blocks):
    sc = scenario(workers=workers, concurrency=concurrency, fixed=False, num_gpu_blocks=blocks,
                  max_model_len=3500)
    r = run(sc, sessions)
    assert len(r) == sum(len(s.turns) for s in sessions)
    assert set(r["terminal_status"]) <= {"completed", "rejected"}
    for s in sessions:
        for k in range(1, len(s.turns)):
            prev = r.loc[(s.session_id, k - 1)]
            cur = r.loc[(s.session_id, k)]
            assert cur["arrival_time_ms"] >= prev["terminal_time_ms"] + s.turns[k].delay_ms - 1e-9


@st.composite
def dags(draw):
    n = draw(st.integers(1, 8))
    nodes = []
    for i in range(n):
        parents = draw(st.lists(st.integers(0, i - 1), unique=True, max_size=3)) if i else []
        deps = tuple(Dependency(f"n{p}", draw(st.sampled_from(["completion", "dispatch"])),
                                draw(st.floats(0, 20))) for p in parents)
        nodes.append(Session(f"n{i}", (Turn(f"n{i}", 0, prompt(draw(st.integers(1, 2500))),
                                            draw(st.integers(1, 20)),
                                            arrival_ms=draw(st.floats(0, 50)),
                                            request_id=f"n{i}", play_id="p", deps=deps),)))
    return nodes


@settings(max_examples=40, deadline=None)
@given(dags(), st.integers(1, 2))
def test_dags_drain_and_release_after_dependencies(nodes, workers):
    sc = scenario(workers=workers, fixed=False, max_model_len=2000)
    r = run(sc, nodes, kind="agentic")
    assert len(r) == len(nodes)
    assert set(r["terminal_status"]) <= {"completed", "rejected"}
    for s in nodes:
        t = s.turns[0]
        me = r.loc[(t.session_id, 0)]
        assert me["arrival_time_ms"] >= t.arrival_ms - 1e-9
        for d in t.deps:
            parent = r.loc[(d.request_id, 0)]
            at = parent["arrival_time_ms"] if d.trigger == "dispatch" else parent["terminal_time_ms"]
            assert me["arrival_time_ms"] >= at + d.delay_ms - 1e-9
