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
        scaling_policy=None, progress=None) -> Result:
    """Simulate a scenario and return its Result (``workload``: a ``simmodel.workload.
    Workload`` built in Python, used instead of the scenario's own; ``scaling_policy``: an
    object with the reference's ``initial_tick_ms()`` / ``on_tick(snapshot)``;
    ``progress``: called as ``progress(now_ms, done, total)`` during the run)."""
    from simmodel.sim import run as _run
    return _run(scenario, seed=seed, workload=workload, scaling_policy=scaling_policy,
                progress=progress)


__all__ = ["Scenario", "Result", "UserError", "load_scenario", "run"]
__version__ = "0.1.0"
