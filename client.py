"""The HTTP side of VERDICT's agents: one client for any OpenAI-compatible endpoint, its response
cache, its errors, and the command-line flags that point the demo and the harness at an endpoint.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026. The paper's reasoner and agents are model calls; this module
is what the paper leaves to an implementation:

- Client: POST {base_url}/chat/completions with bounded retries (exponential backoff with jitter, only
  on connection errors, timeouts, 429 with Retry-After, 5xx and malformed replies), a timeout on every
  request, identical concurrent calls merged into one request, and the API key read from an environment
  variable at each request, never kept, printed or logged;
- Cache: an on-disk sqlite response cache keyed on endpoint and request, so a re-run is free and a
  crashed run resumes (integrity checked on opening; WAL with group commit);
- add_endpoint_args, clients_from_args, key_warning, Parser: the flags and argument parser of demo.py and
  evaluate.py.

Works with vLLM, SGLang, llama.cpp's llama-server, llama-cpp-python's server and hosted APIs.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import random
import socket
import threading
import time
import urllib.parse
from typing import Callable

import requests
import urllib3

from cache import Cache, CacheError, cache_key  # noqa: F401 (CacheError: callers catch client.CacheError)
from replies import one_line, reported_cache, reported_usage, shape_problem, whole_text

MAX_WAIT = 60.0  # seconds; no single retry waits longer, whatever Retry-After says
DEFAULT_KEY_ENV = "OPENAI_API_KEY"  # the variable the API key is read from, unless told otherwise


class EndpointError(RuntimeError):
    """The endpoint failed. `status` is the HTTP status, or None for a connection error, a timeout
    or a malformed body; `message` is the server's own message, with the API key redacted."""

    def __init__(self, url: str, status: int | None, message: str):
        self.url, self.status, self.message = url, status, message
        super().__init__(
            f"{url}: {f'HTTP {status}' if status is not None else 'no valid response'}: {message}"
        )


def _server_message(r: requests.Response) -> str:
    """The message of an error body: OpenAI's {"error": {"message": ...}}, vLLM's {"message": ...}, or text;
    unabridged (Client._error redacts and shortens it)."""
    try:
        body = r.json()
    except ValueError:
        return r.text.strip() or r.reason or "(empty body)"
    err = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(err, dict):
        err = err.get("message") or err.get("detail") or err
    return err if isinstance(err, str) else json.dumps(err)


def _retry_after(r: requests.Response) -> float | None:
    """Retry-After in seconds (the HTTP-date form is not honoured), capped at MAX_WAIT."""
    try:
        wait = float(r.headers.get("Retry-After", ""))
    except ValueError:
        return None
    return min(wait, MAX_WAIT) if wait >= 0 else None


def api_key(name: str) -> str | None:
    """The API key in $name without the whitespace around it (a key read from a CRLF file ends in "\\r\\n",
    which no key contains); None when $name is unset or blank. ValueError, naming the variable and never
    the key, when what is left cannot go into an HTTP header: a control character, or a character outside
    Latin-1 (a typographic quote or dash pasted in, say), which no request could carry."""
    key = os.environ.get(name, "").strip()
    if any(ord(c) < 32 or ord(c) == 127 or ord(c) > 255 for c in key):  # unsendable in a header
        raise ValueError(
            f"${name} holds a character that an HTTP header cannot carry (a control character, or one "
            "outside Latin-1 such as a typographic quote); the key is not shown: set the variable again"
        )
    return key or None


def _redactor(name: str) -> Callable[[str], str]:
    """text with the key in $name (as sent, and as stored, surrounding whitespace included) replaced by
    ***; never raises."""
    raw = os.environ.get(name, "")
    keys = sorted({k for k in (raw, raw.strip()) if k}, key=len, reverse=True)  # the longer form first

    def redact(text: str) -> str:
        for k in keys:
            text = text.replace(k, "***")
        return text

    return redact


