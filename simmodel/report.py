"""Writing a ``Result`` to disk and printing its summary.

``write_result`` never leaves partial output: the whole result is written into a
temporary sibling of the output folder and swapped in with renames
(``simmodel.outdir``), so the folder holds the earlier result or the new one, never a
mix.  An existing folder is replaced only if it holds result files alone.
"""
from __future__ import annotations

import errno
import json
import math
import os
import shutil
from typing import Any, Union

import numpy as np

from simmodel.result import Result

SUMMARY_FILE = "summary.json"
SCENARIO_FILE = "scenario.json"
REQUESTS_FILE = "requests.parquet"
PASSES_FILE = "passes.parquet"
KV_EVENTS_FILE = "kv_events.parquet"
LIFECYCLE_FILE = "lifecycle.parquet"
TELEMETRY_FILE = "telemetry.parquet"
#: Every file ``write_result`` may produce; in an existing output directory, one that is
#: not produced this time (kv_events, lifecycle, telemetry) is removed so no stale result
#: remains.
RESULT_FILES = (SUMMARY_FILE, SCENARIO_FILE, REQUESTS_FILE, PASSES_FILE, KV_EVENTS_FILE, LIFECYCLE_FILE,
                TELEMETRY_FILE)
#: Optional tables: file name -> ``Result`` attribute.
_OPTIONAL_TABLES = ((KV_EVENTS_FILE, "kv_events"), (LIFECYCLE_FILE, "lifecycle"),
                    (TELEMETRY_FILE, "telemetry"))

#: Rows of the latency table: (label, summary-key stem).
_LATENCY_ROWS = (("ttft", "ttft"), ("ttst", "ttst"), ("tpot", "tpot"), ("itl", "itl"),
                 ("e2e_latency", "e2e_latency"))
#: Rows of the summary table for the keys an aic timing model adds, when present.
_AIC_ROWS = (("num_gpu_blocks", "d"), ("prefill_num_gpu_blocks", "d"),
             ("decode_num_gpu_blocks", "d"), ("kv_bytes_per_token", "d"),
             ("energy_kwh", ".6g"), ("mean_power_w", ".1f"), ("power_coverage", ".3f"))
#: Columns of the latency table: (header, summary-key prefix).
_LATENCY_COLS = (("mean", "mean"), ("p50", "median"), ("p90", "p90"), ("p99", "p99"),
                 ("max", "max"))


def write_result(result: Result, out_dir: Union[str, os.PathLike], *,
                 summary_only: bool = False) -> None:
    """Write ``summary.json``, ``scenario.json`` (the scenario as resolved: every
    setting, defaults included, so a result folder says what produced it),
    ``requests.parquet``, ``passes.parquet`` (and ``kv_events.parquet``,
    ``lifecycle.parquet``, ``telemetry.parquet`` when the result has those tables) into
    ``out_dir``; with ``summary_only``, the two JSON files only.

    Missing parent directories are created (and removed again on failure).  On any error
    nothing is left behind: no temporary directory, no half-written file, and an earlier
    result in ``out_dir`` stays whole.  A folder holding other files is refused
    (``UserError``).
    """
    from simmodel import outdir

    out_dir = os.path.abspath(os.fspath(out_dir))
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise NotADirectoryError(errno.ENOTDIR, "exists and is not a directory", out_dir)
    outdir.check_out_dir(out_dir, RESULT_FILES)
    outdir.remove_stale(out_dir)
    created = outdir.make_parents(os.path.dirname(out_dir))
    tmp = None
    try:
        tmp = outdir.temp_sibling(out_dir)
        _write_files(result, tmp, summary_only)
        outdir.swap_in(tmp, out_dir)
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        outdir.remove_created(created)
        raise


def _write_files(result: Result, folder: str, summary_only: bool = False) -> list[str]:
    with open(os.path.join(folder, SUMMARY_FILE), "w", encoding="utf-8") as f:
        json.dump(jsonable(result.summary), f, indent=2, allow_nan=False)
        f.write("\n")
    written = [SUMMARY_FILE]
    if result.scenario is not None:
        import dataclasses
        with open(os.path.join(folder, SCENARIO_FILE), "w", encoding="utf-8") as f:
            json.dump(jsonable(dataclasses.asdict(result.scenario)), f, indent=2,
                      allow_nan=False)
            f.write("\n")
        written.append(SCENARIO_FILE)
    if summary_only:
        return written
    # a table not read yet is written from its columns (no DataFrame built)
    for name, attr in ((REQUESTS_FILE, "requests"), (PASSES_FILE, "passes")) + _OPTIONAL_TABLES:
        table = result.table(attr)
        if table is not None or name in (REQUESTS_FILE, PASSES_FILE):
            table.to_parquet(os.path.join(folder, name), index=False)
            written.append(name)
    return written


