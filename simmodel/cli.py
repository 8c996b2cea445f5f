"""Command line: a thin shell over ``load_scenario`` -> ``run`` -> ``write_result``, and
over ``read_result`` -> ``simmodel.compare`` / ``simmodel.plots`` to explore results
(the ``plot`` command lives in ``simmodel.cli_plot``, ``sweep``/``search`` in
``simmodel.cli_capacity``).

``simmodel run SCENARIO.yaml [--out DIR] [--seed N] [--max-sim-time-ms X] [--quiet]``
    prints the summary table and, with ``--out``, writes the result files.  On a terminal,
    a run taking more than about a second shows a progress line on stderr (not with
    ``--quiet``, nor when stderr is redirected).
``simmodel compare RESULT_DIR... [--measured FILE] [--keys K1,K2]``
    prints the headline summary metrics of the runs side by side, with each run's
    relative difference to the first; with ``--measured``, also the first run's latency
    percentiles and Kolmogorov–Smirnov distances against a real benchmark's per-request
    CSV/JSONL file.
``simmodel plot RESULT_DIR... --out FIG.png [--kind cdf|timeline|breakdown|throughput]
[--metric M] [--worker N] [--log-x] [--sla-ms X]``
    draws one figure of the runs (``simmodel.plots.figure_for``) and writes it atomically.
``simmodel plot SWEEP_DIR --out FIG.png --kind sweep|pareto|probes [--x KEY] [--y KEY]
[--hue KEY] [--cost K] [--value K] [--metric M] [--log-y] [--sla-ms X]``
    draws one figure of a sweep or search folder (``simmodel.plots.capacity_figure``): a
    summary key against a varied key (``sweep``; the SLA line defaults to the spec's), cost
    against value with the Pareto front (``pareto``), or a search's probes (``probes``).
``simmodel models [--grep TEXT]`` / ``simmodel systems``
    what an aic timing model can name (``simmodel.cli_aic``).

A user mistake (bad scenario, bad trace, bad override, unwritable output, missing or
invalid result directory or sweep folder, bad measured file, unknown key, column or plot
kind) prints
``simmodel: error: <one line>`` to stderr and exits with status 2, without a traceback,
without creating ``--out`` and without printing part of a table.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Optional, Sequence

from simmodel.config import ConfigError, Scenario
from simmodel.errors import UserError

EXIT_OK = 0
EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143
EXIT_BROKEN_PIPE = 141           # 128 + SIGPIPE, as a Unix tool killed by it


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C (results written so far stay valid)."""


def _on_sigterm(signum, frame):
    raise Terminated()


class _UsageError(Exception):
    """A command-line mistake found by argparse (printed as one line, exit 2)."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``simmodel: error: <what> (see simmodel ... -h)``
    instead of a usage block."""

    def error(self, message: str):
        raise _UsageError(f"{message} (see `{self.prog} --help`)")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    # simmodel calls no BLAS routine, and OpenBLAS's threads, started when numpy is
    # imported, cost tens of ms of start-up on a busy machine (benchmarks/README.md,
    # "Start-up"); for this process and its sweep workers.  A user's own setting wins.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except _UsageError as e:
        print(f"{parser.prog}: error: {_one_line(str(e))}", file=sys.stderr)
        return EXIT_USER_ERROR
    except SystemExit as e:          # --help, --version (0)
        return e.code if isinstance(e.code, int) else EXIT_USER_ERROR
    import signal
    import threading
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if main_thread else None
    try:
        return args.func(args)
    except (UserError, ConfigError) as e:
        print(f"{parser.prog}: error: {_one_line(str(e))}", file=sys.stderr)
        return EXIT_USER_ERROR
    except BrokenPipeError:          # `simmodel ... | head`: the reader left; end quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())   # so the exit-time flush cannot fail again
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt as e:
        terminated = isinstance(e, Terminated)
        print(f"{parser.prog}: {'terminated' if terminated else 'interrupted'}",
              file=sys.stderr)
        return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


