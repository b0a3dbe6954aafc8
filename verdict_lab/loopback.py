"""An OpenAI-compatible chat server on loopback, scripted by a handler: the simulated servers of the
studies (perf/) run on it, and the tests script it (tests/scripted.py).

VERDICT's reasoner and judges (judges.py) talk to any OpenAI-compatible /chat/completions
endpoint. This module stands one up on 127.0.0.1 at a free port, with no model behind it: a
handler function decides every answer, so a test can script replies, errors, delays and
malformed bodies, and then inspect exactly what the client sent.

    with LoopbackServer(lambda body, path: chat_response("Score: 0.8")) as srv:
        client = judges.Endpoint(srv.url, "any-model")    # srv.url == "http://127.0.0.1:PORT/v1"
        ...
        srv.requests[0].body["messages"]                  # every request, in arrival order

handler(body, path) -> (status, payload, headers) | (status, payload) | payload
    body is the parsed JSON request (None if absent or not JSON). payload is a dict (sent as
    JSON), a str (text/plain) or bytes (sent as is). A handler that raises gives a 500 with the
    exception in an OpenAI-shaped error. GET /v1/models and GET /health answer on their own.

user_text(body) reads a request's user text; layouts.role_of tells which of VERDICT's roles sent it.

Requests are served on threads, concurrently, like vLLM or llama-server with several slots;
`max_concurrent=1` serialises them, like llama-cpp-python's server.
"""

from __future__ import annotations

import contextlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, NamedTuple


class Request(NamedTuple):
    """One request as the server saw it.

    Indexable: r[0] is the path, r[1] the body, r[2] the headers.
    """

    path: str
    body: Any  # parsed JSON, or None
    headers: dict
    method: str
    raw: bytes  # the body's exact bytes


def chat_response(
    texts,
    prompt_tokens: int = 10,
    completion_tokens: int | None = None,
    logprobs=None,
    model: str = "loopback",
    finish_reason: str = "stop",
) -> dict:
    """An OpenAI-shaped chat completion with one choice per text.

    logprobs: None, or one logprobs object per choice (see token_logprobs). completion_tokens
    defaults to the number of whitespace-separated words in the texts.
    """
    texts = [texts] if isinstance(texts, str) else list(texts)
    choices = []
    for i, text in enumerate(texts):
        choice = {
            "index": i,
            "message": {"role": "assistant", "content": text},
            "finish_reason": finish_reason,
        }
        if logprobs is not None:
            choice["logprobs"] = logprobs[i]
        choices.append(choice)
    if completion_tokens is None:
        completion_tokens = sum(len(t.split()) for t in texts)
    return {
        "id": "chatcmpl-loopback",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def user_text(body) -> str:
    """The text of a chat request's user message (the second message), with or without images: its
    text parts joined."""
    content = body["messages"][1]["content"]
    if isinstance(content, str):
        return content
    return "".join(p["text"] for p in content if p.get("type") == "text")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # a handler still blocked in a test must not hang shutdown
    # The listen backlog: the default of 5 stalls many concurrent clients for about 1 s.
    request_queue_size = 64


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *args):  # keep test output clean
        pass

    def do_GET(self):
        self._serve("GET")

    def do_POST(self):
        self._serve("POST")

    def _serve(self, method: str) -> None:
        owner: LoopbackServer = self.server.owner
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        owner._record(Request(self.path, body, dict(self.headers), method, raw))
        if method == "GET":
            status, payload, headers = owner._get(self.path)
        else:
            try:
                # A handler with takes_headers is also given the request's headers.
                with owner._slots:
                    result = (
                        owner.handler(body, self.path, dict(self.headers))
                        if getattr(owner.handler, "takes_headers", False)
                        else owner.handler(body, self.path)
                    )
                status, payload, headers = (
                    (result + ({},))[:3] if isinstance(result, tuple) else (200, result, {})
                )
            except Exception as e:  # a broken handler shows up as a server error, with its reason
                status, payload, headers = (
                    500,
                    {
                        "error": {
                            "message": f"loopback handler failed: {type(e).__name__}: {e}",
                            "type": "server_error",
                        }
                    },
                    {},
                )
        if isinstance(payload, (dict, list)):
            data, ctype = json.dumps(payload).encode(), "application/json"
        elif isinstance(payload, str):
            data, ctype = payload.encode(), "text/plain; charset=utf-8"
        else:
            data, ctype = bytes(payload), "application/octet-stream"
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            for k, v in headers.items():
                self.send_header(k, str(v))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
            pass


class LoopbackServer:
    """A context manager running `handler` behind an OpenAI-compatible server on 127.0.0.1:PORT."""

    def __init__(
        self, handler: Callable, model: str = "loopback", max_concurrent: int | None = None
    ):
        self.handler, self.model = handler, model
        self.requests: list = []  # every Request, in arrival order
        self._lock = threading.Lock()
        self._slots = (
            threading.BoundedSemaphore(max_concurrent)
            if max_concurrent
            else contextlib.nullcontext()
        )
        self._httpd: _Server | None = None

    def __enter__(self) -> "LoopbackServer":
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join()
            self._httpd = None

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def chats(self) -> list:
        """The JSON bodies of the POSTs to /v1/chat/completions, in arrival order."""
        with self._lock:
            return [
                r.body
                for r in self.requests
                if r.method == "POST" and r.path.endswith("/chat/completions")
            ]

    def _record(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def _get(self, path: str) -> tuple:
        if path.rstrip("/").endswith("/models"):
            return (
                200,
                {
                    "object": "list",
                    "data": [{"id": self.model, "object": "model", "owned_by": "loopback"}],
                },
                {},
            )
        if path.rstrip("/") == "/health":
            return 200, {"status": "ok"}, {}
        return 404, {"error": {"message": f"no route for GET {path}", "type": "not_found"}}, {}
