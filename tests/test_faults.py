"""Never silently wrong: bad input from a user, a data file or a server, each met with one clear
line (or a reading that stays correct) and nothing computed lost. Each test drives one fault through
the code a user runs: a loopback server started here, the commands' own entry points."""

import csv
import io
import json
import re
import math
import os

import pytest
from PIL import Image

import demo
import judges
from verdict_lab import images
import verdict
from verdict_lab import loop
from verdict_lab.revise import Reviser
from judges import EndpointError, Judge, digit_probs, logprob_score, shown_url
from verdict_lab.text import one_line
from verdict_lab.cache import stored
from verdict_lab.client import Client
from verdict_lab.layouts import role_of
from verdict_lab.loopback import chat_response, user_text
from scripted import token_logprobs

HI = [{"role": "user", "content": "hi"}]


def json_reply(digit: str, alts: dict) -> dict:
    """A json judge's reply {"score": d}'s logprobs, with these top_logprobs (as given) at d."""
    tokens = [('{"', {}), ("score", {}), ('":', {}), (" ", {}), (digit, {}), ("}", {})]
    lp = token_logprobs([(t, {}) for t, _ in tokens])
    lp["content"][4]["top_logprobs"] = [{"token": t, "logprob": v} for t, v in alts.items()]
    return lp


# ---------------------------------------------------------------------- a server's reply, read once


@pytest.mark.parametrize(
    "alts",
    [
        {"7": 0.5, "6": 0.1},  # a logprob above 0 is a probability above 1
        {"7": 1000},  # once an OverflowError in math.exp
        {"7": 10**400},  # once an OverflowError in math.isfinite
        {"7": -0.1, "6": -0.1},  # digits whose probabilities sum to 1.8
        {"7": math.nan},
    ],
    ids=["positive", "1000", "400-digit", "sum-above-1", "nan"],
)
def test_logprobs_no_probability_can_be_are_no_weighted_score(alts):
    lp = json_reply("7", alts)
    assert digit_probs(lp).sum() == 0 and math.isnan(logprob_score(lp))
    assert digit_probs(
        json_reply("7", {"7": math.log(0.6), "6": math.log(0.3)})
    ).sum() == pytest.approx(0.9)


def test_a_judge_records_no_digit_share_above_one(loopback):
    # Positive logprobs: the share would be e^0.5 + e^0.1 = 2.8.
    lp = json_reply("7", {"7": 0.5, "6": 0.1})
    srv = loopback(lambda body, path: chat_response('{"score": 7}', logprobs=[lp]))
    j = Judge(Client(srv.url, "m"), "visual")(verdict.State("q"), "s")
    assert (
        float(j) == pytest.approx(7 / 9)
        and j.record["digit_share"] is None
        and j.record["weighted"] is None
    )


@pytest.mark.parametrize("top", [5, "7", {"7": -0.1}], ids=["int", "str", "dict"])
def test_top_logprobs_that_are_no_list_are_no_weighted_score_and_the_cache_keeps_the_reply(top):
    lp = json_reply("7", {})
    lp["content"][4]["top_logprobs"] = top
    assert digit_probs(lp).sum() == 0
    kept = stored({"choices": [{"message": {"content": '{"score": 7}'}, "logprobs": lp}]})
    assert kept["choices"][0]["logprobs"]["content"][4] == {"token": "7", "top_logprobs": []}


def test_a_reply_nested_too_deep_is_a_malformed_reply_not_a_traceback(loopback):
    deep = "[" * 100_000 + "]" * 100_000
    srv = loopback(lambda body, path: (200, '{"choices": ' + deep + "}", {}))
    with pytest.raises(EndpointError, match="body is not JSON"):
        Client(srv.url, "m", retries=1, backoff=0).chat(HI)
    srv2 = loopback(lambda body, path: chat_response('{"score": ' + deep + "}"))
    # Here the reply's content is what nests too deep.
    j = Judge(Client(srv2.url, "m"), "visual")(verdict.State("q"), "s")
    # Not valid JSON: the judge asked again, then abstained.
    assert math.isnan(j) and j.record["replies"] == 2


