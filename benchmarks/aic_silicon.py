"""End to end against real GPUs: simmodel's aic timing model against the measured serving
runs that ship with aiconfigurator-core (``systems/silicon_sample.csv``, Apache-2.0).

Each row of that file is one benchmark of a real engine (vLLM, SGLang or TRT-LLM, a
released container, on H100 / H200 / B200 / B300 GPUs): a model at a precision and a
parallel layout, driven closed loop at a fixed concurrency with fixed input and output
lengths, and its measured TTFT and TPOT (``silicon_ttft_ms``, ``silicon_tpot_ms``).  For
each aggregated row this script simulates the same thing: one worker of that layout,
``timing_model: aic`` on the row's system, backend and quantisation modes (the
database's own version of the backend: the kernels were not measured on the row's
container), ``num_gpu_blocks: auto``, and ``concurrency`` clients that each send
``waves`` requests one after another, every prompt fresh blocks (no prefix reuse, as
with random benchmark prompts).  It compares mean TTFT, mean TPOT and the E2E they imply
(TTFT + TPOT x (osl - 1)), over the requests that ``--clients`` says (below).

    python benchmarks/aic_silicon.py [--backend vllm] [--rows 40] [--seed 0] [--exclude-seed N]
                                     [--clients aiperf|staggered|together] [--waves 4]
                                     [--rounds 20] [--client-ms 1]
                                     [--max-concurrency 256] [--kv-cache checkpoint|model]
                                     [--prefill-overhead-ms auto|MS]
                                     [--csv OUT]

Rows are drawn at random (``--seed``) from those the library can cost: pipeline
parallelism 1, a model config it ships, a system with a database for the backend (a
quantisation the database cannot cost on that GPU is skipped and listed), one per distinct
measurement (the file repeats some under several ids).  A row's ``batch_size`` is per
attention-DP rank: the run had batch_size x attention_dp_size clients.  Where a row's
id names fewer GPUs than its layout columns (``..._tp4_ep4_1290`` listed as TP 4 x
attention DP 4 with MoE EP 16), the id's layout is used (``read_layout``).  What the file
does not say about the measured runs, and what is assumed instead:

* how the clients' requests fall in time, and over which requests the means are taken.
  ``aiperf`` (the default) follows the benchmark recipe the library itself generates
  (aiconfigurator's ``generator/config/backend_templates/benchmark/bench_run.sh.j2``:
  ``aiperf profile --concurrency c --num-requests 20c --warmup-request-count 2c``).
  aiperf drains the warm-up before profiling starts (aiperf 0.13's
  ``timing/config.py``: the warm-up waits for every request in flight), so all ``c``
  clients send their first profiled request at once; a real run's clients then drift
  apart.  The estimate: the mean over ``rounds`` x c requests of one simulated round
  sent all at once (the pilot run) and ``rounds - 1`` rounds in the steady state
  (``staggered`` below, its requests after each client's first).  ``staggered``: client
  k starts at k / concurrency of one request's simulated E2E (from the pilot), the
  spread of a closed loop in its steady state, and the means are over the requests
  after each client's first; ``together``: all start at once, and with equal lengths
  they stay in step (requests whose prompts share a pass also finish together), the
  means again after each client's first.  TTFT depends on this far more than TPOT does;
* the client's round trip: a client sends its next request ``--client-ms`` (default 1)
  after its last one completes (HTTP, tokenisation).  At 0 the next request arrives at
  the very instant its predecessor's pass ends and joins the next pass, which a real
  client cannot; at 1 ms it misses that pass and waits for it, as on a real server;
* the request count (here ``waves`` x concurrency, and ``rounds`` for ``aiperf``);
* ``max_num_seqs`` and ``max_num_batched_tokens`` (here max(256, concurrency) and 8192,
  vLLM's defaults on these GPUs);
* the KV cache's precision.  ``checkpoint`` (the default): fp8 for a row with fp8 or fp4
  weights, as the library's own reading of a quantized checkpoint's config gives (the
  shipped configs are the unquantized models, whose KV is 16-bit), and as quantized
  vLLM deployments usually run (``--kv-cache-dtype fp8``); ``model``: the shipped
  config's 16-bit KV.  It sets how many sequences fit the pool, so a long-output row at
  high concurrency queues, or not, on it;
* whether the figures are means or medians (compared here with means; with equal lengths
  in a closed loop the two differ little).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import warnings
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import simmodel  # noqa: E402
from simmodel.engine import aic_library  # noqa: E402

TRACE_BLOCK = 64      # tokens per hash id of the generated traces


def silicon_rows() -> pd.DataFrame:
    """The library's measured runs (its own file, read where it is installed)."""
    path = resources.files("aiconfigurator_core") / "systems" / "silicon_sample.csv"
    with resources.as_file(path) as p:
        return pd.read_csv(p)


