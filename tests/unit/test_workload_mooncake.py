"""Unit tier: the Mooncake JSONL reader (reference §7.1), on small hand-written traces."""
from __future__ import annotations

import json
import os

import pytest

from simmodel.config import WorkloadConfig
from simmodel.errors import UserError
from simmodel.rng import Streams
from simmodel.workload import Prompt, build_workload, read_mooncake

REAL_TRACE = "/work/shared/traces/mooncake/conversation_trace.jsonl"


def write_trace(tmp_path, lines, name="trace.jsonl") -> str:
    """Write one line per item: dicts as JSON, strings verbatim; returns the path."""
    path = tmp_path / name
    path.write_text("".join((json.dumps(x) if isinstance(x, dict) else x) + "\n" for x in lines))
    return str(path)


def row(ts=0, hash_ids=(1,), out=10, **extra) -> dict:
    r = {"timestamp": ts, "hash_ids": list(hash_ids), "output_length": out}
    if ts is None:
        del r["timestamp"]
    r.update(extra)
    return r


def turns(workload):
    return [t for s in workload.sessions for t in s.turns]


# --- token synthesis ----------------------------------------------------------------


def test_hash_ids_renumbered_by_first_appearance(tmp_path):
    # 7 is seen first (-> 0), then 3 (-> 1), then 9 (-> 2)
    path = write_trace(tmp_path, [row(hash_ids=[7, 3]), row(hash_ids=[7, 9])])
    w = read_mooncake(path)
    assert [t.prompt.ids for t in turns(w)] == [(0, 1), (0, 2)]
    assert w.meta["unique_hash_ids"] == 3


def test_hash_ids_beyond_64_bits_are_renumbered_like_any_other(tmp_path):
    # the ids are kept in a 64-bit array while they fit; the third row's id does not
    # (2**64), so the store becomes a list there, its earlier ids kept: 2**63 - 1 -> 0,
    # 5 -> 1, 2**64 -> 2, and 2**63 - 1 seen again -> 0
    big = 2 ** 64
    path = write_trace(tmp_path, [row(hash_ids=[2 ** 63 - 1]), row(hash_ids=[5]),
                                  row(hash_ids=[5, big, 2 ** 63 - 1])])
    w = read_mooncake(path)
    assert [t.prompt.ids for t in turns(w)] == [(0,), (1,), (1, 2, 0)]
    assert w.meta["unique_hash_ids"] == 3


def test_renumbering_spans_sessions_and_file_order(tmp_path):
    # Canonical ids follow the file order even when sessions interleave:
    # line 1 s=a [5] -> (0,); line 2 s=b [6, 5] -> (1, 0); line 3 s=a [5, 8] -> (0, 2)
    path = write_trace(tmp_path, [row(hash_ids=[5], session_id="a"),
                                  row(hash_ids=[6, 5], session_id="b"),
                                  row(ts=1, hash_ids=[5, 8], session_id="a")])
    w = read_mooncake(path)
    a, b = w.sessions
    assert [t.prompt.ids for t in a.turns] == [(0,), (0, 2)]
    assert b.turns[0].prompt.ids == (1, 0)


def test_input_length_defaults_to_full_blocks(tmp_path):
    # 2 hash ids x 512 = 1024 tokens; with trace_block_size 16: 2 x 16 = 32
    path = write_trace(tmp_path, [row(hash_ids=[1, 2])])
    assert turns(read_mooncake(path))[0].prompt == Prompt((0, 1), 512, 1024)
    assert turns(read_mooncake(path, trace_block_size=16))[0].prompt == Prompt((0, 1), 16, 32)


