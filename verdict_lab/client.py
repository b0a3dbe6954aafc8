"""The client long runs need: judges.Endpoint over a session that adds a wall-clock deadline,
identical requests in flight merged into one, the on-disk response cache, replica pinning and usage
counters.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026: the reasoner and the agents are model calls, and a
benchmark run makes hundreds of thousands of them. judges.py makes one call with bounded retries
through a session it is given; Client gives it one (_Session) that adds what a run of many chains
needs, so that a call runs judges.py's own code down to the session:

- a deadline: `timeout` bounds each attempt from sending it to the reply's last byte, however
  slowly the server trickles it (requests' own timeout bounds each socket read, not the request);
- merging: identical requests in flight at once (on a client and its forks) send one;
- the response cache (cache.py), keyed on the endpoint and the request;
- pinning: each chain's requests to one data-parallel replica (vLLM's X-data-parallel-rank header);
- counters: requests, calls, cache hits, tokens and the prefix-cache reuse the replies report
  (usage);
- when_sent: a hook called once a request is on its way, for a caller that must send some requests
  before others (speculate.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import socket
import threading
import time
import urllib.parse
from typing import Callable

import requests
import urllib3

from judges import DEFAULT_KEY_ENV, Endpoint, server_message, shape_problem, shown_url
from verdict_lab.text import one_line
from verdict_lab.cache import Cache, CacheError, cache_key
from verdict_lab.formats import SURROGATE, reported_cache, reported_usage, whole_text

MAX_BODY = 64 * 2**20  # bytes: the largest reply body read, after decompression
RANK_HEADER = "X-data-parallel-rank"  # vLLM's request header: the data-parallel replica to serve it


def check_base_url(url) -> str:
    """url without its trailing "/", if it is http(s)://HOST[:PORT][/PATH]; else ValueError naming
    it: such a URL is wrong for good, so it fails before any request rather than after a round of
    retries."""
    try:
        parts = urllib.parse.urlsplit(url) if isinstance(url, str) else None
        # Reading .port raises ValueError on a malformed port, hence the try.
        port_ok = parts is None or parts.port is None or parts.port > 0
    except ValueError:
        parts, port_ok = None, False
    if not (parts and parts.scheme in ("http", "https") and parts.hostname and port_ok) or any(
        c.isspace() for c in parts.netloc
    ):
        raise ValueError(
            "the endpoint URL must be http:// or https:// with a host, e.g. "
            f"http://127.0.0.1:8000/v1; got {url!r}"
        )
    return url.rstrip("/")


# ----------------------------------------------------------------------------- the deadline

# Its attribute .deadline is the _Deadline of the request this thread is making, if any, and .sent
# the hook of when_sent.
_current = threading.local()


@contextlib.contextmanager
def when_sent(hook: Callable[[], None]):
    """Within the block, hook() is called on this thread whenever one of its calls has its request
    on the way: the request's bytes written (the reply not yet awaited), or an identical request in
    flight joined. A call the response cache answers sends nothing and calls no hook."""
    outer, _current.sent = getattr(_current, "sent", None), hook
    try:
        yield
    finally:
        _current.sent = outer


def _sent() -> None:
    hook = getattr(_current, "sent", None)
    if hook is not None:
        hook()


class _Deadline:
    """The wall-clock bound of one request: a watchdog thread that, `seconds` after the request
    starts, shuts the socket of its connection down, so that no read outlasts it. The connection is
    the one _Pool hands this thread while the deadline is current, and its socket the last one it
    had (a reply the server will close after, HTTP/1.0 or "Connection: close", takes the socket from
    its connection: the deadline still holds it). `expired` tells that a failure, or a reply cut
    short, was the deadline's doing."""

    def __init__(self, seconds: float):
        self.seconds, self.expired, self.conn, self.sock = seconds, False, None, None
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
        """Called by _Pool: this request's connection (None: back in the pool) and its socket, if
        any."""
        with self._lock:
            self.conn, self.sock = conn, getattr(conn, "sock", None)

    def socket(self, sock) -> None:
        """Called by _Conn once connected: the request's socket."""
        with self._lock:
            self.sock = sock

    def _watch(self) -> None:
        if self._over.wait(self.seconds):  # the request ended in time
            return
        while True:  # shut the connection down once it has a socket, unless the request ends first
            with self._lock:
                if self._over.is_set():
                    return
                sock = getattr(self.conn, "sock", None) or self.sock
                if sock is not None:
                    # Set before the shutdown, since the request's thread reads it on waking.
                    self.expired = True
                    try:
                        sock.shutdown(socket.SHUT_RDWR)  # the blocked read returns at once
                    except OSError:  # already closed
                        pass
                    return
            # No socket yet: the request is connecting (the connect timeout bounds that), or its
            # reply has been read.
            if self._over.wait(0.01):
                return


