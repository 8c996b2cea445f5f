"""Searches: bisection on synthetic monotone verdicts, a real search against a brute-force
loop of ``simmodel.run``, the early-stop rule (by hand, as a property, and answers equal
to full runs), the load form, and the CLI."""
from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import simmodel
from simmodel.capacity import Bisector, search
from simmodel.capacity.runner import decided_fail, stop_targets
from simmodel.cli import main
from simmodel.metrics.summary import percentile_index

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(ROOT, "scenarios", "tiny.yaml")


def drive(b: Bisector, met) -> list:
    """Run a Bisector against the verdict function ``met``; return the probe order."""
    while (v := b.next_value()) is not None:
        assert v not in b.probes, "a value is never probed twice"
        assert b.lo <= v <= b.hi
        b.record(v, met(v))
    return b.order


def test_integer_min_search_brackets_then_bisects():
    b = Bisector(1, 64, "min", True, 0.0)
    order = drive(b, lambda v: v >= 17)
    assert b.best == 17
    assert order == [1, 2, 4, 8, 16, 32, 24, 20, 18, 17]


def test_min_search_edges():
    b = Bisector(1, 64, "min", True, 0.0)
    assert drive(b, lambda v: True) == [1] and b.best == 1
    b = Bisector(1, 64, "min", True, 0.0)
    drive(b, lambda v: False)
    assert b.best is None and b.order[-1] == 64
    b = Bisector(1, 64, "min", True, 0.0)
    drive(b, lambda v: v >= 64)
    assert b.best == 64


def test_real_max_search_to_tolerance():
    b = Bisector(0.25, 8.0, "max", False, 0.02)
    drive(b, lambda v: v <= 3.7)
    assert b.best <= 3.7
    unmet_above = min(v for v, m in b.probes.items() if not m)
    assert unmet_above > 3.7 and (unmet_above - b.best) <= 0.02 * unmet_above
    b = Bisector(0.25, 8.0, "max", False, 0.02)
    assert drive(b, lambda v: False) == [0.25] and b.best is None
    b = Bisector(0.25, 8.0, "max", False, 0.02)
    drive(b, lambda v: True)
    assert b.best == 8.0


@settings(max_examples=200, deadline=None)
@given(lo=st.integers(0, 50), width=st.integers(1, 500), at=st.integers(-5, 600),
       goal=st.sampled_from(["min", "max"]))
def test_integer_search_finds_any_threshold(lo, width, at, goal):
    hi = lo + width
    b = Bisector(lo, hi, goal, True, 0.0)
    if goal == "min":
        drive(b, lambda v: v >= at)
        want = None if at > hi else max(lo, at)
    else:
        drive(b, lambda v: v <= at)
        want = None if at < lo else min(hi, at)
    assert b.best == want
    assert len(b.order) <= 2 * (width.bit_length() + 2)


def test_decided_fail_by_hand():
    # N = 600, p99: index round(599 * 0.99) = 593, so 600 - 593 = 7 values over decide it
    assert percentile_index(600, 99) == 593
    assert not decided_fail(6, 600, 99) and decided_fail(7, 600, 99)
    assert decided_fail(1, 10, 100) and not decided_fail(0, 10, 100)      # max
    assert percentile_index(4, 50) == 2 and decided_fail(2, 4, 50) and not decided_fail(1, 4, 50)
    assert stop_targets({"p99_ttft_ms": {"max": 1}, "mean_ttft_ms": {"max": 1},
                         "goodput_completed_requests": {"min": 3},
                         "max_e2e_latency_ms": {"max": 9}}) == (
        ("p99_ttft_ms", 1.0), ("max_e2e_latency_ms", 9.0))


