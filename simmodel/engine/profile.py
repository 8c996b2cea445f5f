"""Measured timing profiles: the files of ``timing_model: {type: table}``.  Pure, no SimPy.

A ``Profile`` is the prefill curve and the decode grid of a measured table
(``simmodel.engine.timing_table`` interpolates it).  Two file layouts are read (chosen
by the suffix):

* ``.npz`` -- the reference's layout: float arrays ``prefill_isl`` (n), ``prefill_ttft_ms``
  (n), ``decode_active_kv_tokens`` (a), ``decode_context_length`` (c) and ``decode_itl``
  (a × c; row i is ``decode_active_kv_tokens[i]``).  Axes strictly increasing, ≥ 2 points.
  Other arrays in the archive are ignored.
* ``.csv`` -- one table a person can write by hand, one measured point per row, rows in
  any order, ``#`` comment lines and blank lines allowed::

      phase,tokens,context_length,ms
      prefill,100,,19.5          # tokens = new prompt tokens in the pass
      decode,350,350,4.38        # tokens = Σ context of the decoders, context_length = mean
      ...

  The decode rows must cover a full grid: every ``tokens`` value with every
  ``context_length`` value, once each.
"""
from __future__ import annotations

import csv
import hashlib
import math
import os
import tempfile
import zipfile
from dataclasses import dataclass

import numpy as np

from simmodel.errors import UserError

#: The reference's NPZ array names (``dynamo_profile``).
NPZ_KEYS = ("prefill_isl", "prefill_ttft_ms", "decode_active_kv_tokens",
            "decode_context_length", "decode_itl")
#: The CSV layout's columns.
CSV_COLUMNS = ("phase", "tokens", "context_length", "ms")


@dataclass(frozen=True, eq=False)
class Profile:
    """A measured profile: the prefill curve and the decode grid (all float64, ms)."""

    source: str                    # the file, for messages
    prefill_tokens: np.ndarray     # (n,) strictly increasing: new tokens in the pass
    prefill_ms: np.ndarray         # (n,)
    decode_kv_tokens: np.ndarray   # (a,) strictly increasing: Σ context of the decoders
    decode_context: np.ndarray     # (c,) strictly increasing: mean context per decoder
    decode_ms: np.ndarray          # (a, c)


# -- reading ----------------------------------------------------------------------------

def load_profile(path: str) -> Profile:
    """Read and check a profile (``.npz`` or ``.csv``); ``UserError`` on any problem."""
    ext = os.path.splitext(path)[1].lower()
    if ext == ".npz":
        return read_npz(path)
    if ext == ".csv":
        return read_csv(path)
    raise UserError(f"{path}: unsupported timing profile format {ext or '(no suffix)'!r} "
                    "(expected .csv or .npz)")


def read_npz(path: str) -> Profile:
    try:
        with np.load(path, allow_pickle=False) as data:
            missing = [k for k in NPZ_KEYS if k not in data.files]
            if missing:
                raise UserError(f"{path}: missing array(s) {', '.join(missing)} (a timing "
                                f"profile needs {', '.join(NPZ_KEYS)})")
            arrays = {k: data[k] for k in NPZ_KEYS}
    except UserError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise UserError(f"{path}: not a readable NPZ file ({_one_line(e)})") from None
    out = {}
    for key, arr in arrays.items():
        if arr.dtype.kind not in "iuf":
            raise UserError(f"{path}: {key} must hold numbers, not dtype {arr.dtype}")
        want = 2 if key == "decode_itl" else 1
        if arr.ndim != want:
            raise UserError(f"{path}: {key} must be {want}-dimensional, not of shape "
                            f"{arr.shape}")
        out[key] = arr.astype(np.float64)
    px, py = out["prefill_isl"], out["prefill_ttft_ms"]
    if len(px) != len(py):
        raise UserError(f"{path}: prefill_isl has {len(px)} values but prefill_ttft_ms "
                        f"has {len(py)}")
    dx, dy, dz = (out["decode_active_kv_tokens"], out["decode_context_length"],
                  out["decode_itl"])
    if dz.shape != (len(dx), len(dy)):
        raise UserError(f"{path}: decode_itl has shape {dz.shape}, expected "
                        f"({len(dx)}, {len(dy)}) = (decode_active_kv_tokens, "
                        "decode_context_length)")
    _check_axis(path, "prefill_isl", px)
    _check_axis(path, "decode_active_kv_tokens", dx)
    _check_axis(path, "decode_context_length", dy)
    _check_values(path, "prefill_ttft_ms", py)
    _check_values(path, "decode_itl", dz)
    return Profile(path, px, py, dx, dy, dz)


