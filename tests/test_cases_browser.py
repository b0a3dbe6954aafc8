"""The case viewer (verdict_lab/cases.py) in a real browser: headless Chromium opens OUT/cases.html
from a file, with no server, and the tests read what it shows.

Chromium is driven over the DevTools protocol on a pipe (--remote-debugging-pipe: JSON messages
ended by a NUL byte, written to its file descriptor 3 and read from its 4), with the standard
library alone. The run is a scripted evaluate against a loopback server; one candidate holds
<script> and one <img onerror=...>, and a judge's reason holds another <img onerror=...>.

Without Chromium the tests are skipped with one line saying what to install; under CI (CI set) they
fail instead. VERDICT_CASES_SCREENSHOT=PATH saves the screenshot of one case at one step there too
(docs/cases.png is made so).
"""

import base64
import json
import os
import re
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import verdict
from verdict_lab import evaluate
from verdict_lab.layouts import role_of
from verdict_lab.loopback import LoopbackServer, chat_response, user_text
from test_benchmarks import tiny_tsv

HERE = Path(__file__).resolve().parent.parent
SCRIPT_TAG = "<script>window.__pwned = 'script'</script> The cube is red."
IMG_TAG = '<img src="x" onerror="window.__pwned = \'img\'"> The ball is blue.'
REASON_TAG = "<img src=y onerror=\"window.__pwned='reason'\"> looks right"
# Step 1: an idea and the two hostile candidates; seed 1's idea is scored low, so VERDICT falls
# back there. Step 2: final answers, Proposition 1's pair: VERDICT takes B, the raw mean and the
# base A (every answer of the tiny TSV is A). For item 12 ("Which image is blue?") the pair is
# swapped and B comes first: VERDICT takes A, right, the raw mean and the base B, wrong.
SCORES = {
    "Final answer: A": (0.9, 0.2, 0.9),
    "Final answer: B": (0.7, 0.6, 0.7),
    "Idea for seed 0.": (0.8, 0.7, 0.8),
    "Idea for seed 1.": (0.5, 0.4, 0.5),
}


def script(body, path):
    role, text = role_of(body["messages"]), user_text(body)
    swap = "Which image is blue?" in text
    if role == "reasoner":
        seed = body["seed"]
        if re.search(r"(?m)^Step 1:", text):
            a, b = ("B", "A") if swap else ("A", "B")
            return 200, chat_response([f"Final answer: {x}" for x in (a, b, b)][: body["n"]])
        return 200, chat_response([f"Idea for seed {seed}.", SCRIPT_TAG, IMG_TAG][: body["n"]])
    judge = verdict.JUDGES.index(role)
    step = re.search(r"<step>\n(.*?)\n</step>", text, re.S).group(1)
    if swap and step.startswith("Final answer: "):
        step = "Final answer: " + {"A": "B", "B": "A"}[step[-1]]
    score = SCORES.get(step, (0.2, 0.3, 0.2))[judge]
    return 200, chat_response([f"{REASON_TAG}\nScore: {score}"])


def chromium() -> str | None:
    """The Chromium to drive: VERDICT_CHROMIUM, else the first of Debian's names on PATH."""
    given = os.environ.get("VERDICT_CHROMIUM")
    if given:
        return given
    return next(
        (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p),
        None,
    )


@pytest.fixture(scope="module")
def browser():
    exe = chromium()
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("CI runs the browser tests: install Debian's chromium (.ci/run does)")
        pytest.skip("no Chromium: install Debian's chromium (apt-get install -y chromium)")
    b = Browser(exe)
    try:
        yield b
    finally:
        b.close()


