"""Scenario YAML -> frozen ``simmodel.config.Scenario``.

The loader walks the config dataclasses generically (``dataclasses.fields`` and their type
hints), so a later issue that adds a field to a config class needs no change here:

* a field whose type is a config dataclass takes a mapping, recursively;
* ``Optional[X]`` accepts ``null``; ``int`` must be an int (not a bool), ``float`` accepts
  ints, ``bool`` must be ``true``/``false``, ``str`` must be a string;
* unknown keys are rejected with the valid ones listed; fields without a default are
  required;
* path fields (``workload.trace``) are resolved relative to the YAML file's folder and must
  name an existing file (or, for ``format: weka``, a folder of conversation files); a
  ``planner.policy`` must point into that folder (``simmodel.config.policy_ref``).

Every check of the scenario runs here, before any trace is read: first each section's own
values, then the rules across sections (``simmodel.config.check_scenario``), then whether
the files named exist, then where the policy points.

Every mistake is raised as one line, ``UserError("<file>: <dotted.key>: <what>")``; a
``ConfigError`` from a dataclass's ``__post_init__`` (whose key is relative to its section)
is re-keyed with the full dotted path.
"""
from __future__ import annotations

import dataclasses
import os
import types
import typing
from typing import Any, Union

import yaml

from simmodel.config import ConfigError, PlannerConfig, Scenario, TimingConfig, WorkloadConfig
from simmodel.config.policy_ref import resolve_policy
from simmodel.errors import UserError

#: Fields filled in by the loader, never read from YAML.
_INTERNAL_FIELDS = {(Scenario, "source"), (PlannerConfig, "base_dir")}
#: Fields holding a file path, resolved against the YAML file's folder and checked to exist.
_PATH_FIELDS = {(WorkloadConfig, "trace"), (TimingConfig, "path")}


