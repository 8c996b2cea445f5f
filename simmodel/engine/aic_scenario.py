"""What an aic timing model adds to a run, around the simulation.  Pure, no SimPy.

* ``prepare``: before the run, every pool's aic model is resolved and probed (a name or
  combination the library does not know is a one-line error keyed by its pool), and the
  ``auto`` sizes are derived from the library's models:

  - ``num_gpu_blocks: auto``: the memory model's KV budget of one rank (GPU memory x
    ``gpu_memory_utilization`` minus weights, activations, runtime and communication
    buffers; KV bytes per token at the pool's TP and KV quantisation) in blocks of
    ``block_size``;
  - ``kv_transfer.bytes_per_token: auto``: the KV bytes of one token of the whole model
    (the prefill pool's model config, at its KV quantisation);

  both are printed in the summary (``num_gpu_blocks`` or ``prefill_num_gpu_blocks`` /
  ``decode_num_gpu_blocks``, ``kv_bytes_per_token``), with the dispatch cost of a
  prefill pass (``prefill_overhead_ms``, of the pool that runs prefill passes).
* ``energy``: after the run, the energy of the passes where the database has power
  data (``energy_kwh``, ``mean_power_w`` = ``power_w``, ``power_coverage``; null energy
  where it has none, docs/metrics.md).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from simmodel.config import ConfigError, EngineConfig, Scenario
from simmodel.config.engine import AUTO
from simmodel.config.scenario import uses_aic
from simmodel.engine.clock import speedup_divisor
from simmodel.errors import UserError


def _engines(scenario: Scenario) -> dict:
    """Key of each pool's engine -> (summary prefix, engine)."""
    cl = scenario.cluster
    if cl.disaggregated:
        return {"cluster.prefill.engine": ("prefill_", cl.prefill.engine),
                "cluster.decode.engine": ("decode_", cl.decode.engine)}
    return {"cluster.engine": ("", cl.engine)}


def prepare(scenario: Scenario) -> tuple[Scenario, dict]:
    """``scenario`` with its ``auto`` sizes derived, and the summary keys that report
    them; (``scenario``, {}) when no pool has an aic timing model."""
    if not uses_aic(scenario):
        return scenario, {}
    from simmodel.engine import aic_library as lib
    from simmodel.engine.aic_timing import prefill_overhead_ms
    derived, engines, specs = {}, {}, {}
    for key, (prefix, eng) in _engines(scenario).items():
        with _keyed(scenario, key):
            if eng.aic:
                specs[key] = spec = lib.resolve_spec(eng)
                lib.engine_handle(spec)
                if prefix != "decode_":         # the pool that runs prefill passes
                    derived["prefill_overhead_ms"] = prefill_overhead_ms(eng, spec)
                if eng.num_gpu_blocks == AUTO:
                    tokens = lib.kv_budget(spec, eng)["total_kv_size_tokens"]
                    blocks = int(tokens) // eng.effective_block_size
                    if blocks < 1:
                        raise ConfigError("num_gpu_blocks", f"auto: the memory model leaves "
                                          f"{int(tokens)} KV tokens, less than one block")
                    eng = dataclasses.replace(eng, num_gpu_blocks=blocks)
                    derived[f"{prefix}num_gpu_blocks"] = blocks
        engines[key] = eng
    cluster = _with_engines(scenario.cluster, engines)
    if cluster.kv_transfer.bytes_per_token == AUTO:
        key = next(k for k in ("cluster.prefill.engine", "cluster.decode.engine") if k in specs)
        with _keyed(scenario, "cluster.kv_transfer"):
            per_token = lib.model_kv_bytes_per_token(specs[key], engines[key])
        cluster = dataclasses.replace(cluster, kv_transfer=dataclasses.replace(
            cluster.kv_transfer, bytes_per_token=per_token))
        derived["kv_bytes_per_token"] = per_token
    return dataclasses.replace(scenario, cluster=cluster), derived


def _with_engines(cl, engines: dict):
    if cl.disaggregated:
        return dataclasses.replace(
            cl, prefill=dataclasses.replace(cl.prefill, engine=engines["cluster.prefill.engine"]),
            decode=dataclasses.replace(cl.decode, engine=engines["cluster.decode.engine"]))
    return dataclasses.replace(cl, engine=engines["cluster.engine"])


class _keyed:
    """Turns a ``ConfigError`` raised inside into a one-line ``UserError`` naming the
    scenario and the key (under ``prefix``)."""

    def __init__(self, scenario: Scenario, prefix: str):
        self.source = scenario.source or "scenario"
        self.prefix = prefix

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if isinstance(exc, ConfigError):
            raise UserError(f"{self.source}: {exc.under(self.prefix)}") from None
        if type(exc).__name__ == "MissingLibrary":     # (aic_library, imported lazily)
            raise UserError(f"{self.source}: {self.prefix}.{exc}") from None
        return False


# -- energy ----------------------------------------------------------------------------

