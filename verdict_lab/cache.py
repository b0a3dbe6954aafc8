"""The on-disk response cache of VERDICT's agents: a re-run of the same requests is free and a
crashed run resumes where it stopped.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026. A step costs the reasoner's call and n×m judge calls; many
of them repeat across the rules and judge modes of one evaluation (the same candidates, judged the
same way), and the cache serves every repeat. client.Client uses it; a key covers the whole request,
model name included, and not the endpoint's URL: what a server computes depends on the model and the
request, not on its port, so the same server behind another URL or port answers from the cache.
What it stores of a response is what the project reads (stored): the text, the usage, and the
top_logprobs a score digit can be read from, not a server's top_logprobs for every generated token.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import sqlite3
import threading
from pathlib import Path

from verdict_lab.text import one_line

CACHE_FORMAT = "verdict-cache/3"  # keys cover the model and the request, not the endpoint's URL
DIGIT = re.compile(r"[0-9]")


def _digit_tokens(logprobs):
    """A choice's logprobs as replies.digit_probs reads them, and nothing more: every token's text
    (the tokens spell the reply, which locates the score's digit), and top_logprobs only at a token
    holding a digit, only the alternatives digit_probs can read there, each as {"token", "logprob"}.
    digit_probs reads an alternative when, stripped, it is what the token holds before one of its
    digits (stripped) followed by one digit. So digit_probs, and the weighted score, come out the
    same for any reply format and candidate; logprobs it cannot read at all are kept as sent (it
    gives zeros for them either way)."""
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list) or not all(
        isinstance(t, dict) and isinstance(t.get("token"), str) for t in content
    ):
        return logprobs

    def readable(t: dict) -> dict:
        befores = {t["token"][: m.start()].strip() for m in DIGIT.finditer(t["token"])}
        if not befores:
            return {"token": t["token"]}
        alts = t.get("top_logprobs") if isinstance(t.get("top_logprobs"), list) else []
        top = [a for a in alts if isinstance(a, dict) and isinstance(a.get("token"), str)]
        return {
            "token": t["token"],
            "top_logprobs": [
                {"token": a["token"], "logprob": a.get("logprob")}
                for a in top
                if DIGIT.fullmatch(a["token"].strip()[-1:]) and a["token"].strip()[:-1] in befores
            ],
        }

    return {"content": [readable(t) for t in content]}


def stored(response: dict) -> dict:
    """What the cache keeps of a chat completion: for each choice its message's content, its
    finish_reason and its logprobs slimmed to what a score digit is read from (_digit_tokens), and
    the usage. A server's top_logprobs for every generated token (98.7% of a llama-server judge
    reply's bytes) are not kept: they are never read. A response of any other shape is kept whole
    (client.Client stores only chat completions)."""
    choices = response.get("choices") if isinstance(response, dict) else None
    if not isinstance(choices, list) or not all(
        isinstance(c, dict) and isinstance(c.get("message"), dict) for c in choices
    ):
        return response

    def choice(c: dict) -> dict:
        kept = {
            "message": {"content": c["message"].get("content")},
            "finish_reason": c.get("finish_reason"),
        }
        return {**kept, **({"logprobs": _digit_tokens(c["logprobs"])} if c.get("logprobs") else {})}

    return {
        "choices": [choice(c) for c in choices],
        **({"usage": response["usage"]} if "usage" in response else {}),
    }


class CacheError(RuntimeError):
    """The response cache cannot be used (damaged, of another format, locked, closed, unwritable).
    Not a ValueError on purpose: it is never one item's problem, and a harness must stop on it
    rather than score the item wrong. Every failure of Cache raises it, with the file's name in the
    message."""


def cache_key(payload: dict, endpoint: str | None = None) -> str:
    """sha256 over the canonical JSON of a request (model, messages, sampling parameters, n, seed),
    with every data URL (image) replaced by its own sha256. `endpoint` (the base URL) is not part of
    it: the same model asked the same request is one entry, on whatever port or host it is served;
    two servers that report the same model name share their entries (give them distinct model names,
    or distinct cache files, when they serve different weights). Text with a lone surrogate (a JSONL
    cell's "\\ud800") has a key too: UTF-8 with surrogatepass, which leaves every other text's
    bytes, and so its key, unchanged."""

    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items()}
        if isinstance(x, list):
            return [strip(v) for v in x]
        if isinstance(x, str) and x.startswith("data:"):
            return "sha256:" + hashlib.sha256(x.encode("utf-8", "surrogatepass")).hexdigest()
        return x

    canon = json.dumps(
        {"request": strip(payload)},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canon.encode("utf-8", "surrogatepass")).hexdigest()  # a lone "\ud800" too


class Cache:
    """On-disk response cache (stdlib sqlite3): a re-run of the same requests is free and a crashed
    run resumes. One Cache may serve many threads; path ":memory:" keeps it in memory.

    Opening checks the file's integrity (PRAGMA quick_check) and format. Writes go to a write-ahead
    log (WAL, synchronous=NORMAL): put() returns once its reply is committed, and a committed reply
    survives the process being killed, SIGKILL included (only a power loss or an OS crash can undo
    the last commits). Replies put by several threads at once are committed together, in one
    transaction (group commit). A file locked by another process is waited for at most `timeout`
    seconds. Every failure raises CacheError naming the file: damaged or not a database, another
    format, locked, closed.
    """

    def __init__(self, path, timeout: float = 15.0):
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got timeout={timeout!r}")
        self.path, self.timeout = Path(path), timeout
        # The first lock guards the connection, the second the write queue.
        self._lock, self._queue_lock = threading.Lock(), threading.Lock()
        self._queue: dict = {}  # key -> response JSON, waiting for the next commit
        self._db = None
        try:
            with self._failing("open"):
                # Transactions are explicit (isolation_level=None): see _write.
                self._db = sqlite3.connect(
                    str(self.path), check_same_thread=False, timeout=timeout, isolation_level=None
                )
                self._check()
                self._db.execute("PRAGMA journal_mode=WAL")
                # In WAL mode, NORMAL makes no fsync per commit and still survives a kill.
                self._db.execute("PRAGMA synchronous=NORMAL")
        except CacheError:
            self.close()
            raise

    def _check(self) -> None:
        """Integrity first (a damaged page must not surface as a wrong or failing reply later), then
        the format."""
        problems = [r[0] for r in self._db.execute("PRAGMA quick_check").fetchall()]
        if problems != ["ok"]:
            raise CacheError(
                f"{self.path} is damaged ({one_line(problems[0], 120)}); "
                "delete it or choose another file"
            )
        tables = {
            r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
        if not tables:  # a new file
            self._write(
                [
                    ("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT)", [()]),
                    (
                        "CREATE TABLE IF NOT EXISTS responses "
                        "(key TEXT PRIMARY KEY, response TEXT NOT NULL)",
                        [()],
                    ),
                    ("INSERT OR IGNORE INTO meta VALUES ('format', ?)", [(CACHE_FORMAT,)]),
                ]
            )
            tables = {"meta", "responses"}
        row = (
            self._db.execute("SELECT value FROM meta WHERE name='format'").fetchone()
            if "meta" in tables
            else None
        )
        # Answers written under other rules are never read.
        if row is None or row[0] != CACHE_FORMAT or "responses" not in tables:
            raise CacheError(
                f"{self.path} holds format {row[0] if row else 'unknown'!r}, "
                f"expected {CACHE_FORMAT!r}; delete it or choose another file"
            )

    @contextlib.contextmanager
    def _failing(self, doing: str):
        """Turn whatever sqlite3 (or the file system) raises while `doing` into one CacheError
        naming the file."""
        try:
            yield
        except (sqlite3.Error, OSError, ValueError) as e:
            name = getattr(e, "sqlite_errorname", "")
            if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
                raise CacheError(
                    f"{self.path} is locked by another process "
                    f"(waited {self.timeout:g} s to {doing}); "
                    "let that process finish or choose another cache file"
                ) from None
            if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
                raise CacheError(
                    f"{self.path} is damaged or not a database ({e}); "
                    "delete it or choose another file"
                ) from None
            raise CacheError(
                f"{self.path}: cannot {doing} the response cache ({type(e).__name__}: {e})"
            ) from None

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            raise CacheError(f"{self.path}: the response cache is closed")
        return self._db

    def _write(self, statements: list) -> None:
        """Run each (SQL, rows) with executemany, all in one write transaction: all or nothing."""
        db = self._connection()
        db.execute("BEGIN IMMEDIATE")  # take the write lock now, waiting at most `timeout`
        try:
            for sql, rows in statements:
                db.executemany(sql, rows)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    def get(self, key: str) -> dict | None:
        with self._queue_lock:
            text = self._queue.get(key)
        with self._lock, self._failing("read"):
            row = (
                (text,)
                if text is not None
                else self._connection()
                .execute("SELECT response FROM responses WHERE key=?", (key,))
                .fetchone()
            )
        if row is None:
            return None
        try:
            return json.loads(row[0])
        except (ValueError, RecursionError):  # RecursionError: JSON nested too deep to read
            raise CacheError(
                f"{self.path}: entry {key[:16]} is not valid JSON; the cache is corrupt"
            ) from None

    def put(self, key: str, response: dict) -> None:
        """Store what the project reads of a response (stored); return once it is committed (with
        every other reply queued by then). Entries written whole, before stored existed, are read as
        they are."""
        with self._queue_lock:
            self._queue[key] = json.dumps(stored(response), separators=(",", ":"))
        with self._lock:
            with self._queue_lock:
                rows, self._queue = self._queue, {}
            if not rows:  # another thread's commit took this reply along
                return
            try:
                with self._failing("write"):
                    self._write(
                        [("INSERT OR REPLACE INTO responses VALUES (?, ?)", list(rows.items()))]
                    )
            except CacheError:
                with self._queue_lock:  # not committed: keep the rows queued for the next commit
                    self._queue = {**rows, **self._queue}
                raise

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
