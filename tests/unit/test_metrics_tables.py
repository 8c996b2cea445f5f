"""Unit tier: the lazy tables of a Result (simmodel.metrics.tables) and their parquet
files, written from the columns (simmodel.metrics.parquet): byte for byte the files
``DataFrame.to_parquet`` writes, row groups included."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import simmodel
from simmodel.metrics import parquet, tables
from simmodel.metrics.records import WorkerRecord
from simmodel.metrics.tables import PassesTable, RequestsTable
from simmodel.result import LazyTable, Result

NAN = math.nan
TINY = Path(__file__).resolve().parents[2] / "scenarios" / "tiny.yaml"


def columns() -> dict:
    return {"s": ["a", "bé", "", "a"], "maybe": [None, "x", None, "y"],
            "none": [None, None, None, None], "i": np.array([1, -2, 3, 2**40]),
            "f": np.array([0.5, NAN, -1.0, 3.0]), "nan": np.full(4, NAN)}


def test_requests_table_writes_what_pandas_writes(tmp_path):
    table = RequestsTable(columns(), 4)
    table.to_parquet(tmp_path / "fast.parquet")
    table.frame().to_parquet(tmp_path / "pandas.parquet", index=False)
    assert (tmp_path / "fast.parquet").read_bytes() == (tmp_path / "pandas.parquet").read_bytes()
    got = pd.read_parquet(tmp_path / "fast.parquet")
    pd.testing.assert_frame_equal(got, pd.DataFrame(columns()), check_exact=True)


def test_requests_table_columns_and_rows():
    table = RequestsTable(columns(), 4)
    assert "s" in table and "x" not in table and len(table) == 4
    assert table["s"].dtype == object and table["i"].tolist() == [1, -2, 3, 2**40]
    kept = table.where(np.array([True, False, True, False]))
    assert len(kept) == 2 and kept.columns["maybe"] == [None, None]
    assert kept["f"].tolist() == [0.5, -1.0]


def test_a_column_of_another_kind_is_left_to_pandas(tmp_path):
    cols = {"maybe": [1.5, None], "flags": np.array([True, False]), "i": np.array([1, 2])}
    assert not parquet.write_columns(str(tmp_path / "x.parquet"), [cols])
    assert not (tmp_path / "x.parquet").exists()
    RequestsTable(cols, 2).to_parquet(tmp_path / "x.parquet")
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "x.parquet"), pd.DataFrame(cols))


def test_a_column_of_runs_is_written_as_the_list_it_stands_for(tmp_path):
    runs = {"s": parquet.StringRuns(["a", None, "bé", "a"], [2, 1, 3, 0]),
            "none": parquet.StringRuns([None, None], [4, 2]), "i": np.arange(6)}
    listed = {"s": ["a", "a", None, "bé", "bé", "bé"], "none": [None] * 6, "i": np.arange(6)}
    assert parquet.write_columns(str(tmp_path / "runs.parquet"), [runs])
    assert parquet.write_columns(str(tmp_path / "list.parquet"), [listed])
    assert (tmp_path / "runs.parquet").read_bytes() == (tmp_path / "list.parquet").read_bytes()


def _worker(pool: str, idx: int, n: int, start: float) -> WorkerRecord:
    ends = start + np.arange(1, n + 1, dtype=float)
    ints = np.arange(n, dtype=np.int64)
    passes = {"start_ms": ends - 1.0, "end_ms": ends, "prefill_tokens": ints * 3,
              "num_prefill": ints % 2, "num_decode": ints % 5, "decode_tokens": ints * 7,
              "kv_blocks_active": ints + idx}
    return WorkerRecord(pool=pool, idx=idx, passes=passes)


@pytest.mark.parametrize("rows", [4, 7, 1000])
def test_passes_are_written_a_row_group_at_a_time(rows, tmp_path, monkeypatch):
    monkeypatch.setattr(tables, "ROW_GROUP_ROWS", rows)
    monkeypatch.setattr(parquet, "ROW_GROUP_ROWS", rows)
    ws = [_worker("prefill", 0, 5, 0.0), _worker("decode", 0, 0, 0.0),
          _worker("decode", 1, 9, 2.5), _worker("decode", 2, 3, 1.0)]
    table = PassesTable(ws)
    table.to_parquet(tmp_path / "fast.parquet")
    table.frame().to_parquet(tmp_path / "pandas.parquet", index=False, row_group_size=rows)
    assert (tmp_path / "fast.parquet").read_bytes() == (tmp_path / "pandas.parquet").read_bytes()


def test_a_run_builds_its_frames_when_they_are_read():
    result = simmodel.run(simmodel.load_scenario(TINY))
    assert isinstance(result.table("requests"), LazyTable)
    assert isinstance(result.table("passes"), LazyTable)
    frame = result.requests
    assert isinstance(frame, pd.DataFrame) and result.requests is frame
    assert result.table("requests") is frame
    assert isinstance(result.passes, pd.DataFrame) and result.table("kv_events") is None
    assert Result(summary={}, requests=frame, passes=None).table("requests") is frame


@pytest.mark.parametrize("values", [
    [0, 1, 2, 3, 4], [0, 1, 2.5, 3, 4], [NAN, NAN, 1.0, NAN, NAN], [1, 2, None, 4, 5],
    [0.0, 0.0, 0.0, 0.0, 1], [2.0, 2.0, 2.0, 2.0, 2.0],
])
def test_requests_in_chunks_have_the_dtypes_of_all_at_once(values):
    from simmodel.metrics.collect import _concat, records_frame, records_table
    from simmodel.result import RequestRecord

    recs = [RequestRecord(arrival_time_ms=v, uid=i, request_id=None if i % 2 else "r")
            for i, v in enumerate(values)]
    parts = [records_table(recs[i:i + 2]) for i in range(0, len(recs), 2)] + [
        records_table([])]
    pd.testing.assert_frame_equal(_concat(parts).frame(), records_frame(recs),
                                  check_exact=True)


def test_the_fallback_writer_writes_the_same_bytes(tmp_path, monkeypatch):
    """A pyarrow whose compiled writer takes other options gets the public class."""
    table = RequestsTable(columns(), 4)
    table.to_parquet(tmp_path / "fast.parquet")
    monkeypatch.setattr(parquet, "_WRITER_OPTIONS", {"no_such_option": 1})
    table.to_parquet(tmp_path / "public.parquet")
    assert (tmp_path / "fast.parquet").read_bytes() == (tmp_path / "public.parquet").read_bytes()


def test_a_run_writes_without_importing_pyarrow_parquet(tmp_path):
    code = ("import sys, simmodel.cli as c\n"
            f"c.main(['run', {str(TINY)!r}, '--out', {str(tmp_path / 'out')!r}])\n"
            "assert 'pyarrow.parquet' not in sys.modules, 'imported'\n")
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "passes.parquet").stat().st_size > 0


def test_pass_counts_logged_in_32_bits_are_read_as_int64(tmp_path):
    w = _worker("agg", 0, 6, 0.0)
    w.passes.update({k: v.astype(np.int32) for k, v in w.passes.items() if v.dtype.kind == "i"})
    table = PassesTable([w])
    frame = table.frame()
    assert frame["decode_tokens"].dtype == np.int64
    assert frame["decode_tokens"].tolist() == [7 * i for i in range(6)]
    table.to_parquet(tmp_path / "p.parquet")
    assert pd.read_parquet(tmp_path / "p.parquet")["kv_blocks_active"].dtype == np.int64
