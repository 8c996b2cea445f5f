"""Where a ``python`` planner's code may come from, and when it runs.

A policy is ``"file.py:attr"`` or ``"module:attr"`` resolved to a ``.py`` file in the
scenario's folder or below it; an installed module only on opt-in
(``--allow-module-policies`` / ``allow_module_policies=True``).  Loading a scenario never
runs the policy's code; the run does.
"""
from __future__ import annotations

import os

import pytest

import simmodel
from simmodel.cli import main
from simmodel.config.policy_ref import policy_file, resolve_policy
from simmodel.errors import UserError

SCENARIO = """\
workload:
  synthetic: {requests: 4, input_tokens: 200, output_tokens: 5, arrival_interval_ms: 100.0}
cluster:
  engine: {timing_model: {type: fixed, prefill_ms: 10.0, decode_ms: 1.0}}
planner: {kind: python, policy: "%s"}
"""

#: Scales to 2 workers at 50 ms; importing it leaves a marker file next to it.
POLICY = """\
import pathlib
pathlib.Path(__file__).with_name("imported.marker").write_text("yes")

class Up:
    def initial_tick_ms(self):
        return 50.0

    def on_tick(self, snap):
        return {"target_prefill": None, "target_decode": 2, "next_tick_ms": None}
"""


def scenario_file(folder, spec, name="s.yaml"):
    path = folder / name
    path.write_text(SCENARIO % spec)
    return path


def scaled(res) -> bool:
    return res.lifecycle.worker.tolist() == [1]


@pytest.mark.parametrize("where,spec", [
    ("pol.py", "pol.py:Up"), ("pol.py", "pol:Up"),
    ("sub/deeper/pol.py", "sub/deeper/pol.py:Up"), ("sub/pol.py", "sub.pol:Up"),
    ("pol.py", "sub/../pol.py:Up"),          # a .. that stays inside is fine
])
def test_policy_files_under_the_scenario_folder_run(tmp_path, where, spec):
    (tmp_path / where).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / where).write_text(POLICY)
    (tmp_path / "sub").mkdir(exist_ok=True)
    res = simmodel.run(simmodel.load_scenario(scenario_file(tmp_path, spec)))
    assert scaled(res)


def test_loading_a_scenario_runs_no_policy_code(tmp_path, capsys):
    (tmp_path / "pol.py").write_text(POLICY)
    sc = simmodel.load_scenario(scenario_file(tmp_path, "pol.py:Up"))
    assert not (tmp_path / "imported.marker").exists()
    simmodel.run(sc)
    assert (tmp_path / "imported.marker").read_text() == "yes"


@pytest.mark.parametrize("spec,message", [
    ("{abs}/evil.py:Up", "absolute paths are not allowed"),
    ("../outside/evil.py:Up", "resolves outside the scenario's folder"),
    ("sub/../../outside/evil.py:Up", "resolves outside the scenario's folder"),
    ("link.py:Up", "resolves outside the scenario's folder"),          # symlink escape
    ("linkdir/evil.py:Up", "resolves outside the scenario's folder"),  # symlinked folder
    ("link:Up", "resolves outside the scenario's folder"),             # module form too
    ("~/evil.py:Up", "absolute paths are not allowed"),
    ("missing.py:Up", "no file missing.py in the scenario's folder"),
    ("pol.py:not-a-name", "'not-a-name' is not a Python attribute name"),
    ("a b:Up", "'a b' is neither a .py file nor a module name"),
])
def test_policies_outside_the_folder_are_refused_when_loading(tmp_path, capsys, spec, message):
    scen = tmp_path / "scen"
    (scen / "sub").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "evil.py").write_text(POLICY)
    os.symlink(outside / "evil.py", scen / "link.py")
    os.symlink(outside, scen / "linkdir")
    (scen / "pol.py").write_text(POLICY)
    path = scenario_file(scen, spec.format(abs=outside))
    with pytest.raises(UserError) as e:
        simmodel.load_scenario(path)
    assert str(e.value).startswith(f"{path}: planner.policy: ") and message in str(e.value)
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()
    assert not (outside / "imported.marker").exists()


@pytest.mark.parametrize("spec", ["http.server:test", "os:abort", "my_installed_policy:Up"])
def test_installed_modules_need_the_opt_in(tmp_path, capsys, spec):
    path = scenario_file(tmp_path, spec)
    sc = simmodel.load_scenario(path)            # the string form is fine: nothing imported
    with pytest.raises(UserError, match="allow it with `simmodel run "
                                        "--allow-module-policies` or simmodel.run"):
        simmodel.run(sc)
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--allow-module-policies" in err
    assert f"importing the installed module {spec.split(':')[0]!r}" in err
    assert not (tmp_path / "out").exists()


def test_installed_module_with_the_opt_in(tmp_path, monkeypatch, capsys):
    site = tmp_path / "site"
    site.mkdir()
    (site / "my_installed_policy.py").write_text(POLICY)
    monkeypatch.syspath_prepend(str(site))
    scen = tmp_path / "scen"
    scen.mkdir()
    path = scenario_file(scen, "my_installed_policy:Up")
    res = simmodel.run(simmodel.load_scenario(path), allow_module_policies=True)
    assert scaled(res)
    out = tmp_path / "out"
    assert main(["run", str(path), "--allow-module-policies", "--quiet", "--out", str(out)]) == 0
    assert (out / "lifecycle.parquet").exists()
    capsys.readouterr()
    missing = scenario_file(scen, "no_such_module_xyz:Up")
    with pytest.raises(UserError, match="cannot import module 'no_such_module_xyz': not found"):
        simmodel.run(simmodel.load_scenario(missing), allow_module_policies=True)


def test_a_file_in_the_folder_wins_over_an_installed_module(tmp_path):
    # "os:Up" with os.py in the scenario's folder is that file, not the standard library.
    (tmp_path / "os.py").write_text(POLICY)
    assert scaled(simmodel.run(simmodel.load_scenario(scenario_file(tmp_path, "os:Up"))))


def test_resolution_is_pure(tmp_path):
    (tmp_path / "pol.py").write_text(POLICY)
    real = os.path.realpath(tmp_path / "pol.py")
    assert resolve_policy("pol:Up", str(tmp_path)).path == real
    assert resolve_policy("pol.py:Up", str(tmp_path)).path == real
    ref = resolve_policy("json:loads", str(tmp_path))
    assert ref.path is None and ref.module == "json"
    assert policy_file("pol.py:Up", str(tmp_path)) == real       # for cache keys
    assert policy_file("json:loads", str(tmp_path)) is None
    assert not (tmp_path / "imported.marker").exists()
    with pytest.raises(UserError, match="needs the scenario's folder"):
        resolve_policy("pol.py:Up", None)


def test_shipped_benchmark_policies_still_resolve():
    bench = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "planner")
    for name in sorted(os.listdir(bench)):
        if name.endswith(".yaml"):
            sc = simmodel.load_scenario(os.path.join(bench, name))
            assert resolve_policy(sc.planner.policy, sc.planner.base_dir).path.endswith(
                "policies.py")


def test_docs_say_a_python_policy_runs_code():
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "scenario.md")) as f:
        text = f.read()
    assert "runs code" in text and "--allow-module-policies" in text