def load_scenario(path: Union[str, os.PathLike]) -> Scenario:
    """Read and validate the scenario YAML at ``path``; raise ``UserError`` on any mistake."""
    source = os.fspath(path)
    try:
        with open(source, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise UserError(f"{source}: cannot read scenario: {reason}") from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as e:
        raise UserError(f"{source}: {_describe_yaml_error(e)}") from None
    return scenario_from_dict(data, base_dir=os.path.dirname(os.path.abspath(source)),
                              source=source)


def scenario_from_dict(data: dict, *, base_dir: str, source: str) -> Scenario:
    """Build a ``Scenario`` from already-parsed YAML.

    ``base_dir`` is the folder relative paths are resolved against; ``source`` names the
    origin in error messages and is stored in ``Scenario.source``.
    """
    if data is None:
        raise UserError(f"{source}: the scenario is empty; expected a mapping with at least "
                        f"a 'workload' key")
    if not isinstance(data, dict):
        raise UserError(f"{source}: the top level must be a mapping, "
                        f"got {_type_name(data)}")
    ctx = _Context(base_dir=base_dir, source=source)
    scenario = _build(Scenario, _pool_defaults(data, ctx), "", ctx)
    for key, path, folder_ok in ctx.paths:   # files last: the config itself is valid
        _check_path(path, key, ctx, folder_ok=folder_ok)
    if scenario.planner is not None:
        planner = dataclasses.replace(scenario.planner, base_dir=base_dir)
        if planner.kind == "python":
            # Only the string and the file under the scenario's folder are checked:
            # nothing is imported (a policy is code; it runs when the run starts).
            try:
                resolve_policy(planner.policy, base_dir)
            except UserError as e:
                raise ctx.error("planner.policy", str(e)) from None
        scenario = dataclasses.replace(scenario, planner=planner)
    return dataclasses.replace(scenario, source=source)


def _pool_defaults(data: dict, ctx: "_Context") -> dict:
    """A disaggregated cluster (``prefill`` / ``decode`` pools) takes ``cluster.engine``
    as the default engine of both pools (each pool's own ``engine`` keys win) and has no
    use for ``cluster.workers``, which is refused rather than silently ignored."""
    cluster = data.get("cluster")
    if not isinstance(cluster, dict) or (cluster.get("prefill") is None
                                         and cluster.get("decode") is None):
        return data
    if "workers" in cluster:
        raise ctx.error("cluster.workers", "a disaggregated cluster has no single worker "
                                           "count: give prefill.workers and decode.workers")
    if "engine" not in cluster:
        return data
    engine = cluster["engine"]
    if not isinstance(engine, dict):
        raise ctx.error("cluster.engine", f"must be a mapping, got {_type_name(engine)}")
    cluster = dict(cluster)
    for pool in ("prefill", "decode"):
        spec = cluster.get(pool)
        if isinstance(spec, dict):
            own = spec.get("engine")
            if own is not None and not isinstance(own, dict):
                continue                   # _build reports the bad value with its key
            cluster[pool] = dict(spec, engine=_merged(engine, own or {}))
    del cluster["engine"]
    return dict(data, cluster=cluster)


def _merged(under: dict, over: dict) -> dict:
    out = dict(under)
    for k, v in over.items():
        out[k] = _merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


# --------------------------------------------------------------------------- YAML


class _StrictLoader(yaml.SafeLoader):
    """``SafeLoader`` that refuses duplicate keys (PyYAML silently keeps the last one)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *anchor` may legitimately be overridden by later keys
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:   # unhashable key: SafeLoader reports it itself
                    continue
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r}", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def _describe_yaml_error(e: yaml.YAMLError) -> str:
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    problem = getattr(e, "problem", None) or str(e)
    where = f"line {mark.line + 1}: " if mark is not None else ""
    return f"{where}invalid YAML: {' '.join(str(problem).split())}"


# --------------------------------------------------------------------------- walking


@dataclasses.dataclass(frozen=True)
class _Context:
    base_dir: str
    source: str
    #: ``(key, absolute path, folder_ok)`` of each path field, checked to exist at the end.
    paths: list = dataclasses.field(default_factory=list)

    def error(self, key: str, message: str) -> UserError:
        return UserError(f"{self.source}: {key}: {message}" if key
                         else f"{self.source}: {message}")


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _build(cls: type, data: Any, prefix: str, ctx: _Context):
    """Instantiate config dataclass ``cls`` from mapping ``data`` found at key ``prefix``."""
    if not isinstance(data, dict):
        raise ctx.error(prefix, f"must be a mapping, got {_type_name(data)}")
    fields = [f for f in dataclasses.fields(cls) if (cls, f.name) not in _INTERNAL_FIELDS]
    hints = typing.get_type_hints(cls)
    valid = [f.name for f in fields]
    for key in data:
        if not isinstance(key, str):
            raise ctx.error(prefix, f"keys must be strings, got {key!r}; "
                                    f"valid keys: {', '.join(valid)}")
        if key not in valid:
            raise ctx.error(_join(prefix, key), f"unknown key; valid keys: {', '.join(valid)}")
    kwargs = {}
    for f in fields:
        if f.name in data:
            key = _join(prefix, f.name)
            value = _convert(hints[f.name], data[f.name], key, ctx)
            if (cls, f.name) in _PATH_FIELDS and value is not None:
                # A Weka corpus may be a folder of conversation files.
                folder_ok = cls is WorkloadConfig and data.get("format") == "weka"
                value = _resolve_path(value, ctx)
                ctx.paths.append((key, value, folder_ok))
            kwargs[f.name] = value
    # Missing keys last, so a misspelt key deeper down is reported as such.
    for f in fields:
        if (f.name not in data and f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING):
            raise ctx.error(_join(prefix, f.name), "missing required key")
    try:
        return cls(**kwargs)
    except ConfigError as e:
        full = e.under(prefix) if prefix else e
        raise ctx.error(full.key, full.message) from None


def _convert(hint: Any, value: Any, key: str, ctx: _Context):
    """Check ``value`` against type ``hint``; return it (ints widened for float fields)."""
    origin = typing.get_origin(hint)
    if origin is Union or origin is types.UnionType:
        args = typing.get_args(hint)
        if value is None:
            if type(None) in args:
                return None
            raise ctx.error(key, "must not be null")
        non_none = [a for a in args if a is not type(None)]
        if str in non_none and len(non_none) == 2:  # a number or a keyword (``auto``)
            if isinstance(value, str):
                return value
            non_none = [a for a in non_none if a is not str]
        if len(non_none) != 1:  # no config uses general unions; keep the failure explicit
            raise TypeError(f"unsupported config annotation {hint!r} for {key}")
        hint = non_none[0]
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, key, ctx)
    if typing.get_origin(hint) is tuple:
        item_hint = typing.get_args(hint)[0]
        if not isinstance(value, list):
            raise ctx.error(key, f"must be a list, got {_type_name(value)}")
        return tuple(_convert(item_hint, v, f"{key}[{i}]", ctx) for i, v in enumerate(value))
    if hint is bool:
        if not isinstance(value, bool):
            raise ctx.error(key, f"must be true or false, got {_show(value)}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ctx.error(key, f"must be an integer, got {_show(value)}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            hint_text = ""
            if isinstance(value, str) and _parses_as_float(value):
                # YAML 1.1 reads `1e3` (no dot) as a string.
                hint_text = " (YAML reads exponents without a dot as strings: write 1.0e3)"
            raise ctx.error(key, f"must be a number, got {_show(value)}{hint_text}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ctx.error(key, f"must be a string, got {_show(value)}")
        return value
    raise TypeError(f"unsupported config annotation {hint!r} for {key}")


def _resolve_path(value: str, ctx: _Context) -> str:
    """``value`` as an absolute path (relative ones against the YAML file's folder)."""
    path = os.path.expanduser(value)
    if not os.path.isabs(path):
        path = os.path.join(ctx.base_dir, path)
    return os.path.normpath(path)


def _check_path(path: str, key: str, ctx: _Context, *, folder_ok: bool = False) -> None:
    """Refuse ``path`` unless it is a file (or, with ``folder_ok``, a folder)."""
    if not os.path.exists(path):
        raise ctx.error(key, f"file not found: {path}")
    if not (folder_ok and os.path.isdir(path)) and not os.path.isfile(path):
        raise ctx.error(key, f"not a file: {path}")


def _parses_as_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (int, float)):
        return "a number"
    return type(value).__name__


def _show(value: Any) -> str:
    """A short one-line rendering of a bad value for a message."""
    if isinstance(value, (dict, list)):
        return _type_name(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