class Browser:
    """Headless Chromium over the DevTools protocol on a pipe; every wait is bounded."""

    def __init__(self, exe: str, timeout: float = 60.0):
        self.timeout, self.next_id, self.buf, self.events = timeout, 0, b"", []
        self.profile = tempfile.mkdtemp(prefix="verdict-chromium-")
        r_in, w_in = os.pipe()  # we write, Chromium reads on its fd 3
        r_out, w_out = os.pipe()  # Chromium writes on its fd 4, we read

        def fds():  # In the child: the pipes' ends at 3 and 4, inheritable.
            a, b = os.dup(r_in), os.dup(w_out)
            os.dup2(a, 3)
            os.dup2(b, 4)

        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe"]
        flags += ["--no-first-run", "--hide-scrollbars", f"--user-data-dir={self.profile}"]
        self.proc = subprocess.Popen(
            [exe, *flags, "about:blank"],
            preexec_fn=fds,
            close_fds=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(r_in)
        os.close(w_out)
        self.w, self.r = w_in, r_out

    def _read(self) -> dict:
        """The next message, waiting at most self.timeout for it."""
        while b"\0" not in self.buf:
            ready, _, _ = select.select([self.r], [], [], self.timeout)
            chunk = os.read(self.r, 1 << 20) if ready else b""
            if not chunk:
                raise RuntimeError("Chromium closed its pipe or did not answer in time")
            self.buf += chunk
        message, _, self.buf = self.buf.partition(b"\0")
        return json.loads(message)

    def call(self, method: str, session: str | None = None, **params) -> dict:
        """The result of one command; the events read meanwhile are kept in self.events."""
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self.w, json.dumps(message).encode() + b"\0")
        while True:
            got = self._read()
            if got.get("id") == self.next_id:
                if "error" in got:
                    raise RuntimeError(f"{method}: {got['error']}")
                return got["result"]
            self.events.append(got)

    def page(self, url: str) -> "Page":
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        p = Page(self, session)
        for domain in ("Runtime", "Log", "Page"):
            self.call(f"{domain}.enable", session)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            session,
            width=1400,
            height=1000,
            deviceScaleFactor=1,
            mobile=False,
        )
        p.open(url)
        return p

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (RuntimeError, OSError):
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
        for fd in (self.w, self.r):
            os.close(fd)
        shutil.rmtree(self.profile, ignore_errors=True)


class Page:
    """One tab: open a URL, evaluate JavaScript, press keys, read the console's errors."""

    def __init__(self, browser: Browser, session: str):
        self.b, self.session = browser, session

    def open(self, url: str) -> None:
        """Load `url` (a new document even when only the fragment differs) and wait until the
        page's script has drawn it (body[data-ready])."""
        self.b.call("Page.navigate", self.session, url="about:blank")
        self.wait("document.readyState === 'complete' && location.href === 'about:blank'")
        self.b.call("Page.navigate", self.session, url=url)
        self.wait("document.body && document.body.dataset.ready === '1'")

    def js(self, expression: str):
        got = self.b.call(
            "Runtime.evaluate",
            self.session,
            expression=expression,
            returnByValue=True,
            awaitPromise=True,
        )
        if "exceptionDetails" in got:
            raise RuntimeError(f"{expression}: {got['exceptionDetails']}")
        return got["result"].get("value")

    def wait(self, condition: str, timeout: float = 30.0) -> None:
        """Poll a JavaScript condition until it holds; AssertionError after `timeout` seconds."""
        end = time.monotonic() + timeout
        while not self.js(f"!!({condition})"):
            assert time.monotonic() < end, f"the page never reached: {condition}"
            time.sleep(0.05)

    def key(self, name: str) -> None:
        """Press and release a key (ArrowRight, ArrowDown, ...) on the page."""
        codes = {"ArrowLeft": 37, "ArrowUp": 38, "ArrowRight": 39, "ArrowDown": 40}
        for kind in ("keyDown", "keyUp"):
            self.b.call(
                "Input.dispatchKeyEvent",
                self.session,
                type=kind,
                key=name,
                code=name,
                windowsVirtualKeyCode=codes[name],
            )

    def errors(self) -> list:
        """The console's errors and the uncaught exceptions of this tab so far."""
        out = []
        for e in self.b.events:
            if e.get("sessionId") != self.session:
                continue
            p = e.get("params", {})
            if e.get("method") == "Runtime.exceptionThrown":
                out.append(p["exceptionDetails"].get("text"))
            elif e.get("method") == "Runtime.consoleAPICalled" and p.get("type") == "error":
                out.append(repr(p.get("args")))
            elif e.get("method") == "Log.entryAdded" and p["entry"].get("level") == "error":
                out.append(p["entry"].get("text"))
        return out

    def screenshot(self, path: Path) -> None:
        data = self.b.call("Page.captureScreenshot", self.session, format="png")["data"]
        path.write_bytes(base64.b64decode(data))