def test_a_redirect_is_not_followed_and_names_where_it_points(loopback):
    other = loopback(lambda body, path: chat_response("elsewhere"))
    srv = loopback(
        lambda body, path: (307, {"error": "moved"}, {"Location": other.url + "/chat/completions"})
    )
    with pytest.raises(EndpointError) as e:
        Client(srv.url, "m").chat(HI)
    assert e.value.status == 307 and f"redirected to '{other.url}/chat/completions'" in str(e.value)
    assert other.chats == []  # nothing was asked of the other server


def test_escape_sequences_from_a_server_never_reach_a_terminal(loopback):
    evil = "bad\x1b]0;owned\x07 \x1b[2J request\x1b[31m"
    srv = loopback(lambda body, path: (400, {"error": {"message": evil}}, {}))
    with pytest.raises(EndpointError) as e:
        Client(srv.url, "m").chat(HI)
    assert (
        "\x1b" not in str(e.value) and "\x07" not in str(e.value) and "bad]0;owned" in str(e.value)
    )
    assert one_line("a\x1b[2Jb\tc\nd") == "a[2Jb c d"


# ----------------------------------------------------------------------------- secrets


def test_a_secret_in_the_base_url_is_never_shown(loopback, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "")
    srv = loopback(lambda body, path: (401, {"error": {"message": "no"}}, {}))
    url = srv.url.replace("http://", "http://user:hunter2@") + "?key=sk-in-the-url"
    assert shown_url(url) == srv.url.replace("http://", "http://***@") + "?key=***"
    with pytest.raises(EndpointError) as e:
        Client(url, "m").chat(HI)
    assert "hunter2" not in str(e.value) and "sk-in-the-url" not in str(e.value)
    assert "hunter2" not in repr(Client(url, "m"))


@pytest.mark.parametrize("name", ["sk-live-123456", "my key", "", "1ABC"])
def test_a_key_given_for_its_variable_is_refused_without_showing_it(name):
    with pytest.raises(ValueError) as e:
        judges.api_key(name)
    assert "not a key (not shown)" in str(e.value) and (not name or name not in str(e.value))
    code = demo.main(
        ["--base-url", "http://127.0.0.1:9/v1", "--question", "q", "--api-key-env", name or " "]
    )
    assert code == 2


# ----------------------------------------------------------------------------- images


def test_an_image_over_pillows_warning_limit_is_decoded_without_its_warning(tmp_path, recwarn):
    path = tmp_path / "big.png"
    # 92 M pixels: above pillow's 89 M warning, below its 179 M error.
    Image.new("1", (9600, 9600)).save(path)
    assert images.encode(str(path), 64 * 64).startswith("data:image/png;base64,")
    assert not [w for w in recwarn if "DecompressionBomb" in type(w.message).__name__]


def test_an_image_file_too_large_to_read_is_refused_before_it_is_read(tmp_path, monkeypatch):
    path = tmp_path / "sparse.png"
    with open(path, "wb") as fh:  # a sparse file: its size, not its bytes, on the disk
        fh.truncate(images.MAX_FILE + 1)
    read = []
    monkeypatch.setattr(images.Path, "read_bytes", lambda self: read.append(self) or b"")
    with pytest.raises(
        ValueError, match=r"sparse.png: 268,435,457 bytes, more than the 268,435,456"
    ):
        images.load(str(path))
    assert read == []


# ----------------------------------------------------------------------------- the demo's flags


