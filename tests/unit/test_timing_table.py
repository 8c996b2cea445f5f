"""Unit and micro-scenario tiers: the measured-table cost model (``timing_model: table``).

The rules (measured on the reference's ``external / dynamo_profile`` provider, see
docs/model.md): prefill = linear interpolation over the batch's new tokens (integer-mean
aggregation), floored at 0 ms; decode = bilinear interpolation over (Σ context,
Σ context // n), floored at 1 ms; both made nanosecond Durations, then divided by the
speed-up (decode by the product of the two ratios, a product of 0 meaning 1).

Most expectations use the tiny table ``TINY`` below, chosen so that every value follows by
hand: prefill is ``10 + t/50`` ms up to 1,000 tokens and ``30 + (t − 1000)/100`` above;
on the decode grid ``z = 2 + x/1000 + y/1000`` for x ≤ 2000 and ``2x/1000 + y/1000`` for
2000 ≤ x ≤ 4000 (x = Σ context, y = mean context).
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simmodel
from simmodel.cli import main
from simmodel.config import EngineConfig, TimingConfig
from simmodel.engine.timing import make_timing
from simmodel.engine.profile import Profile, load_profile, reference_npz, write_csv, write_npz
from simmodel.engine.timing_table import TableTiming, bilinear, interp1
from simmodel.errors import UserError
from simmodel.scenario import scenario_from_dict

TINY_CSV = """\
# a tiny hand-checkable profile
phase,tokens,context_length,ms
prefill,0,,10
prefill,1000,,30
prefill,3000,,50
decode,0,0,2
decode,0,1000,3
decode,0,2000,4
decode,2000,0,4
decode,2000,1000,5
decode,2000,2000,6
decode,4000,0,8
decode,4000,1000,9
decode,4000,2000,10
"""


def z_hand(x: float, y: float) -> float:
    """The decode grid of TINY as a formula (valid over [0, 4000] × [0, 2000] and, by the
    edge cells, linearly beyond)."""
    return 2 + x / 1000 + y / 1000 if x <= 2000 else 2 * x / 1000 + y / 1000


@pytest.fixture
def tiny_csv(tmp_path):
    path = tmp_path / "tiny.csv"
    path.write_text(TINY_CSV)
    return str(path)


def table(path: str, *, extrapolate: bool = False, **engine) -> TableTiming:
    eng = EngineConfig(timing_model=TimingConfig(type="table", path=path,
                                                 extrapolate=extrapolate), **engine)
    timing = make_timing(eng)
    assert isinstance(timing, TableTiming)
    return timing


# -- unit: interpolation by hand ------------------------------------------------------------

def test_interp1_knots_interior_and_extension():
    xs, ys = [0.0, 1000.0, 3000.0], [10.0, 30.0, 50.0]
    assert [interp1(xs, ys, x) for x in (0, 1000, 3000)] == [10, 30, 50]
    assert interp1(xs, ys, 500) == pytest.approx(20)
    assert interp1(xs, ys, 2000) == pytest.approx(40)
    assert interp1(xs, ys, -500) == pytest.approx(0)        # first segment extended
    assert interp1(xs, ys, 5000) == pytest.approx(70)       # last segment extended


@pytest.mark.parametrize("x, y", [
    (0, 0), (0, 2000), (4000, 0), (4000, 2000),             # corners
    (2000, 1000), (0, 1000), (2000, 0), (4000, 1000),       # grid points on edges / inside
    (1000, 0), (3000, 2000), (0, 500), (4000, 1500),        # on the outer edges
    (1000, 500), (3000, 1500), (1234, 1777), (2001, 1),     # interior
])
def test_bilinear_by_hand(tiny_csv, x, y):
    p = load_profile(tiny_csv)
    got = bilinear(p.decode_kv_tokens.tolist(), p.decode_context.tolist(),
                   p.decode_ms.tolist(), float(x), float(y))
    assert got == pytest.approx(z_hand(x, y), abs=1e-12)


def test_bilinear_is_not_just_linear_in_each_cell_corner():
    # a saddle cell: z = x·y on the unit square, value at the centre 0.25 (not the mean
    # of a plane through three corners)
    assert bilinear([0.0, 1.0], [0.0, 1.0], [[0.0, 0.0], [0.0, 1.0]], 0.5, 0.5) == 0.25
    assert bilinear([0.0, 1.0], [0.0, 1.0], [[0.0, 0.0], [0.0, 1.0]], 2.0, 2.0) == 4.0


def test_prefill_uses_the_batch_new_tokens(tiny_csv):
    t = table(tiny_csv)
    assert t.prefill_ms(0, 0, 0) == 0.0
    assert t.prefill_ms(1, 500, 0) == pytest.approx(20)
    assert t.prefill_ms(1, 1500, 500) == pytest.approx(30)            # 1000 new tokens
    # integer means: 2 · (2001 // 2 − 0) = 2000 new tokens, not 2001
    assert t.prefill_ms(2, 2001, 0) == pytest.approx(40)


def test_decode_uses_sum_and_floored_mean(tiny_csv):
    t = table(tiny_csv)
    assert t.decode_ms(0, 0) == 0.0
    assert t.decode_ms(1, 1000) == pytest.approx(z_hand(1000, 1000))   # 4 ms
    assert t.decode_ms(2, 2002) == pytest.approx(z_hand(2002, 1001))
    # 3 requests, 2999 tokens: mean 999 (floor), not 999.67 or 1000
    assert t.decode_ms(3, 2999) == pytest.approx(z_hand(2999, 999))


def test_nanosecond_rounding(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("phase,tokens,context_length,ms\n"
                    "prefill,0,,0\nprefill,7,,8.64197523861\n"
                    "decode,0,0,1.5\ndecode,0,10,1.5\ndecode,10,0,1.5\ndecode,10,10,1.5\n")
    t = table(str(path))
    # 8.64197523861 / 7 ms = 1,234,567.891... ns -> 1,234,568 ns
    assert round(t.prefill_ms(1, 1, 0) * 1e6, 6) == 1_234_568


def test_floors(tmp_path):
    # prefill falls below 0 ms left of 100 tokens; decode is under 1 ms everywhere
    path = tmp_path / "p.csv"
    path.write_text("phase,tokens,context_length,ms\n"
                    "prefill,100,,50\nprefill,1000,,5\n"
                    "decode,0,0,0.5\ndecode,0,9,0.5\ndecode,9,0,0.5\ndecode,9,9,0.5\n")
    t = table(str(path), extrapolate=True)
    assert t.prefill_ms(1, 1050, 0) == pytest.approx(2.5)
    assert t.prefill_ms(1, 1100, 0) == 0.0                  # 0 ms exactly at 1100
    assert t.prefill_ms(1, 3000, 0) == 0.0                  # −95 ms -> 0
    assert t.decode_ms(1, 5) == 1.0
    assert t.decode_ms(4, 100) == 1.0


@pytest.mark.parametrize("sr, dsr, prefill_div, decode_div", [
    (1.0, 1.0, 1.0, 1.0), (2.0, 1.0, 2.0, 2.0), (1.0, 4.0, 1.0, 4.0), (2.0, 2.5, 2.0, 5.0),
    (0.0, 1.0, 1.0, 1.0),
    # measured: the decode divisor is the product, and a product of 0 leaves decode as is
    (4.0, 0.0, 4.0, 1.0), (0.0, 4.0, 1.0, 1.0),
])
def test_speedup_ratios(tiny_csv, sr, dsr, prefill_div, decode_div):
    t = table(tiny_csv, speedup_ratio=sr, decode_speedup_ratio=dsr)
    assert t.prefill_ms(1, 1000, 0) == pytest.approx(30 / prefill_div, abs=1e-6)
    assert t.decode_ms(1, 1000) == pytest.approx(4 / decode_div, abs=1e-6)


def test_decode_floor_applies_before_the_speedup(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("phase,tokens,context_length,ms\nprefill,0,,1\nprefill,9,,1\n"
                    "decode,0,0,0.5\ndecode,0,9,0.5\ndecode,9,0,0.5\ndecode,9,9,0.5\n")
    assert table(str(path), speedup_ratio=2.0).decode_ms(1, 5) == 0.5   # max(1, 0.5) / 2


#: non-uniform axes, not bilinear within cells, values under the 1 ms floor
IRREGULAR = Profile(
    "irregular", np.array([64.0, 300.0, 1000.0, 6000.0]), np.array([1.0, 12.0, 25.5, 170.3]),
    np.array([0.0, 4000.0, 20000.0, 60000.0, 150000.0]), np.array([0.0, 500.0, 1300.0, 3000.0]),
    np.array([[0.55, 0.62, 0.9, 1.7], [1.69, 1.595, 2.853, 5.02], [4.55, 5.875, 7.055, 9.9],
              [13.25, 15.025, 18.335, 25.2], [31.65, 36.7875, 43.1275, 57.275]]))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 300), start=st.integers(0, 200_000), k=st.integers(1, 50),
       sr=st.sampled_from([1.0, 1.7]), dsr=st.sampled_from([1.0, 1.3]))
def test_decode_array_matches_scalar(n, start, k, sr, dsr):
    """Coalesced decode runs get the very same floats as pass-by-pass costs."""
    t = TableTiming(EngineConfig(timing_model=TimingConfig(type="table", path="irregular",
                                                           extrapolate=True),
                                 speedup_ratio=sr, decode_speedup_ratio=dsr), IRREGULAR)
    active = start + n + n * np.arange(k, dtype=np.int64)
    got = t.decode_ms_array(n, active)
    assert got.tolist() == [t.decode_ms(n, int(a)) for a in active]


# -- out of range ---------------------------------------------------------------------------

def test_out_of_range_prefill_is_an_error(tiny_csv):
    t = table(tiny_csv)
    assert t.prefill_ms(1, 3000, 0) == pytest.approx(50)          # the edge is measured
    with pytest.raises(UserError) as e:
        t.prefill_ms(2, 5000, 0)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(tiny_csv)
    assert "prefill of 5000 new tokens" in msg and "[0, 3000]" in msg
    assert "extrapolate: true" in msg


@pytest.mark.parametrize("n, active, shown", [
    (1, 4001, "1 requests holding 4001 context tokens, mean 4001"),   # both beyond
    (3, 4500, "3 requests holding 4500 context tokens, mean 1500"),   # Σ beyond
    (1, 2500, "mean 2500"),                                           # mean beyond
])
def test_out_of_range_decode_is_an_error(tiny_csv, n, active, shown):
    t = table(tiny_csv)
    with pytest.raises(UserError) as e:
        t.decode_ms(n, active)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(tiny_csv)
    assert shown in msg and "context [0, 4000] tokens, mean [0, 2000]" in msg
    with pytest.raises(UserError):
        t.decode_ms_array(n, np.array([active - 1, active]))


def test_extrapolation_follows_the_edge_segments(tiny_csv):
    t = table(tiny_csv, extrapolate=True)
    assert t.prefill_ms(1, 5000, 0) == pytest.approx(70)           # 50 + 2000/100
    assert t.decode_ms(1, 5001) == pytest.approx(z_hand(5001, 5001))  # 15.003
    assert t.decode_ms(3, 9000) == pytest.approx(z_hand(9000, 3000))
    assert t.decode_ms_array(1, np.array([5001])).tolist() == [t.decode_ms(1, 5001)]


# -- file layouts ---------------------------------------------------------------------------

def test_csv_and_npz_are_equivalent(tiny_csv, tmp_path):
    p = load_profile(tiny_csv)
    npz = str(tmp_path / "tiny.npz")
    write_npz(p, npz)
    q = load_profile(npz)
    for a in ("prefill_tokens", "prefill_ms", "decode_kv_tokens", "decode_context",
              "decode_ms"):
        assert np.array_equal(getattr(p, a), getattr(q, a))
    tc, tn = table(tiny_csv, extrapolate=True), table(npz, extrapolate=True)
    for n, s in [(1, 17), (1, 999), (2, 2002), (5, 3333), (7, 12000)]:
        assert tc.prefill_ms(n, s, 0) == tn.prefill_ms(n, s, 0)
        assert tc.decode_ms(n, s) == tn.decode_ms(n, s)
    # and back to CSV: rows in another order, same numbers
    back = str(tmp_path / "back.csv")
    write_csv(q, back, "written back")
    assert np.array_equal(load_profile(back).decode_ms, p.decode_ms)


def test_csv_rows_in_any_order_with_comments(tmp_path):
    lines = TINY_CSV.splitlines()
    shuffled = [lines[1]] + lines[:1:-1] + ["", "# trailing comment"]
    path = tmp_path / "shuffled.csv"
    path.write_text("\n".join(shuffled).replace("decode,2000,1000,5",
                                                "decode,2000,1000,5  # centre"))
    a = load_profile(str(path))
    assert np.array_equal(a.decode_ms, [[2, 3, 4], [4, 5, 6], [8, 9, 10]])
    assert a.prefill_tokens.tolist() == [0, 1000, 3000]
    assert a.prefill_ms.tolist() == [10, 30, 50]


def test_reference_npz(tiny_csv, tmp_path):
    npz = str(tmp_path / "tiny.npz")
    write_npz(load_profile(tiny_csv), npz)
    assert reference_npz(npz) == npz                 # already the reference's layout
    copy = reference_npz(tiny_csv)                   # CSV: a float64 NPZ copy
    assert copy.endswith(".npz") and copy != tiny_csv
    with np.load(copy) as d:
        assert all(d[k].dtype == np.float64 for k in d.files)
        assert np.array_equal(d["decode_itl"], load_profile(tiny_csv).decode_ms)
    ints = str(tmp_path / "ints.npz")                # integer arrays: copied as float64
    p = load_profile(tiny_csv)
    np.savez(ints, prefill_isl=p.prefill_tokens.astype(int), prefill_ttft_ms=p.prefill_ms,
             decode_active_kv_tokens=p.decode_kv_tokens.astype(int),
             decode_context_length=p.decode_context, decode_itl=p.decode_ms)
    assert reference_npz(ints) != ints


def test_shipped_table_holds_every_measured_point():
    here = os.path.dirname(__file__)
    p = load_profile(os.path.join(here, "..", "..", "scenarios", "tables",
                                  "h200_llama31_8b_fp8_vllm.csv"))
    assert len(p.prefill_tokens) == 17 and p.decode_ms.shape == (41, 6)
    # two of the source's measured points: 49 requests of 2,997 tokens -> 9.937452489795918
    # ms ITL; a 16,372-token prompt -> 375.482618 ms TTFT
    i = p.decode_kv_tokens.tolist().index(2997 * 49)
    j = p.decode_context.tolist().index(2997)
    assert p.decode_ms[i, j] == 9.937452489795918
    assert p.prefill_ms[-1] == pytest.approx(375.482618)


# -- bad files: one line naming the file -----------------------------------------------------

HEADER = "phase,tokens,context_length,ms\n"
GRID = "decode,0,0,1\ndecode,0,9,1\ndecode,9,0,1\ndecode,9,9,1\n"
PRE = "prefill,0,,1\nprefill,9,,2\n"


@pytest.mark.parametrize("text, expected", [
    ("", "empty timing profile"),
    ("phase,tokens,ms\n" + PRE, "missing column 'context_length'"),
    ("phase,tokens,context_length,ms,extra\n" + PRE, "unknown column 'extra'"),
    (HEADER + "prefil,0,,1\n" + PRE + GRID, "line 2: phase must be prefill or decode"),
    (HEADER + "prefill,0,,nan\nprefill,9,,2\n" + GRID, "line 2: ms must be a finite number"),
    (HEADER + "prefill,x,,1\nprefill,9,,2\n" + GRID, "tokens must be a finite number"),
    (HEADER + PRE + "decode,0,inf,1\n" + GRID, "context_length must be a finite number"),
    (HEADER + PRE + "prefill,0,,3\n" + GRID, "line 4: prefill point tokens=0 repeats line 2"),
    (HEADER + PRE + GRID + "decode,9,9,2\n", "repeats line"),
    (HEADER + PRE + GRID.replace("decode,9,9,1\n", ""), "no row for tokens=9, context_length=9"),
    (HEADER + "prefill,0,,1\n" + GRID, "at least 2 prefill rows"),
    (HEADER + PRE + "decode,0,0,1\ndecode,9,0,1\n", "at least 2 tokens values and 2 context"),
    (HEADER + "prefill,0,,-1\nprefill,9,,2\n" + GRID, "ms must be >= 0"),
    (HEADER + "prefill,0,5,1\nprefill,9,,2\n" + GRID, "prefill row leaves context_length empty"),
    (HEADER + "prefill,0,1\n" + PRE + GRID, "3 fields, expected 4"),
])
def test_bad_csv(tmp_path, text, expected):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(UserError) as e:
        load_profile(str(path))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(path)) and expected in msg


def _npz_arrays(**override):
    arrays = {"prefill_isl": [0.0, 9.0], "prefill_ttft_ms": [1.0, 2.0],
              "decode_active_kv_tokens": [0.0, 9.0], "decode_context_length": [0.0, 9.0],
              "decode_itl": [[1.0, 1.0], [1.0, 1.0]]}
    arrays.update(override)
    return {k: v for k, v in arrays.items() if v is not None}


@pytest.mark.parametrize("override, expected", [
    ({"decode_itl": None}, "missing array(s) decode_itl"),
    ({"prefill_isl": [9.0, 0.0]}, "prefill_isl must be strictly increasing"),
    ({"decode_context_length": [0.0, 0.0]}, "decode_context_length must be strictly increasing"),
    ({"prefill_isl": [0.0, float("nan")]}, "prefill_isl holds NaN"),
    ({"decode_itl": [[1.0, float("nan")], [1.0, 1.0]]}, "decode_itl holds NaN"),
    ({"prefill_ttft_ms": [1.0, 2.0, 3.0]}, "prefill_isl has 2 values but prefill_ttft_ms has 3"),
    ({"decode_itl": [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]}, "decode_itl has shape (2, 3)"),
    ({"decode_itl": [1.0, 1.0, 1.0, 1.0]}, "decode_itl must be 2-dimensional"),
    ({"prefill_isl": [5.0], "prefill_ttft_ms": [1.0]}, "prefill_isl needs at least 2 points"),
    ({"prefill_ttft_ms": ["a", "b"]}, "prefill_ttft_ms must hold numbers"),
    ({"decode_itl": [[1.0, -1.0], [1.0, 1.0]]}, "decode_itl holds negative times"),
])
def test_bad_npz(tmp_path, override, expected):
    path = tmp_path / "bad.npz"
    np.savez(path, **{k: np.asarray(v) for k, v in _npz_arrays(**override).items()})
    with pytest.raises(UserError) as e:
        load_profile(str(path))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(path)) and expected in msg


def test_unreadable_files(tmp_path):
    junk = tmp_path / "junk.npz"
    junk.write_text("not a zip")
    with pytest.raises(UserError, match="not a readable NPZ file"):
        load_profile(str(junk))
    other = tmp_path / "profile.json"
    other.write_text("{}")
    with pytest.raises(UserError, match=r"unsupported timing profile format '\.json'"):
        load_profile(str(other))


def _scenario(tmp_path, profile: str, *, extrapolate=False, isl=1000) -> str:
    trace = tmp_path / "trace.jsonl"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": isl, "output_length": 3,
                                 "hash_ids": list(range(-(-isl // 512)))}) + "\n")
    path = tmp_path / "scenario.yaml"
    path.write_text(
        f"workload: {{trace: {trace.name}}}\n"
        "cluster:\n  workers: 1\n  engine:\n    timing_model: "
        f"{{type: table, path: {profile}, extrapolate: {str(extrapolate).lower()}}}\n")
    return str(path)


def test_cli_bad_profile_exits_2(tmp_path, capsys):
    (tmp_path / "bad.csv").write_text(HEADER + "prefill,0,,1\n" + GRID)
    assert main(["run", _scenario(tmp_path, "bad.csv"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "bad.csv" in err and "at least 2 prefill rows" in err


def test_cli_missing_profile_exits_2(tmp_path, capsys):
    assert main(["run", _scenario(tmp_path, "nowhere.npz"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "nowhere.npz" in err and "file not found" in err


def test_cli_out_of_range_exits_2(tmp_path, capsys):
    (tmp_path / "tiny.csv").write_text(TINY_CSV)
    assert main(["run", _scenario(tmp_path, "tiny.csv", isl=5000), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "tiny.csv" in err and "prefill of 5000 new tokens" in err
    assert main(["run", _scenario(tmp_path, "tiny.csv", isl=5000, extrapolate=True),
                 "--quiet"]) == 0


# -- micro-scenarios: pass times by hand from TINY -------------------------------------------

@pytest.fixture(params=[True, False], ids=["coalesced", "per-pass"])
def sim(request, tmp_path):
    (tmp_path / "tiny.csv").write_text(TINY_CSV)

    def _run(rows, *, extrapolate=False, **engine):
        trace = tmp_path / "trace.jsonl"
        trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
        data = {"workload": {"trace": str(trace)},
                "cluster": {"workers": 1, "engine": {
                    **engine, "timing_model": {"type": "table", "path": "tiny.csv",
                                               "extrapolate": extrapolate}}},
                "run": {"coalesce_decode": request.param}}
        res = simmodel.run(scenario_from_dict(data, base_dir=str(tmp_path), source="micro"))
        return res.requests.sort_values("arrival_time_ms", kind="stable").reset_index()
    return _run


def row(ts, isl, osl, first_hash):
    return {"timestamp": ts, "input_length": isl, "output_length": osl,
            "hash_ids": list(range(first_hash, first_hash - (-isl // 512)))}


def test_micro_lone_request(sim):
    df = sim([row(0, 1000, 4, 0)])
    # P(1000) = 30; then D(Σ=1001, mean 1001) = 2 + 2.002 = 4.002, D(1002) = 4.004, 4.006
    assert df.ttft_ms[0] == pytest.approx(30, abs=1e-9)
    assert df.e2e_latency_ms[0] == pytest.approx(30 + 4.002 + 4.004 + 4.006, abs=1e-9)


def test_micro_batch_of_two(sim):
    df = sim([row(0, 600, 3, 0), row(0, 1400, 3, 10)])
    # one prefill pass of 2 · (2000 // 2) = 2000 tokens: 30 + 1000/100 = 40 ms; then
    # decode passes with n = 2: Σ 2002 (mean 1001) -> 2·2.002 + 1.001 = 5.005 ms,
    # Σ 2004 (mean 1002) -> 4.008 + 1.002 = 5.010 ms
    assert df.ttft_ms.tolist() == pytest.approx([40, 40], abs=1e-9)
    assert df.e2e_latency_ms.tolist() == pytest.approx([50.015, 50.015], abs=1e-9)


def test_micro_arrival_during_decode(sim):
    df = sim([row(0, 1000, 3, 0), row(31, 500, 2, 10)])
    # A: prefill 30 -> first token at 30; pass 30 -> 34.002 decodes A (Σ 1001).
    # B arrives at 31 and joins at 34.002: a pass with P(500) = 20 plus A's decode at
    # Σ 1002 = 4.004 -> ends at 58.006 (A's last token, B's first).  B then decodes
    # alone: Σ 501 -> 2 + 1.002 = 3.002 -> 61.008.
    assert df.e2e_latency_ms[0] == pytest.approx(58.006, abs=1e-9)
    assert df.ttft_ms[1] == pytest.approx(58.006 - 31, abs=1e-9)
    assert df.e2e_latency_ms[1] == pytest.approx(61.008 - 31, abs=1e-9)


def test_micro_speedups(sim):
    df = sim([row(0, 1000, 3, 0)], speedup_ratio=2.0, decode_speedup_ratio=2.0)
    assert df.ttft_ms[0] == pytest.approx(15, abs=1e-9)
    assert df.e2e_latency_ms[0] == pytest.approx(15 + (4.002 + 4.004) / 4, abs=1e-9)


def test_micro_extrapolated_and_chunked(sim):
    # 5000 tokens, 4096-token budget: chunks of 4096 (beyond the 3000 top: 30 + 30.96 =
    # 60.96 ms) and 904 (10 + 904/50 = 28.08 ms); decode at Σ 5001: 2·5.001 + 5.001
    df = sim([row(0, 5000, 2, 0)], extrapolate=True, max_num_batched_tokens=4096)
    assert df.ttft_ms[0] == pytest.approx(60.96 + 28.08, abs=1e-9)
    assert df.e2e_latency_ms[0] == pytest.approx(60.96 + 28.08 + 15.003, abs=1e-9)
