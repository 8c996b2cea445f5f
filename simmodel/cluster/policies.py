"""Scaling policies usable from a scenario's ``planner:`` section (reference §9 interface).

Every policy is an object with ``initial_tick_ms()`` and ``on_tick(snapshot) -> {
"target_prefill", "target_decode", "next_tick_ms"}``, so the built-in ones, a user's
own and one written for Dynamo's ``scaling_policy=`` are interchangeable.

* ``SchedulePolicy``: target counts from given times on (one tick per step);
* ``LoadPolicy``: a threshold controller on the snapshot's forward-pass metrics and
  traffic window, with bounds, a step size and a per-pool cooldown;
* ``load_python_policy("file.py:attr" | "module:attr", folder)``: a user's policy object
  or factory, from a ``.py`` file in the scenario's folder or below it; an installed
  module only with ``allow_module_policies`` (a policy is code: it runs like a script).
  Where a spec points is found by ``simmodel.config.policy_ref.resolve_policy``
  (re-exported here), which imports nothing and also checks the spec at load time.
"""
from __future__ import annotations

import importlib
import importlib.util
import math

from simmodel.config import PlannerConfig, Scenario
from simmodel.config.policy_ref import PolicyRef, resolve_policy
from simmodel.errors import UserError


class SchedulePolicy:
    """``steps``: ``(at_ms, target_prefill, target_decode)``; ticks at each step time."""

    policy_name = "planner.kind=schedule"
    builtin = True               # the planner lets its exceptions through (a bug, not user code)

    def __init__(self, steps):
        self.steps = list(steps)
        self.i = 0

    def initial_tick_ms(self) -> float:
        return self.steps[0][0] if self.steps else math.inf

    def on_tick(self, snapshot: dict) -> dict:
        now = snapshot["now_ms"]
        prefill = decode = None
        while self.i < len(self.steps) and self.steps[self.i][0] <= now:
            _, p, d = self.steps[self.i]
            prefill = p if p is not None else prefill
            decode = d if d is not None else decode
            self.i += 1
        nxt = self.steps[self.i][0] if self.i < len(self.steps) else None
        return {"target_prefill": prefill, "target_decode": decode, "next_tick_ms": nxt}


class LoadPolicy:
    """Scale on load, every ``interval_ms`` (see ``PlannerConfig``).

    Decode side (an aggregated cluster's only pool): KV usage = mean over the pool's
    latest forward passes of (decode + prefill KV tokens) / the worker's KV capacity; up
    when above ``kv_usage_high`` or when the window's mean ITL exceeds ``itl_ms``; down
    when below ``kv_usage_low``, ITL under half its target and nothing is queued.
    Prefill side: queued prompt tokens per worker (from the latest passes) above
    ``queued_prefill_tokens`` (default: two token budgets) or mean TTFT above
    ``ttft_ms`` -> up; nothing queued and TTFT under half its target -> down.
    In an aggregated cluster either signal scales the one pool (up wins).
    With ``min_*: 0`` a pool may drain to zero; a request arriving then starts a worker
    (``simmodel.cluster.planner``), and the next ticks judge it as usual.
    """

    policy_name = "planner.kind=load"
    builtin = True

    def __init__(self, cfg: PlannerConfig, *, disaggregated: bool, decode_kv_tokens: int,
                 prefill_kv_tokens: int, prefill_budget: int, ttft_ms=None, itl_ms=None):
        self.cfg = cfg
        self.disagg = disaggregated
        self.decode_cap = decode_kv_tokens
        self.prefill_cap = prefill_kv_tokens
        self.queue_limit = (cfg.queued_prefill_tokens if cfg.queued_prefill_tokens is not None
                            else 2.0 * prefill_budget)
        self.ttft_ms = cfg.ttft_ms if cfg.ttft_ms is not None else ttft_ms
        self.itl_ms = cfg.itl_ms if cfg.itl_ms is not None else itl_ms
        self.last_change = {"prefill": -math.inf, "decode": -math.inf}

    def initial_tick_ms(self) -> float:
        return self.cfg.interval_ms

    # -- signals --------------------------------------------------------------------------
    @staticmethod
    def _kv_usage(fpms, capacity: int) -> float | None:
        if not fpms or capacity <= 0:
            return None
        used = [(f["sum_decode_kv_tokens"] + f["sum_prefill_kv_tokens"]
                 + f["sum_prefill_tokens"]) / capacity for f in fpms]
        return sum(used) / len(used)

    @staticmethod
    def _queued_per_worker(fpms) -> float:
        if not fpms:
            return 0.0
        return sum(f["sum_queued_prefill_tokens"] for f in fpms) / len(fpms)

    def _decode_vote(self, snap: dict, fpms, capacity: int) -> int:
        traffic = snap["traffic"]
        usage = self._kv_usage(fpms, capacity)
        itl = traffic["avg_itl_ms"] if traffic["itl_count"] else None
        if (usage is not None and usage > self.cfg.kv_usage_high) or \
                (self.itl_ms is not None and itl is not None and itl > self.itl_ms):
            return +1
        queued = any(f["num_queued_prefill"] or f["num_queued_decode"] for f in fpms)
        itl_ok = self.itl_ms is None or itl is None or itl < 0.5 * self.itl_ms
        if usage is not None and usage < self.cfg.kv_usage_low and itl_ok and not queued:
            return -1
        return 0

    def _prefill_vote(self, snap: dict, fpms) -> int:
        traffic = snap["traffic"]
        queued = self._queued_per_worker(fpms)
        ttft = traffic["avg_ttft_ms"] if traffic["ttft_count"] else None
        if queued > self.queue_limit or \
                (self.ttft_ms is not None and ttft is not None and ttft > self.ttft_ms):
            return +1
        ttft_ok = self.ttft_ms is None or ttft is None or ttft < 0.5 * self.ttft_ms
        if fpms and queued == 0 and ttft_ok:
            return -1
        return 0

    # -- decisions ------------------------------------------------------------------------
    def _target(self, pool: str, vote: int, snap: dict) -> int | None:
        cfg = self.cfg
        now = snap["now_ms"]
        if vote == 0 or now - self.last_change[pool] < cfg.cooldown_ms:
            return None
        current = snap[f"non_draining_{pool}_count"]
        lo, hi = ((cfg.min_prefill, cfg.max_prefill) if pool == "prefill"
                  else (cfg.min_decode, cfg.max_decode))
        target = min(hi, max(lo, current + vote * cfg.step))
        if target == current:
            return None
        self.last_change[pool] = now
        return target

    def on_tick(self, snap: dict) -> dict:
        decode_fpms = snap["decode_fpm_snapshots"]
        out = {"target_prefill": None, "target_decode": None,
               "next_tick_ms": snap["now_ms"] + self.cfg.interval_ms}
        if self.disagg:
            out["target_decode"] = self._target(
                "decode", self._decode_vote(snap, decode_fpms, self.decode_cap), snap)
            out["target_prefill"] = self._target(
                "prefill", self._prefill_vote(snap, snap["prefill_fpm_snapshots"]), snap)
        else:
            votes = (self._decode_vote(snap, decode_fpms, self.decode_cap),
                     self._prefill_vote(snap, decode_fpms))
            vote = 1 if 1 in votes else (-1 if votes == (-1, -1) else 0)
            out["target_decode"] = self._target("decode", vote, snap)
        return out