@pytest.mark.parametrize(
    "args, said",
    [
        (["--trace", ""], "--trace: the path is empty"),
        (["--plot", ""], "--plot: the path is empty"),
        (["--question", "Which side?"], "--question needs a live model (--base-url)"),
        (["--image", "x.png", "--choices", "A. l|B. r"], "--image and --choices need a live model"),
    ],
)
def test_the_demo_refuses_what_it_cannot_honour_before_anything_runs(
    args, said, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    assert demo.main(args) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1 and not os.listdir(tmp_path)  # nothing written


def test_the_demo_prints_a_models_reply_without_its_escape_sequences():
    def propose(state, n):
        return ["Final answer: \x1b]0;owned\x07B\x1b[2J"]

    shown, config = io.StringIO(), verdict.Config(n=1)
    printer = demo.step_printer(config, shown)
    trace = verdict.run("q", propose, [lambda s, c: 0.8] * 3, config, on_step=printer)
    demo.print_totals(trace, shown)
    out = shown.getvalue()
    assert "\x1b" not in out and "\x07" not in out and "final answer: ]0;ownedB[2J" in out


def test_a_zoom_chain_without_an_image_reports_no_region_request(loopback):
    def server(body, path):
        if role_of(body["messages"]) == "reasoner":
            return chat_response(["Final answer: B"] * body.get("n", 1))
        return chat_response('{"score": 7}')

    from verdict_lab import verifier

    srv = loopback(server)
    v = verifier.build(verifier.Settings(judge_mode="zoom", n=2), Client(srv.url, "m"))
    trace = verifier.run(v, "q")
    rec = trace.meta["judge_mode"]
    assert "zoom" not in rec and (rec["extra_calls"], rec["extra_tokens"]) == (0, 0)
    assert not any(role_of(b["messages"]) == "zoom" for b in srv.chats)
    assert trace.steps[0].calls[0][0]["zoom"] == {"path": "full", "why": "no image", "boxes": None}


# ----------------------------------------------------------------------------- the reviser


def test_a_revised_step_never_carries_the_fence_into_the_chain(loopback):
    srv = loopback(lambda body, path: chat_response("<step>The ball is right.</step>\n"))
    record = loop.step(verdict.State("q"), lambda s, n: ["x"], [lambda s, c: 0.1] * 3)
    revised = Reviser(Client(srv.url, "m"), ())(verdict.State("q"), record)
    assert revised == "The ball is right."
    assert "<step>" not in user_text(srv.chats[0]).split("Rejected step:")[0]


# ----------------------------------------------------------------------------- benchmark files


def test_a_mathvista_precision_no_float_holds_is_that_rows_reason(tmp_path):
    from verdict_lab.harness import benchmarks

    head = (
        "index\tquestion\tanswer\tquestion_type\tanswer_type\tprecision\tunit\tchoices"
        "\tanswer_option\n"
    )
    rows = [
        f"{i}\tHow long?\t1.5\tfree_form\tfloat\t{p}\t\t\t"
        for i, p in ((1, "inf"), (2, "1e400"), (3, "-1"), (4, "2"))
    ]
    path = tmp_path / "MathVista_MINI.tsv"
    path.write_text(head + "\n".join(rows) + "\n")
    f = benchmarks.load(str(path))
    assert [it.id for it in f.items] == ["4"] and f.items[0].value.precision == 2
    assert [(s.row, s.reason) for s in f.skipped] == [
        (2, "precision 'inf' is not a number (of decimals, finite)"),
        (3, "precision 'inf' is not a number (of decimals, finite)"),  # pandas reads 1e400 as inf
        (4, "precision '-1.0' is not a number of decimals (>= 0)"),
    ]


def test_a_missing_image_named_without_a_dot_is_said_to_be_missing(tmp_path):
    from verdict_lab.harness import benchmarks

    row = {
        "question": "Which?",
        "options": {"A": "x", "B": "y"},
        "answer": "A",
        "image": "scene_image",
    }
    (tmp_path / "q.jsonl").write_text(json.dumps(row) + "\n")
    (skipped,) = benchmarks.load(str(tmp_path / "q.jsonl")).skipped
    assert skipped.reason.startswith(
        f"image file not found: scene_image (looked for {tmp_path / 'scene_image'}"
    )


# ---------------------------------------------------------------- the reasoner and the settings


def test_the_reasoners_echo_of_the_template_line_is_no_final_answer(loopback):
    template = "Final answer: <the option letter, or the value>"
    echo = "Reply with one line of the form:\n" + template  # the system prompt's end, echoed
    replies = [template, echo, "Final answer: B"]
    srv = loopback(lambda body, path: chat_response(replies[: body.get("n", 1)]))
    propose = judges.Reasoner(Client(srv.url, "m"))
    assert propose(verdict.State("q"), 3) == [
        "",
        "Reply with one line of the form:",
        "Final answer: B",
    ]
    trace = loop.run("q", lambda s, n: propose(s, 1), (), verdict.Config(n=1, max_steps=2))
    assert trace.stopped == "max_steps" and trace.answer is None  # the echo never ended the chain


@pytest.mark.parametrize(
    "flags, said",
    [
        (["--n", "32"], "--n must be at most 31"),
        (["--n", "1000000"], "--n must be at most 31"),
        (["--lam", "1,1"], "--lam must hold 3 values"),
        (["--lam", "1,1,1,1"], "--lam must hold 3 values"),
    ],
)
def test_a_setting_no_chain_can_run_is_refused_before_any_request(
    flags, said, loopback, tmp_path, capsys
):
    from verdict_lab import evaluate

    srv = loopback(lambda body, path: chat_response("x"))
    data = tmp_path / "q.jsonl"
    data.write_text(
        json.dumps({"question": "q", "options": {"A": "x", "B": "y"}, "answer": "A"}) + "\n"
    )
    out = tmp_path / "out"
    assert (
        evaluate.main(["--data", str(data), "--base-url", srv.url, "--out", str(out), *flags]) == 2
    )
    assert said in capsys.readouterr().err and srv.chats == [] and not out.exists()


@pytest.mark.parametrize(
    "kw, said",
    [
        (dict(seed=-1), "seed must be an integer >= 0, got seed=-1"),
        (dict(max_tokens=0), "max_tokens must be an integer >= 1, got max_tokens=0"),
        (
            dict(judge_max_tokens=0),
            "judge_max_tokens must be an integer >= 1 or None, got judge_max_tokens=0",
        ),
        (
            dict(judge_max_tokens=-5),
            "judge_max_tokens must be an integer >= 1 or None, got judge_max_tokens=-5",
        ),
        (dict(n=32), "n must be at most 31"),
    ],
)
def test_the_vlmevalkit_model_refuses_a_bad_setting_at_construction(kw, said):
    from verdict_lab.vlmevalkit import VerdictVLM

    with pytest.raises(ValueError, match=re.escape(said)):
        VerdictVLM("http://127.0.0.1:9/v1", "m", **kw)


def test_the_vlmevalkit_model_answers_its_failure_message_for_a_reply_nested_too_deep(loopback):
    from verdict_lab.vlmevalkit import FAIL_MSG, VerdictVLM

    deep = "[" * 100_000 + "]" * 100_000
    srv = loopback(lambda body, path: (200, '{"choices": ' + deep + "}", {}))
    vlm = VerdictVLM(srv.url, "m", retries=0)
    assert vlm.generate([{"type": "text", "value": "q"}], "MMStar").startswith(FAIL_MSG)
    with pytest.raises(
        ValueError, match="a VLMEvalKit message is a str, a dict or a list of them, got NoneType"
    ):
        vlm.generate(None)


# ----------------------------------------------------------------------------- ReVISE's rewards


def deep(n: int) -> dict:
    d = cur = {}
    for _ in range(n):
        cur["a"] = {}
        cur = cur["a"]
    return d


@pytest.mark.parametrize(
    "completion",
    [
        [
            {
                "role": "assistant",
                "content": "x",
                "tool_calls": [{"function": {"name": "zoom", "arguments": deep(5000)}}],
            }
        ],
        [{"role": "assistant", "content": 5}],
        [{"role": "assistant", "content": "x", "tool_calls": "zoom"}],
        [
            {
                "role": "assistant",
                "content": "x",
                "tool_calls": [
                    {"function": {"name": "z", "arguments": {"box": [10**5000, 0, 1, 1]}}}
                ],
            }
        ],
    ],
    ids=["deep-arguments", "int-content", "str-tool-calls", "huge-int-argument"],
)
def test_a_rewards_reading_of_a_malformed_completion_is_a_reward_not_a_traceback(completion):
    from verdict_lab.modes import rewards as R

    assert R.format_reward(completions=[completion]) == [-1.0]
    assert R.accuracy_reward(completions=[completion], solution=["A"]) == [0.0]
    assert R.grounding_reward(completions=[completion], ref_boxes=[[[0, 0, 1, 1]]]) == [0.0]


def test_a_reference_box_no_float_holds_is_named():
    from verdict_lab.modes import rewards as R

    with pytest.raises(
        ValueError, match=r"a box must be 4 numbers \[x1, y1, x2, y2\], got ref_boxes\[0\]\[0\]"
    ):
        R.grounding_reward(completions=["[0, 0, 1, 1]"], ref_boxes=[[[10**400, 0, 1, 1]]])


# ------------------------------------------------------------------------- the studies' commands


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--trials", "0"], "need --trials >= 1"),
        (["--trials", "-1"], "need --trials >= 1"),
        (["--seeds", "0"], "--seeds >= 2"),
        (["--seed", "-1"], "--seed >= 0"),
        (["--sweep", ""], "--sweep must be NAME=V1,V2,..."),
        (["--sweep", "speed=1,2"], "--sweep must be NAME=V1,V2,..."),
        (["--sweep", "tau=0.5,nan"], "give two or more distinct finite values"),
        (["--sweep", "tau=0.5,1.5"], "--sweep tau=1.5: tau must be in [0, 1]"),
        (["--sweep", "eps=0,0.1"], "--sweep eps=0: eps must be in (0, 1]"),
        (["--out", "README.md"], "--out 'README.md' is a file, not a directory"),
    ],
)
def test_the_simulation_refuses_a_bad_flag_in_one_line(argv, said, capsys):
    from verdict_lab import simulate

    with pytest.raises(SystemExit) as stop:
        simulate.main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and said in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--time-scale", "inf"], "a finite --time-scale > 0"),
        (["--flag-reps", "0"], "got 3, 0, 3, 3"),
    ],
)
def test_the_bench_refuses_a_bad_flag_in_one_line(argv, said, capsys):
    from verdict_lab import bench

    with pytest.raises(SystemExit) as stop:
        bench.main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and said in err and err.count("\n") == 1


