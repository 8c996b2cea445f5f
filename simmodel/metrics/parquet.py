"""Parquet files written from columns with pyarrow alone, byte for byte as
``DataFrame.to_parquet(path, index=False)`` would write the DataFrame of those columns
(the same arrow types, row groups and ``pandas`` schema metadata), without building the
DataFrame or importing pandas.

It covers the columns a result has: int64 and float64 numpy arrays, and lists of
strings and ``None`` (pandas >= 3 infers its ``str`` dtype, arrow ``large_string``; a
list of ``None`` only is an ``object`` column, arrow ``null``) or ``StringRuns`` of them
(a column of long runs of one value, as the passes' ``pool``), with pandas' default
options.  Anything else (older pandas, a changed option, another kind of column) is left
to pandas: ``write_columns`` returns False and writes nothing.
"""
from __future__ import annotations

import json
import os
import re
import sys
from typing import Iterable, NamedTuple, Optional

import numpy as np

#: Rows per row group: pyarrow's default (``pq.write_table`` with no ``row_group_size``).
ROW_GROUP_ROWS = 1024 * 1024

_NUMERIC = (np.dtype(np.int64), np.dtype(np.float64))


class StringRuns(NamedTuple):
    """A column of strings and ``None`` given as runs: ``values[i]`` repeated
    ``counts[i]`` times (written as the list it stands for, without making it)."""
    values: list
    counts: list


def write_columns(path: str, groups: Iterable[dict]) -> bool:
    """Write the rows given as consecutive row groups of at most ``ROW_GROUP_ROWS`` rows
    (dicts column -> values, in column order; at least one) to ``path``; False (nothing
    written) if pandas should write them instead."""
    version = _pandas_version()
    if version is None:
        return False
    import pyarrow as pa

    groups = iter(groups)
    converted = _arrow_columns(next(groups), pa)
    if converted is None:
        return False
    kinds = converted[1]
    schema = pa.schema([pa.field(name, a.type) for name, a in converted[0].items()],
                       metadata={b"pandas": _pandas_metadata(kinds, version, pa.__version__)})
    with _Writer(path, schema, pa) as writer:
        while True:
            table = pa.Table.from_arrays(list(converted[0].values()), schema=schema)
            converted = None                 # each row group is freed before the next
            writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
            table = None
            group = next(groups, None)
            if group is None:
                return True
            converted, group = _arrow_columns(group, pa), None
            if converted is None or converted[1] != kinds:
                raise ValueError(f"{path}: row groups with other kinds of columns")


class _Writer:
    """``pyarrow.parquet.ParquetWriter(path, schema, compression="snappy")`` on a local
    file, made from pyarrow's compiled writer with the options that class passes it (its
    defaults), so that a short run does not import ``pyarrow.parquet`` (about 60 ms: it
    imports ``pyarrow.fs``).  The same bytes are written (a test); a pyarrow whose
    compiled writer takes other options gets the public class instead."""

    def __init__(self, path: str, schema, pa):
        self.sink = None
        try:
            from pyarrow._parquet import ParquetWriter
            self.sink = pa.OSFile(path, "wb")
            self.writer = ParquetWriter(self.sink, schema, **_WRITER_OPTIONS)
        except (ImportError, TypeError, AttributeError):
            if self.sink is not None:
                self.sink.close()
            import pyarrow.parquet as pq
            self.sink = None
            self.writer = pq.ParquetWriter(path, schema, compression="snappy")

    def write_table(self, table, row_group_size: int) -> None:
        self.writer.write_table(table, row_group_size=row_group_size)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.writer.close()
        if self.sink is not None:
            self.sink.close()


#: what ``pyarrow.parquet.ParquetWriter`` gives its compiled writer by default
#: (pyarrow 12 to 26), snappy compression as asked
_WRITER_OPTIONS = dict(
    version="2.6", compression="snappy", use_dictionary=True, write_statistics=True,
    use_deprecated_int96_timestamps=False, compression_level=None,
    use_byte_stream_split=False, column_encoding=None, writer_engine_version="V2",
    data_page_version="1.0", use_compliant_nested_type=True, encryption_properties=None,
    write_batch_size=None, dictionary_pagesize_limit=None, store_schema=True)