# ----------------------------------------------------------------------------- the run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A scripted run: the tiny TSV (4 items, one with two images), 2 seeds, base, verdict and mean;
    (its directory, its rows by (data, id, seed, method))."""
    tmp = tmp_path_factory.mktemp("cases")
    path, _ = tiny_tsv(tmp)
    out = tmp / "out"
    with LoopbackServer(script) as srv:
        flags = ["--seeds", "2", "--rules", "base,verdict,mean", "--judge-format", "text"]
        code = evaluate.main(
            ["--data", str(path), "--base-url", srv.url, "--out", str(out), *flags]
        )
    assert code == 0
    with open(out / "results.jsonl") as fh:
        rows = [json.loads(line) for line in fh]
    return out, {(r["data"], r["id"], r["seed"], r["method"]): r for r in rows}


def cases(rows: dict) -> set:
    return {(d, i, s) for d, i, s, _ in rows}


def shown_list(p: Page) -> list:
    return p.js(
        "[...document.querySelectorAll('#list .case')]"
        ".map(e => [e.dataset.data, e.dataset.id, Number(e.dataset.seed)])"
    )


def shown_step(p: Page) -> list:
    """Each candidate row of the step's table: its index, its text and [field, exact value, text]
    of each cell."""
    return p.js(
        "[...document.querySelectorAll('#candidates tr[data-candidate]')].map(tr => ({"
        "i: tr.dataset.candidate, text: tr.children[1].textContent, chosen: tr.className,"
        "cells: [...tr.querySelectorAll('td[data-field]')]"
        ".map(td => [td.dataset.field, td.dataset.value || null, td.textContent])}))"
    )


def expected_step(step: dict) -> list:
    """What shown_step must read for a step of a trace: every number exact, shown to 3 decimals."""
    show = lambda v: "—" if v is None else f"{v:.3f}"
    out = []
    for i, text in enumerate(step["candidates"]):
        cells = [("s_hat", v) for v in step["s_hat"][i]] + [
            ("s_star", v) for v in step["s_star"][i]
        ]
        cells += [("s_bar_star", step["s_bar_star"][i]), ("delta_star", step["delta_star"][i])]
        shown = [[f, "null" if v is None else v, show(v)] for f, v in cells]
        shown.append(["accepted", None, "yes" if step["accepted"][i] else "no"])
        out.append({"i": str(i), "text": text, "cells": shown})
    return out


def same_step(got: list, step: dict) -> None:
    """The shown step equals the trace's: texts, and each number to the last bit."""
    want = expected_step(step)
    assert [(g["i"], g["text"]) for g in got] == [(w["i"], w["text"]) for w in want]
    for g, w in zip(got, want):
        values = [(f, None if v in (None, "null") else float(v), t) for f, v, t in g["cells"]]
        wanted = [(f, None if v in (None, "null") else v, t) for f, v, t in w["cells"]]
        assert values == wanted
    chosen = [g["i"] for g in got if g["chosen"] == "chosen"]
    assert chosen == [str(step["index"])]


def url(out: Path, fragment: str = "") -> str:
    return (out / "cases.html").resolve().as_uri() + fragment


# ----------------------------------------------------------------------------- the tests


def test_the_page_opens_from_a_file_and_counts_what_the_run_holds(run, browser):
    out, rows = run
    p = browser.page(url(out))
    summary = json.loads((out / "summary.json").read_text())
    assert shown_list(p) and sorted(map(tuple, shown_list(p))) == sorted(cases(rows))
    assert p.js("Number(document.getElementById('count-shown').dataset.count)") == len(cases(rows))
    # Right answers per method and seed, counted on the page, equal summary.json's accuracy.
    cells = p.js(
        "[...document.querySelectorAll('td.acc')].map(td => [td.dataset.method, td.dataset.file,"
        " Number(td.dataset.seed), Number(td.dataset.right), Number(td.dataset.total)])"
    )
    assert len(cells) == len(summary["methods"]) * len(summary["seeds"])
    for method, f, seed, right, total in cells:
        assert total == summary["reading"][f]["items"]
        assert 100 * right / total == pytest.approx(
            summary["accuracy"][method][f]["per_seed"][seed]
        )
    assert p.errors() == []


