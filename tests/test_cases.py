"""Tests for verdict_lab/cases.py, the case viewer, without a browser (tests/test_cases_browser.py
opens the page in Chromium): the page's data equals the run's files, text stays text, images are
embedded small and once, gaps are said in place, evaluate writes the page and a page that cannot be
written loses nothing, the rebuild command and demo.py --html."""

import base64
import io
import json
import os
import re
import sys

import pytest
from PIL import Image

from verdict_lab import cases, evaluate
from verdict_lab.loopback import LoopbackServer
from test_benchmarks import tiny_tsv
from test_cases_browser import IMG_TAG, REASON_TAG, SCRIPT_TAG, script
from test_demo import run_demo, run_script
from test_imports import run_alone

DATA_RE = re.compile(r'<script type="application/json" id="cases-data">(.*?)</script>', re.S)


def evaluate_run(tmp_path, flags="--seeds 2 --rules base,verdict,mean --judge-format text"):
    """A scripted run of the tiny TSV (tests/test_cases_browser.py's script); (its OUT, the TSV)."""
    path, _ = tiny_tsv(tmp_path)
    out = tmp_path / "out"
    with LoopbackServer(script) as srv:
        args = ["--data", str(path), "--base-url", srv.url, "--out", str(out), *flags.split()]
        assert evaluate.main(args) == 0
    return out, path


def page_data(path) -> dict:
    """The JSON a page embeds, read back as the page's script reads it."""
    html = open(path, encoding="utf-8").read()
    found = DATA_RE.findall(html)
    assert len(found) == 1
    return json.loads(found[0])


def results(out) -> list:
    with open(out / "results.jsonl") as fh:
        return [json.loads(line) for line in fh]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return evaluate_run(tmp_path_factory.mktemp("run"))


# ----------------------------------------------------------------------------- the page's data


def test_evaluate_writes_the_page_and_its_numbers_are_the_traces(run):
    out, _ = run
    data, rows = page_data(out / "cases.html"), results(out)
    assert data["format"] == cases.PAGE_FORMAT
    assert len(data["rows"]) == len(rows) == 4 * 2 * 3  # items × seeds × methods
    for r in rows:
        item = next(i for i in data["items"] if (i["data"], i["id"]) == (r["data"], r["id"]))
        shown = data["rows"][item["rows"][r["method"]][str(r["seed"])]]
        assert (shown["pred"], shown["correct"], shown["stopped"]) == (
            r["pred"],
            r["correct"],
            r["stopped"],
        )
        for k, step in zip(shown["steps"], r["trace"]["steps"], strict=True):
            got = data["steps"][k]
            for key in ("candidates", "s_hat", "s_star", "s_bar_star", "delta_star", "accepted"):
                assert got[key] == step[key]  # the trace's floats, to the last bit
            assert got["index"] == step["index"] and got["fallback"] == step["fallback"]
        assert item["answer"] == r["answer"] and item["question"] == r["trace"]["question"]


def test_proposition_1s_pair_is_shown_as_the_trace_holds_it(run):
    # Step 2 of every judged chain scores "Final answer: A" (0.9, 0.2, 0.9) and "Final answer: B"
    # (0.7, 0.6, 0.7): s̄* = 0.4007·0.9 + 0.3206·0.2 + 0.2787·0.9 = 0.6756 and Δ* = 0.1268,
    # rejected; s̄* = 0.6679 and Δ* = 0.0181, accepted (DESIGN §3, erratum 2).
    out, _ = run
    data = page_data(out / "cases.html")
    pair = {"Final answer: A", "Final answer: B"}
    step = next(s for s in data["steps"] if pair <= set(s["candidates"]))
    a, b = step["candidates"].index("Final answer: A"), step["candidates"].index("Final answer: B")
    assert step["s_bar_star"][a] == pytest.approx(0.6756, abs=1e-4)
    assert step["delta_star"][a] == pytest.approx(0.1268, abs=1e-4)
    assert step["s_bar_star"][b] == pytest.approx(0.6679, abs=1e-4)
    assert step["delta_star"][b] == pytest.approx(0.0181, abs=1e-4)
    assert (step["accepted"][a], step["accepted"][b]) == (False, True)


