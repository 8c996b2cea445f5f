"""One seed in, named random streams out.

Each stream is a ``numpy.random.Generator`` seeded from ``SeedSequence(seed,
spawn_key=(crc32(name),))``: a stream depends only on the scenario seed and its own
name, so adding a stream never shifts the numbers another stream draws.
"""
from __future__ import annotations

import zlib

import numpy as np

#: The streams the simulator uses, and what for.
STREAM_NAMES = (
    "arrivals",        # synthetic Poisson inter-arrival gaps
    "prefix_groups",   # synthetic shared-prefix group choice
    "output_tokens",   # generated output token ids (delta prompts)
    "router_ties",     # KV-router tie breaking (aggregated, or the prefill pool)
    "decode_router_ties",  # KV-router tie breaking of a disaggregated decode pool
    "faults",          # which workers a fault picks, random failure and repair times
)


class Streams:
    """Named, independent random generators derived from one seed."""

    def __init__(self, seed: int):
        self.seed = int(seed)
        self._cache: dict[str, np.random.Generator] = {}

    def get(self, name: str) -> np.random.Generator:
        gen = self._cache.get(name)
        if gen is None:
            ss = np.random.SeedSequence(self.seed, spawn_key=(zlib.crc32(name.encode()),))
            gen = self._cache[name] = np.random.Generator(np.random.PCG64(ss))
        return gen

    def __getitem__(self, name: str) -> np.random.Generator:
        return self.get(name)
