"""The HTTP side of VERDICT's agents: one client for any OpenAI-compatible endpoint, its response
cache, its errors, and the command-line flags that point the demo and the harness at an endpoint.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026. The paper's reasoner and agents are model calls; this module
is what the paper leaves to an implementation:

- Client: POST {base_url}/chat/completions with bounded retries (exponential backoff with jitter, only
  on connection errors, timeouts, 429 with Retry-After, and 5xx), a timeout on every request, and the
  API key read from an environment variable at each request, never kept, printed or logged;
- Cache: an on-disk sqlite response cache, so a re-run is free and a crashed run resumes;
- add_endpoint_args, clients_from_args, Parser: the flags and argument parser of demo.py and evaluate.py.

Works with vLLM, SGLang, llama.cpp's llama-server, llama-cpp-python's server and hosted APIs.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable

import requests

CACHE_FORMAT = "verdict-cache/1"
MAX_WAIT = 60.0  # seconds; no single retry waits longer, whatever Retry-After says


class EndpointError(RuntimeError):
    """The endpoint failed. `status` is the HTTP status, or None for a connection error, a timeout
    or a malformed body; `message` is the server's own message, with the API key redacted."""

    def __init__(self, url: str, status: int | None, message: str):
        self.url, self.status, self.message = url, status, message
        super().__init__(f"{url}: {f'HTTP {status}' if status is not None else 'no valid response'}: {message}")


def one_line(text: Any, limit: int = 300) -> str:
    """text on one line (whitespace runs folded), cut to `limit` characters with "..." when longer."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + "..."


def _server_message(r: requests.Response) -> str:
    """The message of an error body: OpenAI's {"error": {"message": ...}}, vLLM's {"message": ...}, or text."""
    try:
        body = r.json()
    except ValueError:
        return one_line(r.text) or r.reason or "(empty body)"
    err = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(err, dict):
        err = err.get("message") or err.get("detail") or err
    return one_line(err if isinstance(err, str) else json.dumps(err))


def _retry_after(r: requests.Response) -> float | None:
    """Retry-After in seconds (the HTTP-date form is not honoured), capped at MAX_WAIT."""
    try:
        wait = float(r.headers.get("Retry-After", ""))
    except ValueError:
        return None
    return min(wait, MAX_WAIT) if wait >= 0 else None


class CacheError(RuntimeError):
    """The response cache cannot be used (corrupt, of another format, locked). Not a ValueError on purpose:
    it is never one item's problem, and a harness must stop on it rather than score the item wrong."""


def cache_key(payload: dict) -> str:
    """sha256 over the canonical JSON of a request (model, messages, sampling parameters, n, seed),
    with every data URL (image) replaced by its own sha256."""
    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items()}
        if isinstance(x, list):
            return [strip(v) for v in x]
        if isinstance(x, str) and x.startswith("data:"):
            return "sha256:" + hashlib.sha256(x.encode()).hexdigest()
        return x
    canon = json.dumps(strip(payload), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canon.encode()).hexdigest()


class Cache:
    """On-disk response cache (stdlib sqlite3): a re-run of the same requests is free and a crashed
    run resumes. Each response is committed in its own transaction; one Cache may serve many
    threads. A corrupt file, or one of another format, raises CacheError naming the file."""

    def __init__(self, path):
        self.path, self.hits, self.misses = Path(path), 0, 0
        self._lock = threading.Lock()
        self._db = None
        try:
            self._db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30.0)
            tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if not tables:  # a new file
                with self._db:
                    self._db.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT)")
                    self._db.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, response TEXT NOT NULL)")
                    self._db.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?)", (CACHE_FORMAT,))
            row = self._db.execute("SELECT value FROM meta WHERE name='format'").fetchone() if "meta" in tables or not tables else None
        except sqlite3.DatabaseError as e:
            self.close()
            raise CacheError(f"{self.path} is not a readable verdict cache ({e}); delete it or choose another file") from None
        if row is None or row[0] != CACHE_FORMAT:  # never read answers written under other rules
            self.close()
            raise CacheError(f"{self.path} holds format {row[0] if row else 'unknown'!r}, expected {CACHE_FORMAT!r}; "
                             "delete it or choose another file")

    def get(self, key: str) -> dict | None:
        with self._lock:
            row = self._sql("SELECT response FROM responses WHERE key=?", (key,)).fetchone()
            self.hits, self.misses = self.hits + (row is not None), self.misses + (row is None)
        if row is None:
            return None
        try:
            return json.loads(row[0])
        except ValueError:
            raise CacheError(f"{self.path}: entry {key[:16]} is not valid JSON; the cache is corrupt") from None

    def put(self, key: str, response: dict) -> None:
        with self._lock, self._db:  # one transaction: the entry is written whole or not at all
            self._sql("INSERT OR REPLACE INTO responses VALUES (?, ?)", (key, json.dumps(response)))

    def _sql(self, query: str, args: tuple):
        try:
            return self._db.execute(query, args)
        except sqlite3.DatabaseError as e:
            raise CacheError(f"{self.path} is not a readable verdict cache ({e})") from None

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


