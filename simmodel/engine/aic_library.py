"""The one door to NVIDIA's ``aiconfigurator-core`` library (``pip install 'simmodel[aic]'``).

Imported only when a ``timing_model: {type: aic}`` is built (or by ``simmodel models`` /
``simmodel systems``): nothing else of simmodel imports the library.  It works offline:

* ``model``: a config shipped with the library (``shipped_models``) or a local folder
  holding a ``config.json``; any other name is refused here, before the library could
  try to download it;
* ``system`` / ``backend`` / ``version``: those of its database (``databases``); no
  version means the database's ``current`` one;
* the spec is compiled once per distinct configuration (``engine_handle``, cached), and
  probed with one pass, so a combination the database does not cover fails before the run.

Every mistake is a one-line ``ConfigError`` keyed under ``timing_model`` that lists what
is available.
"""
from __future__ import annotations

import functools
import logging
import os
import tempfile
from dataclasses import dataclass

from simmodel.config import ConfigError, EngineConfig
from simmodel.config.aic import QUANT_KEYS, moe_sizes
from simmodel.errors import UserError

INSTALL_HINT = ("timing_model type: aic needs NVIDIA's aiconfigurator-core library: "
                "pip install 'simmodel[aic]'")


class MissingLibrary(UserError):
    """The library is not installed (``INSTALL_HINT``); a scenario's loader names the
    file and key in front of it."""


def library():
    """The ``aiconfigurator_core`` package (one-line ``UserError`` if not installed)."""
    try:
        import aiconfigurator_core
    except ImportError:
        raise MissingLibrary(INSTALL_HINT) from None
    # its loaders report fallbacks and lane choices as warnings on every build
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    return aiconfigurator_core


def library_version() -> str:
    from importlib.metadata import version
    return version("aiconfigurator-core")


# -- what the library offers ---------------------------------------------------------

def _configs_dir() -> str:
    return os.path.join(os.path.dirname(library().__file__), "model_configs")


@functools.cache
def shipped_models() -> tuple[str, ...]:
    """The models whose config ships with the library (HuggingFace ids), sorted."""
    names = (f[: -len("_config.json")] for f in os.listdir(_configs_dir())
             if f.endswith("_config.json") and not f.endswith("_hf_quant_config.json"))
    return tuple(sorted(n.replace("--", "/", 1) for n in names))


@functools.cache
def databases() -> dict[str, dict[str, tuple[str, ...]]]:
    """system -> backend -> the versions its database can be queried at."""
    library()
    from aiconfigurator_core.sdk.perf_database import get_supported_databases
    return {s: {b: tuple(v) for b, v in sorted(bv.items())}
            for s, bv in sorted(get_supported_databases().items())}


def literal_version(system: str, backend: str, version: str | None) -> str | None:
    """``version`` with the library's aliases (``current``, ``previous``, ``next``;
    None: ``current``) resolved."""
    from aiconfigurator_core.sdk.perf_database import get_version_slots
    slots = get_version_slots(system, backend) or {}
    if version is None and not slots:
        return databases()[system][backend][-1]
    return slots.get(version or "current", version)


def _listing(names) -> str:
    return ", ".join(names)


# -- one timing model's resolved configuration -----------------------------------------

@dataclass(frozen=True)
class AicSpec:
    """A resolved ``timing_model: {type: aic}``: everything the library is called with."""

    model: str                # as the user named it
    model_path: str           # what the library reads: a shipped id or a folder
    system: str
    backend: str
    version: str
    tp_size: int
    attention_dp_size: int
    moe_tp_size: int
    moe_ep_size: int
    nextn: int
    quant: tuple              # ((key, mode), ...) of the quantisation keys given
    database_mode: str | None

    @property
    def gpus(self) -> int:
        return self.tp_size * self.attention_dp_size

    def parallel_kwargs(self) -> dict:
        return dict(tp_size=self.tp_size, attention_dp_size=self.attention_dp_size,
                    moe_tp_size=self.moe_tp_size, moe_ep_size=self.moe_ep_size,
                    nextn=self.nextn, **dict(self.quant))


