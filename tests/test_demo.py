"""Tests for demo.py: the offline run end to end, live mode against the loopback server, and
every error case (one line on stderr, exit code 2, no traceback)."""

import json
import os
import re
import subprocess
import sys

import pytest
from PIL import Image

import demo
import verdict
from verdict_lab.loopback import LoopbackServer, chat_response
from verdict_lab.layouts import role_of
from test_judges import REFUSE, revise_server
from test_zoom import SQUARE, scene

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the root


def command(name) -> list:
    """How to run `name`: a file at the root (demo.py) as `python <root>/demo.py`, a module of the folder
    (verdict_lab.evaluate) as `python -m verdict_lab.evaluate`, which finds the checkout on script_env's
    PYTHONPATH from any working directory."""
    if name.endswith(".py"):
        return [sys.executable, os.path.join(HERE, name)]
    return [sys.executable, "-m", name]


def script_env(env=None) -> dict:
    """This process's environment with the root first on PYTHONPATH, then `env` over it."""
    path = os.pathsep.join(filter(None, (HERE, os.environ.get("PYTHONPATH"))))
    return {**os.environ, "PYTHONPATH": path, **(env or {})}


def run_script(name, args, cwd=None, env=None, timeout=120):
    """`name` (see command) with `args` in `cwd`, with `env` over this process's environment; its output as
    text."""
    argv = [*command(name), *args]
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=script_env(env))


def start_script(name, args, stderr=subprocess.PIPE) -> subprocess.Popen:
    """`name` (see command) with `args`, started in the background: stdout dropped, stderr as text."""
    return subprocess.Popen(
        [*command(name), *args], stdout=subprocess.DEVNULL, stderr=stderr, text=True, env=script_env()
    )


def run_demo(args, cwd, env=None, timeout=120):
    return run_script("demo.py", args, cwd, env, timeout)


def live(url, question="Left or right?", flags="", *more, model="scripted") -> list:
    """demo.py's arguments for live mode: the endpoint, the model and the question, then `flags` split at
    spaces and `more` as they are."""
    return ["--base-url", url, "--model", model, "--question", question, *flags.split(), *more]


def check_trace(d):
    """The shape of a "verdict-trace/4" dict, as written by Trace.to_dict."""
    assert d["format"] == verdict.TRACE_FORMAT
    assert set(d) == {"format", "question", "config", "steps", "chain", "answer", "stopped", "totals", "meta"}
    assert d["stopped"] in ("final", "max_steps") and len(d["chain"]) == len(d["steps"]) >= 1
    m = len(d["config"]["lam"])
    for step, chosen in zip(d["steps"], d["chain"]):
        n, revision = len(step["candidates"]), step.get("revision")
        taken = revision is not None and revision["taken"]
        assert 0 <= step["index"] < n
        assert (revision["candidate"] if taken else step["candidates"][step["index"]]) == chosen
        assert revision is None or (step["fallback"] and len(revision["s_hat"]) == m)
        assert len(step["s_hat"]) == len(step["s_star"]) == n and all(len(r) == m for r in step["s_hat"])
        assert len(step["s_bar_star"]) == len(step["delta_star"]) == len(step["accepted"]) == n
        assert all(v is None or 0 <= v <= 1 for r in step["s_hat"] for v in r)
        rows = step["s_hat"] + ([revision["s_hat"]] if revision else [])
        assert step["abstentions"] == sum(v is None for r in rows for v in r)
        assert step["fallback"] == (not any(step["accepted"]))
        calls = step.get("calls", [[None] * m] * n)
        calls = calls + ([revision.get("calls", [None] * m)] if revision else [])
        assert len(calls) == len(rows) and all(len(r) == m for r in calls)  # a record per judge call
    assert d["totals"]["steps"] == len(d["steps"])
    assert d["totals"]["judge_calls"] == sum((len(s["s_hat"]) + ("revision" in s)) * m for s in d["steps"])


