"""The pass log (``simmodel.metrics.passlog``): counts in 32 bits, widened to 64 bits for
good when one does not fit, values kept."""
from __future__ import annotations

import numpy as np

from simmodel.metrics.passlog import PassLog


def test_counts_are_kept_in_32_bits():
    log = PassLog()
    log.add(0.0, 1.5, 100, 1, 3, 3 * 700, 42)
    log.add_run(np.array([1.5, 2.5]), np.array([2.5, 3.5]), 3, np.array([2103, 2106]),
                np.array([42, 43]))
    cols = log.arrays()
    assert cols["decode_tokens"].dtype == np.int32
    assert cols["decode_tokens"].tolist() == [2100, 2103, 2106]
    assert cols["num_decode"].tolist() == [3, 3, 3]
    assert cols["prefill_tokens"].tolist() == [100, 0, 0]
    assert cols["end_ms"].tolist() == [1.5, 2.5, 3.5]


def test_a_count_past_32_bits_widens_the_log():
    log = PassLog()
    log.add(0.0, 1.0, 5, 1, 0, 0, 7)
    log.add(1.0, 2.0, 0, 0, 1, 2**31, 3_000_000_000)           # a single pass
    log.add_run(np.array([2.0]), np.array([3.0]), 1, np.array([2**31 + 1]), np.array([9]))
    cols = log.arrays()
    assert cols["kv_blocks_active"].dtype == np.int64
    assert cols["kv_blocks_active"].tolist() == [7, 3_000_000_000, 9]
    assert cols["decode_tokens"].tolist() == [0, 2**31, 2**31 + 1]
    assert cols["prefill_tokens"].tolist() == [5, 0, 0]


def test_a_run_past_32_bits_widens_before_it_is_logged():
    log = PassLog()
    log.add(0.0, 1.0, 5, 1, 0, 0, 7)
    log.add_run(np.array([1.0, 2.0]), np.array([2.0, 3.0]), 2, np.array([10, 2**33]),
                np.array([8, 8]))
    assert log.arrays()["decode_tokens"].tolist() == [0, 10, 2**33]
    assert log.arrays()["num_prefill"].tolist() == [1, 0, 0]
