"""Append-only per-worker log of forward passes, stored by column.

Single passes append one value per column; coalesced decode runs extend every column with
a whole run at once.  The columns are ``array.array``s: C doubles for the times, 32-bit
ints for the counts (4 or 8 bytes a value, against 32-40 for a Python number in a list: a
long run logs millions of passes).  The counts of a pass (tokens, requests, blocks) fit in
32 bits unless a scenario is extreme; the first count that does not widens the log's count
columns to 64 bits.  ``arrays()`` builds numpy views once (cached until the next append);
the tables widen the counts to int64 as they copy them out (``simmodel.metrics.tables``).
"""
from __future__ import annotations

from array import array

import numpy as np

#: array typecodes of the count columns: C int (32 bits), widened to 64 bits (``q``) for
#: good the first time a count does not fit (a pool of billions of blocks, say)
NARROW, WIDE = "i", "q"
_DTYPES = {NARROW: np.int32, WIDE: np.int64}
_COUNTS = ("prefill_tokens", "num_prefill", "num_decode", "decode_tokens", "kv_active")

COLUMNS = ("start_ms", "end_ms", "prefill_tokens", "num_prefill", "num_decode",
           "decode_tokens", "kv_blocks_active")


class PassLog:
    __slots__ = ("start", "end", "prefill_tokens", "num_prefill", "num_decode",
                 "decode_tokens", "kv_active", "_arrays")

    def __init__(self):
        self.start = array("d")
        self.end = array("d")
        self.prefill_tokens = array(NARROW)
        self.num_prefill = array(NARROW)
        self.num_decode = array(NARROW)
        self.decode_tokens = array(NARROW)
        self.kv_active = array(NARROW)
        self._arrays = None

    def __len__(self) -> int:
        return len(self.end)

    def add(self, start, end, prefill_tokens, num_prefill, num_decode, decode_tokens, kv_active):
        if (prefill_tokens | num_prefill | num_decode | decode_tokens | kv_active) >> 31:
            self._widen()                       # (counts are >= 0)
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
        if m and max(num_decode, int(np.max(decode_tokens)), int(np.max(kv_active))) >> 31:
            self._widen()
        dtype = _DTYPES[self.kv_active.typecode]
        self.start.frombytes(np.asarray(starts, dtype=np.float64).tobytes())
        self.end.frombytes(np.asarray(ends, dtype=np.float64).tobytes())
        zeros = bytes(self.kv_active.itemsize * m)
        self.prefill_tokens.frombytes(zeros)
        self.num_prefill.frombytes(zeros)
        self.num_decode.frombytes(np.full(m, num_decode, dtype=dtype).tobytes())
        self.decode_tokens.frombytes(np.asarray(decode_tokens, dtype=dtype).tobytes())
        self.kv_active.frombytes(np.asarray(kv_active, dtype=dtype).tobytes())
        self._arrays = None

    def _widen(self) -> None:
        """The count columns become 64-bit, values kept."""
        if self.kv_active.typecode == WIDE:
            return
        for name in _COUNTS:
            setattr(self, name, array(WIDE, getattr(self, name)))

    def arrays(self) -> dict[str, np.ndarray]:
        """The columns as numpy arrays: views of the log, not copies (the log is read
        once, at the end of a run; while the views live, it cannot grow: BufferError)."""
        if self._arrays is None:
            count = _DTYPES[self.kv_active.typecode]
            self._arrays = {
                "start_ms": np.frombuffer(self.start, dtype=np.float64),
                "end_ms": np.frombuffer(self.end, dtype=np.float64),
                "prefill_tokens": np.frombuffer(self.prefill_tokens, dtype=count),
                "num_prefill": np.frombuffer(self.num_prefill, dtype=count),
                "num_decode": np.frombuffer(self.num_decode, dtype=count),
                "decode_tokens": np.frombuffer(self.decode_tokens, dtype=count),
                "kv_blocks_active": np.frombuffer(self.kv_active, dtype=count),
            }
        return self._arrays
