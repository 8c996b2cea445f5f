"""A sweep's output folder: the run cache that makes it resumable, and atomic tables.

Layout of ``--out DIR``::

    DIR/sweep.json         the resolved spec, simmodel version, executor, complete or not
    DIR/points.parquet     one row per run
    DIR/summary.parquet    one row per point (mean, std, 95% CI over replications)
    DIR/search.json        searches only: the answer and probes per grid point
    DIR/cache/<key>.json   one finished run's row (the cache; never edited, only added)
    DIR/runs/pPPPP-rR/     full result folders (point P, replication R), --keep-runs only

A run's key hashes its fully resolved scenario (every setting, defaults included), the
trace file's size and modification time, the seed, the statistics window, the
early-stop rule and the simmodel version; a re-run finds finished runs by key and runs
only the missing ones.  Every file is written to a temporary sibling and renamed into
place, so a reader (or an interrupted writer) never sees half a file.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import secrets
from typing import Any, Optional

import pandas as pd

from simmodel.config import Scenario
from simmodel.errors import UserError
from simmodel.report import jsonable

CACHE_DIR = "cache"
RUNS_DIR = "runs"


def run_key(scenario: Scenario, seed: int, warmup_ms: float, early_stop: tuple) -> str:
    """The cache key of one run (hex sha256)."""
    import simmodel

    resolved = dataclasses.asdict(dataclasses.replace(scenario, source=None, seed=seed))
    files = {}
    for path in _paths(resolved) + _policy_files(scenario):
        try:
            st = os.stat(path)
            files[path] = [st.st_size, st.st_mtime_ns]
        except OSError:
            files[path] = None
    blob = json.dumps({"scenario": resolved, "files": files, "seed": seed,
                       "warmup_ms": warmup_ms, "early_stop": list(early_stop),
                       "version": simmodel.__version__}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def _policy_files(scenario: Scenario) -> list[str]:
    """A python planner policy's file under the scenario's folder (its code shapes runs)."""
    planner = scenario.planner
    if planner is None or planner.kind != "python" or not planner.base_dir:
        return []
    from simmodel.config.policy_ref import policy_file
    path = policy_file(planner.policy, planner.base_dir)
    return [path] if path else []


def _paths(tree: Any) -> list[str]:
    out: list[str] = []
    if isinstance(tree, dict):
        for k, v in tree.items():
            if k in ("trace", "path") and isinstance(v, str):
                out.append(v)
            else:
                out += _paths(v)
    elif isinstance(tree, (list, tuple)):
        for v in tree:
            out += _paths(v)
    return out


class Store:
    """The output folder (or nothing, when ``out`` is None: no cache, no files)."""

    def __init__(self, out: Optional[str]):
        self.out = None if out is None else os.path.abspath(out)
        if self.out is not None:
            check_out_dir(self.out)

    def get(self, key: str) -> Optional[dict]:
        if self.out is None:
            return None
        path = os.path.join(self.out, CACHE_DIR, f"{key}.json")
        try:
            with open(path, encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def put(self, key: str, row: dict) -> None:
        """Cache a finished run (errors are not cached: a re-run tries them again)."""
        if self.out is None or row.get("status") == "error":
            return
        folder = os.path.join(self.out, CACHE_DIR)
        os.makedirs(folder, exist_ok=True)
        write_atomic(os.path.join(folder, f"{key}.json"),
                     json.dumps(jsonable(row), allow_nan=False).encode())

    def keep_dir(self, name: str) -> Optional[str]:
        return None if self.out is None else os.path.join(self.out, RUNS_DIR, name)

    def write_table(self, name: str, frame: pd.DataFrame) -> None:
        if self.out is not None:
            tmp = _temp_name(os.path.join(self.out, name))
            try:
                frame.to_parquet(tmp, index=False)
                os.replace(tmp, os.path.join(self.out, name))
            finally:
                if os.path.exists(tmp):
                    os.remove(tmp)

    def write_json(self, name: str, data: Any) -> None:
        if self.out is not None:
            text = json.dumps(jsonable(data), indent=2, allow_nan=False) + "\n"
            write_atomic(os.path.join(self.out, name), text.encode())


def check_out_dir(out: str) -> None:
    """Fail before any run if ``out`` cannot hold the results
    (``simmodel.outdir.check_out_dir``); create it."""
    from simmodel.outdir import check_out_dir as check

    check(out)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise UserError(f"--out: cannot create {out}: {e.strerror or e}") from None


def _temp_name(path: str) -> str:
    folder, name = os.path.split(path)
    return os.path.join(folder, f".{name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")


def write_atomic(path: str, data: bytes) -> None:
    tmp = _temp_name(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