def read_csv(path: str) -> Profile:
    """Read and check the CSV layout (module docstring)."""
    rows = _csv_rows(path)
    col = _csv_columns(path, *rows[0])
    prefill: dict[float, tuple[float, int]] = {}
    decode: dict[tuple[float, float], tuple[float, int]] = {}
    for lineno, text in rows[1:]:
        _csv_point(path, lineno, text, col, prefill, decode)
    if len(prefill) < 2:
        raise UserError(f"{path}: needs at least 2 prefill rows, found {len(prefill)}")
    px = np.array(sorted(prefill), dtype=np.float64)
    py = np.array([prefill[x][0] for x in px], dtype=np.float64)
    dx, dy, dz = _decode_grid(path, decode)
    return Profile(path, px, py, dx, dy, dz)


def _csv_rows(path: str) -> list[tuple[int, str]]:
    """(line number, text) of the file's header and data lines."""
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: cannot read the timing profile ({_one_line(e)})") from None
    rows = [(i, line) for i, line in enumerate(lines, 1)
            if line.strip() and not line.lstrip().startswith("#")]
    if not rows:
        raise UserError(f"{path}: empty timing profile (expected a header "
                        f"{','.join(CSV_COLUMNS)} and rows)")
    return rows


def _csv_columns(path: str, header_line: int, header_text: str) -> dict[str, int]:
    """The position of each of ``CSV_COLUMNS`` in the header."""
    header = [h.strip() for h in next(csv.reader([_strip_comment(header_text)]))]
    unknown = [h for h in header if h not in CSV_COLUMNS]
    missing = [c for c in CSV_COLUMNS if c not in header]
    if unknown or missing or len(header) != len(CSV_COLUMNS):
        what = (f"unknown column {unknown[0]!r}" if unknown else
                f"missing column {missing[0]!r}" if missing else "repeated column")
        raise UserError(f"{path}, line {header_line}: {what}; the header must be "
                        f"{','.join(CSV_COLUMNS)}")
    return {name: header.index(name) for name in CSV_COLUMNS}


def _csv_point(path: str, lineno: int, text: str, col: dict, prefill: dict,
               decode: dict) -> None:
    """Add the measured point of one data line to ``prefill`` or ``decode``."""
    cells = [c.strip() for c in next(csv.reader([_strip_comment(text)]))]
    where = f"{path}, line {lineno}"
    if len(cells) != len(CSV_COLUMNS):
        raise UserError(f"{where}: {len(cells)} fields, expected {len(CSV_COLUMNS)} "
                        f"({','.join(CSV_COLUMNS)})")
    phase = cells[col["phase"]]
    tokens = _number(where, "tokens", cells[col["tokens"]])
    ms = _number(where, "ms", cells[col["ms"]])
    if ms < 0:
        raise UserError(f"{where}: ms must be >= 0, got {cells[col['ms']]}")
    ctx_text = cells[col["context_length"]]
    if phase == "prefill":
        if ctx_text:
            raise UserError(f"{where}: a prefill row leaves context_length empty")
        if tokens in prefill:
            raise UserError(f"{where}: prefill point tokens={cells[col['tokens']]} "
                            f"repeats line {prefill[tokens][1]}")
        prefill[tokens] = (ms, lineno)
    elif phase == "decode":
        ctx = _number(where, "context_length", ctx_text)
        if (tokens, ctx) in decode:
            raise UserError(f"{where}: decode point (tokens={cells[col['tokens']]}, "
                            f"context_length={ctx_text}) repeats line "
                            f"{decode[(tokens, ctx)][1]}")
        decode[(tokens, ctx)] = (ms, lineno)
    else:
        raise UserError(f"{where}: phase must be prefill or decode, got {phase!r}")