class _Reporting:
    """A connection that tells the current _Deadline its socket once connected, and this thread's
    when_sent hook that a request is written."""

    def connect(self):
        super().connect()
        deadline = getattr(_current, "deadline", None)
        if deadline is not None:
            deadline.socket(self.sock)

    def getresponse(self, *args, **kwargs):
        _sent()  # urllib3 awaits the reply once the request is written
        return super().getresponse(*args, **kwargs)


class _Conn(_Reporting, urllib3.connection.HTTPConnection):
    pass


class _HTTPSConn(_Reporting, urllib3.connection.HTTPSConnection):
    pass


class _Pool(urllib3.HTTPConnectionPool):
    """A connection pool that tells the current _Deadline which connection its request uses."""

    ConnectionCls = _Conn

    def _get_conn(self, timeout=None):
        conn = super()._get_conn(timeout)
        deadline = getattr(_current, "deadline", None)
        if deadline is not None:
            deadline.connection(conn)
        return conn

    def _put_conn(self, conn) -> None:
        deadline = getattr(_current, "deadline", None)
        # The reply has been read, so the connection goes back to the pool, no longer ours to shut.
        if deadline is not None:
            deadline.connection(None)
        super()._put_conn(conn)


class _HTTPSPool(_Pool, urllib3.HTTPSConnectionPool):
    ConnectionCls = _HTTPSConn


class _Adapter(requests.adapters.HTTPAdapter):
    """requests' adapter with _Pool's connection pools, so that a _Deadline can end a request."""

    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _Pool, "https": _HTTPSPool}

    def proxy_manager_for(self, *args, **kwargs):
        manager = super().proxy_manager_for(*args, **kwargs)
        manager.pool_classes_by_scheme = {"http": _Pool, "https": _HTTPSPool}
        return manager


class _Reply:
    """A response as judges.Endpoint reads one (status_code, headers, reason, text, json()), made
    here: a reply from the cache or from an identical request, or a refusal with its meaning
    added. json() gives each caller its own copy of the body, parsed from its JSON text (a deep
    copy of a reply's nodes costs several times more)."""

    def __init__(self, status_code: int, body, headers=None):
        self.status_code, self.body, self.reason = status_code, body, ""
        self.headers = requests.structures.CaseInsensitiveDict(headers or {})
        self.text = json.dumps(body, ensure_ascii=False)

    def json(self):
        return json.loads(self.text)


def _whole_reply(status_code: int, body) -> _Reply:
    """The _Reply of a valid reply, with its lone surrogates replaced (whole_text) when its JSON
    text shows one: nearly every reply has none, and is serialised once."""
    reply = _Reply(status_code, body)
    return _Reply(status_code, whole_text(body)) if SURROGATE.search(reply.text) else reply


def _valid(r) -> dict | None:
    """The body of a response that judges.Endpoint takes as a reply, else None."""
    if r.status_code >= 300:
        return None
    try:
        body = r.json()
    except (ValueError, RecursionError):
        return None
    return None if shape_problem(body) else body


class _Flight:
    """One attempt in flight: its outcome, once known, for every identical attempt waiting on it."""

    def __init__(self):
        self.done = threading.Event()
        self.reply, self.source, self.error = None, None, None

    def finish(self, reply=None, source: str | None = None, error: BaseException | None = None):
        """reply: a response; source: "server" or "cache" for a valid reply, None for a failure;
        error: what the attempt raised instead."""
        self.reply, self.source, self.error = reply, source, error
        self.done.set()