# ----------------------------------------------------------------------------- evaluate's runs


def evaluate_run(data, url, out, *flags) -> int:
    from verdict_lab import evaluate

    files = data if isinstance(data, list) else [data]
    return evaluate.main(
        [
            *(a for f in files for a in ("--data", str(f))),
            "--base-url",
            url,
            "--out",
            str(out),
            *flags,
        ]
    )


def test_two_data_files_of_one_vlmevalkit_dataset_are_refused_before_anything_runs(
    tmp_path, loopback, capsys
):
    from test_benchmarks import tiny_tsv

    srv = loopback(lambda body, path: chat_response("x"))
    tiny = tiny_tsv(tmp_path)[0]
    a, b = tmp_path / "MMStar.tsv", tmp_path / "MMStar_local.tsv"
    a.write_bytes(open(tiny, "rb").read())
    b.write_bytes(a.read_bytes())
    assert evaluate_run([a, b], srv.url, tmp_path / "out", "--rules", "base") == 2
    err = capsys.readouterr().err
    assert "--data MMStar and MMStar_local are both VLMEvalKit's dataset 'MMStar'" in err
    assert srv.chats == [] and not (tmp_path / "out" / "run.json").exists()


def test_a_plan_too_large_to_hold_is_refused_before_the_run_is_pinned(tmp_path, loopback, capsys):
    from test_evaluate import write_jsonl

    srv = loopback(lambda body, path: chat_response("x"))
    data = write_jsonl(tmp_path / "q.jsonl", n=2)
    assert (
        evaluate_run(data, srv.url, tmp_path / "out", "--seeds", "100000000", "--rules", "base")
        == 2
    )
    assert (
        "200,000,000 chains (items × --seeds × methods), more than 10,000,000"
        in capsys.readouterr().err
    )
    assert not (tmp_path / "out" / "run.json").exists() and srv.chats == []


