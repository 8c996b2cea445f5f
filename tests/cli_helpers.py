"""Shared by the CLI tests: the one-line error contract."""
from __future__ import annotations


def one_error_line(capsys) -> str:
    """The message of the single ``simmodel: error: ...`` line on stderr (nothing on
    stdout, nothing else on stderr)."""
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("simmodel: error: ")
    return lines[0][len("simmodel: error: "):]
