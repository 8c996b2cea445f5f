"""Columns of a requests table as numpy arrays, for the summary: the table is a
DataFrame (``Result.requests``, a user's frame) or a ``simmodel.metrics.tables``
``RequestsTable`` (a run's own summary, no pandas)."""
from __future__ import annotations

import numpy as np


def array(column) -> np.ndarray:
    """A numeric column (a numpy array, or a DataFrame's Series) as a numpy array:
    int64 kept, anything else float64 with missing values (NaN, None, pd.NA) as NaN."""
    if isinstance(column, np.ndarray):
        return column if column.dtype.kind in "if" else np.array(column, dtype=float)
    import pandas as pd           # a Series: pandas is loaded
    numbers = pd.to_numeric(column)
    if isinstance(numbers.dtype, np.dtype) and numbers.dtype.kind == "i":
        return numbers.to_numpy()
    return numbers.to_numpy(dtype=float, na_value=np.nan)


def floats(column) -> np.ndarray:
    """A numeric column as float64, missing values as NaN."""
    return array(column).astype(float, copy=False)


class Rows:
    """The rows of ``requests`` where ``mask`` holds: ``rows[name]`` is that column as a
    numpy array (``array``)."""

    def __init__(self, requests, mask: np.ndarray):
        self.requests, self.mask = requests, mask

    def __len__(self) -> int:
        return int(self.mask.sum())

    def __contains__(self, name: str) -> bool:
        return name in self.requests

    def __getitem__(self, name: str) -> np.ndarray:
        return array(self.requests[name])[self.mask]


def int_sum(column: np.ndarray) -> int:
    """Sum of a token-count column as a Python int (exact for integer dtypes; missing
    values count 0, as in pandas' sum)."""
    if not len(column):
        return 0
    if column.dtype.kind in "iu":
        return int(column.sum())
    return int(round(float(np.where(np.isnan(column), 0.0, column).sum())))
