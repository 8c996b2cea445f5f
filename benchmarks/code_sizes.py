"""The size rules (docs/architecture.md): modules over 400 lines and functions over 60.

    python benchmarks/code_sizes.py [REV]

Reads ``simmodel/`` at git revision ``REV`` (default ``HEAD``) and prints the modules over
400 lines and the functions over 60 (a function counted from its ``def`` to its last
line, docstring included).  Not part of the test suite.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout


def main(argv=None) -> int:
    rev = (argv if argv is not None else sys.argv[1:]) or ["HEAD"]
    rev = rev[0]
    modules, functions = [], []
    for path in git("ls-tree", "-r", "--name-only", rev, "simmodel").split():
        if not path.endswith(".py"):
            continue
        src = git("show", f"{rev}:{path}")
        if len(src.splitlines()) > 400:
            modules.append((len(src.splitlines()), path))
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > 60:
                    functions.append((n, f"{path}:{node.name}"))
    print(f"{rev}: {len(modules)} module(s) over 400 lines, {len(functions)} function(s) "
          "over 60")
    for n, what in sorted(modules, reverse=True) + sorted(functions, reverse=True):
        print(f"  {n:5d}  {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
