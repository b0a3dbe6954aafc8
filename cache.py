"""The on-disk response cache of VERDICT's agents: a re-run of the same requests is free and a crashed
run resumes where it stopped.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026. A step costs the reasoner's call and n×m judge calls; many of
them repeat across the rules and judge modes of one evaluation (the same candidates, judged the same way),
and the cache serves every repeat. client.Client uses it; keys cover the endpoint and the whole request.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
import threading
from pathlib import Path

from replies import one_line

CACHE_FORMAT = "verdict-cache/2"  # /2: keys cover the endpoint


class CacheError(RuntimeError):
    """The response cache cannot be used (damaged, of another format, locked, closed, unwritable). Not a
    ValueError on purpose: it is never one item's problem, and a harness must stop on it rather than score
    the item wrong. Every failure of Cache raises it, with the file's name in the message."""


def cache_key(payload: dict, endpoint: str) -> str:
    """sha256 over the canonical JSON of the endpoint (a base URL) and a request (model, messages, sampling
    parameters, n, seed), with every data URL (image) replaced by its own sha256. Two servers that report
    the same model name never share an entry. Text with a lone surrogate (a JSONL cell's "\\ud800") has a
    key too: UTF-8 with surrogatepass, which leaves every other text's bytes, and so its key, unchanged."""

    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items()}
        if isinstance(x, list):
            return [strip(v) for v in x]
        if isinstance(x, str) and x.startswith("data:"):
            return "sha256:" + hashlib.sha256(x.encode("utf-8", "surrogatepass")).hexdigest()
        return x

    canon = json.dumps(
        {"endpoint": endpoint, "request": strip(payload)},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canon.encode("utf-8", "surrogatepass")).hexdigest()  # a lone "\ud800" too


class Cache:
    """On-disk response cache (stdlib sqlite3): a re-run of the same requests is free and a crashed run
    resumes. One Cache may serve many threads; path ":memory:" keeps it in memory.

    Opening checks the file's integrity (PRAGMA quick_check) and format. Writes go to a write-ahead log
    (WAL, synchronous=NORMAL): put() returns once its reply is committed, and a committed reply survives
    the process being killed, SIGKILL included (only a power loss or an OS crash can undo the last
    commits). Replies put by several threads at once are committed together, in one transaction (group
    commit). A file locked by another process is waited for at most `timeout` seconds. Every failure
    raises CacheError naming the file: damaged or not a database, another format, locked, closed.
    """

    def __init__(self, path, timeout: float = 15.0):
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got timeout={timeout!r}")
        self.path, self.timeout = Path(path), timeout
        self._lock, self._queue_lock = threading.Lock(), threading.Lock()  # the connection; the write queue
        self._queue: dict = {}  # key -> response JSON, waiting for the next commit
        self._db = None
        try:
            with self._failing("open"):
                self._db = sqlite3.connect(
                    str(self.path), check_same_thread=False, timeout=timeout, isolation_level=None
                )  # transactions are explicit: see _write
                self._check()
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")  # in WAL mode: no fsync per commit, kill-safe
        except CacheError:
            self.close()
            raise

    def _check(self) -> None:
        """Integrity first (a damaged page must not surface as a wrong or failing reply later), then the
        format."""
        problems = [r[0] for r in self._db.execute("PRAGMA quick_check").fetchall()]
        if problems != ["ok"]:
            raise CacheError(
                f"{self.path} is damaged ({one_line(problems[0], 120)}); delete it or choose another file"
            )
        tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not tables:  # a new file
            self._write(
                [
                    ("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT)", [()]),
                    (
                        "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, response TEXT NOT NULL)",
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
        if (
            row is None or row[0] != CACHE_FORMAT or "responses" not in tables
        ):  # never read answers written under other rules
            raise CacheError(
                f"{self.path} holds format {row[0] if row else 'unknown'!r}, expected {CACHE_FORMAT!r}; "
                "delete it or choose another file"
            )

    @contextlib.contextmanager
    def _failing(self, doing: str):
        """Turn whatever sqlite3 (or the file system) raises while `doing` into one CacheError naming the
        file."""
        try:
            yield
        except (sqlite3.Error, OSError, ValueError) as e:
            name = getattr(e, "sqlite_errorname", "")
            if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
                raise CacheError(
                    f"{self.path} is locked by another process (waited {self.timeout:g} s to {doing}); "
                    "let that process finish or choose another cache file"
                ) from None
            if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
                raise CacheError(
                    f"{self.path} is damaged or not a database ({e}); delete it or choose another file"
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
        except ValueError:
            raise CacheError(
                f"{self.path}: entry {key[:16]} is not valid JSON; the cache is corrupt"
            ) from None

    def put(self, key: str, response: dict) -> None:
        """Store a response; return once it is committed (with every other reply queued by then)."""
        with self._queue_lock:
            self._queue[key] = json.dumps(response)
        with self._lock:
            with self._queue_lock:
                rows, self._queue = self._queue, {}
            if not rows:  # another thread's commit took this reply along
                return
            try:
                with self._failing("write"):
                    self._write([("INSERT OR REPLACE INTO responses VALUES (?, ?)", list(rows.items()))])
            except CacheError:
                with self._queue_lock:  # not committed: keep the rows queued for the next commit
                    self._queue = {**rows, **self._queue}
                raise

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
