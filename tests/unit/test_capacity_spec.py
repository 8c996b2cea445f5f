"""Sweep and search files: expansion of grid x points, and every mistake refused before
anything runs (one line naming the file and the key, exit 2, nothing written)."""
from __future__ import annotations

import os

import pytest

from simmodel.capacity import keys, load_spec
from simmodel.cli import main
from simmodel.errors import UserError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(ROOT, "scenarios", "tiny.yaml")
MOONCAKE = os.path.join(ROOT, "scenarios", "mooncake_conversation.yaml")


def spec_file(tmp_path, body: str, base: str = TINY) -> str:
    path = tmp_path / "spec.yaml"
    path.write_text(f"base: {base}\n{body}")
    return str(path)


def test_grid_times_points_expansion(tmp_path):
    path = spec_file(tmp_path, """
grid: {cluster.router.mode: [round_robin, kv]}
points:
  - {label: agg, grid: {cluster.workers: [1, 2]}}
  - {label: 1p2d, cluster: {prefill: {workers: 1}, decode: {workers: 2}}}
""")
    spec = load_spec(path)
    got = [(p.label, p.grid) for p in spec.points]
    assert got == [("agg", {"cluster.router.mode": "round_robin", "cluster.workers": 1}),
                   ("agg", {"cluster.router.mode": "round_robin", "cluster.workers": 2}),
                   ("agg", {"cluster.router.mode": "kv", "cluster.workers": 1}),
                   ("agg", {"cluster.router.mode": "kv", "cluster.workers": 2}),
                   ("1p2d", {"cluster.router.mode": "round_robin"}),
                   ("1p2d", {"cluster.router.mode": "kv"})]
    disagg = spec.points[4].scenario.cluster
    assert disagg.disaggregated and (disagg.prefill.workers, disagg.decode.workers) == (1, 2)
    # the pools inherit the base's engine (tiny: 2048 blocks of 64 tokens)
    assert disagg.decode.engine.num_gpu_blocks == 2048 == disagg.prefill.engine.num_gpu_blocks
    assert spec.varied == ("cluster.router.mode", "cluster.workers",
                           "cluster.prefill.workers", "cluster.decode.workers")
    assert [p.point for p in spec.points] == list(range(6))


def test_sla_replaces_the_bases_and_trace_paths_are_relative_to_the_sweep(tmp_path):
    path = spec_file(tmp_path, "grid: {cluster.workers: [2]}\nsla: {e2e_ms: 900}\n")
    spec = load_spec(path)
    assert spec.sla == {"ttft_ms": None, "itl_ms": None, "e2e_ms": 900.0}
    real = os.path.join(ROOT, "scenarios", "traces", "mooncake", "conversation_trace.jsonl")
    trace = os.path.relpath(real, tmp_path)          # relative to the sweep file's folder
    path = spec_file(tmp_path, f"grid: {{workload.trace: [{trace}]}}\n", base=MOONCAKE)
    sc = load_spec(path).points[0].scenario
    assert os.path.isabs(sc.workload.trace) and os.path.samefile(sc.workload.trace, real)


def test_key_helpers():
    assert keys.field_type("cluster.workers") is int
    assert keys.field_type("cluster.decode.engine.num_gpu_blocks") is int
    assert keys.field_type("cluster.wrkers") is None
    assert "valid keys" in keys.unknown_part("cluster.engine.blok_size")
    assert keys.flatten({"cluster": {"prefill": {"workers": 2}}, "seed": 1}) == {
        "cluster.prefill.workers": 2, "seed": 1}