def resolve_spec(engine: EngineConfig) -> AicSpec:
    """``engine``'s aic timing model, its names checked against the library."""
    tm = engine.timing_model
    library()
    system, backend = tm.system, tm.backend or engine.backend
    dbs = databases()
    if system not in dbs:
        raise ConfigError("timing_model.system", f"unknown system {system!r}; available: "
                          f"{_listing(dbs)}")
    if backend not in dbs[system]:
        raise ConfigError("timing_model.backend", f"no {backend} database for {system}; "
                          f"available: {_listing(dbs[system])}")
    version = literal_version(system, backend, tm.version)
    if version not in dbs[system][backend]:
        raise ConfigError("timing_model.version", f"no {backend} {version} database for "
                          f"{system}; available: {_listing(dbs[system][backend])}")
    moe_tp, moe_ep = moe_sizes(tm, engine.gpus_per_worker)
    return AicSpec(tm.model, model_path(tm.model), system, backend, version,
                   engine.tensor_parallel_size, engine.dp_size, moe_tp, moe_ep,
                   engine.aic_nextn or 0, _quant_modes(tm), tm.database_mode)


def model_path(name: str) -> str:
    """What the library reads for model ``name``: a folder with a ``config.json``, a
    shipped id, or a folder linking to a shipped config (the library would try to
    download a shipped config that is not on its own default list)."""
    if os.path.isdir(name):
        if not os.path.isfile(os.path.join(name, "config.json")):
            raise ConfigError("timing_model.model", f"{name}: the folder has no config.json")
        return name
    if name not in shipped_models():
        raise ConfigError("timing_model.model", f"unknown model {name!r} (give a shipped "
                          f"config or a folder with a config.json); shipped: "
                          f"{_listing(shipped_models())}")
    from aiconfigurator_core.sdk.common import DefaultHFModels
    return name if name in DefaultHFModels else _linked_folder(name)


def _linked_folder(name: str) -> str:
    """A folder whose ``config.json`` (and quantisation config) link to the shipped ones."""
    stem = name.replace("/", "--", 1)
    user = getattr(os, "getuid", lambda: "user")()
    folder = os.path.join(tempfile.gettempdir(), f"simmodel-aic-{user}", stem)
    os.makedirs(folder, exist_ok=True)
    for src, dst in ((f"{stem}_config.json", "config.json"),
                     (f"{stem}_hf_quant_config.json", "hf_quant_config.json")):
        path = os.path.join(_configs_dir(), src)
        link = os.path.join(folder, dst)
        if os.path.isfile(path) and not os.path.exists(link):
            os.symlink(path, link)
    return folder


def _quant_modes(tm) -> tuple:
    from aiconfigurator_core.sdk import common
    enums = {"gemm_quant_mode": common.GEMMQuantMode, "moe_quant_mode": common.MoEQuantMode,
             "kvcache_quant_mode": common.KVCacheQuantMode,
             "fmha_quant_mode": common.FMHAQuantMode, "comm_quant_mode": common.CommQuantMode}
    out = []
    for key in QUANT_KEYS:
        mode = getattr(tm, key)
        if mode is None:
            continue
        names = [m.name for m in enums[key]]
        if mode not in names:
            raise ConfigError(f"timing_model.{key}", f"unknown mode {mode!r}; available: "
                              f"{_listing(names)}")
        out.append((key, mode))
    return tuple(out)


# -- the compiled engine ---------------------------------------------------------------

@functools.lru_cache(maxsize=32)
def engine_handle(spec: AicSpec):
    """The library's compiled engine for ``spec`` (probed with one mixed pass)."""
    lib = library()
    try:
        h = lib.AicEngine.from_spec(_compile(spec))
        h.mixed_step_latency(64, 1, 64, 2, 0)
    except Exception as e:           # the library's own words, on one line
        raise ConfigError("timing_model", f"{spec.model} on {spec.system} {spec.backend} "
                          f"{spec.version} (TP {spec.tp_size}, DP {spec.attention_dp_size}, "
                          f"MoE TP {spec.moe_tp_size} EP {spec.moe_ep_size}) is not covered by "
                          f"the database: {_one_line(e)}{_covered(spec)}") from None
    return h


