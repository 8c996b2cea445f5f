"""The planner's traffic window (reference §9, ``snapshot["traffic"]``).

Accumulated between two planner ticks and drained by each:

* ``num_req``: requests released into the cluster in the window;
* ``shape_count``, ``avg_isl``, ``avg_osl``: requests *completed* in the window (rejected
  ones are left out), their prompt and requested output lengths;
* ``ttft_count``/``avg_ttft_ms`` and ``itl_count``/``avg_itl_ms``: the same completed
  requests' TTFT and per-request mean inter-token latency (those with ≥ 2 tokens);
* ``accept_length_forward_count``: decode forwards (a request decoding in a pass) in the
  passes that ended in the window, and ``avg_accept_length`` = output tokens of those
  forwards / forwards (1.0 without speculative decoding; 0.0 with no forwards);
* ``hit_rate_count``/``avg_kv_hit_rate``: KV-router admissions in the window and their
  mean overlap / prompt blocks (only a KV router knows the overlap);
* ``duration_s``: the window length.
"""
from __future__ import annotations


class TrafficWindow:
    __slots__ = ("num_req", "shape", "isl", "osl", "ttft_n", "ttft", "itl_n", "itl",
                 "hits_n", "hits", "hit_blocks", "_forward_marks", "since_ms")

    def __init__(self):
        self.since_ms = 0.0
        self._forward_marks: dict[int, int] = {}    # id(worker) -> decode forwards already counted
        self._reset()

    def _reset(self) -> None:
        self.num_req = 0
        self.shape = self.isl = self.osl = 0
        self.ttft_n, self.ttft = 0, 0.0
        self.itl_n, self.itl = 0, 0.0
        self.hits_n, self.hits, self.hit_blocks = 0, 0, 0

    # -- feeds ----------------------------------------------------------------------------
    def on_arrival(self, req) -> None:
        self.num_req += 1

    def on_done(self, req) -> None:
        if req.status != "completed":
            return
        self.shape += 1
        self.isl += req.prompt_len
        self.osl += req.requested_output
        first = req.first_token_ms
        if first == first:
            self.ttft_n += 1
            self.ttft += first - req.arrival_ms
        if req.generated >= 2:
            self.itl_n += 1
            self.itl += (req.last_token_ms - first) / (req.generated - 1)

    def on_admission(self, overlap_blocks: int, isl_blocks: int) -> None:
        self.hits_n += 1
        self.hits += overlap_blocks
        self.hit_blocks += isl_blocks

    # -- drain ----------------------------------------------------------------------------
    def drain(self, now_ms: float, decode_workers) -> dict:
        """The window since the last drain (decode forwards read from the pass logs of
        ``decode_workers``), then start a new one."""
        forwards = 0
        for w in decode_workers:
            n = w.decode_forwards
            forwards += n - self._forward_marks.get(id(w), 0)
            self._forward_marks[id(w)] = n
        out = {
            "duration_s": (now_ms - self.since_ms) / 1000.0,
            "num_req": self.num_req,
            "avg_isl": self.isl / self.shape if self.shape else 0.0,
            "avg_osl": self.osl / self.shape if self.shape else 0.0,
            "avg_ttft_ms": self.ttft / self.ttft_n if self.ttft_n else 0.0,
            "avg_itl_ms": self.itl / self.itl_n if self.itl_n else 0.0,
            "shape_count": self.shape,
            "ttft_count": self.ttft_n,
            "itl_count": self.itl_n,
            "avg_accept_length": 1.0 if forwards else None,
            "avg_kv_hit_rate": self.hits / self.hit_blocks if self.hit_blocks else 0.0,
            "hit_rate_count": self.hits_n,
            "accept_length_forward_count": forwards,
        }
        self.since_ms = now_ms
        self._reset()
        return out