def test_explicit_input_length_and_aliases(tmp_path):
    path = write_trace(tmp_path, [
        row(hash_ids=[1, 2], input_length=600),                     # partial last block
        {"created_time": 5, "hash_ids": [1, 2], "input_tokens": 1024,   # exactly 2 x 512
         "output_tokens": 3},
    ])
    t0, t1 = turns(read_mooncake(path))
    assert (t0.input_length, t0.output_length) == (600, 10)
    assert (t1.input_length, t1.output_length) == (1024, 3)
    assert t1.arrival_ms == 5.0


def test_null_primary_field_falls_back_to_alias(tmp_path):
    path = write_trace(tmp_path, [row(output_length=None, output_tokens=4)])
    assert turns(read_mooncake(path))[0].output_length == 4


def test_output_token_ids_kept_and_ignored_fields_accepted(tmp_path):
    path = write_trace(tmp_path, [row(out=3, output_token_ids=[9, 8, 7], request_id="r1",
                                      priority=2, strict_priority=1, policy_class="gold")])
    (t,) = turns(read_mooncake(path))
    assert t.output_token_ids == (9, 8, 7)


def test_null_optional_fields_count_as_absent(tmp_path):
    path = write_trace(tmp_path, [row(session_id=None, input_length=None, delay=None,
                                      output_token_ids=None)])
    (t,) = turns(read_mooncake(path))
    assert (t.session_id, t.input_length, t.output_token_ids) == ("request_1", 512, None)


# --- sessions, naming, timing -----------------------------------------------------


def test_sessions_grouping_naming_and_order(tmp_path):
    path = write_trace(tmp_path, [
        row(ts=100, session_id="A"),    # line 1: A turn 0
        row(ts=50),                     # line 2: one-turn session request_2
        row(ts=300, session_id="A"),    # line 3: A turn 1, delay 300 - 100 = 200
        row(ts=200, session_id=7),      # line 4: session "7" (int -> str)
        "",                             # line 5: blank, still counted
        row(ts=None, session_id="A", delay=5),   # line 6: A turn 2, explicit delay 5
        row(ts=60),                     # line 7: request_7
    ])
    w = read_mooncake(path)
    assert [s.session_id for s in w.sessions] == ["A", "request_2", "7", "request_7"]
    a = w.sessions[0]
    assert [t.turn_index for t in a.turns] == [0, 1, 2]
    assert [t.line for t in a.turns] == [1, 3, 6]
    assert all(t.session_id == "A" for t in a.turns)
    # earliest first-turn timestamp is 50: A 100 -> 50, request_2 -> 0, "7" -> 150, request_7 -> 10
    assert [s.turns[0].arrival_ms for s in w.sessions] == [50.0, 0.0, 150.0, 10.0]
    assert [t.delay_ms for t in a.turns] == [None, 200.0, 5.0]
    assert [t.arrival_ms for t in a.turns] == [50.0, None, None]
    assert w.num_requests == 6
    assert w.source == path


def test_timestamps_normalised_and_sped_up(tmp_path):
    # first turns at 5000 / 6000 -> 0 / 1000; a later turn of s at 9000 -> delay 9000 - 6000
    path = write_trace(tmp_path, [row(ts=5000), row(ts=6000, session_id="s"),
                                  row(ts=9000, session_id="s")])
    w = read_mooncake(path)
    assert [s.turns[0].arrival_ms for s in w.sessions] == [0.0, 1000.0]
    assert w.sessions[1].turns[1].delay_ms == 3000.0
    # speed-up 4: 0 / 250, delay 3000 / 4 = 750
    w4 = read_mooncake(path, arrival_speedup_ratio=4)
    assert [s.turns[0].arrival_ms for s in w4.sessions] == [0.0, 250.0]
    assert w4.sessions[1].turns[1].delay_ms == 750.0


