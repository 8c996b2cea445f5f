"""Side-by-side fidelity and speed check of simmodel against the reference simulator.

    python benchmarks/vs_dynamo.py SCENARIO.yaml [SCENARIO2.yaml ...]
                                   [--dynamo-python PATH] [--json OUT] [--reference-only]

For each scenario, simmodel runs in this process (``load_scenario`` + ``run``, timed
together) and the reference (``ai-dynamo-runtime==1.6.1``, NVIDIA Dynamo's mocker) runs
in a subprocess under its own interpreter through ``benchmarks/dynamo_runner.py``.  The
interpreter is ``--dynamo-python``, else ``$DYNAMO_PYTHON``, else ``/opt/dynref/bin/python``
(see benchmarks/README.md for how to set it up).

What is compared:

* Per request, matched on ``(session_id, turn_index)``: the worst relative error of TTFT
  and of E2E latency (and a check that arrival times agree), plus counts of requests
  whose status, emitted tokens, reused prefix or worker differ.  Trace rows without a
  session id are given simmodel's name ``request_<line>`` in a temporary copy of the
  trace.  But the reference (1.6.1) reports session ids only when the trace has at least
  one multi-turn session; when every session has one turn it reports ``None``, and its
  records are ordered by arrival and then by a random UUID.  Synthetic workloads are
  named ``session_<i>`` (0-based) or ``None`` there and ``request_<i>`` (1-based) here.
  Those cases are matched by shape instead: within each (input_length, requested output)
  group, in order of arrival time; requests of one group that arrive at the very same
  instant are indistinguishable and are paired in order of their token times (counted
  as "tied" in the output).  Synthetic workloads with Poisson arrivals
  (``request_rate``) use the reference's Rust RNG and cannot be matched request by
  request: only their summaries are shown, and only the request and token counts must
  agree (other metrics beyond ``--poisson-tol`` are marked, informationally).
  Requests that simmodel reports as ``incomplete`` (``run.max_sim_time_ms``) are left out:
  the reference drops them from its records.
* Every summary metric, with its relative difference ``|ours - ref| / max(|ref|, 1e-9)``.
  Flagged above ``--tol`` (1e-6), except the percentiles of ITL and of
  output_token_throughput_per_user, which the reference takes from a DDSketch with 0.1%
  relative accuracy: those are flagged above ``--sketch-tol`` (0.2%).  Keys that depend on
  wall-clock time are skipped.
* Wall times: ours (load + run), the reference's in-call time and its whole subprocess.

Exit status: 0 when every scenario is within tolerance, 1 otherwise, 2 on usage errors
(e.g. no reference interpreter).  Not part of the test suite: the project's tests never
need the reference.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RUNNER = HERE / "dynamo_runner.py"
DEFAULT_DYNAMO_PYTHON = "/opt/dynref/bin/python"

#: Summary keys that measure the host, not the simulated system.
#: Agentic runs: the reference also reports a digest of the graph and of its lifecycle
#: events (identifiers of its own bookkeeping, not measurements); simmodel does not.
GRAPH_DESCRIPTOR_KEYS = frozenset({"agentic_graph", "agentic_lifecycle_event_count",
                                   "agentic_lifecycle_digest", "agentic_play_outcomes",
                                   "weka_nested_timestamp_basis"})
WALL_KEYS = frozenset({"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"})
#: Percentile prefixes of the metrics the reference estimates with a DDSketch.
PERCENTILE_PREFIXES = ("median_", "p75_", "p90_", "p95_", "p99_")
SKETCH_METRICS = ("_itl_ms", "_output_token_throughput_per_user")
#: Summary keys that do not depend on when requests arrive (checked even for Poisson runs).
COUNT_KEYS = frozenset({
    "num_requests", "completed_requests", "total_input_tokens", "total_output_tokens",
    "processed_tokens", "num_ttft_samples", "num_tpot_samples", "num_e2e_latency_samples",
    "prefill_gpus_per_worker", "decode_gpus_per_worker",
})


# --------------------------------------------------------------------------------------
# Scenario -> reference arguments
# --------------------------------------------------------------------------------------

def engine_args(scenario, eng=None, worker_type=None) -> dict:
    """The reference's nested canonical engine args for ``eng`` (default: the
    aggregated ``scenario.cluster.engine``); ``worker_type`` for a disaggregated pool."""
    eng = eng if eng is not None else scenario.cluster.engine
    tm = eng.timing_model
    if tm.type == "fixed":
        timing = {"type": "fixed", "prefill_ms": tm.prefill_ms, "decode_ms": tm.decode_ms}
    elif tm.type == "table":
        # The reference's dynamo_profile provider always extrapolates; with
        # extrapolate: false simmodel fails instead, so agreement needs no flag here.
        from simmodel.engine.profile import reference_npz
        timing = {"type": "external", "provider": "dynamo_profile",
                  "config": {"path": reference_npz(tm.path)}}
    else:
        timing = {"type": tm.type}
    engine = {
        "backend": eng.backend,
        "block_size": eng.effective_block_size,
        "num_gpu_blocks": eng.num_gpu_blocks,
        "max_model_len": eng.max_model_len,
        "max_num_seqs": eng.max_num_seqs,
        "max_num_batched_tokens": eng.max_num_batched_tokens,
        "enable_prefix_caching": eng.enable_prefix_caching,
        "enable_chunked_prefill": eng.enable_chunked_prefill,
        "preemption_mode": eng.preemption_mode,
        "speedup_ratio": eng.speedup_ratio,
        "decode_speedup_ratio": eng.decode_speedup_ratio,
        "timing_model": timing,
        "prefill_schedule_interval": eng.prefill_schedule_interval,
        "prefill_decode_interval": eng.prefill_decode_interval,
    }
    if eng.backend == "sglang":
        g = eng.sglang
        engine["sglang"] = {"schedule_policy": g.schedule_policy,
                            "max_prefill_tokens": g.max_prefill_tokens,
                            "chunked_prefill_size": g.chunked_prefill_size,
                            "clip_max_new_tokens": g.clip_max_new_tokens,
                            "schedule_conservativeness": g.schedule_conservativeness}
    if eng.aic_nextn is not None:
        engine.update(aic_nextn=eng.aic_nextn,
                      aic_nextn_accept_rates=",".join(str(r) for r in eng.accept_rates),
                      aic_mtp_seed=eng.aic_mtp_seed)
    if worker_type is not None:
        kt = scenario.cluster.kv_transfer
        engine.update(worker_type=worker_type, kv_transfer_bandwidth=kt.bandwidth_gb_s,
                      kv_transfer_bytes_per_token=kt.bytes_per_token,
                      kv_transfer_timing_mode=kt.timing)
    return {"engine": engine, "dp_size": eng.dp_size,
            "tensor_parallel_size": eng.tensor_parallel_size, "startup_time": eng.startup_time}


def reference_job(scenario, workdir: Path) -> tuple[dict, str]:
    """The runner's job for ``scenario`` and how its requests can be matched.

    The matching mode is ``"ids"`` (trace: try session ids, fall back to shapes),
    ``"shape"`` (synthetic, constant gaps) or ``"summary"`` (Poisson: summaries only).
    """
    wl = scenario.workload
    cl = scenario.cluster
    if cl.disaggregated:
        pool_args = {
            "prefill_engine_args": engine_args(scenario, cl.prefill.engine, "prefill"),
            "decode_engine_args": engine_args(scenario, cl.decode.engine, "decode"),
            "num_prefill_workers": cl.prefill.workers,
            "num_decode_workers": cl.decode.workers,
        }
    else:
        pool_args = {"extra_engine_args": engine_args(scenario), "num_workers": cl.workers}
    if cl.router.mode == "kv":
        r = cl.router
        pool_args["router_config"] = {
            "overlap_score_credit": r.overlap_score_credit,
            "overlap_score_credit_decay": r.overlap_score_credit_decay,
            "prefill_load_scale": r.prefill_load_scale,
            "decode_active_request_weight": r.decode_active_request_weight,
            "router_temperature": r.router_temperature,
            "router_track_active_blocks": r.router_track_active_blocks,
            "router_track_prefill_tokens": r.router_track_prefill_tokens,
            "router_assume_kv_reuse": r.router_assume_kv_reuse,
            "router_queue_threshold": r.router_queue_threshold,
            "router_queue_policy": r.router_queue_policy,
        }
        if r.kv_event_lag_ms is not None:
            pool_args["kv_event_lag_ms"] = r.kv_event_lag_ms
    args = {
        **pool_args,
        "router_mode": {"kv": "kv_router"}.get(cl.router.mode, cl.router.mode),
        "arrival_speedup_ratio": wl.arrival_speedup_ratio,
        "sla_ttft_ms": scenario.sla.ttft_ms,
        "sla_itl_ms": scenario.sla.itl_ms,
        "sla_e2e_ms": scenario.sla.e2e_ms,
    }
    if wl.concurrency is not None:
        args["replay_concurrency"] = wl.concurrency
    if wl.synthetic is None:
        args["max_sim_time_ms"] = scenario.run.max_sim_time_ms
        if wl.format == "azure":
            raise ValueError("the reference has no Azure CSV reader; simmodel's is checked "
                             "against hand-built expectations in tests/test_workload_azure.py")
        if wl.format in ("agentic", "weka"):
            args["trace_format"] = REFERENCE_FORMATS[wl.format]
            model = first_model(Path(wl.trace))
            if model is not None:
                args["execution_model"] = model
            trace = Path(wl.trace)
            files = sorted(str(f) for f in trace.glob("*.json")) if trace.is_dir() else [wl.trace]
            return {"mode": "trace", "trace_files": files, "args": args}, "request_id"
        args["trace_block_size"] = wl.trace_block_size
        args["trace_format"] = REFERENCE_FORMATS[wl.format]
        trace = name_single_turn_rows(Path(wl.trace), workdir / "trace.jsonl")
        return {"mode": "trace", "trace_files": [str(trace)], "args": args}, "ids"
    syn = wl.synthetic
    if scenario.run.max_sim_time_ms is not None:
        # run_mocker_synthetic_trace_replay (1.6.1) has no such parameter.
        raise ValueError("the reference's synthetic replay has no max_sim_time_ms; "
                         "use a trace workload to compare truncated runs")
    args["shared_prefix_ratio"] = syn.shared_prefix_ratio
    args["num_prefix_groups"] = syn.num_prefix_groups
    if syn.request_rate is not None:
        args["request_rate"] = syn.request_rate
        how = "summary"
    else:
        args["arrival_interval_ms"] = syn.arrival_interval_ms
        how = "shape"
    job = {"mode": "synthetic", "args": args,
           "positional": [syn.input_tokens, syn.output_tokens, syn.requests]}
    return job, how


#: simmodel's ``workload.format`` -> the reference's ``trace_format``.
REFERENCE_FORMATS = {"mooncake": "mooncake", "mooncake-delta": "mooncake-delta",
                     "agentic": "agentic_mooncake", "weka": "weka"}


def first_model(path: Path):
    """The ``model`` of an agentic trace's first request row (the reference needs it as
    ``execution_model``); for a Weka conversation, its first declared model."""
    if path.is_dir():
        files = sorted(path.glob("*.json"))
        path = files[0] if files else path
    if path.suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        models = data.get("models") or []
        return models[0] if models else None
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            row = json.loads(line)
            if "schema" in row:
                continue
            return row.get("model")
    return None


def reference_request_id(rec: dict) -> str:
    """The reference names Weka nodes ``weka:<digest>:request:<path>`` in a play
    ``weka:<digest>:play:<conversation id>``; simmodel names them ``<conversation
    id>:<path>``.  Other agentic ids are the trace's own."""
    rid = str(rec.get("request_id"))
    play = str(rec.get("play_id"))
    if rid.startswith("weka:") and ":request:" in rid and ":play:" in play:
        return f"{play.split(':play:', 1)[1]}:{rid.split(':request:', 1)[1]}"
    return rid


