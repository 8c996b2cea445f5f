"""Token emission bookkeeping shared by the schedulers: counters, timestamps and the
ITL records of ``EngineRequest`` (``segs`` ranges of back-to-back passes, ``bridges``
for longer gaps), without a per-token list.  Pure."""
from __future__ import annotations

from simmodel.engine.request import EngineRequest


def emit(r: EngineRequest, b: int, end_ms: float, pass_idx: int, first_tokens: list) -> bool:
    """``r`` emits ``b`` tokens at the end of pass ``pass_idx`` (``b`` > 1: a speculative
    burst, whose extra tokens come with the first, gaps of 0): counters, timestamps and
    ITL bookkeeping; a first token puts ``r`` in ``first_tokens``.  True if the request
    has reached its output length."""
    g0 = r.generated
    g = g0 + b
    r.generated = g
    r.seq_len += b
    if b > 1:
        r.zero_gaps += b - 1
    if g0 == 0:
        r.first_token_ms = end_ms
        first_tokens.append(r)
        if g >= 2:
            r.second_token_ms = end_ms
    else:
        if g0 == 1:
            r.second_token_ms = end_ms
        segs = r.segs
        if r.last_pass == pass_idx - 1 and segs and segs[-1] == pass_idx - 1:
            segs[-1] = pass_idx                # (the common case of _record_gaps)
        else:
            _record_gaps(r, pass_idx, pass_idx, end_ms)
    r.last_token_ms = end_ms
    r.last_pass = pass_idx
    return g >= r.max_output


def emit_run(running, m: int, pass_idx0: int, last_idx: int, first_end: float,
             last_end: float) -> list[EngineRequest]:
    """Every decoder of ``running`` emits its tokens from passes ``pass_idx0..last_idx``
    of a coalesced run (one per pass, the first ending at ``first_end``): counters,
    timestamps and ITL bookkeeping.  Returns those that reached their output length, in
    ``running`` order."""
    finished = []
    before = pass_idx0 - 1
    for r in running:
        g0 = r.generated
        g = g0 + m
        r.generated = g
        r.seq_len += m
        if g0 == 1:
            r.second_token_ms = first_end
        segs = r.segs
        if r.last_pass == before and segs and segs[-1] == before:
            segs[-1] = last_idx                # (the common case of _record_gaps)
        else:
            _record_gaps(r, pass_idx0, last_idx, first_end)
        r.last_token_ms = last_end
        r.last_pass = last_idx
        if g >= r.max_output:
            finished.append(r)
    return finished


def _record_gaps(r: EngineRequest, first: int, last: int, first_end: float) -> None:
    """ITL bookkeeping for tokens emitted in passes ``first..last`` of r's worker (the
    first ending at ``first_end``): a token right after the pass of the previous one
    extends r's current range of such passes; otherwise its gap is kept on its own and a
    new range starts with the next pass."""
    segs = r.segs
    if r.last_pass == first - 1:
        if segs and segs[-1] == first - 1:
            segs[-1] = last
        else:
            segs.append(first)
            segs.append(last)
    else:
        r.bridges.append(first_end - r.last_token_ms)
        if last > first:
            segs.append(first + 1)
            segs.append(last)