def test_delay_rules_for_later_turns(tmp_path):
    path = write_trace(tmp_path, [
        row(ts=10, session_id="s"),
        row(ts=None, session_id="s"),            # no timestamp -> delay 0
        row(ts=40, session_id="s"),              # previous turn has no timestamp -> 0
        row(ts=70, session_id="s", delay_ms=2.5),  # explicit delay wins over 70 - 40
        row(ts=70, session_id="s"),              # equal timestamps -> 0 (not an error)
    ])
    (s,) = read_mooncake(path, arrival_speedup_ratio=2).sessions
    assert [t.delay_ms for t in s.turns] == [None, 0.0, 0.0, 1.25, 0.0]
    assert s.turns[0].arrival_ms == 0.0


def test_float_timestamps(tmp_path):
    path = write_trace(tmp_path, [row(ts=1.5), row(ts=4.0)])
    assert [t.arrival_ms for t in turns(read_mooncake(path))] == [0.0, 2.5]


def test_blank_lines_and_crlf(tmp_path):
    path = tmp_path / "crlf.jsonl"
    path.write_bytes(b"\r\n" + json.dumps(row(ts=3)).encode() + b"\r\n   \n"
                     + json.dumps(row(ts=4)).encode())   # no final newline
    w = read_mooncake(str(path))
    assert [s.session_id for s in w.sessions] == ["request_2", "request_4"]
    assert [t.arrival_ms for t in turns(w)] == [0.0, 1.0]


def test_build_workload_dispatches_to_mooncake(tmp_path):
    path = write_trace(tmp_path, [row(ts=5000, hash_ids=[4]), row(ts=6000, hash_ids=[4, 5])])
    cfg = WorkloadConfig(trace=path, trace_block_size=64, arrival_speedup_ratio=2)
    w = build_workload(cfg, engine_block_size=16, streams=Streams(0))
    assert [t.arrival_ms for t in turns(w)] == [0.0, 500.0]
    assert [t.prompt for t in turns(w)] == [Prompt((0,), 64, 64), Prompt((0, 1), 64, 128)]


# --- errors -------------------------------------------------------------------------

ERROR_CASES = [
    # (rows, line of the error, text that must appear)
    (['{"timestamp": 0,'], 1,
     "malformed JSON (Expecting property name enclosed in double quotes at column 17)"),
    ([row(), "[1, 2]"], 2, "expected a JSON object, got list"),
    ([{"timestamp": 0, "output_length": 1}], 1, "missing required field hash_ids"),
    ([row(hash_ids=[])], 1, "hash_ids must not be empty"),
    ([{"timestamp": 0, "output_length": 1, "hash_ids": 5}], 1, "hash_ids must be a list"),
    ([row(hash_ids=[1, "a"])], 1, "hash_ids[1] must be an integer"),
    ([row(hash_ids=[1, 2.0])], 1, "hash_ids[1] must be an integer"),
    ([row(hash_ids=[True])], 1, "hash_ids[0] must be an integer"),
    ([row(hash_ids=[3, -1])], 1, "hash_ids[1] must be >= 0"),
    ([{"timestamp": 0, "hash_ids": [1]}], 1, "missing required field output_length"),
    ([row(out=0)], 1, "output_length must be >= 1"),
    ([row(out=-3)], 1, "output_length must be >= 1"),
    ([row(out=2.5)], 1, "output_length must be an integer"),
    ([{"timestamp": 0, "hash_ids": [1], "output_tokens": "9"}], 1,
     "output_tokens must be an integer"),
    ([row(hash_ids=[1, 2], input_length=1025)], 1, "input_length 1025 exceeds the 1024 tokens"),
    ([row(hash_ids=[1], input_tokens=513)], 1, "input_tokens 513 exceeds the 512 tokens"),
    ([row(input_length=-1)], 1, "input_length must be >= 1"),
    ([row(input_length="100")], 1, "input_length must be an integer"),
    ([row(out=3, output_token_ids=[1, 2])], 1, "output_token_ids has 2 ids but output_length is 3"),
    ([row(out=2, output_token_ids=[1, "x"])], 1, "output_token_ids[1] must be an integer"),
    ([row(delay=5)], 1, "delay is not allowed on a session's first turn"),
    ([row(session_id="s", delay_ms=0)], 1, "delay_ms is not allowed on a session's first turn"),
    ([row(session_id="s"), row(session_id="s", delay=-1)], 2, "delay must be >= 0"),
    ([row(ts=-5)], 1, "timestamp must be >= 0"),
    ([row(ts="noon")], 1, "timestamp must be a number"),
    ([row(ts=None, created_time=True)], 1, "created_time must be a number"),
    ([row(ts=1, created_time=2)], 1, "both timestamp and its alias created_time"),
    ([row(ts=None)], 1, "missing timestamp"),
    ([row(session_id="s"), row(ts=None, session_id="t")], 2, "missing timestamp"),
    ([row(session_id=["s"])], 1, "session_id must be a string or an integer"),
    ([row(ts=10, session_id="s"), row(ts=5), row(ts=9, session_id="s")], 3,
     "non-monotonic session order"),
    ([row(ts=0), row(session_id="request_1")], 2, "clashes with the name"),
]


