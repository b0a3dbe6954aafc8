"""Tests for verdict_lab/client.py (over judges.Endpoint's POST) against a scripted loopback server
(verdict_lab/loopback.py, tests/scripted.py): retries, errors, usage counts, the API key, the
response cache, forks and the command-line flags. No other network."""

import argparse
import json
import socket
import threading
import time
from dataclasses import replace

import pytest

import verdict
from verdict_lab import loop
from judges import EndpointError, Reasoner, make_judges, text_of
from judges import chat_messages as messages
from scripted import scripted
from verdict_lab import client as client_module
from verdict_lab.cache import Cache, stored
from verdict_lab.client import Client, InFlight
from verdict_lab.formats import reported_cache
from verdict_lab.cli import Parser
from verdict_lab.flags import add_endpoint_args, clients_from_args, key_warning
from verdict_lab.formats import TEXT
from verdict_lab.loopback import chat_response, user_text
from verdict_lab.verifier import thread_map

SECRET = "sk-test-VERY-SECRET-0123456789"


# ------------------------------------------------------------------------- HTTP errors and retries


def test_429_then_success_honours_retry_after(loopback):
    srv = loopback(scripted((429, {"error": {"message": "slow down"}}, {"Retry-After": "7"}), "ok"))
    waits = []
    client = Client(srv.url, "m", retries=2, sleep=waits.append)
    assert (
        client.chat([{"role": "user", "content": "hi"}])["choices"][0]["message"]["content"] == "ok"
    )
    assert waits == [7.0] and client.usage["requests"] == 2 and client.usage["calls"] == 1


def test_500_is_retried_with_growing_backoff_then_raises(loopback):
    srv = loopback(
        scripted(then=(500, {"error": {"message": "image input is not supported", "code": 500}}))
    )
    waits = []
    client = Client(srv.url, "m", retries=3, backoff=1.0, sleep=waits.append)
    with pytest.raises(EndpointError) as e:
        client.chat([{"role": "user", "content": "hi"}])
    assert e.value.status == 500 and e.value.message == (
        "image input is not supported (this server has no vision encoder "
        "(llama-server needs --mmproj))"
    )
    assert srv.url in str(e.value) and "HTTP 500" in str(e.value) and "\n" not in str(e.value)
    assert len(srv.chats) == 4 and len(waits) == 3
    assert all(0.5 * 2**a <= w <= 2**a for a, w in enumerate(waits))  # exponential, with jitter


def test_llama_servers_chunk_not_found_is_asked_again_without_its_prompt_cache(loopback):
    # llama-server's multimodal prompt cache can cut inside an image: HTTP 500 "Chunk not found" on
    # every try that reuses the slot's cache. The client's session asks the same request once more
    # with cache_prompt false, within the same attempt, so even with no retry left it is answered.
    def handler(body, path):
        if body.get("cache_prompt") is False:
            return 200, chat_response("ok"), {}
        return 500, {"error": {"code": 500, "message": "got exception: Chunk not found"}}, {}

    srv = loopback(handler)
    client = Client(srv.url, "m", retries=0)
    assert text_of(client.chat([{"role": "user", "content": "hi"}])) == "ok"
    assert ["cache_prompt" in c for c in srv.chats] == [False, True]
    assert srv.chats[1]["cache_prompt"] is False and client.usage["requests"] == 2
    # A server that fails without its prompt cache too: the endpoint's error, after its retries.
    always = loopback(
        lambda body, path: (500, {"error": {"message": "got exception: Chunk not found"}}, {})
    )
    with pytest.raises(EndpointError, match="Chunk not found"):
        Client(always.url, "m", retries=1, sleep=lambda s: None).chat(
            [{"role": "user", "content": "hi"}]
        )
    assert [c.get("cache_prompt") for c in always.chats] == [None, False, None, False]


@pytest.mark.parametrize(
    "payload, message",
    [
        (
            {"error": {"message": "max_tokens is too large", "type": "invalid_request_error"}},
            "max_tokens is too large",
        ),
        ({"object": "error", "message": "bad top_k", "code": 400}, "bad top_k"),
        ("plain text\nreason", "plain text reason"),
    ],
)
def test_4xx_fails_at_once_with_the_server_message(loopback, payload, message):
    srv = loopback(scripted(then=(400, payload)))
    with pytest.raises(EndpointError) as e:
        Client(srv.url, "m", sleep=pytest.fail).chat([{"role": "user", "content": "hi"}])
    assert e.value.status == 400 and e.value.message == message and message in str(e.value)
    assert len(srv.chats) == 1