def test_a_run_whose_chains_all_fail_says_why_and_counts_no_answer_as_unanswered(
    tmp_path, loopback, capsys
):
    from test_evaluate import write_jsonl

    srv = loopback(
        lambda body, path: (500, {"error": {"message": "image input is not supported"}}, {})
    )
    data, out = write_jsonl(tmp_path / "q.jsonl", n=2), tmp_path / "out"
    code = evaluate_run(data, srv.url, out, "--rules", "base", "--seeds", "1", "--retries", "0")
    err = capsys.readouterr().err
    assert (
        code == 3
        and "2 chain(s) ended in: EndpointError:" in err
        and "image input is not supported" in err
    )
    s = json.loads((out / "summary.json").read_text())
    assert (
        s["errors"]["causes"][0]["rows"] == 2
        and "image input is not supported" in s["errors"]["causes"][0]["error"]
    )
    assert (
        s["stats"]["base"]["extracted"]["unanswered"] == 0
        and s["stats"]["base"]["unanswered_rate"] == 0
    )
    md = (out / "summary.md").read_text()
    assert "**2 chain(s) ended in: EndpointError:" in md and "| 0/0/0/0/0/0 |" in md


def test_a_file_with_no_vlmevalkit_name_gets_no_settings_heading(tmp_path, loopback):
    from test_evaluate import script, write_jsonl

    srv = loopback(script)
    data, out = write_jsonl(tmp_path / "mine.jsonl", n=2), tmp_path / "out"
    assert (
        evaluate_run(
            data, srv.url, out, "--rules", "base", "--seeds", "1", "--judge-format", "text"
        )
        == 0
    )
    md = (out / "summary.md").read_text()
    assert "mine (%, all seeds):" in md and "setting vanilla" not in md and "split none" not in md


