"""`simmodel compare`, `simmodel plot` and the progress line of `simmodel run`, end to end
on result directories written by running scenarios/tiny.yaml (smoke tier, plus unit tests
of the tqdm progress bars with a fake terminal and a fake clock)."""
from __future__ import annotations

import io
import json
import os
import re
import stat

import pandas as pd
import pytest

import simmodel
import simmodel.progress
from simmodel.cli import main

from cli_helpers import one_error_line
from simmodel.progress import ProgressLine, progress_line, run_bar

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(REPO, "scenarios", "tiny.yaml")


#: scenarios/tiny.yaml's workload on one prefill and one decode worker.
TINY_DISAGG = """\
workload:
  synthetic: {requests: 40, input_tokens: 1000, output_tokens: 50, arrival_interval_ms: 20.0,
              shared_prefix_ratio: 0.3, num_prefix_groups: 2}
cluster:
  prefill: {workers: 1, engine: {block_size: 64, num_gpu_blocks: 2048}}
  decode: {workers: 1, engine: {block_size: 64, num_gpu_blocks: 2048}}
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Result directories: scenarios/tiny.yaml with seed 0 (``a``) and 1 (``b``),
    disaggregated (``d``), and at twice the load (``f``)."""
    root = tmp_path_factory.mktemp("runs")
    for name, seed in (("a", "0"), ("b", "1")):
        assert main(["run", TINY, "--out", str(root / name), "--seed", seed, "--quiet"]) == 0
    disagg = root / "disagg.yaml"
    disagg.write_text(TINY_DISAGG)
    assert main(["run", str(disagg), "--out", str(root / "d"), "--quiet"]) == 0
    faster = root / "faster.yaml"                   # tiny at twice the load
    faster.write_text(open(TINY).read().replace("arrival_interval_ms: 20.0",
                                                "arrival_interval_ms: 10.0"))
    assert main(["run", str(faster), "--out", str(root / "f"), "--quiet"]) == 0
    return root


def summary(folder) -> dict:
    return json.loads((folder / "summary.json").read_text())




def rows(text: str) -> dict[str, list[str]]:
    """Table lines keyed by their first cell."""
    return {line.split()[0]: line.split()[1:] for line in text.splitlines() if line.strip()}


# --------------------------------------------------------------------------- compare


def test_compare_one_dir(runs, capsys):
    assert main(["compare", str(runs / "a")]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    table = rows(out)
    assert table["metric"] == ["a"]
    assert table["completed_requests"] == ["40"]
    assert float(table["mean_ttft_ms"][0]) == pytest.approx(summary(runs / "a")["mean_ttft_ms"],
                                                           rel=1e-5)
    assert "goodput_completed_requests" in table          # tiny.yaml has an SLA


def test_compare_two_dirs(runs, capsys):
    assert main(["compare", str(runs / "a"), str(runs / "b")]) == 0
    table = rows(capsys.readouterr().out)
    assert table["metric"] == ["a", "b", "rel_diff_b"]
    a, b = summary(runs / "a")["p90_e2e_latency_ms"], summary(runs / "b")["p90_e2e_latency_ms"]
    assert table["p90_e2e_latency_ms"][2] == f"{(b - a) / abs(a) * 100:+.2f}%"


def test_compare_same_base_name_gets_unique_labels(runs, capsys):
    assert main(["compare", str(runs / "a"), str(runs / "a") + os.sep, "--keys",
                 "mean_ttft_ms, completed_requests"]) == 0
    table = rows(capsys.readouterr().out)
    assert table["metric"] == ["a", "a_2", "rel_diff_a_2"]
    assert list(table) == ["metric", "mean_ttft_ms", "completed_requests"]
    assert table["completed_requests"] == ["40", "40", "+0.00%"]


def test_compare_measured(runs, capsys, tmp_path):
    requests = pd.read_parquet(runs / "a" / "requests.parquet")
    measured = tmp_path / "bench.csv"
    pd.DataFrame({"ttft_s": requests.ttft_ms / 1000.0,
                  "e2e_ms": requests.e2e_latency_ms * 2}).to_csv(measured, index=False)
    assert main(["compare", str(runs / "a"), str(runs / "b"), "--measured", str(measured)]) == 0
    out = capsys.readouterr().out
    head, tail = out.split("\n\n")
    assert "rel_diff_b" in head
    assert tail.splitlines()[0].startswith(f"a (simulated) vs {measured} (measured)")
    lines = [line.split() for line in tail.splitlines()[2:]]
    assert [line[:2] for line in lines] == [[m, s] for m in ("ttft_ms", "e2e_latency_ms")
                                            for s in ("p50", "p90", "p95", "p99", "ks")]
    assert lines[0][4] == "+0.00%"            # the same TTFTs, given in seconds
    assert lines[4][2:] == ["40", "40", "-", "0.0000"]
    assert lines[5][4] == "-50.00%"           # measured E2E doubled
    assert lines[9][5] == "1.0000"            # no overlap at all


def test_compare_errors(runs, capsys, tmp_path):
    a = str(runs / "a")
    missing = str(tmp_path / "nope")
    assert main(["compare", a, missing]) == 2
    assert one_error_line(capsys) == f"{missing}: not a result directory (it does not exist)"

    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["compare", a, str(empty)]) == 2
    assert one_error_line(capsys) == (f"{empty}: not a result directory "
                                      f"(summary.json is missing)")

    assert main(["compare", a, "--keys", "mean_ttft_ms,p42_ttft_ms"]) == 2
    assert one_error_line(capsys) == "--keys: unknown key p42_ttft_ms (in no summary)"
    assert main(["compare", a, "--keys", " , "]) == 2
    assert one_error_line(capsys) == "--keys: no key given"

    bad = tmp_path / "bench.jsonl"
    bad.write_text('{"ttft_ms": 3}\n{"ttft_ms": "slow"}\n')
    assert main(["compare", a, "--measured", str(bad)]) == 2
    assert one_error_line(capsys) == (f"{bad}: line 2: ttft_ms: must be a non-negative "
                                      f"number, got 'slow'")

    no_columns = tmp_path / "bench.csv"
    no_columns.write_text("id,duration\n1,2\n")
    assert main(["compare", a, "--measured", str(no_columns)]) == 2
    assert one_error_line(capsys).startswith(f"{no_columns}: no TTFT or E2E latency column")


