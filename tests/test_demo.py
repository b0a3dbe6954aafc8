"""Tests for demo.py: the offline run end to end (its output is the README's, byte for byte), the
trace and the plot it writes, live mode against the loopback server, every error case (one line on
stderr, exit code 2, no traceback, no call), and that demo.py needs no module of verdict_lab."""

import ast
import io
import json
import math
import os
import re
import socket
import subprocess
import sys
from functools import partial

import pytest
from PIL import Image

import demo
import judges
import verdict
from verdict_lab.layouts import role_of
from verdict_lab.loopback import LoopbackServer, chat_response

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the root


def command(name) -> list:
    """How to run `name`: a file at the root (demo.py) as `python <root>/demo.py`, a module of the
    folder (verdict_lab.evaluate) as `python -m verdict_lab.evaluate`, which finds the checkout on
    script_env's PYTHONPATH from any working directory."""
    if name.endswith(".py"):
        return [sys.executable, os.path.join(HERE, name)]
    return [sys.executable, "-m", name]


def script_env(env=None) -> dict:
    """This process's environment with the root first on PYTHONPATH, then `env` over it."""
    path = os.pathsep.join(filter(None, (HERE, os.environ.get("PYTHONPATH"))))
    return {**os.environ, "PYTHONPATH": path, **(env or {})}


def run_script(name, args, cwd=None, env=None, timeout=120):
    """`name` (see command) with `args` in `cwd`, with `env` over this process's environment; its
    output as text."""
    argv = [*command(name), *args]
    return subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=script_env(env)
    )


def start_script(name, args, stderr=subprocess.PIPE) -> subprocess.Popen:
    """`name` (see command) with `args`, started in the background: stdout dropped, stderr as
    text."""
    return subprocess.Popen(
        [*command(name), *args],
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        text=True,
        env=script_env(),
    )


def run_demo(args, cwd, env=None, timeout=120):
    return run_script("demo.py", args, cwd, env, timeout)


def live(url, question="Left or right?", flags="", *more, model="scripted") -> list:
    """demo.py's arguments for live mode: the endpoint, the model and the question, then `flags`
    split at spaces and `more` as they are."""
    return ["--base-url", url, "--model", model, "--question", question, *flags.split(), *more]


TOP = ["format", "question", "config", "steps", "chain", "answer", "stopped", "totals", "meta"]
CONFIG = ["lam", "n", "tau", "eps", "rule", "max_steps", "final"]
STEP = [
    *("candidates", "s_hat", "s_star", "s_bar_star", "delta_star", "accepted", "index", "fallback"),
    *("verified", "abstentions"),
]
TOTALS = ["steps", "fallbacks", "fallback_rate", "abstentions", "judge_calls"]


def check_trace(d):
    """The shape of a "verdict-trace/5" dict, as demo.py writes it: its keys in their order, and
    every step consistent with itself and with the chain."""
    assert d["format"] == demo.TRACE_FORMAT == "verdict-trace/5"
    assert (list(d), list(d["config"]), list(d["totals"])) == (TOP, CONFIG, TOTALS)
    assert d["stopped"] in ("final", "max_steps") and len(d["chain"]) == len(d["steps"]) >= 1
    m = len(d["config"]["lam"])
    for step, chosen in zip(d["steps"], d["chain"]):
        n = len(step["candidates"])
        assert list(step) == STEP and 0 <= step["index"] < n
        assert step["candidates"][step["index"]] == chosen
        assert len(step["s_hat"]) == len(step["s_star"]) == n
        assert all(len(r) == m for r in step["s_hat"] + step["s_star"])
        assert len(step["s_bar_star"]) == len(step["delta_star"]) == len(step["accepted"]) == n
        assert all(v is None or 0 <= v <= 1 for r in step["s_hat"] for v in r)
        assert step["abstentions"] == sum(v is None for r in step["s_hat"] for v in r)
        assert step["fallback"] == (not any(step["accepted"]))
    assert d["totals"]["steps"] == len(d["steps"])
    assert d["totals"]["judge_calls"] == sum(len(s["s_hat"]) * m for s in d["steps"])


def readme_block() -> str:
    """The offline demo's output as README.md shows it, from "offline demo:" to "wrote ..."."""
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as fh:
        text = fh.read()
    start = text.index("\noffline demo:") + 1
    end = text.index("wrote verdict_trace.json and verdict_decisions.png\n", start)
    return text[start : end + len("wrote verdict_trace.json and verdict_decisions.png\n")]


# ----------------------------------------------------------------------------- offline


def test_offline_output_is_the_readmes_byte_for_byte(tmp_path):
    out = run_demo([], cwd=tmp_path)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert out.stdout == readme_block()