def test_one_items_numbers_equal_its_trace(run, browser):
    out, rows = run
    p = browser.page(url(out, "#data=Tiny&id=12&seed=0&method=verdict&step=1"))
    row = rows["Tiny", "12", 0, "verdict"]
    for t, step in enumerate(row["trace"]["steps"], 1):
        if t > 1:
            p.key("ArrowRight")
        assert p.js("document.getElementById('step-title').dataset.step") == str(t)
        same_step(shown_step(p), step)
    assert p.js("document.getElementById('answer').textContent") == row["answer"]
    pred = p.js(
        "[...document.querySelectorAll('.chain')].map(c => [c.dataset.method,"
        " c.querySelector('.pred').textContent, c.querySelector('.right, .wrong').className])"
    )
    assert {m: (t, c) for m, t, c in pred} == {
        m: (
            rows["Tiny", "12", 0, m]["pred"],
            "right" if rows["Tiny", "12", 0, m]["correct"] else "wrong",
        )
        for m in ("base", "verdict", "mean")
    }
    assert p.errors() == []


def test_a_filter_changes_the_list_as_the_rows_say(run, browser):
    out, rows = run
    p = browser.page(url(out))

    def choose(select: str, value: str) -> list:
        p.js(
            f"(s => {{ s.value = {json.dumps(value)}; s.dispatchEvent(new Event('change')); }})"
            f"(document.getElementById({json.dumps(select)}))"
        )
        return sorted(map(tuple, shown_list(p)))

    right = lambda c, m: rows[(*c, m)]["correct"]
    for outcome, want in {
        "rw": lambda c: right(c, "verdict") and not right(c, "base"),
        "wr": lambda c: right(c, "base") and not right(c, "verdict"),
        "rr": lambda c: right(c, "base") and right(c, "verdict"),
        "ww": lambda c: not (right(c, "base") or right(c, "verdict")),
    }.items():
        assert choose("f-outcome", outcome) == sorted(c for c in cases(rows) if want(c)), outcome
    assert choose("f-outcome", "") == sorted(cases(rows))
    # Method B as mean, then seed 1 alone, then chains of VERDICT with a fallback step.
    got = choose("f-b", "mean") and choose("f-outcome", "wr")
    assert got == sorted(c for c in cases(rows) if right(c, "mean") and not right(c, "verdict"))
    choose("f-outcome", "")
    assert choose("f-seed", "1") == sorted(c for c in cases(rows) if c[2] == 1)
    choose("f-seed", "")
    p.js("document.getElementById('f-fallback').click()")
    fell = lambda c: any(s["fallback"] for s in rows[(*c, "verdict")]["trace"]["steps"])
    assert sorted(map(tuple, shown_list(p))) == sorted(c for c in cases(rows) if fell(c))
    assert (
        0 < len(shown_list(p)) < len(cases(rows))
    )  # the script makes seed 1's first step fall back
    assert p.errors() == []


def test_the_arrow_keys_move_to_the_next_step_and_case(run, browser):
    out, rows = run
    p = browser.page(url(out))
    first, second = shown_list(p)[:2]
    title = lambda: p.js("document.getElementById('step-title').dataset.step")
    case = lambda: p.js("document.querySelector('#list .case.current').dataset.id")
    assert (title(), case()) == ("1", first[1])
    p.key("ArrowRight")
    assert title() == "2"
    assert "step=2" in p.js("location.hash")
    p.key("ArrowRight")  # the last step: it stays
    assert title() == "2"
    p.key("ArrowLeft")
    assert title() == "1"
    p.key("ArrowDown")
    assert (case(), title()) == (second[1], "1")
    assert p.js("document.getElementById('case-title').textContent").endswith(f"seed {second[2]}")
    p.key("ArrowUp")
    assert case() == first[1]
    assert p.errors() == []