def _compile(spec: AicSpec) -> bytes:
    """``aiconfigurator_core.sdk.engine.compile_engine``, with the database loaded in
    ``spec.database_mode`` (which that function does not take)."""
    from aiconfigurator_core import engine_spec_bincode_from_json
    from aiconfigurator_core.sdk import engine as eng, perf_database
    model, config = _model(spec)
    database = perf_database.get_database(spec.system, spec.backend, spec.version,
                                          database_mode=spec.database_mode)
    text = eng.build_engine_spec_json(model, model_path=spec.model_path, system=spec.system,
                                      backend=spec.backend, backend_version=spec.version,
                                      kv_block_size=None, systems_path=None,
                                      nextn=config.nextn, database=database)
    return bytes(engine_spec_bincode_from_json(text))


def _model(spec: AicSpec):
    """(the library's model object, its config) for ``spec``."""
    from aiconfigurator_core.sdk.config_builders import apply_nextn, build_model_config
    from aiconfigurator_core.sdk.models import get_model
    kw = spec.parallel_kwargs()
    nextn = kw.pop("nextn")
    config = build_model_config(pp_size=1, **kw)
    apply_nextn(config, nextn)
    return get_model(spec.model_path, config, spec.backend), config


@functools.lru_cache(maxsize=32)
def dispatch_overhead_ms(spec: AicSpec) -> float:
    """The library's calibrated CPU-side dispatch cost of a prefill (ms), which its
    kernel measurements do not contain: its backend's ``_prefill_dispatch_overhead_ms``
    (vLLM: 0.8 ms per layer of the model, fitted by the library to its measured serving
    runs; SGLang and TRT-LLM: none)."""
    from aiconfigurator_core.sdk.backends.factory import get_backend
    model, _ = _model(spec)
    return float(get_backend(spec.backend)._prefill_dispatch_overhead_ms(model))


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _covered(spec: AicSpec) -> str:
    """Where else the library's support matrix says the model runs (empty if it runs on
    ``spec``'s system and backend, or is not in the matrix)."""
    try:
        from aiconfigurator_core.sdk.common import get_support_matrix
        rows = {(r["System"], r["Backend"]) for r in get_support_matrix()
                if r["HuggingFaceID"] == spec.model and r["Status"] == "PASS"}
    except Exception:                # the matrix is a hint only
        return ""
    if not rows or (spec.system, spec.backend) in rows:
        return ""
    return "; covered: " + _listing(f"{s} {b}" for s, b in sorted(rows))


# -- sizes from the memory model -------------------------------------------------------

def _kv_estimator(spec: AicSpec, engine: EngineConfig, tp_size: int):
    from aiconfigurator_core.sdk.memory import KVCacheEstimator
    kw = spec.parallel_kwargs()
    if tp_size != spec.tp_size:          # the whole model on one GPU
        kw.update(tp_size=1, attention_dp_size=1, moe_tp_size=1, moe_ep_size=1)
    return KVCacheEstimator.from_request(
        spec.model_path, spec.system, spec.backend, spec.version,
        max_num_tokens=engine.max_num_batched_tokens, max_batch_size=engine.max_num_seqs,
        **kw)


def kv_budget(spec: AicSpec, engine: EngineConfig) -> dict:
    """The memory model's KV budget of one rank: ``total_kv_size_tokens``,
    ``kv_size_per_token_bytes`` and the breakdown (``estimate_kv_cache``'s dict)."""
    library()
    kind = "of_free" if spec.backend == "trtllm" else "of_total"
    try:
        est = _kv_estimator(spec, engine, spec.tp_size)
        return est.estimate(is_of_free=kind == "of_free",
                            fraction=engine.gpu_memory_utilization,
                            gpu_memory_capacity_bytes_override=None)
    except Exception as e:
        raise ConfigError("num_gpu_blocks", f"auto: the memory model of {spec.model} on "
                          f"{spec.system} (TP {spec.tp_size}) gives no KV budget: "
                          f"{_one_line(e)}") from None


def model_kv_bytes_per_token(spec: AicSpec, engine: EngineConfig) -> int:
    """The KV bytes of one token of the whole model (all layers and heads, its KV
    quantisation): what a prefill worker sends per prompt token."""
    library()
    try:
        est = _kv_estimator(spec, engine, 1)
    except Exception as e:
        raise ConfigError("bytes_per_token", f"auto: no KV size for {spec.model}: "
                          f"{_one_line(e)}") from None
    return int(est.breakdown["kv_size_per_token_bytes"])
