"""Unit tier: the Weka agentic-session reader, on small hand-written conversations.

Times in the files are seconds; the workload's are ms.  Every expected dependency below is
(request it waits for, trigger, delay ms), computed by hand from the rules in
``simmodel.workload.weka`` (each checked against the reference replay).
"""
from __future__ import annotations

import json
import os

import pytest

import simmodel
from simmodel.config import (ClusterConfig, EngineConfig, Scenario, TimingConfig,
                             WorkloadConfig)
from simmodel.errors import UserError
from simmodel.rng import Streams
from simmodel.scenario import scenario_from_dict
from simmodel.workload import build_workload
from simmodel.workload.weka import read_weka

SHARED = "/work/shared/traces/weka"


def req(t, inp, hashes, api=0.0, out=10, **extra) -> dict:
    r = {"t": t, "type": "n", "model": "m", "in": inp, "out": out, "hash_ids": list(hashes),
         "api_time": api, "think_time": 0.0}
    r.update(extra)
    return r


def sub(t, agent, duration_ms, *requests, **extra) -> dict:
    s = {"type": "subagent", "t": t, "agent_id": agent, "duration_ms": duration_ms,
         "status": "completed", "requests": list(requests)}
    s.update(extra)
    return s


def conv(*entries, cid="c", block_size=64, **extra) -> dict:
    c = {"id": cid, "models": ["m"], "block_size": block_size, "hash_id_scope": "local",
         "requests": list(entries)}
    c.update(extra)
    return c