def test_timeout_is_retried_then_raises(loopback):
    release = threading.Event()
    srv = loopback(lambda body, path: (release.wait(30), chat_response("late"))[1])
    try:
        client = Client(srv.url, "m", timeout=0.2, retries=1, backoff=0.0)
        with pytest.raises(EndpointError) as e:
            client.chat([{"role": "user", "content": "hi"}])
    finally:
        release.set()
    assert e.value.status is None and "timed out" in str(e.value)
    assert client.usage["requests"] == 2


def test_connection_refused_is_retried_then_raises():
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    waits = []
    client = Client(f"http://127.0.0.1:{port}/v1", "m", retries=2, sleep=waits.append)
    with pytest.raises(EndpointError) as e:
        client.chat([{"role": "user", "content": "hi"}])
    assert e.value.status is None and f"127.0.0.1:{port}" in str(e.value) and len(waits) == 2


@pytest.mark.parametrize(
    "payload, needle",
    [
        (b"<html>Bad Gateway</html>", "not JSON"),
        ({"id": "x", "object": "chat.completion"}, "no choices"),
        ({"choices": []}, "no choices"),
        ({"error": {"message": "context length exceeded"}}, "context length exceeded"),
        ({"choices": [{"index": 0}]}, "no message"),
        ({"choices": [{"message": {"role": "assistant", "content": None}}]}, "no message"),
    ],
)
def test_malformed_200_is_retried_like_a_5xx_then_raises(loopback, payload, needle):
    srv = loopback(scripted(then=(200, payload)))
    waits = []
    with pytest.raises(EndpointError) as e:
        Client(srv.url, "m", retries=2, backoff=1.0, sleep=waits.append).chat(
            [{"role": "user", "content": "hi"}]
        )
    assert e.value.status is None and needle in str(e.value) and "\n" not in str(e.value)
    assert (
        len(srv.chats) == 3
        and len(waits) == 2
        and all(0.5 * 2**a <= w <= 2**a for a, w in enumerate(waits))
    )


def test_one_malformed_reply_then_a_good_one_succeeds(loopback):
    srv = loopback(scripted((200, b"<html>oops</html>"), (200, {"choices": []}), "ok"))
    client = Client(srv.url, "m", retries=2, sleep=lambda s: None)
    assert (
        client.chat([{"role": "user", "content": "hi"}])["choices"][0]["message"]["content"] == "ok"
    )
    assert (
        client.usage["requests"] == 3
        and client.usage["replies"] == 1
        and client.usage["calls"] == 1
    )


@pytest.mark.parametrize(
    "url",
    [
        "ftp://127.0.0.1:9/v1",
        "127.0.0.1:9/v1",
        "localhost:8000/v1",
        "",
        "http://",
        "https:///v1",
        "http://127.0.0.1:99999/v1",
        "http://[::1/v1",
        "http://a b/v1",
        None,
    ],
)
def test_an_unusable_url_fails_at_once_with_a_clear_error(url):
    with pytest.raises(
        ValueError, match=r"endpoint URL must be http:// or https:// with a host.*got"
    ):
        Client(url, "m", sleep=pytest.fail)


def test_a_url_error_from_requests_is_not_retried(loopback, monkeypatch):
    import requests

    client = Client("http://127.0.0.1:9/v1", "m", retries=3, sleep=pytest.fail)
    # Where requests would raise it: sending the request, inside the client's session.
    monkeypatch.setattr(
        client.endpoint.session.get_adapter("http://127.0.0.1:9/v1"),
        "send",
        lambda *a, **k: (_ for _ in ()).throw(
            requests.exceptions.InvalidURL("Failed to parse: http://127.0.0.1:9/v1")
        ),
    )
    with pytest.raises(EndpointError, match="unusable request: Failed to parse"):
        client.chat([{"role": "user", "content": "hi"}])
    assert client.usage["requests"] == 1


