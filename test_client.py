"""Tests for client.py against a scripted loopback server (loopback.py): retries, errors, usage counts,
the API key, the response cache, forks and the command-line flags. No other network."""
import argparse
import json
import socket
import sqlite3
import threading
from dataclasses import replace

import pytest
from PIL import Image

import verdict
from client import Cache, CacheError, Client, EndpointError, Parser, add_endpoint_args, cache_key, clients_from_args
from images import messages
from judges import Reasoner, make_judges, thread_map
from loopback import chat_response, scripted, user_text

SECRET = "sk-test-VERY-SECRET-0123456789"


# ----------------------------------------------------------------------------- HTTP errors and retries

def test_429_then_success_honours_retry_after(loopback):
    srv = loopback(scripted((429, {"error": {"message": "slow down"}}, {"Retry-After": "7"}), "ok"))
    waits = []
    client = Client(srv.url, "m", retries=2, sleep=waits.append)
    assert client.chat([{"role": "user", "content": "hi"}])["choices"][0]["message"]["content"] == "ok"
    assert waits == [7.0] and client.usage["requests"] == 2 and client.usage["calls"] == 1


def test_500_is_retried_with_growing_backoff_then_raises(loopback):
    srv = loopback(scripted(then=(500, {"error": {"message": "image input is not supported", "code": 500}})))
    waits = []
    client = Client(srv.url, "m", retries=3, backoff=1.0, sleep=waits.append)
    with pytest.raises(EndpointError) as e:
        client.chat([{"role": "user", "content": "hi"}])
    assert e.value.status == 500 and e.value.message == "image input is not supported"
    assert srv.url in str(e.value) and "HTTP 500" in str(e.value) and "\n" not in str(e.value)
    assert len(srv.chats) == 4 and len(waits) == 3
    assert all(0.5 * 2 ** a <= w <= 2 ** a for a, w in enumerate(waits))  # exponential, with jitter


@pytest.mark.parametrize("payload, message", [
    ({"error": {"message": "max_tokens is too large", "type": "invalid_request_error"}}, "max_tokens is too large"),
    ({"object": "error", "message": "bad top_k", "code": 400}, "bad top_k"),
    ("plain text\nreason", "plain text reason"),
])
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


@pytest.mark.parametrize("payload, needle", [
    (b"<html>Bad Gateway</html>", "not JSON"),
    ({"id": "x", "object": "chat.completion"}, "no choices"),
    ({"choices": []}, "no choices"),
    ({"error": {"message": "context length exceeded"}}, "context length exceeded"),
    ({"choices": [{"index": 0}]}, "no message"),
    ({"choices": [{"message": {"role": "assistant", "content": None}}]}, "no message"),
])
def test_malformed_body_raises_endpoint_error(loopback, payload, needle):
    srv = loopback(scripted(then=(200, payload)))
    with pytest.raises(EndpointError) as e:
        Client(srv.url, "m").chat([{"role": "user", "content": "hi"}])
    assert e.value.status is None and needle in str(e.value) and len(srv.chats) == 1


def test_usage_counts_tokens_calls_and_requests(loopback):
    srv = loopback(scripted((503, "busy"), then=lambda body, path: chat_response("x", prompt_tokens=11, completion_tokens=4)))
    client = Client(srv.url, "m", backoff=0.0)
    for _ in range(2):
        client.chat([{"role": "user", "content": "hi"}])
    assert client.usage == dict(requests=3, calls=2, cache_hits=0, replies=2, prompt_tokens=22, completion_tokens=8,
                                call_tokens=30)


# ----------------------------------------------------------------------------- secrets

def test_api_key_is_sent_but_absent_from_traces_reprs_and_errors(loopback, monkeypatch, png):
    monkeypatch.setenv("VERDICT_TEST_KEY", SECRET)
    srv = loopback(lambda body, path: chat_response(["Fine.\nScore: 0.8"] * body.get("n", 1)))
    client = Client(srv.url, "m", api_key_env="VERDICT_TEST_KEY")
    cfg = verdict.Config(n=2, max_steps=2)
    js = make_judges(client)
    trace = verdict.run("Is the cup left?", Reasoner(client), js, cfg, image=png, map_fn=thread_map(3))
    trace = replace(trace, meta={"usage": client.usage, "client": repr(client), "judges": [repr(j) for j in js]})
    assert SECRET not in json.dumps(trace.to_dict())
    assert all(r.headers["Authorization"] == f"Bearer {SECRET}" for r in srv.requests)
    assert SECRET not in repr(client) + str(vars(client)) + str(dict(client.session.headers))

    echo = loopback(scripted((401, {"error": {"message": f"Incorrect API key provided: {SECRET}"}}),
                             then=(500, f"upstream rejected key {SECRET}")))
    bad = Client(echo.url, "m", api_key_env="VERDICT_TEST_KEY", retries=1, backoff=0.0)
    for _ in range(2):  # a 401 at once, then 500s until the retries run out
        with pytest.raises(EndpointError) as e:
            bad.chat([{"role": "user", "content": "hi"}])
        assert SECRET not in str(e.value) + repr(e.value) + e.value.message and "***" in e.value.message


def test_no_authorization_header_without_a_key(loopback, monkeypatch):
    monkeypatch.delenv("VERDICT_NO_KEY", raising=False)
    srv = loopback(scripted("ok"))
    Client(srv.url, "m", api_key_env="VERDICT_NO_KEY").chat([{"role": "user", "content": "hi"}])
    assert "Authorization" not in srv.requests[0].headers