def test_a_fragment_opens_one_case_at_one_step(run, browser, tmp_path):
    out, rows = run
    fragment = "#data=Tiny&id=12&seed=1&method=verdict&step=2"
    p = browser.page(url(out, fragment))
    assert p.js("document.getElementById('case-title').textContent") == "Tiny · item 12 · seed 1"
    assert p.js("document.getElementById('step-title').dataset.method") == "verdict"
    assert p.js("document.getElementById('step-title').dataset.step") == "2"
    same_step(shown_step(p), rows["Tiny", "12", 1, "verdict"]["trace"]["steps"][1])
    assert p.js("document.querySelectorAll('#images img').length") == 2  # item 12 has two images
    assert p.js("location.hash").startswith(fragment + "&")  # then the filters: a=verdict&b=base
    shot = tmp_path / "cases.png"
    p.screenshot(shot)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("VERDICT_CASES_SCREENSHOT"):
        shutil.copy(shot, os.environ["VERDICT_CASES_SCREENSHOT"])
    print(f"screenshot: {shot}")
    assert p.errors() == []


def test_text_from_the_run_is_shown_as_text_and_never_runs(run, browser):
    out, rows = run
    p = browser.page(url(out, "#data=Tiny&id=10&seed=0&method=verdict&step=1"))
    texts = [c["text"] for c in shown_step(p)]
    assert SCRIPT_TAG in texts and IMG_TAG in texts  # exactly the candidates' text
    reasons = p.js("[...document.querySelectorAll('tr.reasons div')].map(d => d.textContent)")
    assert reasons and all(r.endswith(REASON_TAG) for r in reasons)
    assert p.js("typeof window.__pwned") == "undefined"
    assert p.js("document.querySelectorAll('script').length") == 2  # the data and the page's own
    srcs = p.js("[...document.querySelectorAll('img')].map(i => i.getAttribute('src'))")
    assert srcs and all(s.startswith("data:image/jpeg;base64,") for s in srcs)
    assert p.errors() == []


def test_missing_images_and_traces_are_shown_in_place(run, browser, tmp_path):
    out, rows = run
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    lines = (copy / "results.jsonl").read_text().splitlines()
    damaged = [json.loads(x) for x in lines]
    for r in damaged:
        if (r["id"], r["seed"], r["method"]) == ("11", 0, "verdict"):
            r["trace"] = None  # a row whose trace is gone
    (copy / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in damaged))
    (copy / "cases.html").unlink()
    done = subprocess.run(
        [os.sys.executable, "-m", "verdict_lab.cases", str(copy)],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    p = browser.page(url(copy, "#data=Tiny&id=11&seed=0&method=verdict&step=1"))
    gaps = p.js("[...document.querySelectorAll('#view .gap')].map(e => e.textContent)")
    assert any(g.startswith("image not embedded: rebuild with --data") for g in gaps), gaps
    assert any(g == "no trace: the row holds none" for g in gaps), gaps
    assert p.js("document.querySelectorAll('#images img').length") == 0
    assert p.errors() == []


def test_the_demo_page_shows_its_three_steps(browser, tmp_path):
    done = subprocess.run(
        [os.sys.executable, str(HERE / "demo.py"), "--html"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    trace = json.loads((tmp_path / "verdict_trace.json").read_text())
    p = browser.page((tmp_path / "verdict_cases.html").as_uri())
    whys = []
    for t, step in enumerate(trace["steps"], 1):
        if t > 1:
            p.key("ArrowRight")
        same_step(shown_step(p), step)
        whys.append(p.js("document.getElementById('why').textContent"))
    assert [w.split(":")[1].split()[0] for w in whys] == ["accepted", "fallback", "accepted"]
    assert p.js("document.querySelector('.chain .right').textContent") == " ✓ right"
    assert p.js("document.querySelectorAll('#images img').length") == 1
    assert p.errors() == []