def test_usage_counts_tokens_calls_and_requests(loopback):
    srv = loopback(
        scripted(
            (503, "busy"),
            then=lambda body, path: chat_response("x", prompt_tokens=11, completion_tokens=4),
        )
    )
    client = Client(srv.url, "m", backoff=0.0)
    for _ in range(2):
        client.chat([{"role": "user", "content": "hi"}])
    assert client.usage == usage(
        requests=3, calls=2, replies=2, prompt_tokens=22, completion_tokens=8, call_tokens=30
    )


def usage(**counts) -> dict:
    """A client's usage counters: `counts`, and every other counter zero, as a new client's are (so
    also the prefix-cache counters of a server that reports no reuse)."""
    new = Client("http://127.0.0.1:9/v1", "m").usage
    assert set(new.values()) == {0} and set(counts) <= set(new), counts
    return {**new, **counts}


def with_reuse(prompt_tokens: int, cached=None, timings=None) -> dict:
    """A reply with usage.prompt_tokens_details.cached_tokens (unless None) and
    llama-server's timings (if given)."""
    r = chat_response("x", prompt_tokens=prompt_tokens, completion_tokens=1)
    if cached is not None:
        r["usage"]["prompt_tokens_details"] = {"cached_tokens": cached}
    return {**r, "timings": timings} if timings is not None else r


def test_total_usage_counts_each_client_once(loopback):
    srv = loopback(
        scripted(then=lambda body, path: chat_response("x", prompt_tokens=5, completion_tokens=1))
    )
    a, b = Client(srv.url, "m"), Client(srv.url, "m")
    (
        a.chat([{"role": "user", "content": "1"}]),
        b.chat([{"role": "user", "content": "2"}]),
        b.chat([{"role": "user", "content": "3"}]),
    )
    assert (
        client_module.total_usage((a, b))["prompt_tokens"] == 15
        and client_module.total_usage((a, a))["calls"] == 1
    )
    assert client_module.total_usage((b,)) == b.usage


def test_reported_cache_reads_cached_tokens_and_timings_and_nothing_else():
    assert reported_cache(
        with_reuse(11, 7, {"cache_n": 7, "prompt_n": 4, "prompt_ms": 1.5, "predicted_ms": 20})
    ) == {"cached_tokens": 7, "cache_n": 7, "prompt_n": 4, "prompt_ms": 1.5, "predicted_ms": 20.0}
    # vLLM leaves cached_tokens out when it is 0: unknown, never 0; so is anything not a count.
    nothing = {
        "cached_tokens": None,
        "cache_n": None,
        "prompt_n": None,
        "prompt_ms": None,
        "predicted_ms": None,
    }
    assert reported_cache(with_reuse(11)) == nothing
    for bad in ("7", -1, True, 7.0, None):
        assert (
            reported_cache(with_reuse(11, bad, {"cache_n": bad, "prompt_n": 4}))["cached_tokens"]
            is None
        )
        assert reported_cache(with_reuse(11, 0, {"cache_n": bad}))["cache_n"] is None
    # Milliseconds must be a finite number >= 0.
    for bad in ("7", -1.0, True, float("inf"), float("nan"), None):
        assert (
            reported_cache(with_reuse(11, 0, {"prompt_ms": bad, "predicted_ms": bad}))["prompt_ms"]
            is None
        )
    assert reported_cache({"usage": "none", "timings": [1]}) == nothing


