"""Randomized long-run comparison of simmodel against the reference (NVIDIA Dynamo's mocker).

    python benchmarks/long_runs.py [--shapes a,b] [--seeds 1-5] [--scale small|long]
                                   [--bisect] [--keep DIR] [--json OUT] [--dynamo-python PATH]

For every (shape, seed) a Mooncake trace and a scenario are drawn (``long_run_shapes.py``:
KV pressure with preemption, long multi-turn sessions, many workers, hours of simulated
time, the KV router where overlap decides, disaggregated pools) into a temporary folder
and run through both simulators with ``vs_dynamo.py``'s functions and tolerances (1e-6
relative per request and per summary metric).  A case that disagrees gets:

* its **first divergence**: the request whose earliest differing event (admission, first
  token, last token, or a field such as the reused prefix, dated at its admission) comes
  first, with its neighbours in time on both sides;
* **our worker's state at that moment** (``long_run_state.py``): the pass in flight, the
  state it was formed from, the queue and running set, KV blocks active / cached / free;
* with ``--bisect``: the shortest prefix of the trace (sessions in arrival order) that
  still disagrees, found by bisection; its last session is the first divergent request by
  arrival.  With ``--keep DIR`` that prefix trace and scenario are kept.

The KV router breaks cost ties at random in the reference: its shape is run twice there,
a case where the two reference runs differ is reported as ``ref varies`` (not a
disagreement), and worker ids are compared up to a permutation.

Prints a table (shape x seed: agree / disagree, worst TTFT and E2E error, first
divergence) and exits 0 when every case agrees, 1 otherwise, 2 on usage errors.  Not part
of the test suite.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))        # the working tree's simmodel, as vs_dynamo

import vs_dynamo as V  # noqa: E402
from long_run_shapes import SHAPES  # noqa: E402
from long_run_state import dump_state  # noqa: E402

TIMES = ("first_admit_ms", "first_token_ms", "last_token_ms") + V.LIFECYCLE_TIMES
FIELDS = ("reused_input_tokens", "output_length", "terminal_status", "decode_worker_idx",
          "prefill_worker_idx", "admission_count")


# -- one case ----------------------------------------------------------------------------

def write_case(case, path: Path, name: str, rows=None) -> Path:
    """The trace and the scenario of ``case`` in folder ``path``; the scenario's path."""
    path.mkdir(parents=True, exist_ok=True)
    trace = path / f"{name}.jsonl"
    with open(trace, "w", encoding="utf-8") as f:
        for row in case.rows if rows is None else rows:
            f.write(json.dumps(row, separators=(",", ":")) + "\n")
    scen = {"name": name, "seed": 0,
            "workload": {"trace": trace.name, "format": "mooncake", "trace_block_size": 512},
            "cluster": case.cluster, **case.extra}
    out = path / f"{name}.yaml"
    out.write_text(f"# long_runs.py case {name}: {case.note}\n"
                   + yaml.safe_dump(scen, sort_keys=False), encoding="utf-8")
    return out


def run_both(path: Path, python: str, opts, ref_runs: int = 1) -> dict:
    """Both simulators on the scenario at ``path``; the comparison (``vs_dynamo``)."""
    import simmodel
    sc = simmodel.load_scenario(str(path))
    start = time.perf_counter()
    ours = simmodel.run(sc)
    ours_s = time.perf_counter() - start
    with tempfile.TemporaryDirectory(prefix="long_runs_ref_") as tmp:
        job, how = V.reference_job(sc, Path(tmp))
        refs = [V.run_reference(python, job, Path(tmp)) for _ in range(ref_runs)]
    fields, pairs = V.compare_outputs(ours, refs[0], how, opts)
    varies = any(_ref_differs(refs[0], r, how, opts.tol) for r in refs[1:])
    return {"scenario": sc, "fields": fields, "pairs": pairs, "varies": varies,
            "ours_s": ours_s, "ref_s": refs[0]["wall_s"]}


def _ref_differs(a: dict, b: dict, how: str, tol: float) -> bool:
    """Two reference runs of one job disagree on some request's timing."""
    _, pairs, a_only, b_only, _ = V.match_records(a["per_request"], b["per_request"], how)
    return bool(a_only or b_only) or any(divergence(x, y, tol) < math.inf for x, y in pairs)


