"""Token sequences and their chained block hashes, without materialising tokens.

A request's sequence is its prompt (runs of repeated token ids, see
``simmodel.workload.model.Prompt``, or explicit runs, ``simmodel.engine.prompts.RunPrompt``)
followed by the tokens it generates.  The KV cache identifies a full block of
``block_size`` tokens by a *sequence hash*: a hash of the parent block's sequence hash and
the block's own content, so equal prefixes give equal chains (reference §4).  Block
content is described by segments instead of token lists:

* ``(token_id, count)`` for a stretch of one repeated prompt token;
* ``(OUT, uid, first, count)`` for generated tokens ``first..first+count-1`` of request
  ``uid`` when their ids are not modelled (they are unique to the request);
* a tuple of explicit token ids when they are (delta prompts).

Only equality matters, so Python's tuple hash (deterministic for ints) is the hash.
"""
from __future__ import annotations

from typing import Optional, Sequence

from bisect import bisect_right

from simmodel.engine.prompts import RunPrompt

ROOT = 1337     # parent "hash" of a sequence's first block
OUT = -1        # marker of a generated-token segment


class TokenSequence:
    """The hash chain of one request's prompt + generated tokens at one block size.

    ``hashes[i]`` is the sequence hash of full block i; it is extended lazily by
    ``ensure(n_blocks)`` as the sequence grows (prompt blocks on first use, output blocks
    when decoding fills them).
    """

    __slots__ = ("prompt", "bs", "uid", "output_ids", "hashes", "_run_starts")

    def __init__(self, prompt, block_size: int, uid: int,
                 output_ids: Optional[Sequence[int]] = None):
        self.prompt = prompt              # Prompt (compact runs) or RunPrompt (explicit runs)
        self.bs = block_size
        self.uid = uid
        self.output_ids = output_ids
        self.hashes: list[int] = []
        self._run_starts = None
        if isinstance(prompt, RunPrompt):
            starts, pos = [], 0
            for _, count in prompt.runs:
                starts.append(pos)
                pos += count
            self._run_starts = starts
        # hashes are computed on demand (``ensure``): with 1-token blocks (SGLang) hashing
        # every prompt up front would dominate the run time

    def ensure(self, n_blocks: int) -> list[int]:
        """Make ``hashes`` hold at least ``n_blocks`` entries (all must be full blocks of
        the sequence as it stands, i.e. n_blocks * bs <= prompt + generated)."""
        hashes = self.hashes
        if len(hashes) >= n_blocks:
            return hashes
        bs = self.bs
        plen = self.prompt.length
        parent = hashes[-1] if hashes else ROOT
        b0 = len(hashes)
        if self._run_starts is None:
            ids, run = self.prompt.ids, self.prompt.run_len
            if run % bs == 0 and n_blocks * bs <= plen:
                # Fast path: every engine block lies inside one prompt run.
                per = run // bs
                append = hashes.append
                b = b0
                while b < n_blocks:            # one content tuple per prompt run
                    content = (ids[b // per], bs)
                    run_end = min(n_blocks, (b // per + 1) * per)
                    for _ in range(run_end - b):
                        parent = hash((parent, content))
                        append(parent)
                    b = run_end
                return hashes
        if b0 * bs >= plen and self.output_ids is None:
            # Fast path: generated blocks only, whose ids are not modelled (``_content``)
            uid, append = self.uid, hashes.append
            for b in range(b0, n_blocks):
                parent = hash((parent, (OUT, uid, b * bs - plen, bs)))
                append(parent)
            return hashes
        for b in range(b0, n_blocks):
            parent = hash((parent, self._content(b * bs, b * bs + bs)))
            hashes.append(parent)
        return hashes

    def _content(self, start: int, end: int):
        """Canonical content of tokens [start, end): run-length pairs with equal
        neighbours merged (equal tokens give equal content however they were produced);
        a lone run is the pair itself, as in the fast path."""
        parts: list = []
        plen = self.prompt.length
        if start < plen:
            self._prompt_runs(parts, start, min(end, plen))
        if end > plen:
            first = max(start, plen) - plen
            count = end - max(start, plen)
            if self.output_ids is None:
                parts.append((OUT, self.uid, first, count))
            else:
                for tok in self.output_ids[first:first + count]:
                    _append_run(parts, tok, 1)
        return parts[0] if len(parts) == 1 else tuple(parts)

    def _prompt_runs(self, parts: list, start: int, end: int) -> None:
        if self._run_starts is None:
            ids, run = self.prompt.ids, self.prompt.run_len
            for i in range(start // run, (end - 1) // run + 1):
                _append_run(parts, ids[i], min(end, (i + 1) * run) - max(start, i * run))
            return
        runs, starts = self.prompt.runs, self._run_starts
        i = bisect_right(starts, start) - 1
        while i < len(runs) and starts[i] < end:
            tok, count = runs[i]
            lo = max(start, starts[i])
            hi = min(end, starts[i] + count)
            if hi > lo:
                _append_run(parts, tok, hi - lo)
            i += 1


def _append_run(parts: list, token: int, count: int) -> None:
    if parts and len(parts[-1]) == 2 and parts[-1][0] == token:
        parts[-1] = (token, parts[-1][1] + count)
    else:
        parts.append((token, count))