def _decode_grid(path: str, decode: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The decode axes and grid of the CSV's decode points (a full grid is required)."""
    dx = np.array(sorted({k[0] for k in decode}), dtype=np.float64)
    dy = np.array(sorted({k[1] for k in decode}), dtype=np.float64)
    if len(dx) < 2 or len(dy) < 2:
        raise UserError(f"{path}: the decode rows must span at least 2 tokens values and "
                        f"2 context_length values, found {len(dx)} and {len(dy)}")
    dz = np.empty((len(dx), len(dy)), dtype=np.float64)
    for i, x in enumerate(dx):
        for j, y in enumerate(dy):
            hit = decode.get((x, y))
            if hit is None:
                raise UserError(f"{path}: the decode grid has no row for tokens={fmt_value(x)}, "
                                f"context_length={fmt_value(y)} (every tokens value needs "
                                "every context_length value)")
            dz[i, j] = hit[0]
    return dx, dy, dz


def _strip_comment(text: str) -> str:
    cut = text.find("#")
    return text if cut < 0 else text[:cut]


def _number(where: str, name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise UserError(f"{where}: {name} must be a finite number, got {text!r}")
    return value


def _check_axis(path: str, key: str, arr: np.ndarray) -> None:
    if len(arr) < 2:
        raise UserError(f"{path}: {key} needs at least 2 points, found {len(arr)}")
    if not np.isfinite(arr).all():
        raise UserError(f"{path}: {key} holds NaN or infinite values")
    bad = np.flatnonzero(np.diff(arr) <= 0)
    if len(bad):
        i = int(bad[0])
        raise UserError(f"{path}: {key} must be strictly increasing, but element {i + 1} "
                        f"({fmt_value(arr[i + 1])}) follows {fmt_value(arr[i])}")


def _check_values(path: str, key: str, arr: np.ndarray) -> None:
    if not np.isfinite(arr).all():
        raise UserError(f"{path}: {key} holds NaN or infinite values")
    if (arr < 0).any():
        raise UserError(f"{path}: {key} holds negative times (min {fmt_value(arr.min())} ms)")


def fmt_value(x: float) -> str:
    """A number for a message: an integer without ``.0``, else its ``repr``."""
    return f"{x:g}" if float(x).is_integer() and abs(x) < 1e15 else repr(float(x))


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


# -- writing (for the reference, conversion scripts and tests) --------------------------

def write_npz(profile: Profile, path: str) -> None:
    """Save in the reference's layout (float64 arrays, which it requires)."""
    np.savez(path, prefill_isl=profile.prefill_tokens, prefill_ttft_ms=profile.prefill_ms,
             decode_active_kv_tokens=profile.decode_kv_tokens,
             decode_context_length=profile.decode_context, decode_itl=profile.decode_ms)


def write_csv(profile: Profile, path: str, header_comment: str = "") -> None:
    """Save in the CSV layout; floats are written with ``repr`` so nothing is lost."""
    with open(path, "w", encoding="utf-8", newline="") as fh:
        for line in header_comment.splitlines():
            fh.write(f"# {line}\n" if line else "#\n")
        fh.write(",".join(CSV_COLUMNS) + "\n")
        for x, y in zip(profile.prefill_tokens, profile.prefill_ms):
            fh.write(f"prefill,{_num(x)},,{_num(y)}\n")
        for i, x in enumerate(profile.decode_kv_tokens):
            for j, y in enumerate(profile.decode_context):
                fh.write(f"decode,{_num(x)},{_num(y)},{_num(profile.decode_ms[i, j])}\n")


def _num(x) -> str:
    x = float(x)
    return str(int(x)) if x.is_integer() and abs(x) < 2**53 else repr(x)


def reference_npz(path: str) -> str:
    """The path of an NPZ the reference can read with the same numbers as ``path``: the
    file itself when it already is one (five float64 arrays), else a float64 copy in the
    temporary folder, named by the content's hash."""
    profile = load_profile(path)
    if path.lower().endswith(".npz"):
        with np.load(path, allow_pickle=False) as data:
            if all(data[k].dtype == np.float64 for k in NPZ_KEYS):
                return path
    with open(path, "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()[:16]
    out = os.path.join(tempfile.gettempdir(), f"simmodel_profile_{digest}.npz")
    if not os.path.exists(out):
        tmp = f"{out}.{os.getpid()}.tmp.npz"
        write_npz(profile, tmp)
        os.replace(tmp, out)
    return out
