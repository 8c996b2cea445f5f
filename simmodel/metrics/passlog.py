"""Append-only per-worker log of forward passes, stored by column.

Single passes append one value per column; coalesced decode runs extend every column with
a whole run at once.  The columns are ``array.array``s of C doubles and 64-bit ints (8
bytes a value, against 32-40 for a Python number in a list: a long run logs millions of
passes); ``arrays()`` builds numpy columns once (cached until the next append).
"""
from __future__ import annotations

from array import array

import numpy as np

COLUMNS = ("start_ms", "end_ms", "prefill_tokens", "num_prefill", "num_decode",
           "decode_tokens", "kv_blocks_active")


class PassLog:
    __slots__ = ("start", "end", "prefill_tokens", "num_prefill", "num_decode",
                 "decode_tokens", "kv_active", "_arrays")

    def __init__(self):
        self.start = array("d")
        self.end = array("d")
        self.prefill_tokens = array("q")
        self.num_prefill = array("q")
        self.num_decode = array("q")
        self.decode_tokens = array("q")
        self.kv_active = array("q")
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
        zeros = bytes(8 * m)
        self.prefill_tokens.frombytes(zeros)
        self.num_prefill.frombytes(zeros)
        self.num_decode.frombytes(np.full(m, num_decode, dtype=np.int64).tobytes())
        self.decode_tokens.frombytes(np.asarray(decode_tokens, dtype=np.int64).tobytes())
        self.kv_active.frombytes(np.asarray(kv_active, dtype=np.int64).tobytes())
        self._arrays = None

    def arrays(self) -> dict[str, np.ndarray]:
        """The columns as numpy arrays: views of the log, not copies (the log is read
        once, at the end of a run; while the views live, it cannot grow: BufferError)."""
        if self._arrays is None:
            self._arrays = {
                "start_ms": np.frombuffer(self.start, dtype=np.float64),
                "end_ms": np.frombuffer(self.end, dtype=np.float64),
                "prefill_tokens": np.frombuffer(self.prefill_tokens, dtype=np.int64),
                "num_prefill": np.frombuffer(self.num_prefill, dtype=np.int64),
                "num_decode": np.frombuffer(self.num_decode, dtype=np.int64),
                "decode_tokens": np.frombuffer(self.decode_tokens, dtype=np.int64),
                "kv_blocks_active": np.frombuffer(self.kv_active, dtype=np.int64),
            }
        return self._arrays
