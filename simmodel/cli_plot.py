"""``simmodel plot``: one figure of result folders (cdf, timeline, breakdown,
throughput) or of one sweep folder (sweep, pareto, probes), written atomically.
The rest of the command line is ``simmodel.cli``."""
from __future__ import annotations

import argparse
import os

from simmodel.errors import UserError

EXIT_OK = 0


def add_plot(sub) -> None:
    """The ``plot`` subcommand."""
    from simmodel.cli import _add_label_by


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
    from simmodel.cli import _read_results
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