def library_model(name: str, models: set) -> str | None:
    """The shipped config for a row's model path (``Llama-3.1`` is ``Meta-Llama-3.1``
    there, and an ``-Instruct`` tune has its base model's shape)."""
    for cand in (name, name.replace("Llama-3.1", "Meta-Llama-3.1"),
                 name.replace("Llama-3.1", "Meta-Llama-3.1").replace("-Instruct", "")):
        if cand in models:
            return cand
    return None


def usable(df: pd.DataFrame, backend: str, max_conc: int) -> pd.DataFrame:
    """Aggregated rows of ``backend`` that the library can cost, with their model name."""
    models = set(aic_library.shipped_models())
    systems = aic_library.databases()
    df = df[(df["mode"] == "agg") & (df.backend == backend) & (df.pp_size == 1)]
    df = read_layout(df)
    df = df[[concurrency(r) <= max_conc for r in df.itertuples()]]
    df["aic_model"] = [library_model(m, models) for m in df.model_path]
    df["has_db"] = [backend in systems.get(s, {}) for s in df.system]
    df = df[df.aic_model.notna() & df.has_db]
    # the file repeats some measurements under several ids (the same layout and lengths
    # with the same TTFT and TPOT, some rounded to 0.01 ms): one run counts once
    key = df.assign(t1=df.silicon_ttft_ms.round(1), t2=df.silicon_tpot_ms.round(2))
    return df[~key.duplicated(_LAYOUT + ["t1", "t2"])]


_LAYOUT = ["aic_model", "system", "precision", "gemm_quant_mode", "moe_quant_mode",
           "tp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size", "isl", "osl",
           "batch_size"]


_ID_LAYOUT = r"_tp(\d+)(?:_0)?_ep(\d+)(?:_0)?_\d+$"   # ids ending ``_tp4_ep4_1290``


def read_layout(df: pd.DataFrame) -> pd.DataFrame:
    """The parallel layout each run had: its columns, except where the file contradicts
    them.  An id ending ``_tp<N>_ep<M>_<k>`` names a run on N GPUs with expert
    parallelism M, yet some such rows list a layout on N x N GPUs (vLLM TP N x attention
    DP N with MoE EP N^2, SGLang and TRT-LLM TP N^2).  Evidence for the id: the 15
    Kimi-K2.5 vLLM measurements listed under both readings (identical TTFT and TPOT, the
    ``gap_analysis`` copies as TP 4, no attention DP, EP 4), and the measured TPOTs of
    the vLLM rows of that pattern, labelled or not, which match runs of the same model,
    system, lengths and clients on N GPUs (median 1.9 % apart for N = 2, 2.6 % for 4).
    Those rows, and unlabelled vLLM rows of the pattern (TP N = attention DP N, MoE TP 1,
    EP N^2), run here as TP N, no attention DP, MoE TP N / M, EP M, with the same client
    count."""
    lab = df.id.str.extract(_ID_LAYOUT).astype(float)
    dp = df.attention_dp_size.where(df.attention_dp_size > 0, 1.0)
    pattern = ((df.backend == "vllm") & (df.tp_size > 1) & (df.attention_dp_size == df.tp_size)
               & (df.moe_tp_size == 1) & (df.moe_ep_size == df.tp_size ** 2))
    gpus = lab[0].fillna(df.tp_size.where(pattern))
    ep = lab[1].fillna(df.tp_size.where(pattern))
    fix = gpus.notna() & (df.tp_size * dp != gpus) & (gpus % ep == 0)
    out = df.copy()
    out.loc[fix, "batch_size"] = (df.batch_size * dp)[fix]   # it was per DP rank
    out.loc[fix, "tp_size"] = gpus[fix]
    out.loc[fix, "attention_dp_size"] = 1.0
    out.loc[fix, "moe_tp_size"] = (gpus / ep)[fix]
    out.loc[fix, "moe_ep_size"] = ep[fix]
    return out


def concurrency(row) -> int:
    """The run's client count: ``batch_size`` is per attention-DP rank (the ids'
    ``_c<N>_`` is batch_size x attention_dp_size in every vLLM and SGLang row)."""
    dp = int(row.attention_dp_size) if row.attention_dp_size > 0 else 1
    return int(row.batch_size) * dp


QUANTIZED = ("fp8", "nvfp4")   # rows whose weights are fp8 / fp4 checkpoints


