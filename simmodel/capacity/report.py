"""The compact tables printed at the end of ``simmodel sweep`` and ``simmodel search``."""
from __future__ import annotations

import math
from typing import Any, Sequence

import pandas as pd

#: Columns of the sweep table: (header, summary stem), shown as mean ± CI half-width;
#: ``{p}`` is the sweep's ``sla_percentile`` prefix (p99, p90, median, max...).
_SWEEP_METRICS = (("{p} TTFT ms", "{p}_ttft_ms"), ("{p} TPOT ms", "{p}_tpot_ms"),
                  ("goodput req", "goodput_completed_requests"), ("GPU-h", "gpu_hours"))


def _fmt(value: Any, spec: str = ".4g") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return f"{int(value)}"          # counts and sizes stay whole numbers
        return f"{value:{spec}}"
    return str(value)


def _cell(row: pd.Series, stem: str) -> str:
    mean = row.get(f"{stem}_mean")
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "-"
    lo, hi = row.get(f"{stem}_ci95_low"), row.get(f"{stem}_ci95_high")
    text = _fmt(float(mean))
    if lo is not None and hi is not None and not (math.isnan(lo) or math.isnan(hi)):
        text += f" ±{(hi - lo) / 2:.2g}"
    return text


def render(header: Sequence[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines)


def sweep_table(summary: pd.DataFrame, varied: Sequence[str], has_sla: bool,
                prefix: str = "p99") -> str:
    """One line per point: label, varied values, n, headline metrics at the SLA's
    percentile ``prefix`` (mean ± 95% CI half-width when there are replications),
    status and the SLA verdict."""
    metrics = [(h.format(p=prefix), s.format(p=prefix)) for h, s in _SWEEP_METRICS
               if f"{s.format(p=prefix)}_mean" in summary.columns]
    header = ["point", "label", *varied, "n", *(h for h, _ in metrics), "status"]
    if has_sla:
        header.append("SLA")
    rows = []
    for _, r in summary.iterrows():
        cells = [str(r["point"]), r.get("label") or "", *(_fmt(r.get(k)) for k in varied),
                 str(r["n"]), *(_cell(r, s) for _, s in metrics), str(r["status"])]
        if has_sla:
            cells.append({True: "met", False: "MISSED"}.get(r.get("sla_met"), "-"))
        rows.append(cells)
    return render(header, rows)


def search_table(results: list) -> str:
    """One line per grid point: its settings, the answer, probes, goodput per GPU."""
    header = ["label", "grid", "vary", "goal", "best", "probes", "goodput/GPU req/s",
              "judged on"]
    rows = []
    for r in results:
        grid = ", ".join(f"{k}={v}" for k, v in r["grid"].items()) or "-"
        best = "none in range" if r["best"] is None else _fmt(r["best"])
        if not r.get("complete", True):
            best = "(interrupted)"
        rows.append([r.get("label") or "", grid, r["vary"], r["goal"], best,
                     str(len(r["probes"])), _fmt(r.get("goodput_rps_per_gpu")),
                     r["judged_on"]])
    return render(header, rows)
