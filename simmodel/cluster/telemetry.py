"""Periodic telemetry (``telemetry: {interval_ms}``): levels of every worker and pool,
sampled in simulated time into one tidy table (``Result.telemetry``).

At ``0, interval, 2·interval, …`` — after the pass ends and arrivals of that instant, before
new batches form there (``phases.SAMPLE``, as the reference samples) — the sampler
records, from each worker's current gauges (``Worker.gauges``), per worker that
exists (not yet removed): KV blocks active / cached (inactive, evictable) / free, running
and waiting requests, and the prompt tokens served from the prefix cache and the
preemptions since the previous sample; per pool: requests held by its router (no worker
yet) and its workers by state.  Rows are ``(time_ms, pool, worker, metric, value)``
(``worker`` -1 for pool rows); columns and metric names are listed in
``simmodel.result``.  Sampling stops once the workload is done (one last sample then).

Event budget: one event per sample.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from simmodel.cluster.phases import Phase, event_at_time
from simmodel.result import TELEMETRY_COLUMNS

if TYPE_CHECKING:
    import pandas as pd


class Telemetry:
    def __init__(self, env, pools: dict, queues: dict, driver, interval_ms: float,
                 until_ms: float | None = None):
        self.env = env
        self.pools = pools              # pool name -> list of workers (read at each sample)
        self.queues = queues            # pool name -> callable() -> requests held by its router
        self.driver = driver
        self.interval = interval_ms
        self.until = until_ms
        self.rows: list[tuple] = []
        self._seen: dict[int, tuple[int, int]] = {}   # id(worker) -> (hits, preemptions)
        for workers in pools.values():
            for w in workers:
                w.record_gauges = True

    def run(self):
        env = self.env
        k = 0
        while True:
            t = k * self.interval
            if self.until is not None and t > self.until:
                return
            yield event_at_time(env, t, Phase.SAMPLE)
            self.sample()
            if self.driver.workload_done():
                return
            k += 1

    def sample(self) -> None:
        now = self.env.now
        rows = self.rows
        for pool, workers in self.pools.items():
            states = {"starting": 0, "active": 0, "draining": 0}
            for w in workers:
                if w.state == "removed" or w.state == "failed":
                    continue
                states[w.state] += 1
                s = w.sched
                active, cached, free, running, waiting = w.gauges()
                hits = s.cache_hit_tokens
                pre = s.preemptions
                last_hits, last_pre = self._seen.get(id(w), (0, 0))
                self._seen[id(w)] = (hits, pre)     # (a repaired worker carries them)
                for metric, value in (
                        ("kv_blocks_active", active), ("kv_blocks_cached", cached),
                        ("kv_blocks_free", free),
                        ("running", running), ("waiting", waiting),
                        ("cache_hit_tokens", hits - last_hits),
                        ("preemptions", pre - last_pre)):
                    rows.append((now, pool, w.idx, metric, value))
            rows.append((now, pool, -1, "router_queue", self.queues[pool]()))
            for state, n in states.items():
                rows.append((now, pool, -1, f"workers_{state}", n))

    def frame(self) -> pd.DataFrame:
        import pandas as pd      # tabulation, after the run: the simulation needs no pandas

        df = pd.DataFrame(self.rows, columns=list(TELEMETRY_COLUMNS))
        df["value"] = df["value"].astype(float)
        return df