# ----------------------------------------------------------------------------- cache

def test_cache_hits_and_survives_a_restart(loopback, tmp_path, png):
    srv = loopback(scripted(then=lambda body, path: chat_response(f"Score: 0.{body['seed']}")))
    path = tmp_path / "responses.sqlite"
    msgs = messages("system", [png], "judge this")
    first = Client(srv.url, "m", cache=Cache(path))
    a = first.chat(msgs, temperature=0.0, seed=1)
    assert first.chat(msgs, temperature=0.0, seed=1) == a and len(srv.chats) == 1
    first.chat(msgs, temperature=0.0, seed=2)  # another seed is another request
    assert len(srv.chats) == 2 and first.usage["cache_hits"] == 1 and (first.cache.hits, first.cache.misses) == (1, 2)
    first.cache.close()
    again = Client(srv.url, "m", cache=Cache(path))  # a new process, the same file
    assert again.chat(msgs, temperature=0.0, seed=1) == a and len(srv.chats) == 2
    assert again.usage == dict(requests=0, calls=1, cache_hits=1, replies=0, prompt_tokens=0, completion_tokens=0,
                                call_tokens=12)  # the cached reply's 10 + 2 tokens: what the call costs
    other = Client(srv.url, "another-model", cache=Cache(path))
    other.chat(msgs, temperature=0.0, seed=1)
    assert len(srv.chats) == 3


def test_cache_key_hashes_images_and_covers_every_parameter(png, tmp_path):
    msgs = messages("s", [png], "t")
    key = cache_key({"model": "m", "messages": msgs, "seed": 0})
    assert key == cache_key({"seed": 0, "messages": messages("s", [png.read_bytes()], "t"), "model": "m"})
    other = tmp_path / "other.png"
    Image.new("RGB", (64, 48), "blue").save(other)
    assert key != cache_key({"model": "m", "messages": messages("s", [other], "t"), "seed": 0})
    for change in ({"seed": 1}, {"model": "n"}, {"n": 3}, {"temperature": 0.8}):
        assert key != cache_key({"model": "m", "messages": msgs, "seed": 0, **change})


def test_cache_is_thread_safe_and_reruns_are_free(loopback, tmp_path):
    srv = loopback(scripted(then=lambda body, path: chat_response(user_text(body).upper())))
    path = tmp_path / "c.sqlite"
    client = Client(srv.url, "m", cache=Cache(path))
    ask = lambda i: client.chat(messages("s", [], f"q{i}"))["choices"][0]["message"]["content"]
    assert thread_map(8)(ask, range(40)) == [f"Q{i}" for i in range(40)]
    rerun = Client(srv.url, "m", cache=Cache(path))
    ask = lambda i: rerun.chat(messages("s", [], f"q{i}"))["choices"][0]["message"]["content"]
    assert thread_map(8)(ask, range(40)) == [f"Q{i}" for i in range(40)] and len(srv.chats) == 40


def test_cache_rejects_a_corrupt_file(tmp_path):
    path = tmp_path / "corrupt.sqlite"
    path.write_bytes(b"this is not a database " * 200)
    with pytest.raises(CacheError, match="corrupt.sqlite"):
        Cache(path)


def test_cache_rejects_damaged_pages(tmp_path):
    path = tmp_path / "damaged.sqlite"
    cache = Cache(path)
    for i in range(30):
        cache.put(f"k{i}", chat_response("x" * 1000))
    cache.close()
    data = bytearray(path.read_bytes())
    data[4096:] = b"\xff" * (len(data) - 4096)  # keep the header page, garble the rest
    path.write_bytes(bytes(data))
    with pytest.raises(CacheError, match="damaged.sqlite"):
        c = Cache(path)
        [c.get(f"k{i}") for i in range(30)]


def test_cache_rejects_another_format_version_and_foreign_databases(tmp_path):
    path = tmp_path / "old.sqlite"
    Cache(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value='verdict-cache/0' WHERE name='format'")
    with pytest.raises(CacheError, match=r"old\.sqlite.*verdict-cache/0.*verdict-cache/1"):
        Cache(path)
    foreign = tmp_path / "foreign.sqlite"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE t (x)")
    with pytest.raises(CacheError, match="foreign.sqlite"):
        Cache(foreign)


# ----------------------------------------------------------------------------- command-line flags

def test_clients_from_args_share_or_split_the_client():
    p = argparse.ArgumentParser()
    add_endpoint_args(p)
    reasoner, judge = clients_from_args(p.parse_args(["--base-url", "http://h/v1", "--model", "a", "--retries", "1"]))
    assert reasoner is judge and reasoner.retries == 1 and reasoner.cache is None
    reasoner, judge = clients_from_args(p.parse_args(["--base-url", "http://h/v1", "--model", "a", "--judge-model", "b"]))
    assert (reasoner.model, judge.model, judge.base_url) == ("a", "b", "http://h/v1")



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
    assert (child.base_url, child.model, child.retries, child.timeout, child.cache) == (
        parent.base_url, parent.model, 1, 9.0, parent.cache) and child.session is not parent.session
    ask(child, "first")  # the parent's reply, from the shared cache
    assert child.usage == dict(requests=0, calls=1, cache_hits=1, replies=0, prompt_tokens=0, completion_tokens=0,
                               call_tokens=11)  # "ok": 10 prompt tokens + 1 completion word
    ask(child, "second")
    with pytest.raises(RuntimeError, match="budget spent"):
        ask(child, "third")
    assert len(srv.chats) == 2 and parent.usage["calls"] == 1 and child.usage["calls"] == 2