def match_by_request_id(ours: list[dict], ref: list[dict]):
    index = {str(r["request_id"]): r for r in ours}
    pairs, ref_only = [], []
    for rec in ref:
        mine = index.pop(reference_request_id(rec), None)
        if mine is None:
            ref_only.append(rec)
        else:
            pairs.append((mine, rec))
    return pairs, list(index.values()), ref_only, 0


def name_single_turn_rows(src: Path, dst: Path) -> Path:
    """Copy a Mooncake trace, giving each row without a session id the name simmodel
    gives it, ``request_<1-based line number>``.

    Checked against 1.6.1: this changes no timing (same per-request records and summary),
    and the reference names such rows the same way by itself in traces that have
    multi-turn sessions; the explicit names only make that independent of its rule.  In
    traces where every session has one turn the reference reports no ids at all, named
    or not, and the comparison falls back to matching by shape.
    """
    with open(src, encoding="utf-8") as fin, open(dst, "w", encoding="utf-8") as fout:
        for lineno, line in enumerate(fin, 1):
            if not line.strip():
                fout.write(line)
                continue
            row = json.loads(line)
            if row.get("session_id") is None:
                row["session_id"] = f"request_{lineno}"
            fout.write(json.dumps(row, separators=(",", ":")) + "\n")
    return dst


