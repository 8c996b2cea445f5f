"""Result folders say what produced them (scenario.json), `run --summary-only`, and
`compare`/`plot --label-by` labelling runs by their settings."""
from __future__ import annotations

import json
import os

import pytest

from simmodel.cli import main
from simmodel.report import read_result

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(ROOT, "scenarios", "tiny.yaml")


@pytest.fixture
def two_runs(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["run", TINY, "--out", str(a), "--quiet"]) == 0
    assert main(["run", TINY, "--out", str(b), "--quiet", "--seed", "5", "--summary-only"]) == 0
    return a, b


def test_result_folder_records_the_resolved_scenario(two_runs):
    a, b = two_runs
    scenario = json.loads((a / "scenario.json").read_text())
    assert scenario["cluster"]["workers"] == 2 and scenario["seed"] == 0
    assert scenario["cluster"]["engine"]["max_num_seqs"] == 256      # a default, resolved
    assert scenario["source"].endswith("tiny.yaml")
    assert json.loads((b / "scenario.json").read_text())["seed"] == 5
    assert read_result(a).scenario == scenario


def test_summary_only_writes_the_json_files_only(two_runs, capsys):
    _, b = two_runs
    assert sorted(os.listdir(b)) == ["scenario.json", "summary.json"]
    back = read_result(b, tables=False)
    assert back.requests is None and back.summary["num_requests"] == 40
    capsys.readouterr()
    assert main(["plot", str(b), "--out", str(b / "x.png")]) == 2
    assert "has no per-request tables" in capsys.readouterr().err
    assert not (b / "x.png").exists()
    assert main(["run", TINY, "--summary-only"]) == 2
    assert "--summary-only: needs --out" in capsys.readouterr().err


def test_label_by_settings(two_runs, capsys):
    a, b = two_runs
    capsys.readouterr()
    assert main(["compare", str(a), str(b), "--label-by", "seed,cluster.workers"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert "seed=0, cluster.workers=2" in header and "seed=5, cluster.workers=2" in header
    assert main(["compare", str(a), str(b), "--label-by", "cluster.wrkers"]) == 2
    assert "--label-by: cluster.wrkers: not a setting" in capsys.readouterr().err
    fig = a / "cdf.png"
    assert main(["plot", str(a), "--out", str(fig), "--label-by", "seed"]) == 0
    assert fig.is_file()


def test_plot_refuses_misleading_figures(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["run", TINY, "--out", str(a), "--quiet"]) == 0
    assert main(["run", TINY, "--out", str(b), "--quiet", "--seed", "3"]) == 0
    capsys.readouterr()
    fig = tmp_path / "f.png"
    assert main(["plot", str(a), str(b), "--out", str(fig), "--kind", "timeline"]) == 2
    assert "draws one run's workers: give one result folder (got 2)" in capsys.readouterr().err
    assert main(["plot", str(a), str(b), "--out", str(fig), "--kind", "throughput"]) == 2
    assert "throughput is fixed by it" in capsys.readouterr().err
    assert not fig.exists()
    assert main(["plot", str(a), "--out", str(fig), "--kind", "timeline"]) == 0