def test_compare_usage_error(capsys):
    assert main(["compare"]) == 2
    assert one_error_line(capsys) == ("the following arguments are required: RESULT_DIR "
                                      "(see `simmodel compare --help`)")


# --------------------------------------------------------------------------- plot


def test_plot_writes_png(runs, capsys, tmp_path):
    out = tmp_path / "fig.png"
    assert main(["plot", str(runs / "a"), str(runs / "b"), "--out", str(out)]) == 0
    assert capsys.readouterr().out == f"figure written to {out}\n"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert os.listdir(tmp_path) == ["fig.png"]                  # no temporary file left
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o666 & ~umask  # as any new file


@pytest.mark.parametrize("dirs,extra", [
    ("a", ["--kind", "cdf", "--metric", "e2e_latency_ms", "--log-x", "--sla-ms", "900"]),
    ("a", ["--kind", "timeline", "--worker", "1"]),
    ("d", ["--kind", "breakdown"]),
    ("a f d", ["--kind", "throughput"]),
    ("a f", ["--kind", "throughput", "--metric", "mean_e2e_latency_ms"]),
])
def test_plot_kinds(runs, capsys, tmp_path, dirs, extra):
    out = tmp_path / "fig.png"
    argv = ["plot", *(str(runs / d) for d in dirs.split()), "--out", str(out), *extra]
    assert main(argv) == 0, capsys.readouterr()
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_cannot_draw_is_a_user_error(runs, capsys, tmp_path):
    out = tmp_path / "fig.png"
    assert main(["plot", str(runs / "a"), "--out", str(out), "--kind", "breakdown"]) == 2
    assert one_error_line(capsys).startswith(
        "breakdown plot: TTFT breakdown needs a disaggregated run")
    assert main(["plot", str(runs / "a"), "--out", str(out), "--kind", "timeline",
                 "--worker", "7"]) == 2
    assert one_error_line(capsys).startswith("timeline plot: ")
    assert os.listdir(tmp_path) == []


def fake_figure_for(monkeypatch, calls=None, error=None, fig=None):
    import simmodel.plots

    def figure_for(kind, runs, **options):
        if calls is not None:
            calls.append((kind, runs, options))
        if error is not None:
            raise ValueError(error)
        if fig is not None:
            return fig
        from matplotlib.figure import Figure
        return Figure()

    monkeypatch.setattr(simmodel.plots, "figure_for", figure_for)


