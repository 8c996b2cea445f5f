"""Whether two versions of simmodel give the same results, scenario by scenario.

    python benchmarks/same_outputs.py SCENARIO.yaml [...] --base REV [--candidate DIR]

``REV`` (a commit, default ``HEAD``) is checked out into a temporary git worktree; the
candidate is ``DIR`` (default: this working tree).  Each scenario runs under both as
``python -m simmodel run SCENARIO --out TMP`` (a fresh interpreter, ``PYTHONPATH`` at its
source).  Every parquet file must be equal exactly (``assert_frame_equal(check_exact=True)``:
values, dtypes, order), and every JSON file equal apart from the host timings
(``wall_time_ms``, ``processed_tokens_per_s``, ``processed_output_tokens_per_s``).
``--new-columns a,b``: columns the candidate adds (absent from the base) are left out of
the comparison; every other column must still be equal.
Prints IDENTICAL or what differs per scenario (for a JSON file, the keys added, dropped
or changed); exit 0 when all are identical, 1 otherwise.
The check behind "outputs bit-identical" in refactoring commits.  Not part of the tests.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
from pandas.testing import assert_frame_equal

ROOT = Path(__file__).resolve().parent.parent
HOST_KEYS = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}


def run_under(src: Path, scenario: Path, out: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(src))
    subprocess.run([sys.executable, "-m", "simmodel", "run", str(scenario), "--out", str(out),
                    "--quiet"], cwd=src, env=env, check=True, capture_output=True, text=True)


def differences(a: Path, b: Path, new_columns: tuple = ()) -> list[str]:
    """What differs between two result folders (empty: identical), apart from the
    candidate's (``b``) ``new_columns`` that the base lacks."""
    bad = sorted(set(os.listdir(a)) ^ set(os.listdir(b)))
    for name in sorted(set(os.listdir(a)) & set(os.listdir(b))):
        if name.endswith(".parquet"):
            try:
                fa, fb = pd.read_parquet(a / name), pd.read_parquet(b / name)
                fb = fb.drop(columns=[c for c in new_columns
                                      if c in fb.columns and c not in fa.columns])
                assert_frame_equal(fa, fb, check_exact=True)
            except AssertionError as exc:
                bad.append(f"{name}: {str(exc).splitlines()[0]}")
        elif name.endswith(".json"):
            ja, jb = (json.loads((d / name).read_text()) for d in (a, b))
            if isinstance(ja, dict) and isinstance(jb, dict):
                ja = {k: v for k, v in ja.items() if k not in HOST_KEYS}
                jb = {k: v for k, v in jb.items() if k not in HOST_KEYS}
            if ja != jb:
                bad.append(f"{name} ({json_changes(ja, jb)})")
    return bad


def _flat(value, prefix: str = "") -> dict:
    if not isinstance(value, dict):
        return {prefix: value}
    out = {}
    for k, v in value.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def json_changes(a, b) -> str:
    """Which keys a JSON candidate ``b`` adds, drops or changes against the base ``a``."""
    fa, fb = _flat(a), _flat(b)
    parts = []
    for what, keys in (("added", sorted(fb.keys() - fa.keys())),
                       ("dropped", sorted(fa.keys() - fb.keys())),
                       ("changed", sorted(k for k in fa.keys() & fb.keys() if fa[k] != fb[k]))):
        if keys:
            shown = ", ".join(f"{k}={fb.get(k, fa.get(k))!r}" for k in keys[:20])
            parts.append(f"{what} {len(keys)}: {shown}" + (", ..." if len(keys) > 20 else ""))
    return "; ".join(parts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenarios", nargs="+")
    ap.add_argument("--base", default="HEAD")
    ap.add_argument("--candidate", default=str(ROOT))
    ap.add_argument("--new-columns", default="")
    opts = ap.parse_args(argv)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="same_outputs_") as tmp:
        base = Path(tmp) / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q",
                        str(base), opts.base], check=True)
        try:
            for k, sc in enumerate(opts.scenarios):
                scenario = Path(sc).resolve()
                outs = [Path(tmp) / f"{k}_{side}" for side in ("base", "candidate")]
                run_under(base, scenario, outs[0])
                run_under(Path(opts.candidate).resolve(), scenario, outs[1])
                bad = differences(*outs, tuple(filter(None, opts.new_columns.split(","))))
                failed += bool(bad)
                print(f"{scenario.name}: " + ("IDENTICAL" if not bad else "; ".join(bad)))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(base)], check=False)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
