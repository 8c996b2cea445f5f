"""Unit tier: the agentic Mooncake reader (reference §7.3), v2 and legacy forms, on small
hand-written traces; plus two whole runs (fixed timing by hand, and the reference's own
e2e fixture with the times ai-dynamo-runtime 1.6.1 reports for it)."""
from __future__ import annotations

import json

import pytest

import simmodel
from simmodel.config import WorkloadConfig
from simmodel.errors import UserError
from simmodel.rng import Streams
from simmodel.scenario import scenario_from_dict
from simmodel.workload import Prompt, build_workload
from simmodel.workload.agentic import read_agentic
from simmodel.workload.model import Dependency

HEADER = {"schema": "dynamo.agentic_mooncake", "version": 2, "block_size": 4,
          "hash_id_scope": "local", "source": {"format": "test", "digest": "d0"}}


def write_trace(tmp_path, lines, name="trace.jsonl") -> str:
    """One line per item: dicts as JSON, strings verbatim; returns the path."""
    path = tmp_path / name
    path.write_text("".join((json.dumps(x) if isinstance(x, dict) else x) + "\n" for x in lines))
    return str(path)


def dep(rid, trigger="completion", delay=0, relation="spawn") -> dict:
    return {"request_id": rid, "trigger": trigger, "delay_ms": delay, "relation": relation}


def node(rid, *deps, play="p", session=None, nb=0, hash_ids=None, inp=4, out=2, **extra) -> dict:
    r = {"request_id": rid, "play_id": play, "session_id": session or f"s-{rid}",
         "model": "tiny-model", "input_length": inp, "output_length": out,
         "hash_ids": list(hash_ids) if hash_ids is not None else [sum(map(ord, rid))],
         "not_before_ms": nb, "dependencies": list(deps)}
    r.update(extra)
    return {k: v for k, v in r.items() if v is not None}


def legacy(rid, ts=None, wait_for=None, hash_ids=(1,), out=2, **extra) -> dict:
    r = {"request_id": rid, "hash_ids": list(hash_ids), "output_length": out}
    if ts is not None:
        r["timestamp"] = ts
    if wait_for is not None:
        r["wait_for"] = wait_for if isinstance(wait_for, str) else list(wait_for)
    r.update(extra)
    return r


def turns(w):
    return {s.turns[0].request_id: s.turns[0] for s in w.sessions}


def read(tmp_path, lines, **kw):
    return read_agentic(write_trace(tmp_path, lines), **kw)


# --- v2 ---------------------------------------------------------------------------------


def test_v2_nodes_become_one_turn_sessions(tmp_path):
    # the reference's e2e fixture: root, a dispatch-spawned child, a join on the root session
    w = read(tmp_path, [
        HEADER,
        node("root", session="main", hash_ids=[301]),
        node("child", dep("root", "dispatch", 5), session="side", hash_ids=[302]),
        node("join", dep("root", "completion", 1, "sequence"),
             dep("child", "completion", 1, "join"), session="main", hash_ids=[303]),
    ])
    assert w.kind == "agentic" and w.prompt_mode == "full"
    assert [s.session_id for s in w.sessions] == ["root", "child", "join"]
    assert all(len(s.turns) == 1 for s in w.sessions)
    t = turns(w)
    assert [(x.session_id, x.turn_index) for x in t.values()] == [
        ("main", 0), ("side", 0), ("main", 1)]
    assert {x.play_id for x in t.values()} == {"p"}
    assert t["root"].deps == ()
    assert t["child"].deps == (Dependency("root", "dispatch", 5.0),)
    assert t["join"].deps == (Dependency("root", "completion", 1.0),
                              Dependency("child", "completion", 1.0))
    assert [x.line for x in t.values()] == [2, 3, 4]
    assert t["root"].prompt == Prompt((0,), 4, 4)
    assert w.meta["models"] == ["tiny-model"]
    assert w.meta["source"] == {"format": "test", "digest": "d0"}
    assert w.meta["trace_block_size"] == 4 and w.meta["plays"] == 1


def test_v2_header_block_size_wins_over_trace_block_size(tmp_path):
    w = read(tmp_path, [HEADER, node("a", inp=7, hash_ids=[9, 8])], trace_block_size=512)
    assert turns(w)["a"].prompt == Prompt((0, 1), 4, 7)          # partial last block