def check_base_url(url) -> str:
    """url without its trailing "/", if it is http(s)://HOST[:PORT][/PATH]; else ValueError naming it: such a
    URL is wrong for good, so it fails before any request rather than after a round of retries."""
    try:
        parts = urllib.parse.urlsplit(url) if isinstance(url, str) else None
        port_ok = parts is None or parts.port is None or parts.port > 0  # .port raises on a malformed port
    except ValueError:
        parts, port_ok = None, False
    if (
        parts is None
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or not port_ok
        or any(c.isspace() for c in parts.netloc)
    ):
        raise ValueError(
            f"the endpoint URL must be http:// or https:// with a host, e.g. http://127.0.0.1:8000/v1; "
            f"got {url!r}"
        )
    return url.rstrip("/")


class _Flight:
    """One request in flight: its outcome, once known, for every identical call waiting on it."""

    def __init__(self):
        self.done = threading.Event()
        self.response, self.source, self.error = None, None, None  # source: "server" or "cache"

    def finish(self, response: dict | None, source: str | None, error: BaseException | None = None) -> None:
        self.response, self.source, self.error = response, source, error
        self.done.set()


class InFlight:
    """The requests a client and its forks have in flight, by cache key. An identical call made meanwhile
    waits for the first one's outcome instead of sending a request of its own."""

    def __init__(self):
        self._lock, self._flights = threading.Lock(), {}

    def join(self, key: str) -> tuple:
        """(flight, True) for the first call of `key`, which must end it with leave(); (flight, False) for a
        follower."""
        with self._lock:
            flight = self._flights.get(key)
            if flight is None:
                flight = self._flights[key] = _Flight()
                return flight, True
            return flight, False

    def leave(self, key: str) -> None:
        with self._lock:
            del self._flights[key]


_current = threading.local()  # .deadline: the _Deadline of the request this thread is making, if any


class _Deadline:
    """The wall-clock bound of one request (Client.timeout): a watchdog thread that, `seconds` after the
    request starts, shuts the socket of its connection down, so that no read outlasts it however slowly the
    server trickles its bytes (requests' own timeout bounds each socket read, not the request). The
    connection is the one _Pool hands this thread while the deadline is current, until it goes back to the
    pool. `expired` tells the caller that a failure, or a reply cut short, was the deadline's doing."""

    def __init__(self, seconds: float):
        self.seconds, self.expired, self.conn = seconds, False, None
        self._over, self._lock = threading.Event(), threading.Lock()

    def __enter__(self) -> "_Deadline":
        _current.deadline = self
        threading.Thread(target=self._watch, daemon=True, name="verdict-deadline").start()
        return self

    def __exit__(self, *exc) -> None:
        _current.deadline = None
        with self._lock:
            self._over.set()

    def connection(self, conn) -> None:
        """Called by _Pool: this request's connection."""
        with self._lock:
            self.conn = conn

    def _watch(self) -> None:
        if self._over.wait(self.seconds):  # the request ended in time
            return
        while True:  # shut the connection down once it has a socket, unless the request ends first
            with self._lock:
                if self._over.is_set():
                    return
                sock = getattr(self.conn, "sock", None)
                if sock is not None:
                    self.expired = True  # before the shutdown: the request's thread reads it on waking
                    try:
                        sock.shutdown(socket.SHUT_RDWR)  # the blocked read returns at once
                    except OSError:  # already closed
                        pass
                    return
            if self._over.wait(0.01):  # connecting (the connect timeout bounds it), or the reply is read
                return


class _Pool(urllib3.HTTPConnectionPool):
    """A connection pool that tells the current _Deadline which connection its request uses."""

    def _get_conn(self, timeout=None):
        conn = super()._get_conn(timeout)
        deadline = getattr(_current, "deadline", None)
        if deadline is not None:
            deadline.connection(conn)
        return conn

    def _put_conn(self, conn) -> None:
        deadline = getattr(_current, "deadline", None)
        if deadline is not None:  # the reply is read: the connection goes back to the pool, not ours to shut
            deadline.connection(None)
        super()._put_conn(conn)


class _HTTPSPool(_Pool, urllib3.HTTPSConnectionPool):
    pass


class _Adapter(requests.adapters.HTTPAdapter):
    """requests' adapter with _Pool's connection pools, so that a _Deadline can end a request."""

    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _Pool, "https": _HTTPSPool}

    def proxy_manager_for(self, *args, **kwargs):
        manager = super().proxy_manager_for(*args, **kwargs)
        manager.pool_classes_by_scheme = {"http": _Pool, "https": _HTTPSPool}
        return manager


