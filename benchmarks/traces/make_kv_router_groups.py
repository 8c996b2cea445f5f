"""Regenerate kv_router_groups.jsonl (prefix groups for the KV router with attention DP).

    python benchmarks/traces/make_kv_router_groups.py > benchmarks/traces/kv_router_groups.jsonl

Four prefix groups of 8 trace blocks (4,096 tokens) each.  One request of every group
arrives at 0 (the router's ties are then among idle ranks of one worker, which are
interchangeable); 196 more follow with Poisson arrivals at 1.2/s, each of a random
group with 1-2 fresh blocks after the prefix (the last block partly filled) and 20-300
output tokens, so the group's prefix, found on one rank, decides where it goes.  No
session ids.
"""
import json
import random
import sys


def main() -> None:
    rnd = random.Random(20261202)
    next_id = [1]

    def fresh(k):
        out = list(range(next_id[0], next_id[0] + k))
        next_id[0] += k
        return out

    groups = [fresh(8) for _ in range(4)]
    t, times = 0.0, [0.0] * 4
    for _ in range(196):
        t += rnd.expovariate(1.2) * 1000.0
        times.append(round(t, 3))
    for i, ts in enumerate(times):
        ids = groups[i] if i < 4 else rnd.choice(groups)
        ids = ids + fresh(rnd.randint(1, 2))
        row = {"timestamp": ts, "input_length": len(ids) * 512 - rnd.randint(0, 511),
               "output_length": rnd.randint(20, 300), "hash_ids": ids}
        sys.stdout.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