def test_usage_counts_the_prefix_cache_reuse_the_replies_report(loopback, tmp_path):
    replies = [
        with_reuse(
            100, 0, {"cache_n": 0, "prompt_n": 100, "prompt_ms": 50.0, "predicted_ms": 200.5}
        ),  # cold
        with_reuse(
            120, 96, {"cache_n": 96, "prompt_n": 24, "prompt_ms": 12.0, "predicted_ms": 150}
        ),  # warm
        with_reuse(50),  # vLLM with nothing cached: not reported
        with_reuse(80, 64),  # vLLM, 4 blocks of 16 cached
    ]
    srv = loopback(scripted(*replies))
    client = Client(srv.url, "m", cache=Cache(str(tmp_path / "c.sqlite")))
    for i in range(4):
        client.chat([{"role": "user", "content": f"q{i}"}])
    # A cache hit: the server computed nothing, and nothing is counted.
    client.chat([{"role": "user", "content": "q1"}])
    u = client.usage
    assert (u["replies"], u["cache_hits"], u["prompt_tokens"]) == (4, 1, 350)
    # 3 replies reported cached_tokens: 0 + 96 + 64 = 160 reused;
    # (100 − 0) + (120 − 96) + (80 − 64) = 140 computed
    assert (u["cache_reports"], u["cached_tokens"], u["computed_prompt_tokens"]) == (3, 160, 140)
    assert (u["timings_reports"], u["timings_cache_n"], u["timings_prompt_n"]) == (2, 96, 124)
    # llama-server's milliseconds: 50 + 12 = 62 computing prompts, 200.5 + 150 = 350.5 generating
    assert (u["timings_prompt_ms"], u["timings_predicted_ms"]) == (62.0, 350.5)


# ----------------------------------------------------------------------------- secrets


def test_api_key_is_sent_but_absent_from_traces_reprs_and_errors(loopback, monkeypatch, png):
    monkeypatch.setenv("VERDICT_TEST_KEY", SECRET)
    # The reasoner (which sends n) steps; the judges score.
    step_or_score = lambda body: ["The cup is left."] * body["n"] if "n" in body else "Score: 0.8"
    srv = loopback(lambda body, path: chat_response(step_or_score(body)))
    client = Client(srv.url, "m", api_key_env="VERDICT_TEST_KEY")
    cfg = verdict.Config(n=2, max_steps=2)
    js = make_judges(client, reply=TEXT)
    trace = loop.run("Is the cup left?", Reasoner(client), js, cfg, image=png, map_fn=thread_map(3))
    trace = replace(
        trace, meta={"usage": client.usage, "client": repr(client), "judges": [repr(j) for j in js]}
    )
    assert SECRET not in json.dumps(trace.to_dict())
    assert all(r.headers["Authorization"] == f"Bearer {SECRET}" for r in srv.requests)
    assert SECRET not in repr(client) + str(vars(client)) + str(vars(client.endpoint)) + str(
        dict(client.headers)
    )
    calls = [c for r in trace.steps for row in r.calls for c in row]
    assert calls and all(c["sampled"] is not None for c in calls)  # the judges read every reply

    echo = loopback(
        scripted(
            (401, {"error": {"message": f"Incorrect API key provided: {SECRET}"}}),
            then=(500, f"upstream rejected key {SECRET}"),
        )
    )
    bad = Client(echo.url, "m", api_key_env="VERDICT_TEST_KEY", retries=1, backoff=0.0)
    for _ in range(2):  # a 401 at once, then 500s until the retries run out
        with pytest.raises(EndpointError) as e:
            bad.chat([{"role": "user", "content": "hi"}])
        assert (
            SECRET not in str(e.value) + repr(e.value) + e.value.message
            and "***" in e.value.message
        )


@pytest.mark.parametrize(
    "status, payload",
    [  # x * k puts the key across the 300-character cut of a message
        (200, f"<html>{SECRET}</html>".encode()),  # 200, body not JSON
        (200, f"<html>{'x' * 256} {SECRET}</html>".encode()),
        (
            200,
            {"choices": [{"message": {"content": None}, "echo": SECRET}]},
        ),  # choice without content
        (200, {"choices": [{"message": {"content": None}, "echo": "x" * 204 + SECRET}]}),
        (200, {"error": {"message": f"bad key {SECRET}"}}),  # no choices, an error
        (400, {"error": {"message": f"{'x' * 285} key {SECRET} refused"}}),
        (500, f"upstream rejected key {SECRET}"),
    ],
)
def test_the_key_is_redacted_on_every_error_path(loopback, monkeypatch, status, payload):
    monkeypatch.setenv("VERDICT_TEST_KEY", SECRET)
    srv = loopback(scripted(then=(status, payload)))
    with pytest.raises(EndpointError) as e:
        Client(srv.url, "m", api_key_env="VERDICT_TEST_KEY", retries=1, sleep=lambda s: None).chat(
            [{"role": "user", "content": "hi"}]
        )
    said = str(e.value) + repr(e.value) + e.value.message + e.value.url
    assert (
        "***" in said
        and all(SECRET[:k] not in said for k in (8, 12))
        and srv.requests[0].headers["Authorization"] == f"Bearer {SECRET}"
    )


