"""Azure LLM inference traces (Azure/AzurePublicDataset, Splitwise ISCA'24) read into a
``Workload``.

A CSV file with the header ``TIMESTAMP,ContextTokens,GeneratedTokens`` (columns found by
name, in any order; extra columns ignored; blank lines ignored) and one request per row:

* ``TIMESTAMP``: an absolute wall-clock time ``YYYY-MM-DD HH:MM:SS[.f]`` with 0 to 7
  fractional digits (``2023-11-16 18:17:03.9799600``; a ``T`` may replace the space).
  It is parsed exactly into integer 100-ns ticks (no float drift), so arrivals are exact;
* ``ContextTokens``: the prompt length, an integer >= 1;
* ``GeneratedTokens``: the output length, an integer >= 1.  A row with 0 generated tokens
  is an error (as in every trace reader here: a request produces at least one token).

Every row is a one-turn session named ``request_<line>`` (1-based physical line; the
header is line 1).  Its arrival is the time since the **earliest** row (rows need not be
sorted; the published files are), in ms, divided by ``arrival_speedup_ratio``.

The traces carry no prefix information, so nothing is shared: every engine block of every
prompt gets a fresh token id (``Prompt(ids, run_len=engine_block_size, length)``), like
the reference's synthetic generator.  The reference replay has no Azure format; this
reader follows the README of ``shared/traces``.

Every mistake raises a one-line ``UserError("<path>:<line>: <what>")``.  Cost: one regex
match and three ``int`` conversions per row, O(1) Python work per row (the block ids of a
prompt are a ``range`` turned into a tuple at C speed).
"""
from __future__ import annotations

import csv
import datetime
import re
from typing import TYPE_CHECKING

from simmodel.errors import UserError
from simmodel.workload.model import Prompt, Session, Turn, Workload
from simmodel.workload.rows import (RowError, excerpt, open_trace, positive_int_arg,
                                    speedup_ratio)

if TYPE_CHECKING:
    from simmodel.config import WorkloadConfig

__all__ = ["COLUMNS", "excerpt", "from_config", "parse_timestamp", "read_azure"]

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")

_TS = re.compile(r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,7}))?")
_TICKS_PER_S = 10_000_000           # 100-ns ticks
_TICKS_PER_MS = 10_000
_FRAC_PAD = [10 ** (7 - n) for n in range(8)]   # scale of an n-digit fraction to ticks


def from_config(cfg: WorkloadConfig, *, engine_block_size: int) -> Workload:
    """Format ``azure``: ``cfg.trace`` read with ``cfg.arrival_speedup_ratio``, fresh
    prompt blocks of ``engine_block_size`` tokens."""
    return read_azure(cfg.trace, arrival_speedup_ratio=cfg.arrival_speedup_ratio,
                      engine_block_size=engine_block_size)


def parse_timestamp(text: str, _days: dict = {}) -> int:
    """``YYYY-MM-DD HH:MM:SS[.fffffff]`` -> integer 100-ns ticks since 0001-01-01."""
    m = _TS.fullmatch(text.strip())
    if m is None:
        raise RowError(f"TIMESTAMP {excerpt(text)} is not 'YYYY-MM-DD HH:MM:SS[.fffffff]' "
                       f"(at most 7 fractional digits)")
    y, mo, d, h, mi, s, frac = m.groups()
    day = _days.get((y, mo, d))         # a trace spans few days: parse each date once
    if day is None:
        try:
            day = datetime.date(int(y), int(mo), int(d)).toordinal()
        except ValueError as e:
            raise RowError(f"TIMESTAMP {excerpt(text)}: {e}") from None
        _days[(y, mo, d)] = day
    h, mi, s = int(h), int(mi), int(s)
    if h > 23 or mi > 59 or s > 59:
        raise RowError(f"TIMESTAMP {excerpt(text)}: time of day out of range")
    ticks = ((day * 24 + h) * 60 + mi) * 60 + s
    ticks *= _TICKS_PER_S
    if frac:
        ticks += int(frac) * _FRAC_PAD[len(frac)]
    return ticks


