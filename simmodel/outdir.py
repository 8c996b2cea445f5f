"""Output folders: checked before any work, written whole, swapped in with renames.

A result folder is written into a temporary sibling ``.NAME.tmp-PID-HEX`` and then put
in place: a new folder with one ``rename``; an existing result folder by renaming it
aside (``.NAME.old-PID-HEX``), renaming the new one in and removing the old.  A reader
sees the old result or the new one, never a mix; an interrupt (Ctrl-C, SIGTERM) removes
this process's temporary folders; a killed process's leftovers (its PID no longer
running) are removed by the next write to the same folder.

An existing folder is only replaced when it holds nothing but result files
(``RESULT_FILES``): a folder with other files is refused, so a swap can never delete a
user's files.
"""
from __future__ import annotations

import os
import re
import secrets
import shutil
from typing import Iterable

from simmodel.errors import UserError


def check_out_dir(out: str, ours: Iterable[str] = (), flag: str = "--out") -> None:
    """Fail before any work if ``out`` could not receive a result folder: it exists and
    is not a folder, it holds files other than ``ours``, its nearest existing ancestor
    is not a writable folder, or a folder cannot be created there (``/proc``, a
    read-only file system).  Creates nothing (the probe folder is removed)."""
    out = os.path.abspath(out)
    if os.path.exists(out):
        if not os.path.isdir(out):
            raise UserError(f"{flag}: {out} exists and is not a directory")
        foreign = sorted(n for n in os.listdir(out)
                         if n not in set(ours) and not _is_temp(n))
        if ours and foreign:
            shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
            raise UserError(f"{flag}: {out} holds files simmodel did not write ({shown}); "
                            "give a new folder or an earlier result folder")
    ancestor = os.path.dirname(out)
    while ancestor and not os.path.exists(ancestor):
        ancestor = os.path.dirname(ancestor)
    if not os.path.isdir(ancestor):
        raise UserError(f"{flag}: cannot create {out}: {ancestor} is a file, not a directory")
    try:
        probe = temp_sibling(os.path.join(ancestor, "probe"))
        os.rmdir(probe)
    except OSError as e:
        raise UserError(f"{flag}: cannot write in {ancestor}: {e.strerror or e}") from None


_TEMP = re.compile(r"^\..*\.(tmp|old)-(\d+)-[0-9a-f]{8}$")


def _is_temp(name: str) -> bool:
    return bool(_TEMP.match(name))


def temp_sibling(path: str, kind: str = "tmp") -> str:
    """Create and return an empty folder ``.NAME.KIND-PID-HEX`` beside ``path``
    (``os.mkdir``, so the umask applies as to any folder)."""
    parent, base = os.path.split(path)
    while True:
        tmp = os.path.join(parent, f".{base}.{kind}-{os.getpid()}-{secrets.token_hex(4)}")
        try:
            os.mkdir(tmp)
            return tmp
        except FileExistsError:
            continue


def remove_stale(path: str) -> None:
    """Remove temporary siblings of ``path`` left by processes that no longer run."""
    parent, base = os.path.split(os.path.abspath(path))
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        m = _TEMP.match(name)
        if m and name.startswith(f".{base}.") and not _alive(int(m.group(2))):
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True              # exists, not ours to signal
    return True


def swap_in(tmp: str, out: str) -> None:
    """Put the complete folder ``tmp`` at ``out`` (replacing an earlier result there)."""
    if not os.path.isdir(out):
        os.rename(tmp, out)
        return
    old = temp_sibling(out, "old")
    os.rmdir(old)                # a free name to rename the earlier result to
    os.rename(out, old)
    try:
        os.rename(tmp, out)
    except BaseException:
        os.rename(old, out)      # put the earlier result back
        raise
    shutil.rmtree(old, ignore_errors=True)


def make_parents(path: str) -> list[str]:
    """``mkdir -p path``; return the directories created, outermost first (removed again
    if creating one fails)."""
    missing = []
    while path and not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    created: list[str] = []
    try:
        for p in reversed(missing):
            os.mkdir(p)
            created.append(p)
    except BaseException:
        remove_created(created)
        raise
    return created


def remove_created(created: list[str]) -> None:
    for p in reversed(created):
        try:
            os.rmdir(p)
        except OSError:
            pass