def test_v2_hash_ids_renumbered_over_the_whole_file(tmp_path):
    # shared across plays too (the reference reuses a block of another play's prompt)
    w = read(tmp_path, [HEADER,
                        node("a", play="p", inp=8, hash_ids=[7, 3]),
                        node("b", play="q", inp=8, hash_ids=[7, 9])])
    t = turns(w)
    assert t["a"].prompt.ids == (0, 1) and t["b"].prompt.ids == (0, 2)
    assert w.meta["unique_hash_ids"] == 3 and w.meta["plays"] == 2


def test_v2_not_before_shifted_by_the_earliest_row(tmp_path):
    # Reference: the earliest not_before_ms of ALL rows becomes 0, dependents included
    # (root at 1000, dependent with not_before 0 -> root arrives at 1000).
    w = read(tmp_path, [HEADER, node("a", nb=1000), node("b", dep("a", delay=5), nb=0)])
    t = turns(w)
    assert (t["a"].arrival_ms, t["b"].arrival_ms) == (1000.0, 0.0)
    w = read(tmp_path, [HEADER, node("a", nb=1000), node("b", nb=1500.5)])
    t = turns(w)
    assert (t["a"].arrival_ms, t["b"].arrival_ms) == (0.0, 500.5)


def test_v2_speedup_divides_not_before_and_delays(tmp_path):
    # reference: a 1000, b 5000 (+100 after a), c 0 (+100 after a); ratio 2
    w = read(tmp_path, [HEADER, node("a", nb=1000), node("b", dep("a", delay=100), nb=5000),
                        node("c", dep("a", delay=100), nb=0)], arrival_speedup_ratio=2)
    t = turns(w)
    assert [t[k].arrival_ms for k in "abc"] == [500.0, 2500.0, 0.0]
    assert t["b"].deps[0].delay_ms == 50.0


def test_v2_optional_and_ignored_fields(tmp_path):
    r = node("a", out=None, inp=None, output_tokens=3, input_tokens=4,
             output_token_ids=[5, 6, 7], extra_field={"x": 1})
    del r["dependencies"]                                   # optional (default: none)
    w = read(tmp_path, [{**HEADER, "extra": 1}, "", r, "   ",
                        node("b", dep("a", relation="replay_barrier"), tool="x")])
    t = turns(w)
    assert (t["a"].input_length, t["a"].output_length) == (4, 3)
    assert t["a"].output_token_ids == (5, 6, 7)
    assert t["b"].line == 5 and t["b"].deps == (Dependency("a", "completion", 0.0),)


def test_v2_forward_references_and_repeated_dependencies(tmp_path):
    # a dependency may name a later row; the same predecessor twice keeps both delays
    w = read(tmp_path, [HEADER, node("b", dep("a", delay=1), dep("a", delay=3)), node("a")])
    assert [d.delay_ms for d in turns(w)["b"].deps] == [1.0, 3.0]


def test_v2_turn_index_counts_rows_of_a_session_in_file_order(tmp_path):
    w = read(tmp_path, [HEADER, node("a", session="s"), node("b", session="t"),
                        node("c", dep("a"), session="s", play="p"),
                        node("d", session="s", play="q")])
    t = turns(w)
    assert [(t[k].session_id, t[k].turn_index) for k in "abcd"] == [
        ("s", 0), ("t", 0), ("s", 1), ("s", 2)]


# --- legacy -----------------------------------------------------------------------------


def test_legacy_rows(tmp_path):
    w = read(tmp_path, [
        legacy("a", ts=1000, session_id="s1", hash_ids=[5, 6], input_length=600),
        legacy("b", ts=1000, wait_for=["a"], session_id="s2", delay=5, tool_wait_ms=3),
        legacy("c", ts=3000, hash_ids=[5]),
        legacy("d", wait_for=["a", "c"], delay_ms=2, prefix_reset=True, session_id="s1"),
        legacy(7, ts=4000, session_id=9),
    ])
    assert w.kind == "agentic" and w.meta["format"] == "agentic"
    t = turns(w)
    assert t["a"].prompt == Prompt((0, 1), 512, 600)
    assert t["c"].prompt == Prompt((0,), 512, 512)          # input_length defaults to capacity
    # every wait_for id is a completion dependency with delay + tool_wait_ms
    assert t["b"].deps == (Dependency("a", "completion", 8.0),)
    assert t["d"].deps == (Dependency("a", "completion", 2.0), Dependency("c", "completion", 2.0))
    # roots start at their timestamps (earliest -> 0); dependents have no start time
    assert [t[k].arrival_ms for k in ("a", "b", "c", "d", "7")] == [0.0, 0.0, 2000.0, 0.0, 3000.0]
    assert [(t[k].session_id, t[k].turn_index) for k in ("a", "b", "c", "d", "7")] == [
        ("s1", 0), ("s2", 0), ("request_3", 0), ("s1", 1), ("9", 0)]
    # plays: connected components, in order of their first rows
    assert [t[k].play_id for k in ("a", "b", "c", "d", "7")] == [
        "play_0", "play_0", "play_0", "play_0", "play_1"]
    assert w.meta["plays"] == 2