def run_reference(python: str, job: dict, workdir: Path) -> dict:
    """Run the job under the reference interpreter; adds ``subprocess_wall_s``."""
    job_path, out_path = workdir / "job.json", workdir / "out.json"
    job_path.write_text(json.dumps(job), encoding="utf-8")
    env = dict(os.environ, DYN_LOG="error")
    start = time.perf_counter()
    proc = subprocess.run([python, str(RUNNER), str(job_path), str(out_path)],
                          env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
        raise RuntimeError(f"reference run failed (exit {proc.returncode}):\n{tail}")
    out = json.loads(out_path.read_text(encoding="utf-8"))
    out["subprocess_wall_s"] = elapsed
    return out


# --------------------------------------------------------------------------------------
# Matching and comparison
# --------------------------------------------------------------------------------------

def _num(value):
    """A float, or None for missing/NaN (pandas gives NaN, the reference None)."""
    if value is None:
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def _int(value):
    value = _num(value)
    return None if value is None else int(value)


def ours_records(result) -> list[dict]:
    """Our requests as dicts, in (arrival_time_ms, uid) order.  The reference's
    per-request ``reused_input_tokens`` is the whole cache hit; ours splits it into the
    prompt part and ``reused_generated_tokens`` (hits on tokens generated before a
    preemption), so the sum is compared."""
    df = result.requests.sort_values(["arrival_time_ms", "uid"], kind="mergesort")
    if "reused_generated_tokens" in df.columns:
        df = df.assign(reused_input_tokens=df["reused_input_tokens"]
                       + df["reused_generated_tokens"])
    return df.to_dict("records")


def _timing_key(rec: dict):
    ft, lt = _num(rec.get("first_token_ms")), _num(rec.get("last_token_ms"))
    return (math.inf if ft is None else ft, math.inf if lt is None else lt)


def _shape(rec: dict):
    return (_int(rec.get("input_length")), _int(rec.get("requested_output_length")))


def match_by_ids(ours: list[dict], ref: list[dict]):
    index = {(str(r["session_id"]), _int(r["turn_index"])): r for r in ours}
    pairs, ref_only = [], []
    for rec in ref:
        mine = index.pop((str(rec["session_id"]), _int(rec["turn_index"])), None)
        if mine is None:
            ref_only.append(rec)
        else:
            pairs.append((mine, rec))
    return pairs, list(index.values()), ref_only, 0


def match_by_shape(ours: list[dict], ref: list[dict]):
    """Pair requests of equal (input_length, requested output) in order of arrival; ties
    in arrival are broken by token times on both sides (they are indistinguishable)."""
    def groups(records):
        out: dict = {}
        for rec in records:
            out.setdefault(_shape(rec), []).append(rec)
        for recs in out.values():
            recs.sort(key=lambda r: (round(_num(r["arrival_time_ms"]) or 0.0, 6),) + _timing_key(r))
        return out

    mine_groups, ref_groups = groups(ours), groups(ref)
    pairs, ours_only, ref_only, tied = [], [], [], 0
    for shape in mine_groups.keys() | ref_groups.keys():
        mine, theirs = mine_groups.get(shape, []), ref_groups.get(shape, [])
        n = min(len(mine), len(theirs))
        pairs.extend(zip(mine[:n], theirs[:n]))
        ours_only.extend(mine[n:])
        ref_only.extend(theirs[n:])
        arrivals = [round(_num(r["arrival_time_ms"]) or 0.0, 6) for r in theirs]
        tied += sum(1 for i, a in enumerate(arrivals)
                    if (i > 0 and arrivals[i - 1] == a) or (i + 1 < len(arrivals) and arrivals[i + 1] == a))
    return pairs, ours_only, ref_only, tied


def rel_err(a, b) -> float:
    """|a - b| / max(|b|, 1e-9); 0 when both are missing, inf when only one is, and 0
    when both are within 1e-12 of each other (a standard deviation of identical values
    is rounding noise, ~1e-13, on either side)."""
    if a is None and b is None:
        return 0.0
    if a is None or b is None:
        return math.inf
    if abs(a - b) <= 1e-12:
        return 0.0
    return abs(a - b) / max(abs(b), 1e-9)


LIFECYCLE_TIMES = ("prefill_admit_ms", "source_held_ms", "destination_reserved_ms",
                   "destination_activated_ms", "decode_admit_ms", "source_released_ms")


def _status(value) -> str:
    """The reference's status under our name: its disaggregated SGLang handoff reports a
    request refused at arrival (``max_model_len``) as ``failed`` (a ``ReserveDestination``
    error, seed disagg.rs ``acknowledge_action``), every other path ``rejected``, as we do."""
    value = str(value)
    return "rejected" if value == "failed" else value


def compare_requests(pairs) -> dict:
    worst = {}
    metrics = ["ttft_ms", "e2e_latency_ms", "arrival_time_ms"]
    # Disaggregated runs: every handoff time too (absolute times, compared like arrivals).
    if pairs and _num(pairs[0][1].get("source_held_ms")) is not None:
        metrics += LIFECYCLE_TIMES
    for metric in metrics:
        best = {"rel_err": 0.0, "session_id": None, "turn_index": None, "ours": None, "ref": None}
        for mine, ref in pairs:
            a, b = _num(mine.get(metric)), _num(ref.get(metric))
            err = rel_err(a, b) if metric in ("ttft_ms", "e2e_latency_ms") else (
                0.0 if a is not None and b is not None and abs(a - b) <= 1e-6 * max(abs(b), 1.0)
                else rel_err(a, b))
            if err > best["rel_err"]:
                best = {"rel_err": err, "session_id": mine.get("session_id"),
                        "turn_index": _int(mine.get("turn_index")), "ours": a, "ref": b}
        worst[metric] = best
    fields = ["terminal_status", "output_length", "reused_input_tokens", "decode_worker_idx",
              "prefill_worker_idx", "admission_count", "readmission_count"]
    if LIFECYCLE_TIMES[0] in metrics:       # disaggregated: the decode side's own hit too
        fields.append("decode_reused_input_tokens")
    mismatches = {}
    for field in fields:
        conv = _status if field == "terminal_status" else _int
        mismatches[field] = sum(1 for mine, ref in pairs
                                if ref.get(field) is not None  # e.g. no prefill pool
                                and conv(mine.get(field)) != conv(ref.get(field)))
    return {"worst": worst, "mismatches": mismatches}


def summary_tolerance(key: str, tol: float, sketch_tol: float) -> float:
    if key.startswith(PERCENTILE_PREFIXES) and any(key.endswith(m) for m in SKETCH_METRICS):
        return sketch_tol
    return tol


def compare_summaries(ours: dict, ref: dict, tol: float, sketch_tol: float,
                      statistical_tol: float | None = None) -> list[dict]:
    """One row per summary key.  With ``statistical_tol`` (Poisson runs, whose arrivals
    differ) only ``COUNT_KEYS`` and non-numeric keys can fail; other keys above it are
    marked ``note="statistical"`` but do not fail."""
    rows = []
    for key in list(ref) + [k for k in ours if k not in ref]:
        if key in WALL_KEYS:
            continue
        if key in GRAPH_DESCRIPTOR_KEYS and key not in ours:
            rows.append({"key": key, "ours": None, "ref": "(graph descriptor)", "rel": None,
                         "limit": None, "flag": False, "note": "reference only, not a metric"})
            continue
        a, b = ours.get(key, "<missing>"), ref.get(key, "<missing>")
        limit = summary_tolerance(key, tol, sketch_tol)
        if key not in ref:
            rows.append({"key": key, "ours": a, "ref": None, "rel": None, "limit": limit,
                         "flag": False, "note": "ours only"})
            continue
        if isinstance(b, (int, float)) and not isinstance(b, bool) or b is None:
            an, bn = _num(a) if a != "<missing>" else None, _num(b)
            if a == "<missing>":
                rel, flag = math.inf, True
            else:
                rel = rel_err(an, bn)
                flag = rel > limit
            row = {"key": key, "ours": a, "ref": b, "rel": rel, "limit": limit, "flag": flag}
            if statistical_tol is not None and key not in COUNT_KEYS and a != "<missing>":
                row.update(flag=False, limit=statistical_tol)
                if rel > statistical_tol:
                    row["note"] = "statistical"
            rows.append(row)
        else:
            same = a == b
            rows.append({"key": key, "ours": a, "ref": b, "rel": 0.0 if same else math.inf,
                         "limit": limit, "flag": not same})
    return rows


# --------------------------------------------------------------------------------------
# One scenario
# --------------------------------------------------------------------------------------

def time_our_process(path: str) -> float:
    """Whole-process wall time of ``python -m simmodel run SCENARIO --out TMP`` (start-up,
    imports, loading, simulation and writing the result files), like the reference's
    subprocess time."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with tempfile.TemporaryDirectory(prefix="vs_dynamo_ours_") as tmp:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "simmodel", "run", path, "--out",
                        str(Path(tmp) / "out")], check=True, env=env,
                       stdout=subprocess.DEVNULL)
        return time.perf_counter() - start


def check_scenario(path: str, python: str, opts) -> dict:
    import simmodel  # the working tree's, see main()

    report: dict = {"scenario": path, "ok": False}
    start = time.perf_counter()
    scenario = simmodel.load_scenario(path)
    load_s = time.perf_counter() - start
    ours, errors = None, []
    if not opts.reference_only:
        start = time.perf_counter()
        try:
            ours = simmodel.run(scenario)
            report["ours_wall_s"] = load_s + (time.perf_counter() - start)
        except Exception as exc:  # still run the reference: does it accept the scenario?
            errors.append(f"simmodel: {type(exc).__name__}: {exc}")

    ref = None
    with tempfile.TemporaryDirectory(prefix="vs_dynamo_") as tmp:
        job, how = reference_job(scenario, Path(tmp))
        report["reference_args"] = dict(job["args"])
        try:
            ref = run_reference(python, job, Path(tmp))
            report.update(ref_wall_s=ref["wall_s"], ref_subprocess_wall_s=ref["subprocess_wall_s"],
                          ref_requests=len(ref["per_request"]))
        except RuntimeError as exc:
            errors.append(f"reference: {exc}")
    if errors:
        if ref is not None:
            errors.append(f"reference: ran fine ({report['ref_requests']} request records, "
                          f"{report['ref_wall_s']:.3f} s in call)")
        report["error"] = "\n  ".join(errors)
        return report
    if ours is None:
        report["ok"] = True
        return report

    if opts.whole_process:
        report["ours_process_wall_s"] = time_our_process(path)
        report["wall_ratio_process"] = (report["ours_process_wall_s"]
                                        / max(ref["subprocess_wall_s"], 1e-12))
    report["wall_ratio"] = report["ours_wall_s"] / max(ref["wall_s"], 1e-12)
    report["wall_ratio_subprocess"] = report["ours_wall_s"] / max(ref["subprocess_wall_s"], 1e-12)
    fields, _ = compare_outputs(ours, ref, how, opts,
                                relabel=scenario.cluster.router.mode == "kv")
    report.update(fields)
    return report


def match_records(mine: list[dict], ref_recs: list[dict], how: str):
    """Pair our records with the reference's by the scenario's matching mode (``how`` from
    ``reference_job``): (description, pairs, ours only, reference only, tied)."""
    if how == "request_id":
        return ("request_id (agentic nodes)",) + match_by_request_id(mine, ref_recs)
    if how == "ids" and ref_recs and all(r.get("session_id") is not None for r in ref_recs):
        return ("(session_id, turn_index)",) + match_by_ids(mine, ref_recs)
    label = ("by shape and arrival order (synthetic: the reference's session names differ "
             "from ours)" if how == "shape" else
             "by shape and arrival order (the reference reports no session ids when "
             "every session has one turn)")
    return (label,) + match_by_shape(mine, ref_recs)


def consistent_relabel(pairs, field: str) -> dict | None:
    """The one bijection from our ``field`` values (worker ids) to the reference's over
    every pair, or None if there is none."""
    perm: dict = {}
    for mine, ref in pairs:
        a, b = _int(mine.get(field)), _int(ref.get(field))
        if a is not None and b is not None and perm.setdefault(a, b) != b:
            return None
    return perm if len(set(perm.values())) == len(perm) else None


def compare_outputs(ours, ref: dict, how: str, opts, relabel: bool = False
                    ) -> tuple[dict, list]:
    """Compare our ``Result`` with the reference's output (``run_reference``) under the
    tolerances of ``opts`` (``tol``, ``sketch_tol``, ``poisson_tol``): the report's
    comparison fields (``ok`` among them) and the matched (ours, reference) pairs.
    With ``relabel`` (the KV router, whose ties the reference breaks at random) worker
    ids that differ by one consistent relabelling are not counted as mismatches."""
    report: dict = {}
    ok = True
    poisson = how == "summary"
    mine = ours_records(ours)
    # The reference drops requests unfinished at max_sim_time_ms from its records.
    incomplete = [r for r in mine if str(r.get("terminal_status")) == "incomplete"]
    mine = [r for r in mine if str(r.get("terminal_status")) != "incomplete"]
    report["ours_incomplete"] = len(incomplete)
    pairs: list = []
    if poisson:
        report["matching"] = ("none: Poisson arrivals use the reference's Rust RNG, so only "
                              "summaries are compared, and only request/token counts must agree")
    else:
        report["matching"], pairs, ours_only, ref_only, tied = match_records(
            mine, ref["per_request"], how)
        per = compare_requests(pairs)
        per["relabelled"] = {}
        for field in ("decode_worker_idx", "prefill_worker_idx") if relabel else ():
            perm = per["mismatches"][field] and consistent_relabel(pairs, field)
            if perm:
                per["mismatches"][field] = 0
                per["relabelled"][field] = perm
        report.update(matched=len(pairs), ours_only=len(ours_only), ref_only=len(ref_only),
                      tied=tied, per_request=per)
        ok &= not ours_only and not ref_only
        ok &= all(per["worst"][m]["rel_err"] <= opts.tol for m in per["worst"])
        ok &= not any(per["mismatches"].values())

    rows = compare_summaries(ours.summary, ref["summary"], opts.tol, opts.sketch_tol,
                             opts.poisson_tol if poisson else None)
    report["summary"] = rows
    ok &= not any(r["flag"] for r in rows)
    report["ok"] = bool(ok)
    return report, pairs


# --------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------

def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}" if math.isfinite(value) else str(value)
    return str(value)


def print_report(rep: dict) -> None:
    print(f"=== {rep['scenario']}")
    if "error" in rep:
        print(f"  ERROR: {rep['error']}")
        return
    if "ours_wall_s" not in rep:
        print(f"  reference only: {rep['ref_requests']} request records, "
              f"in-call {rep['ref_wall_s']:.3f} s, subprocess {rep['ref_subprocess_wall_s']:.3f} s")
        return
    print(f"  matching: {rep['matching']}")
    if "matched" in rep:
        print(f"  requests: {rep['matched']} matched, {rep['ours_only']} only in ours, "
              f"{rep['ref_only']} only in the reference"
              + (f", {rep['tied']} tied in arrival and shape" if rep["tied"] else "")
              + (f"; {rep['ours_incomplete']} of ours incomplete at max_sim_time_ms (not "
                 f"reported by the reference)" if rep["ours_incomplete"] else ""))
        labels = {"ttft_ms": "TTFT", "e2e_latency_ms": "E2E", "arrival_time_ms": "arrival"}
        for metric in rep["per_request"]["worst"]:
            label = labels.get(metric, metric)
            w = rep["per_request"]["worst"][metric]
            print(f"  worst {label} rel err: {_fmt(w['rel_err'])}"
                  + (f"  at ({w['session_id']}, {w['turn_index']}): ours {_fmt(w['ours'])}, "
                     f"ref {_fmt(w['ref'])}" if w["rel_err"] > 0 else ""))
        mism = {k: v for k, v in rep["per_request"]["mismatches"].items() if v}
        print(f"  field mismatches: {mism or 'none'}")
        for field, perm in rep["per_request"].get("relabelled", {}).items():
            print(f"  {field} equal up to one relabelling (ours -> reference: {perm}; the "
                  "reference breaks KV-router ties at random)")
    flagged = sum(r["flag"] for r in rep["summary"])
    noted = sum(r.get("note") == "statistical" for r in rep["summary"])
    print(f"  summary: {len(rep['summary'])} keys, {flagged} flagged"
          + (f", {noted} differ by more than --poisson-tol (informational)" if noted else ""))
    width = max(len(r["key"]) for r in rep["summary"])
    print(f"    {'key':<{width}}  {'ours':>16}  {'reference':>16}  {'rel diff':>10}")
    for r in rep["summary"]:
        mark = ("  <-- FLAG" if r["flag"] else "  (ours only)" if r.get("note") == "ours only"
                else "  ~ (Poisson: informational)" if r.get("note") == "statistical" else "")
        print(f"    {r['key']:<{width}}  {_fmt(r['ours']):>16}  {_fmt(r['ref']):>16}  "
              f"{_fmt(r['rel']) if r['rel'] is not None else '':>10}{mark}")
    print(f"  wall: ours {rep['ours_wall_s']:.3f} s (load+run); reference {rep['ref_wall_s']:.3f} s "
          f"in call, {rep['ref_subprocess_wall_s']:.3f} s subprocess; ratio ours/ref "
          f"{rep['wall_ratio']:.1f}x (in call), {rep['wall_ratio_subprocess']:.1f}x (subprocess)")
    if "ours_process_wall_s" in rep:
        print(f"  whole process: ours {rep['ours_process_wall_s']:.3f} s, reference "
              f"{rep['ref_subprocess_wall_s']:.3f} s; ratio {rep['wall_ratio_process']:.2f}x")
    print(f"  {'OK' if rep['ok'] else 'OUT OF TOLERANCE'}")


def _json_default(value):
    if hasattr(value, "item"):          # numpy scalars
        return value.item()
    return str(value)


def _finite(obj):
    """JSON has no inf/NaN: write them as strings."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def find_python(explicit):
    """The reference interpreter to use and whether it exists."""
    candidate = explicit or os.environ.get("DYNAMO_PYTHON") or DEFAULT_DYNAMO_PYTHON
    return candidate, Path(candidate).exists()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenarios", nargs="+", metavar="SCENARIO.yaml")
    parser.add_argument("--dynamo-python", metavar="PATH",
                        help="reference interpreter (default $DYNAMO_PYTHON, else "
                             f"{DEFAULT_DYNAMO_PYTHON})")
    parser.add_argument("--json", metavar="OUT", help="also save all numbers as JSON")
    parser.add_argument("--tol", type=float, default=1e-6,
                        help="relative tolerance, per request and summary (default 1e-6)")
    parser.add_argument("--sketch-tol", type=float, default=2e-3,
                        help="tolerance for ITL / per-user throughput percentiles (default 0.002)")
    parser.add_argument("--poisson-tol", type=float, default=0.05,
                        help="Poisson workloads (arrivals differ): mark summary metrics that "
                             "differ by more than this; informational only (default 0.05)")
    parser.add_argument("--whole-process", action="store_true",
                        help="also time simmodel as a whole process (python -m simmodel run "
                             "... --out TMP) against the reference's whole subprocess")
    parser.add_argument("--reference-only", action="store_true",
                        help="only run the reference (checks a scenario and times it)")
    opts = parser.parse_args(argv)

    python, found = find_python(opts.dynamo_python)
    if not found:
        print(f"vs_dynamo: reference interpreter {python} not found. Pass --dynamo-python PATH, "
              f"set DYNAMO_PYTHON, or create {DEFAULT_DYNAMO_PYTHON} with\n"
              "  python -m venv /opt/dynref && /opt/dynref/bin/pip install ai-dynamo-runtime==1.6.1",
              file=sys.stderr)
        return 2
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))   # the working tree's simmodel, not an installed copy

    reports = []
    for path in opts.scenarios:
        try:
            rep = check_scenario(path, python, opts)
        except Exception as exc:  # a broken scenario must not hide the others' results
            rep = {"scenario": path, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
        reports.append(rep)
        print_report(rep)
        sys.stdout.flush()

    bad = [r["scenario"] for r in reports if not r["ok"]]
    what = "ran through the reference" if opts.reference_only else "within tolerance"
    print(f"\n{len(reports) - len(bad)} of {len(reports)} scenarios {what}"
          + (f"; failed: {', '.join(bad)}" if bad else ""))
    if opts.json:
        Path(opts.json).write_text(json.dumps(_finite(reports), indent=1, default=_json_default),
                                   encoding="utf-8")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
