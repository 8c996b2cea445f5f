"""How right the aic timing model's pass times are (benchmarks/README.md, "aic timing").

    python benchmarks/aic_validation.py [--scenario S.yaml] [--minutes 10]
                                        [--measured-dir benchmarks/measured]

1. **Per pass, against direct library calls.**  The scenario (default
   ``scenarios/aic_llama8b_h200.yaml``, its first ``--minutes`` simulated minutes) runs with
   every pass's composition recorded; each pass is then costed again by direct calls of
   the library (``mixed_step_breakdown``) on its exact inputs, without memoisation.  The
   difference is the error the buckets add.  Also shown: what adding a prefill-only and a
   decode-only estimate would give for the mixed passes (what the model never does).
2. **Per pass, against measurements** (client-measured, so serving overheads included):
   * the shipped H200 profile of Llama-3.1-8B-Instruct-FP8 on vLLM
     (``scenarios/tables/h200_llama31_8b_fp8_vllm.csv``): its 17 measured prefills, and
     its 41 measured decode points (the grid points whose Σ context is a multiple of
     their context length; the other grid points are interpolations, left out), against
     Llama-3.1-8B with FP8 GEMMs on ``h200_sxm`` / vLLM;
   * Splitwise's measured prompt and token times (``splitwise_perf_model.csv``, MIT, in
     ``--measured-dir``) of Llama-2-70B on A100-80GB and H100-80GB at TP 2, 4, 8 (the
     power-capped H100 rows and BLOOM-176B, whose config the library lacks, are left
     out; repeated measurements averaged).  Llama-2-70B is given as a local folder whose
     ``config.json`` is the shipped Llama-3.1-70B one with Llama-2-70B's vocabulary
     (32,000), context (4,096) and RoPE (θ = 10,000, no scaling): the two share every
     other dimension.  A prompt row is ``batch_size`` prompts of ``prompt_size`` in one
     pass; a token row is one decode pass of ``batch_size`` requests at the mean context
     ``prompt_size + token_size / 2``.

Prints median and worst relative errors ((model − measured) / measured).  Not a test.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import simmodel  # noqa: E402
from simmodel.config import EngineConfig, TimingConfig  # noqa: E402
from simmodel.engine import aic_timing  # noqa: E402
from simmodel.engine.aic_timing import AicTiming  # noqa: E402

PROFILE = ROOT / "scenarios/tables/h200_llama31_8b_fp8_vllm.csv"


def stats(err) -> str:
    a = np.abs(np.asarray(err, dtype=float))
    signed = np.asarray(err, dtype=float)
    return (f"n={len(a):>6}  median |err| {np.median(a):7.2%}  worst {a.max():7.2%}  "
            f"(median signed {np.median(signed):+.2%})")


# -- 1. memoisation --------------------------------------------------------------------

def recorded_run(path: str, minutes: float) -> tuple[list, list, AicTiming]:
    """Run the scenario with every aic pass's composition recorded."""
    passes, runs, models = [], [], []
    pass_ms, array_ms, init = (AicTiming.pass_ms, AicTiming.decode_ms_array,
                               AicTiming.__init__)

    def rec_init(self, *a, **k):
        init(self, *a, **k)
        models.append(self)

    def rec_pass(self, chunks, n_dec, dec_tokens):
        passes.append((list(chunks), n_dec, dec_tokens))
        return pass_ms(self, chunks, n_dec, dec_tokens)

    def rec_array(self, n, active):
        runs.append((n, np.asarray(active).copy()))
        return array_ms(self, n, active)

    AicTiming.__init__, AicTiming.pass_ms, AicTiming.decode_ms_array = (
        rec_init, rec_pass, rec_array)
    try:
        sc = simmodel.load_scenario(path)
        sc = dataclasses.replace(sc, run=dataclasses.replace(
            sc.run, max_sim_time_ms=minutes * 60_000.0))
        simmodel.run(sc)
    finally:
        AicTiming.__init__, AicTiming.pass_ms, AicTiming.decode_ms_array = (
            init, pass_ms, array_ms)
    return passes, runs, models[0]