@settings(max_examples=300, deadline=None)
@given(data=st.data(), total=st.integers(1, 60), p=st.sampled_from([50, 75, 90, 95, 99, 100]))
def test_early_stop_rule_never_stops_a_run_that_could_meet(data, total, p):
    """Whatever completes later (and however many never complete), once the rule fires
    the final nearest-rank percentile exceeds the bound."""
    n = data.draw(st.integers(1, total))                      # completed at the end
    values = np.array(data.draw(st.lists(st.floats(0, 10), min_size=n, max_size=n)))
    bound = data.draw(st.floats(0, 10))
    order = data.draw(st.permutations(range(n)))               # completion order
    for k in range(n + 1):
        over = int((values[list(order[:k])] > bound).sum())
        if decided_fail(over, total, p):
            final = np.sort(values)[percentile_index(n, p)]
            assert final > bound
            break


OVER = """
name: over
seed: 0
workload:
  synthetic: {requests: 600, input_tokens: 2000, output_tokens: 60, request_rate: 40.0}
cluster:
  workers: 1
  engine: {block_size: 64, num_gpu_blocks: 4096}
"""


def workers_search(tmp_path, base: str, early: bool, target: str) -> str:
    path = tmp_path / f"search_{early}.yaml"
    path.write_text(f"""
base: {base}
search:
  vary: cluster.workers
  range: [1, 12]
  goal: min
  target: {target}
  early_stop: {str(early).lower()}
""")
    return str(path)