class InFlight:
    """The requests a client and its forks have in flight, by cache key. An identical request made
    meanwhile waits for the first one's outcome instead of sending a request of its own."""

    def __init__(self):
        self._lock, self._flights = threading.Lock(), {}

    def join(self, key: str) -> tuple:
        """(flight, True) for the first request of `key`, which must end it with leave();
        (flight, False) for a follower."""
        with self._lock:
            flight = self._flights.get(key)
            if flight is None:
                flight = self._flights[key] = _Flight()
                return flight, True
            return flight, False

    def leave(self, key: str) -> None:
        with self._lock:
            del self._flights[key]


class _Session(requests.Session):
    """The session a Client gives its judges.Endpoint, whose post() is one attempt of a call.

    Endpoint.post retries a failed attempt with the same payload object, so an attempt that repeats
    the payload of this thread's last failed one is a retry; any other is a new call, which calls
    on_chat() first (an exception it raises refuses the call) and counts in `calls`. Then:
    - an identical attempt in flight at the same time (the same cache key, on this client or its
      forks) sends nothing and gets that attempt's outcome, a failure included;
    - the cache answers a request made before; else the request goes out within a wall-clock
      deadline of `timeout` seconds (an expired one raises requests.Timeout, a reply cut short by it
      included), and a valid reply is cached;
    - a valid reply comes back with its lone surrogates replaced (whole_text), and a refusal whose
      meaning HINTS knows comes back with that meaning added to its message.
    """

    def __init__(self, client: "Client", timeout: float):
        super().__init__()
        self.client, self.deadline = client, timeout
        self.failed = threading.local()  # .payload: this thread's last attempt's, if it failed
        self.mount("http://", _Adapter(pool_maxsize=64))  # one connection per thread
        self.mount("https://", _Adapter(pool_maxsize=64))

    def post(self, url, json=None, **kwargs):
        c = self.client
        if json is None or getattr(self.failed, "payload", None) is not json:  # a new call
            if c.on_chat is not None:
                c.on_chat()
            c._count(calls=1)
        self.failed.payload = json  # until this attempt gives a valid reply
        key = cache_key(json, c.base_url)
        flight, first = c.in_flight.join(key)
        if first:
            try:
                flight.finish(*self._answer(url, key, json, kwargs))
            except BaseException as e:
                why = "the identical request this one waited for was interrupted"
                flight.finish(
                    error=e if isinstance(e, Exception) else requests.ConnectionError(why)
                )
                raise
            finally:
                c.in_flight.leave(key)
        else:
            _sent()
            flight.done.wait()
            if flight.error is not None:
                raise flight.error
            if flight.source is not None:
                tokens = sum(reported_usage(flight.reply.body).values())
                c._count(
                    call_tokens=tokens,
                    **{"cache_hits" if flight.source == "cache" else "merged": 1},
                )
        if flight.source is not None:
            self.failed.payload = None
        return flight.reply

    def _answer(self, url: str, key: str, payload, kwargs: dict) -> tuple:
        """(reply, "cache") from the cache, (reply, "server") from the server, then cached, or
        (the failed response, None)."""
        c = self.client
        hit = c.cache.get(key) if c.cache is not None else None
        if hit is not None:
            # The entry is valid JSON but not what put() stores, so the cache is damaged.
            if problem := shape_problem(hit):
                raise CacheError(
                    f"{c.cache.path}: entry {key[:16]} is not a chat completion "
                    f"({one_line(problem, 80)}); the cache is damaged: delete it or choose "
                    "another file"
                )
            reply = _whole_reply(200, hit)
            c._count(cache_hits=1, call_tokens=sum(reported_usage(reply.body).values()))
            return reply, "cache"
        r = self.request("POST", url, json=payload, **kwargs)
        body = _valid(r)
        if body is None:
            return explained(r), None
        reply = _whole_reply(r.status_code, body)
        tokens, reuse = reported_usage(reply.body), reported_cache(reply.body)
        c._count(
            replies=1, call_tokens=sum(tokens.values()), **tokens, **_reuse_counts(tokens, reuse)
        )
        if c.cache is not None:
            c.cache.put(key, reply.body)
        return reply, "server"

    def request(self, method, url, **kwargs):
        response = self._within_deadline(method, url, **kwargs)
        payload = kwargs.get("json")
        if response.status_code == 500 and "Chunk not found" in response.text and payload:
            # llama-server's multimodal prompt cache can cut inside an image, and then every
            # request that reuses the slot's cache fails; the same request without the prompt
            # cache does not.
            kwargs["json"] = {**payload, "cache_prompt": False}
            response = self._within_deadline(method, url, **kwargs)
        return response

    def _within_deadline(self, *args, **kwargs):
        self.client._count(requests=1)
        deadline = _Deadline(self.deadline)
        try:
            with deadline:
                response = super().request(*args, stream=True, **kwargs)
                body = b""
                for chunk in response.iter_content(1 << 16):  # decoded: gzip counts unpacked
                    body += chunk
                    if len(body) > MAX_BODY:
                        response.close()
                        raise self.client.endpoint.error(
                            response.status_code,
                            f"the reply's body is over {MAX_BODY:,} bytes, the most a chat "
                            "completion may hold here (verdict_lab.client.MAX_BODY)",
                        )
                response._content = body  # requests' own field for a body read in full
        except requests.RequestException:
            if deadline.expired:
                raise requests.Timeout(f"timed out after {self.deadline:g} s") from None
            raise
        if deadline.expired:  # a reply cut short by the deadline is no reply
            raise requests.Timeout(f"timed out after {self.deadline:g} s")
        return response


