"""Write a large prefix-sharing Mooncake trace and its scenario (issue 14, divergence 2).

    python benchmarks/scale_case.py OUT_DIR [--seed 14] [--requests 200000] [--workers 64]
                                            [--rate 192] [--blocks 16384]
    python benchmarks/vs_dynamo.py OUT_DIR/scale_case.yaml

Writes ``OUT_DIR/scale_case.jsonl`` and ``OUT_DIR/scale_case.yaml`` (round robin over
``--workers`` vLLM workers with ``--blocks`` blocks of 64 tokens each, chunked prefill and
prefix caching on: the defaults).  Everything is drawn from ``random.Random(seed)``, so
the same arguments write the same bytes.

The workload is chat-like, with a lot of prefix sharing, and it fills every worker's
pool so that cached prefixes are evicted (LRU of inactive blocks):

* 40 system prompts of 1-12 trace blocks (512 tokens each);
* 2,000 open conversations, each on one system prompt; a request picks one at random
  and extends its prompt by 1-6 new blocks (a new turn), repeats it (p 0.2), or is the
  bare system prompt (p 0.05); a conversation ends after 1-8 turns or 64 blocks;
* half of the prompts end on a block boundary (``input_length = 512 * len(hash_ids)``),
  the rest cut the last block at random; outputs 5-400 tokens; Poisson arrivals at
  ``--rate`` requests/s.

Block-aligned prompts whose every block is cached make the engine recompute their last
block (one token is always computed), which puts a second copy of a cached block in the
pool: the case that found the copy rule of simmodel/engine/kv_cache.py.
``scenarios/scale_prefix_eviction.yaml`` is a small case cut from it.
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

BLOCK = 512


def generate(seed: int, requests: int, rate_per_s: float) -> list[dict]:
    """The trace rows, in arrival order."""
    rng = random.Random(seed)
    next_id = 0

    def new_ids(k: int) -> list[int]:
        nonlocal next_id
        ids = list(range(next_id, next_id + k))
        next_id += k
        return ids

    systems = [new_ids(rng.randint(1, 12)) for _ in range(40)]

    def conversation() -> dict:
        system = rng.choice(systems)
        return {"system": system, "ids": list(system), "turns": rng.randint(1, 8)}

    convs = [conversation() for _ in range(2000)]
    rows, t = [], 0.0
    for _ in range(requests):
        t += rng.expovariate(rate_per_s / 1000.0)
        j = rng.randrange(len(convs))
        c = convs[j]
        u = rng.random()
        if u < 0.05:
            ids = c["system"]                          # the bare system prompt
        else:
            if u >= 0.25:                              # else: a repeat of the last prompt
                c["ids"] = c["ids"] + new_ids(rng.randint(1, 6))
            ids = c["ids"]
            c["turns"] -= 1
            if c["turns"] <= 0 or len(c["ids"]) >= 64:
                convs[j] = conversation()
        cut = 0 if rng.random() < 0.5 else rng.randint(1, BLOCK - 1)
        rows.append({"timestamp": round(t, 3), "input_length": len(ids) * BLOCK - cut,
                     "output_length": rng.randint(5, 400), "hash_ids": list(ids)})
    return rows


SCENARIO = """\
# Written by benchmarks/scale_case.py --seed {seed} --requests {requests} --workers {workers}
# --rate {rate} --blocks {blocks}: a chat-like prefix-sharing trace that fills every pool.
name: scale_case
seed: 0
workload:
  trace: scale_case.jsonl
  format: mooncake
  trace_block_size: 512
  arrival_speedup_ratio: 1.0
cluster:
  workers: {workers}
  engine: {{block_size: 64, num_gpu_blocks: {blocks}, max_num_seqs: 256, max_num_batched_tokens: 8192, enable_prefix_caching: true, enable_chunked_prefill: true, preemption_mode: lifo, speedup_ratio: 1.0, decode_speedup_ratio: 1.0, max_model_len: null, timing_model: {{type: polynomial}}}}
  router: {{mode: round_robin}}
sla: {{}}
run: {{max_sim_time_ms: null}}
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument("--requests", type=int, default=200_000)
    ap.add_argument("--workers", type=int, default=64)
    ap.add_argument("--rate", type=float, default=192.0, help="arrivals per second")
    ap.add_argument("--blocks", type=int, default=16_384, help="KV blocks per worker")
    args = ap.parse_args(argv)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = generate(args.seed, args.requests, args.rate)
    with open(out / "scale_case.jsonl", "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r, separators=(",", ":")) + "\n")
    (out / "scale_case.yaml").write_text(SCENARIO.format(
        seed=args.seed, requests=args.requests, workers=args.workers, rate=args.rate,
        blocks=args.blocks), encoding="utf-8")
    print(f"wrote {len(rows)} rows ({rows[-1]['timestamp'] / 1000:.0f} s of arrivals) and "
          f"the scenario to {out}/scale_case.{{jsonl,yaml}}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