def exact_ms(h, chunks, n_dec: int, dec_tokens: int) -> float:
    """The pass from direct library calls on its exact inputs (no buckets, no memo)."""
    total = sum(t for t, _ in chunks)
    ms = h.mixed_step_breakdown(total, n_dec, max(total, 1), 2, 0)[1]
    groups: dict = {}
    for new, before in chunks:
        groups[(new, before)] = groups.get((new, before), 0) + 1
    for (new, before), k in groups.items():
        ms += h.mixed_step_breakdown(k * (before + new), 0, before + new, 2, before)[2]
    if n_dec:
        ms += h.mixed_step_breakdown(0, n_dec, max(dec_tokens // n_dec - 2, 1), 2, 0)[3]
    return ms


def memo_section(path: str, minutes: float) -> None:
    passes, runs, model = recorded_run(path, minutes)
    h = model.handle
    errs, added = [], []
    for chunks, n_dec, dec in passes:
        kernels = exact_ms(h, chunks, n_dec, dec)
        want = kernels + (model.overhead_ms if chunks else 0.0)   # a prefill's dispatch
        errs.append(model.raw_pass_ms(chunks, n_dec, dec) / want - 1)
        if chunks and n_dec:
            alone = exact_ms(h, chunks, 0, 0) + exact_ms(h, (), n_dec, dec)
            added.append(alone / kernels - 1)
    run_errs = []
    pairs = {(n, int(a) // n) for n, active in runs for a in active[:: max(1, len(active) // 64)]}
    for n, mean in sorted(pairs):
        got = model.raw_pass_ms((), n, n * mean)
        run_errs.append(got / exact_ms(h, (), n, n * mean) - 1)
    print(f"1. per pass vs direct library calls ({path}, first {minutes:g} min)")
    print(f"   single passes      {stats(errs)}")
    print(f"   coalesced decode   {stats(run_errs)}")
    print(f"   (prefill-only + decode-only, for the {len(added)} mixed passes: "
          f"{stats(added)})")


# -- 2. measured -----------------------------------------------------------------------

def aic(model: str, system: str, tp: int = 1, **quant) -> AicTiming:
    tm = TimingConfig(type="aic", model=model, system=system, **quant)
    return AicTiming(EngineConfig(tensor_parallel_size=tp, timing_model=tm))


def profile_section() -> None:
    t = aic("meta-llama/Meta-Llama-3.1-8B", "h200_sxm", gemm_quant_mode="fp8")
    df = pd.read_csv(PROFILE, comment="#")
    pre = df[df.phase == "prefill"]
    pe = [t.pass_ms([(int(x), 0)], 0, 0) / ms - 1 for x, ms in zip(pre.tokens, pre.ms)]
    dec = df[(df.phase == "decode")]
    dec = dec[(dec.tokens % dec.context_length == 0)]
    de = [t.pass_ms((), int(s // c), int(s)) / ms - 1
          for s, c, ms in zip(dec.tokens, dec.context_length, dec.ms)]
    print("2a. vs the shipped H200 Llama-3.1-8B-FP8 vLLM profile (Llama-3.1-8B, fp8 GEMMs)")
    print(f"   prefill (TTFT)     {stats(pe)}")
    print(f"   decode (ITL)       {stats(de)}")


def llama2_70b_folder() -> str:
    """A folder whose config.json is Llama-2-70B's (see the module docstring)."""
    from simmodel.engine.aic_library import _configs_dir
    with open(os.path.join(_configs_dir(), "meta-llama--Meta-Llama-3.1-70B_config.json")) as f:
        cfg = json.load(f)
    cfg.pop("rope_scaling", None)
    cfg.update(vocab_size=32000, max_position_embeddings=4096, rope_theta=10000.0,
               bos_token_id=1, eos_token_id=2)
    folder = tempfile.mkdtemp(prefix="llama2-70b-")
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f)
    return folder


def splitwise_section(measured_dir: Path) -> None:
    path = measured_dir / "splitwise_perf_model.csv"
    if not path.is_file():
        print(f"2b. Splitwise: {path} not found (--measured-dir)")
        return
    df = pd.read_csv(path)
    df = df[(df.model == "llama2-70b") & df.hardware.isin(["a100-80gb", "h100-80gb"])]
    keys = ["hardware", "tensor_parallel", "prompt_size", "batch_size", "token_size"]
    df = df.groupby(keys, as_index=False)[["prompt_time", "token_time"]].mean()
    folder = llama2_70b_folder()
    print("2b. vs Splitwise's measured Llama-2-70B (prompt = prefill pass, token = decode step)")
    allp, allt = [], []
    for (hw, tp), g in df.groupby(["hardware", "tensor_parallel"]):
        t = aic(folder, {"a100-80gb": "a100_sxm", "h100-80gb": "h100_sxm"}[hw], int(tp))
        pe = [t.pass_ms([(int(p), 0)] * int(b), 0, 0) / ms - 1
              for p, b, ms in zip(g.prompt_size, g.batch_size, g.prompt_time)]
        te = [t.pass_ms((), int(b), int(b) * int(p + o // 2)) / ms - 1
              for p, b, o, ms in zip(g.prompt_size, g.batch_size, g.token_size, g.token_time)]
        allp += pe
        allt += te
        print(f"   {hw} TP{tp}  prompt {stats(pe)}")
        print(f"   {hw} TP{tp}  token  {stats(te)}")
    print(f"   all          prompt {stats(allp)}")
    print(f"   all          token  {stats(allt)}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default=str(ROOT / "scenarios/aic_llama8b_h200.yaml"))
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--measured-dir", type=Path, default=ROOT / "benchmarks" / "measured")
    args = ap.parse_args(argv)
    print(f"buckets: exact below {aic_timing.EXACT_BELOW}, "
          f"{2 ** aic_timing.STEP_BITS} steps per octave above")
    memo_section(args.scenario, args.minutes)
    profile_section()
    splitwise_section(args.measured_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