def test_offline_run(tmp_path):
    out = run_demo([], cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    d = json.loads((tmp_path / "verdict_trace.json").read_text())
    check_trace(d)
    assert d["meta"] == {"mode": "offline", "scene": "verdict_scene.png"}
    assert d["config"] == {
        "lam": [1.5, 1.0, 0.8],
        **dict(n=3, tau=0.6, eps=0.1, rule="verdict", max_steps=8, final=verdict.FINAL_ANSWER),
    }
    with Image.open(tmp_path / "verdict_decisions.png") as img:
        assert img.size == (640, 480) and img.format == "PNG"
    with Image.open(tmp_path / "verdict_scene.png") as img:
        assert img.size == (320, 200)
    # No temporary file is left behind.
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "verdict_decisions.png",
        "verdict_scene.png",
        "verdict_trace.json",
    ]
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
    assert d["steps"][0]["s_hat"][1] == [0.9, 0.2, 0.9]
    assert d["steps"][0]["accepted"][:2] == [True, False]
    assert d["answer"] == "B" and d["stopped"] == "final"


def test_offline_run_is_deterministic(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    assert run_demo([], cwd=a).stdout == run_demo([], cwd=b).stdout
    assert (a / "verdict_trace.json").read_bytes() == (b / "verdict_trace.json").read_bytes()
    assert (a / "verdict_decisions.png").read_bytes() == (b / "verdict_decisions.png").read_bytes()


def test_max_steps_and_the_output_paths_are_honoured_offline(tmp_path):
    out = run_demo(["--max-steps", "2", "--trace", "t.json", "--plot", "p.jpg"], cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "final answer: (none: stopped at max_steps)" in out.stdout
    assert out.stdout.endswith("wrote t.json and p.jpg\n")
    d = json.loads((tmp_path / "t.json").read_text())
    assert (d["stopped"], d["answer"], len(d["steps"])) == ("max_steps", None, 2)
    with Image.open(tmp_path / "p.jpg") as img:
        assert img.format == "JPEG"


@pytest.mark.parametrize("tau, eps", [(0.6, 0.1), (0.0, 1.0), (1.0, 0.01), (0.42, 0.5)])
def test_the_decision_plane_at_the_ends_of_the_ranges(tmp_path, monkeypatch, tau, eps):
    monkeypatch.chdir(tmp_path)  # run_offline draws its scene here
    trace = demo.run_offline(verdict.Config(tau=tau, eps=eps))
    demo.plot(trace, str(tmp_path / "d.png"))
    with Image.open(tmp_path / "d.png") as img:
        assert img.size == (640, 480) and img.format == "PNG"
        colours = {c for _, c in img.convert("RGB").getcolors(1 << 16)}
    assert {demo.GREEN, demo.ORANGE, demo.GREY, demo.INK} <= colours  # the lines, markers, legend
    assert (demo.SHADE in colours) == (tau < 1)  # τ = 1 leaves no acceptance region to shade


def test_an_abstention_prints_a_dash_and_is_written_as_null(tmp_path):
    judge_fns = [lambda s, c: 0.8, lambda s, c: math.nan, lambda s, c: 0.8]
    shown, config = io.StringIO(), verdict.Config(n=1)
    propose = lambda s, n: ["Final answer: B"]
    trace = verdict.run("q", propose, judge_fns, config, on_step=demo.step_printer(config, shown))
    demo.print_totals(trace, shown)
    assert "  0  Final answer: B" in shown.getvalue() and "0.800    -    0.800" in shown.getvalue()
    d = json.loads(json.dumps(demo.trace_dict(trace), allow_nan=False))
    check_trace(d)
    assert d["steps"][0]["s_hat"] == [[0.8, None, 0.8]] and d["steps"][0]["s_star"][0][1] is None
    assert d["totals"]["abstentions"] == 1


def test_a_trace_json_cannot_hold_leaves_the_old_file_whole(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "verdict_trace.json").write_text('{"old": 1}')
    monkeypatch.setattr(demo, "trace_dict", lambda trace: {"box": [math.inf]})
    assert demo.main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("demo.py: error: cannot write the trace") and len(err.splitlines()) == 1
    assert (tmp_path / "verdict_trace.json").read_text() == '{"old": 1}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["verdict_scene.png", "verdict_trace.json"]


def test_a_plot_that_fails_to_save_leaves_no_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)

    def broken(trace, path):
        open(path, "wb").write(b"half a png")
        raise OSError("No space left on device")

    monkeypatch.setattr(demo, "plot", broken)
    assert demo.main([]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["verdict_scene.png", "verdict_trace.json"]


# ----------------------------------------------------------------------------- live


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


def json_judge_server(body, path):
    """scripted_judge_server's reasoner; the judges (judges.py's, JSON by default) score 7 of 9."""
    if role_of(body["messages"]) in verdict.JUDGES:
        return 200, chat_response('{"score": 7}'), {}
    return scripted_judge_server(body, path)


def chats(srv) -> list:
    return [r[1] for r in srv.requests if r[0].endswith("/chat/completions")]


def test_live_mode_against_loopback(tmp_path):
    img = str(tmp_path / "scene.png")
    demo.draw_scene(img)
    flags = ["--image", img, "--image", img, "--choices", "A. left|B. right"]
    with LoopbackServer(json_judge_server) as srv:
        url = srv.url
        out = run_demo(
            live(url, "Left or right?", "--max-steps 3", *flags),
            cwd=tmp_path,
            env={"OPENAI_API_KEY": "sk-secret-demo"},
        )
        sent = chats(srv)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert out.stdout.startswith(f"live demo: reasoner scripted at {url}\n")
    d = json.loads((tmp_path / "verdict_trace.json").read_text())
    check_trace(d)
    assert d["meta"] == {"mode": "live", "model": "scripted", "base_url": url}
    assert d["question"] == "Left or right?\nA. left\nB. right" and d["answer"] == "B"
    assert all(v == 7 / 9 for s in d["steps"] for r in s["s_hat"] for v in r)
    text = (tmp_path / "verdict_trace.json").read_text() + out.stdout + out.stderr
    assert "sk-secret-demo" not in text
    # One reasoner call per step and one call per judge and candidate; the reasoner and the visual
    # judge see both images.
    assert len(sent) == sum(1 + 3 * len(s["candidates"]) for s in d["steps"]) == 2 + 2 * 9
    seeing = [b for b in sent if role_of(b["messages"]) in ("reasoner", "visual")]
    assert len(seeing) == 2 + 2 * 3
    for body in seeing:
        content = [m["content"] for m in body["messages"] if isinstance(m["content"], list)]
        assert sum(p.get("type") == "image_url" for c in content for p in c) == 2
    assert "final answer: B" in out.stdout and "wrote verdict_trace.json" in out.stdout


def test_the_live_demo_prints_each_step_as_soon_as_it_is_decided(tmp_path):
    # Step 2's reasoner request waits until step 1's table has reached the demo's stdout, a pipe: a
    # table printed only at the end, or kept in a buffer, would never arrive while it waits.
    import threading

    printed, waited = threading.Event(), []

    def server(body, path):
        user = body["messages"][-1]["content"]
        if role_of(body["messages"]) == "reasoner" and "Step 1" in str(user):
            waited.append(printed.wait(60))
        return json_judge_server(body, path)

    with LoopbackServer(server) as srv:
        argv = [*command("demo.py"), *live(srv.url, "Left or right?", "--max-steps 3")]
        proc = subprocess.Popen(
            argv, cwd=tmp_path, stdout=subprocess.PIPE, text=True, env=script_env()
        )
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("step 1 "):
                printed.set()
        proc.wait(timeout=120)
    assert proc.returncode == 0 and waited == [True]
    assert lines.index(next(x for x in lines if x.startswith("step 2 "))) > 0


def test_live_mode_text_only(tmp_path):
    with LoopbackServer(json_judge_server) as srv:
        out = run_demo(live(srv.url, "Is 3 > 2?", "--max-steps 2"), cwd=tmp_path)
        user = [b["messages"][-1]["content"] for b in chats(srv)]
    assert out.returncode == 0, out.stderr
    assert user and all(isinstance(u, str) for u in user)  # no image: plain string content


def test_unreachable_server_is_one_line(tmp_path, monkeypatch, capsys):
    with socket.socket() as s:  # a port with nobody listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(judges, "Endpoint", partial(judges.Endpoint, retries=0))
    url = f"http://127.0.0.1:{port}/v1"
    assert demo.main(["--base-url", url, "--question", "q"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("demo.py: error: ") and f"127.0.0.1:{port}" in err
    assert len(err.splitlines()) == 1 and not (tmp_path / "verdict_trace.json").exists()


def test_wrong_model_is_one_line(tmp_path):
    def refuse_model(body, path):
        return 404, {"error": {"message": f"The model `{body['model']}` does not exist."}}, {}

    with LoopbackServer(refuse_model) as srv:
        out = run_demo(live(srv.url, model="no-such-model"), cwd=tmp_path)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "The model `no-such-model` does not exist." in out.stderr and "404" in out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "verdict_trace.json").exists()


# ----------------------------------------------------------------------------- bad flags

URL = "http://127.0.0.1:9/v1"  # nobody is asked: every case stops before a call


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--question", " \t "], "--question is blank"),
        (["--base-url", URL, "--question", "   "], "--question is blank"),
        (["--base-url", URL, "--model", "x"], "live mode needs --question"),
        (["--question", "Which side?"], "--question needs a live model (--base-url)"),
        (["--image", "x.png", "--choices", "A. l|B. r"], "--image and --choices need a live"),
        (["--choices", "garbage"], "--choices must be two or more options"),
        (["--choices", "|||"], "got '|||'"),
        (["--choices", "A. left"], "--choices must be two or more options"),
        (["--choices", "A. left|a. right"], "distinct letters"),
        (["--base-url", URL, "--question", "q", "--image", "/no/such.png"], "/no/such.png"),
        (["--base-url", URL, "--question", "q", "--image", "."], "--image: '.' is not a file"),
        (["--base-url", "ftp://127.0.0.1:9/v1", "--question", "q"], "--base-url must be http"),
        (["--base-url", "http:///v1", "--question", "q"], "--base-url must be http"),
        (["--base-url", "http://host:99999/v1", "--question", "q"], "--base-url must be http"),
        (["--base-url", "http://host:x/v1", "--question", "q"], "--base-url must be http"),
        (["--base-url", "127.0.0.1:8000", "--question", "q"], "--base-url must be http"),
        (["--max-steps", "0"], "max_steps must be an integer >= 1, got max_steps=0"),
        (["--max-steps", "three"], "argument --max-steps: invalid int value: 'three'"),
        (["--trace", ""], "--trace: the path is empty"),
        (["--trace", "."], "--trace: '.' is a directory"),
        (["--trace", "missing/t.json"], "--trace: cannot write 'missing/t.json'"),
        (["--plot", "missing/p.png"], "--plot: cannot write 'missing/p.png'"),
        (["--plot", "p.nosuchformat"], "--plot: 'p.nosuchformat' has no image file extension"),
        (["--plot", "p.psd"], "--plot: 'p.psd' has no image file extension PIL can write"),
        # evaluate's settings are not demo.py's, and no flag is abbreviated
        (["--tau", "0.5"], "error: unrecognized arguments: --tau 0.5"),
        (["--judge-mode", "zoom"], "error: unrecognized arguments: --judge-mode zoom"),
        (["--ques", "q"], "error: unrecognized arguments: --ques q"),
    ],
)
def test_bad_flags_are_one_line_with_exit_2_and_nothing_written(tmp_path, args, needle):
    out = run_demo(args, cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == "", out.stdout
    assert len(out.stderr.splitlines()) == 1 and out.stderr.startswith("demo.py: error: ")
    assert needle in out.stderr and "Traceback" not in out.stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "flags",
    [
        ["--plot", "p.nosuchformat"],
        ["--trace", "missing/t.json"],
        ["--image", "."],
        ["--api-key-env", "sk-live-123456"],  # a key given for its variable is refused unshown
    ],
)
def test_bad_flags_stop_before_any_call(tmp_path, flags):
    with LoopbackServer(json_judge_server) as srv:
        out = run_demo(live(srv.url) + flags, cwd=tmp_path)
        assert srv.requests == []
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1
    assert "sk-live-123456" not in out.stderr and not (tmp_path / "verdict_trace.json").exists()


def test_a_key_no_header_can_carry_stops_before_any_call(tmp_path):
    with LoopbackServer(json_judge_server) as srv:
        out = run_demo(live(srv.url), cwd=tmp_path, env={"OPENAI_API_KEY": "sk-in\nner"})
        assert srv.requests == []
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1
    assert "holds a character" in out.stderr and "sk-in" not in out.stderr


# ----------------------------------------------------------------------------- on the card


def test_demo_imports_only_verdict_judges_numpy_pillow_and_the_standard_library():
    tree = ast.parse(open(os.path.join(HERE, "demo.py"), encoding="utf-8").read())
    # --html's page writer, the lab's, is imported in page_writer alone, when the flag is given.
    lazy = [f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == "page_writer"]
    nodes = [n for top in tree.body if top not in lazy for n in ast.walk(top)]
    names = {a.name for n in nodes if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in nodes if isinstance(n, ast.ImportFrom)}
    tops = {name.split(".")[0] for name in names}
    assert tops - set(sys.stdlib_module_names) == {"verdict", "judges", "numpy", "PIL"}
    froms = [n.module for n in ast.walk(lazy[0]) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert froms == ["verdict_lab.cases"]
    # Nor does anything demo.py imports pull in a module of verdict_lab.
    probe = "import demo, sys; print(sorted(m for m in sys.modules if m.startswith('verdict_lab')))"
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=HERE, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and out.stdout == "[]\n", out.stderr
