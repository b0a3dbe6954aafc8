"""Tests for verdict_lab/cache.py, the on-disk response cache: keys, integrity and format checks on
opening, a file locked by another process, every failure a CacheError, and committed replies
surviving SIGKILL."""

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from judges import chat_messages as messages
from scripted import token_logprobs
from verdict_lab.cache import Cache, CacheError, cache_key, stored
from verdict_lab.client import Client
from verdict_lab.formats import DIGIT, REPLIES
from verdict_lab.loopback import chat_response


def test_cache_key_hashes_images_and_covers_every_parameter_but_not_the_endpoint(png, tmp_path):
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
    # what the server computes is the model's answer to the request: the same server on another port
    # (or behind another URL) is the same entry
    for elsewhere in ("http://127.0.0.1:8001/v1", "http://gpu-3:8000/v1", None):
        assert key == cache_key({"model": "m", "messages": msgs, "seed": 0}, elsewhere)
    canon = json.dumps(
        {"request": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}},
        sort_keys=True,
        separators=(",", ":"),
    )
    assert (
        cache_key({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        == hashlib.sha256(canon.encode()).hexdigest()
    )


def test_the_same_server_on_another_port_answers_from_the_cache(loopback, tmp_path):
    """Two ports, one model name and one cache: the request asked on the first port is answered from
    the cache on the second, with no request sent (a server on another port computes the same);
    another model name is another entry."""
    first, second = (
        loopback(lambda b, p: chat_response("one")),
        loopback(lambda b, p: chat_response("two")),
    )
    cache = Cache(tmp_path / "c.sqlite")
    ask = lambda srv, m="default": Client(srv.url, m, cache=cache).chat(
        [{"role": "user", "content": "hi"}]
    )
    assert ask(first)["choices"][0]["message"]["content"] == "one"
    assert ask(second)["choices"][0]["message"]["content"] == "one"  # the entry of the same request
    assert (len(first.chats), len(second.chats)) == (1, 0)
    assert (
        ask(second, "other")["choices"][0]["message"]["content"] == "two" and len(second.chats) == 1
    )


def test_cache_rejects_a_corrupt_file(tmp_path):
    path = tmp_path / "corrupt.sqlite"
    path.write_bytes(b"this is not a database " * 200)
    with pytest.raises(CacheError, match="corrupt.sqlite"):
        Cache(path)


def test_an_entry_nested_too_deep_is_a_cache_error_not_a_traceback(tmp_path, loopback):
    path, messages = tmp_path / "deep.sqlite", [{"role": "user", "content": "hi"}]
    srv = loopback(lambda body, p: chat_response("fresh"))
    key = cache_key({"model": "m", "messages": messages}, srv.url)
    Cache(path).close()
    db = sqlite3.connect(path)
    db.execute("INSERT INTO responses VALUES (?, ?)", (key, "[" * 100_000 + "]" * 100_000))
    db.commit()
    db.close()
    with pytest.raises(CacheError, match=r"deep\.sqlite: entry [0-9a-f]{16} is not valid JSON"):
        Cache(path).get(key)
    with pytest.raises(CacheError, match="the cache is corrupt"):
        Client(srv.url, "m", cache=Cache(path), retries=0).chat(messages)
    assert not srv.chats  # the damaged entry was never replaced by a request


def filled(path, entries: int) -> bytearray:
    """Write `entries` replies of about 1 kB each to a new cache at path; return the file's
    bytes."""
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
    with pytest.raises(CacheError, match=r"old\.sqlite.*verdict-cache/0.*verdict-cache/3"):
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
    data[middle : middle + 4096] = (
        np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes()
    )
    path.write_bytes(bytes(data))
    with pytest.raises(CacheError, match=r"garbled\.sqlite is damaged"):
        Cache(path)  # at once, before any entry is read


LOCKERS = {  # another process's hold on the file, and what it blocks
    "writing": (
        "db.execute(\"BEGIN IMMEDIATE\"); db.execute(\"INSERT INTO responses VALUES ('b', '{}')\")"
    ),
    "exclusive": 'db.execute("PRAGMA locking_mode=EXCLUSIVE"); db.execute("BEGIN EXCLUSIVE")',
}


@pytest.mark.parametrize("hold", LOCKERS)
def test_a_cache_locked_by_another_process_is_reported_as_locked_not_corrupt(tmp_path, hold):
    path = tmp_path / "busy.sqlite"
    Cache(path).close()
    code = (
        f"import sqlite3, sys\ndb = sqlite3.connect({str(path)!r}, isolation_level=None)\n"
        f"{LOCKERS[hold]}\n"
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
    with pytest.raises(
        ValueError, match="timeout"
    ):  # a bad argument is the caller's error, not the file's
        Cache(tmp_path / "c.sqlite", timeout=0)


KILLED_WRITER = """
import sys, threading
from verdict_lab.cache import Cache
from verdict_lab.loopback import chat_response
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
    committed = [
        writer.stdout.readline().strip() for _ in range(300)
    ]  # 4 threads writing, killed mid-stream
    os.kill(writer.pid, signal.SIGKILL)
    writer.communicate()
    assert writer.returncode == -signal.SIGKILL and all(committed)
    cache = Cache(path)  # opens: the integrity check passes
    assert all(cache.get(k) == stored(chat_response(f"reply {k}")) for k in committed)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


# ------------------------------------------------------------------------ what a stored reply keeps


def full_logprobs(text: str, rng, score_at: int) -> dict:
    """The logprobs a server sends for `text`: the text cut into 1..4-character tokens (the score's
    digit, at score_at, in a token of its own or after a space), each with 20 top_logprobs mixing
    words, digits, digits after a space or a quote, and other numbers."""
    cuts, i = [0], 0
    while i < len(text):
        i = min(len(text), i + int(rng.integers(1, 5)))
        start = score_at - (
            text[score_at - 1] == " " and rng.random() < 0.5
        )  # the digit, or " " and it
        if cuts[-1] < start < i:  # the score's token starts
            i = start
        elif cuts[-1] == start:
            i = score_at + 1
        cuts.append(i)
    pool = [str(d) for d in range(10)] + [
        " 7",
        '":3',
        "12",
        "x9y",
        "word",
        '"',
        "}",
        " ",
        "⁵",
        "8 ",
    ]

    def alts(a: int, b: int) -> dict:
        names = [str(x) for x in rng.choice(pool, 20)]
        if (
            a <= score_at < b
        ):  # the score's token: its own text before the digit, then a digit, 8 times
            names[:8] = [text[a:score_at] + str(k) for k in rng.choice(10, 8, replace=False)]
        return {x: float(p) for x, p in zip(names, rng.dirichlet(np.ones(20)))}

    return token_logprobs([(text[a:b], alts(a, b)) for a, b in zip(cuts, cuts[1:]) if b > a])


@pytest.mark.parametrize("seed", range(12))
def test_a_stored_reply_gives_the_same_weighted_score_in_every_format_that_asks_for_logprobs(
    tmp_path, seed
):
    # The same reply, fresh and out of a cache file: digit_probs (so the weighted score and the
    # digits' share) are equal to the last bit, in the json format (with and without a reason, the
    # reason quoting numbers) and the digit format (with and without a reason, a quoted candidate
    # holding its own score).
    from judges import digit_probs, logprob_score

    rng = np.random.default_rng(seed)
    d, step = int(rng.integers(0, 10)), "x = 42, so Score: 9"
    replies = {
        ("json", None): f'{{"score": {d}}}',
        (
            "json",
            None,
            "reason",
        ): f'{{"reason": "3 of 4 parts hold; \\"score\\": 8 was wrong", "score": {d}}}',
        ("digit", None): f"Score: {d}",
        ("digit", step): f"It quotes <step>{step}</step>; 2 errors.\nScore: {d}",
    }
    cache = Cache(tmp_path / "c.sqlite")
    for i, (key, text) in enumerate(replies.items()):
        fmt, quoted = REPLIES[key[0]], key[1]
        at = text.rfind(str(d))
        fresh = chat_response(text, logprobs=[full_logprobs(text, rng, at)])
        cache.put(f"k{i}", fresh)
        hit = cache.get(f"k{i}")
        before, after = (r["choices"][0]["logprobs"] for r in (fresh, hit))
        assert digit_probs(after, fmt, quoted).tolist() == digit_probs(before, fmt, quoted).tolist()
        assert digit_probs(before, fmt, quoted).sum() > 0
        same = logprob_score(after, fmt, quoted), logprob_score(before, fmt, quoted)
        assert same[0] == same[1]
        assert hit["choices"][0]["message"]["content"] == text and hit["usage"] == fresh["usage"]
        assert all(
            ("top_logprobs" in t) == any(c in "0123456789" for c in t["token"])
            for t in after["content"]
        )
    cache.close()


@pytest.mark.parametrize("fmt", ["json", "digit"])
@pytest.mark.parametrize("score_only", [True, False])
def test_a_judge_records_the_same_call_from_the_cache_as_from_the_server(
    loopback, tmp_path, fmt, score_only
):
    import verdict
    from verdict_lab.client import Client
    from judges import Judge

    alts = {"5": 0.3, "2": 0.25, "9": 0.05, '"': 0.4}
    if fmt == "json":
        head = ['{"', "reason", '":"', "6 is right", '","'][: 0 if score_only else 5] or ['{"']
        tokens = [(t, {}) for t in head] + [("score", {}), ('":', {}), ("5", alts), ("}", {})]
    else:
        tokens = [("It adds 2 and 3.\n", {"1": 0.5, " 1": 0.5})] * (not score_only) + [
            ("Score: ", {}),
            ("5", alts),
        ]
    lp = token_logprobs(tokens)
    text = "".join(t for t, _ in tokens)
    srv = loopback(lambda body, path: chat_response(text, logprobs=[lp]))
    path = tmp_path / "c.sqlite"
    records = []
    for _ in range(2):  # from the server, then from the cache
        client = Client(srv.url, "m", cache=Cache(path))
        judge = Judge(client, "visual", reply=REPLIES[fmt], reasons=not score_only)
        records.append(judge(verdict.State("q"), "s").record)
        client.cache.close()
    assert len(srv.chats) == 1 and records[0] == records[1] and records[0]["format"] == fmt
    assert records[0]["weighted"] == pytest.approx((5 * 0.3 + 2 * 0.25 + 9 * 0.05) / 0.6 / 9)


def test_an_entry_stored_whole_by_an_older_version_is_still_read(tmp_path):
    from judges import logprob_score

    lp = token_logprobs([("Score: ", {"Score: ": 1.0}), ("7", {"7": 0.6, "3": 0.2, "x": 0.2})])
    full = chat_response("Score: 7", logprobs=[lp])
    cache = Cache(tmp_path / "c.sqlite")
    cache.close()
    with sqlite3.connect(tmp_path / "c.sqlite") as db:
        db.execute("INSERT INTO responses VALUES ('old', ?)", (json.dumps(full),))
    db.close()
    cache = Cache(tmp_path / "c.sqlite")
    assert cache.get("old") == full
    assert logprob_score(cache.get("old")["choices"][0]["logprobs"], DIGIT) == pytest.approx(
        (3 * 0.2 + 7 * 0.6) / 0.8 / 9
    )
    cache.close()


def test_stored_keeps_exactly_the_alternatives_digit_probs_reads():
    # The token '":7' holds '":' before its digit: '":3' is read (3), '"x' and '"=5' are not, nor is
    # "4" (it lacks the '":'); "}" holds no digit and keeps no top_logprobs.
    from judges import JSON, digit_probs

    lp = token_logprobs(
        [
            ('{"score', {"a": 1.0}),
            ('":7', {'":7': 0.6, '":3': 0.2, '"x': 0.1, '"=5': 0.05, "4": 0.05}),
            ("}", {}),
        ]
    )
    kept = stored(chat_response('{"score":7}', logprobs=[lp]))["choices"][0]["logprobs"]["content"]
    assert [t.get("top_logprobs") for t in kept[::2]] == [None, None]
    assert [a["token"] for a in kept[1]["top_logprobs"]] == ['":7', '":3']
    assert digit_probs({"content": kept}, JSON).tolist() == digit_probs(lp, JSON).tolist()
    assert digit_probs(lp, JSON).tolist() == pytest.approx([0, 0, 0, 0.2, 0, 0, 0, 0.6, 0, 0])