class Client:
    """POST {base_url}/chat/completions on a requests.Session, with bounded retries.

    `timeout` bounds each attempt in wall-clock time, from sending the request to the last byte of the
    reply (_Deadline), whatever the server's pace.

    Retries (at most `retries`, waiting backoff·2^attempt·U(0.5, 1) or Retry-After) happen only on
    connection errors, timeouts, 429, 5xx, and a 200 whose body is malformed (not JSON, no choices, a
    choice without string content); any other 4xx and an unusable URL raise EndpointError at once. The API
    key is read from os.environ[api_key_env] (api_key: stripped, and checked once here, so a key no header
    can carry is a ValueError before any call) at each request and never kept, printed or logged; every
    EndpointError message goes through _error, which removes it.

    Identical calls in flight at the same time (the same cache key, on this client or its forks) send one
    request and share its response (or its error). on_chat(), when given, is called before every chat
    call, merged ones included; an exception it raises refuses the call (harness/chains.py's call budget).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = DEFAULT_KEY_ENV,
        timeout: float = 120.0,
        retries: int = 4,
        cache: Cache | None = None,
        backoff: float = 0.5,
        sleep: Callable = time.sleep,
        on_chat: Callable[[], None] | None = None,
        in_flight: InFlight | None = None,
    ):
        if not (isinstance(retries, int) and retries >= 0):
            raise ValueError(f"retries must be an integer >= 0, got retries={retries!r}")
        if not (0 < timeout <= threading.TIMEOUT_MAX and backoff >= 0):  # a watchdog waits `timeout`
            raise ValueError(
                f"need timeout > 0 (and at most {threading.TIMEOUT_MAX:g} s) and backoff >= 0, "
                f"got timeout={timeout!r}, backoff={backoff!r}"
            )
        self.base_url, self.model, self.api_key_env = check_base_url(base_url), model, api_key_env
        api_key(api_key_env)  # a key no request can carry stops here, before any call
        self.timeout, self.retries, self.cache, self.backoff, self._sleep = (
            timeout,
            retries,
            cache,
            backoff,
            sleep,
        )
        self.on_chat, self.in_flight = on_chat, in_flight or InFlight()
        self.replicas, self.headers = 1, {}  # data-parallel replicas (--dp-replicas); set by pin()
        self.session = requests.Session()
        self.session.mount("http://", _Adapter(pool_maxsize=64))  # one connection per thread
        self.session.mount("https://", _Adapter(pool_maxsize=64))
        self._lock = threading.Lock()
        self._usage = dict(
            requests=0,
            calls=0,
            cache_hits=0,
            merged=0,
            replies=0,
            prompt_tokens=0,
            completion_tokens=0,
            call_tokens=0,
            cache_reports=0,
            cached_tokens=0,
            computed_prompt_tokens=0,
            timings_reports=0,
            timings_cache_n=0,
            timings_prompt_n=0,
            timings_prompt_ms=0.0,
            timings_predicted_ms=0.0,
        )

    def __repr__(self) -> str:
        return f"Client(base_url={self.base_url!r}, model={self.model!r})"

    def fork(self, on_chat: Callable[[], None] | None = None) -> "Client":
        """A client for the same endpoint, model, settings, cache, replica count and requests in flight, with
        its own session, counters and pinning (none)."""
        forked = Client(
            self.base_url,
            self.model,
            self.api_key_env,
            self.timeout,
            self.retries,
            self.cache,
            self.backoff,
            self._sleep,
            on_chat,
            self.in_flight,
        )
        forked.replicas = self.replicas
        return forked

    def close(self) -> None:
        self.session.close()

    @property
    def usage(self) -> dict:
        """requests: HTTP attempts; calls: chat calls (each one answered, merged or failed); cache_hits: calls
        answered by the cache; merged: calls answered by an identical call in flight at the same time (they
        send nothing); replies: valid responses from the server; prompt_tokens, completion_tokens: what the
        server reported for those replies (what this process paid for); call_tokens: prompt + completion
        tokens of every response returned, cached and merged ones too (what the calls cost, had nothing been
        cached or merged). A successful call is exactly one of a reply, a cache hit or a merged call.
        What the server's own prefix cache reused, measured on the replies (reported_cache): cache_reports:
        the replies that reported cached_tokens; cached_tokens: their sum; computed_prompt_tokens:
        Σ (prompt_tokens − cached_tokens) over those replies, the prompt tokens the server computed;
        timings_reports: the replies with llama-server's timings; timings_cache_n, timings_prompt_n: their
        sums of cache_n and prompt_n; timings_prompt_ms, timings_predicted_ms: their sums of prompt_ms and
        predicted_ms (server time computing prompts and generating replies)."""
        with self._lock:
            return dict(self._usage)

    def _count(self, **inc) -> None:
        with self._lock:
            for k, v in inc.items():
                self._usage[k] += v

    def _error(self, url: str, status: int | None, message: str) -> EndpointError:
        """The one way this client makes an EndpointError: the API key removed from the URL and the message,
        before the message is folded onto one line and shortened (so no part of the key survives the cut)."""
        redact = _redactor(self.api_key_env)
        return EndpointError(redact(url), status, one_line(redact(message)))

    def chat(self, messages: list, **params) -> dict:
        """The response JSON of one chat completion; parameters set to None are not sent."""
        if self.on_chat is not None:
            self.on_chat()
        payload = {
            "model": self.model,
            "messages": messages,
            **{k: v for k, v in params.items() if v is not None},
        }
        self._count(calls=1)
        key = cache_key(payload, self.base_url)
        flight, first = self.in_flight.join(key)
        if not first:  # an identical call is in flight: its outcome is this call's
            flight.done.wait()
            if flight.error is not None:
                raise flight.error
            self._count(
                call_tokens=sum(reported_usage(flight.response).values()),
                **{"cache_hits" if flight.source == "cache" else "merged": 1},
            )
            return copy.deepcopy(flight.response)
        try:
            response, source = self._answer(key, payload)
            flight.finish(response, source)
            return response
        except BaseException as e:
            flight.finish(
                None,
                None,
                e
                if isinstance(e, Exception)
                else self._error(
                    self.base_url, None, "the identical call this one waited for was interrupted"
                ),
            )
            raise
        finally:
            self.in_flight.leave(key)

    def _answer(self, key: str, payload: dict) -> tuple:
        """(response, "cache") from the cache, else (response, "server") from the endpoint, then cached."""
        hit = self.cache.get(key) if self.cache is not None else None
        if hit is not None:
            if problem := shape_problem(hit):  # valid JSON, but not what put() stores: a damaged entry
                raise CacheError(
                    f"{self.cache.path}: entry {key[:16]} is not a chat completion "
                    f"({one_line(problem, 80)}); the cache is damaged: delete it or choose another file"
                )
            hit = whole_text(hit)  # an entry stored before lone surrogates were replaced
            self._count(cache_hits=1, call_tokens=sum(reported_usage(hit).values()))
            return hit, "cache"
        response = self._post(payload)
        tokens, reuse = reported_usage(response), reported_cache(response)
        self._count(replies=1, call_tokens=sum(tokens.values()), **tokens, **_reuse_counts(tokens, reuse))
        if self.cache is not None:
            self.cache.put(key, response)
        return response, "server"

    def _post(self, payload: dict) -> dict:
        url = f"{self.base_url}/chat/completions"
        for attempt in range(self.retries + 1):
            wait = self.backoff * 2**attempt * random.uniform(0.5, 1.0)
            self._count(requests=1)
            body, error, told = self._attempt(url, payload)
            if body is not None:
                return body
            if attempt < self.retries:
                self._sleep(min(wait if told is None else told, MAX_WAIT))
        raise error

    def _attempt(self, url: str, payload: dict) -> tuple:
        """One request: (body, None, None) for a valid reply; (None, EndpointError, Retry-After or None) for a
        failure worth retrying; EndpointError raised at once for one that retrying cannot help."""
        try:
            key = api_key(self.api_key_env)
        except ValueError as e:  # the variable changed since __init__ checked it
            raise self._error(url, None, str(e)) from None
        deadline = _Deadline(self.timeout)
        try:
            with deadline:  # the whole request, not each read (which `timeout=` bounds as well)
                r = self.session.post(
                    url,
                    json=payload,
                    headers={**self.headers, **({"Authorization": f"Bearer {key}"} if key else {})},
                    timeout=self.timeout,
                )
        except (
            requests.exceptions.InvalidURL,
            requests.exceptions.InvalidSchema,
            requests.exceptions.MissingSchema,
        ) as e:
            raise self._error(url, None, f"unusable URL: {e}") from None
        except requests.RequestException as e:  # connection refused, reset, DNS, a read timed out, ...
            if deadline.expired or isinstance(e, requests.Timeout):
                return None, self._error(url, None, f"timed out after {self.timeout:g} s"), None
            return None, self._error(url, None, f"connection failed: {e}"), None
        if deadline.expired:  # a reply cut short by the deadline is no reply
            return None, self._error(url, None, f"timed out after {self.timeout:g} s"), None
        if r.status_code == 429 or r.status_code >= 500:  # transient: wait as told, else back off
            return None, self._error(url, r.status_code, _server_message(r)), _retry_after(r)
        if r.status_code >= 400:  # the request itself is wrong
            raise self._error(url, r.status_code, _server_message(r))
        body, problem = _chat_body(r)
        return body, None if problem is None else self._error(url, None, problem), None


def usage_change(before: dict, after: dict) -> dict:
    """after − before, counter by counter (Client.usage read twice around some calls; a counter missing from
    `before` counts from 0): what those calls cost."""
    return {k: v - before.get(k, 0) for k, v in after.items()}


def total_usage(clients) -> dict:
    """The usage counters of the distinct clients among `clients`, summed (a client listed twice counts
    once)."""
    distinct = list({id(c): c for c in clients}.values())
    return {k: sum(c.usage[k] for c in distinct) for k in distinct[0].usage}


def _reuse_counts(tokens: dict, reuse: dict) -> dict:
    """Client.usage's increments for one reply's prefix-cache report (reported_cache)."""
    counts = {}
    if reuse["cached_tokens"] is not None:
        counts.update(
            cache_reports=1,
            cached_tokens=reuse["cached_tokens"],
            computed_prompt_tokens=tokens["prompt_tokens"] - reuse["cached_tokens"],
        )
    if reuse["cache_n"] is not None and reuse["prompt_n"] is not None:
        counts.update(timings_reports=1, timings_cache_n=reuse["cache_n"], timings_prompt_n=reuse["prompt_n"])
        counts.update(
            {f"timings_{k}": reuse[k] for k in ("prompt_ms", "predicted_ms") if reuse[k] is not None}
        )
    return counts


def _chat_body(r: requests.Response) -> tuple:
    """(body, None) if the body is a chat completion (replies.shape_problem), its lone surrogates replaced
    (replies.whole_text); else (None, what is wrong), unabridged (the caller redacts and shortens it)."""
    try:
        body = r.json()
    except ValueError:
        return None, f"HTTP {r.status_code} body is not JSON: {r.text}"
    problem = shape_problem(body)
    if problem == "response has no choices" and isinstance(body, dict) and "error" in body:
        problem += f" (server said: {_server_message(r)})"
    return (None, problem) if problem else (whole_text(body), None)


RANK_HEADER = "X-data-parallel-rank"  # vLLM's request header: the data-parallel replica to serve it


def dp_rank(key: str, seed: int, replicas: int) -> int:
    """The replica a chain is pinned to: sha256 of its item's key and seed, modulo the replica count (stable
    across runs and processes, unlike hash())."""
    return int(hashlib.sha256(f"{key}\x1f{seed}".encode("utf-8", "surrogatepass")).hexdigest(), 16) % replicas


def pin(clients, key: str, seed: int) -> None:
    """Send every request of `clients` (one chain's) to one data-parallel replica, dp_rank(key, seed), in the
    X-data-parallel-rank header, so the chain's requests find its prefixes in that replica's cache; nothing
    when a client has one replica. vLLM's front end (--data-parallel-size K) otherwise routes by load and a
    step's requests scatter over the replicas' caches."""
    for c in {id(c): c for c in clients}.values():
        c.headers = {RANK_HEADER: str(dp_rank(key, seed, c.replicas))} if c.replicas > 1 else {}
