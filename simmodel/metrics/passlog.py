"""Append-only per-worker log of forward passes, stored by column.

Single passes append one value per column; coalesced decode runs extend every column with
a whole run at once.  ``arrays()`` builds numpy columns once (cached until the next append).
"""
from __future__ import annotations

import numpy as np

COLUMNS = ("start_ms", "end_ms", "prefill_tokens", "num_prefill", "num_decode",
           "decode_tokens", "kv_blocks_active")


class PassLog:
    __slots__ = ("start", "end", "prefill_tokens", "num_prefill", "num_decode",
                 "decode_tokens", "kv_active", "_arrays")

    def __init__(self):
        self.start: list[float] = []
        self.end: list[float] = []
        self.prefill_tokens: list[int] = []
        self.num_prefill: list[int] = []
        self.num_decode: list[int] = []
        self.decode_tokens: list[int] = []
        self.kv_active: list[int] = []
        self._arrays = None

    def __len__(self) -> int:
        return len(self.end)

    def add(self, start, end, prefill_tokens, num_prefill, num_decode, decode_tokens, kv_active):
        self.start.append(start)
        self.end.append(end)
        self.prefill_tokens.append(prefill_tokens)
        self.num_prefill.append(num_prefill)
        self.num_decode.append(num_decode)
        self.decode_tokens.append(decode_tokens)
        self.kv_active.append(kv_active)
        self._arrays = None

    def add_run(self, starts: np.ndarray, ends: np.ndarray, num_decode: int,
                decode_tokens: np.ndarray, kv_active: np.ndarray) -> None:
        m = len(ends)
        self.start.extend(starts.tolist())
        self.end.extend(ends.tolist())
        zeros = [0] * m
        self.prefill_tokens.extend(zeros)
        self.num_prefill.extend(zeros)
        self.num_decode.extend([num_decode] * m)
        self.decode_tokens.extend(decode_tokens.tolist())
        self.kv_active.extend(kv_active.tolist())
        self._arrays = None

    def arrays(self) -> dict[str, np.ndarray]:
        if self._arrays is None:
            self._arrays = {
                "start_ms": np.array(self.start, dtype=float),
                "end_ms": np.array(self.end, dtype=float),
                "prefill_tokens": np.array(self.prefill_tokens, dtype=np.int64),
                "num_prefill": np.array(self.num_prefill, dtype=np.int64),
                "num_decode": np.array(self.num_decode, dtype=np.int64),
                "decode_tokens": np.array(self.decode_tokens, dtype=np.int64),
                "kv_blocks_active": np.array(self.kv_active, dtype=np.int64),
            }
        return self._arrays