def test_no_authorization_header_without_a_key(loopback, monkeypatch):
    monkeypatch.delenv("VERDICT_NO_KEY", raising=False)
    srv = loopback(scripted("ok"))
    Client(srv.url, "m", api_key_env="VERDICT_NO_KEY").chat([{"role": "user", "content": "hi"}])
    assert "Authorization" not in srv.requests[0].headers


# ---------------------------------------------------------------------- the client with a cache


def test_cache_hits_and_survives_a_restart(loopback, tmp_path, png):
    srv = loopback(scripted(then=lambda body, path: chat_response(f"Score: 0.{body['seed']}")))
    path = tmp_path / "responses.sqlite"
    msgs = messages("system", [png], "judge this")
    first = Client(srv.url, "m", cache=Cache(path))
    a = first.chat(msgs, temperature=0.0, seed=1)
    # The repeat is answered from the cache, with what is read of a.
    assert first.chat(msgs, temperature=0.0, seed=1) == stored(a) and len(srv.chats) == 1
    first.chat(msgs, temperature=0.0, seed=2)  # another seed is another request
    assert len(srv.chats) == 2 and first.usage["cache_hits"] == 1
    first.cache.close()
    again = Client(srv.url, "m", cache=Cache(path))  # a new process, the same file
    assert again.chat(msgs, temperature=0.0, seed=1) == stored(a) and len(srv.chats) == 2
    # the cached reply's 10 + 2 tokens: what the call costs
    assert again.usage == usage(calls=1, cache_hits=1, call_tokens=12)
    other = Client(srv.url, "another-model", cache=Cache(path))
    other.chat(msgs, temperature=0.0, seed=1)
    assert len(srv.chats) == 3


def test_the_same_model_on_another_port_shares_cached_answers_and_another_model_does_not(
    loopback, tmp_path
):
    """The cache is keyed by what a server computes, the model and the request (cache.cache_key),
    not by its URL: the same model name asked the same request on another port is answered from the
    cache."""
    first, second = (
        loopback(scripted(then="from the first server")),
        loopback(scripted(then="from the second server")),
    )
    cache = Cache(tmp_path / "c.sqlite")
    ask = lambda srv, m="default": Client(srv.url, m, cache=cache).chat(
        [{"role": "user", "content": "hi"}]
    )
    assert ask(first)["choices"][0]["message"]["content"] == "from the first server"
    assert ask(second)["choices"][0]["message"]["content"] == "from the first server"  # a hit
    assert ask(second, "other")["choices"][0]["message"]["content"] == "from the second server"
    assert (len(first.chats), len(second.chats)) == (1, 1)


def test_cache_is_thread_safe_and_reruns_are_free(loopback, tmp_path):
    srv = loopback(scripted(then=lambda body, path: chat_response(user_text(body).upper())))
    path = tmp_path / "c.sqlite"
    client = Client(srv.url, "m", cache=Cache(path))
    ask = lambda i: client.chat(messages("s", [], f"q{i}"))["choices"][0]["message"]["content"]
    assert thread_map(8)(ask, range(40)) == [f"Q{i}" for i in range(40)]
    rerun = Client(srv.url, "m", cache=Cache(path))
    ask = lambda i: rerun.chat(messages("s", [], f"q{i}"))["choices"][0]["message"]["content"]
    assert thread_map(8)(ask, range(40)) == [f"Q{i}" for i in range(40)] and len(srv.chats) == 40


# ------------------------------------------------------------------ identical requests in flight


class CountingInFlight(InFlight):
    """InFlight counting the calls that have joined it: each has sent a request or waits for one."""

    def __init__(self):
        super().__init__()
        self.joined, self._count = 0, threading.Lock()

    def join(self, key: str) -> tuple:
        out = super().join(key)
        with self._count:
            self.joined += 1
        return out


