"""Measured-profile cost model (``timing_model: {type: table}``).  Pure, no SimPy.

The pass cost is read off a measured table instead of the fitted polynomials, exactly as
the reference's ``external / dynamo_profile`` provider does with its NPZ file (measured on
ai-dynamo-runtime 1.6.1, see docs/model.md):

* **prefill**: ``n`` requests with prompt work, ``t = n * (Σisl // n − Σprefix // n)`` new
  tokens (the polynomial's integer-mean aggregation), cost = linear interpolation of the
  ``(tokens, ms)`` points at ``t``, floored at 0 ms.  No prefill work: 0 ms.
* **decode**: ``n`` decoding requests holding ``Σ`` context tokens (prompt + tokens emitted
  so far), cost = bilinear interpolation of a grid over (Σ context, mean context) at
  ``(Σ, Σ // n)``, floored at 1 ms.  No decoder: 0 ms.
* both parts become the reference's nanosecond ``Duration`` and are then divided by the
  speed-up: prefill by ``speedup_ratio``, decode by ``speedup_ratio × decode_speedup_ratio``
  (a ratio, or a product, that is 0 leaves the durations unchanged).

Outside the measured range the reference always extends the edge segment / edge cell
linearly.  Here that needs ``extrapolate: true``; by default such a point raises a
one-line ``UserError``.

Two file layouts are read (chosen by the suffix):

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

import bisect
import csv
import hashlib
import math
import os
import tempfile
import zipfile
from dataclasses import dataclass

import numpy as np

from simmodel.config import EngineConfig
from simmodel.engine.timing import (batch_new_tokens, div_ns, div_ns_array, duration_ns,
                                    duration_ns_array)
from simmodel.errors import UserError

#: The reference's NPZ array names (``dynamo_profile``).
NPZ_KEYS = ("prefill_isl", "prefill_ttft_ms", "decode_active_kv_tokens",
            "decode_context_length", "decode_itl")
#: The CSV layout's columns.
CSV_COLUMNS = ("phase", "tokens", "context_length", "ms")

PREFILL_FLOOR_MS = 0.0      # the reference clamps an interpolated prefill time at 0 ms
DECODE_FLOOR_MS = 1.0       # ... and a decode time at 1 ms (as its polynomial)


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
    header_line, header_text = rows[0]
    header = [h.strip() for h in next(csv.reader([_strip_comment(header_text)]))]
    unknown = [h for h in header if h not in CSV_COLUMNS]
    missing = [c for c in CSV_COLUMNS if c not in header]
    if unknown or missing or len(header) != len(CSV_COLUMNS):
        what = (f"unknown column {unknown[0]!r}" if unknown else
                f"missing column {missing[0]!r}" if missing else "repeated column")
        raise UserError(f"{path}, line {header_line}: {what}; the header must be "
                        f"{','.join(CSV_COLUMNS)}")
    col = {name: header.index(name) for name in CSV_COLUMNS}
    prefill: dict[float, tuple[float, int]] = {}
    decode: dict[tuple[float, float], tuple[float, int]] = {}
    for lineno, text in rows[1:]:
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
    if len(prefill) < 2:
        raise UserError(f"{path}: needs at least 2 prefill rows, found {len(prefill)}")
    px = np.array(sorted(prefill), dtype=np.float64)
    py = np.array([prefill[x][0] for x in px], dtype=np.float64)
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
                raise UserError(f"{path}: the decode grid has no row for tokens={_fmt(x)}, "
                                f"context_length={_fmt(y)} (every tokens value needs "
                                "every context_length value)")
            dz[i, j] = hit[0]
    return Profile(path, px, py, dx, dy, dz)


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
                        f"({_fmt(arr[i + 1])}) follows {_fmt(arr[i])}")


def _check_values(path: str, key: str, arr: np.ndarray) -> None:
    if not np.isfinite(arr).all():
        raise UserError(f"{path}: {key} holds NaN or infinite values")
    if (arr < 0).any():
        raise UserError(f"{path}: {key} holds negative times (min {_fmt(arr.min())} ms)")


def _fmt(x: float) -> str:
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


# -- interpolation, with the reference's arithmetic -------------------------------------
# ndarray-interp (the reference's interpolator): the cell is the one whose left edge is the
# last axis point <= x, clamped to the first / last cell (which is how it extrapolates);
# between two points (x1, y1), (x2, y2): ``(y2 - y1) / (x2 - x1) * (x - x1) + y1``.
# Bilinear: along the first axis at both second-axis edges, then along the second axis.

def _cell(axis: list, x: float) -> int:
    i = bisect.bisect_right(axis, x) - 1
    return 0 if i < 0 else (len(axis) - 2 if i > len(axis) - 2 else i)


def _lerp(x1: float, y1: float, x2: float, y2: float, x: float) -> float:
    return (y2 - y1) / (x2 - x1) * (x - x1) + y1


def interp1(xs: list, ys: list, x: float) -> float:
    """Piecewise-linear interpolation, extended linearly past both ends."""
    i = _cell(xs, x)
    return _lerp(xs[i], ys[i], xs[i + 1], ys[i + 1], x)


def bilinear(xs: list, ys: list, z: list, x: float, y: float) -> float:
    """Bilinear interpolation on the grid ``z[i][j]`` at ``(xs[i], ys[j])``, extended
    linearly past the edges."""
    i = _cell(xs, x)
    j = _cell(ys, y)
    x1, x2 = xs[i], xs[i + 1]
    y1, y2 = ys[j], ys[j + 1]
    za = _lerp(x1, z[i][j], x2, z[i + 1][j], x)
    zb = _lerp(x1, z[i][j + 1], x2, z[i + 1][j + 1], x)
    return _lerp(y1, za, y2, zb, y)


def _cells(axis: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.clip(np.searchsorted(axis, x, side="right") - 1, 0, len(axis) - 2)


def _lerp_array(x1, y1, x2, y2, x):
    return (y2 - y1) / (x2 - x1) * (x - x1) + y1


def bilinear_array(xs: np.ndarray, ys: np.ndarray, z: np.ndarray, x: np.ndarray,
                   y: np.ndarray) -> np.ndarray:
    """``bilinear`` over arrays of points (the same floating-point operations)."""
    i = _cells(xs, x)
    j = _cells(ys, y)
    x1, x2 = xs[i], xs[i + 1]
    y1, y2 = ys[j], ys[j + 1]
    za = _lerp_array(x1, z[i, j], x2, z[i + 1, j], x)
    zb = _lerp_array(x1, z[i, j + 1], x2, z[i + 1, j + 1], x)
    return _lerp_array(y1, za, y2, zb, y)


# -- the cost model ---------------------------------------------------------------------

def _ratio(r: float) -> float:
    return r if r > 0 else 1.0


class TableTiming:
    """The reference's ``dynamo_profile`` cost model on a measured table."""

    def __init__(self, engine: EngineConfig, profile: Profile | None = None):
        tm = engine.timing_model
        self.profile = profile if profile is not None else load_profile(tm.path)
        self.extrapolate = bool(tm.extrapolate)
        p = self.profile
        self._px, self._py = p.prefill_tokens.tolist(), p.prefill_ms.tolist()
        self._dx, self._dy = p.decode_kv_tokens.tolist(), p.decode_context.tolist()
        self._dz = p.decode_ms.tolist()
        self.prefill_scale = _ratio(engine.speedup_ratio)
        # Measured: the decode divisor is the product; a product of 0 leaves decode as is.
        self.decode_scale = _ratio(engine.speedup_ratio * engine.decode_speedup_ratio)

    # -- raw table values (ms, before the floor, the clock and the speed-up) -------------
    def prefill_table_ms(self, tokens: int) -> float:
        if not self.extrapolate and not self._px[0] <= tokens <= self._px[-1]:
            raise UserError(
                f"{self.profile.source}: prefill of {tokens} new tokens is outside the "
                f"measured range [{_fmt(self._px[0])}, {_fmt(self._px[-1])}] tokens; "
                "set timing_model.extrapolate: true")
        return interp1(self._px, self._py, float(tokens))

    def decode_table_ms(self, n: int, active_tokens: int) -> float:
        mean_context = active_tokens // n
        if not self.extrapolate:
            self._check_decode(n, active_tokens, mean_context)
        return bilinear(self._dx, self._dy, self._dz, float(active_tokens),
                        float(mean_context))

    def _check_decode(self, n: int, active: int, mean: int) -> None:
        dx, dy = self._dx, self._dy
        if not (dx[0] <= active <= dx[-1] and dy[0] <= mean <= dy[-1]):
            raise UserError(
                f"{self.profile.source}: decode point ({n} requests holding {active} "
                f"context tokens, mean {mean}) is outside the measured range (context "
                f"[{_fmt(dx[0])}, {_fmt(dx[-1])}] tokens, mean [{_fmt(dy[0])}, "
                f"{_fmt(dy[-1])}]); set timing_model.extrapolate: true")

    # -- TimingModel ---------------------------------------------------------------------
    def prefill_ms(self, n: int, sum_isl: int, sum_prefix: int) -> float:
        if n == 0:
            return 0.0
        ms = max(PREFILL_FLOOR_MS, self.prefill_table_ms(batch_new_tokens(n, sum_isl,
                                                                          sum_prefix)))
        return div_ns(duration_ns(ms), self.prefill_scale) / 1e6

    def decode_ms(self, n: int, active_tokens: int) -> float:
        if n == 0:
            return 0.0
        ms = max(DECODE_FLOOR_MS, self.decode_table_ms(n, active_tokens))
        return div_ns(duration_ns(ms), self.decode_scale) / 1e6

    def decode_ms_array(self, n: int, active_tokens: np.ndarray) -> np.ndarray:
        active = np.asarray(active_tokens, dtype=np.int64)
        if n == 0:
            return np.zeros(len(active))
        mean = active // n
        if not self.extrapolate and len(active):
            # a run's points are monotone in both coordinates: its ends bound it
            for k in (int(np.argmin(active)), int(np.argmax(active))):
                self._check_decode(n, int(active[k]), int(mean[k]))
        p = self.profile
        ms = bilinear_array(p.decode_kv_tokens, p.decode_context, p.decode_ms,
                            active.astype(np.float64), mean.astype(np.float64))
        ms = np.maximum(DECODE_FLOOR_MS, ms)
        return div_ns_array(duration_ns_array(ms), self.decode_scale) / 1e6
