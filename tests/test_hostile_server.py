"""Hostile inputs on the HTTP side, each against a loopback server started here: a zoom box of
1e309, an API key with a trailing CRLF or a character no header carries, a server that trickles its
bytes, a lone surrogate, demo.py's unwritable outputs, cache entries of the wrong shape, huge
timings."""

import hashlib
import json
import math
import os
import socket
import subprocess
import threading
import time

import pytest

from verdict_lab import evaluate
import verdict
from verdict_lab import loop
import judges
from verdict_lab.cache import Cache, CacheError, cache_key
from verdict_lab.client import Client, total_usage
from verdict_lab.formats import reported_cache, reported_usage
from verdict_lab.formats import TEXT
from judges import EndpointError, Reasoner, make_judges
from verdict_lab.loopback import chat_response
from verdict_lab.layouts import role_of
from test_demo import command, run_demo, script_env, scripted_judge_server
from test_evaluate import look_and_revise, rows_of
from test_benchmarks import tiny_tsv

SECRET = "sk-hostile-SECRET-42"
HI = [{"role": "user", "content": "hi"}]


def script(args, name, env=None, timeout=120):
    """demo.py, or a module such as verdict_lab.evaluate (test_demo.command), with `env` over the
    environment."""
    return subprocess.run(
        [*command(name), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=script_env(env),
    )


# --------------------------------------------------------------------- fault 3: a zoom box of 1e309


def infinite_box(body, path):
    if role_of(body["messages"]) == "zoom":
        return chat_response('{"boxes": [[1e309, 0, 500, 500]]}')
    return look_and_revise(body, path)


def test_a_zoom_box_of_1e309_keeps_the_row_and_a_cached_rerun_gives_the_same(tmp_path, loopback):
    path, _ = tiny_tsv(tmp_path)
    srv = loopback(infinite_box)
    out = tmp_path / "out"
    argv = [
        "--data",
        str(path),
        "--base-url",
        srv.url,
        "--out",
        str(out),
        "--seeds",
        "1",
        "--limit",
        "1",
    ]
    argv += ["--rules", "verdict", "--judge-mode", "plain,zoom", "--n", "2", "--max-steps", "1"]
    assert evaluate.main(argv) == 0
    rows = {r["method"]: r for r in rows_of(out)}
    assert list(rows) == ["verdict", "verdict+zoom"] and rows["verdict+zoom"]["error"] is None
    zoom = rows["verdict+zoom"]["trace"]["meta"]["judge_mode"]["zoom"]
    # Read, asked again, refused: the judge sees the full image each time.
    assert [(z["path"], z["why"]) for z in zoom] == [("full", "unreadable")] * 2
    sent = len(srv.requests)
    # The rows go, the cached replies stay: every chain runs from the cache.
    os.remove(out / "results.jsonl")
    assert evaluate.main(argv) == 0
    assert len(srv.requests) == sent and {r["method"]: r["pred"] for r in rows_of(out)} == {
        m: r["pred"] for m, r in rows.items()
    }


# ------------------------------------------------------------------------ faults 4, 15: the API key


def echoing_server(loopback):
    """A server whose 401 echoes the Authorization header it received (the key the client sent)."""
    holder = []
    srv = loopback(
        lambda body, path: (
            401,
            {"error": {"message": f"invalid: {holder[0].requests[-1].headers['Authorization']}"}},
        )
    )
    holder.append(srv)
    return srv


def live_args(tool, url, tmp_path):
    if tool == "demo.py":
        return [
            "--base-url",
            url,
            "--question",
            "q?",
            "--trace",
            str(tmp_path / "t.json"),
            "--plot",
            str(tmp_path / "p.png"),
        ]
    data = tmp_path / "d.jsonl"
    data.write_text(
        json.dumps({"id": "1", "question": "q?", "options": {"A": "a", "B": "b"}, "answer": "A"})
    )
    return ["--data", str(data), "--base-url", url, "--out", str(tmp_path / "out"), "--seeds", "1"]


@pytest.mark.parametrize("tool", ["demo.py", "verdict_lab.evaluate"])
@pytest.mark.parametrize("tail", ["\r\n", "\n", "\r", " \t"])
def test_a_key_read_with_its_line_end_is_sent_stripped_and_never_printed(
    tmp_path, loopback, tool, tail
):
    srv = echoing_server(loopback)
    out = script(live_args(tool, srv.url, tmp_path), tool, {"OPENAI_API_KEY": SECRET + tail})
    assert out.returncode == 2, out.stderr
    assert SECRET not in out.stdout + out.stderr and "***" in out.stderr
    sent = {r.headers.get("Authorization") for r in srv.requests if r.method == "POST"}
    assert sent == {f"Bearer {SECRET}"}  # the key without its line end
    assert len(out.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("tool", ["demo.py", "verdict_lab.evaluate"])
@pytest.mark.parametrize(
    "key", ["sk-\u20acuro-SECRET", "sk-\u201cquoted\u201d", "sk-in\x7fner", "sk-in\nner"]
)
def test_a_key_no_header_can_carry_stops_at_once_with_one_line(tmp_path, loopback, tool, key):
    srv = loopback(lambda body, path: chat_response("never"))
    out = script(live_args(tool, srv.url, tmp_path), tool, {"OPENAI_API_KEY": key})
    assert out.returncode == 2 and srv.chats == []
    assert out.stderr.startswith(f"{tool}: error: $OPENAI_API_KEY holds a character")
    assert len(out.stderr.splitlines()) == 1 and key.strip() not in out.stdout + out.stderr
    assert "sk-" not in out.stderr


def test_api_key_strips_and_refuses_without_showing_the_key(monkeypatch):
    monkeypatch.setenv("K", f"  {SECRET}\r\n")
    assert judges.api_key("K") == SECRET
    monkeypatch.setenv("K", " \r\n")
    assert judges.api_key("K") is None
    monkeypatch.setenv("K", SECRET + "\u2014")
    with pytest.raises(ValueError) as e:
        judges.api_key("K")
    assert "$K" in str(e.value) and SECRET not in str(e.value)
    with pytest.raises(ValueError):  # and before any call
        Client("http://127.0.0.1:9/v1", "m", api_key_env="K")


# ------------------------------------------------------------------ fault 7: a wall-clock --timeout


class Trickler:
    """A raw HTTP server on loopback that answers each connection one byte every `pace` seconds: the
    status line and headers (`head`), then a body of `body_bytes` bytes. It stops when the client
    goes away. `status_line` and `closing`: an HTTP/1.0 reply, or one that says Connection: close
    (the client then reads a socket its connection no longer holds)."""

    def __init__(
        self, pace=0.02, body_bytes=2000, head=True, status_line="HTTP/1.1 200 OK", closing=False
    ):
        self.pace, self.body_bytes, self.head = pace, body_bytes, head
        self.status_line, self.closing = status_line, closing
        self.stop, self.sent = threading.Event(), []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        self.sock.settimeout(0.1)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.recv(65536)
                body = json.dumps(chat_response("x" * self.body_bytes)).encode()
                close = "Connection: close\r\n" if self.closing else ""
                head = (
                    f"{self.status_line}\r\nContent-Type: application/json\r\n{close}"
                    f"Content-Length: {len(body)}\r\n\r\n"
                )
                data = head.encode() + body
                if not self.head:
                    conn.sendall(head.encode())
                    data = body
                n = 0
                try:
                    for n in range(len(data)):
                        if self.stop.wait(self.pace):
                            break
                        conn.sendall(data[n : n + 1])
                except OSError:  # the client shut the connection
                    pass
                self.sent.append(n)

    def close(self):
        self.stop.set()
        self.thread.join(10)
        self.sock.close()


@pytest.mark.parametrize(
    "head, status_line, closing",
    [
        (True, "HTTP/1.1 200 OK", False),
        (False, "HTTP/1.1 200 OK", False),
        (
            False,
            "HTTP/1.0 200 OK",
            False,
        ),  # a reply the server closes after: the socket leaves the connection
        (False, "HTTP/1.1 200 OK", True),
    ],
    ids=["trickled-headers", "trickled-body", "http-1.0-body", "connection-close-body"],
)
def test_timeout_bounds_the_whole_request_against_a_server_that_trickles(
    head, status_line, closing
):
    srv = Trickler(head=head, status_line=status_line, closing=closing)
    try:
        c = Client(srv.url, "m", timeout=0.5, retries=1, backoff=0.0)
        t0 = time.monotonic()
        with pytest.raises(EndpointError) as e:
            c.chat(HI)
        took = time.monotonic() - t0
        assert "timed out after 0.5 s" in str(e.value) and c.usage["requests"] == 2
        # Two attempts of 0.5 s each, and some slack; the server sends a byte every 0.02 s.
        assert took < 2 * 0.5 + 1.0
    finally:
        srv.close()


@pytest.mark.parametrize("timeout", [0, -1, math.nan, math.inf, 1e300])
def test_a_timeout_no_watchdog_can_wait_is_refused(timeout):
    with pytest.raises(ValueError, match=r"timeout must be > 0 seconds, got timeout="):
        Client("http://127.0.0.1:9/v1", "m", timeout=timeout)


def test_a_reply_body_over_max_body_once_unpacked_fails_at_once_with_one_line(
    loopback, monkeypatch
):
    # 8 MiB of JSON whitespace gzipped to a few kB: the bound counts the unpacked bytes, it stops
    # reading there, and retrying a server that sends such a reply cannot help.
    import gzip

    from verdict_lab import client as client_module

    monkeypatch.setattr(client_module, "MAX_BODY", 2**20)
    bomb = gzip.compress(b"{" + b" " * 8 * 2**20 + b"}")
    assert len(bomb) < 2**16
    srv = loopback(lambda body, path: (200, bomb, {"Content-Encoding": "gzip"}))
    client = Client(srv.url, "m", retries=3, sleep=lambda s: None)
    with pytest.raises(EndpointError) as e:
        client.chat([{"role": "user", "content": "hi"}])
    assert e.value.status == 200 and len(srv.chats) == 1 and "\n" not in str(e.value)
    assert e.value.message == (
        "the reply's body is over 1,048,576 bytes, the most a chat completion may hold here "
        "(verdict_lab.client.MAX_BODY)"
    )
    small = gzip.compress(json.dumps(chat_response("ok")).encode())
    srv = loopback(lambda body, path: (200, small, {"Content-Encoding": "gzip"}))
    reply = Client(srv.url, "m").chat([{"role": "user", "content": "hi"}])
    assert reply["choices"][0]["message"]["content"] == "ok"


def test_a_reply_within_the_timeout_is_not_cut_and_the_connection_is_reused(loopback):
    srv = loopback(lambda body, path: chat_response("fine"))
    c = Client(srv.url, "m", timeout=5)
    for _ in range(20):
        assert c.chat(HI)["choices"][0]["message"]["content"] == "fine"
    assert c.usage["requests"] == 20 and c.usage["replies"] == 20


# ------------------------------------------------------------------------ fault 8: a lone surrogate


def test_cache_key_takes_a_lone_surrogate_and_keeps_every_other_key():
    payload = {"model": "m", "messages": [{"role": "user", "content": "caf\u00e9 \U0001f600"}]}
    # the key of ordinary text is unchanged: sha256 of the canonical JSON's plain UTF-8
    canon = json.dumps(
        {"request": payload}, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    assert cache_key(payload, "e") == hashlib.sha256(canon.encode()).hexdigest()
    lone = {"model": "m", "messages": [{"role": "user", "content": "a\ud800b"}]}
    other = {"model": "m", "messages": [{"role": "user", "content": "a\udc00b"}]}
    assert len({cache_key(lone, "e"), cache_key(other, "e"), cache_key(payload, "e")}) == 3


@pytest.mark.parametrize(
    "reply",
    [
        TEXT,  # the text judges cannot read this reply, and abstain
        judges.JSON,  # the json judges read the reason from the reply's JSON, "\\ud800" and all
    ],
    ids=["text", "json"],
)
def test_a_lone_surrogate_in_a_reply_is_replaced_and_the_chain_runs(tmp_path, loopback, reply):
    def server(body, path):
        role = role_of(body["messages"])
        if role == "reasoner":
            return (
                b'{"choices": [{"message": {"role": "assistant", '
                b'"content": "Final answer: B \\ud800"}}]}'
            )
        return chat_response(json.dumps({"reason": "ok \ud800", "score": 7}))

    srv = loopback(server)
    cache = Cache(tmp_path / "c.sqlite")
    c = Client(srv.url, "m", cache=cache)
    trace = loop.run(
        "q\ud800?", Reasoner(c), make_judges(c, reply=reply), verdict.Config(n=1, max_steps=2)
    )
    assert trace.answer == "B \ufffd"  # U+FFFD for the lone surrogate
    # What the replies made is text: it encodes to UTF-8.
    json.dumps(trace.to_dict()["steps"], ensure_ascii=False).encode("utf-8")
    sent = len(srv.requests)
    again = loop.run(
        "q\ud800?", Reasoner(c), make_judges(c, reply=reply), verdict.Config(n=1, max_steps=2)
    )
    assert len(srv.requests) == sent and again.to_dict() == trace.to_dict()


# --------------------------------------------------------------------- fault 9: demo's output paths


OUTPUT_PATHS = {  # (flag, value) -> how demo.py's one line starts
    ("--trace", "missing/t.json"): "--trace: cannot write",
    ("--plot", "missing/p.png"): "--plot: cannot write",
    ("--trace", "."): "--trace: '.' is a directory",
    ("--plot", "p.nosuchformat"): "--plot: 'p.nosuchformat' has no image file extension",
}


@pytest.mark.parametrize("flag, value", list(OUTPUT_PATHS))
def test_demo_checks_its_output_paths_before_any_call(tmp_path, loopback, flag, value):
    srv = loopback(scripted_judge_server)
    out = run_demo(
        ["--base-url", srv.url, "--question", "q?", flag, value], cwd=tmp_path, timeout=60
    )
    assert out.returncode == 2 and srv.requests == []
    says = OUTPUT_PATHS[flag, value]
    assert out.stderr.startswith(f"demo.py: error: {says}") and len(out.stderr.splitlines()) == 1
    assert not (tmp_path / "verdict_trace.json").exists() and not (tmp_path / "missing").exists()


# -------------------------------------------------------------------------- fault 13: cache entries


@pytest.mark.parametrize(
    "entry",
    [
        [1, 2],
        {},
        {"choices": []},
        {"choices": [{"message": {"content": None}}]},
        "text",
        {"choices": [{"message": "hi"}]},
    ],
)
def test_a_cache_entry_of_the_wrong_shape_is_one_cache_error_naming_the_file(
    tmp_path, loopback, entry
):
    srv = loopback(lambda body, path: chat_response("fresh"))
    path = tmp_path / "c.sqlite"
    cache = Cache(path)
    c = Client(srv.url, "m", cache=cache)
    cache.put(cache_key({"model": "m", "messages": HI}, c.base_url), entry)
    with pytest.raises(CacheError) as e:
        c.chat(HI)
    assert (
        str(path) in str(e.value) and "not a chat completion" in str(e.value) and srv.requests == []
    )


def test_evaluate_with_a_damaged_cache_entry_says_so_in_one_line(tmp_path, loopback):
    srv = loopback(scripted_judge_server)
    path = tmp_path / "c.sqlite"
    args = live_args("verdict_lab.evaluate", srv.url, tmp_path)
    args += ["--cache", str(path), "--max-steps", "1", "--rules", "verdict"]
    script([*args, "--out", str(tmp_path / "first")], "verdict_lab.evaluate")
    cache = Cache(path)
    keys = cache._db.execute("SELECT key FROM responses").fetchall()
    assert keys  # the first run cached its replies
    for (key,) in keys:
        cache.put(key, {"choices": [{"message": {"content": None}}]})
    cache.close()
    out = script([*args, "--out", str(tmp_path / "second")], "verdict_lab.evaluate")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    said = out.stderr.splitlines()[-1]
    assert said.startswith("verdict_lab.evaluate: error: the response cache cannot be used: ")
    assert f"{path}: entry " in said and "the cache is damaged" in said


# --------------------------------------------------------------------------- fault 20: huge timings


def huge_report(body, path):
    r = chat_response(json.dumps({"reason": "ok", "score": 7}))
    r["timings"] = {"cache_n": 10**400, "prompt_n": 5, "prompt_ms": 1e308, "predicted_ms": 1.7e308}
    r["usage"]["prompt_tokens_details"] = {"cached_tokens": 10**30}
    r["usage"]["completion_tokens"] = 10**30
    return r


def test_huge_reported_figures_are_malformed_and_the_counters_stay_finite(loopback):
    srv = loopback(huge_report)
    c = Client(srv.url, "m")
    for i in range(3):
        c.chat([{"role": "user", "content": f"hi {i}"}])
    assert all(math.isfinite(v) for v in c.usage.values())
    assert c.usage["timings_prompt_ms"] == 0.0 and c.usage["completion_tokens"] == 0
    assert c.usage["cache_reports"] == 0 and c.usage["timings_reports"] == 0
    # and a chain metered on them runs (verdict.run refuses a non-finite meter reading)
    trace = loop.run(
        "q",
        Reasoner(c),
        make_judges(c),
        verdict.Config(n=1, max_steps=1),
        meter=lambda: total_usage([c]),
    )
    assert trace.steps and all(math.isfinite(v) for v in trace.totals()["usage"].values())


def test_reported_figures_within_range_are_kept():
    r = {
        "usage": {"prompt_tokens": 10**15, "completion_tokens": -1},
        "timings": {"prompt_ms": 1e15},
    }
    assert reported_usage(r) == {"prompt_tokens": 10**15, "completion_tokens": 0}
    assert reported_cache(r)["prompt_ms"] == 1e15
    r["timings"]["prompt_ms"] = 1.0000001e15
    assert reported_cache(r)["prompt_ms"] is None
