"""Size limits (docs/model.md, "Size limits"): a huge size is one line naming the file and
key, before anything is built (it used to end in a MemoryError traceback or never end)."""
from __future__ import annotations

import pytest

import simmodel
from simmodel.cli import main
from simmodel.config import SyntheticConfig
from simmodel.errors import UserError
from simmodel.workload.synthetic import check_memory, physical_memory_bytes

BASE = """name: big
workload:
  synthetic: {{requests: {requests}, input_tokens: {input}, output_tokens: {output}, arrival_interval_ms: 10}}
cluster:
  workers: {workers}
  engine: {{num_gpu_blocks: {blocks}, dp_size: {dp}}}
"""
SMALL = dict(requests=10, input=1000, output=50, workers=1, blocks=16384, dp=1)


def write(tmp_path, **over):
    p = tmp_path / "big.yaml"
    p.write_text(BASE.format(**{**SMALL, **over}))
    return str(p)


@pytest.mark.parametrize("over, key, limit", [
    (dict(workers=100_000_000), "cluster.workers", "100,000 scheduler ranks per pool"),
    (dict(workers=2_000, dp=64), "cluster.workers", "100,000 scheduler ranks per pool"),
    (dict(dp=4096), "cluster.engine.dp_size", "1,024 ranks per worker"),
    (dict(requests=1_000_000_000_000), "workload.synthetic.requests", "10,000,000 requests"),
    (dict(input=100_000_000_000), "workload.synthetic.input_tokens", "10,000,000 tokens"),
    (dict(output=100_000_000_000_000), "workload.synthetic.output_tokens", "10,000,000 tokens"),
    (dict(blocks=1_000_000_000_000), "cluster.engine.num_gpu_blocks", "1,000,000,000 KV blocks"),
])
def test_huge_size_is_one_line_naming_file_and_key(tmp_path, capsys, over, key, limit):
    path = write(tmp_path, **over)
    with pytest.raises(UserError) as e:
        simmodel.load_scenario(path)
    assert str(e.value).startswith(f"{path}: {key}: ") and limit in str(e.value)
    assert main(["run", path]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and key in err[0]


def test_limits_themselves_are_accepted(tmp_path):
    sc = simmodel.load_scenario(write(tmp_path, workers=100_000, blocks=1_000_000_000))
    assert sc.cluster.workers == 100_000


def test_disaggregated_pool_limit(tmp_path):
    p = tmp_path / "d.yaml"
    p.write_text(BASE.format(**SMALL).split("cluster:")[0] + "cluster:\n"
                 "  prefill: {workers: 1}\n  decode: {workers: 100001}\n")
    with pytest.raises(UserError, match=r"cluster\.decode\.workers: 100001 is more than the "
                                        r"limit of 100,000"):
        simmodel.load_scenario(str(p))


def test_memory_estimate(tmp_path):
    """Within the per-key limits but more than the machine can hold: refused before any
    request is generated (10 million requests of 10 million tokens)."""
    cfg = SyntheticConfig(requests=1000, input_tokens=6400, output_tokens=10,
                          arrival_interval_ms=1.0)
    check_memory(cfg, 64, limit=10**9)                     # 1000 x (3 kB + 100 x 100 B)
    with pytest.raises(Exception, match=r"workload\.synthetic\.input_tokens: 1,000 requests "
                                        r"of 6,400 tokens \(blocks of 1\) need about 0\.6 GB"):
        check_memory(cfg, 1, limit=10**8)
    with pytest.raises(Exception, match=r"workload\.synthetic\.requests: "):
        check_memory(cfg, 64, limit=2 * 10**6)
    if physical_memory_bytes() is None:
        pytest.skip("no physical memory size on this platform")
    path = write(tmp_path, requests=10_000_000, input=10_000_000)
    sc = simmodel.load_scenario(path)
    with pytest.raises(UserError) as e:
        simmodel.run(sc)
    assert str(e.value).startswith(f"{path}: workload.synthetic.") and "GB of memory" in str(e.value)