def test_steps_that_chains_share_are_stored_once(run):
    out, _ = run
    data, rows = page_data(out / "cases.html"), results(out)
    distinct = {
        json.dumps(s, sort_keys=True)
        for r in rows
        for s in r["trace"]["steps"]
        if r["method"] != "base"
    }
    judged = [r for r in data["rows"] if r["method"] != "base"]
    assert (
        len({k for r in judged for k in r["steps"]})
        == len(distinct)
        < sum(len(r["steps"]) for r in judged)
    )


def test_each_step_says_why_its_candidate_was_taken():
    accepted = {"s_hat": [[0.7, 0.6, 0.7]], "fallback": False, "verified": True}
    fallback = {**accepted, "fallback": True}
    revised = {**fallback, "revision": {"taken": True}}
    declined = {**fallback, "revision": {"taken": False}}
    base = {"s_hat": [[]], "fallback": False, "verified": False}
    assert cases.why(accepted, "verdict").startswith("accepted (s̄* > τ and Δ* < ε)")
    assert cases.why(fallback, "verdict") == "fallback: no candidate accepted; the highest s̄* − Δ*"
    assert cases.why(revised, "verdict").startswith("revised: ")
    assert cases.why(declined, "verdict").endswith("; the reviser's step did not pass")
    assert cases.why(base, "base") == "unverified: the reasoner alone, its first candidate"
    assert cases.why(accepted, "mean") == "the highest raw mean"


# ----------------------------------------------------------------------------- text stays text


def test_text_from_a_run_cannot_end_the_data_or_become_markup(run):
    out, _ = run
    html = (out / "cases.html").read_text(encoding="utf-8")
    # The run's hostile texts are in the data, escaped: no <, > or & of theirs reaches the HTML.
    assert SCRIPT_TAG not in html and IMG_TAG not in html and REASON_TAG not in html
    assert len(re.findall(r"<script", html, re.I)) == 2 and "<img" not in html
    data = page_data(out / "cases.html")
    texts = {c for s in data["steps"] for c in s["candidates"]}
    reasons = {x for s in data["steps"] for row in s["reasons"] or [] for x in row}
    assert {SCRIPT_TAG, IMG_TAG} <= texts and reasons == {REASON_TAG.replace("\n", "")}
    # The page's script adds text with textContent or text nodes, never as markup.
    assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write", html)


def test_a_title_and_a_text_that_close_the_script_element_stay_text():
    row = {"data": "d</script>", "id": "1", "seed": 0, "method": "base", "answer": "A"}
    data = cases.payload([{**row, "trace": None, "error": "</script><b>x"}], {}, None, "<b>t</b>")
    html = cases.page(data)
    assert "<b>" not in html and "&lt;b&gt;t&lt;/b&gt;" in html
    assert json.loads(DATA_RE.findall(html)[0]) == json.loads(json.dumps(data))


# ----------------------------------------------------------------------------- images and gaps


def png(size, colour="red") -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, "PNG")
    return buf.getvalue()


@pytest.mark.parametrize("size", [(1000, 500), (200, 900), (100, 60)])
def test_an_image_is_scaled_down_to_the_documented_size_never_up(size):
    url = cases.thumbnail(png(size))
    assert url.startswith("data:image/jpeg;base64,")
    got = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).size
    longest = min(max(size), cases.IMAGE_SIZE)
    assert max(got) == longest
    assert abs(got[0] / got[1] - size[0] / size[1]) < 0.02  # the aspect is kept


def test_an_image_shared_by_items_is_embedded_once_and_a_bad_one_is_said():
    table = cases.Images()
    red = png((50, 50))
    assert table.add(red) == table.add(bytes(red)) == 0 and len(table.urls) == 1
    said = table.add(b"not an image")
    assert isinstance(said, str) and said.startswith("image not shown: ")