def _parser() -> argparse.ArgumentParser:
    import simmodel

    parser = _Parser(
        prog="simmodel", description="SimPy simulator of LLM-serving clusters.")
    parser.add_argument("--version", action="version",
                        version=f"simmodel {simmodel.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_run(sub)
    _add_compare(sub)
    from simmodel.cli_plot import add_plot
    add_plot(sub)
    from simmodel.cli_capacity import register
    register(sub)
    from simmodel import cli_aic
    cli_aic.register(sub)
    return parser


def _add_run(sub) -> None:
    run = sub.add_parser("run", help="run one scenario and print its summary",
                         description="Run one scenario and print its summary.")
    run.add_argument("scenario", metavar="SCENARIO.yaml", help="scenario file")
    run.add_argument("--out", metavar="DIR",
                     help="write the result folder here: summary.json, scenario.json, "
                          "requests.parquet, passes.parquet, and kv_events.parquet / "
                          "lifecycle.parquet / telemetry.parquet when the scenario "
                          "records them (replaced whole; a folder with other files is "
                          "refused)")
    run.add_argument("--seed", type=int, metavar="N", help="override the scenario's seed")
    run.add_argument("--max-sim-time-ms", type=float, metavar="X",
                     help="override run.max_sim_time_ms (stop the simulation at X ms)")
    run.add_argument("--quiet", action="store_true",
                     help="no progress line (shown on a terminal once a run takes over 1 s)")
    run.add_argument("--summary-only", action="store_true",
                     help="with --out: write summary.json and scenario.json only (no "
                          "per-request or per-pass tables)")
    run.add_argument("--allow-module-policies", action="store_true",
                     help="let a python planner policy name an installed module "
                          "(\"package.module:attr\"); without it a policy must be a .py "
                          "file in the scenario's folder or below it")
    run.set_defaults(func=_cmd_run)


def _add_compare(sub) -> None:
    compare = sub.add_parser(
        "compare", help="compare the summaries of result directories",
        description="Print the headline summary metrics of result directories (written by "
                    "`simmodel run --out`) side by side, with each run's relative "
                    "difference to the first.")
    compare.add_argument("results", nargs="+", metavar="RESULT_DIR", help="result directory")
    compare.add_argument("--measured", metavar="FILE",
                         help="per-request latencies of a real benchmark (.csv, .jsonl or "
                              ".json; columns ttft_ms/ttft/ttft_s, e2e_latency_ms/e2e_ms/"
                              "e2e/latency_ms/e2e_s, optionally itl, tpot) to compare the "
                              "first run with")
    compare.add_argument("--keys", metavar="K1,K2",
                         help="summary keys to compare (comma-separated; default: the "
                              "headline metrics)")
    _add_label_by(compare)
    compare.set_defaults(func=_cmd_compare)


def _add_label_by(p: argparse.ArgumentParser) -> None:
    p.add_argument("--label-by", metavar="K1,K2",
                   help="label runs by these dotted scenario settings (from each folder's "
                        "scenario.json) instead of by folder name")


def _cmd_run(args: argparse.Namespace) -> int:
    # Imports in the order they are needed (a bad scenario fails before the simulator
    # is loaded; pandas comes with the tables, after the run): see benchmarks/startup.py.
    from simmodel.scenario import load_scenario

    scenario = _apply_overrides(load_scenario(args.scenario), args)
    if args.summary_only and args.out is None:
        raise UserError("--summary-only: needs --out")
    if args.out is not None:
        _check_out_dir(args.out)

    from simmodel import run
    from simmodel.progress import progress_line
    from simmodel.report import format_summary, write_result

    bar = progress_line(sys.stderr, quiet=args.quiet)
    # a python policy is code: one named by an installed module only on opt-in
    opt_in = {"allow_module_policies": True} if args.allow_module_policies else {}
    if bar is None:
        result = run(scenario, **opt_in)
    else:
        try:
            result = run(scenario, progress=bar, **opt_in)
        finally:
            bar.close()          # end the line before the summary or an error message

    if args.out is not None:       # written before printing: a closed pipe cannot lose it
        try:
            write_result(result, args.out, summary_only=args.summary_only)
        except OSError as e:
            raise UserError(f"--out: cannot write results to {args.out}: "
                            f"{e.strerror or e}") from None
    print(format_summary(result.summary, scenario.sla))
    if args.out is not None:
        print(f"\nresults written to {args.out}")
    return EXIT_OK


def _cmd_compare(args: argparse.Namespace) -> int:
    from simmodel.compare import (MEASURED_COLUMNS, compare_measured, compare_summaries,
                                  format_table, load_measured)

    keys = None
    if args.keys is not None:
        keys = [k.strip() for k in args.keys.split(",") if k.strip()]
        if not keys:
            raise UserError("--keys: no key given")
    runs = _read_results(args.results, args.label_by, tables=args.measured is not None)
    measured = load_measured(args.measured) if args.measured is not None else None
    try:
        table = compare_summaries({label: r.summary for label, r in runs.items()}, keys)
    except ValueError as e:
        raise UserError(f"--keys: {e}") from None
    text = format_table(table)
    if measured is not None:
        first, result = next(iter(runs.items()))
        try:   # every metric the file has (ttft, e2e, and itl / tpot if given)
            errors = compare_measured(result.requests, measured, metrics=MEASURED_COLUMNS)
        except ValueError as e:
            raise UserError(f"--measured: {e}") from None
        text += (f"\n\n{first} (simulated) vs {args.measured} (measured); "
                 f"ks: simulated/measured are sample counts\n" + format_table(errors))
    print(text)               # only once everything is computed: no partial output
    return EXIT_OK


def _read_results(dirs: Sequence[str], label_by: Optional[str] = None,
                  tables: bool = True) -> dict:
    """``read_result`` of each directory, keyed by its base name, or with ``label_by``
    (comma-separated dotted scenario keys) by those settings from its scenario.json;
    labels are made unique."""
    from simmodel.report import read_result

    runs: dict = {}
    for d in dirs:
        result = read_result(d, tables=tables)
        base = os.path.basename(os.path.abspath(d)) or d
        if label_by:
            base = _settings_label(d, result.scenario, label_by)
        label, n = base, 1
        while label in runs:
            n += 1
            label = f"{base}_{n}"
        runs[label] = result
    return runs


def _settings_label(folder: str, scenario: Optional[dict], label_by: str) -> str:
    """``"cluster.workers=4, cluster.router.mode=kv"`` from a result's scenario.json."""
    if scenario is None:
        raise UserError(f"--label-by: {folder} has no scenario.json (written by an older "
                        "simmodel)")
    parts = []
    for key in (k.strip() for k in label_by.split(",") if k.strip()):
        node = scenario
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                raise UserError(f"--label-by: {key}: not a setting in {folder}/scenario.json")
            node = node[part]
        parts.append(f"{key}={node}")
    return ", ".join(parts)


def _apply_overrides(scenario: Scenario, args: argparse.Namespace) -> Scenario:
    if args.seed is not None:
        try:
            scenario = dataclasses.replace(scenario, seed=args.seed)
        except ConfigError as e:
            raise UserError(f"--seed: {e.message}") from None
    if args.max_sim_time_ms is not None:
        try:
            run_cfg = dataclasses.replace(scenario.run, max_sim_time_ms=args.max_sim_time_ms)
        except ConfigError as e:
            raise UserError(f"--max-sim-time-ms: {e.message}") from None
        scenario = dataclasses.replace(scenario, run=run_cfg)
    return scenario


def _check_out_dir(out: str) -> None:
    """Fail before a possibly long run if the results could not be written there."""
    from simmodel.outdir import check_out_dir
    from simmodel.report import RESULT_FILES
    check_out_dir(out, RESULT_FILES)


def _one_line(text: str) -> str:
    return " ".join(text.split())
