"""``timing_model: {type: aic}``: its keys, their checks and one-line errors, the derived
sizes (``auto``), the memoisation buckets, and what happens without the library.
Expected sizes come from the model configs by hand or from direct library calls."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from simmodel.config import ConfigError, EngineConfig, TimingConfig
from simmodel.config.aic import moe_sizes
from simmodel.engine import aic_library
from simmodel.engine.aic_scenario import op_power, prepare
from simmodel.engine.aic_timing import EXACT_BELOW, bucket, bucket_array
from simmodel.errors import UserError
from simmodel.scenario import scenario_from_dict

ROOT = Path(__file__).resolve().parents[2]
LLAMA = {"type": "aic", "model": "meta-llama/Meta-Llama-3.1-8B", "system": "h200_sxm"}
WORKLOAD = {"synthetic": {"requests": 2, "input_tokens": 100, "output_tokens": 2,
                          "arrival_interval_ms": 1.0}}


def scenario(cluster: dict):
    return scenario_from_dict({"workload": WORKLOAD, "cluster": cluster}, base_dir=".",
                              source="s.yaml")


def error_of(cluster: dict) -> str:
    with pytest.raises(UserError) as e:
        prepare(scenario(cluster))
    return str(e.value)


# -- buckets ---------------------------------------------------------------------------

def test_buckets_are_exact_below_256_and_steps_of_an_octave_64th_above():
    assert [bucket(x) for x in (0, 1, 255)] == [0, 1, 255]
    assert [bucket(x) for x in (256, 257, 258, 259, 260)] == [256, 256, 260, 260, 260]
    assert bucket(1031) == 1024 and bucket(1032) == 1040        # steps of 16 in [1024, 2048)


@given(st.integers(0, 10**8))
def test_a_bucket_is_within_one_128th_of_its_input(x):
    b = bucket(x)
    assert abs(b - x) <= x / 128
    assert b == x or x >= EXACT_BELOW
    assert bucket_array(np.array([x]))[0] == b


# -- config checks ---------------------------------------------------------------------

@pytest.mark.parametrize("kw, key", [
    (dict(model="m"), "model"),                                  # not type aic
    (dict(type="aic", system="h200_sxm"), "model"),
    (dict(type="aic", model="m", system="s", database_mode="FAST"), "database_mode"),
    (dict(type="aic", model="m", system="s", backend="tgi"), "backend"),
    (dict(type="aic", model="m", system="s", moe_ep_size=0), "moe_ep_size"),
    (dict(prefill_overhead_ms=1.0), "prefill_overhead_ms"),          # not type aic
    (dict(type="aic", model="m", system="s", prefill_overhead_ms=-1), "prefill_overhead_ms"),
    (dict(type="aic", model="m", system="s", prefill_overhead_ms="some"),
     "prefill_overhead_ms"),
])
def test_aic_keys_are_checked(kw, key):
    with pytest.raises(ConfigError) as e:
        TimingConfig(**kw)
    assert e.value.key == key


def test_auto_blocks_need_an_aic_model_and_other_words_are_refused():
    with pytest.raises(ConfigError, match="auto needs timing_model type: aic"):
        EngineConfig(num_gpu_blocks="auto")
    with pytest.raises(ConfigError, match="positive integer or auto"):
        EngineConfig(num_gpu_blocks="lots", timing_model=TimingConfig(**LLAMA))


def test_the_yaml_loader_takes_auto_and_names_the_key_of_a_bad_value():
    sc = scenario({"engine": {"num_gpu_blocks": "auto", "timing_model": LLAMA}})
    assert sc.cluster.engine.num_gpu_blocks == "auto"
    with pytest.raises(UserError, match=r"^s.yaml: cluster.engine.num_gpu_blocks: must be a "
                                        r"positive integer or auto, got 'many'$"):
        scenario({"engine": {"num_gpu_blocks": "many", "timing_model": LLAMA}})


def test_bytes_per_token_auto_needs_an_aic_pool():
    with pytest.raises(UserError, match="kv_transfer.bytes_per_token: auto needs"):
        scenario({"prefill": {}, "decode": {}, "kv_transfer": {"bytes_per_token": "auto"}})


def test_decode_speedup_is_refused_with_aic():
    with pytest.raises(ConfigError, match="decode_speedup_ratio"):
        EngineConfig(decode_speedup_ratio=2.0, timing_model=TimingConfig(**LLAMA))


def test_moe_defaults_to_vllm_experts_sharded_by_tp():
    tm = TimingConfig(**LLAMA)
    assert moe_sizes(tm, 4) == (4, 1)                             # neither given: TP x DP
    assert moe_sizes(TimingConfig(**LLAMA, moe_ep_size=4), 4) == (1, 4)
    assert moe_sizes(TimingConfig(**LLAMA, moe_tp_size=2), 4) == (2, 2)
    with pytest.raises(ConfigError, match="must equal the worker's GPUs"):
        moe_sizes(TimingConfig(**LLAMA, moe_tp_size=3), 4)


# -- names checked against the library, one line each ---------------------------------

@pytest.mark.parametrize("tm, key, listed", [
    ({"model": "acme/NoSuchModel-1B"}, "timing_model.model", "meta-llama/Meta-Llama-3.1-8B"),
    ({"system": "h999"}, "timing_model.system", "h100_sxm"),
    ({"version": "0.0.1"}, "timing_model.version", "0.24.0"),
    ({"backend": "sglang", "system": "b60"}, "timing_model.backend", "vllm"),
    ({"gemm_quant_mode": "fp9"}, "timing_model.gemm_quant_mode", "fp8"),
])
def test_unknown_names_list_what_is_available(tm, key, listed):
    msg = error_of({"engine": {"timing_model": {**LLAMA, **tm}}})
    assert msg.startswith(f"s.yaml: cluster.engine.{key}: ") and "\n" not in msg
    assert listed in msg


def test_an_uncovered_combination_is_one_line():
    # 64 attention heads cannot be split over 3 GPUs
    msg = error_of({"engine": {"tensor_parallel_size": 3, "timing_model": {
        **LLAMA, "model": "Qwen/Qwen3-32B"}}})
    assert msg.startswith("s.yaml: cluster.engine.timing_model: Qwen/Qwen3-32B on h200_sxm "
                          "vllm 0.24.0 (TP 3") and "not covered" in msg and "\n" not in msg


def test_a_local_folder_needs_a_config_json(tmp_path):
    msg = error_of({"engine": {"timing_model": {**LLAMA, "model": str(tmp_path)}}})
    assert msg.endswith(": the folder has no config.json")


# -- derived sizes ---------------------------------------------------------------------

def test_auto_blocks_are_the_memory_models_kv_tokens_in_blocks():
    from aiconfigurator_core.sdk.memory import estimate_kv_cache
    sc, derived = prepare(scenario({"engine": {"num_gpu_blocks": "auto",
                                               "gpu_memory_utilization": 0.8,
                                               "timing_model": LLAMA}}))
    est = estimate_kv_cache("meta-llama/Meta-Llama-3.1-8B", "h200_sxm", "vllm", "0.24.0",
                            max_num_tokens=8192, max_batch_size=256,
                            memory_fraction_kind="of_total", memory_fraction_value=0.8)
    assert sc.cluster.engine.num_gpu_blocks == est["total_kv_size_tokens"] // 64
    # with the vLLM dispatch cost of a prefill pass: 32 layers x 0.8 ms
    assert derived == {"prefill_overhead_ms": pytest.approx(25.6),
                       "num_gpu_blocks": est["total_kv_size_tokens"] // 64}


def test_auto_bytes_per_token_is_the_whole_models_kv_of_a_token():
    # Llama-3.1-8B (its config.json): 32 layers x 8 KV heads x 128 dims x (K, V) x 2 bytes
    pool = {"engine": {"tensor_parallel_size": 2, "timing_model": LLAMA}}
    sc, derived = prepare(scenario({"prefill": pool, "decode": pool,
                                    "kv_transfer": {"bytes_per_token": "auto"}}))
    assert sc.cluster.kv_transfer.bytes_per_token == 32 * 8 * 128 * 2 * 2
    assert derived == {"prefill_overhead_ms": pytest.approx(25.6),     # the prefill pool's
                       "kv_bytes_per_token": 131072}


def test_without_aic_nothing_is_derived():
    sc = scenario({"engine": {"num_gpu_blocks": 100}})
    assert prepare(sc) == (sc, {})


def test_the_dispatch_cost_takes_a_number_auto_or_null():
    for value in (None, "auto", 0, 2.5):
        assert TimingConfig(type="aic", model="m", system="s",
                            prefill_overhead_ms=value).prefill_overhead_ms == value


@pytest.mark.parametrize("value", [0, 0.0, 2.5, "auto", None])
def test_the_yaml_loader_takes_the_dispatch_cost_as_a_number_auto_or_null(value):
    # A float-or-keyword annotation once crashed the loader with a TypeError traceback.
    sc = scenario({"engine": {"timing_model": {**LLAMA, "prefill_overhead_ms": value}}})
    got = sc.cluster.engine.timing_model.prefill_overhead_ms
    assert got == value and type(got) is (float if isinstance(value, int) else type(value))


def test_the_yaml_loader_names_the_key_of_a_non_number_dispatch_cost():
    with pytest.raises(UserError, match=r"^s.yaml: cluster.engine.timing_model."
                                        r"prefill_overhead_ms: must be a number, got a list$"):
        scenario({"engine": {"timing_model": {**LLAMA, "prefill_overhead_ms": [1]}}})


# -- energy ----------------------------------------------------------------------------

def test_op_power_counts_only_ops_with_power_data():
    ops = [("gemm", 2.0, 1400.0, "silicon"), ("attention", 1.0, 0.0, "silicon")]
    assert op_power(ops) == (1400.0, 2.0, 3.0)


class FakeHandle:
    """A library engine whose GEMM has power data (1,000 W·ms over 2 ms) and whose
    attention has none (1 ms, 0 W·ms), whatever the shape."""

    def _mixed_step_breakdown_per_op_with_metadata(self, *shape):
        return ([("gemm", 2.0, 1000.0, "silicon", None)],
                [("context_attention", 1.0, 0.0, "silicon", None)], [])


def test_pass_energy_is_the_covered_power_over_the_simulated_time():
    import pandas as pd

    from simmodel.engine.aic_scenario import _pool_energy
    rows = pd.DataFrame({"start_ms": [0.0, 30.0], "end_ms": [30.0, 45.0],
                         "prefill_tokens": [512, 0], "num_prefill": [1, 0],
                         "num_decode": [0, 8], "decode_tokens": [0, 8000]})
    eng = EngineConfig(tensor_parallel_size=2, timing_model=TimingConfig(**LLAMA))
    energy, covered, busy = _pool_energy(FakeHandle(), rows, eng)
    # 500 W on the GEMM's 2/3 of each pass, for 45 ms of passes on 2 GPUs
    assert busy == 90.0
    assert covered == pytest.approx(2 / 3 * 90.0)
    assert energy == pytest.approx(500.0 * 2 / 3 * 90.0)


def test_the_dispatch_time_of_a_prefill_pass_is_busy_but_has_no_power():
    import pandas as pd

    from simmodel.engine.aic_scenario import _pool_energy
    rows = pd.DataFrame({"start_ms": [0.0, 30.0], "end_ms": [30.0, 45.0],
                         "prefill_tokens": [512, 0], "num_prefill": [1, 0],
                         "num_decode": [0, 8], "decode_tokens": [0, 8000]})
    eng = EngineConfig(tensor_parallel_size=2, timing_model=TimingConfig(**LLAMA))
    energy, covered, busy = _pool_energy(FakeHandle(), rows, eng, dispatch_ms=6.0)
    # the prefill pass's kernels run 30 - 6 = 24 ms, the decode pass's 15 ms
    assert busy == 90.0
    assert covered == pytest.approx(2 / 3 * (24.0 + 15.0) * 2)
    assert energy == pytest.approx(500.0 * covered)


# -- without the library ---------------------------------------------------------------

def test_without_the_library_type_aic_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "aiconfigurator_core", None)   # import fails
    with pytest.raises(UserError) as e:
        aic_library.library()
    assert str(e.value) == aic_library.INSTALL_HINT
    assert "pip install 'simmodel[aic]'" in str(e.value)


def test_the_cli_without_the_library_is_one_line_exit_2(tmp_path):
    blocker = tmp_path / "aiconfigurator_core.py"
    blocker.write_text("raise ImportError('not installed')\n")
    p = subprocess.run([sys.executable, "-m", "simmodel", "models"], cwd=ROOT,
                       env={"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"},
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert p.stderr == f"simmodel: error: {aic_library.INSTALL_HINT}\n"


def test_a_scenario_without_the_library_names_its_file_and_key(tmp_path):
    """``simmodel run`` of an aic scenario without the library: one line naming the file
    and the timing_model key, exit 2, no result folder."""
    blocker = tmp_path / "aiconfigurator_core.py"
    blocker.write_text("raise ImportError('not installed')\n")
    scenario = ROOT / "scenarios" / "aic_llama8b_h200.yaml"
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "simmodel", "run", str(scenario), "--out",
                        str(out)], cwd=ROOT,
                       env={"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"},
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr == (f"simmodel: error: {scenario}: cluster.engine.timing_model "
                        f"{aic_library.INSTALL_HINT.removeprefix('timing_model ')}\n")
    assert not out.exists()