def test_plot_passes_options(runs, capsys, tmp_path, monkeypatch):
    calls = []
    fake_figure_for(monkeypatch, calls)
    out = tmp_path / "fig.svg"
    assert main(["plot", str(runs / "a"), str(runs / "a"), "--out", str(out), "--kind",
                 "cdf", "--worker", "1", "--log-x", "--sla-ms", "100"]) == 0
    [(kind, given, options)] = calls
    assert kind == "cdf"
    assert list(given) == ["a", "a_2"] and given["a"].summary["completed_requests"] == 40
    assert options == {"metric": None, "worker": 1, "log_x": True, "sla_ms": 100.0}
    assert out.read_text().lstrip().startswith("<?xml")           # format from the extension


def test_plot_value_error_is_a_user_error(runs, capsys, tmp_path, monkeypatch):
    fake_figure_for(monkeypatch, error="worker 7: no such worker (the runs have 2)")
    out = tmp_path / "fig.png"
    assert main(["plot", str(runs / "a"), "--out", str(out), "--kind", "timeline"]) == 2
    assert one_error_line(capsys) == "timeline plot: worker 7: no such worker (the runs have 2)"
    assert os.listdir(tmp_path) == []


def test_plot_write_failure_leaves_old_file(runs, capsys, tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    class BrokenFigure(Figure):
        """Writes half a file, then fails like a full disk."""

        def savefig(self, f, **kwargs):
            f.write(b"\x89PNG half")
            raise OSError(28, "No space left on device")

    fake_figure_for(monkeypatch, fig=BrokenFigure())
    out = tmp_path / "fig.png"
    out.write_bytes(b"old figure")
    assert main(["plot", str(runs / "a"), "--out", str(out)]) == 2
    assert one_error_line(capsys) == f"--out: cannot write {out}: No space left on device"
    assert out.read_bytes() == b"old figure"
    assert os.listdir(tmp_path) == ["fig.png"]


def test_plot_errors(runs, capsys, tmp_path):
    a = str(runs / "a")
    out = tmp_path / "fig.png"
    assert main(["plot", a, "--out", str(out), "--kind", "pie"]) == 2
    assert one_error_line(capsys) == ("--kind: unknown plot kind 'pie'; valid kinds: "
                                      "cdf, timeline, breakdown, throughput, sweep, "
                                      "pareto, probes")
    assert main(["plot", a, "--out", str(tmp_path)]) == 2
    assert one_error_line(capsys) == f"--out: {tmp_path} is a directory"
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    assert main(["plot", a, "--out", str(blocker / "figs" / "fig.png")]) == 2
    assert one_error_line(capsys) == (f"--out: cannot create {blocker / 'figs'}: {blocker} "
                                      "is a file, not a directory")
    blocker.unlink()
    assert main(["plot", a, "--out", str(tmp_path / "fig.xyz")]) == 2
    assert one_error_line(capsys).startswith("--out: unknown image format 'xyz'; use one of ")
    assert main(["plot", a, str(tmp_path / "nope"), "--out", str(out)]) == 2
    assert one_error_line(capsys) == (f"{tmp_path / 'nope'}: not a result directory "
                                      f"(it does not exist)")
    assert os.listdir(tmp_path) == []
    deep = tmp_path / "no" / "figs" / "fig.png"                     # missing folders made
    assert main(["plot", a, "--out", str(deep)]) == 0 and deep.is_file()
    capsys.readouterr()
    assert main(["plot", a]) == 2                                   # --out is required
    assert "--out" in capsys.readouterr().err


# --------------------------------------------------------------------------- progress


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_line_waits_then_shows_a_tqdm_bar():
    stream, clock = FakeTTY(), FakeClock()
    line = ProgressLine(stream, delay_s=1.0, clock=clock)
    clock.now += 0.9
    line(500.0, 1, 10)
    assert stream.getvalue() == ""                        # not within the first second
    assert not line.drawn
    clock.now += 0.2
    line(2_000.0, 3, 10)
    first = stream.getvalue()
    assert first.startswith("\r") and "\n" not in first   # redrawn in place
    assert " 30%|" in first and "3/10" in first and "req/s" in first
    assert "sim=2.0s" in first
    clock.now += 0.2
    line(812_500.0, 10, 10)
    line.close()
    text = stream.getvalue()
    assert text.startswith(first)
    last = text.rsplit("\r", 1)[-1]                       # tqdm's final redraw on close
    assert "100%|" in last and "10/10" in last and "sim=812.5s" in last
    line.close()                                          # once only
    line(900_000.0, 10, 10)                               # nothing after close
    assert stream.getvalue() == text
    assert text.endswith("]\n") and text.count("\n") == 1


def test_progress_line_follows_the_module_delay(monkeypatch):
    monkeypatch.setattr(simmodel.progress, "DELAY_S", 0.0)
    stream = FakeTTY()
    line = progress_line(stream)                          # DELAY_S read now: 0
    monkeypatch.setattr(simmodel.progress, "DELAY_S", 100.0)
    line(1_500.0, 7, 40)
    assert "7/40" in stream.getvalue() and "sim=1.5s" in stream.getvalue()
    line.close()
    assert stream.getvalue().endswith("\n")


def test_progress_line_silent_short_run():
    stream, clock = FakeTTY(), FakeClock()
    line = ProgressLine(stream, clock=clock)              # DELAY_S = 1 s
    clock.now += 0.5
    line(10.0, 40, 40)
    line.close()
    line.close()
    assert stream.getvalue() == ""                        # no newline either


def test_progress_line_only_on_a_terminal():
    assert progress_line(io.StringIO()) is None
    assert progress_line(FakeTTY(), quiet=True) is None
    assert isinstance(progress_line(FakeTTY()), ProgressLine)
    closed = io.StringIO()
    closed.close()                                        # isatty() raises ValueError
    assert progress_line(closed) is None
    assert progress_line(object()) is None                # no isatty at all


def test_run_bar_counts_runs_on_a_terminal_only():
    stream = FakeTTY()
    bar = run_bar(4, stream, desc="sweep")
    assert "sweep:" in stream.getvalue() and "0/4" in stream.getvalue()   # shown at once
    for _ in range(4):
        bar.update(1)
    bar.close()
    text = stream.getvalue()
    assert "4/4" in text.rsplit("\r", 1)[-1] and "run" in text
    assert text.endswith("\n") and text.count("\n") == 1
    assert run_bar(4, io.StringIO()) is None
    assert run_bar(4, FakeTTY(), quiet=True) is None
    assert run_bar(4, object()) is None


def test_results_identical_with_and_without_progress():
    from simmodel.scenario import load_scenario
    calls = []
    plain = simmodel.run(load_scenario(TINY))
    watched = simmodel.run(load_scenario(TINY),
                           progress=lambda now, done, total: calls.append((now, done, total)))
    assert calls and calls[-1][1] == calls[-1][2] == 40
    wall = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}

    def simulated(summary):                            # all but the wall-clock figures
        return {k: v for k, v in summary.items() if k not in wall}
    assert simulated(watched.summary) == simulated(plain.summary)
    pd.testing.assert_frame_equal(watched.requests, plain.requests)
    pd.testing.assert_frame_equal(watched.passes, plain.passes)