#: How to allow a policy imported by module name (named in the refusal).
MODULE_OPT_IN = ("`simmodel run --allow-module-policies` or "
                 "simmodel.run(..., allow_module_policies=True)")


class UserPolicy:
    """A user's policy object with the spec it came from (``policy_name``, named by
    the planner in error messages); delegates the reference's two methods."""

    def __init__(self, obj, name: str):
        self.obj = obj
        self.policy_name = name

    def initial_tick_ms(self):
        return self.obj.initial_tick_ms()

    def on_tick(self, snapshot: dict):
        return self.obj.on_tick(snapshot)


def load_python_policy(spec: str, folder: str | None, *,
                       allow_module_policies: bool = False) -> UserPolicy:
    """Run the policy's file (or, with ``allow_module_policies``, import its installed
    module) and return the policy: the attribute itself if it has ``on_tick``, else what
    calling it returns.  Raises a one-line ``UserError`` when that fails."""
    ref = resolve_policy(spec, folder)
    if ref.path is None and not allow_module_policies:
        where = f"no file {ref.module.replace('.', '/')}.py in {folder}" if folder \
            else "not a file"
        raise UserError(f"{spec!r}: {where}; importing the installed module "
                        f"{ref.module!r} runs code from outside the scenario's folder: "
                        f"allow it with {MODULE_OPT_IN}")
    try:
        module = _exec_file(ref) if ref.path is not None else _import(ref.module)
    except UserError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure of user code is reported as such
        raise UserError(f"cannot import {spec.partition(':')[0]!r}: "
                        f"{type(e).__name__}: {e}") from None
    if not hasattr(module, ref.attr):
        raise UserError(f"{spec.partition(':')[0]!r} has no attribute {ref.attr!r}")
    obj = getattr(module, ref.attr)
    if isinstance(obj, type) or not hasattr(obj, "on_tick"):
        if not callable(obj):
            raise UserError(f"{spec} is neither a policy object nor a factory")
        try:
            obj = obj()
        except Exception as e:  # noqa: BLE001
            raise UserError(f"{spec}() failed: {type(e).__name__}: {e}") from None
    for method in ("initial_tick_ms", "on_tick"):
        if not callable(getattr(obj, method, None)):
            raise UserError(f"{spec}: the policy has no {method}() method")
    return UserPolicy(obj, spec)


def _exec_file(ref: PolicyRef):
    """Load the policy file afresh (two scenarios may each have their own
    ``policies.py``), under a private module name."""
    name = "_simmodel_policy_" + "".join(c if c.isalnum() else "_" for c in ref.path)
    spec = importlib.util.spec_from_file_location(name, ref.path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _import(module_name: str):
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name == module_name or module_name.startswith(f"{e.name}."):
            raise UserError(f"cannot import module {module_name!r}: not found "
                            "on sys.path") from None
        raise


def make_policy(scenario: Scenario, *, allow_module_policies: bool = False):
    """The policy object for ``scenario.planner`` (None without one).  A python policy's
    code runs here, when the run starts (never while a scenario is loaded)."""
    cfg = scenario.planner
    if cfg is None:
        return None
    if cfg.kind == "schedule":
        return SchedulePolicy([(s.at_ms, s.prefill, s.decode) for s in cfg.steps])
    if cfg.kind == "python":
        try:
            return load_python_policy(cfg.policy, cfg.base_dir,
                                      allow_module_policies=allow_module_policies)
        except UserError as e:
            raise UserError(f"{scenario.source or 'scenario'}: planner.policy: {e}") from None
    cl = scenario.cluster
    if cl.disaggregated:
        decode, prefill = cl.decode.engine, cl.prefill.engine
    else:
        decode = prefill = cl.engine
    return LoadPolicy(cfg, disaggregated=cl.disaggregated,
                      decode_kv_tokens=decode.kv_capacity_tokens,
                      prefill_kv_tokens=prefill.kv_capacity_tokens,
                      prefill_budget=prefill.max_num_batched_tokens,
                      ttft_ms=scenario.sla.ttft_ms, itl_ms=scenario.sla.itl_ms)