BAD = [
    ("bogus: 1\ngrid: {cluster.workers: [1]}\n", "bogus: unknown key"),
    ("grid: {cluster.wrkers: [1]}\n", "grid.cluster.wrkers: unknown scenario key 'wrkers' under cluster"),
    ("grid: {cluster.workers: [0]}\n", "cluster.workers: must be a positive integer"),
    ("grid: {cluster.workers: [two]}\n", "cluster.workers: must be an integer"),
    ("grid: {}\n", "grid: nothing to vary"),
    ("grid: {cluster.workers: []}\n", "grid.cluster.workers: must be a non-empty list"),
    ("grid: {cluster.workers: 3}\n", "grid.cluster.workers: must be a non-empty list"),
    ("grid: {seed: [1, 2]}\n", "grid.seed: is set by the sweep itself"),
    ("grid: {cluster.workers: [1]}\nreplications: 0\n", "replications: must be an integer >= 1"),
    ("grid: {cluster.workers: [1]}\nwarmup_ms: -1\n", "warmup_ms: must be a number >= 0"),
    ("grid: {cluster.workers: [2]}\npoints:\n  - {label: d, cluster: {prefill: {workers: 1}, "
     "decode: {workers: 1}}}\n",
     "points[0] (d) with cluster.workers=2: cluster.workers: a disaggregated cluster has no "
     "single worker count"),
    ("grid: {workload.synthetic.requests: [5]}\nsla_percentile: 98\n",
     "sla_percentile: must be one of the summary's percentiles: 50, 75, 90, 95, 99, 100"),
    ("search: {vary: cluster.workers, range: [1, 4], target: {kv_eviction_policy: "
     "{max: 1}}}\n", "search.target.kv_eviction_policy: cannot be a target"),
    ("sla: null\nsearch: {vary: cluster.workers, range: [1, 4], target: "
     "{goodput_rps_per_gpu: {min: 1}}}\n", "goodput needs an SLA"),
    ("grid: {cluster.router.overlap_score_credit: [0.5]}\n",
     "grid.cluster.router.overlap_score_credit: means nothing for the base with "
     "cluster.router.overlap_score_credit=0.5: the point's router "
     "is round_robin"),
    ("grid: {workload.arrival_speedup_ratio: [2.0]}\n", "the point's workload is synthetic"),
    ("points: [{label: a}, {label: a}]\n", "points[1].label: duplicate label 'a'"),
    ("points: []\n", "points: must be a non-empty list"),
    ("grid: {cluster.workers: [1]}\nsearch: {vary: cluster.workers}\n", "search"),
    ("search: {vary: cluster.router.mode, range: [1, 2], target: {p99_ttft_ms: {max: 1}}}\n",
     "search.vary: must name a numeric setting"),
    ("search: {vary: cluster.workers, range: [4, 2], target: {p99_ttft_ms: {max: 1}}}\n",
     "search.range: low must be below high"),
    ("search: {vary: cluster.workers, range: [1.5, 2], target: {p99_ttft_ms: {max: 1}}}\n",
     "search.range: must hold integers"),
    ("search: {vary: cluster.workers, range: [1, 4], target: {p99_ttfts: {max: 1}}}\n",
     "search.target.p99_ttfts: not a summary key"),
    ("search: {vary: cluster.workers, range: [1, 4], target: {p99_ttft_ms: {below: 1}}}\n",
     "search.target.p99_ttft_ms: must be a mapping with min and/or max"),
    ("search: {vary: cluster.workers, range: [1, 4], goal: least, target: {p99_ttft_ms: "
     "{max: 1}}}\n", "search.goal: must be min or max"),
    ("search: {vary: cluster.workers, range: [1, 4], target: {p99_ttft_ms: {max: 1}}}\n"
     "grid: {cluster.workers: [1, 2]}\n", "search.vary: cluster.workers is also a grid key"),
    ("search: {vary: workload.synthetic.request_rate, range: [1.0, 4.0], target: "
     "{p99_ttft_ms: {max: 1}}}\n", "request_rate"),
    ("grid: [1, 2]\n", "grid: must be a mapping"),
    ("grid: {cluster.workers: [1]\n", ": invalid YAML"),
]


