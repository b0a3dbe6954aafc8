"""Tests for pinning a chain to one data-parallel replica (client.dp_rank, client.pin,
--dp-replicas) and the simulated server's replicas (perf/simserver.py, perf/replicas.py)."""

import collections

import pytest
import requests

from verdict_lab.client import RANK_HEADER, Client, dp_rank, pin
from verdict_lab.loopback import LoopbackServer
from verdict_lab.perf.replicas import computed_tokens
from verdict_lab.perf.simserver import LatencyModel, SimulatedServer


def test_dp_rank_is_stable_in_range_and_spreads_chains():
    # sha256, not hash(): the same chain goes to the same replica in every process and run.
    assert dp_rank("arith/q1", 0, 4) == dp_rank("arith/q1", 0, 4)
    ranks = collections.Counter(dp_rank(f"data/q{i}", s, 4) for i in range(200) for s in range(3))
    assert set(ranks) == {0, 1, 2, 3} and min(ranks.values()) > 100  # 600 chains, about 150 each
    assert all(dp_rank(f"q{i}", 0, 1) == 0 for i in range(20))


def test_a_pinned_chain_sends_its_rank_in_every_request_and_one_replica_sends_none():
    sim = SimulatedServer(LatencyModel(time_scale=0.0), replicas=3)
    with LoopbackServer(sim) as srv:
        c = Client(srv.url, "m")
        c.replicas = 3
        forked = c.fork()
        # A fork sends only its session's own headers (requests' defaults), no rank: its pinning
        # is its own.
        fresh = dict(requests.Session().headers)
        assert (
            forked.replicas == 3
            and dict(forked.headers) == fresh
            and RANK_HEADER not in forked.headers
        )
        pin((c, c), "data/q7", 2)
        assert (
            RANK_HEADER in c.headers and dict(c.fork().headers) == fresh
        )  # a pinned one's fork: unpinned
        for _ in range(2):
            c.chat([{"role": "user", "content": "Score this."}], max_tokens=4)
        one = Client(srv.url, "m")
        pin((one,), "data/q7", 2)
        one.chat([{"role": "user", "content": "Score this."}], max_tokens=4)
        sent = [r.headers.get(RANK_HEADER) for r in srv.requests]
    assert sent == [str(dp_rank("data/q7", 2, 3))] * 2 + [None]


def test_each_replica_has_its_own_prefix_cache_and_unpinned_requests_rotate():
    # 40 words = 3 whole blocks of 16 pseudo-tokens with the role markers: a second request on the
    # same replica finds them cached, on another replica it does not.
    sim = SimulatedServer(LatencyModel(time_scale=0.0), replicas=2)
    body = {"messages": [{"role": "user", "content": " ".join(["word"] * 40)}], "max_tokens": 4}
    cached = lambda rank: sim(
        body, "/v1/chat/completions", None if rank is None else {RANK_HEADER: rank}
    )["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert [cached("0"), cached("0"), cached("1"), cached("1")] == [0, 32, 0, 32]
    sim.reset()
    assert [cached(None), cached(None), cached(None)] == [0, 0, 32]  # replica 0, 1, then 0 again
    with pytest.raises(ValueError, match="0..1, got '2'"):
        cached("2")
    with pytest.raises(ValueError, match="replicas must be an integer >= 1"):
        SimulatedServer(LatencyModel(), replicas=0)


def test_pinning_chains_keeps_a_single_replicas_prefix_cache_hits():
    # evaluate.py on 2 items against 2 simulated replicas: routed by load, a chain's requests
    # alternate between the replicas' caches and the server computes more; pinned, about what one
    # replica computes.
    one, loose, pinned = (
        computed_tokens(2, 1, False),
        computed_tokens(2, 2, False),
        computed_tokens(2, 2, True),
    )
    assert pinned < loose and pinned <= 1.05 * one and loose > 1.2 * one
