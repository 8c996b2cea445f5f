"""Command line: a thin shell over ``load_scenario`` -> ``run`` -> ``write_result``, and
over ``read_result`` -> ``simmodel.compare`` / ``simmodel.plots`` to explore results.

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

A user mistake (bad scenario, bad trace, bad override, unwritable output, missing or
invalid result directory, bad measured file, unknown key or plot kind) prints
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


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:          # usage error (2) or --help (0)
        return e.code if isinstance(e.code, int) else EXIT_USER_ERROR
    try:
        return args.func(args)
    except (UserError, ConfigError) as e:
        print(f"{parser.prog}: error: {_one_line(str(e))}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="simmodel", description="SimPy simulator of LLM-serving clusters.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = sub.add_parser("run", help="run one scenario and print its summary",
                         description="Run one scenario and print its summary.")
    run.add_argument("scenario", metavar="SCENARIO.yaml", help="scenario file")
    run.add_argument("--out", metavar="DIR",
                     help="write summary.json, requests.parquet and passes.parquet here")
    run.add_argument("--seed", type=int, metavar="N", help="override the scenario's seed")
    run.add_argument("--max-sim-time-ms", type=float, metavar="X",
                     help="override run.max_sim_time_ms (stop the simulation at X ms)")
    run.add_argument("--quiet", action="store_true",
                     help="no progress line (shown on a terminal once a run takes over 1 s)")
    run.set_defaults(func=_cmd_run)

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
    compare.set_defaults(func=_cmd_compare)

    plot = sub.add_parser(
        "plot", help="draw a figure of result directories",
        description="Draw one figure of result directories (written by "
                    "`simmodel run --out`) into an image file.")
    plot.add_argument("results", nargs="+", metavar="RESULT_DIR", help="result directory")
    plot.add_argument("--out", required=True, metavar="FIG.png",
                      help="image file to write (format from its extension; default png)")
    plot.add_argument("--kind", default="cdf", metavar="KIND",
                      help="cdf | timeline | breakdown | throughput (default: cdf)")
    plot.add_argument("--metric", metavar="M",
                      help="cdf: request column (default ttft_ms); throughput: summary key "
                           "on the y axis (default p99_ttft_ms)")
    plot.add_argument("--worker", type=int, default=0, metavar="N",
                      help="timeline: worker N of the first run (default 0)")
    plot.add_argument("--log-x", action="store_true", help="cdf: logarithmic x axis")
    plot.add_argument("--sla-ms", type=float, metavar="X", help="cdf: an SLA line at X ms")
    plot.set_defaults(func=_cmd_plot)
    return parser


def _cmd_run(args: argparse.Namespace) -> int:
    from simmodel.report import format_summary, write_result
    from simmodel.scenario import load_scenario

    scenario = _apply_overrides(load_scenario(args.scenario), args)
    if args.out is not None:
        _check_out_dir(args.out)

    from simmodel import run     # lazily: keeps `--help` and scenario errors fast
    from simmodel.progress import progress_line

    bar = progress_line(sys.stderr, quiet=args.quiet)
    if bar is None:
        result = run(scenario)
    else:
        try:
            result = run(scenario, progress=bar)
        finally:
            bar.close()          # end the line before the summary or an error message

    print(format_summary(result.summary))
    if args.out is not None:
        try:
            write_result(result, args.out)
        except OSError as e:
            raise UserError(f"--out: cannot write results to {args.out}: "
                            f"{e.strerror or e}") from None
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
    runs = _read_results(args.results)
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


def _cmd_plot(args: argparse.Namespace) -> int:
    from simmodel.plots import FIGURE_KINDS    # no pyplot import, so no backend yet

    if args.kind not in FIGURE_KINDS:
        raise UserError(f"--kind: unknown plot kind {args.kind!r}; "
                        f"valid kinds: {', '.join(FIGURE_KINDS)}")
    fmt = _check_figure_out(args.out)
    runs = _read_results(args.results)

    import matplotlib
    matplotlib.use("Agg")                # files only; never a window
    import matplotlib.pyplot as plt

    from simmodel.plots import figure_for

    try:
        fig = figure_for(args.kind, runs, metric=args.metric, worker=args.worker,
                         log_x=args.log_x, sla_ms=args.sla_ms)
    except ValueError as e:
        raise UserError(f"{args.kind} plot: {e}") from None
    try:
        _save_figure(fig, args.out, fmt)
    except OSError as e:
        raise UserError(f"--out: cannot write {args.out}: {e.strerror or e}") from None
    finally:
        plt.close(fig)
    print(f"figure written to {args.out}")
    return EXIT_OK


def _read_results(dirs: Sequence[str]) -> dict:
    """``read_result`` of each directory, keyed by its base name (made unique)."""
    from simmodel.report import read_result

    runs: dict = {}
    for d in dirs:
        base = os.path.basename(os.path.abspath(d)) or d
        label, n = base, 1
        while label in runs:
            n += 1
            label = f"{base}_{n}"
        runs[label] = read_result(d)
    return runs


def _check_figure_out(out: str) -> str:
    """Fail before loading and drawing if ``out`` cannot be written; return the image
    format (from the extension, png if none)."""
    from matplotlib.backend_bases import FigureCanvasBase

    if os.path.isdir(out):
        raise UserError(f"--out: {out} is a directory")
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        raise UserError(f"--out: cannot write {out}: folder {parent} does not exist")
    fmt = os.path.splitext(out)[1][1:].lower() or "png"
    supported = FigureCanvasBase.get_supported_filetypes()
    if fmt not in supported:
        raise UserError(f"--out: unknown image format {fmt!r}; "
                        f"use one of {', '.join(sorted(supported))}")
    return fmt


def _save_figure(fig, out: str, fmt: str) -> None:
    """``fig.savefig`` into a temporary file beside ``out``, then ``os.replace``: ``out``
    is either the complete new figure or untouched, and no temporary file remains."""
    import secrets

    folder, name = os.path.split(os.path.abspath(out))
    while True:      # not tempfile.mkstemp, which forces mode 0600: the umask applies
        tmp = os.path.join(folder, f".{name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "wb") as f:
            fig.savefig(f, format=fmt)
        os.replace(tmp, out)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


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
    """Fail before a possibly long run if the results could obviously not be written."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise UserError(f"--out: {out} exists and is not a directory")


def _one_line(text: str) -> str:
    return " ".join(text.split())
