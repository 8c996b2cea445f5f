"""Unit tier: the ``READERS`` registry of trace formats and the shared row validators."""
from __future__ import annotations

import json
import pathlib

import pytest

from simmodel.config import TRACE_FORMATS, WorkloadConfig
from simmodel.rng import Streams
from simmodel.workload import READERS, build_workload, read_azure, read_mooncake, read_weka
from simmodel.workload.rows import PATH_SEP, RowError, int_list, number, required

SCENARIOS = pathlib.Path(__file__).resolve().parents[2] / "scenarios"


def test_every_configurable_format_has_exactly_one_reader():
    assert sorted(READERS) == sorted(TRACE_FORMATS)


def test_build_workload_reads_through_the_registry(tmp_path):
    path = tmp_path / "trace.jsonl"
    path.write_text(json.dumps({"timestamp": 0, "hash_ids": [7, 8], "output_length": 3}) + "\n")
    for fmt, mode in (("mooncake", "full"), ("mooncake-delta", "delta")):
        cfg = WorkloadConfig(trace=str(path), format=fmt, trace_block_size=4,
                             arrival_speedup_ratio=2)
        w = build_workload(cfg, engine_block_size=16, streams=Streams(0))
        assert w == read_mooncake(str(path), trace_block_size=4, arrival_speedup_ratio=2,
                                  prompt_mode=mode)
        assert w.prompt_mode == mode and w.meta["format"] == fmt


def test_engine_block_size_reaches_only_the_readers_that_use_it():
    azure = str(SCENARIOS / "traces/azure/AzureLLMInferenceTrace_conv_first3000.csv")
    w = READERS["azure"](WorkloadConfig(trace=azure, format="azure"), engine_block_size=32)
    assert w == read_azure(azure, engine_block_size=32)
    weka = str(SCENARIOS / "traces/weka")
    w = READERS["weka"](WorkloadConfig(trace=weka, format="weka", think_time_cap_ms=500),
                        engine_block_size=32)
    assert w == read_weka(weka, think_time_cap_ms=500)


@pytest.mark.parametrize("call, message", [
    (lambda: number("timestamp", "x"), "timestamp must be a number, got 'x'"),
    (lambda: number("requests[4].t", -1, sep=PATH_SEP), "requests[4].t: must be >= 0, got -1"),
    (lambda: int_list("hash_ids", [1, True]), "hash_ids[1] must be an integer, got True"),
    (lambda: int_list("hash_ids", [1, -2]), "hash_ids[1] must be >= 0, got -2"),
    (lambda: int_list("requests[0].hash_ids", [0, -2], sep=PATH_SEP,
                      item_problem="must be an integer >= 0"),
     "requests[0].hash_ids[1]: must be an integer >= 0, got -2"),
    (lambda: required({"t": None}, "t"), "missing required field t"),
    (lambda: required({}, "t", "requests[3]"), "requests[3]: missing required field t"),
])
def test_row_validators_name_the_value_then_the_problem(call, message):
    with pytest.raises(RowError) as e:
        call()
    assert str(e.value) == message