def engine(row, kv_cache: str = "checkpoint", overhead_ms="auto") -> dict:
    """One worker of the row's layout, costed by the aic model.  ``kv_cache``:
    ``checkpoint`` gives a row with fp8 / fp4 weights an fp8 KV cache, as the library does
    for a quantized checkpoint's config (and a quantized vLLM deployment usually runs);
    ``model``: the KV precision of the shipped (unquantized) model config.
    ``overhead_ms``: the prefill dispatch cost (``auto``: the library's; 0: kernels alone)."""
    conc = concurrency(row)
    dp = int(row.attention_dp_size) if row.attention_dp_size > 0 else 1
    tp = int(row.tp_size)
    timing = {"type": "aic", "model": row.aic_model, "system": row.system,
              "backend": row.backend, "prefill_overhead_ms": overhead_ms}
    for key in ("gemm_quant_mode", "moe_quant_mode"):
        if isinstance(getattr(row, key), str):
            timing[key] = getattr(row, key)
    if kv_cache == "checkpoint" and row.gemm_quant_mode in QUANTIZED:
        timing["kvcache_quant_mode"] = "fp8"
    if row.moe_ep_size > 0 and row.moe_tp_size > 0 and row.moe_tp_size * row.moe_ep_size == tp * dp:
        timing.update(moe_tp_size=int(row.moe_tp_size), moe_ep_size=int(row.moe_ep_size))
    return {"backend": row.backend, "tensor_parallel_size": tp, "dp_size": dp,
            "num_gpu_blocks": "auto", "max_num_seqs": max(256, -(-conc // dp)),
            "max_num_batched_tokens": 8192, "timing_model": timing}


def pilot(row, folder: str, knobs: dict) -> pd.DataFrame:
    """The requests of one wave of ``concurrency`` requests sent at once."""
    conc = concurrency(row)
    sc = {"name": "silicon-pilot", "seed": 0,
          "workload": {"concurrency": conc, "synthetic": {
              "requests": conc, "input_tokens": int(row.isl),
              "output_tokens": int(row.osl), "arrival_interval_ms": 0.0}},
          "cluster": {"workers": 1, "engine": engine(row, **knobs)}}
    return run(sc, folder).requests


def mean_e2e(req: pd.DataFrame) -> float:
    return float(np.mean(req.terminal_time_ms - req.arrival_time_ms))


def staggered_trace(row, waves: int, period_ms: float, path: str,
                    client_ms: float = 0.0) -> None:
    """``concurrency`` clients, each sending ``waves`` requests one after another (the
    next ``client_ms`` after the last completes); client k starts at k x period /
    concurrency (with a period of one request's E2E: the spread of a closed loop in its
    steady state; 0: all at once).  Every prompt is fresh blocks."""
    conc, isl, osl = concurrency(row), int(row.isl), int(row.osl)
    nb = -(-isl // TRACE_BLOCK)
    next_id = 0
    with open(path, "w") as f:
        for k in range(conc):
            for w in range(waves):
                line = {"session_id": f"c{k}", "input_length": isl, "output_length": osl,
                        "hash_ids": list(range(next_id, next_id + nb))}
                line.update({"timestamp": k * period_ms / conc} if w == 0
                           else {"delay": client_ms})
                next_id += nb
                f.write(json.dumps(line) + "\n")


def run(sc: dict, folder: str):
    path = os.path.join(folder, "scenario.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(sc, f)
    return simmodel.run(simmodel.load_scenario(path))


def simulate(row, folder: str, clients: str, knobs: dict, load: dict) -> dict:
    """Mean TTFT and TPOT of the row's clients (``load``: waves, rounds, client_ms)."""
    first = pilot(row, folder, knobs) if clients != "together" else None
    period = mean_e2e(first) if first is not None else 0.0
    staggered_trace(row, load["waves"], period, os.path.join(folder, "trace.jsonl"),
                    load["client_ms"])
    sc = {"name": "silicon", "seed": 0,
          "workload": {"trace": "trace.jsonl", "format": "mooncake",
                       "trace_block_size": TRACE_BLOCK},
          "cluster": {"workers": 1, "engine": engine(row, **knobs)}}
    req = run(sc, folder).requests
    req = req[req.turn_index > 0]              # the clients' first requests are the ramp
    ttft, tpot = float(np.mean(req.ttft_ms)), float(np.mean(req.tpot_ms))
    if clients == "aiperf":                    # one round at once, the rest steady
        n = load["rounds"]
        ttft = (float(np.mean(first.ttft_ms)) + (n - 1) * ttft) / n
        tpot = (float(np.mean(first.tpot_ms)) + (n - 1) * tpot) / n
    return {"sim_ttft_ms": ttft, "sim_tpot_ms": tpot,
            "sim_e2e_ms": ttft + tpot * (row.osl - 1)}


def compare(rows: pd.DataFrame, clients: str, knobs: dict, load: dict) -> pd.DataFrame:
    out = []
    with tempfile.TemporaryDirectory() as folder:
        for row in rows.itertuples():
            try:
                sim = simulate(row, folder, clients, knobs, load)
            except simmodel.UserError as e:      # a layout the database does not cover
                print(f"  skipped {row.id}: {e}", file=sys.stderr)
                continue
            real_e2e = row.silicon_ttft_ms + row.silicon_tpot_ms * (row.osl - 1)
            out.append({"id": row.id, "model": row.aic_model, "system": row.system,
                        "precision": row.precision, "tp": row.tp_size,
                        "dp": row.attention_dp_size, "isl": row.isl, "osl": row.osl,
                        "concurrency": concurrency(row),
                        "real_ttft_ms": row.silicon_ttft_ms,
                        "real_tpot_ms": row.silicon_tpot_ms, "real_e2e_ms": real_e2e,
                        **sim})
            print(f"  {row.id}: TTFT {sim['sim_ttft_ms']:.0f} / {row.silicon_ttft_ms:.0f} ms,"
                  f" TPOT {sim['sim_tpot_ms']:.2f} / {row.silicon_tpot_ms:.2f} ms",
                  file=sys.stderr)
    return pd.DataFrame(out)


def report(df: pd.DataFrame) -> None:
    single = df[~(df.dp > 1)]
    parts = [("", df)] + ([(" without attention DP", single)] if len(single) < len(df) else [])
    for title, part in parts:
        print(f"{len(part)} measured runs{title}; error = simulated / measured - 1")
        print(f"{'':8} {'median |err|':>12} {'median signed':>14} {'p90 |err|':>10} "
              f"{'worst':>8}")
        for m in ("ttft", "tpot", "e2e"):
            err = part[f"sim_{m}_ms"] / part[f"real_{m}_ms"] - 1
            a = err.abs()
            print(f"{m.upper():8} {a.median():12.1%} {err.median():14.1%} "
                  f"{a.quantile(0.9):10.1%} {a.max():8.1%}")
    over = ((df.sim_ttft_ms > 5 * df.real_ttft_ms) & (df.sim_ttft_ms > 10_000)).sum()
    print(f"false overloads (simulated TTFT > 5x measured and > 10 s): {over}")
    by = df.assign(e2e_err=(df.sim_e2e_ms / df.real_e2e_ms - 1).abs(),
                   ttft_err=(df.sim_ttft_ms / df.real_ttft_ms - 1).abs())
    print(by.groupby(["model", "system"])[["ttft_err", "e2e_err"]].median()
          .map(lambda x: f"{x:.1%}").to_string())


def draw(rows: pd.DataFrame, n: int, seed: int) -> pd.DataFrame:
    """``n`` runs drawn at random (``seed``); all of them if ``n`` is 0 or covers them."""
    return rows.sample(n, random_state=seed) if n and len(rows) > n else rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="vllm", choices=("vllm", "sglang", "trtllm"))
    ap.add_argument("--rows", type=int, default=40, help="how many runs to draw (0: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--exclude-seed", type=int,
                    help="leave out the runs that --seed N would draw (a held-out sample)")
    ap.add_argument("--max-concurrency", type=int, default=256)
    ap.add_argument("--waves", type=int, default=4)
    ap.add_argument("--clients", choices=("aiperf", "staggered", "together"),
                    default="aiperf",
                    help="aiperf: one round sent at once, then the steady state (the "
                         "library's benchmark recipe); staggered: the steady state alone; "
                         "together: all start at once and stay in step")
    ap.add_argument("--rounds", type=int, default=20,
                    help="aiperf's requests per client (the recipe's 20)")
    ap.add_argument("--client-ms", type=float, default=1.0,
                    help="a client's round trip before its next request (ms)")
    ap.add_argument("--kv-cache", choices=("checkpoint", "model"), default="checkpoint",
                    help="checkpoint: fp8 KV for fp8 / fp4 rows (default); model: the "
                         "shipped model config's KV precision")
    ap.add_argument("--prefill-overhead-ms", default="auto",
                    help="the prefill dispatch cost per pass: auto (the library's, default) "
                         "or a number of ms (0: the kernels alone)")
    ap.add_argument("--csv", type=Path, help="write every compared run here")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    rows = usable(silicon_rows(), args.backend, args.max_concurrency)
    if args.exclude_seed is not None:
        rows = rows.drop(draw(rows, args.rows, args.exclude_seed).index)
    rows = draw(rows, args.rows, args.seed)
    print(f"{len(rows)} {args.backend} runs drawn (seed {args.seed})", file=sys.stderr)
    overhead = args.prefill_overhead_ms
    knobs = {"kv_cache": args.kv_cache,
             "overhead_ms": overhead if overhead == "auto" else float(overhead)}
    load = {"waves": args.waves, "rounds": args.rounds, "client_ms": args.client_ms}
    df = compare(rows, args.clients, knobs, load)
    if args.csv:
        df.to_csv(args.csv, index=False)
    report(df)
    return 0


if __name__ == "__main__":
    sys.exit(main())
