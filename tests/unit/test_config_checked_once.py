"""The config is checked once, whole, before any trace is read.

Every rule that depends only on the scenario (each section's values and the rules across
sections: equal block sizes of the two pools, no closed loop on agentic traces)
refuses a scenario file while it is loaded, with the same
one-line message as when these rules were checked as the run was built, and refuses a
``Scenario`` built in Python when it is constructed.  The trace named below does not
exist: the rule's message, not "file not found", proves the rule came first.  And the
config layer imports nothing of the simulator.
"""
from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

import simmodel
from simmodel.config import (ClusterConfig, ConfigError, EngineConfig, PoolConfig,
                             Scenario, SyntheticConfig, WorkloadConfig)
from simmodel.errors import UserError

MISSING = "no_such_trace.jsonl"

#: name -> (YAML after the workload's trace line, key, message, Python cluster, Python workload)
CASES = {
    "pool block sizes differ": (
        "cluster:\n  prefill: {workers: 1, engine: {block_size: 16}}\n"
        "  decode: {workers: 1, engine: {block_size: 32}}\n",
        "cluster.decode.engine.block_size",
        "must equal the prefill pool's (the KV transfer moves whole blocks)",
        ClusterConfig(prefill=PoolConfig(engine=EngineConfig(block_size=16)),
                      decode=PoolConfig(engine=EngineConfig(block_size=32))),
        {}),
    "concurrency on an agentic trace": (
        "  format: agentic\n  concurrency: 2\n",
        "workload.concurrency", "not supported for format 'agentic' (agentic workloads)",
        ClusterConfig(), dict(format="agentic", concurrency=2)),
    "concurrency on a weka trace": (
        "  format: weka\n  concurrency: 2\n",
        "workload.concurrency", "not supported for format 'weka' (agentic workloads)",
        ClusterConfig(), dict(format="weka", concurrency=2)),
}


def scenario_yaml(rest: str) -> str:
    """A scenario replaying the missing trace; ``rest`` continues its workload section."""
    return f"workload:\n  trace: {MISSING}\n" + rest


@pytest.mark.parametrize("name", CASES)
def test_a_file_is_refused_by_the_rule_before_its_trace_is_looked_at(tmp_path, name):
    rest, key, message, _, _ = CASES[name]
    path = tmp_path / "s.yaml"
    path.write_text(scenario_yaml(rest))
    assert not (tmp_path / MISSING).exists()
    with pytest.raises(UserError) as e:
        simmodel.load_scenario(path)
    assert str(e.value) == f"{path}: {key}: {message}"


def test_without_a_broken_rule_the_missing_trace_is_what_is_refused(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(scenario_yaml("  format: agentic\n"))
    with pytest.raises(UserError) as e:
        simmodel.load_scenario(path)
    assert str(e.value) == (f"{path}: workload.trace: file not found: "
                            f"{tmp_path / MISSING}")


@pytest.mark.parametrize("name", CASES)
def test_a_scenario_built_in_python_is_refused_when_constructed(tmp_path, name):
    _, key, message, cluster, workload = CASES[name]
    wl = WorkloadConfig(trace=str(tmp_path / MISSING), **workload)
    with pytest.raises(ConfigError) as e:
        Scenario(workload=wl, cluster=cluster)
    assert (e.value.key, e.value.message) == (key, message)
    assert str(e.value) == f"{key}: {message}"


def test_replacing_a_section_is_checked_too(tmp_path):
    sc = Scenario(workload=WorkloadConfig(trace=str(tmp_path / MISSING)))
    with pytest.raises(ConfigError, match="^cluster.decode.engine.block_size: must equal"):
        dataclasses.replace(sc, cluster=ClusterConfig(
            prefill=PoolConfig(engine=EngineConfig(block_size=16)),
            decode=PoolConfig(engine=EngineConfig(block_size=32))))


def test_a_graph_workload_built_in_python_still_refuses_concurrency():
    # Only the workload shows it is a graph here: the run's own check remains.
    from simmodel.rng import Streams
    from simmodel.workload.synthetic import generate_synthetic

    syn = SyntheticConfig(requests=2, input_tokens=10, output_tokens=2, arrival_interval_ms=1.0)
    sc = Scenario(workload=WorkloadConfig(synthetic=syn, concurrency=1))
    graph = dataclasses.replace(generate_synthetic(syn, engine_block_size=64,
                                                   streams=Streams(0)), kind="agentic")
    with pytest.raises(UserError) as e:
        simmodel.run(sc, workload=graph)
    assert str(e.value) == ("scenario: workload.concurrency: not supported for format "
                            "'mooncake' (agentic workloads)")


SIMULATOR = ("simmodel.cluster", "simmodel.engine", "simmodel.workload", "simmodel.metrics")


def test_the_config_layer_imports_nothing_of_the_simulator(tmp_path):
    (tmp_path / "pol.py").write_text("raise SystemExit('policy code ran')\n")
    path = tmp_path / "s.yaml"
    path.write_text("workload:\n  synthetic: {requests: 2, input_tokens: 10, output_tokens: 2, "
                    "arrival_interval_ms: 1.0}\nplanner: {kind: python, policy: 'pol.py:Up'}\n")
    code = ("import sys, simmodel.config, simmodel.scenario\n"
            f"simmodel.scenario.load_scenario({str(path)!r})\n"
            f"print(sorted(m for m in sys.modules if m.startswith({SIMULATOR!r})))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_no_config_module_imports_the_simulator_even_lazily():
    # What the config layer itself imports, whatever ``simmodel/__init__.py`` pulls in.
    import ast
    import pathlib

    import simmodel.config as config
    import simmodel.scenario as loader

    files = sorted(pathlib.Path(config.__file__).parent.glob("*.py")) + [
        pathlib.Path(loader.__file__)]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            bad = [n for n in names if n.startswith(SIMULATOR)]
            assert not bad, f"{path.name}:{node.lineno} imports {bad}"
