"""Unit tier: scenario YAML -> config dataclasses, and one-line errors for bad input."""
from __future__ import annotations

import os
import textwrap

import pytest

from simmodel.config import (ClusterConfig, EngineConfig, RouterConfig, RunConfig, Scenario,
                             SlaConfig, SyntheticConfig, TimingConfig, WorkloadConfig)
from simmodel.errors import UserError
from simmodel.scenario import load_scenario, scenario_from_dict

SYNTHETIC = "workload: {synthetic: {requests: 4, input_tokens: 100, output_tokens: 5, request_rate: 2}}\n"


@pytest.fixture
def trace(tmp_path):
    """A one-line Mooncake trace at tmp_path/traces/t.jsonl."""
    path = tmp_path / "traces" / "t.jsonl"
    path.parent.mkdir()
    path.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n')
    return path


def write(folder, text, name="s.yaml"):
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return str(path)


def load_error(path) -> str:
    with pytest.raises(UserError) as info:
        load_scenario(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    return message


# --------------------------------------------------------------------------- good input


def test_issue_example_round_trips(tmp_path, trace, monkeypatch):
    path = write(tmp_path / "scenarios", """\
        name: conversation-4w
        seed: 0
        workload:
          trace: ../traces/t.jsonl
          format: mooncake
          trace_block_size: 512
          arrival_speedup_ratio: 1
        cluster:
          workers: 4
          engine:
            backend: vllm
            block_size: 64
            num_gpu_blocks: 16384
            max_num_seqs: 256
            max_num_batched_tokens: 8192
            enable_prefix_caching: true
            enable_chunked_prefill: true
            preemption_mode: lifo
            speedup_ratio: 1.0
          router: {mode: round_robin}
        sla: {ttft_ms: 2000, itl_ms: 50}
        run: {max_sim_time_ms: null}
        """)
    monkeypatch.chdir(tmp_path / "traces")   # the trace path is relative to the YAML, not cwd
    scenario = load_scenario(path)

    assert scenario == Scenario(
        name="conversation-4w", seed=0, source=path,
        workload=WorkloadConfig(trace=str(trace), format="mooncake", trace_block_size=512,
                                arrival_speedup_ratio=1.0),
        cluster=ClusterConfig(workers=4, engine=EngineConfig(block_size=64),
                              router=RouterConfig()),
        sla=SlaConfig(ttft_ms=2000.0, itl_ms=50.0),
        run=RunConfig(max_sim_time_ms=None))
    # ints given for float fields are stored as floats
    assert type(scenario.workload.arrival_speedup_ratio) is float
    assert type(scenario.sla.ttft_ms) is float
    assert os.path.isabs(scenario.workload.trace)


def test_minimal_synthetic_fills_defaults(tmp_path):
    path = write(tmp_path, SYNTHETIC)
    scenario = load_scenario(path)
    assert scenario.workload == WorkloadConfig(
        synthetic=SyntheticConfig(requests=4, input_tokens=100, output_tokens=5,
                                  request_rate=2.0))
    assert scenario.cluster == ClusterConfig()
    assert scenario.cluster.engine.timing_model == TimingConfig()
    assert scenario.sla == SlaConfig() and not scenario.sla.is_set
    assert scenario.run == RunConfig()
    assert (scenario.name, scenario.seed, scenario.source) == ("scenario", 0, path)


def test_nested_timing_model_and_optional_nulls(tmp_path):
    path = write(tmp_path, SYNTHETIC + textwrap.dedent("""\
        cluster:
          engine:
            block_size: null
            max_model_len: 4096
            timing_model: {type: fixed, prefill_ms: 10, decode_ms: 2.5}
        run: {record_kv_events: true, max_sim_time_ms: 1000}
        """))
    scenario = load_scenario(path)
    engine = scenario.cluster.engine
    assert engine.timing_model == TimingConfig(type="fixed", prefill_ms=10.0, decode_ms=2.5)
    assert engine.block_size is None and engine.effective_block_size == 64
    assert engine.max_model_len == 4096
    assert scenario.run == RunConfig(max_sim_time_ms=1000.0, record_kv_events=True)


def test_absolute_trace_path_is_kept(tmp_path, trace):
    path = write(tmp_path / "elsewhere", f"workload: {{trace: {trace}}}\n")
    assert load_scenario(path).workload.trace == str(trace)


def test_scenario_from_dict(tmp_path, trace):
    data = {"workload": {"trace": "traces/t.jsonl"}, "cluster": {"workers": 2}}
    scenario = scenario_from_dict(data, base_dir=str(tmp_path), source="<dict>")
    assert scenario.workload.trace == str(trace)
    assert scenario.cluster.workers == 2
    assert scenario.source == "<dict>"
    with pytest.raises(UserError, match=r"^<dict>: cluster\.workers: must be an integer"):
        scenario_from_dict({"workload": {"trace": "traces/t.jsonl"}, "cluster": {"workers": "2"}},
                           base_dir=str(tmp_path), source="<dict>")


def test_yaml_merge_keys_are_not_duplicates(tmp_path):
    path = write(tmp_path, SYNTHETIC + textwrap.dedent("""\
        sla: &base {ttft_ms: 100}
        run:
          <<: {max_sim_time_ms: 5}
          max_sim_time_ms: 7
        """))
    assert load_scenario(path).run.max_sim_time_ms == 7.0


# --------------------------------------------------------------------------- bad input

BAD = [
    # (id, yaml, "key: message" prefix expected after "<file>: ")
    ("unknown nested key",
     SYNTHETIC + "cluster: {engine: {blok_size: 64}}\n",
     "cluster.engine.blok_size: unknown key; valid keys: backend, block_size, num_gpu_blocks,"),
    ("unknown top-level key",
     SYNTHETIC + "sed: 1\n",
     "sed: unknown key; valid keys: workload, cluster, sla, run, planner, telemetry, faults, "
     "retry, name, seed"),
    ("unknown key reported before a missing one",
     "cluster: {router: {mdoe: x}}\n",
     "cluster.router.mdoe: unknown key; valid keys: mode"),
    ("source is not a YAML key",
     SYNTHETIC + "source: x\n",
     "source: unknown key"),
    ("bool for int",
     SYNTHETIC + "cluster: {workers: true}\n",
     "cluster.workers: must be an integer, got true"),
    ("float for int",
     SYNTHETIC + "cluster: {engine: {num_gpu_blocks: 2.5}}\n",
     "cluster.engine.num_gpu_blocks: must be an integer, got 2.5"),
    ("string for int",
     "workload: {synthetic: {requests: '4', input_tokens: 1, output_tokens: 1, request_rate: 1}}\n",
     "workload.synthetic.requests: must be an integer, got '4'"),
    ("string for float",
     SYNTHETIC + "sla: {ttft_ms: fast}\n",
     "sla.ttft_ms: must be a number, got 'fast'"),
    ("bool for float",
     SYNTHETIC + "cluster: {engine: {speedup_ratio: false}}\n",
     "cluster.engine.speedup_ratio: must be a number, got false"),
    ("exponent without a dot",
     SYNTHETIC + "run: {max_sim_time_ms: 1e3}\n",
     "run.max_sim_time_ms: must be a number, got '1e3' (YAML reads exponents"),
    ("string for bool",
     SYNTHETIC + "cluster: {engine: {enable_prefix_caching: 'yes'}}\n",
     "cluster.engine.enable_prefix_caching: must be true or false, got 'yes'"),
    ("int for bool",
     SYNTHETIC + "run: {record_kv_events: 1}\n",
     "run.record_kv_events: must be true or false, got 1"),
    ("list for string",
     SYNTHETIC + "name: [a, b]\n",
     "name: must be a string, got a list"),
    ("int for string",
     SYNTHETIC + "cluster: {engine: {preemption_mode: 3}}\n",
     "cluster.engine.preemption_mode: must be a string, got 3"),
    ("null where not optional",
     SYNTHETIC + "cluster: {workers: null}\n",
     "cluster.workers: must be an integer, got null"),
    ("section not a mapping",
     SYNTHETIC + "cluster: 4\n",
     "cluster: must be a mapping, got a number"),
    ("nested section not a mapping",
     SYNTHETIC + "cluster: {engine: {timing_model: fixed}}\n",
     "cluster.engine.timing_model: must be a mapping, got a string"),
    ("null section",
     SYNTHETIC + "sla: null\n",
     "sla: must be a mapping, got null"),
    ("missing required synthetic key",
     "workload: {synthetic: {input_tokens: 1, output_tokens: 1, request_rate: 1}}\n",
     "workload.synthetic.requests: missing required key"),
    ("missing workload",
     "name: x\n",
     "workload: missing required key"),
    # __post_init__ errors re-keyed with the full dotted path
    ("post_init: cluster",
     SYNTHETIC + "cluster: {workers: 0}\n",
     "cluster.workers: must be a positive integer, got 0"),
    ("post_init: three levels deep",
     SYNTHETIC + "cluster: {engine: {timing_model: {type: fixed, prefill_ms: 1}}}\n",
     "cluster.engine.timing_model.decode_ms: must be a non-negative number, got None"),
    ("post_init: choice",
     SYNTHETIC + "cluster: {engine: {preemption_mode: random}}\n",
     "cluster.engine.preemption_mode: must be one of lifo, fifo"),
    ("post_init: prefill_schedule_interval on trtllm (the reference refuses it)",
     SYNTHETIC + "cluster: {engine: {backend: trtllm, prefill_schedule_interval: 2}}\n",
     "cluster.engine.prefill_schedule_interval: is supported only for backend vllm"),
    ("post_init: synthetic",
     "workload: {synthetic: {requests: 1, input_tokens: 1, output_tokens: 1}}\n",
     "workload.synthetic.request_rate: give exactly one of request_rate and arrival_interval_ms"),
    ("post_init: workload neither",
     "workload: {format: mooncake}\n",
     "workload.trace: give exactly one of trace and synthetic"),
    ("post_init: sla",
     SYNTHETIC + "sla: {ttft_ms: 10, e2e_ms: 100}\n",
     "sla.e2e_ms: cannot be combined with ttft_ms or itl_ms"),
    ("post_init: top level",
     SYNTHETIC + "seed: -1\n",
     "seed: must be a non-negative integer, got -1"),
    # faults (docs/faults.md)
    ("fault kind",
     SYNTHETIC + "faults: [{kind: crash, at_ms: 1}]\n",
     "faults[0].kind: must be one of fail, random, link, slow"),
    ("fault missing key",
     SYNTHETIC + "faults: [{kind: fail, worker: 0}]\n",
     "faults[0].at_ms: required for kind 'fail'"),
    ("fault key of another kind",
     SYNTHETIC + "faults: [{kind: fail, at_ms: 1, worker: 0, factor: 2}]\n",
     "faults[0].factor: not a key of kind 'fail'; its keys: at_ms, worker, count, pool,"),
    ("fault worker and count",
     SYNTHETIC + "faults: [{kind: fail, at_ms: 1, worker: 0, count: 1}]\n",
     "faults[0].worker: give exactly one of worker and count"),
    ("fault worker out of the pool",
     SYNTHETIC + "cluster: {workers: 2}\nfaults: [{kind: fail, at_ms: 1, worker: 2}]\n",
     "faults[0].worker: 2 is not a worker of the pool (it has 2: 0..1)"),
    ("fault pool in an aggregated cluster",
     SYNTHETIC + "faults: [{kind: slow, at_ms: 1, duration_ms: 1, worker: 0, factor: 2,"
     " pool: decode}]\n",
     "faults[0].pool: only in a disaggregated cluster"),
    ("fault pool required when disaggregated",
     SYNTHETIC + "cluster: {prefill: {workers: 1}, decode: {workers: 2}}\n"
     "faults: [{kind: fail, at_ms: 1, count: 1}]\n",
     "faults[0].pool: required in a disaggregated cluster (prefill or decode)"),
    ("link faults overlapping",
     SYNTHETIC + "cluster: {prefill: {workers: 1}, decode: {workers: 1}}\nfaults:\n"
     "  - {kind: link, at_ms: 10, duration_ms: 10, bandwidth_factor: 0.5}\n"
     "  - {kind: link, at_ms: 15, duration_ms: 10, bandwidth_factor: 0.5}\n",
     "faults[1].at_ms: link faults must not overlap in time"),
    ("link fault without transfers",
     SYNTHETIC + "faults: [{kind: link, at_ms: 1, duration_ms: 1, bandwidth_factor: 0.5}]\n",
     "faults[0].kind: link faults need a disaggregated cluster"),
    ("slow factor below one",
     SYNTHETIC + "faults: [{kind: slow, at_ms: 1, duration_ms: 1, worker: 0, factor: 0.5}]\n",
     "faults[0].factor: must be at least 1, got 0.5"),
    ("retry attempts",
     SYNTHETIC + "retry: {max_attempts: 0}\n",
     "retry.max_attempts: must be a positive integer, got 0"),
    ("client retries without a timeout",
     "workload: {synthetic: {requests: 1, input_tokens: 1, output_tokens: 1, request_rate: 1},"
     " client_retries: 1}\n",
     "workload.client_retries: needs client_timeout_ms"),
    ("post_init: empty name",
     SYNTHETIC + "name: ''\n",
     "name: must be a non-empty string"),
]


@pytest.mark.parametrize("text,expected", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_values_name_file_and_key(tmp_path, text, expected):
    path = write(tmp_path, text)
    assert load_error(path).startswith(f"{path}: {expected}")


def test_missing_trace_names_key_and_resolved_path(tmp_path):
    path = write(tmp_path / "scenarios", "workload: {trace: ../traces/missing.jsonl}\n")
    expected = os.path.join(str(tmp_path), "traces", "missing.jsonl")
    assert load_error(path) == f"{path}: workload.trace: file not found: {expected}"


def test_trace_that_is_a_directory(tmp_path):
    (tmp_path / "traces").mkdir()
    path = write(tmp_path, "workload: {trace: traces}\n")
    assert load_error(path) == f"{path}: workload.trace: not a file: {tmp_path / 'traces'}"


def test_malformed_yaml_reports_line(tmp_path):
    path = write(tmp_path, SYNTHETIC + "cluster:\n  workers: 2\n engine: {}\n")
    assert load_error(path).startswith(f"{path}: line 4: invalid YAML: ")


def test_unclosed_flow_sequence_reports_line(tmp_path):
    path = write(tmp_path, "name: x\nseed: [1, 2\n")
    assert load_error(path).startswith(f"{path}: line 3: invalid YAML: ")


def test_duplicate_key_reports_line(tmp_path):
    path = write(tmp_path, SYNTHETIC + "seed: 1\nseed: 2\n")
    assert load_error(path) == f"{path}: line 3: invalid YAML: duplicate key 'seed'"


@pytest.mark.parametrize("text,expected", [
    ("- a\n- b\n", "the top level must be a mapping, got a list"),
    ("just a string\n", "the top level must be a mapping, got a string"),
    ("", "the scenario is empty"),
    ("# only a comment\n", "the scenario is empty"),
    (SYNTHETIC + "1: 2\n", "keys must be strings, got 1; valid keys: workload,"),
])
def test_bad_top_level(tmp_path, text, expected):
    path = write(tmp_path, text)
    assert load_error(path).startswith(f"{path}: {expected}")


def test_missing_scenario_file(tmp_path):
    path = str(tmp_path / "nope.yaml")
    assert load_error(path) == f"{path}: cannot read scenario: No such file or directory"


def test_disaggregated_cluster_engine_is_the_pools_default_and_workers_refused(tmp_path):
    from simmodel.scenario import scenario_from_dict
    base = {"workload": {"synthetic": {"requests": 1, "input_tokens": 10, "output_tokens": 2,
                                       "arrival_interval_ms": 1.0}}}
    data = dict(base, cluster={"engine": {"num_gpu_blocks": 300, "max_num_seqs": 8},
                               "prefill": {"workers": 1},
                               "decode": {"workers": 2, "engine": {"num_gpu_blocks": 200}}})
    cl = scenario_from_dict(data, base_dir=str(tmp_path), source="s.yaml").cluster
    assert (cl.prefill.engine.num_gpu_blocks, cl.prefill.engine.max_num_seqs) == (300, 8)
    assert (cl.decode.engine.num_gpu_blocks, cl.decode.engine.max_num_seqs) == (200, 8)
    bad = dict(base, cluster={"workers": 4, "prefill": {"workers": 1}, "decode": {"workers": 1}})
    with pytest.raises(UserError, match=r"^s.yaml: cluster.workers: a disaggregated cluster"):
        scenario_from_dict(bad, base_dir=str(tmp_path), source="s.yaml")
