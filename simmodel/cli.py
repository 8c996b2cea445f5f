"""Command line: a thin shell over ``load_scenario`` -> ``run`` -> ``write_result``.

``simmodel run SCENARIO.yaml [--out DIR] [--seed N] [--max-sim-time-ms X]`` prints the
summary table and, with ``--out``, writes the result files.  A user mistake (bad scenario,
bad trace, bad override, unwritable output) prints ``simmodel: error: <one line>`` to
stderr and exits with status 2, without a traceback and without creating ``--out``.
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
    run.set_defaults(func=_cmd_run)
    return parser


def _cmd_run(args: argparse.Namespace) -> int:
    from simmodel.report import format_summary, write_result
    from simmodel.scenario import load_scenario

    scenario = _apply_overrides(load_scenario(args.scenario), args)
    if args.out is not None:
        _check_out_dir(args.out)

    from simmodel import run     # lazily: keeps `--help` and scenario errors fast
    result = run(scenario)

    print(format_summary(result.summary))
    if args.out is not None:
        try:
            write_result(result, args.out)
        except OSError as e:
            raise UserError(f"--out: cannot write results to {args.out}: "
                            f"{e.strerror or e}") from None
        print(f"\nresults written to {args.out}")
    return EXIT_OK


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
