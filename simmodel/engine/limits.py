"""Requests an engine can never run, decided from sizes alone before a run.  Pure.

``simmodel.sim.check_schedulable`` refuses a workload with such a request (file and line,
exit 2); the rules and the reasons for each are in docs/model.md ("Requests that can never
run").  At run time the schedulers reject a queue head that cannot be admitted on an
otherwise empty engine (``_reject_head``), which covers what sizes alone cannot tell.
"""
from __future__ import annotations

from simmodel.config import MAX_REQUEST_TOKENS


def never_runs(plen: int, olen: int, eng, decode, delta: bool) -> str | None:
    """Why a request of ``plen`` prompt and ``olen`` output tokens can never complete on
    engine ``eng`` (aggregated or prefill) and ``decode`` (the same, or the decode pool's),
    as a phrase for an error message; None if it may run (or is rejected at run time).
    ``delta``: the prompt is built at release, so ``plen`` is not its final length."""
    for n, what in ((plen, "prompt"), (olen, "output")):
        if n > MAX_REQUEST_TOKENS:
            return (f"has {n:,} {what} tokens, more than the limit of "
                    f"{MAX_REQUEST_TOKENS:,} tokens per request")
    mml = eng.max_model_len
    if mml is not None and plen >= mml:
        return None                                  # rejected at run time
    bs, blocks = eng.effective_block_size, eng.num_gpu_blocks
    if -(-plen // bs) > blocks:
        if eng.backend != "sglang":
            return None                              # rejected at run time
        return (f"has {plen} prompt tokens, more than the {bs * blocks} KV slots of a "
                "worker (num_gpu_blocks x block_size); it can never be scheduled")
    if (eng.backend != "sglang" and not eng.enable_chunked_prefill
            and plen > eng.max_num_batched_tokens):
        return (f"has {plen} prompt tokens, more than max_num_batched_tokens="
                f"{eng.max_num_batched_tokens} with enable_chunked_prefill: false; "
                "it can never be scheduled")
    if decode.backend != "vllm" or delta:
        return None
    bs, blocks, mml = decode.effective_block_size, decode.num_gpu_blocks, decode.max_model_len
    if (mml is not None and plen >= mml) or -(-plen // bs) > blocks:
        return None                                  # rejected at run time
    out = olen if mml is None else min(olen, mml - plen)
    need = -(-(plen + out - 1) // bs)
    if need > blocks:
        return (f"needs {need} KV blocks for its {plen} prompt + {out} output tokens, "
                f"more than the {blocks} of a {'decode ' if decode is not eng else ''}worker "
                "(num_gpu_blocks); it can never complete")
    return None