def test_legacy_speedup_and_trace_block_size(tmp_path):
    w = read(tmp_path, [legacy("a", ts=100, hash_ids=[1, 2]),
                        legacy("b", ts=300, wait_for=["a"], delay=10)],
             trace_block_size=16, arrival_speedup_ratio=4)
    t = turns(w)
    assert t["a"].prompt == Prompt((0, 1), 16, 32)
    assert t["b"].deps[0].delay_ms == 2.5 and t["b"].arrival_ms == 0.0


def test_legacy_play_components_join_through_later_rows(tmp_path):
    # x and y start apart and are joined by z: one play
    w = read(tmp_path, [legacy("x", ts=0), legacy("y", ts=0), legacy("w", ts=0),
                        legacy("z", wait_for=["y", "x"])])
    assert [turns(w)[k].play_id for k in "xywz"] == ["play_0", "play_0", "play_1", "play_0"]


# --- validation: one line, naming file and line -------------------------------------------

ROOT = node("a")

V2_ERRORS = [
    # (lines, line number, message fragment)
    ([{**HEADER, "schema": "x"}, ROOT], 1, "header schema must be 'dynamo.agentic_mooncake'"),
    ([{**HEADER, "version": 1}, ROOT], 1, "unsupported agentic Mooncake version 1; expected 2"),
    ([{**HEADER, "block_size": 0}, ROOT], 1, "block_size must be a positive integer"),
    ([{**HEADER, "hash_id_scope": "global"}, ROOT], 1, "hash_id_scope must be 'local'"),
    ([{k: v for k, v in HEADER.items() if k != "source"}, ROOT], 1, "header source must be"),
    ([{**HEADER, "source": {"format": "", "digest": "d"}}, ROOT], 1, "source.format"),
    ([HEADER, "{nope"], 2, "malformed JSON"),
    ([HEADER, "[1]"], 2, "expected a JSON object, got list"),
    ([HEADER, node("a", nb=None)], 2, "missing required field not_before_ms"),
    ([HEADER, node("a", nb=-5)], 2, "not_before_ms must be >= 0"),
    ([HEADER, node("a", play=None)], 2, "missing required field play_id"),
    ([HEADER, node("a", play="")], 2, "play_id must be a non-empty string"),
    ([HEADER, node("a", session=7)], 2, "session_id must be a non-empty string, got 7"),
    ([HEADER, node("a", model="")], 2, "model must be a non-empty string"),
    ([HEADER, {k: v for k, v in ROOT.items() if k != "model"}], 2, "missing required field model"),
    ([HEADER, node("", )], 2, "request_id must be a non-empty string"),
    ([HEADER, node("a", inp=None)], 2, "missing required field input_length"),
    ([HEADER, node("a", inp=0)], 2, "input_length must be >= 1"),
    ([HEADER, node("a", inp=5, hash_ids=[1])], 2,
     "input_length 5 at block_size 4 needs exactly 2 hash_ids, got 1"),
    ([HEADER, node("a", inp=4, hash_ids=[1, 2])], 2, "needs exactly 1 hash_ids, got 2"),
    ([HEADER, node("a", hash_ids=[])], 2, "hash_ids must not be empty"),
    ([HEADER, node("a", hash_ids=[-1])], 2, "hash_ids[0] must be >= 0"),
    ([HEADER, node("a", out=0)], 2, "output_length must be >= 1"),
    ([HEADER, node("a", out=None)], 2, "missing required field output_length"),
    ([HEADER, node("a", output_token_ids=[1])], 2, "output_token_ids has 1 ids but output_length is 2"),
    ([HEADER, ROOT, node("b", dep("a", "finish"))], 3,
     "dependencies[0].trigger must be one of completion, dispatch; got 'finish'"),
    ([HEADER, ROOT, node("b", dep("a", relation="fork"))], 3,
     "dependencies[0].relation must be one of spawn, sequence, join, replay_barrier; got 'fork'"),
    ([HEADER, ROOT, node("b", dep("a", "dispatch", relation="join"))], 3,
     "a join dependency cannot use trigger dispatch (only spawn can)"),
    ([HEADER, ROOT, node("b", dep("a", "dispatch", relation="sequence"))], 3,
     "a sequence dependency cannot use trigger dispatch"),
    ([HEADER, ROOT, node("b", dep("a", "dispatch", relation="replay_barrier"))], 3,
     "a replay_barrier dependency cannot use trigger dispatch"),
    ([HEADER, ROOT, node("b", {"request_id": "a", "trigger": "completion", "relation": "spawn"})],
     3, "dependencies[0] is missing delay_ms"),
    ([HEADER, ROOT, node("b", dep("a", delay=-1))], 3, "dependencies[0].delay_ms must be >= 0"),
    ([HEADER, ROOT, node("b", dependencies={"a": 1})], 3, "dependencies must be a list"),
    ([HEADER, ROOT, node("b", dependencies=["a"])], 3, "dependencies[0] must be an object"),
    ([HEADER, ROOT, node("b", dep("b"))], 3, "request 'b' depends on itself (dependencies[0])"),
    ([HEADER, ROOT, node("b"), node("a")], 4, "duplicate request_id 'a' (first on line 2)"),
    ([HEADER, ROOT, node("b", dep("zz"))], 3, "request 'b' depends on unknown request_id 'zz'"),
    ([HEADER, ROOT, node("b", dep("a"), play="q")], 3,
     "request 'b' in play 'q' depends on 'a' (line 2) in play 'p'"),
    ([HEADER, node("a", dep("c")), node("b", dep("a")), node("c", dep("b")), node("d", dep("c"))],
     2, "dependency cycle (each request waits for the next): 'a' -> 'c' -> 'b' -> 'a'"),
    ([ROOT], 1, "row has v2 field play_id but the file has no v2 header"),
    ([HEADER], None, "empty trace (no requests after the header)"),
    ([], None, "empty trace (no requests)"),
]


