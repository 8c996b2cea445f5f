"""KV transfer contention (beyond the reference): hand-computed link sharing.

1e8 bytes over a 10 GB/s link (1e7 bytes per ms) take 10 ms alone.
"""
import simpy
import pytest

from simmodel.cluster.kv_link import LinkNetwork

MB100 = 1e8


def run(policy, starts, links=None):
    """starts: list of (start_ms, nbytes); returns [(done_ms, started_ms)] in start order."""
    env = simpy.Environment()
    net = LinkNetwork(env, 10.0, policy)
    out = {}

    def go(i, at, n):
        yield env.timeout(at)
        t = net.start(n, links[i] if links else (("prefill", 0),))
        yield t.done
        out[i] = (env.now, t.started_ms)

    for i, (at, n) in enumerate(starts):
        env.process(go(i, at, n))
    env.run()
    return [out[i] for i in range(len(starts))]


def test_alone_takes_bytes_over_bandwidth():
    assert run("fair", [(0, MB100)])[0][0] == pytest.approx(10.0)


def test_two_simultaneous_transfers_on_one_link_take_twice_as_long():
    # fair: each gets 5 GB/s -> both end at 20 ms.
    assert [d for d, _ in run("fair", [(0, MB100), (0, MB100)])] == pytest.approx([20.0, 20.0])


def test_fifo_serves_one_at_a_time():
    # fifo: the second waits 10 ms for the link, then takes 10 ms.
    (d1, s1), (d2, s2) = run("fifo", [(0, MB100), (0, MB100)])
    assert (d1, s1, d2, s2) == pytest.approx((10.0, 0.0, 20.0, 10.0))


def test_fair_sharing_recomputes_rates_when_a_transfer_joins():
    # A alone for 5 ms (half done), then both at 5 GB/s: A's last 5e7 bytes take 10 ms
    # (ends 15); B moved 5e7 by then and finishes alone in 5 ms (ends 20).
    assert [d for d, _ in run("fair", [(0, MB100), (5, MB100)])] == pytest.approx([15.0, 20.0])


def test_transfers_on_different_links_do_not_interfere():
    links = [(("prefill", 0),), (("prefill", 1),)]
    assert [d for d, _ in run("fair", [(0, MB100), (0, MB100)], links)] == pytest.approx([10.0, 10.0])


def test_two_links_take_the_smaller_share():
    # Both transfers share decode link d0 but use different prefill links: each gets
    # min(10, 10/2) = 5 GB/s -> 20 ms.
    links = [(("prefill", 0), ("decode", 0)), (("prefill", 1), ("decode", 0))]
    assert [d for d, _ in run("fair", [(0, MB100), (0, MB100)], links)] == pytest.approx([20.0, 20.0])
