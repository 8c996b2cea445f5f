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
``simmodel plot SWEEP_DIR --out FIG.png --kind sweep|pareto|probes [--x KEY] [--y KEY]
[--hue KEY] [--cost K] [--value K] [--metric M] [--log-y] [--sla-ms X]``
    draws one figure of a sweep or search folder (``simmodel.plots.capacity_figure``): a
    summary key against a varied key (``sweep``; the SLA line defaults to the spec's), cost
    against value with the Pareto front (``pareto``), or a search's probes (``probes``).

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
    _add_plot(sub)
    from simmodel.capacity.cli import register
    register(sub)
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


def _add_plot(sub) -> None:

    plot = sub.add_parser(
        "plot", help="draw a figure of result directories or of a sweep folder",
        description="Draw one figure of result directories (written by "
                    "`simmodel run --out`; kinds cdf, timeline, breakdown, throughput), or "
                    "of one sweep folder (written by `simmodel sweep` or `simmodel search` "
                    "with --out; kinds sweep, pareto, probes), into an image file.")
    plot.add_argument("results", nargs="+", metavar="RESULT_DIR",
                      help="result directory, or one sweep folder for sweep/pareto/probes")
    plot.add_argument("--out", required=True, metavar="FIG.png",
                      help="image file to write (format from its extension; default png)")
    plot.add_argument("--kind", default="cdf", metavar="KIND",
                      help="cdf | timeline | breakdown | throughput (result directories; "
                           "default: cdf) | sweep | pareto | probes (one sweep folder)")
    plot.add_argument("--metric", metavar="M",
                      help="cdf: request column (default ttft_ms); throughput: summary key "
                           "on the y axis (default p99_ttft_ms); probes: metric on the y "
                           "axis (default: the search's first target key)")
    plot.add_argument("--worker", type=int, default=0, metavar="N",
                      help="timeline: worker N of the first run (default 0)")
    plot.add_argument("--log-x", action="store_true", help="cdf: logarithmic x axis")
    plot.add_argument("--sla-ms", type=float, metavar="X",
                      help="cdf: an SLA line at X ms; sweep: a horizontal SLA line at X "
                           "(default: the sweep spec's SLA matching --y: ttft_ms, itl_ms "
                           "for itl/tpot, e2e_ms)")
    _add_capacity_plot_options(plot)
    _add_label_by(plot)
    plot.set_defaults(func=_cmd_plot)


def _add_label_by(p: argparse.ArgumentParser) -> None:
    p.add_argument("--label-by", metavar="K1,K2",
                   help="label runs by these dotted scenario settings (from each folder's "
                        "scenario.json) instead of by folder name")


def _cmd_run(args: argparse.Namespace) -> int:
    from simmodel.report import format_summary, write_result
    from simmodel.scenario import load_scenario

    scenario = _apply_overrides(load_scenario(args.scenario), args)
    if args.summary_only and args.out is None:
        raise UserError("--summary-only: needs --out")
    if args.out is not None:
        _check_out_dir(args.out)

    from simmodel import run     # lazily: keeps `--help` and scenario errors fast
    from simmodel.progress import progress_line

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


def _add_capacity_plot_options(plot: argparse.ArgumentParser) -> None:
    """The ``plot`` options of the sweep-folder kinds (sweep, pareto, probes)."""
    plot.add_argument("--x", metavar="KEY",
                      help="sweep: varied scenario key on the x axis (e.g. cluster.workers)")
    plot.add_argument("--y", metavar="KEY",
                      help="sweep: summary key on the y axis, without _mean (e.g. "
                           "p99_ttft_ms)")
    plot.add_argument("--hue", metavar="KEY",
                      help="sweep, pareto: varied key giving one line / colour per value "
                           "(e.g. cluster.router.mode)")
    plot.add_argument("--cost", default="gpu_hours", metavar="K",
                      help="pareto: summary key or column on the x axis, lower is better "
                           "(default gpu_hours)")
    plot.add_argument("--value", default="goodput_completed_requests", metavar="K",
                      help="pareto: summary key on the y axis, higher is better (default "
                           "goodput_completed_requests)")
    plot.add_argument("--log-y", action="store_true", help="sweep: logarithmic y axis")


def _cmd_plot(args: argparse.Namespace) -> int:
    # no pyplot import, so no backend yet
    from simmodel.plots import CAPACITY_KINDS, FIGURE_KINDS

    if args.kind not in FIGURE_KINDS + CAPACITY_KINDS:
        raise UserError(f"--kind: unknown plot kind {args.kind!r}; "
                        f"valid kinds: {', '.join(FIGURE_KINDS + CAPACITY_KINDS)}")
    fmt = _check_figure_out(args.out)
    capacity = args.kind in CAPACITY_KINDS
    data = _read_sweep_folder(args) if capacity else _read_results(args.results, args.label_by)
    if not capacity:
        _check_runs_fit(args.kind, data)

    import matplotlib
    matplotlib.use("Agg")                # files only; never a window
    import matplotlib.pyplot as plt

    from simmodel.plots import capacity_figure, figure_for

    try:
        if capacity:
            fig = capacity_figure(args.kind, data, x=args.x, y=args.y, hue=args.hue,
                                  sla=args.sla_ms, log_y=args.log_y, cost=args.cost,
                                  value=args.value, metric=args.metric)
        else:
            fig = figure_for(args.kind, data, metric=args.metric, worker=args.worker,
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


def _read_sweep_folder(args: argparse.Namespace) -> dict:
    """The tables of the one sweep folder a capacity plot reads (``read_sweep_dir``);
    checks that ``--kind sweep`` has ``--x`` and ``--y``, naming the keys there are."""
    from simmodel.plots.capacity_data import read_sweep_dir, summary_keys, varied_keys

    if len(args.results) != 1:
        raise UserError(f"--kind {args.kind}: give one sweep folder, "
                        f"not {len(args.results)} directories")
    data = read_sweep_dir(args.results[0])
    if args.kind == "sweep" and (args.x is None or args.y is None):
        summary = data["summary"]
        raise UserError(f"--kind sweep needs --x KEY and --y KEY; varied keys: "
                        f"{', '.join(varied_keys(summary)) or 'none'}; summary keys: "
                        f"{', '.join(summary_keys(summary)) or 'none'}")
    return data


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


def _check_runs_fit(kind: str, runs: dict) -> None:
    """Refuse figures that would mislead: a timeline of several runs (it draws one), and
    throughput against latency when every run replays the same workload at the same
    speed, where throughput is fixed by the trace and the line only zig-zags."""
    if kind == "timeline" and len(runs) > 1:
        raise UserError(f"--kind timeline draws one run's workers: give one result folder "
                        f"(got {len(runs)})")
    if kind == "throughput" and len(runs) > 1:
        loads = [r.scenario.get("workload") if isinstance(r.scenario, dict) else None
                 for r in runs.values()]
        if all(w is not None for w in loads) and all(w == loads[0] for w in loads):
            raise UserError("--kind throughput: every run replays the same workload at the "
                            "same speed, so throughput is fixed by it; vary the load "
                            "(workload.arrival_speedup_ratio, workload.synthetic."
                            "request_rate) or use a sweep (--kind sweep)")


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


def _check_figure_out(out: str) -> str:
    """Fail before loading and drawing if ``out`` cannot be written; return the image
    format (from the extension, png if none)."""
    from matplotlib.backend_bases import FigureCanvasBase

    from simmodel.outdir import check_out_dir

    if os.path.isdir(out):
        raise UserError(f"--out: {out} is a directory")
    check_out_dir(os.path.dirname(os.path.abspath(out)))   # missing folders are created
    fmt = os.path.splitext(out)[1][1:].lower() or "png"
    supported = FigureCanvasBase.get_supported_filetypes()
    if fmt not in supported:
        raise UserError(f"--out: unknown image format {fmt!r}; "
                        f"use one of {', '.join(sorted(supported))}")
    return fmt


def _save_figure(fig, out: str, fmt: str) -> None:
    """``fig.savefig`` into a temporary file beside ``out`` (its missing folders created),
    then ``os.replace``: ``out`` is either the complete new figure or untouched, and no
    temporary file (or folder created for it) remains after a failure."""
    import secrets

    from simmodel.outdir import make_parents, remove_created

    folder, name = os.path.split(os.path.abspath(out))
    created = make_parents(folder)
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
        remove_created(created)
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
    """Fail before a possibly long run if the results could not be written there."""
    from simmodel.outdir import check_out_dir
    from simmodel.report import RESULT_FILES
    check_out_dir(out, RESULT_FILES)


def _one_line(text: str) -> str:
    return " ".join(text.split())
