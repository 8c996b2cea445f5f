"""What the trace readers share: the row error, field validators, JSONL rows, arguments.

A mistake in a trace file is one line, ``UserError("<file>:<line>: <what>")`` (Weka:
``"<file>: <JSON path>: <what>"``).  The validators here raise ``RowError`` with the
``<what>``; the reader that catches it adds where it is (``each_json_row`` does that for
JSONL files).

A validator's message starts with ``key``, the name of the value, then ``sep``, then the
problem: ``number("timestamp", "x")`` says ``timestamp must be a number, got 'x'``; with
``sep=PATH_SEP`` a JSON path is named the Weka way, ``requests[4].t: must be a number,
got 'x'``.  A JSON ``null`` counts as an absent field everywhere.

Cost: the checks of a whole list (``int_list``) run at C speed in the common case (every
item fine); only a bad list is walked in Python to name the item.  ``each_json_row``
decodes a line with one call to the C JSON scanner.
"""
from __future__ import annotations

import json
import math
from typing import Any, Callable, Optional

from simmodel.errors import UserError

PATH_SEP = ": "         # between a JSON path and the problem (Weka messages)
_INT_ONLY = {int}       # set(map(type, ...)) <= {int}: no bools, floats or strings


class RowError(Exception):
    """A problem with the current row (or entry); the reader adds where it is."""


# --- field validators ----------------------------------------------------------------


def is_int(value: Any) -> bool:
    """True for a JSON integer: an ``int`` but not a ``bool`` (nor a float such as 3.0)."""
    return type(value) is int


def required(row: dict, key: str, where: str = "") -> Any:
    """The value of ``row[key]``; ``RowError`` ``missing required field <key>`` (after
    ``<where>: `` when ``where`` is given) when it is absent or null."""
    value = row.get(key)
    if value is None:
        raise RowError(f"{where}{PATH_SEP}missing required field {key}" if where
                       else f"missing required field {key}")
    return value


def aliased(row: dict, name: str, alias: str) -> tuple[str, Any]:
    """``(key used, value)`` of a field that may be spelled two ways (``null`` = absent);
    giving both spellings is a ``RowError``.  (Callers on a hot path skip the call when
    ``alias not in row``: the answer is then ``(name, row.get(name))``.)"""
    value = row.get(name)
    alias_value = row.get(alias)
    if value is not None and alias_value is not None:
        raise RowError(f"both {name} and its alias {alias} are given; keep one")
    if value is None and alias_value is not None:
        return alias, alias_value
    return name, value


def number(key: str, value: Any, *, sep: str = " ") -> float:
    """``value`` if it is a finite JSON number >= 0 (int or float, returned as given)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RowError(f"{key}{sep}must be a number, got {value!r}")
    if value < 0:
        raise RowError(f"{key}{sep}must be >= 0, got {value!r}")
    return value


def optional_number(row: dict, name: str, alias: str) -> tuple[str, Optional[float]]:
    """``(key used, value or None)`` of an optional ``number`` spelled ``name`` or
    ``alias``."""
    key, value = aliased(row, name, alias) if alias in row else (name, row.get(name))
    if value is not None:
        value = number(key, value)
    return key, value


def integer(key: str, value: Any, minimum: int = 1, *, sep: str = " ") -> int:
    """``value`` if it is a JSON integer >= ``minimum``."""
    if not is_int(value):
        raise RowError(f"{key}{sep}must be an integer, got {value!r}")
    if value < minimum:
        raise RowError(f"{key}{sep}must be >= {minimum}, got {value}")
    return value


def non_empty_string(key: str, value: Any, *, sep: str = " ",
                     blank_is_empty: bool = False) -> str:
    """``value`` if it is a non-empty string (with ``blank_is_empty``, one that is not
    only white space either)."""
    if not isinstance(value, str) or not (value.strip() if blank_is_empty else value):
        raise RowError(f"{key}{sep}must be a non-empty string, got {value!r}")
    return value


def int_list(key: str, value: Any, *, sep: str = " ", item_problem: Optional[str] = None) -> list:
    """``value`` if it is a list of JSON integers >= 0.

    A bad item is named ``key[i]``; the message says what is wrong with it (``must be an
    integer`` or ``must be >= 0``), or ``item_problem`` when given (one text for both).
    """
    if (isinstance(value, list) and set(map(type, value)) <= _INT_ONLY
            and (not value or min(value) >= 0)):
        return value                    # the common case, checked at C speed
    if not isinstance(value, list):
        raise RowError(f"{key}{sep}must be a list of integers, got {type(value).__name__}")
    for i, item in enumerate(value):
        bad = not is_int(item)
        if bad or item < 0:
            problem = item_problem or ("must be an integer" if bad else "must be >= 0")
            raise RowError(f"{key}[{i}]{sep}{problem}, got {item!r}")
    return value


def excerpt(text: str, limit: int = 24) -> str:
    """A short, safe quote of a cell for a message: printable ASCII only (others as
    ``?``), at most ``limit`` characters, so an error never echoes a file's contents."""
    clean = "".join(c if " " <= c <= "~" else "?" for c in text.strip())
    return repr(clean if len(clean) <= limit else clean[: limit - 3] + "...")


# --- request fields shared by the Mooncake-like formats ----------------------------------


