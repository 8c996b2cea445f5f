"""Sweep and search files -> validated, expanded configuration points.

A sweep file (docs/sweep.md) names a ``base`` scenario and the settings to vary: a
``grid`` (Cartesian product of dotted keys) and optional ``points`` (explicit structural
variants, each crossed with the grid).  A search file adds a ``search`` section: one knob
to bracket and bisect against a target.  ``load_spec`` reads either, builds and validates
*every* point's scenario before anything runs, and raises one ``UserError`` line naming
the file and the key on any mistake.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import os
from dataclasses import dataclass, field
from typing import Any, Optional

import yaml

from simmodel.capacity import keys as K
from simmodel.config import Scenario
from simmodel.errors import UserError
from simmodel.scenario import _StrictLoader, _describe_yaml_error, scenario_from_dict

SWEEP_KEYS = ("name", "base", "set", "grid", "points", "replications", "warmup_ms", "sla",
              "sla_percentile", "search")
SEARCH_KEYS = ("vary", "range", "goal", "target", "tolerance", "early_stop",
               "parallel_probes")
GOALS = ("min", "max")
#: ``sla_percentile`` values: the percentiles the summary reports (100: the maximum).
PERCENTILES = (50.0, 75.0, 90.0, 95.0, 99.0, 100.0)


@dataclass(frozen=True)
class Point:
    """One configuration: ``overrides`` (flat dotted key -> value) applied to the base."""

    point: int                      # id, in expansion order
    label: str
    overrides: dict                 # every setting this point changes (grid + structural)
    grid: dict                      # the grid part of ``overrides`` (its search identity)
    scenario: Scenario


@dataclass(frozen=True)
class SearchSpec:
    vary: str
    lo: float
    hi: float
    goal: str                       # min | max
    target: dict                    # summary key -> {"min": x} / {"max": x}
    tolerance: float
    integer: bool
    early_stop: bool
    parallel_probes: int = 1        # values probed at once per grid point (per round)


@dataclass(frozen=True)
class Spec:
    """A whole sweep (``search`` is None) or search file."""

    path: str
    name: str
    base: str
    points: tuple[Point, ...]
    varied: tuple[str, ...]         # every dotted key some point sets, in first-seen order
    replications: int
    warmup_ms: float
    sla: Optional[dict]             # the SLA in force (the file's, else the base's)
    sla_percentile: float
    search: Optional[SearchSpec] = None
    raw: dict = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return "sweep" if self.search is None else "search"


def load_spec(path: str, *, kind: Optional[str] = None) -> Spec:
    """Read a sweep (``kind='sweep'``) or search (``kind='search'``) file; ``None``: a
    search when the file has a ``search`` section."""
    source = os.fspath(path)
    data = _read_yaml(source)
    err = _Err(source)
    for k in data:
        if k not in SWEEP_KEYS:
            raise err(k, f"unknown key; valid keys: {', '.join(SWEEP_KEYS)}")
    if kind == "sweep" and "search" in data:
        raise err("search", "a sweep file has no search section (use `simmodel search`)")
    if kind == "search" and "search" not in data:
        raise err("search", "missing required key (a search file needs a search section)")
    folder = os.path.dirname(os.path.abspath(source))
    base_path, base_raw = _read_base(data, folder, err)
    replications = _int(data.get("replications", 1), "replications", err, minimum=1)
    warmup = _number(data.get("warmup_ms", 0.0), "warmup_ms", err, minimum=0.0)
    pct = _number(data.get("sla_percentile", 99.0), "sla_percentile", err, minimum=0.0)
    if pct not in PERCENTILES:
        raise err("sla_percentile", "must be one of the summary's percentiles: "
                  f"{', '.join(f'{p:g}' for p in PERCENTILES)}; got {pct:g}")
    if "sla" in data:
        if data["sla"] is not None and not isinstance(data["sla"], dict):
            raise err("sla", "must be a mapping (ttft_ms, itl_ms, e2e_ms) or null")
        base_raw = dict(base_raw, sla=data["sla"] or {})
    base_raw = _fixed(data.get("set"), base_raw, folder, err)
    points = _expand(data, base_raw, base_path, folder, err, search="search" in data)
    search = _search(data["search"], points, err) if "search" in data else None
    varied: list[str] = []
    for p in points:
        varied += [k for k in p.overrides if k not in varied]
    sla = points[0].scenario.sla
    sla_dict = ({k: getattr(sla, k) for k in ("ttft_ms", "itl_ms", "e2e_ms")}
                if sla.is_set else None)
    name = data.get("name", os.path.splitext(os.path.basename(source))[0])
    if not isinstance(name, str) or not name:
        raise err("name", f"must be a non-empty string, got {name!r}")
    return Spec(path=os.path.abspath(source), name=name, base=base_path, points=tuple(points),
                varied=tuple(varied), replications=replications, warmup_ms=warmup,
                sla=sla_dict, sla_percentile=pct, search=search, raw=data)


class _Err:
    def __init__(self, source: str):
        self.source = source

    def __call__(self, key: str, message: str) -> UserError:
        return UserError(f"{self.source}: {key}: {message}" if key else f"{self.source}: {message}")


def _read_yaml(source: str) -> dict:
    try:
        with open(source, encoding="utf-8") as f:
            data = yaml.load(f.read(), Loader=_StrictLoader)
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise UserError(f"{source}: cannot read: {reason}") from None
    except yaml.YAMLError as e:
        raise UserError(f"{source}: {_describe_yaml_error(e)}") from None
    if not isinstance(data, dict):
        raise UserError(f"{source}: the top level must be a mapping with at least 'base'")
    return data


def _read_base(data: dict, folder: str, err: _Err) -> tuple[str, dict]:
    base = data.get("base")
    if base is None:
        raise err("base", "missing required key (the scenario file to vary)")
    if not isinstance(base, str):
        raise err("base", f"must be a path, got {base!r}")
    path = os.path.normpath(os.path.join(folder, os.path.expanduser(base)))
    if not os.path.isfile(path):
        raise err("base", f"file not found: {path}")
    from simmodel.scenario import load_scenario
    load_scenario(path)                       # the base on its own: errors name the base
    with open(path, encoding="utf-8") as f:
        return path, yaml.load(f.read(), Loader=_StrictLoader)


def _expand(data: dict, base_raw: dict, base_path: str, folder: str, err: _Err,
            search: bool = False) -> list[Point]:
    grid = _grid(data.get("grid", {}), "grid", folder, err)
    structural = data.get("points")
    if structural is None:
        if not grid and not search:
            raise err("grid", "nothing to vary: give a non-empty grid or points")
        structural = [{}]
    elif not isinstance(structural, list) or not structural:
        raise err("points", "must be a non-empty list of mappings")
    out: list[Point] = []
    labels: set = set()
    implicit = data.get("points") is None
    for i, spec in enumerate(structural):
        where = "" if implicit else f"points[{i}]"
        if not isinstance(spec, dict):
            raise err(where, "must be a mapping (label, grid, and scenario settings)")
        spec = dict(spec)
        label = spec.pop("label", None if data.get("points") else "")
        if label is None:
            label = f"point{i}"
        if not isinstance(label, str):
            raise err(f"{where}.label", f"must be a string, got {label!r}")
        if label in labels and label:
            raise err(f"{where}.label", f"duplicate label {label!r}")
        labels.add(label)
        own = _grid(spec.pop("grid", {}), f"{where}.grid", folder, err)
        own_grid = {**grid, **own}
        fixed = {k: K.resolve_path_value(k, v, folder) for k, v in K.flatten(spec).items()}
        for k in fixed:
            _check_key(k, f"{where}.{k}", err)
        combos = list(itertools.product(*own_grid.values())) if own_grid else [()]
        for combo in combos:
            g = dict(zip(own_grid, combo))
            out.append(_point(len(out), label, {**fixed, **g}, g, base_raw, base_path,
                              where, set(own), err))
    return out


def _fixed(settings: Any, base_raw: dict, folder: str, err: _Err) -> dict:
    """``set:``: settings applied to every point (not varied: no column of their own)."""
    if settings is None:
        return base_raw
    if not isinstance(settings, dict):
        raise err("set", "must be a mapping of scenario settings (nested or dotted keys)")
    flat = {k: K.resolve_path_value(k, v, folder) for k, v in K.flatten(settings).items()}
    for k in flat:
        _check_key(k, f"set.{k}", err)
    return K.apply_overrides(base_raw, flat)


def _grid(grid: Any, where: str, folder: str, err: _Err) -> dict:
    if grid is None or grid == {}:
        return {}
    if not isinstance(grid, dict):
        raise err(where, "must be a mapping of dotted scenario keys to lists of values")
    out = {}
    for key, values in grid.items():
        if not isinstance(key, str):
            raise err(where, f"keys must be dotted scenario paths, got {key!r}")
        _check_key(key, f"{where}.{key}", err)
        if not isinstance(values, list) or not values:
            raise err(f"{where}.{key}", "must be a non-empty list of values")
        out[key] = [K.resolve_path_value(key, v, folder) for v in values]
    return out


def _check_key(key: str, where: str, err: _Err) -> None:
    reason = K.unknown_part(key)
    if reason is not None:
        raise err(where, reason)
    if key in ("seed", "name"):
        raise err(where, "is set by the sweep itself (use replications for seeds)")


def _point(idx: int, label: str, overrides: dict, grid: dict, base_raw: dict,
           base_path: str, where: str, own: set, err: _Err) -> Point:
    """Build and check one point; ``own``: the grid keys of the point's own grid."""
    raw = K.apply_overrides(base_raw, overrides)
    shown = ", ".join(f"{k}={v!r}" for k, v in grid.items())
    context = ((where or "the base") + (f" ({label})" if label else "")
               + (f" with {shown}" if shown else ""))
    try:
        scenario = scenario_from_dict(raw, base_dir=os.path.dirname(base_path),
                                      source=f"{err.source}: {context}")
    except UserError as e:
        raise UserError(str(e)) from None
    for key in grid:
        why = K.meaningless(key, scenario)
        if why is not None:
            raise err(f"{where}.grid.{key}" if key in own else f"grid.{key}",
                      f"means nothing for {context}: {why}")
    return Point(point=idx, label=label, overrides=overrides, grid=grid, scenario=scenario)