@pytest.mark.parametrize("lines,line,message", V2_ERRORS,
                         ids=[m.split("(")[0][:40] for _, _, m in V2_ERRORS])
def test_v2_errors(tmp_path, lines, line, message):
    path = write_trace(tmp_path, lines)
    with pytest.raises(UserError) as e:
        read_agentic(path)
    text = str(e.value)
    assert "\n" not in text
    assert text.startswith(f"{path}:{line}: " if line is not None else f"{path}: ")
    assert message in text


LEGACY_ERRORS = [
    ([legacy(None, ts=0)], 1, "missing required field request_id"),
    ([legacy("a")], 1, "missing timestamp (required on a row without wait_for)"),
    ([legacy("a", ts=0), legacy("b", wait_for=["a"], delay=1, delay_ms=2)], 2,
     "delay and delay_ms cannot both be set"),
    ([legacy("a", ts=0), legacy("b", wait_for=["a"], tool_wait_ms=-1)], 2,
     "tool_wait_ms must be >= 0"),
    ([legacy("a", ts=0), legacy("b", ts=0, wait_for="a")], 2, "wait_for must be a list"),
    ([legacy("a", ts=0), legacy("b", wait_for=["b"])], 2,
     "request 'b' depends on itself (wait_for[0])"),
    ([legacy("a", ts=0), legacy("b", wait_for=["q"])], 2,
     "request 'b' depends on unknown request_id 'q'"),
    ([legacy("a", ts=0), legacy("a", ts=1)], 2, "duplicate request_id 'a' (first on line 1)"),
    ([legacy("a", ts=0), legacy("b", wait_for=["c"]), legacy("c", wait_for=["b"])], 2,
     "dependency cycle (each request waits for the next): 'b' -> 'c' -> 'b'"),
    ([legacy("a", ts=0, input_length=513)], 1, "input_length 513 exceeds the 512 tokens"),
    ([legacy("a", ts=0, prefix_reset="yes")], 1, "prefix_reset must be true or false"),
    ([legacy("a", ts=0, output_length=0)], 1, "output_length must be >= 1"),
    ([legacy("a", ts=0), {"timestamp": 0, "hash_ids": [1], "output_length": 1}], 2,
     "missing required field request_id"),
]


@pytest.mark.parametrize("lines,line,message", LEGACY_ERRORS,
                         ids=[m.split("(")[0][:40] for _, _, m in LEGACY_ERRORS])
def test_legacy_errors(tmp_path, lines, line, message):
    path = write_trace(tmp_path, lines)
    with pytest.raises(UserError) as e:
        read_agentic(path)
    text = str(e.value)
    assert "\n" not in text
    assert text.startswith(f"{path}:{line}: ")
    assert message in text