def gated(reply, calls: int) -> tuple:
    """(handler, box): the handler answers reply(body) only once each of `calls` calls of
    box["client"] (made with a CountingInFlight) is in flight or waits for an identical one (polled,
    at most 10 s), so that they overlap."""
    box, opened = {}, threading.Event()  # once open, the gate stays open

    def handler(body, path):
        deadline = time.monotonic() + 10
        while not opened.is_set() and time.monotonic() < deadline:
            if box["client"].in_flight.joined >= calls:
                opened.set()
            time.sleep(0.005)
        return reply(body)

    return handler, box


def test_identical_concurrent_calls_send_one_request(loopback):
    handler, box = gated(lambda body: chat_response(user_text(body).upper()), calls=9)
    srv = box["srv"] = loopback(handler)
    client = box["client"] = Client(srv.url, "m", in_flight=CountingInFlight())
    ask = lambda i: client.chat(messages("s", [], f"q{i % 3}"))["choices"][0]["message"]["content"]
    assert thread_map(9)(ask, range(9)) == [f"Q{i % 3}" for i in range(9)]
    assert len(srv.chats) == 3 and sorted(user_text(b) for b in srv.chats) == ["q0", "q1", "q2"]
    # 3 replies of 10 + 1 tokens paid for; 9 calls that would cost 9 · 11 tokens
    assert client.usage == usage(
        requests=3,
        calls=9,
        merged=6,
        replies=3,
        prompt_tokens=30,
        completion_tokens=3,
        call_tokens=99,
    )


def test_merged_calls_share_an_error_and_span_forks_and_budgets(loopback):
    handler, box = gated(lambda body: (400, {"error": {"message": "bad request"}}), calls=4)
    srv = box["srv"] = loopback(handler)
    parent = box["client"] = Client(srv.url, "m", in_flight=CountingInFlight())
    spent = []
    # A merged call is still a call.
    forks = [parent.fork(on_chat=lambda: spent.append(1)) for _ in range(4)]
    ask = lambda c: (
        pytest.raises(EndpointError, c.chat, [{"role": "user", "content": "hi"}]).value.message
    )
    assert thread_map(4)(ask, forks) == ["bad request"] * 4
    assert len(srv.chats) == 1 and len(spent) == 4
    assert (
        sum(f.usage["requests"] for f in forks) == 1
        and [f.usage["calls"] for f in forks] == [1] * 4
    )
    assert sum(f.usage["merged"] + f.usage["replies"] for f in forks) == 0  # nothing was answered


def test_a_rerun_from_the_cache_counts_every_call_as_a_hit(loopback, tmp_path):
    srv = loopback(scripted(then=lambda body, path: chat_response(user_text(body))))
    cache = Cache(tmp_path / "c.sqlite")
    ask = lambda c: lambda i: c.chat(messages("s", [], f"q{i % 3}"))
    thread_map(1)(ask(Client(srv.url, "m", cache=cache)), range(3))
    rerun = Client(srv.url, "m", cache=cache)
    # Followers of a cache hit count as hits, not as merged calls.
    thread_map(9)(ask(rerun), range(9))
    assert len(srv.chats) == 3 and rerun.usage["cache_hits"] == 9 and rerun.usage["merged"] == 0


def test_when_sent_calls_its_hook_before_the_reply_for_a_sent_or_joined_call_never_a_cached_one(
    loopback, tmp_path
):
    hooked, seen = [], []

    def handler(body, path):  # answers once both calls have called their hook (at most 10 s)
        deadline = time.monotonic() + 10
        while len(hooked) < 2 and time.monotonic() < deadline:
            time.sleep(0.005)
        seen.append(len(hooked))
        return chat_response("ok")

    srv = loopback(handler)
    client = Client(srv.url, "m", cache=Cache(tmp_path / "c.sqlite"))

    def ask(_):
        with client_module.when_sent(lambda: hooked.append(threading.get_ident())):
            return text_of(client.chat(messages("s", [], "q")))

    # Two identical calls at once: one is sent, the other joins it; both hooks precede the reply.
    assert thread_map(2)(ask, range(2)) == ["ok", "ok"]
    assert seen == [2] and len(srv.chats) == 1 and len(set(hooked)) == 2
    # The cache answers the same call again: nothing is sent, so no hook is called.
    assert ask(0) == "ok" and len(hooked) == 2 and len(srv.chats) == 1
    # Outside the block, nothing is called.
    client.chat(messages("s", [], "another"))
    assert len(hooked) == 2 and len(srv.chats) == 2


