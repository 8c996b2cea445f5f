"""Where a ``planner.policy`` string points, found without importing or reading anything.

A ``kind: python`` policy is ``"file.py:attr"`` or ``"module:attr"``.  ``resolve_policy``
turns it into a ``PolicyRef``: a ``.py`` file in the scenario's folder or below it, or an
installed module.  The loader (``simmodel.scenario``) calls it so that a spec pointing
outside the folder is refused when the scenario is loaded; ``simmodel.cluster.policies``
calls it again when the run starts, and only then runs the file or imports the module.
The only I/O is looking paths up (``realpath``, ``isfile``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from simmodel.errors import UserError


@dataclass(frozen=True)
class PolicyRef:
    """Where a ``planner.policy`` string points: a ``.py`` file under the scenario's
    folder (``path``) or an installed module (``module``, imported only on opt-in)."""

    spec: str
    attr: str
    path: str | None = None
    module: str | None = None


def resolve_policy(spec: str, folder: str | None) -> PolicyRef:
    """Resolve ``"file.py:attr"`` / ``"module:attr"`` without importing anything.

    ``file.py`` (a relative path, subfolders allowed) must be a file in ``folder`` or
    below it once symlinks and ``..`` are resolved.  ``module`` (dotted names allowed) is
    the file ``module.py`` (``a/b.py`` for ``a.b``) under ``folder`` when that exists,
    else an installed module.  Raises a one-line ``UserError``."""
    target, _, attr = spec.partition(":")
    if not attr.isidentifier():
        raise UserError(f"{spec!r}: {attr!r} is not a Python attribute name")
    if target.endswith(".py"):
        return PolicyRef(spec, attr, path=_file_under(target, folder, spec))
    parts = target.split(".")
    if not all(part.isidentifier() for part in parts):
        raise UserError(f"{spec!r}: {target!r} is neither a .py file nor a module name")
    rel = os.path.join(*parts) + ".py"
    if folder is not None and os.path.lexists(os.path.join(folder, rel)):
        return PolicyRef(spec, attr, path=_file_under(rel, folder, spec))
    return PolicyRef(spec, attr, module=target)


def _file_under(rel: str, folder: str | None, spec: str) -> str:
    """The real path of ``rel`` if it is a file in ``folder`` or below it."""
    if folder is None:
        raise UserError(f"{spec!r}: a policy file needs the scenario's folder "
                        "(load the scenario from a YAML file)")
    if os.path.isabs(rel) or rel.startswith("~"):
        raise UserError(f"{spec!r}: absolute paths are not allowed; name a .py file "
                        f"relative to the scenario's folder {folder}")
    root = os.path.realpath(folder)
    path = os.path.realpath(os.path.join(root, rel))
    if os.path.commonpath([root, path]) != root:
        raise UserError(f"{spec!r}: {rel} resolves outside the scenario's folder {folder}; "
                        "a policy file must be in that folder or below it")
    if not os.path.isfile(path):
        raise UserError(f"{spec!r}: no file {rel} in the scenario's folder {folder}")
    return path


def policy_file(spec: str, folder: str | None) -> str | None:
    """The policy's file under the scenario's folder (None for a module policy or a
    bad spec): what a cache key should hash."""
    try:
        return resolve_policy(spec, folder).path
    except UserError:
        return None