def test_kept_rows_take_their_items_line_after_the_file_is_reordered(tmp_path, loopback):
    from test_evaluate import rows_of, script, write_jsonl

    srv = loopback(script)
    data, out = tmp_path / "q.jsonl", tmp_path / "out"
    write_jsonl(data, n=3)
    flags = ("--rules", "base", "--seeds", "1", "--judge-format", "text")
    assert evaluate_run(data, srv.url, out, *flags) == 0
    lines = data.read_text().splitlines()
    data.write_text("\n".join(lines[::-1]) + "\n")  # the same items, in the other order
    n = len(srv.chats)
    # Nothing ran again.
    assert evaluate_run(data, srv.url, out, *flags) == 0 and len(srv.chats) == n
    assert {r["id"]: r["row"] for r in rows_of(out)} == {"q0": 3, "q1": 2, "q2": 1}
    (tsv,) = out.glob("*/seed0/*.tsv")
    with open(tsv, newline="") as fh:
        # The rows keep the file's order.
        assert [r["id"] for r in csv.DictReader(fh, delimiter="\t")] == ["q2", "q1", "q0"]


def test_a_sweeps_cost_counts_no_token_a_server_could_not_have_reported():
    from verdict_lab.harness import sweep

    for usage, tokens in (
        ({"prompt_tokens": -1000, "completion_tokens": 5}, 5),
        ({"prompt_tokens": 10**20}, 0),
    ):
        assert sweep._tokens({"choices": [], "usage": usage}) == tokens
    assert sweep._tokens({"usage": {"prompt_tokens": True, "completion_tokens": 7}}) == 7


def test_a_secret_in_the_base_url_never_reaches_the_run_directory(tmp_path, loopback, monkeypatch):
    from test_evaluate import script, write_jsonl

    monkeypatch.setenv("OPENAI_API_KEY", "sk-in-the-path")
    srv = loopback(script)
    url = (
        srv.url.replace("http://", "http://user:hunter2@").replace("/v1", "/sk-in-the-path/v1")
        + "?key=s3cret"
    )
    data, out = write_jsonl(tmp_path / "q.jsonl", n=1), tmp_path / "out"
    assert (
        evaluate_run(data, url, out, "--rules", "base", "--seeds", "1", "--judge-format", "text")
        == 0
    )
    written = "".join(
        p.read_text(errors="replace")
        for p in out.rglob("*")
        if p.is_file() and p.suffix != ".sqlite"
    )
    assert srv.chats and not any(s in written for s in ("hunter2", "s3cret", "sk-in-the-path"))
    run = json.loads((out / "run.json").read_text())
    assert (
        run["settings"]["base_url"]
        == srv.url.replace("http://", "http://***@").replace("/v1", "/***/v1") + "?key=***"
    )
    # The run resumes.
    assert (
        evaluate_run(data, url, out, "--rules", "base", "--seeds", "1", "--judge-format", "text")
        == 0
    )


def test_evaluate_refuses_a_base_url_with_the_chat_path_before_any_request(
    loopback, tmp_path, capsys
):
    from verdict_lab import evaluate

    srv = loopback(lambda body, path: chat_response("x"))
    data = tmp_path / "q.jsonl"
    row = {"id": "q0", "question": "Which?", "options": {"A": "1", "B": "2"}, "answer": "B"}
    data.write_text(json.dumps(row) + "\n")
    url = srv.url + "/chat/completions"
    code = evaluate.main(["--data", str(data), "--base-url", url, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and not srv.requests and len(err.splitlines()) == 1
    assert err.startswith("verdict_lab.evaluate: error: the base URL names the API's root")
