"""KV transfer contention (beyond the reference): hand-computed link sharing.

1e8 bytes over a 10 GB/s link (1e7 bytes per ms) take 10 ms alone.
"""
import simpy
import pytest

from simmodel.cluster.kv_link import link_network

MB100 = 1e8


def run(policy, starts, links=None):
    """starts: list of (start_ms, nbytes); returns [(done_ms, started_ms)] in start order."""
    env = simpy.Environment()
    net = link_network(env, 10.0, policy)
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


def test_fifo_two_links_wait_for_both_in_request_order():
    # A holds prefill 0 (0-10); B needs prefill 0 and decode 0, so it waits for A and holds
    # decode 0 meanwhile; C (decode 0 only, asked after B) waits behind B: B 10-20, C 20-30.
    links = [(("prefill", 0),), (("prefill", 0), ("decode", 0)), (("decode", 0),)]
    got = run("fifo", [(0, MB100), (1, MB100), (2, MB100)], links)
    assert got == [(10.0, 0.0), (20.0, 10.0), (30.0, 20.0)]


def test_fifo_links_are_simpy_resources_released_after_each_transfer():
    env = simpy.Environment()
    net = link_network(env, 10.0, "fifo")
    t = net.start(MB100, (("prefill", 0),))
    env.run()
    link = net.links[("prefill", 0)]
    assert isinstance(link, simpy.Resource) and link.count == 0 and not link.queue
    assert t.done.value is t and t.started_ms == 0.0 and env.now == 10.0


def test_fifo_contention_in_a_disaggregated_run():
    # Fixed timing (prefill 10 ms a pass, decode 1 ms), 1 prefill + 1 decode worker, two
    # 1,000-token prompts at t=0, 1e5 bytes per token over a 10 GB/s link: each transfer
    # moves 1e8 bytes, 10 ms alone.  Both prompts are prefilled in the pass 0-10 and share
    # prefill worker 0's link under fifo: A 10-20, B 20-30 (B queued 10 ms).  A's
    # destination is activated at 20 on the idle decode worker; its 5 tokens end the passes
    # 20-21 ... 24-25.  B is activated at 30, the decode worker idle again: tokens 31 ... 35.
    import simmodel
    from simmodel.config import (ClusterConfig, EngineConfig, KvTransferConfig, PoolConfig,
                                 Scenario, SyntheticConfig, TimingConfig, WorkloadConfig)
    fixed = EngineConfig(timing_model=TimingConfig(type="fixed", prefill_ms=10.0,
                                                   decode_ms=1.0))
    sc = Scenario(
        workload=WorkloadConfig(synthetic=SyntheticConfig(
            requests=2, input_tokens=1000, output_tokens=5, arrival_interval_ms=0.0)),
        cluster=ClusterConfig(prefill=PoolConfig(workers=1, engine=fixed),
                              decode=PoolConfig(workers=1, engine=fixed),
                              kv_transfer=KvTransferConfig(bandwidth_gb_s=10.0,
                                                           bytes_per_token=100_000,
                                                           contention=True, policy="fifo")))
    r = simmodel.run(sc).requests.sort_values("uid")
    assert r.source_held_ms.tolist() == [10.0, 10.0]
    assert r.transfer_queue_ms.tolist() == [0.0, 10.0]
    assert r.transfer_ms.tolist() == [10.0, 20.0]
    assert r.transfer_gb_s.tolist() == pytest.approx([10.0, 10.0])
    assert r.destination_activated_ms.tolist() == [20.0, 30.0]
    assert r.ttft_ms.tolist() == [21.0, 31.0]
    assert r.e2e_latency_ms.tolist() == [25.0, 35.0]