def _int(value: Any, key: str, err: _Err, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise err(key, f"must be an integer >= {minimum}, got {value!r}")
    return value


def _number(value: Any, key: str, err: _Err, minimum: float) -> float:
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value) or value < minimum):
        raise err(key, f"must be a number >= {minimum:g}, got {value!r}")
    return float(value)


def _search(sec: Any, points: list[Point], err: _Err) -> SearchSpec:
    if not isinstance(sec, dict):
        raise err("search", "must be a mapping (vary, range, goal, target, tolerance)")
    for k in sec:
        if k not in SEARCH_KEYS:
            raise err(f"search.{k}", f"unknown key; valid keys: {', '.join(SEARCH_KEYS)}")
    for k in ("vary", "range", "target"):
        if k not in sec:
            raise err(f"search.{k}", "missing required key")
    vary = sec["vary"]
    if not isinstance(vary, str):
        raise err("search.vary", f"must be a dotted scenario key, got {vary!r}")
    _check_key(vary, "search.vary", err)
    hint = K.field_type(vary)
    if hint not in (int, float):
        raise err("search.vary", f"must name a numeric setting ({vary} is not a number)")
    if any(vary in p.grid for p in points):
        raise err("search.vary", f"{vary} is also a grid key")
    lo, hi = _range(sec["range"], hint is int, err)
    goal = sec.get("goal", "min")
    if goal not in GOALS:
        raise err("search.goal", f"must be min or max, got {goal!r}")
    tol = _number(sec.get("tolerance", 0.02), "search.tolerance", err, minimum=0.0)
    if hint is float and tol <= 0:
        raise err("search.tolerance", "must be positive for a real-valued knob")
    early = sec.get("early_stop", True)
    if not isinstance(early, bool):
        raise err("search.early_stop", f"must be true or false, got {early!r}")
    target = _target(sec["target"], err, all(p.scenario.sla.is_set for p in points))
    parallel = _int(sec.get("parallel_probes", 1), "search.parallel_probes", err, minimum=1)
    spec = SearchSpec(vary=vary, lo=lo, hi=hi, goal=goal, target=target, tolerance=tol,
                      integer=hint is int, early_stop=early, parallel_probes=parallel)
    for p in points:                           # both ends must make valid scenarios
        for v in (lo, hi):
            raw_v = int(v) if spec.integer else float(v)
            probe_point(p, spec, raw_v, err.source)
    return spec