@pytest.mark.parametrize("body, expected", BAD)
def test_bad_files_one_line_exit_2_nothing_written(tmp_path, capsys, body, expected):
    path = spec_file(tmp_path, body)
    out = tmp_path / "out"
    command = "search" if "search:" in body else "sweep"
    assert main([command, path, "--out", str(out), "--quiet"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and captured.out == ""
    assert lines[0].startswith(f"simmodel: error: {path}: ")
    assert expected in lines[0]
    assert not out.exists()


def test_missing_and_bad_base(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("grid: {cluster.workers: [1]}\n")
    with pytest.raises(UserError, match=r"s.yaml: base: missing required key"):
        load_spec(str(path))
    path.write_text("base: nowhere.yaml\ngrid: {cluster.workers: [1]}\n")
    with pytest.raises(UserError, match=r"s.yaml: base: file not found: .*nowhere.yaml"):
        load_spec(str(path))
    bad_base = tmp_path / "b.yaml"
    bad_base.write_text("workload: {synthetic: {requests: 0, input_tokens: 1, output_tokens: 1,"
                        " arrival_interval_ms: 1}}\n")
    path.write_text(f"base: {bad_base}\ngrid: {{cluster.workers: [1]}}\n")
    with pytest.raises(UserError, match=r"b.yaml: workload.synthetic.requests"):
        load_spec(str(path))


def test_sweep_and_search_commands_check_the_kind(tmp_path, capsys):
    sweep_path = spec_file(tmp_path, "grid: {cluster.workers: [1]}\n")
    assert main(["search", sweep_path, "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert "search: missing required key" in capsys.readouterr().err
    (tmp_path / "t.yaml").write_text(
        f"base: {TINY}\nsearch: {{vary: cluster.workers, range: [1, 4], "
        "target: {p99_ttft_ms: {max: 1}}}\n")
    assert main(["sweep", str(tmp_path / "t.yaml"), "--out", str(tmp_path / "o"),
                 "--quiet"]) == 2
    assert "a sweep file has no search section" in capsys.readouterr().err


def test_out_that_cannot_be_written_is_refused_before_running(tmp_path, capsys):
    path = spec_file(tmp_path, "grid: {cluster.workers: [1]}\n")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["sweep", path, "--out", str(blocker / "out"), "--quiet"]) == 2
    assert "is a file, not a directory" in capsys.readouterr().err
    assert main(["sweep", path, "--out", str(blocker), "--quiet"]) == 2
    assert "exists and is not a directory" in capsys.readouterr().err


def test_a_disaggregated_points_own_engine_settings_reach_its_pools(tmp_path):
    path = spec_file(tmp_path, """
points:
  - {label: d, cluster: {engine: {num_gpu_blocks: 512}, prefill: {workers: 1},
                         decode: {workers: 1, engine: {num_gpu_blocks: 256}}}}
""")
    cl = load_spec(path).points[0].scenario.cluster
    assert cl.prefill.engine.num_gpu_blocks == 512          # the point's cluster.engine
    assert cl.decode.engine.num_gpu_blocks == 256           # the pool's own key wins
    assert cl.prefill.engine.block_size == 64               # the base's (tiny.yaml) engine


def test_grid_over_the_sla_judges_each_point_by_its_own(tmp_path):
    from simmodel.capacity import sweep
    path = spec_file(tmp_path, "grid: {sla.ttft_ms: [1, 100000], cluster.workers: [2]}\n"
                               "sla_percentile: 50\n")
    res = sweep(path, jobs=1)
    assert list(res.points["sla_met"]) == [False, True]
    assert list(res.summary["sla_met"]) == [False, True]


def test_set_applies_to_every_point_without_a_column(tmp_path):
    path = spec_file(tmp_path, """
set: {cluster.kv_transfer.bandwidth_gb_s: 25.0, cluster: {engine: {max_num_seqs: 16}}}
points:
  - {label: agg, grid: {cluster.workers: [1, 2]}}
  - {label: d, cluster: {prefill: {workers: 1}, decode: {workers: 1}}}
""")
    spec = load_spec(path)
    assert spec.varied == ("cluster.workers", "cluster.prefill.workers", "cluster.decode.workers")
    assert all(p.scenario.cluster.kv_transfer.bandwidth_gb_s == 25.0 for p in spec.points)
    assert spec.points[0].scenario.cluster.engine.max_num_seqs == 16
    assert spec.points[2].scenario.cluster.decode.engine.max_num_seqs == 16
    bad = spec_file(tmp_path, "set: {cluster.wrkers: 2}\ngrid: {cluster.workers: [1]}\n")
    with pytest.raises(UserError, match=r"set.cluster.wrkers: unknown scenario key"):
        load_spec(bad)
