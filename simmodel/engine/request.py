"""A request as the engine sees it: sequence state, KV lease and its own timeline."""
from __future__ import annotations

import math

from simmodel.engine.tokens import TokenSequence

WAITING, RUNNING, DONE = 0, 1, 2
NAN = math.nan


class EngineRequest:
    """One request inside a worker.  Timestamps are NaN until set.

    ``computed`` counts tokens whose KV is computed; ``generated`` counts emitted tokens;
    the sequence length is ``prompt_len + generated``.  ``cached`` lists the sequence
    hashes of the full blocks it holds (prefix order) and ``n_private`` its other blocks.

    ITL bookkeeping without per-token records: the request's inter-token gaps are either
    the duration of a pass that directly follows the pass of its previous token (runs of
    such passes are kept as ``[first, last]`` per-worker pass-index pairs in ``segs``), or
    a longer gap (after a preemption or a skipped pass) kept in ``bridges``.
    """

    __slots__ = (
        "uid", "session_id", "turn_index", "prompt_len", "requested_output", "max_output",
        "seq", "generated", "seq_len", "computed", "transferred", "cached", "n_private", "state", "pass_take",
        "arrival_ms", "first_admit_ms", "first_token_ms", "second_token_ms",
        "last_token_ms", "terminal_ms", "reused", "first_reused", "admissions",
        "worker_idx", "dp_rank", "status", "last_pass", "segs", "bridges", "burst", "zero_gaps", "on_done", "meta", "handoff",
        "attempts", "retried_ms",
    )

    def __init__(self, uid: int, seq: TokenSequence, output_length: int, *,
                 arrival_ms: float, session_id: str = "", turn_index: int = 0,
                 max_model_len: int | None = None):
        self.uid = uid
        self.session_id = session_id
        self.turn_index = turn_index
        self.seq = seq
        self.prompt_len = seq.prompt.length
        self.requested_output = output_length
        cap = output_length
        if max_model_len is not None and self.prompt_len < max_model_len:
            # Generation stops once prompt + output reaches max_model_len.
            cap = min(cap, max_model_len - self.prompt_len)
        self.max_output = cap
        self.generated = 0
        self.seq_len = self.prompt_len   # prompt + generated, kept in step with generated
        self.computed = 0
        self.transferred = False       # decode side of a handoff: prompt KV arrived
        self.cached: list[int] = []
        self.n_private = 0
        self.state = WAITING
        self.pass_take = 0
        self.arrival_ms = arrival_ms
        self.first_admit_ms = NAN
        self.first_token_ms = NAN
        self.second_token_ms = NAN
        self.last_token_ms = NAN
        self.terminal_ms = NAN
        self.reused = 0
        self.first_reused = 0
        self.admissions = 0
        self.worker_idx = -1
        self.dp_rank = 0               # attention DP: the rank of its worker
        self.status = "incomplete"
        self.last_pass = -2
        self.segs: list[int] = []
        self.bridges: list[float] = []
        self.burst = 1                 # speculative decoding: tokens emitted by this pass
        self.zero_gaps = 0             # ... and the extra ones, stamped with the first
        self.on_done = None
        self.meta = None
        self.handoff = None            # disaggregated lifecycle record (cluster.disagg)
        self.attempts = 1              # sent this many times (faults: retries)
        self.retried_ms = 0.0          # arrival to the release of its last attempt

    def restart(self, now_ms: float) -> None:
        """A new attempt from scratch at ``now_ms`` (a retry after its worker failed, or a
        client retry after a timeout): nothing computed or emitted, no worker; the arrival
        stays the first attempt's, so latencies include the failed attempts."""
        self.attempts += 1
        self.retried_ms = now_ms - self.arrival_ms
        self.generated = 0
        self.seq_len = self.prompt_len
        self.computed = 0
        self.transferred = False
        self.cached = []
        self.n_private = 0
        self.state = WAITING
        self.pass_take = 0
        for name in ("first_admit_ms", "first_token_ms", "second_token_ms", "last_token_ms",
                     "terminal_ms"):
            setattr(self, name, NAN)
        self.reused = self.first_reused = self.admissions = 0
        self.worker_idx = -1
        self.dp_rank = 0
        self.status = "incomplete"
        self.last_pass = -2
        self.segs = []
        self.bridges = []
        self.burst = 1
        self.zero_gaps = 0
        self.handoff = None

    @property
    def n_blocks(self) -> int:
        return len(self.cached) + self.n_private
