"""Build ``h200_llama31_8b_fp8_vllm.csv`` from NVIDIA Dynamo's published profiling data.

The source is the pre-deployment profile that Dynamo's SLA planner ships as test data:
``nvidia/Llama-3.1-8B-Instruct-FP8`` served by vLLM on one H200 (TP1 prefill, TP1 decode),
in the ``ai-dynamo`` wheel on PyPI (Apache-2.0), folder
``dynamo/planner/tests/data/profiling_results/H200_TP1P_TP1D/``.  See README.md here.

    python scenarios/tables/make_h200_llama8b.py [--wheel ai_dynamo-1.6.1-py3-none-any.whl]

Without ``--wheel`` it runs ``pip download ai-dynamo==1.6.1 --no-deps`` into a temporary
folder.  The output is rewritten in place; it is deterministic (same input, same bytes).

Conversion (the same reading of the raw data as Dynamo's own planner,
``dynamo.planner.monitoring.perf_metrics``):

* prefill: each measured point is one request of ``prefill_isl`` tokens whose TTFT was
  ``prefill_ttft`` ms.  It becomes a row ``prefill,<isl>,,<ttft>`` as is.
* decode: each measured point is a steady decode at a concurrency sweep step, with
  ``x_kv_usage`` (fraction of the ``max_kv_tokens`` = 945,029 token KV cache in use),
  ``y_context_length`` (tokens per request) and ``z_itl`` (ms).  Σ context =
  ``round(x_kv_usage * max_kv_tokens)`` (an integer multiple of the context length: the
  batch size times it).  The grid's Σ-context axis is the union of all measured Σ values
  (41), its mean-context axis the 6 measured context lengths.  In each context-length
  row, a grid value between two measurements is their linear interpolation in Σ; outside
  the row's measured Σ range it holds the nearest measurement (no trend is invented).
  Every measured point is therefore a grid point with its measured value.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from simmodel.engine.profile import Profile, load_profile, write_csv

HERE = Path(__file__).resolve().parent
OUT = HERE / "h200_llama31_8b_fp8_vllm.csv"
WHEEL = "ai-dynamo==1.6.1"
PREFIX = "dynamo/planner/tests/data/profiling_results/H200_TP1P_TP1D/"
MEMBERS = {   # member -> sha256 of the file in the 1.6.1 wheel
    "selected_prefill_interpolation/raw_data.npz":
        "fdc4d959c79fa6b0a1baf4997cf72ccd2b7a45d1de669828f387022b49c374d2",
    "selected_decode_interpolation/raw_data.npz":
        "7c7bdfe9bcf57c755c617383b012989d970344aff13ed02a2b889b8b5eb1f341",
}

HEADER = """\
Measured pass costs of nvidia/Llama-3.1-8B-Instruct-FP8 on vLLM, one NVIDIA H200 (TP1).
Source: NVIDIA Dynamo's SLA-planner profiling results H200_TP1P_TP1D, shipped in the
ai-dynamo 1.6.1 wheel on PyPI (dynamo/planner/tests/data/profiling_results/H200_TP1P_TP1D/),
Copyright (c) 2025-2026 NVIDIA CORPORATION & AFFILIATES, Apache License 2.0.
Converted by scenarios/tables/make_h200_llama8b.py (see scenarios/tables/README.md):
prefill rows = single-request TTFT (ms) per prompt length; decode rows = ITL (ms) on a
grid of Σ context tokens x mean context tokens (measured points kept exactly; others
interpolated linearly within a context length, held constant past its measured range).
KV capacity when measured: 945029 tokens."""


def read_members(wheel: Path) -> dict[str, dict[str, np.ndarray]]:
    out = {}
    with zipfile.ZipFile(wheel) as zf:
        for member, digest in MEMBERS.items():
            blob = zf.read(PREFIX + member)
            got = hashlib.sha256(blob).hexdigest()
            if got != digest:
                print(f"warning: {member} has sha256 {got}, expected {digest}",
                      file=sys.stderr)
            with np.load(io.BytesIO(blob), allow_pickle=False) as data:
                out[member.split("_")[1].split("/")[0]] = {k: data[k] for k in data.files}
    return out


def convert(raw: dict[str, dict[str, np.ndarray]], source: str) -> Profile:
    pre = raw["prefill"]
    px = pre["prefill_isl"].astype(np.float64)
    py = pre["prefill_ttft"].astype(np.float64)
    order = np.argsort(px)
    px, py = px[order], py[order]

    dec = raw["decode"]
    max_kv = int(dec["max_kv_tokens"][0])
    kv = np.rint(dec["x_kv_usage"] * max_kv)
    if np.abs(kv - dec["x_kv_usage"] * max_kv).max() > 1e-3:
        raise SystemExit("x_kv_usage * max_kv_tokens is not a whole number of tokens")
    ctx = dec["y_context_length"].astype(np.float64)
    itl = dec["z_itl"].astype(np.float64)
    xs = np.unique(kv)
    ys = np.unique(ctx)
    grid = np.empty((len(xs), len(ys)))
    for j, c in enumerate(ys):
        row = ctx == c
        rk, rz = kv[row], itl[row]
        o = np.argsort(rk)
        grid[:, j] = np.interp(xs, rk[o], rz[o])   # linear inside, held at the ends
    return Profile(source, px, py, xs, ys, grid)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheel", type=Path, help="a local copy of the ai-dynamo 1.6.1 wheel")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        wheel = args.wheel
        if wheel is None:
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                            "--quiet", "-d", tmp, WHEEL], check=True)
            wheel = next(Path(tmp).glob("ai_dynamo-*.whl"))
        profile = convert(read_members(wheel), str(args.out))
    write_csv(profile, str(args.out), HEADER)
    back = load_profile(str(args.out))          # the file reads back to the same numbers
    assert np.array_equal(back.decode_ms, profile.decode_ms)
    assert np.array_equal(back.prefill_ms, profile.prefill_ms)
    print(f"wrote {os.path.relpath(args.out)}: {len(profile.prefill_tokens)} prefill points, "
          f"decode grid {profile.decode_ms.shape[0]} x {profile.decode_ms.shape[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