def test_run_shows_progress_on_a_terminal(monkeypatch, capsys):
    monkeypatch.setattr(simmodel.progress, "DELAY_S", 0.0)
    tty = FakeTTY()
    monkeypatch.setattr("sys.stderr", tty)
    assert main(["run", TINY]) == 0
    text = tty.getvalue()
    assert text.startswith("\r")
    last = text.rsplit("\r", 1)[-1]
    assert re.search(r"100%\|.*\| 40/40 \[.*req/s, sim=\d+\.\ds\]\n$", last)
    assert text.count("\n") == 1
    assert "completed / requests" in capsys.readouterr().out


def test_run_quiet_or_not_a_terminal_has_no_progress(monkeypatch, capsys):
    monkeypatch.setattr(simmodel.progress, "DELAY_S", 0.0)
    assert main(["run", TINY]) == 0                        # stderr captured: not a terminal
    assert capsys.readouterr().err == ""
    tty = FakeTTY()
    monkeypatch.setattr("sys.stderr", tty)
    assert main(["run", TINY, "--quiet"]) == 0
    assert tty.getvalue() == ""
    assert "completed / requests" in capsys.readouterr().out


def test_run_short_run_on_a_terminal_is_silent(monkeypatch, capsys):
    tty = FakeTTY()
    monkeypatch.setattr("sys.stderr", tty)
    assert main(["run", TINY]) == 0                        # well under a second
    assert tty.getvalue() == ""