def reported_usage(response: dict) -> dict:
    """The token counts a response reports in its OpenAI "usage" object: {"prompt_tokens": int,
    "completion_tokens": int}, each 0 when the server sent none."""
    usage = response.get("usage") if isinstance(response.get("usage"), dict) else {}
    return {k: usage[k] if isinstance(usage.get(k), int) else 0 for k in ("prompt_tokens", "completion_tokens")}


def text_of(response: dict, i: int = 0) -> str:
    """The content of choice i of a chat completion (Client validates that it is a string)."""
    return response["choices"][i]["message"]["content"]


class Client:
    """POST {base_url}/chat/completions on a requests.Session, with bounded retries.

    Retries (at most `retries`, waiting backoff·2^attempt·U(0.5, 1) or Retry-After) happen only on
    connection errors, timeouts, 429 and 5xx; any other 4xx raises EndpointError at once. The API
    key is read from os.environ[api_key_env] at each request and never kept, printed or logged.
    on_chat(), when given, is called before every chat call; an exception it raises refuses the call
    (evaluate.py's call budget).
    """

    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY", timeout: float = 120.0,
                 retries: int = 4, cache: Cache | None = None, backoff: float = 0.5, sleep: Callable = time.sleep,
                 on_chat: Callable[[], None] | None = None):
        if not (isinstance(retries, int) and retries >= 0):
            raise ValueError(f"retries must be an integer >= 0, got retries={retries!r}")
        if not (timeout > 0 and backoff >= 0):
            raise ValueError(f"need timeout > 0 and backoff >= 0, got timeout={timeout!r}, backoff={backoff!r}")
        self.base_url, self.model, self.api_key_env = base_url.rstrip("/"), model, api_key_env
        self.timeout, self.retries, self.cache, self.backoff, self._sleep = timeout, retries, cache, backoff, sleep
        self.on_chat = on_chat
        self.session = requests.Session()
        self.session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=64))  # one connection per thread
        self.session.mount("https://", requests.adapters.HTTPAdapter(pool_maxsize=64))
        self._lock = threading.Lock()
        self._usage = dict(requests=0, calls=0, cache_hits=0, replies=0, prompt_tokens=0, completion_tokens=0,
                           call_tokens=0)

    def __repr__(self) -> str:
        return f"Client(base_url={self.base_url!r}, model={self.model!r})"

    def fork(self, on_chat: Callable[[], None] | None = None) -> "Client":
        """A client for the same endpoint, model, settings and cache, with its own session and counters."""
        return Client(self.base_url, self.model, self.api_key_env, self.timeout, self.retries, self.cache,
                      self.backoff, self._sleep, on_chat)

    def close(self) -> None:
        self.session.close()

    @property
    def usage(self) -> dict:
        """requests: HTTP attempts; calls: chat calls; cache_hits; replies: valid responses from the server;
        prompt_tokens, completion_tokens: what the server reported for those replies (what this process
        paid for); call_tokens: prompt + completion tokens of every response returned, cached ones too
        (what the calls cost, had nothing been cached)."""
        with self._lock:
            return dict(self._usage)

    def _count(self, **inc) -> None:
        with self._lock:
            for k, v in inc.items():
                self._usage[k] += v

    def _redact(self, text: str) -> str:
        key = os.environ.get(self.api_key_env)
        return text.replace(key, "***") if key else text

    def chat(self, messages: list, **params) -> dict:
        """The response JSON of one chat completion; parameters set to None are not sent."""
        if self.on_chat is not None:
            self.on_chat()
        payload = {"model": self.model, "messages": messages, **{k: v for k, v in params.items() if v is not None}}
        self._count(calls=1)
        key = cache_key(payload) if self.cache is not None else None
        if key is not None and (hit := self.cache.get(key)) is not None:
            self._count(cache_hits=1, call_tokens=sum(reported_usage(hit).values()))
            return hit
        response = self._post(payload)
        tokens = reported_usage(response)
        self._count(replies=1, call_tokens=sum(tokens.values()), **tokens)
        if key is not None:
            self.cache.put(key, response)
        return response

    def _post(self, payload: dict) -> dict:
        url = f"{self.base_url}/chat/completions"
        key = os.environ.get(self.api_key_env)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        for attempt in range(self.retries + 1):
            wait = self.backoff * 2 ** attempt * random.uniform(0.5, 1.0)
            self._count(requests=1)
            try:
                r = self.session.post(url, json=payload, headers=headers, timeout=self.timeout)
            except requests.Timeout:
                error = EndpointError(url, None, f"timed out after {self.timeout} s")
            except requests.RequestException as e:  # connection refused, reset, DNS, ...
                error = EndpointError(url, None, self._redact(f"connection failed: {one_line(e)}"))
            else:
                if r.status_code == 429 or r.status_code >= 500:  # transient: wait as told, else back off
                    error = EndpointError(url, r.status_code, self._redact(_server_message(r)))
                    told = _retry_after(r)
                    wait = wait if told is None else told
                elif r.status_code >= 400:  # the request itself is wrong: retrying cannot help
                    raise EndpointError(url, r.status_code, self._redact(_server_message(r)))
                else:
                    return self._validate(url, r)
            if attempt < self.retries:
                self._sleep(min(wait, MAX_WAIT))
        raise error

    def _validate(self, url: str, r: requests.Response) -> dict:
        """The body must be JSON with non-empty "choices", each holding a message with string content."""
        try:
            body = r.json()
        except ValueError:
            raise EndpointError(url, None, f"HTTP {r.status_code} body is not JSON: {one_line(r.text, 120)!r}") from None
        choices = body.get("choices") if isinstance(body, dict) else None
        if not isinstance(choices, list) or not choices:
            said = f" (server said: {self._redact(_server_message(r))})" if isinstance(body, dict) and "error" in body else ""
            raise EndpointError(url, None, f"response has no choices{said}")
        for c in choices:
            if not (isinstance(c, dict) and isinstance(c.get("message"), dict) and isinstance(c["message"].get("content"), str)):
                raise EndpointError(url, None, f"a choice has no message with string content: {one_line(c, 120)}")
        return body