def _header_problem(path: str, header: list, missing: list) -> str:
    """What is wrong with a header, quoting it only when the file is a CSV with a
    comma-separated first line (a short excerpt of at most three cells)."""
    want = f"header must name the columns {','.join(COLUMNS)}"
    if len(header) < 2 or not path.lower().endswith(".csv"):
        return f"not an Azure CSV trace: {want}"
    shown = ", ".join(excerpt(c, 16) for c in header[:3]) + (", ..." if len(header) > 3 else "")
    return f"{want}; missing {', '.join(missing)} (got {shown})"


def _count(name: str, text: str) -> int:
    """A token count cell: a whole number >= 1."""
    text = text.strip()
    if not text.isdigit():         # also refuses signs, decimals and empty cells
        raise RowError(f"{name} must be a whole number >= 1, got {excerpt(text)}")
    value = int(text)
    if value < 1:
        raise RowError(f"{name} must be >= 1, got {value}")
    return value


def read_azure(path: str, *, arrival_speedup_ratio: float = 1.0,
               engine_block_size: int) -> Workload:
    """Read an Azure LLM inference CSV trace into a ``Workload`` (see the module docstring).

    ``engine_block_size`` is the run length of the fresh prompt blocks;
    ``arrival_speedup_ratio`` divides the arrivals.  Raises ``UserError`` naming
    ``path:line`` for any problem in the file.
    """
    positive_int_arg("engine_block_size", engine_block_size)
    ratio = speedup_ratio(arrival_speedup_ratio)
    f = open_trace(path, "an Azure CSV file", encoding="utf-8-sig", newline="")
    with f:
        rows = _read_rows(path, csv.reader(f))
    if not rows:
        raise UserError(f"{path}: empty trace (a header but no rows)")
    sessions, next_id = _sessions(rows, engine_block_size, ratio)
    return Workload(
        sessions=sessions,
        source=str(path),
        meta={"format": "azure", "engine_block_size": engine_block_size,
              "arrival_speedup_ratio": arrival_speedup_ratio,
              "unique_hash_ids": next_id},
    )


def _is_blank(cells: list) -> bool:
    """True for a blank CSV line (no cells, or one cell of white space)."""
    return not cells or (len(cells) == 1 and not cells[0].strip())


def _read_rows(path: str, reader) -> list[tuple[int, int, int, int]]:
    """``(line, ticks, context, generated)`` of every row after the header, validated."""
    rows = []
    line = 0
    try:
        header = None
        for cells in reader:
            line = reader.line_num
            if not _is_blank(cells):
                header = [c.strip() for c in cells]
                break
        if header is None:
            raise UserError(f"{path}: empty trace (no header, no rows)")
        missing = [c for c in COLUMNS if c not in header]
        if missing:
            raise RowError(_header_problem(path, header, missing))
        i_ts, i_ctx, i_gen = (header.index(c) for c in COLUMNS)
        width = len(header)
        for cells in reader:
            line = reader.line_num
            if _is_blank(cells):
                continue
            if len(cells) != width:
                raise RowError(f"expected {width} comma-separated cells "
                               f"like the header, got {len(cells)}")
            rows.append((line, parse_timestamp(cells[i_ts]),
                         _count("ContextTokens", cells[i_ctx]),
                         _count("GeneratedTokens", cells[i_gen])))
    except RowError as e:
        raise UserError(f"{path}:{line}: {e}") from None
    except csv.Error as e:
        raise UserError(f"{path}:{line}: malformed CSV ({e})") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not valid UTF-8") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read file ({e.strerror or e})") from None
    return rows


def _sessions(rows: list[tuple[int, int, int, int]], bs: int,
              ratio: float) -> tuple[tuple[Session, ...], int]:
    """One one-turn session per row, every prompt block a fresh id; also the number of
    ids used."""
    t0 = min(r[1] for r in rows)
    next_id = 0
    sessions = []
    for line, ticks, context, generated in rows:
        n = -(-context // bs)
        prompt = Prompt(tuple(range(next_id, next_id + n)), bs, context)
        next_id += n
        name = f"request_{line}"
        # (ticks - t0) / 10_000 is exact in ms up to float rounding of the one division.
        arrival = (ticks - t0) / _TICKS_PER_MS / ratio
        sessions.append(Session(name, (Turn(name, 0, prompt, generated,
                                            arrival_ms=arrival, line=line),)))
    return tuple(sessions), next_id