def op_power(per_op) -> tuple[float, float, float]:
    """(energy W·ms, latency ms of the ops with power data, latency ms of all ops) of the
    library's per-op results ``(name, latency_ms, energy_wms, source, ...)``: an op whose
    energy is 0 has no power data."""
    energy = covered = total = 0.0
    for op in per_op:
        total += op[1]
        if op[2] > 0:
            energy += op[2]
            covered += op[1]
    return energy, covered, total


#: A mixed step (512 new tokens in one entry, 8 decoders at 1,024 tokens) asked first:
#: power data is per kernel table, so a step without any means a database without any.
PROBE = (512, 512, 8, 1024)


def _step_power(handle, shape: tuple) -> tuple[float, float, float]:
    """``op_power`` of the library's mixed step of ``shape`` = (new prompt tokens, mean
    new tokens per prompt entry, decoders, their mean context)."""
    tokens, per_entry, n_dec, context = shape
    isl = per_entry if tokens else max(context - 2, 1)
    parts = handle._mixed_step_breakdown_per_op_with_metadata(tokens, n_dec, max(isl, 1), 2, 0)
    return op_power([op for part in parts for op in part])


def energy(scenario: Scenario, passes) -> dict:
    """The energy keys of the summary (``energy_kwh``, ``mean_power_w``, ``power_w``,
    ``power_coverage``) from ``passes`` (``Result.passes``).

    Each pass is taken at its logged shape (new prompt tokens, prompt entries, decoders,
    their context): the library's mixed step of that shape gives the power of its ops
    that have power data (energy / latency), applied to the pass's simulated duration
    (less a prefill pass's dispatch time: CPU work, without power data) on each of the
    worker's GPUs.  ``power_coverage``: the share of the simulated pass time
    whose ops have power data.  Energy covers forward passes only (no idle power); with
    no power data at all it is null."""
    from simmodel.engine import aic_library as lib
    wms = covered_ms = busy_ms = 0.0
    for prefix, eng in _engines(scenario).values():
        rows = passes[passes["pool"] == prefix[:-1]] if prefix else passes
        if not eng.aic or rows.empty:
            continue
        spec = lib.resolve_spec(eng)
        handle = lib.engine_handle(spec)
        if _step_power(handle, PROBE)[1] > 0:          # its database has power data
            e, c, b = _pool_energy(handle, rows, eng, _dispatch_ms(eng, spec))
        else:
            e, c, b = 0.0, 0.0, float(np.sum(rows["end_ms"] - rows["start_ms"]))
        wms, covered_ms, busy_ms = wms + e, covered_ms + c, busy_ms + b
    coverage = covered_ms / busy_ms if busy_ms > 0 else 0.0
    if wms <= 0:
        return {"energy_kwh": None, "mean_power_w": None, "power_w": None,
                "power_coverage": coverage}
    power = wms / covered_ms
    return {"energy_kwh": wms / 3.6e9, "mean_power_w": power, "power_w": power,
            "power_coverage": coverage}


def _dispatch_ms(eng: EngineConfig, spec) -> float:
    """The simulated time (ms) of a prefill pass's dispatch cost."""
    from simmodel.engine.aic_timing import prefill_overhead_ms
    return prefill_overhead_ms(eng, spec) / speedup_divisor(eng.speedup_ratio)


def _pool_energy(handle, rows, eng: EngineConfig,
                 dispatch_ms: float = 0.0) -> tuple[float, float, float]:
    """(energy W·ms, covered GPU-ms, busy GPU-ms) of one pool's ``rows``; the
    ``dispatch_ms`` of a pass with prefill work (CPU time) is busy, never covered."""
    from simmodel.engine.aic_timing import bucket_array
    busy = (rows["end_ms"] - rows["start_ms"]).to_numpy(dtype=np.float64)
    tokens = rows["prefill_tokens"].to_numpy(dtype=np.int64)
    dur = np.maximum(busy - np.where(tokens > 0, dispatch_ms, 0.0), 0.0)     # kernels
    entries = np.maximum(rows["num_prefill"].to_numpy(dtype=np.int64), 1)
    n_dec = rows["num_decode"].to_numpy(dtype=np.int64)
    context = rows["decode_tokens"].to_numpy(dtype=np.int64) // np.maximum(n_dec, 1)
    shapes = np.stack([bucket_array(tokens), bucket_array(tokens // entries), n_dec,
                       bucket_array(context)], axis=1)
    uniq, where = np.unique(shapes, axis=0, return_inverse=True)
    power = np.array([_step_power(handle, tuple(int(v) for v in s)) for s in uniq])
    e, c, t = (power[np.ravel(where), i] for i in range(3))
    share = np.divide(c, t, out=np.zeros_like(c), where=t > 0)
    watts = np.divide(e, c, out=np.zeros_like(e), where=c > 0)
    gpus = eng.gpus_per_worker
    return (float(np.sum(watts * share * dur)) * gpus, float(np.sum(share * dur)) * gpus,
            float(np.sum(busy)) * gpus)