# ----------------------------------------------------------------------------- the client


USAGE = (  # Client.usage's counters, in order
    "requests calls cache_hits merged replies prompt_tokens completion_tokens call_tokens "
    "cache_reports cached_tokens computed_prompt_tokens timings_reports timings_cache_n "
    "timings_prompt_n timings_prompt_ms timings_predicted_ms"
).split()


class Client:
    """judges.Endpoint (its chat and post, with bounded retries: connection errors, timeouts, 429
    with Retry-After, 5xx and malformed replies) over the lab's session (_Session): each attempt
    within `timeout` seconds of wall-clock time, identical requests in flight at the same time (on
    this client or its forks) sent once, `cache` (a Cache) serving a request made before, and
    usage counters. on_chat(), when given, is called before every call, merged ones included; an
    exception it raises refuses the call (the harness's call budget). `headers` go with every
    request (pin)."""

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
        self.cache, self.on_chat, self.in_flight = cache, on_chat, in_flight or InFlight()
        self.replicas = 1  # data-parallel replicas behind the endpoint (--dp-replicas); see pin
        self._lock, self._usage = threading.Lock(), dict.fromkeys(USAGE, 0)
        self.endpoint = Endpoint(
            check_base_url(base_url),
            model,
            api_key_env,
            timeout,
            retries,
            session=_Session(self, timeout),
            backoff=backoff,
            sleep=sleep,
        )
        # The core's own methods, so that a role's call runs judges.py's code down to the session.
        self.chat, self.post = self.endpoint.chat, self.endpoint.post

    base_url = property(lambda self: self.endpoint.base_url)
    model = property(lambda self: self.endpoint.model)
    headers = property(lambda self: self.endpoint.session.headers)

    def __repr__(self) -> str:
        return f"Client(base_url={shown_url(self.base_url)!r}, model={self.model!r})"

    def fork(self, on_chat: Callable[[], None] | None = None) -> "Client":
        """A client for the same endpoint, model, settings, cache, replica count and requests in
        flight, with its own session, counters and pinning (none)."""
        e = self.endpoint
        forked = Client(
            e.base_url,
            e.model,
            e.api_key_env,
            e.timeout,
            e.retries,
            self.cache,
            e.backoff,
            e.sleep,
            on_chat,
            self.in_flight,
        )
        forked.replicas = self.replicas
        return forked

    def close(self) -> None:
        self.endpoint.session.close()

    @property
    def usage(self) -> dict:
        """requests: HTTP attempts; calls: chat calls (each one answered, merged or failed);
        cache_hits: calls answered by the cache; merged: calls answered by an identical call in
        flight at the same time (they send nothing); replies: valid responses from the server;
        prompt_tokens, completion_tokens: what the server reported for those replies (what this
        process paid for); call_tokens: prompt + completion tokens of every response returned,
        cached and merged ones too (what the calls cost, had nothing been cached or merged). A
        successful call is exactly one of a reply, a cache hit or a merged call.
        What the server's own prefix cache reused, measured on the replies (reported_cache):
        cache_reports: the replies that reported cached_tokens; cached_tokens: their sum;
        computed_prompt_tokens: Σ (prompt_tokens − cached_tokens) over those replies, the prompt
        tokens the server computed; timings_reports: the replies with llama-server's timings;
        timings_cache_n, timings_prompt_n: their sums of cache_n and prompt_n; timings_prompt_ms,
        timings_predicted_ms: their sums of prompt_ms and predicted_ms (server time computing
        prompts and generating replies)."""
        with self._lock:
            return dict(self._usage)

    def _count(self, **inc) -> None:
        with self._lock:
            for k, v in inc.items():
                self._usage[k] += v