def _arrow_columns(columns: dict, pa) -> Optional[tuple[dict, dict]]:
    """(name -> arrow array, name -> (pandas_type, numpy_type)), or None if a column is
    not of a kind written here."""
    arrays, kinds = {}, {}
    for name, values in columns.items():
        if isinstance(values, np.ndarray):
            if values.dtype not in _NUMERIC:
                return None
            arrays[name] = _numbers(values, pa)
            kinds[name] = (values.dtype.name, values.dtype.name)
            continue
        runs = isinstance(values, StringRuns)
        types = set(map(type, values.values if runs else values))
        if not types <= {str, type(None)}:
            return None
        if str in types:
            arrays[name] = _string_runs(values, pa) if runs else _strings(values, pa)
            kinds[name] = ("object", "str")
        else:
            arrays[name] = pa.nulls(sum(values.counts) if runs else len(values))
            kinds[name] = ("empty", "object")
    return arrays, kinds


# The arrays are made from their buffers: ``pa.array`` imports pandas.


def _validity(valid: np.ndarray, pa) -> tuple:
    """(validity bitmap or None, null count) of a boolean array."""
    nulls = len(valid) - int(np.count_nonzero(valid))
    return (pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None), nulls


def _numbers(values: np.ndarray, pa):
    """An int64 / float64 array of ``values`` (NaN as null, as pandas writes it), its data
    not copied."""
    values = np.ascontiguousarray(values)
    bitmap, nulls = (_validity(~np.isnan(values), pa) if values.dtype.kind == "f"
                     else (None, 0))
    kind = pa.float64() if values.dtype.kind == "f" else pa.int64()
    return pa.Array.from_buffers(kind, len(values), [bitmap, pa.py_buffer(values)], nulls)


def _strings(values: list, pa):
    """A ``large_string`` array of ``values`` (strings and ``None``: null)."""
    n = len(values)
    utf8 = {v: v.encode() for v in set(values) if v is not None}   # one copy of each value
    utf8[None] = b""
    encoded = list(map(utf8.__getitem__, values))
    return _string_array(np.fromiter(map(len, encoded), dtype=np.int64, count=n),
                         b"".join(encoded),
                         np.fromiter((v is not None for v in values), dtype=bool, count=n), pa)


def _string_runs(col: StringRuns, pa):
    """``_strings`` of the list ``col`` stands for, a run at a time."""
    counts = np.asarray(col.counts, dtype=np.int64)
    encoded = [b"" if v is None else v.encode() for v in col.values]
    lengths = np.repeat(np.array([len(e) for e in encoded], dtype=np.int64), counts)
    valid = np.repeat(np.array([v is not None for v in col.values], dtype=bool), counts)
    return _string_array(lengths, b"".join(e * int(c) for e, c in zip(encoded, counts)),
                         valid, pa)


def _string_array(lengths: np.ndarray, data: bytes, valid: np.ndarray, pa):
    """A ``large_string`` array of the rows' byte ``lengths`` over ``data``, null where
    not ``valid``."""
    n = len(lengths)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    bitmap, nulls = _validity(valid, pa)
    return pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data),
                                            bitmap, nulls)


def _pandas_metadata(kinds: dict, pandas_version: str, pyarrow_version: str) -> bytes:
    """The ``pandas`` schema metadata pyarrow writes for such a DataFrame (no index)."""
    return json.dumps({
        "index_columns": [], "column_indexes": [],
        "columns": [{"name": name, "field_name": name, "pandas_type": pandas_type,
                     "numpy_type": numpy_type, "metadata": None}
                    for name, (pandas_type, numpy_type) in kinds.items()],
        "attributes": {}, "creator": {"library": "pyarrow", "version": pyarrow_version},
        "pandas_version": pandas_version}).encode()


def _pandas_version() -> Optional[str]:
    """The installed pandas' version if it is >= 3 and infers strings as its
    arrow-backed ``str`` dtype (the default), else None.  Without importing pandas when it
    is not loaded yet: its version is read from ``pandas/_version_meson.py`` (where
    ``pandas.__version__`` comes from)."""
    pd = sys.modules.get("pandas")
    if pd is not None:
        dtype = pd.Series(["x"]).dtype        # "str" backed by arrow: the default
        version = pd.__version__ if getattr(dtype, "storage", None) == "pyarrow" else None
    else:
        import importlib.util
        spec = importlib.util.find_spec("pandas")
        try:
            with open(os.path.join(os.path.dirname(spec.origin), "_version_meson.py"),
                      encoding="utf-8") as f:
                m = re.search(r'__version__\s*=\s*"([^"]+)"', f.read())
        except (OSError, AttributeError, TypeError):
            return None
        version = m.group(1) if m else None
    major = re.match(r"\d+", version or "")
    return version if major and int(major.group()) >= 3 else None
