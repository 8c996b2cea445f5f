"""Unit tier: the Azure LLM inference CSV reader, on small hand-written traces."""
from __future__ import annotations

import os
import re

import pytest

from simmodel.config import WorkloadConfig
from simmodel.errors import UserError
from simmodel.rng import Streams
from simmodel.workload import build_workload
from simmodel.workload.azure import read_azure

SHARED = "/work/shared/traces/azure"
HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"


def write_csv(tmp_path, *rows, header=HEADER, name="trace.csv") -> str:
    path = tmp_path / name
    path.write_text("\n".join([header, *rows]) + "\n")
    return str(path)


def turns(w):
    return [s.turns[0] for s in w.sessions]


# --- arrivals ------------------------------------------------------------------------


def test_arrivals_are_exact_ms_since_the_first_row(tmp_path):
    # 03.9799600 -> 04.0319600 is 0.0520000 s = 52 ms exactly; -> 05.5 (one digit) 1520.04 ms
    path = write_csv(tmp_path, "2023-11-16 18:17:03.9799600,10,1",
                     "2023-11-16 18:17:04.0319600,10,1",
                     "2023-11-16 18:17:05.5,10,1",
                     "2023-11-16 18:17:06,10,1")
    assert [t.arrival_ms for t in turns(read_azure(path, engine_block_size=16))] == [
        0.0, 52.0, 1520.04, 2020.04]


def test_seven_digit_fraction_has_no_float_drift(tmp_path):
    # 100-ns ticks: .0000001 s after the first row is 0.0001 ms, 1 h later exactly 3.6e6 ms
    path = write_csv(tmp_path, "2023-11-16 18:00:00.0000000,10,1",
                     "2023-11-16 18:00:00.0000001,10,1",
                     "2023-11-16 19:00:00.0000000,10,1")
    assert [t.arrival_ms for t in turns(read_azure(path, engine_block_size=16))] == [
        0.0, 0.0001, 3_600_000.0]


def test_unsorted_rows_are_relative_to_the_earliest(tmp_path):
    # the earliest is line 3 (18:00:01): line 2 is 1 s later, line 4 crosses midnight
    path = write_csv(tmp_path, "2023-11-16 18:00:02,10,1", "2023-11-16 18:00:01,10,1",
                     "2023-11-17 00:00:01,10,1")
    w = read_azure(path, engine_block_size=16)
    assert [(s.session_id, s.turns[0].arrival_ms) for s in w.sessions] == [
        ("request_2", 1000.0), ("request_3", 0.0), ("request_4", 6 * 3_600_000.0)]


def test_speedup_divides_arrivals(tmp_path):
    path = write_csv(tmp_path, "2023-11-16 18:00:00,10,1", "2023-11-16 18:00:03,10,1")
    w = read_azure(path, arrival_speedup_ratio=4.0, engine_block_size=16)
    assert [t.arrival_ms for t in turns(w)] == [0.0, 750.0]


# --- tokens and names ----------------------------------------------------------------


def test_every_engine_block_gets_a_fresh_id(tmp_path):
    # block 64: 130 tokens -> 3 blocks (ids 0-2), 64 -> 1 (id 3), 1 -> 1 (id 4)
    path = write_csv(tmp_path, "2023-11-16 18:00:00,130,7", "2023-11-16 18:00:01,64,8",
                     "2023-11-16 18:00:02,1,9")
    w = read_azure(path, engine_block_size=64)
    assert [(t.prompt.ids, t.prompt.run_len, t.prompt.length, t.output_length)
            for t in turns(w)] == [((0, 1, 2), 64, 130, 7), ((3,), 64, 64, 8),
                                   ((4,), 64, 1, 9)]
    assert w.meta["unique_hash_ids"] == 5 and w.kind == "sessions"


def test_session_names_use_physical_lines_and_columns_are_found_by_name(tmp_path):
    # header on line 1, a blank line 3 is skipped: rows are lines 2 and 4
    path = write_csv(tmp_path, "8,2023-11-16 18:00:00,100,x", "",
                     "9,2023-11-16 18:00:01,200,y",
                     header="GeneratedTokens,TIMESTAMP,ContextTokens,Extra")
    w = read_azure(path, engine_block_size=16)
    assert [(s.session_id, s.turns[0].line, s.turns[0].output_length,
             s.turns[0].input_length) for s in w.sessions] == [
        ("request_2", 2, 8, 100), ("request_4", 4, 9, 200)]


# --- errors --------------------------------------------------------------------------


