"""Sections 3 and 4 of bench.py: what an evaluate.py run costs besides its model calls.

- run_evaluate: `python evaluate.py` on generated items (write_items), every method, against the
  simulated server (perf/simserver.py) with no sleeping;
- memory_section (3): the peak RSS of that run;
- cache_section (4): the response cache, Cache.put in a file and in memory (put_seconds), the same
  run with either, and what the file holds per item and per judge reply (cache_bytes) against what
  the server sent.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

from PIL import Image

from verdict_lab.verifier import thread_map
from verdict_lab.cache import Cache
from verdict_lab.loopback import LoopbackServer, chat_response
from verdict_lab.perf.simserver import LatencyModel, SimulatedServer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout
EVALUATE = (sys.executable, "-m", "verdict_lab.evaluate")  # the command, run in ROOT


# ------------------------------------------------------------------- evaluate.py on generated items


def write_items(folder: str, k: int) -> str:
    """A k-item JSONL benchmark with one 448×448 PNG per item; returns its path."""
    path = os.path.join(folder, "bench_items.jsonl")
    options = {"A": "yes", "B": "no", "C": "overlap", "D": "unseen"}
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(k):
            img = Image.new("RGB", (448, 448), (255, 255, 255))
            img.paste((40 + i % 200, 90, 160), (i % 300, 50, i % 300 + 120, 170))
            img.save(os.path.join(folder, f"img{i}.png"))
            question = f"Item {i}: is the mug left of the laptop?"
            item = {"id": f"q{i}", "question": question, "options": options, "answer": "AB"[i % 2]}
            fh.write(json.dumps({**item, "image": f"img{i}.png"}) + "\n")
    return path


class Sized:
    """A loopback handler around another, keeping the JSON size in bytes of each response it sends,
    with whether it carries logprobs (a judge's reply): [(logprobs, bytes), ...] in `sent`."""

    def __init__(self, handler):
        self.handler, self.sent, self._lock = handler, [], threading.Lock()

    def __call__(self, body, path):
        response = self.handler(body, path)
        size = len(json.dumps(response, separators=(",", ":")))
        with self._lock:
            self.sent.append((any("logprobs" in c for c in response["choices"]), size))
        return response


def cache_bytes(path: str) -> dict:
    """What a response cache file holds: {"file": its bytes on disk, "entries", "judge_entries":
    those holding logprobs, "bytes", "judge_bytes": their stored JSON's bytes}."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        rows = [r[0] for r in db.execute("SELECT response FROM responses")]
    judge = [len(r) for r in rows if '"logprobs"' in r]
    return {
        "file": os.path.getsize(path),
        "entries": len(rows),
        "judge_entries": len(judge),
        "bytes": sum(map(len, rows)),
        "judge_bytes": sum(judge),
    }


def run_evaluate(k: int, extra: tuple = (), timeout: float = 1800.0, look=None) -> tuple | None:
    """`python -m verdict_lab.evaluate` on k generated items, every method, against the simulated
    server with no sleeping. Returns (its exit code, its seconds, one sentence saying what ran and
    how it ended); with `look`, a fourth value: look(the run's output folder, the Sized handler),
    called before the folder is removed."""
    sized = Sized(SimulatedServer(LatencyModel(time_scale=0.0), 2))
    with tempfile.TemporaryDirectory() as tmp, LoopbackServer(sized) as srv:
        url, t0 = srv.url, time.perf_counter()
        cmd = [*EVALUATE, "--data", write_items(tmp, k), "--base-url", url, "--model", "sim"]
        cmd += ["--seeds", "1", "--out", os.path.join(tmp, "out"), *extra]
        run = subprocess.run(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            timeout=timeout,
            cwd=ROOT,
        )
        seconds, calls = time.perf_counter() - t0, len(srv.chats)
        seen = () if look is None else (look(os.path.join(tmp, "out"), sized),)
    shown = (
        " ".join(["python -m verdict_lab.evaluate"] + cmd[3:])
        .replace(url, "SIM_URL")
        .replace(tmp, "TMP")
    )
    said = (
        f"`{shown}` on {k} generated items (one 448×448 PNG each), every method, against the "
        "simulated server with no sleeping"
    )
    if run.returncode != 0:
        return (
            run.returncode,
            seconds,
            (
                f"{said}: **the run failed** (exit code {run.returncode}, after {seconds:.0f} s); "
                f"the end of its stderr: `{' '.join(run.stderr[-400:].split())}`"
            ),
        ) + seen
    return (0, seconds, f"{said}: exit code 0, {calls:,} requests, {seconds:.0f} s.") + seen


# ----------------------------------------------------------------------------- 3. memory


def memory_section(k: int) -> list:
    """Section 3: peak RSS of run_evaluate's evaluate.py: resource's RUSAGE_CHILDREN maximum, which
    is that child's, as bench.py starts no other process before it. A failed run reports no figure.
    """
    run = run_evaluate(k)
    if run is None:
        return ["skipped: verdict_lab.evaluate not found"]
    if run[0] != 0:
        return [run[2], "", "No peak RSS is reported for a failed run."]
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux -> MiB
    return [
        run[2],
        "",
        f"**Peak RSS of the verdict_lab.evaluate process: {peak:.0f} MiB** "
        "(resource.getrusage(RUSAGE_CHILDREN).ru_maxrss).",
    ]


# ---------------------------------------------------------------------------- 4. the response cache


def put_seconds(path: str, puts: int, threads: int) -> float:
    """Wall seconds per Cache.put of a 48-token reply, `threads` threads putting at once."""
    cache, reply = Cache(path), chat_response("Observation: " + " ".join(["detail"] * 44))
    t0 = time.perf_counter()
    thread_map(threads)(lambda i: cache.put(f"key {i}", reply), range(puts))
    seconds = time.perf_counter() - t0
    cache.close()
    return seconds / puts


def cache_section(k: int, puts: int) -> tuple:
    """Section 4: (markdown lines, the stored bytes per judge reply or None): what the response
    cache costs: Cache.put in a file against in memory, then run_evaluate with evaluate.py's default
    cache file (OUT/cache.sqlite) against --cache :memory:, and what that file holds (bytes_lines).
    """
    with tempfile.TemporaryDirectory() as tmp:
        us = {
            (where, t): 1e6
            * put_seconds(
                os.path.join(tmp, f"{t}.sqlite") if where == "file" else ":memory:", puts, t
            )
            for where in ("file", "memory")
            for t in (1, 4)
        }
    look = lambda out, sized: (
        cache_bytes(os.path.join(out, "cache.sqlite"))
        if os.path.exists(os.path.join(out, "cache.sqlite"))
        else None,
        list(sized.sent),
    )
    runs = {
        "file": run_evaluate(k, (), look=look),
        "memory": run_evaluate(k, ("--cache", ":memory:")),
    }
    lines = (
        [
            f"Cache.put of {puts:,} replies (a 48-token step each), in a file in a temporary "
            "folder and in memory:",
            "",
            "| cache | 1 thread | 4 threads at once |",
            "|---|---:|---:|",
        ]
        + [
            f"| {w} | {us[w, 1]:,.0f} µs per put | {us[w, 4]:,.0f} µs per put |"
            for w in ("file", "memory")
        ]
        + [""]
    )
    if runs["file"] is None:
        return lines + ["verdict_lab.evaluate: skipped (not found)."], None
    lines += [f"- cache in a file: {runs['file'][2]}", f"- cache in memory: {runs['memory'][2]}"]
    if runs["file"][0] == runs["memory"][0] == 0:
        slower = runs["file"][1] / runs["memory"][1]
        lines += [
            "",
            f"With the cache in a file, verdict_lab.evaluate takes {slower:.2f}× its time with the "
            "cache in memory.",
        ]
    held = runs["file"][3][0] if runs["file"][0] == 0 else None
    if not held:
        return lines, None
    return lines + [""] + bytes_lines(k, *runs["file"][3]), held["judge_bytes"] / max(
        held["judge_entries"], 1
    )


def bytes_lines(k: int, held: dict, sent: list) -> list:
    """What the cache file of run_evaluate's run holds per item and per judge reply, against the
    bytes the simulated server sent (llama-server's logprobs shape: every generated token with its
    top_logprobs)."""
    judge_sent = [b for lp, b in sent if lp]
    per_judge = held["judge_bytes"] / max(held["judge_entries"], 1)
    sent_judge = sum(judge_sent) / max(len(judge_sent), 1)
    return [
        "What the cache file holds (verdict_lab.cache.stored keeps each reply's text, finish "
        "reason, usage, and of its logprobs the tokens' text and the top_logprobs a score digit is "
        "read from):",
        "",
        "| | entries | stored JSON | per entry | per item |",
        "|---|---:|---:|---:|---:|",
        f"| every reply | {held['entries']:,} | {held['bytes']:,} B | "
        f"{held['bytes'] / max(held['entries'], 1):,.0f} B | {held['bytes'] / k:,.0f} B |",
        f"| judge replies (with logprobs) | {held['judge_entries']:,} | {held['judge_bytes']:,} B "
        f"| **{per_judge:,.0f} B** | {held['judge_bytes'] / k:,.0f} B |",
        f"| the file on disk | | {held['file']:,} B | | **{held['file'] / k:,.0f} B** |",
        "",
        f"The server sent {len(judge_sent):,} judge replies of {sent_judge:,.0f} B on average "
        "(top_logprobs = 20 at every generated token): the cache keeps "
        f"{per_judge / sent_judge:.1%} of a judge reply, {sent_judge / per_judge:,.0f}× less.",
    ]
