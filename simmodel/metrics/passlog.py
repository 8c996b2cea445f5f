"""Append-only per-worker log of forward passes, stored by column.

Single passes append one value per column; coalesced decode runs extend every column with
a whole run at once.  The columns are ``array.array``s: C doubles for the times, 32-bit ints
for the counts (8 or 4 bytes a value, against 32-40 for a Python number in a list: a long
run logs millions of passes; a count of tokens or blocks in one pass fits in 32 bits).
``arrays()`` builds numpy views once (cached until the next append); the tables widen the
counts to int64 as they copy them out (``simmodel.metrics.tables``).
"""
from __future__ import annotations

from array import array

import numpy as np

COUNT = "i"         # array typecode of the count columns (C int, 32 bits)
COUNT_DTYPE = np.int32

COLUMNS = ("start_ms", "end_ms", "prefill_tokens", "num_prefill", "num_decode",
           "decode_tokens", "kv_blocks_active")


class PassLog:
    __slots__ = ("start", "end", "prefill_tokens", "num_prefill", "num_decode",
                 "decode_tokens", "kv_active", "_arrays")

    def __init__(self):
        self.start = array("d")
        self.end = array("d")
        self.prefill_tokens = array(COUNT)
        self.num_prefill = array(COUNT)
        self.num_decode = array(COUNT)
        self.decode_tokens = array(COUNT)
        self.kv_active = array(COUNT)
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
        self.start.frombytes(np.asarray(starts, dtype=np.float64).tobytes())
        self.end.frombytes(np.asarray(ends, dtype=np.float64).tobytes())
        zeros = bytes(4 * m)
        self.prefill_tokens.frombytes(zeros)
        self.num_prefill.frombytes(zeros)
        self.num_decode.frombytes(np.full(m, num_decode, dtype=COUNT_DTYPE).tobytes())
        self.decode_tokens.frombytes(np.asarray(decode_tokens, dtype=COUNT_DTYPE).tobytes())
        self.kv_active.frombytes(np.asarray(kv_active, dtype=COUNT_DTYPE).tobytes())
        self._arrays = None

    def arrays(self) -> dict[str, np.ndarray]:
        """The columns as numpy arrays: views of the log, not copies (the log is read
        once, at the end of a run; while the views live, it cannot grow: BufferError)."""
        if self._arrays is None:
            self._arrays = {
                "start_ms": np.frombuffer(self.start, dtype=np.float64),
                "end_ms": np.frombuffer(self.end, dtype=np.float64),
                "prefill_tokens": np.frombuffer(self.prefill_tokens, dtype=COUNT_DTYPE),
                "num_prefill": np.frombuffer(self.num_prefill, dtype=COUNT_DTYPE),
                "num_decode": np.frombuffer(self.num_decode, dtype=COUNT_DTYPE),
                "decode_tokens": np.frombuffer(self.decode_tokens, dtype=COUNT_DTYPE),
                "kv_blocks_active": np.frombuffer(self.kv_active, dtype=COUNT_DTYPE),
            }
        return self._arrays