def _range(value: Any, integer: bool, err: _Err) -> tuple[float, float]:
    if (not isinstance(value, list) or len(value) != 2
            or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in value)):
        raise err("search.range", f"must be a list [low, high] of numbers, got {value!r}")
    lo, hi = value
    if integer and not all(float(v).is_integer() for v in value):
        raise err("search.range", "must hold integers for an integer setting")
    if not lo < hi:
        raise err("search.range", f"low must be below high, got {value!r}")
    return (int(lo), int(hi)) if integer else (float(lo), float(hi))


def _target(value: Any, err: _Err, points_have_sla: bool) -> dict:
    from simmodel.metrics.summary import GOODPUT_KEYS, SUMMARY_KEYS

    if not isinstance(value, dict) or not value:
        raise err("search.target", "must map summary keys to {max: x} and/or {min: x}")
    from simmodel.capacity.runner import WALL_KEYS

    unusable = set(WALL_KEYS) | {"kv_eviction_policy", "power_w", "power_coverage"}
    known = (set(SUMMARY_KEYS) | set(GOODPUT_KEYS) | {"goodput_rps_per_gpu", "gpus"}) - unusable
    out = {}
    for key, bound in value.items():
        if key in unusable:
            raise err(f"search.target.{key}", "cannot be a target (a text, always null, or "
                                              "a wall-clock measure of this machine)")
        if key not in known:
            raise err(f"search.target.{key}", "not a summary key (see docs/metrics.md)")
        if key.startswith("goodput_") and not points_have_sla:
            raise err(f"search.target.{key}", "goodput needs an SLA (set sla: in the search "
                                              "file or the base)")
        if not isinstance(bound, dict) or not bound or set(bound) - {"min", "max"}:
            raise err(f"search.target.{key}", "must be a mapping with min and/or max")
        for side, x in bound.items():
            out.setdefault(key, {})[side] = _number(
                x, f"search.target.{key}.{side}", err, minimum=-math.inf)
    return out


