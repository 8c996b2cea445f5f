"""``Result.requests`` and ``Result.passes`` as columns: built into DataFrames only when
read (``LazyTable``), written to parquet from the columns (``simmodel.metrics.parquet``).

A run's summary and its result files need no DataFrame, so ``simmodel run --out`` builds
none (nor imports pandas), and a long run's passes (millions of rows) are written a row
group at a time instead of being copied into a frame and again into an arrow table.
"""
from __future__ import annotations

from itertools import compress

import numpy as np

from simmodel.metrics.parquet import ROW_GROUP_ROWS, StringRuns, write_columns
from simmodel.result import PASS_COLUMNS, REQUEST_COLUMNS, LazyTable


class RequestsTable(LazyTable):
    """The requests table: ``columns`` maps each of ``REQUEST_COLUMNS`` to a numpy array
    (int64 / float64) or a list of values whose dtype pandas infers (strings, ``None``)."""

    def __init__(self, columns: dict, n: int):
        self.columns, self.n = columns, n

    def __len__(self) -> int:
        return self.n

    def __contains__(self, name: str) -> bool:
        return name in self.columns

    def __getitem__(self, name: str) -> np.ndarray:
        """Column ``name`` as a numpy array (a list column as an object array)."""
        values = self.columns[name]
        return values if isinstance(values, np.ndarray) else np.array(values, dtype=object)

    def where(self, mask: np.ndarray) -> RequestsTable:
        """The rows where ``mask`` (a boolean array) is true, in order."""
        mask = np.asarray(mask, dtype=bool)
        return RequestsTable({name: values[mask] if isinstance(values, np.ndarray)
                              else list(compress(values, mask))
                              for name, values in self.columns.items()}, int(mask.sum()))

    def frame(self):
        import pandas as pd
        if not self.n:
            return pd.DataFrame.from_records([], columns=list(REQUEST_COLUMNS))
        return pd.DataFrame(self.columns)

    def to_parquet(self, path: str, index: bool = False) -> None:
        if not (self.n and write_columns(path, [self.columns])):
            self.frame().to_parquet(path, index=index)


class PassesTable(LazyTable):
    """The passes table: every worker's pass log (``WorkerRecord``s with passes), worker
    by worker in the given order."""

    def __init__(self, workers):
        self.workers = [w for w in workers if w.num_passes]
        self.n = sum(w.num_passes for w in self.workers)

    def __len__(self) -> int:
        return self.n

    def frame(self):
        import pandas as pd
        workers = self.workers
        if not workers:
            return pd.DataFrame(columns=list(PASS_COLUMNS))
        counts = [w.num_passes for w in workers]
        data = {"pool": np.repeat(np.array([w.pool for w in workers], dtype=object), counts),
                "worker": np.repeat(np.array([w.idx for w in workers], dtype=np.int64),
                                    counts)}
        for name in workers[0].passes:
            data[name] = _joined([w.passes[name] for w in workers])
        return pd.DataFrame(data, copy=False)

    def rows(self, start: int, stop: int) -> dict:
        """The columns of rows ``start:stop`` (``pool`` as runs of one worker's pool)."""
        parts, offset = [], 0
        for w in self.workers:
            a, b = max(start - offset, 0), min(stop - offset, w.num_passes)
            if a < b:
                parts.append((w, a, b))
            offset += w.num_passes
        out = {"pool": StringRuns([w.pool for w, _, _ in parts],
                                  [b - a for _, a, b in parts]),
               "worker": np.concatenate([np.full(b - a, w.idx, dtype=np.int64)
                                         for w, a, b in parts])}
        for name in PASS_COLUMNS[2:]:
            out[name] = _joined([w.passes[name][a:b] for w, a, b in parts])
        return out

    def to_parquet(self, path: str, index: bool = False) -> None:
        groups = (self.rows(a, min(a + ROW_GROUP_ROWS, self.n))
                  for a in range(0, self.n, ROW_GROUP_ROWS))
        if not (self.n and write_columns(path, groups)):
            self.frame().to_parquet(path, index=index)


def _joined(parts: list) -> np.ndarray:
    """One column of several pass logs; counts, logged in 32 bits, widened to int64."""
    return np.concatenate(parts, dtype=np.int64 if parts[0].dtype.kind == "i" else None)