@pytest.mark.parametrize("row, message", [
    ("2023-11-16 18:00:01,10,0", "trace.csv:3: GeneratedTokens must be >= 1, got 0"),
    ("2023-11-16 18:00:01,0,5", "trace.csv:3: ContextTokens must be >= 1"),
    ("2023-11-16 18:00:01,1.5,5", "trace.csv:3: ContextTokens must be a whole number"),
    ("2023-11-16 18:00:01,-3,5", "trace.csv:3: ContextTokens must be a whole number"),
    ("2023-11-16 18:00:01.12345678,10,5", "trace.csv:3: TIMESTAMP"),
    ("16/11/2023 18:00:01,10,5", "trace.csv:3: TIMESTAMP"),
    ("2023-02-30 18:00:01,10,5", "trace.csv:3: TIMESTAMP '2023-02-30 18:00:01': day is out"),
    ("2023-11-16 24:00:01,10,5", "trace.csv:3: TIMESTAMP '2023-11-16 24:00:01': time of day"),
    ("2023-11-16 18:00:01,10", "trace.csv:3: expected 3 comma-separated cells"),
])
def test_bad_rows_name_their_line(tmp_path, row, message):
    path = write_csv(tmp_path, "2023-11-16 18:00:00,10,5", row)
    with pytest.raises(UserError, match="^" + re.escape(f"{tmp_path}/{message}")):
        read_azure(path, engine_block_size=16)


def test_bad_header_missing_file_and_empty_file(tmp_path):
    path = write_csv(tmp_path, "2023-11-16 18:00:00,10,5", header="TIMESTAMP,Context,Generated")
    with pytest.raises(UserError, match=r"trace.csv:1: header must name the columns .* "
                                        r"missing ContextTokens, GeneratedTokens"):
        read_azure(path, engine_block_size=16)
    with pytest.raises(UserError, match="nope.csv: file not found"):
        read_azure(str(tmp_path / "nope.csv"), engine_block_size=16)
    empty = write_csv(tmp_path, name="empty.csv")
    with pytest.raises(UserError, match="empty.csv: empty trace"):
        read_azure(empty, engine_block_size=16)


def test_build_workload_uses_the_engine_block_size(tmp_path):
    path = write_csv(tmp_path, "2023-11-16 18:00:00,100,5", "2023-11-16 18:00:02,10,5")
    cfg = WorkloadConfig(trace=path, format="azure", arrival_speedup_ratio=2.0)
    w = build_workload(cfg, engine_block_size=32, streams=Streams(0))
    assert [(t.prompt.ids, t.prompt.run_len, t.arrival_ms) for t in turns(w)] == [
        ((0, 1, 2, 3), 32, 0.0), ((4,), 32, 1000.0)]


# --- the published traces ------------------------------------------------------------


@pytest.mark.skipif(not os.path.isdir(SHARED), reason=f"{SHARED} not present")
@pytest.mark.parametrize("name, rows, last_ms", [
    # last - first: 19:14:19.9280160 - 18:17:03.9799600 = 3435.9480560 s
    ("code", 8819, 3_435_948.056),
    # 19:14:08.4025270 - 18:15:46.6805900 = 3501.7219370 s
    ("conv", 19366, 3_501_721.937),
])
def test_shared_azure_traces(name, rows, last_ms):
    w = read_azure(f"{SHARED}/AzureLLMInferenceTrace_{name}.csv", engine_block_size=64)
    ts = turns(w)
    assert len(ts) == rows and ts[0].arrival_ms == 0.0
    assert ts[-1].arrival_ms == pytest.approx(last_ms, abs=1e-6)
    assert all(a.arrival_ms <= b.arrival_ms for a, b in zip(ts, ts[1:]))
    if name == "code":
        assert ts[1].arrival_ms == pytest.approx(52.0, abs=1e-9)      # 03.97996 -> 04.03196
        assert (ts[0].input_length, ts[0].output_length) == (4808, 10)


def test_shipped_scenario_copy_loads():
    from simmodel.scenario import load_scenario
    here = os.path.join(os.path.dirname(__file__), "..", "..", "scenarios", "azure_conversation.yaml")
    sc = load_scenario(here)
    w = build_workload(sc.workload, engine_block_size=64, streams=Streams(0))
    # the first 3,000 rows of the conversation trace: 18:15:46.6805900 -> 18:26:15.3839880
    assert w.num_requests == 3000
    assert turns(w)[-1].arrival_ms == pytest.approx(628_703.398, abs=1e-6)


def test_errors_never_echo_a_files_contents(tmp_path):
    secret = "root:x:0:0:root:/root:/bin/bash"
    passwd = tmp_path / "passwd"
    passwd.write_text(secret + "\ndaemon:x:1:1::/usr/sbin:/usr/sbin/nologin\n")
    with pytest.raises(UserError) as info:
        read_azure(str(passwd), engine_block_size=64)
    assert "0:0:" not in str(info.value) and "/bin/bash" not in str(info.value)
    assert "not an Azure CSV trace" in str(info.value)
    csv_file = tmp_path / "t.csv"
    csv_file.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                        "2023-11-16 18:15:46.6805900 password=hunter2-and-much-more-text,5,6\n")
    with pytest.raises(UserError) as info:
        read_azure(str(csv_file), engine_block_size=64)
    message = str(info.value)
    assert "hunter2-and-much-more" not in message and len(message) < len(str(csv_file)) + 140
    other = tmp_path / "h.csv"
    other.write_text("a,b,c,d\n1,2,3,4\n")
    with pytest.raises(UserError, match=r"missing TIMESTAMP, ContextTokens, GeneratedTokens "
                                        r"\(got 'a', 'b', 'c', \.\.\.\)"):
        read_azure(str(other), engine_block_size=64)