HINTS = (  # what a server's refusal means, for messages its words alone leave unclear
    (
        r"Field 'n': Value must be between 1 <= value <= (\d+)",
        "the server samples at most {0} choices at once "
        "(llama-server: its -np slots); ask for fewer candidates (--n) or serve with more slots",
    ),
    (
        r"image input is not supported",
        "this server has no vision encoder (llama-server needs --mmproj)",
    ),
    (r"Failed to load image", "the server could not decode an image this request sent"),
)


def explained(r):
    """A failed response r, or, when r is a refusal (HTTP 400 and up) whose message HINTS knows,
    the same refusal with the meaning added to its message."""
    if r.status_code < 400:
        return r
    message = server_message(r)
    for pattern, hint in HINTS:
        if m := re.search(pattern, message):
            said = f"{message} ({hint.format(*m.groups())})"
            return _Reply(r.status_code, {"error": {"message": said}}, r.headers)
    return r


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
        counts.update(
            timings_reports=1, timings_cache_n=reuse["cache_n"], timings_prompt_n=reuse["prompt_n"]
        )
        counts.update(
            {
                f"timings_{k}": reuse[k]
                for k in ("prompt_ms", "predicted_ms")
                if reuse[k] is not None
            }
        )
    return counts


def usage_change(before: dict, after: dict) -> dict:
    """after − before, counter by counter (Client.usage read twice around some calls; a counter
    missing from `before` counts from 0): what those calls cost."""
    return {k: v - before.get(k, 0) for k, v in after.items()}


def total_usage(clients) -> dict:
    """The usage counters of the distinct clients among `clients`, summed (a client listed twice
    counts once)."""
    distinct = list({id(c): c for c in clients}.values())
    return {k: sum(c.usage[k] for c in distinct) for k in distinct[0].usage}


def dp_rank(key: str, seed: int, replicas: int) -> int:
    """The replica a chain is pinned to: sha256 of its item's key and seed, modulo the replica count
    (stable across runs and processes, unlike hash())."""
    return (
        int(hashlib.sha256(f"{key}\x1f{seed}".encode("utf-8", "surrogatepass")).hexdigest(), 16)
        % replicas
    )


def pin(clients, key: str, seed: int) -> None:
    """Send every request of `clients` (one chain's) to one data-parallel replica,
    dp_rank(key, seed), in the X-data-parallel-rank header, so the chain's requests find its
    prefixes in that replica's cache; nothing when a client has one replica. vLLM's front end
    (--data-parallel-size K) otherwise routes by load and a step's requests scatter over the
    replicas' caches."""
    for c in {id(c): c for c in clients}.values():
        c.headers.pop(RANK_HEADER, None)
        if c.replicas > 1:
            c.headers[RANK_HEADER] = str(dp_rank(key, seed, c.replicas))
