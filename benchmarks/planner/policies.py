"""Scaling policies used to compare simmodel with the reference (``planner_vs_dynamo.py``).

Plain Python with no imports from simmodel, so the same file loads in the reference's
virtualenv.  Each name is a zero-argument factory (``planner: {kind: python, policy:
"policies:NAME"}`` in the benchmark scenarios).
"""


class Steps:
    """Ticks every ``every_ms`` from ``first_ms``; at tick ``k`` (0-based) applies
    ``plan[k] = (target_prefill, target_decode)`` when present."""

    def __init__(self, first_ms, every_ms, plan):
        self.first_ms = first_ms
        self.every_ms = every_ms
        self.plan = plan
        self.k = 0

    def initial_tick_ms(self):
        return self.first_ms

    def on_tick(self, snapshot):
        prefill, decode = self.plan.get(self.k, (None, None))
        self.k += 1
        return {"target_prefill": prefill, "target_decode": decode,
                "next_tick_ms": snapshot["now_ms"] + self.every_ms}


def observe():
    """No scaling: a tick every 37 ms (snapshots only)."""
    return Steps(37.0, 37.0, {})


def agg_up_down():
    """Aggregated: 1 -> 3 workers at 1 s, -> 1 at 3 s (ticks every 250 ms)."""
    return Steps(250.0, 250.0, {3: (None, 3), 11: (None, 1)})


def agg_up_down_fast():
    """Aggregated, fast: 2 -> 4 at the 2nd tick, -> 1 at the 6th, -> 3 at the 9th."""
    return Steps(100.0, 100.0, {1: (None, 4), 5: (None, 1), 8: (None, 3)})


def disagg_up_down():
    """Disaggregated: prefill 1 -> 2 and decode 1 -> 3 at 1 s, back to 1/1 at 3 s."""
    return Steps(250.0, 250.0, {3: (2, 3), 11: (1, 1)})
