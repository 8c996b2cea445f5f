"""CLI, result writing and the summary table (the simulator itself is faked)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simmodel
from simmodel.cli import main

from cli_helpers import one_error_line
from simmodel.errors import UserError
from simmodel.report import format_summary, write_result
from simmodel.result import PASS_COLUMNS, Result

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SYNTHETIC = "workload: {synthetic: {requests: 2, input_tokens: 100, output_tokens: 3, request_rate: 2}}\n"


def small_result(kv_events: bool = False) -> Result:
    summary = {
        "num_requests": 2, "completed_requests": 2,
        "duration_ms": 1234.5678, "request_throughput_rps": 1.62,
        "output_throughput_tok_s": 4.86,
        "mean_ttft_ms": 20.123, "median_ttft_ms": 19.0, "p90_ttft_ms": 21.5,
        "p99_ttft_ms": 21.9, "max_ttft_ms": 22.0,
        "mean_itl_ms": None, "median_itl_ms": float("nan"),
        "prefix_cache_reused_ratio": 0.25, "gpu_hours": 0.000343,
    }
    requests = pd.DataFrame({"session_id": ["a", "b"], "turn_index": [0, 0],
                             "uid": [0, 1], "ttft_ms": [19.0, 22.0]})
    passes = pd.DataFrame([["agg", 0, 0.0, 19.0, 100, 1, 0, 0, 2]], columns=list(PASS_COLUMNS))
    events = (pd.DataFrame({"time_ms": [19.0], "worker": [0], "kind": ["stored"],
                            "block_hash": [123]}) if kv_events else None)
    return Result(summary=summary, requests=requests, passes=passes, kv_events=events)


@pytest.fixture
def fake_run(monkeypatch):
    """Replace ``simmodel.run``; ``fake_run.calls`` holds the scenarios it was given."""
    calls = []

    def run(scenario):
        calls.append(scenario)
        return small_result()

    run.calls = calls
    monkeypatch.setattr(simmodel, "run", run, raising=False)
    return run


def write(folder, text, name="s.yaml"):
    path = folder / name
    path.write_text(text)
    return str(path)




# --------------------------------------------------------------------------- run


def test_run_prints_summary_and_writes_result(tmp_path, capsys, fake_run):
    scenario = write(tmp_path, SYNTHETIC)
    out = tmp_path / "out"
    assert main(["run", scenario, "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    assert "ttft" in stdout and "20.12" in stdout
    assert sorted(os.listdir(out)) == ["passes.parquet", "requests.parquet", "summary.json"]
    assert len(fake_run.calls) == 1 and fake_run.calls[0].source == scenario


def test_run_without_out_writes_nothing(tmp_path, capsys, fake_run, monkeypatch):
    monkeypatch.chdir(tmp_path)
    scenario = write(tmp_path, SYNTHETIC)
    assert main(["run", scenario]) == 0
    assert os.listdir(tmp_path) == ["s.yaml"]
    assert "completed / requests" in capsys.readouterr().out


def test_overrides(tmp_path, fake_run):
    scenario = write(tmp_path, SYNTHETIC + "seed: 3\nrun: {record_kv_events: true}\n")
    assert main(["run", scenario, "--seed", "7", "--max-sim-time-ms", "500"]) == 0
    given = fake_run.calls[0]
    assert given.seed == 7
    assert given.run.max_sim_time_ms == 500.0
    assert given.run.record_kv_events is True      # the rest of `run` is kept


@pytest.mark.parametrize("flag,value,expected", [
    ("--seed", "-1", "--seed: must be a non-negative integer, got -1"),
    ("--max-sim-time-ms", "0", "--max-sim-time-ms: must be a positive number, got 0.0"),
])
def test_bad_override(tmp_path, capsys, fake_run, flag, value, expected):
    scenario = write(tmp_path, SYNTHETIC)
    out = tmp_path / "out"
    assert main(["run", scenario, flag, value, "--out", str(out)]) == 2
    assert one_error_line(capsys) == expected
    assert not out.exists() and fake_run.calls == []


BAD_SCENARIOS = [
    ("unknown key", SYNTHETIC + "cluster: {engine: {blok_size: 64}}\n",
     "cluster.engine.blok_size: unknown key; valid keys: backend, block_size,"),
    ("wrong type", SYNTHETIC + "cluster: {workers: two}\n",
     "cluster.workers: must be an integer, got 'two'"),
    ("missing key", "workload: {synthetic: {input_tokens: 1, output_tokens: 1, request_rate: 1}}\n",
     "workload.synthetic.requests: missing required key"),
    ("missing trace", "workload: {trace: traces/none.jsonl}\n",
     "workload.trace: file not found: "),
    ("post_init", SYNTHETIC + "cluster: {engine: {timing_model: {type: fixed}}}\n",
     "cluster.engine.timing_model.prefill_ms: must be a non-negative number"),
    ("malformed YAML", "workload: {synthetic: [\n", "line 2: invalid YAML: "),
    ("not a mapping", "[1, 2]\n", "the top level must be a mapping, got a list"),
]


@pytest.mark.parametrize("text,expected", [b[1:] for b in BAD_SCENARIOS],
                         ids=[b[0] for b in BAD_SCENARIOS])
def test_bad_scenario_is_one_line_exit_2(tmp_path, capsys, fake_run, text, expected):
    scenario = write(tmp_path, text)
    out = tmp_path / "out"
    assert main(["run", scenario, "--out", str(out)]) == 2
    assert one_error_line(capsys).startswith(f"{scenario}: {expected}")
    assert not out.exists() and fake_run.calls == []


def test_missing_scenario_file(tmp_path, capsys):
    path = str(tmp_path / "nope.yaml")
    assert main(["run", path]) == 2
    assert one_error_line(capsys) == f"{path}: cannot read scenario: No such file or directory"


def test_user_error_from_run(tmp_path, capsys, monkeypatch):
    def run(scenario):
        raise UserError("trace.jsonl: line 3: output_length: must be a positive integer")

    monkeypatch.setattr(simmodel, "run", run, raising=False)
    scenario = write(tmp_path, SYNTHETIC)
    out = tmp_path / "out"
    assert main(["run", scenario, "--out", str(out)]) == 2
    assert one_error_line(capsys) == "trace.jsonl: line 3: output_length: must be a positive integer"
    assert not out.exists()


def test_out_is_a_file(tmp_path, capsys, fake_run):
    scenario = write(tmp_path, SYNTHETIC)
    out = tmp_path / "out"
    out.write_text("precious")
    assert main(["run", scenario, "--out", str(out)]) == 2
    assert one_error_line(capsys) == f"--out: {out} exists and is not a directory"
    assert out.read_text() == "precious" and fake_run.calls == []


@pytest.mark.parametrize("argv", [
    [], ["walk"], ["run"], ["run", "a.yaml", "--seed", "abc"], ["run", "a.yaml", "--bogus"],
])
def test_usage_errors_exit_2_in_one_line(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "usage:" not in err and len(err.strip().splitlines()) == 1
    assert err.startswith("simmodel: error: ") and "--help" in err


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"simmodel {simmodel.__version__}"


def test_help_exits_0(capsys):
    assert main(["run", "--help"]) == 0
    assert "--max-sim-time-ms" in capsys.readouterr().out


def test_subprocess_bad_scenario_has_no_traceback(tmp_path):
    (tmp_path / "bad.yaml").write_text(SYNTHETIC + "cluster: {workers: 0}\n")
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-m", "simmodel", "run", "bad.yaml", "--out", "out"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == ("simmodel: error: bad.yaml: cluster.workers: "
                           "must be a positive integer, got 0\n")
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- write_result


def leftovers(folder) -> list[str]:
    return [name for name in os.listdir(folder) if ".tmp-" in name or ".old-" in name]


def test_write_result_files(tmp_path):
    out = tmp_path / "a" / "b" / "out"          # missing parents are created
    result = small_result()
    write_result(result, out)
    assert sorted(os.listdir(out)) == ["passes.parquet", "requests.parquet", "summary.json"]
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary) == list(result.summary)           # key order kept
    assert summary["mean_itl_ms"] is None and summary["median_itl_ms"] is None  # NaN -> null
    assert summary["duration_ms"] == 1234.5678
    pd.testing.assert_frame_equal(pd.read_parquet(out / "requests.parquet"), result.requests)
    pd.testing.assert_frame_equal(pd.read_parquet(out / "passes.parquet"), result.passes)
    assert leftovers(out.parent) == []


def test_write_result_kv_events(tmp_path):
    result = small_result(kv_events=True)
    write_result(result, str(tmp_path / "out"))
    assert sorted(os.listdir(tmp_path / "out")) == [
        "kv_events.parquet", "passes.parquet", "requests.parquet", "summary.json"]
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "out" / "kv_events.parquet"),
                                  result.kv_events)


def fail_on_second_parquet(monkeypatch):
    real = pd.DataFrame.to_parquet
    calls = []

    def to_parquet(self, path, *args, **kwargs):
        calls.append(path)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(self, path, *args, **kwargs)

    monkeypatch.setattr(pd.DataFrame, "to_parquet", to_parquet)


def test_write_result_failure_leaves_nothing(tmp_path, monkeypatch):
    fail_on_second_parquet(monkeypatch)
    out = tmp_path / "new" / "out"
    with pytest.raises(OSError, match="No space left"):
        write_result(small_result(), out)
    assert os.listdir(tmp_path) == []          # neither out, nor its temp, nor the new parent


def test_write_result_failure_keeps_existing_output(tmp_path, monkeypatch):
    out = tmp_path / "out"
    write_result(small_result(kv_events=True), out)
    before = {name: (out / name).read_bytes() for name in os.listdir(out)}
    fail_on_second_parquet(monkeypatch)
    with pytest.raises(OSError):
        write_result(small_result(), out)
    assert {name: (out / name).read_bytes() for name in os.listdir(out)} == before
    assert leftovers(tmp_path) == []


def test_write_result_replaces_an_earlier_result_whole(tmp_path):
    out = tmp_path / "out"
    write_result(small_result(kv_events=True), out)
    result = small_result()
    result.summary["completed_requests"] = 1
    write_result(result, out)
    assert sorted(os.listdir(out)) == [
        "passes.parquet", "requests.parquet", "summary.json"]           # stale kv gone
    assert json.loads((out / "summary.json").read_text())["completed_requests"] == 1
    assert leftovers(tmp_path) == []


def test_write_result_refuses_a_folder_with_other_files(tmp_path):
    out = tmp_path / "out"
    write_result(small_result(), out)
    (out / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match=r"holds files simmodel did not write \(notes.txt\)"):
        write_result(small_result(), out)
    assert (out / "notes.txt").read_text() == "mine" and leftovers(tmp_path) == []


def test_interrupt_between_renames_keeps_the_earlier_result(tmp_path, monkeypatch):
    """The issue's case: a new summary must never sit beside an old requests table."""
    out = tmp_path / "out"
    old = small_result()
    write_result(old, out)
    before = {n: (out / n).read_bytes() for n in os.listdir(out)}
    real = os.rename
    calls = []

    def rename(src, dst):
        calls.append(dst)
        if len(calls) == 2:                 # the new folder is about to move in
            raise KeyboardInterrupt
        return real(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    new = small_result()
    new.summary["completed_requests"] = 99
    with pytest.raises(KeyboardInterrupt):
        write_result(new, out)
    monkeypatch.setattr(os, "rename", real)
    assert {n: (out / n).read_bytes() for n in os.listdir(out)} == before
    assert leftovers(tmp_path) == []


def test_stale_temporary_folders_of_dead_processes_are_removed(tmp_path):
    dead = 2 ** 22 + 12345                  # above the default pid_max: never running
    stale = tmp_path / f".out.tmp-{dead}-0123abcd"
    stale.mkdir()
    (stale / "summary.json").write_text("{}")
    mine = tmp_path / f".out.tmp-{os.getpid()}-0123abcd"    # this process's: left alone
    mine.mkdir()
    write_result(small_result(), tmp_path / "out")
    assert not stale.exists() and mine.exists()


def test_out_checked_before_the_run(tmp_path, capsys, fake_run):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    scenario = write(tmp_path, SYNTHETIC)
    for out, expected in ((blocker / "sub" / "out", "is a file, not a directory"),
                          ("/proc/simmodel-out", "cannot write in /proc")):
        assert main(["run", scenario, "--out", str(out)]) == 2
        err = capsys.readouterr()
        assert expected in err.err and err.out == ""      # nothing printed, nothing run
        assert "File exists" not in err.err
    assert fake_run.calls == []


def test_cli_write_failure_is_a_user_error(tmp_path, capsys, fake_run, monkeypatch):
    fail_on_second_parquet(monkeypatch)
    scenario = write(tmp_path, SYNTHETIC)
    out = tmp_path / "out"
    assert main(["run", scenario, "--out", str(out)]) == 2
    _, err = capsys.readouterr()
    assert err == (f"simmodel: error: --out: cannot write results to {out}: "
                   f"No space left on device\n")
    assert sorted(os.listdir(tmp_path)) == ["s.yaml"]


# --------------------------------------------------------------------------- format_summary


def test_format_summary_table():
    text = format_summary(small_result().summary)
    lines = text.splitlines()
    assert lines[0].split() == ["(ms)", "mean", "p50", "p90", "p99", "max"]
    assert lines[1].split() == ["ttft", "20.12", "19.00", "21.50", "21.90", "22.00"]
    assert lines[4].split() == ["itl", "-", "-", "-", "-", "-"]   # None, NaN and missing
    assert [line.split()[0] for line in lines[1:6]] == ["ttft", "ttst", "tpot", "itl",
                                                       "e2e_latency"]
    assert "2 / 2" in text
    assert "1234.57 ms" in text
    assert "0.2500" in text and "0.000343" in text
    assert "goodput" not in text


def test_format_summary_all_none_and_empty():
    for summary in ({}, {"num_requests": None, "completed_requests": None,
                         "duration_ms": None, "gpu_hours": None, "mean_ttft_ms": None}):
        text = format_summary(summary)
        assert "- / -" in text
        assert "nan" not in text.lower() and "none" not in text.lower()


def test_format_summary_goodput():
    summary = dict(small_result().summary, goodput_completed_requests=1,
                   goodput_request_throughput_rps=0.81, goodput_output_throughput_tok_s=None)
    text = format_summary(summary)
    assert "goodput requests" in text
    assert "0.810 req/s" in text
    goodput_out = [line for line in text.splitlines() if line.startswith("goodput output")]
    assert goodput_out and goodput_out[0].split()[-1] == "-"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(k=st.integers(0, 12), existing=st.booleans(), exc=st.sampled_from([KeyboardInterrupt, OSError]))
def test_generated_interrupts_during_the_write(tmp_path_factory, k, existing, exc):
    """Interrupt the k-th file operation of a write: the folder then holds the earlier
    result whole (or nothing, for a new folder) or the new one whole; no temp is left."""
    root = tmp_path_factory.mktemp("w")
    out = root / "out"
    if existing:
        write_result(small_result(kv_events=True), out)
    before = sorted(os.listdir(out)) if existing else None
    new = small_result()
    new.summary["completed_requests"] = 7
    calls = []
    real = {"rename": os.rename, "mkdir": os.mkdir, "parquet": pd.DataFrame.to_parquet}

    def hook(name):
        def wrapped(*args, **kwargs):
            calls.append(name)
            if len(calls) == k + 1:
                raise exc("interrupted")
            return real[name](*args, **kwargs)
        return wrapped

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "rename", hook("rename"))
        mp.setattr(os, "mkdir", hook("mkdir"))
        mp.setattr(pd.DataFrame, "to_parquet", hook("parquet"))
        try:
            write_result(new, out)
            finished = True
        except (KeyboardInterrupt, OSError, UserError):   # UserError: the up-front probe
            finished = False
    assert leftovers(root) == []
    if finished:
        assert json.loads((out / "summary.json").read_text())["completed_requests"] == 7
        assert sorted(os.listdir(out)) == ["passes.parquet", "requests.parquet", "summary.json"]
    elif existing:
        assert sorted(os.listdir(out)) == before
        assert json.loads((out / "summary.json").read_text())["completed_requests"] == 2
    else:
        assert not out.exists()


def test_summary_prints_an_sla_verdict():
    from simmodel.config import SlaConfig
    summary = {"p99_ttft_ms": 2000.589, "p99_tpot_ms": 12.0}
    text = format_summary(summary, SlaConfig(ttft_ms=2000.0, itl_ms=50.0))
    assert text.splitlines()[-1].split() == [
        "SLA", "(p99)", "MISSED", "(p99_ttft_ms", "2000.59", ">", "2000,", "p99_tpot_ms",
        "12.00", "<=", "50)"]
    ok = format_summary({"p99_e2e_latency_ms": 10.0}, SlaConfig(e2e_ms=10.0))
    assert ok.splitlines()[-1].split()[2] == "met"
    assert "SLA" not in format_summary(summary, SlaConfig())
