"""simmodel: a SimPy simulator of LLM-serving clusters (after NVIDIA Dynamo's mocker).

    import simmodel
    sc = simmodel.load_scenario("scenarios/tiny.yaml")
    res = simmodel.run(sc)        # Result: .summary (dict), .requests, .passes (DataFrames)
"""
from simmodel.config import Scenario
from simmodel.errors import UserError
from simmodel.result import Result


def load_scenario(path: str) -> Scenario:
    """Read a scenario YAML file (see docs/scenario.md)."""
    from simmodel.scenario import load_scenario as _load
    return _load(path)


def run(scenario: Scenario, *, seed: int | None = None, workload=None,
        scaling_policy=None, progress=None, stop_when=None,
        stats_from_ms: float = 0.0, allow_module_policies: bool = False) -> Result:
    """Simulate a scenario and return its Result (``workload``: a ``simmodel.workload.
    Workload`` built in Python, used instead of the scenario's own; ``scaling_policy``: an
    object with the reference's ``initial_tick_ms()`` / ``on_tick(snapshot)``;
    ``progress``: called as ``progress(now_ms, done, total)`` during the run;
    ``stop_when(requests)``: checked at the same moments, true stops the run early;
    ``stats_from_ms``: requests arriving earlier are left out of the statistics).

    A scenario's ``planner: {kind: python}`` policy is code, run here like a script: its
    ``.py`` file in the scenario's folder (or below) is executed when the run starts.
    A policy named by an installed module (``"package.module:attr"``, no such file under
    the folder) is imported only with ``allow_module_policies=True``."""
    if scaling_policy is None:
        from simmodel.cluster.policies import make_policy
        scaling_policy = make_policy(scenario, allow_module_policies=allow_module_policies)
    from simmodel.sim import run as _run
    return _run(scenario, seed=seed, workload=workload, scaling_policy=scaling_policy,
                progress=progress, stop_when=stop_when, stats_from_ms=stats_from_ms)


def sweep(spec_or_path, executor=None, **kwargs):
    """Run a sweep file (see docs/sweep.md): every point x replication, on local
    processes by default or on ``executor`` (a ``concurrent.futures.Executor`` or a
    ``dask.distributed.Client``); returns ``.points`` and ``.summary`` DataFrames.
    Keyword arguments: ``out``, ``jobs``, ``dask``, ``keep_runs``, ``fail_fast``,
    ``on_run`` (see ``simmodel.capacity.sweep``)."""
    from simmodel.capacity import sweep as _sweep
    return _sweep(spec_or_path, executor, **kwargs)


def search(spec_or_path, executor=None, **kwargs):
    """Run a search file (see docs/sweep.md): per grid point, the smallest (``goal:
    min``) or largest (``max``) value of one knob meeting a target, with every probe;
    returns ``.results``, ``.answers`` and ``.probes``.  Arguments as ``sweep``."""
    from simmodel.capacity import search as _search
    return _search(spec_or_path, executor, **kwargs)


__all__ = ["Scenario", "Result", "UserError", "load_scenario", "run", "search", "sweep"]
__version__ = "0.1.0"