# ----------------------------------------------------------------------------- command-line flags


def test_clients_from_args_share_or_split_the_client():
    p = argparse.ArgumentParser()
    add_endpoint_args(p)
    reasoner, judge = clients_from_args(
        p.parse_args(["--base-url", "http://h/v1", "--model", "a", "--retries", "1"])
    )
    assert reasoner is judge and reasoner.endpoint.retries == 1 and reasoner.cache is None
    assert reasoner.endpoint.api_key_env == "OPENAI_API_KEY"
    reasoner, judge = clients_from_args(
        p.parse_args(["--base-url", "http://h/v1", "--model", "a", "--judge-model", "b"])
    )
    assert (reasoner.model, judge.model, judge.base_url) == ("a", "b", "http://h/v1")


LOCAL, REMOTE = "http://127.0.0.1:8000/v1", "https://api.example.com/v1"


@pytest.mark.parametrize(
    "flags, key_set, warned",
    [
        (["--base-url", LOCAL], False, None),  # a local server needs no key
        (["--base-url", "http://localhost:8000/v1"], False, None),
        (["--base-url", "http://[::1]:8000/v1"], False, None),
        (
            ["--base-url", REMOTE],
            False,
            f"$OPENAI_API_KEY is not set, so no API key is sent to {REMOTE}",
        ),
        (
            ["--base-url", LOCAL, "--judge-base-url", REMOTE],
            False,
            f"$OPENAI_API_KEY is not set, so no API key is sent to {LOCAL} and {REMOTE}",
        ),
        (
            ["--base-url", LOCAL, "--api-key-env", "VERDICT_KEY"],
            False,  # asked for a key by name
            f"$VERDICT_KEY is not set, so no API key is sent to {LOCAL}",
        ),
        (["--base-url", REMOTE, "--api-key-env", "VERDICT_KEY"], True, None),
        (["--base-url", REMOTE], True, None),
    ],
)
def test_key_warning_names_the_variable_only_when_a_key_is_expected(
    monkeypatch, flags, key_set, warned
):
    p = argparse.ArgumentParser()
    add_endpoint_args(p)
    args = p.parse_args(flags)
    name = args.api_key_env or "OPENAI_API_KEY"
    monkeypatch.setenv(name, SECRET) if key_set else monkeypatch.delenv(name, raising=False)
    assert key_warning(args) == (warned and "warning: " + warned)


def test_parser_errors_are_one_line_with_exit_2(capsys):
    p = Parser(prog="tool.py")
    add_endpoint_args(p)
    with pytest.raises(SystemExit) as e:
        p.parse_args(["--retries", "many"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("tool.py: error: argument --retries") and err.count("\n") == 1


# ----------------------------------------------------------------------------- forks


def test_fork_shares_endpoint_and_cache_not_counters_and_on_chat_can_refuse(loopback, tmp_path):
    srv = loopback(scripted(then="ok"))
    parent = Client(srv.url, "m", retries=1, timeout=9.0, cache=Cache(tmp_path / "c.sqlite"))
    ask = lambda c, text: c.chat([{"role": "user", "content": text}])
    ask(parent, "first")
    seen = []

    def budget():  # the third call is refused before anything is sent
        seen.append(1)
        if len(seen) > 2:
            raise RuntimeError("budget spent")

    child = parent.fork(on_chat=budget)
    e = child.endpoint
    assert (child.base_url, child.model, e.retries, e.timeout, child.cache) == (
        parent.base_url,
        parent.model,
        1,
        9.0,
        parent.cache,
    ) and e.session is not parent.endpoint.session
    ask(child, "first")  # the parent's reply, from the shared cache
    # call_tokens: 10 prompt tokens + 1 word ("ok").
    assert child.usage == usage(calls=1, cache_hits=1, call_tokens=11)
    ask(child, "second")
    with pytest.raises(RuntimeError, match="budget spent"):
        ask(child, "third")
    assert len(srv.chats) == 2 and parent.usage["calls"] == 1 and child.usage["calls"] == 2