def test_offline_run(tmp_path):
    out = run_demo([], cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("offline demo: scripted proposer and scripted judges")
    d = json.loads((tmp_path / "verdict_trace.json").read_text())
    check_trace(d)
    with Image.open(tmp_path / "verdict_decisions.png") as img:
        assert img.size == (640, 480) and img.format == "PNG"
    with Image.open(tmp_path / "verdict_scene.png") as img:
        assert img.size == (320, 200)
    # The printed decisions are the trace's decisions.
    printed = [
        (int(m[1]), m[2] is not None)
        for m in re.finditer(r"^step \d+ +\(chosen #(\d+), (fallback)?", out.stdout, re.M)
    ]
    assert printed == [(s["index"], s["fallback"]) for s in d["steps"]]
    flags = [m[1] == "yes" for m in re.finditer(r"(yes|no)( ◀ chosen.*)?$", out.stdout, re.M)]
    assert flags == [a for s in d["steps"] for a in s["accepted"]]
    # The scripted run shows what it promises: acceptance, a Proposition-1 rejection, a fallback,
    # a step where the raw mean disagrees, and the final answer.
    assert [s["fallback"] for s in d["steps"]] == [False, True, False]
    assert d["steps"][0]["s_hat"][1] == [0.9, 0.2, 0.9] and d["steps"][0]["accepted"][:2] == [True, False]
    assert "the raw mean would have chosen #0 instead" in out.stdout
    assert d["answer"] == "B" and "final answer: B" in out.stdout
    assert re.search(
        r"^totals: 3 steps, 1 fallback \(33%\), 0 abstentions, 27 judge calls$", out.stdout, re.M
    )


def test_offline_run_is_deterministic(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    assert run_demo([], cwd=a).stdout == run_demo([], cwd=b).stdout
    assert (a / "verdict_trace.json").read_bytes() == (b / "verdict_trace.json").read_bytes()
    assert (a / "verdict_decisions.png").read_bytes() == (b / "verdict_decisions.png").read_bytes()


def scripted_judge_server(body, path):
    """Reasoner calls get one step each (the final answer at the second step); judges score 0.8."""
    system = body["messages"][0]["content"]
    user = body["messages"][-1]["content"]
    text = user if isinstance(user, str) else " ".join(p.get("text", "") for p in user)
    if "Score:" in system or "Score:" in text:
        return 200, chat_response(["The step is supported.\nScore: 0.8"] * body.get("n", 1)), {}
    done = "Step 1" in text
    return (
        200,
        chat_response(
            [
                ("Final answer: B" if done else f"Step {i + 1}: the ball is right.")
                for i in range(body.get("n", 1))
            ]
        ),
        {},
    )


def test_live_mode_against_loopback(tmp_path):
    img = tmp_path / "scene.png"
    demo.draw_scene(str(img))
    with LoopbackServer(scripted_judge_server) as srv:
        out = run_demo(
            live(
                srv.url,
                "Left or right?",
                "--max-steps 3 --concurrency 4 --judge-format text",
                *("--image", str(img), "--choices", "A. left|B. right"),
            ),
            cwd=tmp_path,
            env={"OPENAI_API_KEY": "sk-secret-demo"},
        )
        assert out.returncode == 0, out.stderr
        requests = list(srv.requests)
    d = json.loads((tmp_path / "verdict_trace.json").read_text())
    check_trace(d)
    assert d["meta"]["mode"] == "live" and "A. left" in d["question"]
    assert all(v == 0.8 for s in d["steps"] for r in s["s_hat"] for v in r)
    assert "sk-secret-demo" not in (tmp_path / "verdict_trace.json").read_text() + out.stdout + out.stderr
    chat = [r for r in requests if r[0].endswith("/chat/completions")]
    usage = d["meta"]["usage"]["reasoner"]
    # 1 reasoner call and 3 judge calls per candidate; the 3 identical candidates "Final answer: B" make
    # identical judge calls, and those in flight at the same time share one request
    assert usage["calls"] == sum(1 + 3 * len(s["candidates"]) for s in d["steps"])
    assert (
        len({json.dumps(r[1], sort_keys=True) for r in chat}) <= len(chat) == usage["calls"] - usage["merged"]
    )
    # each step's share of that (verdict.run's meter), summed in the totals
    assert [s["usage"]["calls"] for s in d["steps"]] == [1 + 3 * len(s["candidates"]) for s in d["steps"]]
    assert d["totals"]["usage"] == {k: v for k, v in usage.items()}


def test_live_mode_text_only(tmp_path):
    with LoopbackServer(scripted_judge_server) as srv:
        out = run_demo(live(srv.url, "Is 3 > 2?", "--max-steps 2 --judge-format text"), cwd=tmp_path)
        user = [r[1]["messages"][-1]["content"] for r in srv.requests if r[0].endswith("/chat/completions")]
    assert out.returncode == 0, out.stderr
    assert user and all(isinstance(u, str) for u in user)  # no image: plain string content


def json_judge_server(body, path):
    """scripted_judge_server, except that a judge asked for JSON (response_format) answers score 7 of 9."""
    if "response_format" in body:
        return 200, chat_response('{"reason": "The ball is right of the cube.", "score": 7}'), {}
    return scripted_judge_server(body, path)


def test_live_mode_asks_for_json_by_default(tmp_path):
    with LoopbackServer(json_judge_server) as srv:
        out = run_demo(live(srv.url, flags="--n 2"), cwd=tmp_path)
        judged = [b for b in srv.chats if "response_format" in b]
    assert out.returncode == 0 and out.stderr == "", out.stderr
    d = json.loads((tmp_path / "verdict_trace.json").read_text())
    check_trace(d)
    assert all(v == 7 / 9 for s in d["steps"] for r in s["s_hat"] for v in r)
    # Identical judge calls in flight at once share one request (client.Client), so count distinct requests.
    distinct = {(t, c) for t, s in enumerate(d["steps"]) for c in s["candidates"]}
    assert len({json.dumps(b, sort_keys=True) for b in judged}) == 3 * len(distinct)
    assert len(judged) <= d["totals"]["judge_calls"] == sum(3 * len(s["candidates"]) for s in d["steps"])
    meta = d["meta"]["judges"]
    assert (meta["format"], meta["format_used"], meta["fallback"], meta["s_hat"]) == (
        "json",
        "json",
        None,
        "sampled",
    )
    calls = [[[c["sampled"] for c in row] for row in s["calls"]] for s in d["steps"]]
    assert calls == [s["s_hat"] for s in d["steps"]]
    records = [c for s in d["steps"] for row in s["calls"] for c in row]
    assert all(c["weighted"] is None for c in records)  # this server sends no logprobs
    assert all(c["reason"] == "The ball is right of the cube." for c in records)


def refuse_json(body, path):
    """scripted_judge_server behind a server that cannot constrain its output: response_format gets a 400."""
    return REFUSE if "response_format" in body else scripted_judge_server(body, path)


def test_live_mode_falls_back_to_text_once_and_says_so(tmp_path):
    with LoopbackServer(refuse_json) as srv:
        out = run_demo(live(srv.url, flags="--n 2 --concurrency 4"), cwd=tmp_path)
        refused = sum("response_format" in b for b in srv.chats)
    assert out.returncode == 0, out.stderr
    assert len(out.stderr.splitlines()) == 1 and "refused response_format" in out.stderr
    assert "but got: json_schema" in out.stderr
    d = json.loads((tmp_path / "verdict_trace.json").read_text())
    check_trace(d)
    assert all(v == 0.8 for s in d["steps"] for r in s["s_hat"] for v in r) and 1 <= refused <= 4
    meta = d["meta"]["judges"]
    assert (meta["format"], meta["format_used"]) == ("json", "text") and 1 <= meta["fallback"][
        "at_call"
    ] <= refused
    assert "HTTP 400" in meta["fallback"]["error"]


def grounded_server(body, path):
    """scripted_judge_server, plus the judge modes' calls: a prior, a fact sheet, premise checks."""
    role = role_of(body["messages"])
    if role == "prior":
        return 200, chat_response("- The ball must be found right of the cube."), {}
    if role == "premises":
        return (
            200,
            chat_response(
                json.dumps(
                    {
                        "objects": [{"fact": "a blue ball"}],
                        "numbers": [],
                        "structure": [],
                        "relations": [{"fact": "the ball is right of the cube"}],
                    }
                )
            ),
            {},
        )
    if role == "premise_check":
        return 200, chat_response('{"claims": [{"claim": "the ball is right", "label": "supported"}]}'), {}
    return scripted_judge_server(body, path)


def test_live_mode_with_judge_modes_records_them_in_the_trace(tmp_path):
    with LoopbackServer(grounded_server) as srv:
        out = run_demo(
            live(srv.url, flags="--n 2 --max-steps 1 --judge-mode prior+premises+gate --judge-format text"),
            cwd=tmp_path,
        )
        chats = [r[1] for r in srv.requests if r[0].endswith("/chat/completions")]
    assert out.returncode == 0, out.stderr
    d = json.loads((tmp_path / "verdict_trace.json").read_text())
    check_trace(d)
    g = d["meta"]["judge_mode"]
    assert (
        g["judge_mode"] == "prior+premises+gate"
        and g["prior"] == "- The ball must be found right of the cube."
    )
    assert g["fact_sheet_status"] == "ok" and [e["r"] for e in g["gate"]] == [1.0]  # one check for one text
    judged = [c["messages"] for c in chats if "Score:" in c["messages"][-1]["content"]]
    assert g["extra_calls"] == 1 + 1 + 1 and all("Reference expectations" in m[-1]["content"] for m in judged)
    assert (
        len({json.dumps(m) for m in judged}) == 3 and d["totals"]["judge_calls"] == 2 * 3
    )  # 2 identical candidates
    gates = [c["gate"] for row in d["steps"][0]["calls"] for c in row]  # every call's own gate record
    assert gates == [{"s_hat": 0.8, "gated": 0.8, "nu": 1, "r": 1.0, "alpha": 1.0}] * 6
    assert (
        "judge mode prior+premises+gate; prior of 43 characters; fact sheet ok (2 facts); "
        "1 premise checks (r = 1.00); 3 extra calls, "
    ) in out.stdout


# The flags demo.py and verdict_lab.evaluate share (add_verifier_args), refused in the same words by both.
VERIFIER_ERRORS = [
    (flags.split(), message)
    for flags, message in (
        ("--tau nan", "--tau must be in [0, 1]"),
        ("--tau 5", "--tau must be in [0, 1] (s̄* <= 1: tau = 1 accepts nothing), got tau=5.0"),
        ("--eps -1", "--eps must be in (0, 1]"),
        ("--n 0", "--n must be an integer >= 1, got n=0"),
        ("--max-steps 0", "--max-steps must be an integer >= 1, got max_steps=0"),
        ("--mode-max-tokens 0", "--mode-max-tokens must be an integer >= 1, got mode_max_tokens=0"),
    )
]


def refuse_model(body, path):
    return 404, {"error": {"message": f"The model `{body['model']}` does not exist."}}, {}


@pytest.mark.parametrize(
    "args, needle",
    [
        *VERIFIER_ERRORS,
        (["--n", "three"], "--n"),
        (["--rule", "median"], "median"),
        (
            [
                "--base-url",
                "http://127.0.0.1:9/v1",
                "--model",
                "x",
                "--question",
                "q",
                "--image",
                "/no/such.png",
            ],
            "/no/such.png",
        ),
        (["--base-url", "http://127.0.0.1:9/v1", "--model", "x"], "--question"),
        (["--judge-mode", "prior"], "needs a live model (--base-url)"),
        (["--revise"], "--revise needs a live model (--base-url)"),
        # the hidden old names are gone: argparse refuses them
        (["--judge-modes", "prior"], "error: unrecognized arguments: --judge-modes prior"),
        (["--score-only"], "error: unrecognized arguments: --score-only"),
        (
            ["--base-url", "http://127.0.0.1:9/v1", "--question", "q", "--judge-mode", "sgv"],
            "judge mode 'sgv'",
        ),
        (
            ["--base-url", "http://127.0.0.1:9/v1", "--question", "q", "--judge-mode", "gate"],
            "the gate needs",
        ),
        (
            ["--base-url", "http://127.0.0.1:9/v1", "--question", "q", "--judge-mode", "prior,zoom"],
            "one mode",
        ),
        (["--base-url", "http://127.0.0.1:9/v1", "--question", "   "], "--question is blank"),
        (["--question", " \t "], "--question is blank"),
        (["--choices", "garbage"], "--choices must be two or more options"),
        (["--choices", "|||"], "got '|||'"),
        (["--choices", "A. left"], "--choices must be two or more options"),
        (["--choices", "A. left|a. right"], "distinct letters"),
        (
            ["--base-url", "ftp://127.0.0.1:9/v1", "--question", "q"],
            "endpoint URL must be http:// or https://",
        ),
    ],
)
def test_errors_are_one_line_with_exit_2(tmp_path, args, needle):
    out = run_demo(args, cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    assert (
        len(out.stderr.strip().splitlines()) == 1 and needle in out.stderr and "Traceback" not in out.stderr
    )


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--tau", "2"),
        ("--tau", "-0.1"),
        ("--eps", "-1"),
        ("--eps", "0"),
        ("--eps", "1.5"),
        ("--tau", "5"),
        ("--tau", "1.01"),
    ],
)
def test_tau_and_eps_out_of_range_are_refused_before_any_call(tmp_path, flag, value):
    with LoopbackServer(scripted_judge_server) as srv:
        out = run_demo(["--base-url", srv.url, "--question", "q", flag, value], cwd=tmp_path)
        assert srv.requests == []
    assert out.returncode == 2 and out.stderr.startswith(f"demo.py: error: {flag} must be in ")
    assert len(out.stderr.splitlines()) == 1 and not (tmp_path / "verdict_trace.json").exists()


@pytest.mark.parametrize("tau, eps", [("0", "1"), ("1", "0.01")])  # τ = 1: every step by the fallback
def test_tau_and_eps_at_the_ends_of_their_ranges_run_and_plot(tmp_path, tau, eps):
    out = run_demo(["--tau", tau, "--eps", eps], cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    with Image.open(tmp_path / "verdict_decisions.png") as img:
        assert img.size == (640, 480)


@pytest.mark.parametrize(
    "rule, how",
    [
        ("max", "no filter, highest maximum score"),
        ("mean", "no filter, highest raw mean"),
        ("majority", "no filter, most judges above τ, then highest raw mean"),
        ("no-filter", "no filter, highest s̄*"),
    ],
)
def test_a_rule_without_a_filter_says_what_it_did(tmp_path, rule, how):
    out = run_demo(["--rule", rule], cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    d = json.loads((tmp_path / "verdict_trace.json").read_text())
    headers = re.findall(r"^step \d+ +\(chosen #(\d+), (.*)\)$", out.stdout, re.M)
    assert headers == [(str(s["index"]), how) for s in d["steps"]]
    rows = re.findall(r"^  \d  .*  (yes| no|  -)( ◀ chosen.*)?$", out.stdout, re.M)
    assert len(rows) == 9 and all(ok == "  -" for ok, _ in rows) and "(fallback)" not in out.stdout
    if rule == "max":  # step 1: (0.9, 0.2, 0.9) has the highest maximum, 0.9
        assert headers[0][0] == "1"


def test_a_rule_with_a_filter_marks_its_rows(tmp_path):
    out = run_demo(["--rule", "raw-dual"], cwd=tmp_path)
    d = json.loads((tmp_path / "verdict_trace.json").read_text())
    flags = [m[1] == "yes" for m in re.finditer(r"(yes| no)( ◀ chosen.*)?$", out.stdout, re.M)]
    assert flags == [a for s in d["steps"] for a in s["accepted"]] and not all(flags)
    assert re.search(
        r"^step 1 +\(chosen #\d, (accepted on raw scores, highest raw mean|fallback: .*)\)$", out.stdout, re.M
    )


@pytest.mark.parametrize(
    "flags, env, warned",
    [
        (
            ["--api-key-env", "VERDICT_UNSET_KEY"],
            {},
            "demo.py: warning: $VERDICT_UNSET_KEY is not set, so no API key is sent to ",
        ),
        (
            [],
            {"OPENAI_API_KEY": ""},
            None,
        ),  # the default variable, unset, on loopback: a local server needs no key
        (["--api-key-env", "VERDICT_SET_KEY"], {"VERDICT_SET_KEY": "sk-demo-secret"}, None),
    ],
)
def test_an_unset_key_variable_is_warned_about_once(tmp_path, flags, env, warned):
    with LoopbackServer(scripted_judge_server) as srv:
        out = run_demo(
            ["--base-url", srv.url, "--question", "Is 3 > 2?", "--max-steps", "1", *flags],
            cwd=tmp_path,
            env={"VERDICT_UNSET_KEY": "", **env},
        )
        url = srv.url
    assert out.returncode == 0, out.stderr
    assert out.stderr == ("" if warned is None else f"{warned}{url}\n") and "sk-demo-secret" not in out.stderr


def test_unreachable_server_and_wrong_model(tmp_path):
    import socket

    with socket.socket() as s:  # a port with nobody listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = run_demo(
        ["--base-url", f"http://127.0.0.1:{port}/v1", "--model", "x", "--question", "q", "--retries", "0"],
        cwd=tmp_path,
    )
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    assert f"127.0.0.1:{port}" in out.stderr
    with LoopbackServer(refuse_model) as srv:
        out = run_demo(["--base-url", srv.url, "--model", "no-such-model", "--question", "q"], cwd=tmp_path)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "The model `no-such-model` does not exist." in out.stderr and "404" in out.stderr


YES_NO = ("--choices", "A. yes|B. no")


def test_live_zoom_mode_records_the_regions_and_prints_their_paths(tmp_path):
    def server(body, path):
        if role_of(body["messages"]) == "zoom":
            return 200, chat_response(json.dumps({"boxes": [SQUARE]})), {}
        return scripted_judge_server(body, path)

    with LoopbackServer(server) as srv:
        out = run_demo(
            live(
                srv.url,
                "Left or right?",
                "--n 2 --max-steps 1 --judge-mode zoom",
                "--image",
                str(scene(tmp_path / "s.png")),
            ),
            cwd=tmp_path,
        )
    assert out.returncode == 0, out.stderr
    g = json.loads((tmp_path / "verdict_trace.json").read_text())["meta"]["judge_mode"]
    assert g["judge_mode"] == "zoom" and [e["path"] for e in g["zoom"]] == ["zoom"] and g["extra_calls"] == 1
    assert "judge mode zoom; 1 region requests (zoom); 1 extra calls, " in out.stdout


def test_live_revise_judges_the_revision_and_prints_it(tmp_path):
    with LoopbackServer(revise_server) as srv:
        out = run_demo(
            live(srv.url, "Where is the cube?", "--n 2 --revise", "--choices", "A. left|B. right"),
            cwd=tmp_path,
        )
    assert out.returncode == 0, out.stderr
    d = json.loads((tmp_path / "verdict_trace.json").read_text())
    check_trace(d)
    (step,) = d["steps"]
    assert step["fallback"] and step["revision"]["taken"] and d["answer"] == "B"
    assert step["revision"]["usage"]["calls"] == 4  # the reviser's call and the revision's three judgements
    assert "  R  Final answer: B" in out.stdout and "yes ◀ chosen (revised)" in out.stdout
    assert "◀ chosen (fallback)" not in out.stdout and "1 revision (1 taken)" in out.stdout