@pytest.mark.parametrize("rows, line, text", ERROR_CASES)
def test_errors_name_file_line_and_problem(tmp_path, rows, line, text):
    path = write_trace(tmp_path, rows)
    with pytest.raises(UserError) as exc:
        read_mooncake(path)
    msg = str(exc.value)
    assert msg.startswith(f"{path}:{line}: "), msg
    assert text in msg, msg
    assert "\n" not in msg


def test_error_reports_first_bad_line(tmp_path):
    path = write_trace(tmp_path, [row(), "", row(out=0), "not json"])
    with pytest.raises(UserError, match=r":3: output_length must be >= 1, got 0$"):
        read_mooncake(path)


def test_non_monotonic_message_names_both_timestamps(tmp_path):
    path = write_trace(tmp_path, [row(ts=10, session_id="s"), row(ts=5, session_id="s")])
    with pytest.raises(UserError) as exc:
        read_mooncake(path)
    assert str(exc.value) == (f"{path}:2: non-monotonic session order: timestamp 5 of session "
                              f"'s' is before 10 of its previous turn (line 1)")


def test_invalid_utf8(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(json.dumps(row()).encode() + b"\n{\"timestamp\": \xff}\n")
    with pytest.raises(UserError, match=r"bad\.jsonl:2: "):
        read_mooncake(str(path))


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_empty_trace_is_an_error(tmp_path, content):
    path = tmp_path / "empty.jsonl"
    path.write_text(content)
    with pytest.raises(UserError) as exc:
        read_mooncake(str(path))
    assert str(exc.value) == f"{path}: empty trace (no rows)"


def test_missing_file(tmp_path):
    path = str(tmp_path / "nope.jsonl")
    with pytest.raises(UserError) as exc:
        read_mooncake(path)
    assert str(exc.value) == f"{path}: file not found"


def test_unreadable_path(tmp_path):
    with pytest.raises(UserError) as exc:
        read_mooncake(str(tmp_path))          # a directory
    assert str(exc.value).startswith(f"{tmp_path}: ")
    assert "\n" not in str(exc.value)


# --- the real trace -----------------------------------------------------------------


@pytest.mark.skipif(not os.path.exists(REAL_TRACE),
                    reason=f"real Mooncake trace not available at {REAL_TRACE}")
def test_real_conversation_trace():
    w = read_mooncake(REAL_TRACE)
    assert w.num_requests == 12031
    assert len(w.sessions) == 12031            # no session ids: one-turn sessions
    first = w.sessions[0].turns[0]
    assert first.arrival_ms == 0.0
    assert first.prompt.ids[0] == 0 and first.prompt.run_len == 512
    # README: every request starts with id 0 (a shared system prompt)
    assert all(s.turns[0].prompt.ids[0] == 0 for s in w.sessions)
    assert w.sessions[-1].session_id == "request_12031"
