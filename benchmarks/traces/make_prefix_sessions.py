"""Regenerate prefix_sessions.jsonl (a small chat-like Mooncake trace for fidelity cases).

    python benchmarks/traces/make_prefix_sessions.py > benchmarks/traces/prefix_sessions.jsonl

40 users arrive 50-600 ms apart; each picks one of three system prompts (4, 2 or 6 trace
blocks) and has 1-4 turns.  Every turn's prompt is the previous turn's hash_ids plus 1-3
fresh blocks (the Mooncake format holds the full prompt), with the last block partly
filled; turns are 200-3000 ms apart (the reference turns the timestamp gap into the
think time after the previous turn completes).  Multi-turn users, and half of the
single-turn ones, have a session_id; the others have none (simmodel names them
request_<line>).  Rows are in timestamp order; a session's rows stay in turn order.
"""
import json
import random
import sys


def main() -> None:
    rnd = random.Random(20240601)
    next_id = [1000]

    def fresh(k):
        out = list(range(next_id[0], next_id[0] + k))
        next_id[0] += k
        return out

    systems = [fresh(4), fresh(2), fresh(6)]
    rows, t = [], 0
    for s in range(40):
        t += rnd.randint(50, 600)
        hist = list(rnd.choice(systems)) + fresh(rnd.randint(1, 3))
        turns = rnd.randint(1, 4)
        sid = f"user-{s}" if turns > 1 or rnd.random() < 0.5 else None
        ts = t
        for _ in range(turns):
            row = {"timestamp": ts, "input_length": len(hist) * 512 - rnd.randint(0, 511),
                   "output_length": rnd.randint(5, 300), "hash_ids": list(hist)}
            if sid:
                row["session_id"] = sid
            rows.append(row)
            ts += rnd.randint(200, 3000)
            hist = hist + fresh(rnd.randint(1, 3))
    rows.sort(key=lambda r: r["timestamp"])   # stable: a session's turns keep their order
    for row in rows:
        sys.stdout.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
