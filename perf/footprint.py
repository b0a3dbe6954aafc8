"""Sections 3 and 4 of bench.py: what an evaluate.py run costs besides its model calls.

- run_evaluate: `python evaluate.py` on generated items (write_items), every method, against the simulated
  server (perf/simserver.py) with no sleeping;
- memory_section (3): the peak RSS of that run;
- cache_section (4): the response cache, Cache.put in a file and in memory (put_seconds), and the same run
  with either.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time

from PIL import Image

import judges
from cache import Cache
from perf.loopback import LoopbackServer, chat_response
from perf.simserver import LatencyModel, SimulatedServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the checkout: evaluate.py


# ----------------------------------------------------------------------------- evaluate.py on generated items


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


def run_evaluate(k: int, extra: tuple = (), timeout: float = 1800.0) -> tuple | None:
    """`python evaluate.py` on k generated items, every method, against the simulated server with no
    sleeping. Returns (its exit code, its seconds, one sentence saying what ran and how it ended), or None
    without evaluate.py."""
    script = os.path.join(ROOT, "evaluate.py")
    if not os.path.exists(script):
        return None
    with (
        tempfile.TemporaryDirectory() as tmp,
        LoopbackServer(SimulatedServer(LatencyModel(time_scale=0.0), 2)) as srv,
    ):
        url, t0 = srv.url, time.perf_counter()
        cmd = [sys.executable, script, "--data", write_items(tmp, k), "--base-url", url, "--model", "sim"]
        cmd += ["--seeds", "1", "--out", os.path.join(tmp, "out"), *extra]
        run = subprocess.run(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=timeout
        )
        seconds, calls = time.perf_counter() - t0, len(srv.chats)
    shown = " ".join(["python evaluate.py"] + cmd[2:]).replace(url, "SIM_URL").replace(tmp, "TMP")
    said = (
        f"`{shown}` on {k} generated items (one 448×448 PNG each), every method, against the simulated "
        "server with no sleeping"
    )
    if run.returncode != 0:
        return (
            run.returncode,
            seconds,
            (
                f"{said}: **the run failed** (exit code {run.returncode}, after {seconds:.0f} s); "
                f"the end of its stderr: `{' '.join(run.stderr[-400:].split())}`"
            ),
        )
    return 0, seconds, f"{said}: exit code 0, {calls:,} requests, {seconds:.0f} s."


# ----------------------------------------------------------------------------- 3. memory


def memory_section(k: int) -> list:
    """Section 3: peak RSS of run_evaluate's evaluate.py: resource's RUSAGE_CHILDREN maximum, which is that
    child's, as bench.py starts no other process before it. A failed run reports no figure."""
    run = run_evaluate(k)
    if run is None:
        return ["skipped: evaluate.py not found"]
    if run[0] != 0:
        return [run[2], "", "No peak RSS is reported for a failed run."]
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux -> MiB
    return [
        run[2],
        "",
        f"**Peak RSS of the evaluate.py process: {peak:.0f} MiB** "
        "(resource.getrusage(RUSAGE_CHILDREN).ru_maxrss).",
    ]


# ----------------------------------------------------------------------------- 4. the response cache


def put_seconds(path: str, puts: int, threads: int) -> float:
    """Wall seconds per Cache.put of a 48-token reply, `threads` threads putting at once."""
    cache, reply = Cache(path), chat_response("Observation: " + " ".join(["detail"] * 44))
    t0 = time.perf_counter()
    judges.thread_map(threads)(lambda i: cache.put(f"key {i}", reply), range(puts))
    seconds = time.perf_counter() - t0
    cache.close()
    return seconds / puts


def cache_section(k: int, puts: int) -> list:
    """Section 4: what the response cache costs: Cache.put in a file against in memory, then run_evaluate
    with evaluate.py's default cache file (OUT/cache.sqlite) against --cache :memory:."""
    with tempfile.TemporaryDirectory() as tmp:
        us = {
            (where, t): 1e6
            * put_seconds(os.path.join(tmp, f"{t}.sqlite") if where == "file" else ":memory:", puts, t)
            for where in ("file", "memory")
            for t in (1, 4)
        }
    runs = {
        where: run_evaluate(k, extra) for where, extra in (("file", ()), ("memory", ("--cache", ":memory:")))
    }
    lines = (
        [
            f"Cache.put of {puts:,} replies (a 48-token step each), in a file in a temporary folder and in "
            "memory:",
            "",
            "| cache | 1 thread | 4 threads at once |",
            "|---|---:|---:|",
        ]
        + [f"| {w} | {us[w, 1]:,.0f} µs per put | {us[w, 4]:,.0f} µs per put |" for w in ("file", "memory")]
        + [""]
    )
    if runs["file"] is None:
        return lines + ["evaluate.py: skipped (not found)."]
    lines += [f"- cache in a file: {runs['file'][2]}", f"- cache in memory: {runs['memory'][2]}"]
    if runs["file"][0] == runs["memory"][0] == 0:
        slower = runs["file"][1] / runs["memory"][1]
        lines += [
            "",
            f"With the cache in a file, evaluate.py takes {slower:.2f}× its time with the cache in memory.",
        ]
    return lines