def hash_ids(row: dict) -> list:
    """The required, non-empty ``hash_ids`` list of ints >= 0."""
    value = row.get("hash_ids")
    if value is None:
        raise RowError("missing required field hash_ids")
    int_list("hash_ids", value)
    if not value:
        raise RowError("hash_ids must not be empty")
    return value


def input_length(row: dict) -> tuple[str, Optional[int]]:
    """``(key used, input_length or None)``: ``input_length`` (alias ``input_tokens``),
    an integer >= 1 when given."""
    key, value = (aliased(row, "input_length", "input_tokens") if "input_tokens" in row
                  else ("input_length", row.get("input_length")))
    if value is not None and (type(value) is not int or value < 1):
        integer(key, value)             # raises, naming the problem
    return key, value


def within_capacity(key: str, value: Optional[int], hash_ids: list, block_size: int) -> int:
    """An input length no longer than its hash ids cover (``len(hash_ids) * block_size``
    tokens); that capacity when ``value`` is None."""
    capacity = len(hash_ids) * block_size
    if value is None:
        return capacity
    if value > capacity:
        raise RowError(f"{key} {value} exceeds the {capacity} tokens of its "
                       f"{len(hash_ids)} hash_ids x trace_block_size {block_size}")
    return value


def output_fields(row: dict) -> tuple[str, int, Optional[tuple]]:
    """``(key used, output_length, output_token_ids or None)`` of a request row:
    ``output_length`` (alias ``output_tokens``) required, >= 1; ``output_token_ids``
    optional, exactly that many ints >= 0."""
    key, output_length = (aliased(row, "output_length", "output_tokens") if "output_tokens" in row
                          else ("output_length", row.get("output_length")))
    if output_length is None:
        raise RowError("missing required field output_length")
    if type(output_length) is not int or output_length < 1:
        integer(key, output_length)     # raises, naming the problem
    output_token_ids = row.get("output_token_ids")
    if output_token_ids is not None:
        int_list("output_token_ids", output_token_ids)
        if len(output_token_ids) != output_length:
            raise RowError(f"output_token_ids has {len(output_token_ids)} ids but {key} "
                           f"is {output_length}")
        output_token_ids = tuple(output_token_ids)
    return key, output_length, output_token_ids


def canonical_ids(ids: list) -> dict:
    """Hash id -> 0, 1, 2, ... in order of first appearance in ``ids`` (one C-level sweep:
    ``dict.fromkeys`` keeps first appearances in order)."""
    return dict(zip(dict.fromkeys(ids), range(len(ids))))


# --- files and arguments -------------------------------------------------------------


def open_trace(path: str, what: Optional[str] = None, **open_args):
    """Open a trace file (binary unless ``open_args`` say otherwise); a missing or
    unreadable file is a one-line ``UserError`` naming it (a folder, when ``what`` names
    the file expected: "is a folder, expected <what>")."""
    try:
        return open(path, **(open_args or {"mode": "rb"}))
    except FileNotFoundError:
        raise UserError(f"{path}: file not found") from None
    except IsADirectoryError:
        if what is None:
            raise UserError(f"{path}: cannot read file (Is a directory)") from None
        raise UserError(f"{path}: is a folder, expected {what}") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read file ({e.strerror or e})") from None


def each_json_row(path: str, handle: Callable[[int, dict], None]) -> None:
    """Call ``handle(line, row)`` for every non-blank line of the JSONL file ``path``, in
    order (``line`` 1-based, blank lines counted), ``row`` its JSON object.  A bad line
    (not UTF-8, malformed JSON, not an object) and a ``RowError`` from ``handle`` become
    ``UserError("<path>:<line>: <what>")``."""
    loads, decode = json.loads, json.JSONDecoder().decode    # decode: loads of a str
    f = open_trace(path)
    with f:
        lineno = 0
        try:
            for lineno, raw in enumerate(f, 1):
                raw = raw.rstrip()      # so JSON error columns are on this line
                if not raw:
                    continue
                try:
                    # json.loads(bytes) first guesses the encoding (json.detect_encoding):
                    # a line starting with "{" and then not a NUL byte is UTF-8 to it, so
                    # decode such a line the way it would, without the guess.
                    if raw[0] == 0x7B and raw[1:2] != b"\x00":
                        row = decode(raw.decode("utf-8", "surrogatepass"))
                    else:
                        row = loads(raw)
                except UnicodeDecodeError:
                    raise RowError("not valid UTF-8") from None
                except json.JSONDecodeError as e:
                    raise RowError(f"malformed JSON ({e.msg} at column {e.colno})") from None
                if type(row) is not dict:
                    raise RowError(f"expected a JSON object, got {type(row).__name__}")
                handle(lineno, row)
        except RowError as e:
            raise UserError(f"{path}:{lineno}: {e}") from None
        except OSError as e:
            raise UserError(f"{path}: cannot read file ({e.strerror or e})") from None


def speedup_ratio(value: Any) -> float:
    """Validate an ``arrival_speedup_ratio`` argument (every trace reader takes one)."""
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value) or value <= 0):
        raise ValueError(f"arrival_speedup_ratio must be a positive number, got {value!r}")
    return float(value)


def positive_int_arg(name: str, value: Any) -> int:
    """Validate a block-size argument: ``ValueError`` unless a positive ``int``."""
    if not is_int(value) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value
