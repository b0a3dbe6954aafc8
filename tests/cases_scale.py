"""The case viewer at scale: a scripted run of N items (default 1,000; one 640×480 JPEG each, 1
seed, base, verdict and mean, two steps of three candidates per judged chain, every item's steps its
own), then its page written as evaluate writes it and rebuilt by verdict_lab.cases; prints the
page's size and both times (docs/cases.md).

    python tests/cases_scale.py OUT [N]
"""

import hashlib
import io
import json
import os
import random
import re
import sys
import time

sys.path[:0] = [
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    os.path.dirname(__file__),
]

from PIL import Image, ImageDraw  # noqa: E402

import verdict  # noqa: E402
from verdict_lab import cases, evaluate  # noqa: E402
from verdict_lab.harness import benchmarks  # noqa: E402
from verdict_lab.harness.rundir import read_rows, read_summary  # noqa: E402
from verdict_lab.layouts import role_of  # noqa: E402
from verdict_lab.loopback import LoopbackServer, chat_response, user_text  # noqa: E402


def script(body, path):
    """Each item its own chain: the reasoner proposes three steps that name the item, then three
    final answers; each judge scores a step by a hash of its text (0.05 to 0.95), so every step's
    numbers differ and the page stores each step (no two chains share one)."""
    role, text = role_of(body["messages"]), user_text(body)
    shape = re.search(r"Where is shape (\d+)\?", text).group(1)
    if role == "reasoner":
        if re.search(r"(?m)^Step 1:", text):
            replies = ["Final answer: A", "Final answer: B", "Final answer: B, it is right"]
        else:
            replies = [f"Shape {shape} is in the {w} of the picture." for w in ("left", "middle")]
            replies.append(f"Shape {shape} looks larger than the others (seed {body['seed']}).")
        return 200, chat_response(replies[: body.get("n", 1)])
    step = re.search(r"<step>\n(.*?)\n</step>", text, re.S).group(1)
    digest = hashlib.sha256(f"{shape}|{role}|{step}".encode()).digest()
    score = round(0.05 + 0.9 * digest[0] / 255, 2)
    assert role in verdict.JUDGES
    return 200, chat_response([f"Score: {score}"])


def scene(rng: random.Random) -> bytes:
    """A 640×480 JPEG (quality 85, as benchmark photos come): a floor, three shapes at random
    places and colours, and pixel noise."""
    img = Image.new("RGB", (640, 480), (235, 235, 228))
    d = ImageDraw.Draw(img)
    d.rectangle([0, 320, 640, 480], fill=(200, 196, 180))
    for _ in range(3):
        x, y, r = rng.randrange(40, 600), rng.randrange(60, 420), rng.randrange(20, 80)
        colour = tuple(rng.randrange(256) for _ in range(3))
        d.ellipse([x - r, y - r, x + r, y + r], fill=colour, outline=(20, 20, 20))
    noise = Image.effect_noise((640, 480), 12).convert("RGB")
    img = Image.blend(img, noise, 0.08)
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=85)
    return buf.getvalue()


def main(out: str, n: int) -> None:
    os.makedirs(os.path.join(out, "images"), exist_ok=True)
    data, rng = os.path.join(out, "Scale.jsonl"), random.Random(0)
    with open(data, "w") as fh:
        for i in range(n):
            with open(os.path.join(out, "images", f"q{i}.jpg"), "wb") as img:
                img.write(scene(rng))
            row = {"id": f"q{i}", "question": f"Where is shape {i}?", "answer": "AB"[i % 2]}
            row |= {"options": {"A": "left", "B": "right"}, "image": f"images/q{i}.jpg"}
            fh.write(json.dumps(row) + "\n")
    run = os.path.join(out, "run")
    flags = [
        "--seeds",
        "1",
        "--rules",
        "base,verdict,mean",
        "--judge-format",
        "text",
        "--concurrency",
        "4",
    ]
    with LoopbackServer(script) as srv:
        start = time.perf_counter()
        code = evaluate.main(["--data", data, "--base-url", srv.url, "--out", run, *flags])
        print(f"evaluate: exit {code}, {time.perf_counter() - start:.1f} s (the page included)")
    # What evaluate's hook does at the end of a run: the page of rows and items in memory.
    rows, summary = read_rows(os.path.join(run, "results.jsonl"))[0], read_summary(run)
    items = benchmarks.load(data).items
    start = time.perf_counter()
    path = cases.write_run(run, rows, items, summary)
    hook = time.perf_counter() - start
    # The command: results.jsonl and the data file read again, then the page.
    start = time.perf_counter()
    path, _ = cases.rebuild(run, [data])
    took = time.perf_counter() - start
    size = os.path.getsize(path)
    print(f"{path}: {size:,} bytes ({size / 2**20:.1f} MiB) for {n} items")
    print(f"written at the end of the run in {hook:.1f} s; rebuilt by the command in {took:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1000)