def write(tmp_path, doc, name="c.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def nodes(w):
    """request id (without the conversation prefix) -> its turn."""
    return {s.turns[0].request_id.split(":", 1)[1]: s.turns[0] for s in w.sessions}


def deps(turn):
    return [(d.request_id.split(":", 1)[1], d.trigger, d.delay_ms) for d in turn.deps]


# --- a parent chain ------------------------------------------------------------------


def test_chain_waits_for_the_previous_request_plus_the_recorded_gap(tmp_path):
    # r0 [0, 2 s], r1 [5, 6 s] continues r0, r2 at 10 s continues r1.  Delay = t_k - t_{k-1}
    # - api_{k-1} (think_time is ignored, as by the reference): 5 - 0 - 2 = 3 s, 10 - 5 - 1
    # = 4 s; not_before = t.
    path = write(tmp_path, conv(req(0, 128, [1, 2], api=2.0), req(5, 192, [1, 2, 3], api=1.0),
                                req(10, 256, [1, 2, 3, 4], think_time=99.0)))
    w = read_weka(path)
    n = nodes(w)
    assert w.kind == "agentic" and list(n) == ["outer:0", "outer:1", "outer:2"]
    assert [(t.arrival_ms, deps(t)) for t in n.values()] == [
        (0.0, []),
        (5000.0, [("outer:0", "completion", 3000.0)]),
        (10000.0, [("outer:1", "completion", 4000.0)])]
    assert [(t.session_id, t.turn_index, t.play_id) for t in n.values()] == [
        ("c:root", 0, "c"), ("c:root", 1, "c"), ("c:root", 2, "c")]
    assert [s.session_id for s in w.sessions] == ["c:outer:0", "c:outer:1", "c:outer:2"]


def test_times_start_at_zero_and_speedup_divides_them(tmp_path):
    # first request at t = 3 s -> 0; r1 at 5 s -> 2000 ms; gap 5 - 3 - 0.5 = 1.5 s.  / 2
    path = write(tmp_path, conv(req(3, 64, [1], api=0.5), req(5, 128, [1, 2])))
    n = nodes(read_weka(path, arrival_speedup_ratio=2.0))
    assert [(t.arrival_ms, deps(t)) for t in n.values()] == [
        (0.0, []), (1000.0, [("outer:0", "completion", 750.0)])]


def test_think_time_cap_caps_delays_and_removes_the_idle_time(tmp_path):
    # r0 [0, 2 s]; r1 at 100 s (gap 98 s) [100, 101 s]; r2 at 110 s (gap 9 s).  Cap 5 s:
    # r1 delay 5 s, not_before 0 + 2 + 5 = 7 s; r2 delay 5 s, not_before 7 + 1 + 5 = 13 s.
    path = write(tmp_path, conv(req(0, 64, [1], api=2.0), req(100, 128, [1, 2], api=1.0),
                                req(110, 192, [1, 2, 3])))
    n = nodes(read_weka(path, think_time_cap_ms=5000.0))
    assert [(t.arrival_ms, deps(t)) for t in n.values()] == [
        (0.0, []), (7000.0, [("outer:0", "completion", 5000.0)]),
        (13000.0, [("outer:1", "completion", 5000.0)])]
    # a cap above every gap changes nothing
    n = nodes(read_weka(path, think_time_cap_ms=1e9))
    assert [t.arrival_ms for t in n.values()] == [0.0, 100000.0, 110000.0]


# --- streams: overlaps and side requests ---------------------------------------------


def test_request_started_while_its_parent_ran_waits_for_its_dispatch(tmp_path):
    # r0 runs [0, 5 s]; r1 continues it but starts at 1 s: a new worker stream that waits
    # for r0's dispatch + 1 s (not its completion).
    path = write(tmp_path, conv(req(0, 64, [1], api=5.0), req(1, 128, [1, 2])))
    t = nodes(read_weka(path))["outer:1"]
    assert (t.session_id, t.turn_index, t.arrival_ms) == ("c:root:worker:0", 0, 1000.0)
    assert deps(t) == [("outer:0", "dispatch", 1000.0)]


def test_side_request_runs_in_a_worker_stream(tmp_path):
    # r0 [0, 1 s] [1, 2]; r1 at 2 s shares nothing (a side request): worker stream, waits
    # for the latest request that ended before it (r0) with no delay; r2 at 4 s continues
    # r0 (delay 4 - 0 - 1 = 3 s) and also waits for r1, the latest to end before it (at 2 s).
    path = write(tmp_path, conv(req(0, 128, [1, 2], api=1.0), req(2, 64, [9]),
                                req(4, 192, [1, 2, 3])))
    n = nodes(read_weka(path))
    assert [(t.session_id, t.turn_index, deps(t)) for t in n.values()] == [
        ("c:root", 0, []),
        ("c:root:worker:0", 0, [("outer:0", "completion", 0.0)]),
        ("c:root", 1, [("outer:0", "completion", 3000.0), ("outer:1", "completion", 0.0)])]


def test_second_request_continues_a_first_request_nobody_continues(tmp_path):
    # r0 [0, 3 s] shares no block with any later request: r1 (at 1 s, fresh) continues it
    # anyway, on completion, delay max(0, 1 - 3) = 0.
    path = write(tmp_path, conv(req(0, 64, [1], api=3.0), req(1, 64, [5])))
    t = nodes(read_weka(path))["outer:1"]
    assert (t.session_id, t.turn_index, deps(t)) == ("c:root", 1, [("outer:0", "completion", 0.0)])


# --- subagents -----------------------------------------------------------------------


def subagent_conv(**sub_extra):
    # r0 [0, 2 s]; subagent at 3 s for 5 s (ends 8 s) with i0 [3, 4 s], i1 [5, 6 s] (times
    # relative to the marker); r2 at 7 s (before the end: no join); r3 at 9 s joins.
    return conv(req(0, 128, [1, 2], api=2.0),
                sub(3, "ag", 5000, req(0, 64, [50], api=1.0), req(2, 128, [50, 51], api=1.0),
                    **sub_extra),
                req(7, 192, [1, 2, 3]), req(9, 256, [1, 2, 3, 4]))


def test_subagent_starts_after_its_spawner_and_is_joined_after_its_duration(tmp_path):
    n = nodes(read_weka(write(tmp_path, subagent_conv())))
    assert list(n) == ["outer:0", "outer:1:inner:0", "outer:1:inner:1", "outer:2", "outer:3"]
    got = {k: (t.session_id, t.turn_index, t.arrival_ms, deps(t)) for k, t in n.items()}
    assert got["outer:1:inner:0"] == ("c:subagent:1:ag", 0, 3000.0,
                                      [("outer:0", "completion", 1000.0)])      # 3 - 2
    assert got["outer:1:inner:1"] == ("c:subagent:1:ag", 1, 5000.0,
                                      [("outer:1:inner:0", "completion", 1000.0)])  # 5 - 4
    assert got["outer:2"] == ("c:root", 1, 7000.0, [("outer:0", "completion", 5000.0)])
    assert got["outer:3"] == ("c:root", 2, 9000.0, [("outer:2", "completion", 2000.0),
                                                    ("outer:1:inner:1", "completion", 3000.0)])


def test_subagent_ending_after_the_last_parent_request_is_never_joined(tmp_path):
    doc = subagent_conv()
    doc["requests"][1]["duration_ms"] = 60000
    n = nodes(read_weka(write(tmp_path, doc)))
    assert deps(n["outer:3"]) == [("outer:2", "completion", 2000.0)]


def test_nested_timestamp_basis(tmp_path):
    # inner t 3 and 5 are never below the marker's 3: auto reads them as absolute, which
    # gives the same times as the relative 0 and 2 above.
    doc = subagent_conv()
    for r, t in zip(doc["requests"][1]["requests"], (3, 5)):
        r["t"] = t
    path = write(tmp_path, doc)
    n = nodes(read_weka(path))
    assert [n[k].arrival_ms for k in ("outer:1:inner:0", "outer:1:inner:1")] == [3000.0, 5000.0]
    n = nodes(read_weka(path, nested_timestamp_basis="relative"))
    assert [n[k].arrival_ms for k in ("outer:1:inner:0", "outer:1:inner:1")] == [6000.0, 8000.0]
    with pytest.raises(UserError, match=r"requests\[1\]\.requests\[0\]\.t: 0 s is before its "
                                        r"subagent's t 3 s \(absolute timestamps\)"):
        read_weka(write(tmp_path, subagent_conv(), "r.json"), nested_timestamp_basis="absolute")


# --- tokens --------------------------------------------------------------------------


def test_hash_ids_cover_full_blocks_and_the_tail_gets_a_fresh_id(tmp_path):
    # block_size 4.  r0: 10 tokens, [7, 3] -> 7:0, 3:1, tail 2 -> (0, 1, 2).
    # r1: 8 tokens, [7, 3, 9] -> only 2 full blocks, 9 ignored -> (0, 1).
    # r2: 13 tokens, [7] -> 3 full blocks + tail: 7:0 then fresh 3, 4, 5.
    path = write(tmp_path, conv(req(0, 10, [7, 3]), req(1, 8, [7, 3, 9]), req(2, 13, [7]),
                                block_size=4))
    w = read_weka(path)
    assert [(t.prompt.ids, t.prompt.run_len, t.prompt.length) for t in nodes(w).values()] == [
        ((0, 1, 2), 4, 10), ((0, 1), 4, 8), ((0, 3, 4, 5), 4, 13)]
    assert w.meta["unique_hash_ids"] == 6


def test_folder_reads_files_in_name_order_with_local_hash_ids(tmp_path):
    # both files use hash id 7; b's is another block.  notes.txt is ignored.
    write(tmp_path, conv(req(0, 64, [7]), cid="b"), "b.json")
    write(tmp_path, conv(req(0, 64, [7]), req(1, 64, [7]), cid="a"), "a.json")
    (tmp_path / "notes.txt").write_text("not a trace")
    w = read_weka(str(tmp_path))
    assert [(s.turns[0].request_id, s.turns[0].play_id, s.turns[0].prompt.ids)
            for s in w.sessions] == [("a:outer:0", "a", (0,)), ("a:outer:1", "a", (0,)),
                                     ("b:outer:0", "b", (1,))]
    assert w.meta["conversations"] == 2


def test_jsonl_file_holds_one_conversation_per_line(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text(json.dumps(conv(req(0, 64, [1]), cid="x")) + "\n\n"
                    + json.dumps(conv(req(0, 64, [1]), cid="y")) + "\n")
    w = read_weka(str(path))
    assert [s.turns[0].request_id for s in w.sessions] == ["x:outer:0", "y:outer:0"]


# --- errors --------------------------------------------------------------------------


@pytest.mark.parametrize("doc, message", [
    (conv(req(0, 64, [1], out=0)), r"c.json: requests\[0\]\.out: must be >= 1, got 0"),
    (conv({"t": 0, "type": "n", "out": 1, "hash_ids": [], "api_time": 0}),
     r"c.json: requests\[0\]: missing required field in"),
    (conv(req(0, 64, [1, -2])), r"requests\[0\]\.hash_ids\[1\]: must be an integer >= 0"),
    (conv(req(0, 64, [1], api=float("nan"))),
     r"requests\[0\]\.api_time: must be a number, got nan"),
    (conv(sub(0, "ag", 10, req(0, 64, [1]))),
     r"requests\[0\]: subagent marker without a preceding parent request"),
    (conv(req(0, 64, [1]), sub(1, "ag", 10, req(0, 64, [1]), status="failed")),
     r"requests\[1\]\.status: only completed subagents can be replayed, got 'failed'"),
    (conv(req(0, 64, [1]), sub(1, "ag", 10)),
     r"requests\[1\]\.requests: must be a non-empty list"),
    (conv(req(0, 64, [1]), sub(1, "ag", 10, sub(0, "inner", 5, req(0, 64, [1])))),
     r"requests\[1\]\.requests\[0\]\.type: must be 'n' or 's' inside a subagent"),
    (conv(dict(req(0, 64, [1]), type="x")), r"requests\[0\]\.type: must be 'n', 's' or "),
    (conv(req(0, 64, [1]), hash_id_scope="global"), r"hash_id_scope: must be 'local'"),
    (conv(), r"c.json: requests: no requests"),
    ([1, 2], r"c.json: expected a JSON object"),
])
def test_mistakes_name_file_and_json_path(tmp_path, doc, message):
    path = write(tmp_path, doc)
    with pytest.raises(UserError, match=message):
        read_weka(path)


def test_file_level_mistakes(tmp_path):
    with pytest.raises(UserError, match="nope.json: file not found"):
        read_weka(str(tmp_path / "nope.json"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="empty: folder holds no .json or .jsonl file"):
        read_weka(str(tmp_path / "empty"))
    (tmp_path / "bad.json").write_text('{"id": "c",\n "requests": [}')
    with pytest.raises(UserError, match=r"bad.json:2: malformed JSON"):
        read_weka(str(tmp_path / "bad.json"))
    dup = tmp_path / "dup"
    dup.mkdir()
    write(dup, conv(req(0, 64, [1])), "a.json")
    write(dup, conv(req(0, 64, [1])), "b.json")
    with pytest.raises(UserError, match=r"b.json: conversation id 'c' already used by .*a.json"):
        read_weka(str(dup))


# --- scenario and driver -------------------------------------------------------------


def test_scenario_trace_may_name_a_folder_for_weka_only(tmp_path):
    (tmp_path / "corpus").mkdir()
    write(tmp_path / "corpus", conv(req(0, 64, [1])))
    sc = scenario_from_dict({"workload": {"trace": "corpus", "format": "weka"}},
                            base_dir=str(tmp_path), source="s.yaml")
    assert sc.workload.trace == str(tmp_path / "corpus")
    with pytest.raises(UserError, match="s.yaml: workload.trace: not a file: "):
        scenario_from_dict({"workload": {"trace": "corpus", "format": "mooncake"}},
                           base_dir=str(tmp_path), source="s.yaml")
    with pytest.raises(UserError, match="s.yaml: workload.trace: file not found: "):
        scenario_from_dict({"workload": {"trace": "missing", "format": "weka"}},
                           base_dir=str(tmp_path), source="s.yaml")


def test_build_and_run_a_weka_workload(tmp_path):
    # Fixed timing: a pass costs 10 ms with prompt tokens + 1 ms with decodes.  r0 (3 output
    # tokens) ends at 12 ms; r1 (t = 1 ms after r0, api 0) is released at 12 + 1 = 13 ms.
    path = write(tmp_path, conv(req(0, 64, [1], out=3), req(0.001, 128, [1, 2], out=3)))
    cfg = WorkloadConfig(trace=path, format="weka", think_time_cap_ms=60000.0)
    w = build_workload(cfg, engine_block_size=16, streams=Streams(0))
    assert w.meta["think_time_cap_ms"] == 60000.0
    sc = Scenario(workload=WorkloadConfig(trace=path, format="weka"),
                  cluster=ClusterConfig(engine=EngineConfig(
                      timing_model=TimingConfig(type="fixed", prefill_ms=10.0, decode_ms=1.0))))
    r = simmodel.run(sc).requests.set_index("request_id")
    assert r.loc["c:outer:0", "terminal_time_ms"] == pytest.approx(12.0)
    assert r.loc["c:outer:1", "arrival_time_ms"] == pytest.approx(13.0)
    assert r.loc["c:outer:1", "play_id"] == "c"


# --- the published traces ------------------------------------------------------------

shared = pytest.mark.skipif(not os.path.isdir(SHARED), reason=f"{SHARED} not present")


@shared
def test_shared_weka_traces_read():
    counts = {}
    for name in sorted(os.listdir(SHARED)):
        w = read_weka(os.path.join(SHARED, name))
        counts[name] = w.num_requests
    assert counts == {"trace_0016.json": 12, "trace_0032.json": 3, "trace_0274.json": 105,
                      "trace_0277.json": 53, "trace_0291.json": 32}
    assert read_weka(SHARED).num_requests == 205


@shared
def test_shared_weka_dependencies_match_the_reference():
    # Numbers read off the reference's per-request times (see the module doc of weka.py).
    n = nodes(read_weka(f"{SHARED}/trace_0032.json"))
    assert deps(n["outer:1"]) == [("outer:0", "completion", pytest.approx(91410.0))]  # 164-72.59
    n = nodes(read_weka(f"{SHARED}/trace_0277.json"))
    # outer:11 (t 763) joins agent_002 (183.906 + 116 + 45.59 = 345.496 s) and agent_003;
    # agent_004 (ends 1061.5 s) is never joined.
    d = dict(((k, trig), delay) for k, trig, delay in deps(n["outer:11"]))
    assert d[("outer:2:inner:11", "completion")] == pytest.approx(417504.0)
    assert ("outer:10:inner:10", "completion") not in d
    assert deps(n["outer:1:inner:0"]) == [("outer:0", "completion", pytest.approx(60444.0))]
    n = nodes(read_weka(f"{SHARED}/trace_0291.json"))
    # outer:18 (t 1209) joins agent_001 (1148.013 + 20 + 24.84 = 1192.853 s): 16.147 s
    assert ("outer:16:inner:4", "completion", pytest.approx(16147.0)) in deps(n["outer:18"])


@shared
def test_shared_weka_trace_end_to_end_matches_the_reference():
    # dynamo 1.6.1, trace_format="weka", default vLLM engine, 1 worker: arrival times.
    sc = Scenario(workload=WorkloadConfig(trace=f"{SHARED}/trace_0032.json", format="weka"))
    r = simmodel.run(sc).requests.set_index("request_id")
    assert list(r["arrival_time_ms"]) == pytest.approx(
        [0.0, 168709.19474800004, 188320.59451300005], rel=1e-9)
    assert r.loc["trace_0032:outer:2", "terminal_time_ms"] == pytest.approx(194650.40062, rel=1e-9)


def test_shipped_scenario_copy_loads():
    from simmodel.scenario import load_scenario
    here = os.path.join(os.path.dirname(__file__), "..", "..", "scenarios", "weka_agentic.yaml")
    sc = load_scenario(here)
    w = build_workload(sc.workload, engine_block_size=64, streams=Streams(0))
    assert w.num_requests == 68 and w.meta["conversations"] == 3