def test_a_rebuild_takes_images_from_data_and_shows_what_is_missing(run, tmp_path):
    out, tsv = run
    assert cases.main([str(out), "--data", str(tsv)]) == 0
    data = page_data(out / "cases.html")
    assert len(data["images"]) == 3  # red (shared by items 10, 11 and 13), blue, green
    assert all(isinstance(x, int) for i in data["items"] for x in i["images"])
    assert cases.main([str(out)]) == 0
    gaps = {x for i in page_data(out / "cases.html")["items"] for x in i["images"]}
    assert gaps == {"image not embedded: rebuild with --data (the file of Tiny)"}
    # A data file whose item changed since the run: that item's image is not shown.
    changed = tmp_path / "Tiny.tsv"
    changed.write_text(tsv.read_text().replace("What colour is the square?", "Which colour?"))
    assert cases.main([str(out), "--data", str(changed)]) == 0
    items = {i["id"]: i["images"] for i in page_data(out / "cases.html")["items"]}
    assert items["10"] == [
        f"image not shown: item 10 of {changed} differs from the one its rows ran"
    ]
    assert all(isinstance(x, int) for x in items["12"])


def test_a_run_without_summary_or_traces_still_gives_a_page(run, tmp_path, capsys):
    out, _ = run
    copy = tmp_path / "copy"
    copy.mkdir()
    rows = results(out)
    rows[0]["trace"] = None
    (copy / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"trunc')
    assert cases.main([str(copy)]) == 0
    assert "no summary.json" in capsys.readouterr().err
    data = page_data(copy / "cases.html")
    assert data["summary"] is None and len(data["rows"]) == len(rows)
    first = data["rows"][data["items"][0]["rows"][rows[0]["method"]][str(rows[0]["seed"])]]
    assert first["gap"] == "no trace: the row holds none" and first["steps"] == []


@pytest.mark.parametrize(
    "args, message",
    [
        (["nowhere"], "No such file or directory: 'nowhere'"),
        (["--image-size", "4", "x"], "--image-size must be at least 16, got 4"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path):
    done = run_script("verdict_lab.cases", args, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("verdict_lab.cases: error: ") and message in done.stderr


def test_a_directory_that_holds_no_run_and_a_file_that_is_no_trace_are_refused(tmp_path):
    (tmp_path / "t.json").write_text('{"format": "verdict-eval/4"}')
    for source, message in (
        (tmp_path, "holds no run"),
        (tmp_path / "t.json", "not a verdict trace"),
    ):
        done = run_script("verdict_lab.cases", [str(source)], cwd=tmp_path)
        assert done.returncode == 2 and message in done.stderr, done.stderr


# ----------------------------------------------------------------------------- evaluate's hook


def test_a_page_that_cannot_be_written_loses_no_result(tmp_path):
    path, _ = tiny_tsv(tmp_path)
    out = tmp_path / "out"
    (out / "cases.html").mkdir(parents=True)  # a directory where the page would go
    with LoopbackServer(script) as srv:
        args = ["--data", str(path), "--base-url", srv.url, "--out", str(out)]
        done = run_script(
            "verdict_lab.evaluate",
            [*args, "--seeds", "1", "--rules", "base,verdict", "--judge-format", "text"],
        )
    assert done.returncode == 2, done.stderr
    said = [line for line in done.stderr.splitlines() if "cases.html" in line]
    assert len(said) == 1 and "the rows and tables are kept" in said[0]
    assert len(results(out)) == 4 * 2 and (out / "summary.json").exists()
    assert "| verdict |" in done.stdout  # the table was printed


# ----------------------------------------------------------------------------- demo.py --html


def test_demo_html_writes_the_page_of_its_trace(tmp_path):
    done = run_demo(["--html"], tmp_path)
    assert done.returncode == 0 and "wrote verdict_cases.html" in done.stdout, done.stderr
    trace = json.loads((tmp_path / "verdict_trace.json").read_text())
    data = page_data(tmp_path / "verdict_cases.html")
    (row,) = data["rows"]
    assert row["correct"] is True and row["pred"] == "B" and len(row["steps"]) == 3
    whys = [data["steps"][k]["why"].split()[0].rstrip(":") for k in row["steps"]]
    assert whys == ["accepted", "fallback", "accepted"]
    for k, step in zip(row["steps"], trace["steps"]):
        assert data["steps"][k]["s_bar_star"] == step["s_bar_star"]
    assert len(data["images"]) == 1


def test_demo_html_without_verdict_lab_is_one_line_and_writes_nothing(tmp_path):
    files = ["verdict.py", "judges.py", "prompts", "demo.py"]
    done = run_alone(tmp_path, files, {"verdict_lab"}, [sys.executable, "demo.py", "--html"])
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("demo.py: error: --html needs verdict_lab")
    assert not os.path.exists(tmp_path / "verdict_trace.json")
