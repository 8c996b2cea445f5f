"""The import layers that keep start-up short (benchmarks/README.md, "Start-up"), checked
structurally on ``sys.modules`` of a fresh interpreter running the command line, not by
timing:

* the front (``import simmodel``, ``simmodel --help``, a scenario that fails to load)
  imports no numpy, simpy, pandas, pyarrow, scipy, matplotlib, tqdm or dask;
* the simulation path (scenario -> workload -> cluster -> engine, up to and including
  the first event) imports no pandas or pyarrow (they tabulate and write the results,
  after the run), nor scipy, matplotlib, tqdm (a bar is drawn only after a second, on a
  terminal), dask, or aiconfigurator-core (only an aic timing model imports it);
* a plain run writing its result files imports pyarrow but no pandas (the summary and
  the files come from numpy columns; a DataFrame is built when a table is read);
* a run with telemetry and a planner does load pandas and pyarrow (their tables are
  DataFrames; so the names checked are the real ones);
* the command line asks OpenBLAS for one thread before numpy is imported.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TABLES = ("pandas", "pyarrow")
ELSEWHERE = ("scipy", "matplotlib", "tqdm", "dask", "aiconfigurator_core")
SIMULATOR = ("numpy", "simpy")

#: Runs ``simmodel.cli.main(argv)``; with ``first-event``, stops the run once the
#: simulation has processed its first event.  Last stdout line: ``{"rc", "loaded"}``.
CHILD = textwrap.dedent(f"""\
    import json, os, sys
    NAMES = {TABLES + ELSEWHERE + SIMULATOR!r}

    def report(rc):
        loaded = sorted(n for n in NAMES if n in sys.modules)
        sys.stdout.flush()
        os.write(1, ("\\n" + json.dumps({{"rc": rc, "loaded": loaded}}) + "\\n").encode())
        os._exit(0)

    from simmodel.cli import main
    if sys.argv[1] == "first-event":
        import simmodel.sim as sim

        def first_event(env, *args, **kwargs):
            env.step()
            report(None)
        sim.run_until = sim.run_with_progress = first_event
    report(main(sys.argv[2:]))
""")

#: Every optional part of the simulation path at once: disaggregated pools, the KV
#: router, a load planner (scaling), telemetry, a synthetic workload.
FULL = """\
name: layers
seed: 0
workload:
  synthetic: {requests: 20, input_tokens: 600, output_tokens: 8, arrival_interval_ms: 5.0}
cluster:
  prefill: {workers: 1, engine: {block_size: 64}}
  decode: {workers: 2, engine: {block_size: 64}}
  router: {mode: kv}
planner: {kind: load, interval_ms: 50, min_prefill: 1, max_prefill: 2, min_decode: 1,
          max_decode: 3}
telemetry: {interval_ms: 20}
"""


def run_child(stage: str, *argv: str, cwd: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", CHILD, stage, *argv], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.fixture
def full_scenario(tmp_path: Path) -> Path:
    path = tmp_path / "layers.yaml"
    path.write_text(FULL)
    return path


def test_front_imports_neither_the_simulator_nor_the_tables(tmp_path):
    helped = run_child("cli", "--help", cwd=tmp_path)
    assert helped == {"rc": 0, "loaded": []}
    (tmp_path / "bad.yaml").write_text("workload: {synthetic: {requests: 3}}\n"
                                       "cluster: {workers: 0}\n")
    for scenario in ("missing.yaml", "bad.yaml"):
        bad = run_child("cli", "run", scenario, "--out", str(tmp_path / "o"), cwd=tmp_path)
        assert bad == {"rc": 2, "loaded": []}
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("scenario", ["scenarios/tiny.yaml", "scenarios/table_timing.yaml",
                                      "scenarios/weka_agentic.yaml", "full"])
def test_simulation_path_imports_no_tables(scenario, full_scenario, tmp_path):
    path = full_scenario if scenario == "full" else ROOT / scenario
    got = run_child("first-event", "run", str(path), "--out", str(tmp_path / "o"),
                    "--quiet", cwd=tmp_path)
    assert got["rc"] is None                    # stopped at the first event
    assert set(SIMULATOR) <= set(got["loaded"])
    assert not set(got["loaded"]) & set(TABLES + ELSEWHERE), got["loaded"]


def test_the_tables_come_with_the_end_of_the_run(full_scenario, tmp_path):
    got = run_child("cli", "run", str(full_scenario), "--out", str(tmp_path / "o"),
                    "--quiet", cwd=tmp_path)
    assert got["rc"] == 0
    assert set(TABLES) <= set(got["loaded"])
    assert (tmp_path / "o" / "telemetry.parquet").is_file()


def test_a_plain_run_writes_its_results_without_pandas(tmp_path):
    got = run_child("cli", "run", str(ROOT / "scenarios/tiny.yaml"), "--out",
                    str(tmp_path / "o"), "--quiet", cwd=tmp_path)
    assert got["rc"] == 0
    assert "pyarrow" in got["loaded"] and "pandas" not in got["loaded"], got["loaded"]
    assert (tmp_path / "o" / "passes.parquet").is_file()


@pytest.mark.parametrize("given, expected", [(None, "1"), ("4", "4")])
def test_the_command_line_starts_numpy_without_blas_threads(given, expected, tmp_path):
    """simmodel calls no BLAS routine: the CLI asks OpenBLAS for one thread (numpy starts
    its pool on import), unless the user set ``OPENBLAS_NUM_THREADS``."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("OPENBLAS_NUM_THREADS", None)
    if given is not None:
        env["OPENBLAS_NUM_THREADS"] = given
    code = ("import os, sys\nfrom simmodel.cli import main\nrc = main(sys.argv[1:])\n"
            "print(rc, 'numpy' in sys.modules, os.environ['OPENBLAS_NUM_THREADS'])")
    p = subprocess.run([sys.executable, "-c", code, "run", "missing.yaml"], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=60)
    assert p.stdout.split() == ["2", "False", expected]