def test_search_equals_brute_force_loop_on_a_real_scenario(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(f"""
base: {TINY}
grid: {{cluster.router.mode: [round_robin, kv]}}
search: {{vary: cluster.workers, range: [1, 8], target: {{p99_ttft_ms: {{max: 60}}}}}}
""")
    res = search(str(path), jobs=1)
    sc = simmodel.load_scenario(TINY)
    for entry in res.results:
        mode = entry["grid"]["cluster.router.mode"]
        brute = None
        for w in range(1, 9):
            cl = dataclasses.replace(sc.cluster, workers=w,
                                     router=dataclasses.replace(sc.cluster.router, mode=mode))
            if simmodel.run(dataclasses.replace(sc, cluster=cl)).summary["p99_ttft_ms"] <= 60:
                brute = w
                break
        assert entry["best"] == brute is not None
        assert entry["judged_on"] == "one run per probe"
        best_probe = [p for p in entry["probes"] if p["value"] == brute][0]
        assert best_probe["met"] and best_probe["metrics"]["gpus"] == brute
    assert list(res.answers["best"]) == [e["best"] for e in res.results]


def test_early_stopped_search_gives_the_full_runs_answer(tmp_path):
    base = tmp_path / "over.yaml"
    base.write_text(OVER)
    target = "{p99_ttft_ms: {max: 500}, max_e2e_latency_ms: {max: 30000}}"
    fast = search(workers_search(tmp_path, str(base), True, target), jobs=1)
    full = search(workers_search(tmp_path, str(base), False, target), jobs=1)
    sc = simmodel.load_scenario(str(base))
    brute = next(w for w in range(1, 13) if _meets(simmodel.run(dataclasses.replace(
        sc, cluster=dataclasses.replace(sc.cluster, workers=w))).summary))
    assert fast.results[0]["best"] == full.results[0]["best"] == brute
    assert [(p["value"], p["met"]) for p in fast.results[0]["probes"]] == \
        [(p["value"], p["met"]) for p in full.results[0]["probes"]]
    stopped = fast.sweep.points[fast.sweep.points["status"] == "early_stopped"]
    assert len(stopped) >= 1 and (stopped["completed_requests"] < 600).all()
    early = [p for p in fast.results[0]["probes"] if p["status"] == "early_stopped"]
    assert early and all(p["metrics"]["p99_ttft_ms"] is not None and not p["met"]
                         and p["metrics"]["completed_requests"] < 600 for p in early)
    assert (full.sweep.points["status"] == "ok").all()


def _meets(summary: dict) -> bool:
    return summary["p99_ttft_ms"] <= 500 and summary["max_e2e_latency_ms"] <= 30000


def test_replicated_search_is_judged_on_the_mean_without_early_stop(tmp_path):
    base = tmp_path / "over.yaml"
    base.write_text(OVER)
    path = workers_search(tmp_path, str(base), True, "{p99_ttft_ms: {max: 500}}")
    with open(path, "a") as f:
        f.write("replications: 2\n")
    res = search(path, jobs=1)
    pts = res.sweep.points
    assert (pts["status"] == "ok").all() and set(pts["replication"]) == {0, 1}
    entry = res.results[0]
    assert entry["judged_on"] == "mean of 2 replications"
    for probe in entry["probes"]:
        runs = pts[pts["cluster.workers"] == probe["value"]]
        assert probe["met"] == (runs["p99_ttft_ms"].mean() <= 500)


def test_load_form_highest_speedup(tmp_path):
    path = tmp_path / "load.yaml"
    path.write_text(f"""
base: {TINY}
search:
  vary: workload.synthetic.arrival_interval_ms
  range: [1.0, 100.0]
  goal: min
  target: {{p99_ttft_ms: {{max: 60}}}}
  tolerance: 0.05
""")
    entry = search(str(path), jobs=1).results[0]
    met = {p["value"]: p["met"] for p in entry["probes"]}
    best = entry["best"]
    assert met[best] is True
    below = max(v for v, m in met.items() if not m and v < best)
    assert best - below <= 0.05 * best


def test_cli_search_writes_search_json(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(f"base: {TINY}\nsearch: {{vary: cluster.workers, range: [1, 8], "
                    "target: {p99_ttft_ms: {max: 60}}}\n")
    out = tmp_path / "out"
    assert main(["search", str(path), "--out", str(out), "--jobs", "1", "--quiet"]) == 0
    data = json.loads((out / "search.json").read_text())
    assert data["complete"] is True and data["results"][0]["best"] == 2
    assert json.loads((out / "sweep.json").read_text())["kind"] == "search"
    text = capsys.readouterr().out
    assert "cluster.workers" in text and " 2 " in text


def test_stop_when_is_called_per_ending_request_and_stops_the_run():
    sc = simmodel.load_scenario(TINY)
    seen = []

    def third(req):
        seen.append(req.status)
        return len(seen) == 3

    res = simmodel.run(sc, stop_when=third)
    done = int((res.requests["terminal_status"] == "completed").sum())
    assert res.early_stopped and len(seen) == 3 and 3 <= done < 40
    full = simmodel.run(sc, stop_when=lambda req: False)
    assert not full.early_stopped and (full.requests["terminal_status"] == "completed").all()


@settings(max_examples=200, deadline=None)
@given(lo=st.integers(0, 50), width=st.integers(1, 500), at=st.integers(-5, 600),
       goal=st.sampled_from(["min", "max"]), k=st.integers(2, 5))
def test_parallel_probes_give_the_same_answer(lo, width, at, goal, k):
    met = (lambda v: v >= at) if goal == "min" else (lambda v: v <= at)
    one = Bisector(lo, lo + width, goal, True, 0.0)
    drive(one, met)
    many = Bisector(lo, lo + width, goal, True, 0.0)
    rounds = 0
    while values := many.next_values(k):
        assert len(values) <= k and not set(values) & set(many.probes)
        for v in values:
            many.record(v, met(v))
        rounds += 1
    assert many.best == one.best
    assert rounds <= len(one.order)


def test_parallel_probes_in_a_search_file(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(f"base: {TINY}\nsearch: {{vary: cluster.workers, range: [1, 8], "
                    "target: {p99_ttft_ms: {max: 60}}, parallel_probes: 3}\n")
    entry = search(str(path), jobs=1).results[0]
    assert entry["best"] == 2
    assert [p["value"] for p in entry["probes"]][:3] == [1, 2, 4]     # one round of three
