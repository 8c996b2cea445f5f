"""User-facing errors.

``UserError`` is raised for every mistake a user can make in a scenario or a trace.  Its
message is one line that names the file, the line or key, and what is wrong; the CLI
prints it without a traceback and exits with status 2.
"""
from __future__ import annotations


class UserError(Exception):
    """A one-line, user-facing error (bad scenario, bad trace, unschedulable request...)."""