def relabel(out: dict) -> None:
    """KV router: worker ids that differ by one consistent permutation are not a
    mismatch (the first tie between idle workers is random in the reference)."""
    per = out["fields"].get("per_request")
    if not per or not per["mismatches"].get("decode_worker_idx"):
        return
    perm: dict = {}
    for mine, ref in out["pairs"]:
        a, b = V._int(mine.get("decode_worker_idx")), V._int(ref.get("decode_worker_idx"))
        if perm.setdefault(a, b) != b:
            return
    if len(set(perm.values())) == len(perm):
        per["mismatches"]["decode_worker_idx"] = 0
        f = out["fields"]
        f["ok"] = (not f["ours_only"] and not f["ref_only"]
                   and all(w["rel_err"] <= 1e-6 for w in per["worst"].values())
                   and not any(per["mismatches"].values())
                   and not any(r["flag"] for r in f["summary"]))


# -- the first divergence ---------------------------------------------------------------

def divergence(mine: dict, ref: dict, tol: float, fields=FIELDS) -> float:
    """When the pair first differs: the earliest of both sides' times of an event whose
    delay since arrival differs by more than ``tol`` (relative), or the admission of a
    request with a differing field; inf if the pair agrees."""
    arrival = V._num(ref.get("arrival_time_ms")) or 0.0
    when = math.inf
    for key in TIMES:
        a, b = V._num(mine.get(key)), V._num(ref.get(key))
        if a is None or b is None:
            continue
        if V.rel_err(a - arrival, b - arrival) > tol:
            when = min(when, a, b)
    for key in fields:
        a, b = ref.get(key), mine.get(key)
        if a is None or b is None:
            continue
        conv = V._status if key == "terminal_status" else V._int
        if conv(a) != conv(b):
            starts = [V._num(r.get("first_admit_ms")) for r in (mine, ref)]
            starts = [t for t in starts if t is not None] or [arrival]
            when = min(when, *starts)
    return when


def first_divergences(pairs, tol: float, fields=FIELDS, k: int = 8) -> list:
    """The ``k`` earliest divergent pairs: (time, ours, reference)."""
    out = [(divergence(m, r, tol, fields), m, r) for m, r in pairs]
    out = [x for x in out if x[0] < math.inf]
    out.sort(key=lambda x: (x[0], V._num(x[2].get("arrival_time_ms")) or 0.0))
    return out[:k]


def _rec(r: dict) -> str:
    def f(key):
        v = V._num(r.get(key))
        return "-" if v is None else f"{v:.3f}"
    return (f"admit {f('first_admit_ms')} ft {f('first_token_ms')} lt {f('last_token_ms')} "
            f"reuse {V._int(r.get('reused_input_tokens'))} adm {V._int(r.get('admission_count'))}"
            f" w {V._int(r.get('decode_worker_idx'))}")


def print_divergence(div: list) -> None:
    print(f"    first divergence at {div[0][0]:.3f} ms; the earliest divergent requests:")
    for t, m, r in div:
        print(f"      {m['session_id']}/{V._int(m.get('turn_index'))} arrival "
              f"{V._num(m['arrival_time_ms']):.3f} isl {V._int(m['input_length'])} osl "
              f"{V._int(m['requested_output_length'])}  (at {t:.3f})")
        print(f"        ours {_rec(m)}")
        print(f"        ref  {_rec(r)}")


# -- bisection over trace prefixes ------------------------------------------------------

def sessions_in_order(rows: list) -> list:
    """The rows grouped by session (a row without id is its own), by first arrival."""
    groups: dict = {}
    for i, row in enumerate(rows):
        groups.setdefault(row.get("session_id", f"#{i}"), []).append(row)
    return sorted(groups.values(), key=lambda g: g[0]["timestamp"])


def bisect_prefix(case, name: str, folder: Path, python: str, opts) -> tuple[int, Path]:
    """The fewest leading sessions that still disagree (assumes that adding sessions does
    not make a disagreement go away) and the scenario of that prefix."""
    sess = sessions_in_order(case.rows)
    lo, hi = 0, len(sess)                 # prefix lo agrees (or is empty), prefix hi not
    paths = {}

    def disagrees(k: int) -> bool:
        rows = [r for g in sess[:k] for r in g]
        paths[k] = write_case(case, folder / f"prefix_{k}", f"{name}_first{k}", rows)
        out = run_both(paths[k], python, opts, case.ref_runs)
        if case.relabel_workers:
            relabel(out)
        return not out["fields"]["ok"] and not out["varies"]

    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if disagrees(mid) else (mid, hi)
        print(f"    bisect: {lo} agree, {hi} disagree")
    if hi not in paths:
        paths[hi] = write_case(case, folder / f"prefix_{hi}", f"{name}_first{hi}",
                               [r for g in sess[:hi] for r in g])
    return hi, paths[hi]


# -- main ----------------------------------------------------------------------------------

def parse_seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        out.extend(range(int(a), int(b or a) + 1))
    return out


