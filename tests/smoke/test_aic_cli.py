"""The aic timing model from the command line: a shipped aic scenario through ``simmodel
run``, ``simmodel models`` / ``simmodel systems``, and a bad name as one line, exit 2."""
from __future__ import annotations

import json
from pathlib import Path

from simmodel.cli import main

from cli_helpers import one_error_line

ROOT = Path(__file__).resolve().parents[2]


def test_a_shipped_aic_scenario_runs_and_reports_what_it_derived(tmp_path, capsys):
    out = tmp_path / "o"
    rc = main(["run", str(ROOT / "scenarios/aic_llama8b_h200.yaml"), "--out", str(out),
               "--quiet", "--max-sim-time-ms", "30000"])
    printed = capsys.readouterr().out
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["completed_requests"] > 0
    assert summary["num_gpu_blocks"] > 0                     # num_gpu_blocks: auto
    scenario = json.loads((out / "scenario.json").read_text())
    assert scenario["cluster"]["engine"]["num_gpu_blocks"] == summary["num_gpu_blocks"]
    # the H200 vLLM database holds no power measurements: no made-up energy
    assert summary["energy_kwh"] is None and summary["mean_power_w"] is None
    assert summary["power_w"] is None and summary["power_coverage"] == 0.0
    assert f"num_gpu_blocks             {summary['num_gpu_blocks']}" in printed
    assert "power_coverage             0.000" in printed


def test_models_and_systems_list_the_library(capsys):
    assert main(["models", "--grep", "mixtral"]) == 0
    assert capsys.readouterr().out.split() == ["mistralai/Mixtral-8x22B-v0.1",
                                               "mistralai/Mixtral-8x7B-v0.1"]
    assert main(["systems"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "aiconfigurator-core 0.12.0"
    h200 = next(line for line in lines if line.startswith("h200_sxm "))
    assert "vllm 0.24.0*" in h200 and "sglang" in h200 and "trtllm" in h200


def test_an_unknown_model_is_one_line_and_exit_2(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text("workload: {synthetic: {requests: 2, input_tokens: 100, output_tokens: 2,"
                    " request_rate: 1.0}}\ncluster: {engine: {timing_model: {type: aic, "
                    "model: acme/Nope-1B, system: h100_sxm}}}\n")
    assert main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    msg = one_error_line(capsys)
    assert msg.startswith(f"{path}: cluster.engine.timing_model.model: unknown model "
                          "'acme/Nope-1B'")
    assert "mistralai/Mixtral-8x7B-v0.1" in msg
    assert not (tmp_path / "o").exists()