# ----------------------------------------------------------------------------- command-line flags

class Parser(argparse.ArgumentParser):
    """The argument parser of demo.py and evaluate.py: a bad flag is one line on stderr and exit code 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def add_endpoint_args(parser) -> None:
    """The flags of a live run (used by demo.py and evaluate.py)."""
    g = parser.add_argument_group("endpoint (live mode)")
    g.add_argument("--base-url", help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1")
    g.add_argument("--model", default="default", help="the reasoner's model name")
    g.add_argument("--judge-model", help="the judges' model name (default: --model)")
    g.add_argument("--judge-base-url", help="the judges' endpoint (default: --base-url)")
    g.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key")
    g.add_argument("--timeout", type=float, default=120.0, help="seconds per request (120)")
    g.add_argument("--retries", type=int, default=4, help="retries on connection errors, timeouts, 429, 5xx (4)")
    g.add_argument("--concurrency", type=int, default=4,
                   help="requests in flight at once (4): demo.py overlaps a step's judge calls, evaluate.py runs items")
    g.add_argument("--cache", help="sqlite response cache file (demo.py: off by default; evaluate.py: OUT/cache.sqlite)")


def clients_from_args(args) -> tuple:
    """(reasoner client, judge client) from add_endpoint_args' flags; the same object when they agree."""
    cache = Cache(args.cache) if args.cache else None
    make = lambda url, model: Client(url, model, args.api_key_env, args.timeout, args.retries, cache)
    reasoner = make(args.base_url, args.model)
    judge_url, judge_model = args.judge_base_url or args.base_url, args.judge_model or args.model
    same = (judge_url, judge_model) == (args.base_url, args.model)
    return reasoner, reasoner if same else make(judge_url, judge_model)