def one_case(shape: str, seed: int, python: str, opts, root: Path) -> dict:
    case = SHAPES[shape](random.Random(f"{shape}/{seed}"), opts.scale == "long")
    name = f"{shape}_{seed}"
    path = write_case(case, root / name, name)
    out = run_both(path, python, opts, case.ref_runs)
    if case.relabel_workers:
        relabel(out)
    f = out["fields"]
    per = f.get("per_request", {"worst": {}})
    row = {"shape": shape, "seed": seed, "note": case.note, "ok": f["ok"],
           "varies": out["varies"], "requests": f.get("matched"),
           "ttft": per["worst"].get("ttft_ms", {}).get("rel_err", 0.0),
           "e2e": per["worst"].get("e2e_latency_ms", {}).get("rel_err", 0.0),
           "flagged": sum(r["flag"] for r in f["summary"]),
           "ours_s": out["ours_s"], "ref_s": out["ref_s"]}
    status = "agree" if f["ok"] else ("ref varies" if out["varies"] else "DISAGREE")
    print(f"  {name}: {status}  ({case.note}; {row['requests']} requests, worst TTFT "
          f"{row['ttft']:.3g}, E2E {row['e2e']:.3g}, {row['flagged']} summary keys flagged; "
          f"ours {out['ours_s']:.1f} s, reference {out['ref_s']:.1f} s)")
    if f["ok"]:
        return row
    skip = {"decode_worker_idx"} if case.relabel_workers else set()
    fields = tuple(k for k in FIELDS if k not in skip)
    div = first_divergences(out["pairs"], opts.tol, fields)
    if div:
        t, mine, _ = div[0]
        row.update(first_ms=t, first_request=f"{mine['session_id']}/{mine['turn_index']}")
        print_divergence(div)
        print(dump_state(out["scenario"], t, mine))
    if opts.bisect and not out["varies"]:
        k, prefix = bisect_prefix(case, name, root / name, python, opts)
        row.update(bisect_sessions=k, bisect_scenario=str(prefix))
        print(f"    shortest disagreeing prefix: {k} sessions ({prefix})")
    return row


def print_table(rows: list) -> None:
    print("\n| case | workload | result | worst TTFT | worst E2E | first divergence |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        res = "agree" if r["ok"] else ("ref varies" if r["varies"] else "**disagree**")
        first = (f"{r['first_request']} at {r['first_ms']:.1f} ms" if "first_ms" in r
                 else "")
        print(f"| {r['shape']} {r['seed']} | {r['note']} | {res} | {r['ttft']:.2g} | "
              f"{r['e2e']:.2g} | {first} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default=",".join(SHAPES),
                    help=f"comma-separated, of: {', '.join(SHAPES)} (default: all)")
    ap.add_argument("--seeds", default="1-3", help="e.g. 1-5 or 1,4,9 (default 1-3)")
    ap.add_argument("--scale", choices=("small", "long"), default="small")
    ap.add_argument("--bisect", action="store_true",
                    help="bisect a disagreeing case to its shortest disagreeing prefix")
    ap.add_argument("--keep", metavar="DIR", help="keep the traces and scenarios here")
    ap.add_argument("--json", metavar="OUT", help="also save the table as JSON")
    ap.add_argument("--dynamo-python", metavar="PATH")
    ap.add_argument("--tol", type=float, default=1e-6)
    opts = ap.parse_args(argv)
    opts.sketch_tol, opts.poisson_tol = 2e-3, 0.05        # as vs_dynamo's defaults
    shapes = [s for s in opts.shapes.split(",") if s]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        print(f"long_runs: unknown shape(s) {', '.join(unknown)}", file=sys.stderr)
        return 2
    python, found = V.find_python(opts.dynamo_python)
    if not found:
        print(f"long_runs: reference interpreter {python} not found", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory(prefix="long_runs_") as tmp:
        root = Path(opts.keep) if opts.keep else Path(tmp)
        for shape in shapes:
            for seed in parse_seeds(opts.seeds):
                rows.append(one_case(shape, seed, python, opts, root))
                sys.stdout.flush()
    print_table(rows)
    if opts.json:
        Path(opts.json).write_text(json.dumps(rows, indent=1, default=str), encoding="utf-8")
    bad = [r for r in rows if not r["ok"] and not r["varies"]]
    varies = [r for r in rows if not r["ok"] and r["varies"]]
    names = ", ".join(f"{r['shape']} {r['seed']}" for r in bad)
    print(f"\n{len(rows) - len(bad) - len(varies)} of {len(rows)} cases agree"
          + (f"; {len(varies)} not compared (the reference's own runs differ)" if varies
             else "") + (f"; disagree: {names}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
