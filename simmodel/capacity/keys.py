"""Dotted scenario keys: checking them against the config classes, setting them in a raw
scenario mapping, and telling which ones mean nothing for a given scenario.

A sweep or search names scenario settings by their dotted YAML path
(``cluster.workers``, ``cluster.router.mode``, ``cluster.decode.engine.num_gpu_blocks``).
Everything here works on the *raw* mapping read from YAML, before
``simmodel.scenario.scenario_from_dict`` validates values, so a point is built exactly
as if its settings had been written into the base file.
"""
from __future__ import annotations

import copy
import dataclasses
import os
import types
import typing
from typing import Any, Optional, Union

from simmodel.config import Scenario

#: Scenario fields never set from a sweep (filled in by the loader).
_INTERNAL = {"source", "base_dir"}
#: Keys whose values are file paths, resolved against the sweep file's folder.
PATH_KEYS = ("workload.trace", "timing_model.path")


def _unwrap(hint: Any) -> Any:
    """``Optional[X]`` -> ``X``; a count or a keyword (``Union[int, str]``, ``auto``) ->
    ``int``."""
    if typing.get_origin(hint) in (Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if set(args) == {int, str}:
            return int
        return args[0] if len(args) == 1 else hint
    return hint


def field_type(key: str) -> Optional[type]:
    """The Python type of the scenario field at dotted ``key`` (``int``, ``float``,
    ``str``, ``bool``, a config dataclass, or a ``tuple`` hint); None if no such key."""
    cls: Any = Scenario
    hint: Any = None
    for part in key.split("."):
        if not dataclasses.is_dataclass(cls):
            return None
        names = {f.name for f in dataclasses.fields(cls)} - _INTERNAL
        if part not in names:
            return None
        hint = _unwrap(typing.get_type_hints(cls)[part])
        cls = hint
    return hint


def valid_children(key: str) -> list[str]:
    """The valid next parts under dotted ``key`` ('' for the top level), for messages."""
    cls = Scenario if not key else field_type(key)
    if not dataclasses.is_dataclass(cls):
        return []
    return [f.name for f in dataclasses.fields(cls) if f.name not in _INTERNAL]


def unknown_part(key: str) -> Optional[str]:
    """None if ``key`` names a scenario setting; else a one-line reason naming the first
    part that is wrong and the valid keys at that level."""
    parts = key.split(".")
    for i in range(len(parts)):
        prefix = ".".join(parts[:i])
        if field_type(".".join(parts[: i + 1])) is None:
            valid = valid_children(prefix)
            where = f" under {prefix}" if prefix else ""
            if not valid:
                return f"{prefix} has no sub-keys"
            return f"unknown scenario key {parts[i]!r}{where}; valid keys: {', '.join(valid)}"
    return None


def set_dotted(data: dict, key: str, value: Any) -> None:
    """Set ``data[a][b][c] = value`` for ``key = 'a.b.c'``, creating mappings on the way
    (a ``null`` on the way is replaced by a mapping)."""
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = copy.deepcopy(value)


def flatten(overrides: dict, prefix: str = "") -> dict:
    """``{'cluster': {'prefill': {'workers': 2}}}`` -> ``{'cluster.prefill.workers': 2}``
    (a mapping whose key is a config section is descended into; other values are
    leaves)."""
    out: dict = {}
    for k, v in overrides.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict) and v and dataclasses.is_dataclass(field_type(key)):
            out.update(flatten(v, key))
        else:
            out[key] = v
    return out


def resolve_path_value(key: str, value: Any, folder: str) -> Any:
    """A relative path written in a sweep file is relative to that file's folder."""
    if (isinstance(value, str) and any(key == p or key.endswith("." + p) for p in PATH_KEYS)
            and not os.path.isabs(os.path.expanduser(value))):
        return os.path.normpath(os.path.join(folder, value))
    return value


def apply_overrides(base: dict, overrides: dict) -> dict:
    """A copy of the raw scenario ``base`` with flat dotted ``overrides`` set.

    Turning an aggregated base into a disaggregated point (setting ``cluster.prefill`` /
    ``cluster.decode``) drops the base's ``cluster.workers``, which a disaggregated
    cluster refuses; ``cluster.engine`` stays and becomes both pools' default engine
    (``simmodel.scenario``)."""
    data = copy.deepcopy(base)
    for key, value in overrides.items():
        set_dotted(data, key, value)
    cluster = data.get("cluster")
    base_cluster = base.get("cluster") or {}
    converted = (isinstance(cluster, dict) and cluster.get("prefill") is not None
                 and not isinstance(base_cluster.get("prefill"), dict))
    if converted and "cluster.workers" not in overrides:
        cluster.pop("workers", None)
    return data


def meaningless(key: str, scenario: Scenario) -> Optional[str]:
    """Why setting dotted ``key`` changes nothing in ``scenario`` (None if it matters):
    aggregated-only keys on a disaggregated cluster and the other way round, KV-router
    keys under round robin, trace keys on a synthetic workload and the other way round,
    SGLang keys on another backend.  (``cluster.engine.*`` matters in a disaggregated
    point too: it is both pools' default engine.)"""
    cl = scenario.cluster
    if cl.disaggregated and key == "cluster.workers":
        return "the point is disaggregated (use cluster.prefill.workers / cluster.decode.workers)"
    if not cl.disaggregated and key.startswith(("cluster.prefill.", "cluster.decode.",
                                                "cluster.kv_transfer.")):
        return "the point is aggregated (it has no prefill/decode pools)"
    if key.startswith("cluster.router.") and key != "cluster.router.mode" \
            and cl.router.mode != "kv":
        return "the point's router is round_robin (these keys tune the kv router)"
    synthetic = scenario.workload.synthetic is not None
    if synthetic and key in ("workload.trace", "workload.format", "workload.trace_block_size",
                             "workload.arrival_speedup_ratio"):
        return "the point's workload is synthetic (use workload.synthetic.*)"
    if not synthetic and key.startswith("workload.synthetic."):
        return "the point's workload is a trace"
    if ".engine.sglang." in key:
        pool = key.split(".engine.")[0]
        engine = {"cluster": cl.prefill.engine if cl.disaggregated else cl.engine,
                  "cluster.prefill": getattr(cl.prefill, "engine", None),
                  "cluster.decode": getattr(cl.decode, "engine", None)}.get(pool)
        if engine is not None and engine.backend != "sglang":
            return f"the point's backend is {engine.backend}, not sglang"
    return None
