"""Pure engine code (no SimPy): cost models, KV cache, schedulers, request state."""