def read_result(out_dir: Union[str, os.PathLike], *, tables: bool = True) -> Result:
    """Load a directory written by ``write_result`` (``simmodel run --out``) back into a
    ``Result`` (``scenario``: the ``scenario.json`` mapping, or None in folders written
    before it existed; optional tables are None when absent).  ``tables=False`` also
    accepts a ``--summary-only`` folder (``requests`` / ``passes`` are then None).  A
    missing or unreadable directory raises ``UserError`` naming it."""
    import pandas as pd

    from simmodel.errors import UserError

    folder = os.fspath(out_dir)
    if not os.path.isdir(folder):
        raise UserError(f"{folder}: not a result directory (it does not exist)")
    if not os.path.isfile(os.path.join(folder, SUMMARY_FILE)):
        raise UserError(f"{folder}: not a result directory ({SUMMARY_FILE} is missing)")
    has_tables = all(os.path.isfile(os.path.join(folder, n)) for n in (REQUESTS_FILE, PASSES_FILE))
    if tables and not has_tables:
        raise UserError(f"{folder}: has no per-request tables (written with --summary-only?)")
    try:
        with open(os.path.join(folder, SUMMARY_FILE), encoding="utf-8") as f:
            summary = json.load(f)
        optional = {attr: pd.read_parquet(os.path.join(folder, name))
                  for name, attr in _OPTIONAL_TABLES
                  if os.path.isfile(os.path.join(folder, name))}
        requests = passes = scenario = None
        if has_tables:
            requests = pd.read_parquet(os.path.join(folder, REQUESTS_FILE))
            passes = pd.read_parquet(os.path.join(folder, PASSES_FILE))
        if os.path.isfile(os.path.join(folder, SCENARIO_FILE)):
            with open(os.path.join(folder, SCENARIO_FILE), encoding="utf-8") as f:
                scenario = json.load(f)
    except (OSError, ValueError) as e:
        raise UserError(f"{folder}: cannot read the result: {_first_line(e)}") from None
    summary = {k: (math.nan if v is None else v) for k, v in summary.items()}
    return Result(summary=summary, requests=requests, passes=passes, scenario=scenario,
                  **optional)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def jsonable(value: Any) -> Any:
    """Plain JSON types: numpy scalars unwrapped, tuples as lists, NaN/inf -> null
    (strict JSON)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# --------------------------------------------------------------------------- text


def format_summary(summary: dict, sla=None) -> str:
    """A short table of the headline metrics; missing, None or NaN values print as ``-``.
    With ``sla`` (a set ``SlaConfig``), a last line gives the verdict: met when the p99
    of each bounded latency is within its bound (see :func:`sla_verdict`)."""
    width = 10
    lines = [f"{'(ms)':<12}" + "".join(f"{h:>{width}}" for h, _ in _LATENCY_COLS)]
    for label, stem in _LATENCY_ROWS:
        cells = (_fmt(summary.get(f"{prefix}_{stem}_ms"), ".2f") for _, prefix in _LATENCY_COLS)
        lines.append(f"{label:<12}" + "".join(f"{c:>{width}}" for c in cells))
    lines.append("")
    rows = [
        ("completed / requests", f"{_fmt(summary.get('completed_requests'), 'd')} / "
                                 f"{_fmt(summary.get('num_requests'), 'd')}"),
        ("duration", _with_unit(summary.get("duration_ms"), ".2f", "ms")),
        ("request throughput", _with_unit(summary.get("request_throughput_rps"), ".3f", "req/s")),
        ("output throughput", _with_unit(summary.get("output_throughput_tok_s"), ".2f", "tok/s")),
        ("prefix_cache_reused_ratio", _fmt(summary.get("prefix_cache_reused_ratio"), ".4f")),
        ("gpu_hours", _fmt(summary.get("gpu_hours"), ".6g")),
    ]
    # aic timing: the sizes it derived (``auto``) and the energy of the passes
    if "energy_kwh" in summary:
        rows += [(key, _fmt(summary[key], spec)) for key, spec in _AIC_ROWS if key in summary]
    if "worker_failures" in summary:          # faults or client timeouts (docs/faults.md)
        rows.append(("faults", f"{summary['worker_failures']} worker failures, "
                     f"{summary['retried_requests']} requests retried, "
                     f"{summary['failed_requests']} failed, "
                     f"{summary['timed_out_requests']} timed out"))
    if any(k.startswith("goodput_") for k in summary):
        rows += [
            ("goodput requests", _fmt(summary.get("goodput_completed_requests"), "d")),
            ("goodput req throughput",
             _with_unit(summary.get("goodput_request_throughput_rps"), ".3f", "req/s")),
            ("goodput output throughput",
             _with_unit(summary.get("goodput_output_throughput_tok_s"), ".2f", "tok/s")),
        ]
    if sla is not None and sla.is_set:
        rows.append(("SLA (p99)", sla_verdict(summary, sla)))
    label_width = max(len(label) for label, _ in rows) + 2
    lines += [f"{label:<{label_width}}{text}" for label, text in rows]
    return "\n".join(lines)


def sla_verdict(summary: dict, sla) -> str:
    """``met`` / ``MISSED`` with each bound: p99 TTFT against ``ttft_ms``, p99 TPOT (each
    request's mean inter-token gap) against ``itl_ms``, p99 E2E against ``e2e_ms`` — the
    rule of a sweep's ``sla_met`` (``simmodel.capacity.stats``)."""
    from simmodel.sla import sla_bounds

    parts, ok = [], True
    for key, bound in sla_bounds(sla, 99.0).items():
        value = summary.get(key)
        good = isinstance(value, (int, float)) and value == value and value <= bound["max"]
        ok &= good
        shown = _fmt(value, ".2f")
        parts.append(f"{key} {shown} {'<=' if good else '>'} {bound['max']:g}")
    return ("met" if ok else "MISSED") + " (" + ", ".join(parts) + ")"


def _fmt(value: Any, spec: str) -> str:
    if value is None or isinstance(value, bool):
        return "-" if value is None else str(value)
    if isinstance(value, np.generic):
        value = value.item()
    if not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "-" if math.isnan(value) else str(value)
    if spec == "d":   # counts: a float count prints as an int when it is one
        if isinstance(value, float):
            return f"{int(value):d}" if value.is_integer() else f"{value:.2f}"
        return f"{value:d}"
    return f"{value:{spec}}"


def _with_unit(value: Any, spec: str, unit: str) -> str:
    text = _fmt(value, spec)
    return text if text == "-" else f"{text} {unit}"
