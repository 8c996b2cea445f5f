"""``simmodel sweep`` and ``simmodel search``: thin shells over ``simmodel.sweep`` /
``simmodel.search`` (the rest of the command line is ``simmodel.cli``; outside the
``simmodel.capacity`` package, whose import loads pandas, so ``--help`` stays fast).

``simmodel sweep FILE --out DIR [--jobs N | --dask local[:N] | --dask ADDRESS]
[--keep-runs] [--fail-fast] [--quiet]`` runs every point, shows a progress bar over runs
on a terminal, writes DIR (see ``simmodel.capacity.store``) and prints one line per
point with its SLA verdict.  ``simmodel search FILE --out DIR ...`` does the same for a
search and prints the answer per grid point.  A bad file is one line, exit 2, before
anything runs or is written; Ctrl-C (or SIGTERM) writes the tables of the finished runs
marked incomplete and exits 130, and a re-run does only the rest.
"""
from __future__ import annotations

import argparse
import sys


def register(sub) -> None:
    """Add the ``sweep`` and ``search`` subcommands to the CLI's subparsers."""
    for name, helptext in (("sweep", "run every point of a sweep file"),
                           ("search", "find the smallest/largest setting meeting a target")):
        p = sub.add_parser(name, help=helptext, description=helptext[0].upper()
                           + helptext[1:] + " (docs/sweep.md).")
        p.add_argument("spec", metavar="FILE", help=f"{name} file (YAML)")
        p.add_argument("--out", required=True, metavar="DIR",
                       help="output folder: tables, run cache (resumable), sweep.json")
        where = p.add_mutually_exclusive_group()
        where.add_argument("--jobs", type=int, metavar="N",
                           help="local worker processes (default: all cores; 1: in process)")
        where.add_argument("--dask", metavar="local[:N]|ADDRESS",
                           help="run on a dask.distributed LocalCluster (local, local:N) or "
                                "join the scheduler at ADDRESS (needs simmodel[dask])")
        p.add_argument("--keep-runs", action="store_true",
                       help="also write each run's full result folder under DIR/runs/")
        p.add_argument("--fail-fast", action="store_true",
                       help="stop at the first run that fails (default: record and go on)")
        p.add_argument("--quiet", action="store_true", help="no progress bar")
        p.set_defaults(func=_cmd)


def _cmd(args: argparse.Namespace) -> int:
    from simmodel.capacity import report
    from simmodel.capacity.spec import load_spec
    from simmodel.progress import run_bar

    spec = load_spec(args.spec, kind=args.command)
    total = len(spec.points) * spec.replications if args.command == "sweep" else None
    bar = run_bar(total, sys.stderr, quiet=args.quiet, desc=spec.name)

    def on_run(row: dict) -> None:
        if bar is not None:
            bar.update(1)

    kwargs = dict(out=args.out, jobs=args.jobs, dask=args.dask, keep_runs=args.keep_runs,
                  fail_fast=args.fail_fast, on_run=on_run)
    try:
        if args.command == "sweep":
            from simmodel.capacity import sweep
            res = sweep(spec, **kwargs)
            from simmodel.capacity.stats import PERCENTILE_PREFIX
            text = report.sweep_table(res.summary, list(spec.varied), bool(spec.sla),
                                      PERCENTILE_PREFIX[spec.sla_percentile])
            failed = res.points[res.points["status"] == "error"] if len(res.points) else []
        else:
            from simmodel.capacity import search
            res = search(spec, **kwargs)
            text = report.search_table(res.results)
            pts = res.sweep.points
            failed = pts[pts["status"] == "error"] if len(pts) else []
    finally:
        if bar is not None:
            bar.close()
    print(text)
    if len(failed):
        first = failed.iloc[0]
        print(f"\n{len(failed)} run(s) failed; first: point {first['point']}: "
              f"{first['error']}", file=sys.stderr)
    print(f"\nresults written to {args.out}")
    return 0