def probe_point(point: Point, search: SearchSpec, value: Any, source: str) -> Point:
    """``point`` with the searched knob set to ``value`` (validated like any point)."""
    scenario = point.scenario
    overrides = {**point.overrides, search.vary: value}
    why = K.meaningless(search.vary, scenario)
    if why is not None:
        raise UserError(f"{source}: search.vary: means nothing for "
                        f"{point.label or 'the base'}: {why}")
    return dataclasses.replace(point, overrides=overrides,
                               scenario=_with_value(scenario, search.vary, value, source))


def _with_value(scenario: Scenario, key: str, value: Any, source: str) -> Scenario:
    """``scenario`` with dotted ``key`` set (through the frozen configs, validated)."""
    from simmodel.config import ConfigError

    def replace(obj: Any, parts: list[str]) -> Any:
        if len(parts) == 1:
            return dataclasses.replace(obj, **{parts[0]: value})
        child = getattr(obj, parts[0])
        if child is None:
            raise UserError(f"{source}: search.vary: {key}: the point has no "
                            f"{parts[0]} section")
        return dataclasses.replace(obj, **{parts[0]: replace(child, parts[1:])})

    try:
        return replace(scenario, key.split("."))
    except ConfigError as e:
        raise UserError(f"{source}: search.vary: {key}={value!r}: {e.message}") from None