def test_missing_file(tmp_path):
    with pytest.raises(UserError, match="file not found"):
        read_agentic(str(tmp_path / "nope.jsonl"))


@pytest.mark.parametrize("kw", [{"trace_block_size": 0}, {"arrival_speedup_ratio": 0}])
def test_bad_arguments(tmp_path, kw):
    with pytest.raises(ValueError):
        read(tmp_path, [HEADER, ROOT], **kw)


def test_build_workload_agentic(tmp_path):
    path = write_trace(tmp_path, [HEADER, node("a", nb=10), node("b", dep("a"), nb=30)])
    cfg = WorkloadConfig(trace=path, format="agentic", arrival_speedup_ratio=2)
    w = build_workload(cfg, engine_block_size=64, streams=Streams(0))
    assert w.kind == "agentic"
    assert [s.turns[0].arrival_ms for s in w.sessions] == [0.0, 10.0]


# --- whole runs -------------------------------------------------------------------------


def run_trace(tmp_path, lines, engine=None, **workload):
    path = write_trace(tmp_path, lines)
    data = {"workload": {"trace": path, "format": "agentic", **workload},
            "cluster": {"workers": 1, "engine": engine or {}}}
    res = simmodel.run(scenario_from_dict(data, base_dir=str(tmp_path), source="test"))
    return res.requests.set_index("request_id")


FIXED = {"timing_model": {"type": "fixed", "prefill_ms": 10.0, "decode_ms": 1.0}}


def test_run_release_times_fixed_timing(tmp_path):
    # fixed timing: a lone request of n tokens ends 10 + (n - 1) ms after it starts.
    # a at 0 (3 tokens) -> ends 12.  b: dispatch of a + 2 = 2, but not_before 50 -> 50.
    # c: completion of a + 5 = 17.  d joins b (ends 50+10+2 = 62) and c: 62 + 4 = 66.
    r = run_trace(tmp_path, [
        HEADER,
        node("a", out=3, nb=100, hash_ids=[1]),
        node("b", dep("a", "dispatch", 2), out=3, nb=150, hash_ids=[2]),
        node("c", dep("a", delay=5), out=3, nb=100, hash_ids=[3]),
        node("d", dep("b", delay=4, relation="join"), dep("c", delay=4, relation="join"),
             out=1, nb=100, hash_ids=[4]),
    ], engine=FIXED)
    assert r.loc["a", "terminal_time_ms"] == pytest.approx(12.0)
    assert r.loc["b", "arrival_time_ms"] == pytest.approx(50.0)
    assert r.loc["c", "arrival_time_ms"] == pytest.approx(17.0)
    assert r.loc["d", "arrival_time_ms"] == pytest.approx(66.0)
    assert set(r["play_id"]) == {"p"}


def test_run_matches_reference_on_its_e2e_fixture(tmp_path):
    # replay/tests/e2e/.../agentic-mooncake.jsonl; times reported by ai-dynamo-runtime 1.6.1
    # (trace_format='agentic_mooncake', default engine): the child arrives at 5.0
    # (dispatch + 5), the join at 45.604836 (child's end 44.604836 + 1).
    r = run_trace(tmp_path, [
        {**HEADER, "source": {"format": "e2e-fixture", "digest": "agentic-v1"}},
        node("agent-root", play="agent-play", session="root", hash_ids=[301]),
        node("agent-child", dep("agent-root", "dispatch", 5), play="agent-play",
             session="child", hash_ids=[302]),
        node("agent-join", dep("agent-root", "completion", 1, "sequence"),
             dep("agent-child", "completion", 1, "join"), play="agent-play", session="root",
             hash_ids=[303]),
    ])
    assert r.loc["agent-child", "arrival_time_ms"] == pytest.approx(5.0, abs=1e-6)
    assert r.loc["agent-child", "terminal_time_ms"] == pytest.approx(44.604836, abs=1e-6)
    assert r.loc["agent-join", "arrival_time_ms"] == pytest.approx(45.604836, abs=1e-6)
    assert r.loc["agent-join", "terminal_time_ms"] == pytest.approx(67.907254, abs=1e-6)


def test_benchmark_traces_parse():
    import os
    here = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "traces")
    w = read_agentic(os.path.join(here, "agentic_fanout.jsonl"))
    assert w.num_requests == 17 and w.meta["plays"] == 3
    triggers = {d.trigger for s in w.sessions for d in s.turns[0].deps}
    assert triggers == {"completion", "dispatch"}
