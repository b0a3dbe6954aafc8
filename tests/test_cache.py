"""Tests for cache.py, the on-disk response cache: keys, integrity and format checks on opening, a file
locked by another process, every failure a CacheError, and committed replies surviving SIGKILL."""

import os
import signal
import sqlite3
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from cache import Cache, CacheError, cache_key
from images import messages
from perf.loopback import chat_response


def test_cache_key_hashes_images_and_covers_every_parameter_and_the_endpoint(png, tmp_path):
    msgs, url = messages("s", [png], "t"), "http://127.0.0.1:8000/v1"
    key = cache_key({"model": "m", "messages": msgs, "seed": 0}, url)
    assert key == cache_key(
        {"seed": 0, "messages": messages("s", [png.read_bytes()], "t"), "model": "m"}, url
    )
    other = tmp_path / "other.png"
    Image.new("RGB", (64, 48), "blue").save(other)
    assert key != cache_key({"model": "m", "messages": messages("s", [other], "t"), "seed": 0}, url)
    for change in ({"seed": 1}, {"model": "n"}, {"n": 3}, {"temperature": 0.8}):
        assert key != cache_key({"model": "m", "messages": msgs, "seed": 0, **change}, url)
    assert key != cache_key({"model": "m", "messages": msgs, "seed": 0}, "http://127.0.0.1:8001/v1")


def test_cache_rejects_a_corrupt_file(tmp_path):
    path = tmp_path / "corrupt.sqlite"
    path.write_bytes(b"this is not a database " * 200)
    with pytest.raises(CacheError, match="corrupt.sqlite"):
        Cache(path)


def filled(path, entries: int) -> bytearray:
    """Write `entries` replies of about 1 kB each to a new cache at path; return the file's bytes."""
    cache = Cache(path)
    for i in range(entries):
        cache.put(f"k{i}", chat_response(f"{i} " + "x" * 1000))
    cache.close()
    return bytearray(path.read_bytes())


def test_cache_rejects_damaged_pages(tmp_path):
    path = tmp_path / "damaged.sqlite"
    data = filled(path, 30)
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
    with pytest.raises(CacheError, match=r"old\.sqlite.*verdict-cache/0.*verdict-cache/2"):
        Cache(path)
    foreign = tmp_path / "foreign.sqlite"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE t (x)")
    with pytest.raises(CacheError, match="foreign.sqlite"):
        Cache(foreign)


def test_cache_rejects_garbage_in_the_middle_when_it_opens(tmp_path):
    path = tmp_path / "garbled.sqlite"
    data = filled(path, 200)
    middle = (
        len(data) // 2 // 4096 * 4096
    )  # one whole page in the middle; the header and the schema are intact
    data[middle : middle + 4096] = np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes()
    path.write_bytes(bytes(data))
    with pytest.raises(CacheError, match=r"garbled\.sqlite is damaged"):
        Cache(path)  # at once, before any entry is read


LOCKERS = {  # another process's hold on the file, and what it blocks
    "writing": "db.execute(\"BEGIN IMMEDIATE\"); db.execute(\"INSERT INTO responses VALUES ('b', '{}')\")",
    "exclusive": 'db.execute("PRAGMA locking_mode=EXCLUSIVE"); db.execute("BEGIN EXCLUSIVE")',
}


@pytest.mark.parametrize("hold", LOCKERS)
def test_a_cache_locked_by_another_process_is_reported_as_locked_not_corrupt(tmp_path, hold):
    path = tmp_path / "busy.sqlite"
    Cache(path).close()
    code = (
        f"import sqlite3, sys\ndb = sqlite3.connect({str(path)!r}, isolation_level=None)\n{LOCKERS[hold]}\n"
        "print('locked', flush=True)\nsys.stdin.read()\n"
    )
    other = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert other.stdout.readline() == "locked\n"
        with pytest.raises(CacheError) as e:
            cache = Cache(path, timeout=0.2)  # "exclusive" blocks even reading: this raises
            cache.put("k", chat_response("x"))  # "writing" blocks writing only
    finally:
        other.communicate("")
    assert str(e.value).startswith(f"{path} is locked by another process (waited 0.2 s to ")
    assert (
        "damaged" not in str(e.value)
        and "not a readable" not in str(e.value)
        and "delete" not in str(e.value)
    )


def test_every_cache_failure_is_a_cache_error(tmp_path):
    for bad in (tmp_path / "no" / "such" / "dir" / "c.sqlite", tmp_path, "nul\0byte.sqlite"):
        with pytest.raises(CacheError, match="cannot open"):
            Cache(bad)
    cache = Cache(tmp_path / "c.sqlite")
    cache.close()
    for use in (lambda: cache.get("k"), lambda: cache.put("k", chat_response("x"))):
        with pytest.raises(CacheError, match=r"c\.sqlite: the response cache is closed"):
            use()
    with pytest.raises(ValueError, match="timeout"):  # a bad argument is the caller's error, not the file's
        Cache(tmp_path / "c.sqlite", timeout=0)


KILLED_WRITER = """
import sys, threading
from cache import Cache
from perf.loopback import chat_response
cache, out = Cache(sys.argv[1]), threading.Lock()
def write(t):
    for i in range(10**9):
        cache.put(f"{t}-{i}", chat_response(f"reply {t}-{i}"))
        with out:  # put has returned: the reply is committed
            print(f"{t}-{i}", flush=True)
for t in range(4):
    threading.Thread(target=write, args=(t,)).start()
"""


def test_a_committed_reply_survives_sigkill_and_the_cache_uses_wal(tmp_path):
    path = tmp_path / "killed.sqlite"
    writer = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    committed = [writer.stdout.readline().strip() for _ in range(300)]  # 4 threads writing, killed mid-stream
    os.kill(writer.pid, signal.SIGKILL)
    writer.communicate()
    assert writer.returncode == -signal.SIGKILL and all(committed)
    cache = Cache(path)  # opens: the integrity check passes
    assert all(cache.get(k) == chat_response(f"reply {k}") for k in committed)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
