"""Tests for verdict_lab/evaluate.py: a TSV run with every image sent, the summary arithmetic by
hand, resume after a kill, shared calls between rules, budgets, errors and flags. Every model is the
loopback scripted server; one `live` test talks to VERDICT_LIVE_URL."""

import json
import os
import re
import subprocess
import threading

import pytest

from verdict_lab import evaluate
import verdict
from verdict_lab import loop
from verdict_lab.cache import Cache, CacheError
from verdict_lab.flags import settings_of
from verdict_lab.modes import MODE_MAX_TOKENS
from verdict_lab.verifier import Settings
from verdict_lab.harness.rows import Row
from verdict_lab.loopback import chat_response, user_text
from verdict_lab.layouts import role_of
from test_benchmarks import tiny_tsv
from test_demo import run_script, start_script

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the root


# The script. Step 1: n "Idea" candidates that every judge scores 0.7, so every rule takes candidate
# 0 and all chains coincide. Step 2: final answers, candidate j says "AB"[(j + seed) % 2]. The
# judges give A the conflicting vector (0.9, 0.2, 0.9) and B the agreeing (0.7, 0.6, 0.7) of
# Proposition 1: equal raw means, so VERDICT (and min, variance, raw-dual, no-rank) takes B, max and
# no-filter take A.
SCORES = {"Final answer: A": (0.9, 0.2, 0.9), "Final answer: B": (0.7, 0.6, 0.7)}


# The verifier flags' errors as verdict_lab.evaluate words them.
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


def script(body, path):
    role, text = role_of(body["messages"]), user_text(body)
    if role == "reasoner":
        n, seed = body.get("n", 1), body["seed"]
        if re.search(r"(?m)^Step 1:", text):
            return 200, chat_response(
                [f"Final answer: {'AB'[(j + seed) % 2]}" for j in range(n)], prompt_tokens=20
            )
        return 200, chat_response(
            [f"Idea {j} for seed {seed}." for j in range(n)], prompt_tokens=20
        )
    judge = verdict.JUDGES.index(role)
    step = re.search(r"<step>\n(.*?)\n</step>", text, re.S).group(1)
    return 200, chat_response(
        [f"Checked.\nScore: {SCORES.get(step, (0.7, 0.7, 0.7))[judge]}"], prompt_tokens=20
    )


def write_jsonl(path, n=4, answers="BBAB"):
    with open(path, "w") as fh:
        for i in range(n):
            fh.write(
                json.dumps(
                    {
                        "id": f"q{i}",
                        "question": f"Which is larger, {i} or {i + 1}?",
                        "options": {"A": str(i), "B": str(i + 1)},
                        "answer": answers[i % len(answers)],
                    }
                )
                + "\n"
            )
    return str(path)


def argv(data, url, out, flags="") -> list:
    """verdict_lab.evaluate's command line: `data` (a file, or a list of them), the endpoint and the
    run directory, then `flags`, split at spaces."""
    files = data if isinstance(data, list) else [data]
    return [
        *(a for f in files for a in ("--data", str(f))),
        "--base-url",
        url,
        "--out",
        str(out),
        *flags.split(),
    ]


def run(args, cwd=None, timeout=300):
    return run_script("verdict_lab.evaluate", args, cwd, timeout=timeout)


def rows_of(out) -> list:
    with open(os.path.join(out, "results.jsonl")) as fh:
        return [json.loads(line) for line in fh]


def comparable(summary: dict) -> dict:
    """The summary without what depends on timing or on which requests the cache already held."""
    stats = {
        m: {k: v for k, v in s.items() if k not in ("sent_per_item", "seconds_per_item")}
        for m, s in summary["stats"].items()
    }
    return {
        "accuracy": summary["accuracy"],
        "gain": summary["gain_over_base"],
        "stats": stats,
        "rows": summary["rows"],
    }


# ----------------------------------------------------------------------------- a TSV run


def test_tsv_run_sends_every_image_and_reports_skipped_rows(tmp_path, loopback):
    path, _ = tiny_tsv(tmp_path)
    srv = loopback(script)
    out = tmp_path / "out"
    assert (
        evaluate.main(
            argv(path, srv.url, out, "--seeds 1 --rules base,verdict --judge-format text")
        )
        == 0
    )
    got = rows_of(out)
    # row 15 has no image: dropped; row 13 has no answer: scored, as VLMEvalKit scores it
    assert len(got) == 4 * 2 and {r["id"] for r in got} == {"10", "11", "12", "13"}
    parts = [
        [p for p in c["messages"][1]["content"] if p["type"] == "image_url"]
        if isinstance(c["messages"][1]["content"], list)
        else []
        for c in srv.chats
        if "Which image is blue" in user_text(c)
    ]
    assert parts and all(
        len(p) == 2 for p in parts
    )  # both images of the multi-image row, every call
    summary = json.loads((out / "summary.json").read_text())
    reading = summary["reading"]["Tiny"]
    assert (reading["read"], reading["total"], reading["dropped"]) == (6, 4, 1)
    assert [s["row"] for s in reading["skipped"]] == [6]
    assert (
        "Tiny.tsv: 1 malformed row(s) skipped\n- line 6: undecodable image"
        in (out / "summary.md").read_text()
    )


# ----------------------------------------------------------------------------- runs


def test_jsonl_run_rows_traces_and_sharing(tmp_path, loopback):
    """One row per (item, seed, method) with its trace; within an (item, seed) every rule's first
    step has the same candidates and scores; no request reaches the server twice, and the server
    sees far fewer requests than the methods would need alone."""
    srv = loopback(script)
    data, out = write_jsonl(tmp_path / "q.jsonl"), tmp_path / "out"
    assert (
        evaluate.main(
            argv(data, srv.url, out, "--seeds 2 --max-steps 3 --concurrency 3 --judge-format text")
        )
        == 0
    )
    rows = rows_of(out)
    assert len(rows) == 4 * 2 * len(evaluate.METHODS)
    assert len({Row.from_json(r).key for r in rows}) == len(rows)
    for r in rows:
        assert (
            r["format"] == "verdict-eval-row/3"
            and r["error"] is None
            and r["trace"]["format"] == loop.TRACE_FORMAT
        )
        assert r["stopped"] == r["trace"]["stopped"] == "final" and len(r["trace"]["steps"]) == 2
        assert r["pred"] == r["trace"]["answer"][-1] and r["correct"] == (r["pred"] == r["answer"])
        n = 1 if r["method"] == "base" else 3
        assert all(len(st["candidates"]) == n for st in r["trace"]["steps"])
        # each step records what it cost (verdict.run's meter: the chain's clients'
        # usage), and the trace sums it
        usage = r["trace"]["totals"]["usage"]
        assert (
            usage["calls"] == r["calls"]
            and usage["replies"] + usage["cache_hits"] + usage["merged"] == r["calls"]
        )
        assert (
            sum(st["usage"]["calls"] for st in r["trace"]["steps"])
            == r["calls"]
            == (1 if n == 1 else 10) * 2
        )
    # What was decided, apart from what it cost (a rule that came later found its calls cached).
    first = {}
    for r in rows:
        if r["method"] != "base":
            step = {k: v for k, v in r["trace"]["steps"][0].items() if k != "usage"}
            first.setdefault((r["id"], r["seed"]), []).append(json.dumps(step, sort_keys=True))
    assert all(len(set(v)) == 1 for v in first.values())
    verdict_picks = {r["pred"] for r in rows if r["method"] == "verdict"}
    max_picks = {r["pred"] for r in rows if r["method"] == "max"}
    assert verdict_picks == {"B"} and max_picks == {
        "A"
    }  # Proposition 1's vectors, through the whole pipeline
    bodies = [json.dumps(c, sort_keys=True) for c in srv.chats]
    assert len(bodies) == len(set(bodies))  # the cache served every repeated request
    alone = sum(r["calls"] for r in rows)
    assert sum(r["sent"] for r in rows) == len(bodies) < alone / 5
    summary = json.loads((out / "summary.json").read_text())
    # Answers are B, B, A, B: VERDICT always says B -> 75% on both seeds; max always says A -> 25%.
    assert summary["accuracy"]["verdict"]["q"] == {
        "mean": 75.0,
        "std": 0.0,
        "per_seed": [75.0, 75.0],
    }
    assert (
        summary["accuracy"]["max"]["q"]["mean"] == 25.0
        and summary["gain_over_base"]["verdict"]["Avg"] is not None
    )
    assert (
        summary["stats"]["verdict"]["fallback_rate"] == 0
        and summary["stats"]["verdict"]["calls_per_item"] == 20
    )


def test_rules_share_calls_when_chains_coincide(tmp_path, loopback):
    """All judges agree everywhere, so all nine rules build the same chain: together they cost
    exactly the requests of VERDICT alone."""

    def agreeing(body, path):
        if role_of(body["messages"]) == "reasoner":
            return script(body, path)
        return 200, chat_response(["Score: 0.8"])

    alone_srv, all_srv = loopback(agreeing), loopback(agreeing)
    data = write_jsonl(tmp_path / "q.jsonl", n=2)
    flags = "--seeds 2 --judge-format text --rules "
    assert evaluate.main(argv(data, alone_srv.url, tmp_path / "a", flags + "verdict")) == 0
    assert (
        evaluate.main(argv(data, all_srv.url, tmp_path / "b", flags + ",".join(verdict.RULES))) == 0
    )
    assert (
        len(all_srv.chats) == len(alone_srv.chats) == 2 * 2 * (1 + 3 * 3 + 1 + 2 * 3)
    )  # 2 items, 2 seeds, 2 steps
    rows = rows_of(tmp_path / "b")
    assert sum(r["calls"] for r in rows) == 9 * sum(
        r["calls"] for r in rows_of(tmp_path / "a")
    )  # what nine unshared runs need


def test_resume_after_kill_matches_uninterrupted_run(tmp_path, loopback):
    gate, reached = threading.Event(), threading.Event()

    def blocking(body, path):
        if (
            "2 or 3" in user_text(body) and not gate.is_set()
        ):  # the third item: hold it until the test has killed the run
            reached.set()
            gate.wait(120)
        return script(body, path)

    srv = loopback(blocking)
    data, out, ref = write_jsonl(tmp_path / "q.jsonl", n=5), tmp_path / "out", tmp_path / "ref"
    flags = "--seeds 2 --max-steps 3 --retries 0 --judge-format text"
    args = argv(data, srv.url, out, flags + " --concurrency 1")
    proc = start_script("verdict_lab.evaluate", args, stderr=subprocess.DEVNULL)
    try:
        assert reached.wait(120), "the run never reached the third item"
    finally:
        proc.kill()
        proc.wait()
        gate.set()
    before = rows_of(out)
    assert len(before) == 2 * 2 * len(evaluate.METHODS)  # items q0 and q1, both seeds, every method
    with open(out / "results.jsonl", "a") as fh:  # as if killed in the middle of writing a row
        fh.write('{"format": "verdict-eval-row/1", "data": "q", "id": "q2", "se')
    assert evaluate.main(argv(data, srv.url, out, flags)) == 0
    assert evaluate.main(argv(data, srv.url, ref, flags + " --concurrency 3")) == 0
    after = rows_of(out)
    keys = [Row.from_json(r).key for r in after]
    assert len(keys) == len(set(keys)) == 5 * 2 * len(evaluate.METHODS)
    assert after[: len(before)] == before  # nothing finished was run again
    assert set(keys) == {Row.from_json(r).key for r in rows_of(ref)}
    got, want = (json.loads((d / "summary.json").read_text()) for d in (out, ref))
    assert comparable(got) == comparable(want)
    n = len(srv.chats)
    assert (
        evaluate.main(argv(data, srv.url, out, flags)) == 0 and len(srv.chats) == n
    )  # all done: no request at all


@pytest.mark.parametrize(
    "judge_model", [[], ["--judge-model", "another"]]
)  # one client, or two sharing the budget
def test_budget_stops_chains(tmp_path, loopback, judge_model):
    def endless(body, path):  # the reasoner never writes "Final answer:"
        if role_of(body["messages"]) == "reasoner":
            return 200, chat_response(
                [f"Take {'xyz'[j]} more steps, perhaps B." for j in range(body.get("n", 1))]
            )
        return script(body, path)

    srv = loopback(endless)
    out = tmp_path / "out"
    assert (
        evaluate.main(
            argv(
                write_jsonl(tmp_path / "q.jsonl", n=1),
                srv.url,
                out,
                "--seeds 1 --rules base,verdict --max-steps 5 --max-calls 12 --judge-format text",
            )
            + judge_model
        )
        == 0
    )
    base, rule = rows_of(out)
    assert (
        base["stopped"] == "max_steps" and base["calls"] == 5 and len(base["trace"]["steps"]) == 5
    )
    # Step 1 costs 1 + 9 calls; step 2's proposal and two judge calls reach 12, and the 13th
    # stops the chain.
    assert rule["stopped"] == rule["trace"]["stopped"] == "budget" and rule["calls"] == 12
    assert (
        len(rule["trace"]["steps"]) == 1
        and rule["trace"]["steps"][0]["candidates"][0] == "Take x more steps, perhaps B."
    )
    # A stopped chain is read from its last chosen step, as VLMEvalKit reads a truncated response.
    assert rule["trace"]["answer"] is None and (
        rule["pred"],
        rule["extracted"],
        rule["correct"],
    ) == (
        "B",
        "letter",
        True,
    )
    assert (base["pred"], base["extracted"]) == ("B", "letter")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stats"]["verdict"]["stopped"] == {"final": 0, "max_steps": 0, "budget": 1}


def test_json_refused_falls_back_to_text_once_for_the_whole_run(tmp_path, loopback):
    def refuse_json(body, path):  # a server that cannot constrain its output
        if "response_format" in body:
            return 400, {
                "error": {
                    "message": 'response_format type must be one of "text" or "json_object", '
                    "but got: json_schema"
                }
            }
        return script(body, path)

    srv = loopback(refuse_json)
    out = tmp_path / "out"
    data = write_jsonl(tmp_path / "q.jsonl", n=3)
    proc = run(
        argv(data, srv.url, out, "--seeds 1 --rules verdict --concurrency 3")
    )  # json, the default
    assert proc.returncode == 0, proc.stderr
    assert (
        proc.stderr.count("refused response_format") == 1
    )  # once for the run, though its 3 items run at once
    metas = [r["trace"]["meta"]["judges"] for r in rows_of(out)]
    assert len(metas) == 3 and all(
        (m["format"], m["format_used"]) == ("json", "text") for m in metas
    )
    assert metas[0]["fallback"]["at_call"] >= 1 and all(
        m["fallback"] == metas[0]["fallback"] for m in metas
    )
    assert all(
        None not in r for row in rows_of(out) for s in row["trace"]["steps"] for r in s["s_hat"]
    )
    assert (
        json.loads((out / "run.json").read_text())["settings"]["verifier"]["judge_format"] == "json"
    )


SHEET = json.dumps(
    {"objects": [{"fact": "two numbers"}], "numbers": [], "relations": [], "structure": []}
)


def grounded(body, path):
    """script, plus the judge modes' calls: a prior, a fact sheet, premise checks that support every
    claim."""
    for name, reply in (
        ("prior", "- Compare the two numbers."),
        ("premises", SHEET),
        ("premise_check", '{"claims": [{"claim": "a number", "label": "supported"}]}'),
    ):
        if role_of(body["messages"]) == name:
            return 200, chat_response([reply], prompt_tokens=20)
    return script(body, path)


def test_judge_modes_are_rows_that_share_the_reasoners_candidates(tmp_path, loopback):
    srv = loopback(grounded)
    data, out = write_jsonl(tmp_path / "q.jsonl", n=2), tmp_path / "out"
    assert (
        evaluate.main(
            argv(
                data,
                srv.url,
                out,
                "--seeds 1 --rules base,verdict --judge-format text "
                "--judge-mode plain,prior,premises,prior+premises,premises+gate",
            )
        )
        == 0
    )
    rows = {r["method"]: r for r in rows_of(out) if r["id"] == "q0"}
    assert list(rows) == [
        "base",
        "verdict",
        "verdict+prior",
        "verdict+premises",
        "verdict+prior+premises",
        "verdict+premises+gate",
    ]
    # The scripted scores ignore the evidence (and the gate finds every premise supported, r = 1),
    # so every row builds VERDICT's chain, from the same candidates, which the reasoner was asked
    # for once.
    chains = [
        [s["candidates"] for s in r["trace"]["steps"]] for m, r in rows.items() if m != "base"
    ]
    assert all(c == chains[0] for c in chains) and len(chains[0]) == 2
    roles = [role_of(c["messages"]) for c in srv.chats]
    assert roles.count("reasoner") == 2 * (2 + 2)  # base, verdict
    # Per item: one prior and one fact sheet whichever rows use them; 5 premise checks (the
    # candidates of step 2, "Final answer: A", "... B", "... A", hold one repeat, which the cache
    # serves).
    assert (roles.count("prior"), roles.count("premises"), roles.count("premise_check")) == (
        2,
        2,
        2 * 5,
    )
    # Extra calls per chain: the prior 1, the fact sheet 1, a premise check per distinct candidate
    # (3 + 2).
    assert {m: r["extra_calls"] for m, r in rows.items()} == {
        "base": 0,
        "verdict": 0,
        "verdict+prior": 1,
        "verdict+premises": 1,
        "verdict+prior+premises": 2,
        "verdict+premises+gate": 1 + 5,
    }
    assert rows["verdict+prior"]["extra_tokens"] == 20 + 5  # prompt 20, completion: 5 words
    g = rows["verdict+prior+premises"]["trace"]["meta"]["judge_mode"]
    assert g["prior"] == "- Compare the two numbers." and g["fact_sheet_status"] == "ok"
    assert (
        "judge_mode" not in rows["verdict"]["trace"]["meta"]
        and rows["verdict"]["fact_sheet_status"] is None
    )
    summary = json.loads((out / "summary.json").read_text())
    stats = summary["stats"]
    assert (
        stats["verdict+premises+gate"]["extra_calls_per_item"] == 6
        and stats["verdict+premises"]["degraded_rate"] == 0
    )
    assert (
        stats["verdict"]["extra_calls_per_item"] == 0 and stats["verdict"]["degraded_rate"] is None
    )
    # Per item: the 5 premise checks of the gate row (its distinct candidates); every
    # mode's sheet ok on both items.
    assert {m: r["gate_checks"] for m, r in rows.items()} == {
        m: 5 if m == "verdict+premises+gate" else 0 for m in rows
    }
    assert (
        stats["verdict+premises+gate"]["gate_checks_per_item"] == 5
        and stats["verdict+prior"]["gate_checks_per_item"] == 0
    )
    assert stats["verdict+premises"]["fact_sheet"] == {"ok": 2, "retried": 0, "degraded": 0}
    assert stats["verdict+prior"]["fact_sheet"] == {"ok": 0, "retried": 0, "degraded": 0}
    assert summary["accuracy"]["verdict+prior"] == summary["accuracy"]["verdict"]
    md = (out / "summary.md").read_text()
    assert (
        "| extra calls/item | extra tokens/item | gate checks/item | sheet degraded | "
        "revise calls/item | revise tokens/item | revisions taken | sheet ok/retried/degraded |"
    ) in md
    gated = [line for line in md.splitlines() if line.startswith("| verdict+premises+gate |")][
        -1
    ]  # the statistics'
    assert re.search(
        r" \| 6\.0 \| \d+ \| 5\.0 \| 0\.0% \| 0\.0 \| 0 \| — \| 2/0/0 \| ", gated
    )  # extra calls, tokens,
    # checks, sheets degraded; no revision (so no share of them taken); sheets ok/retried/degraded


def test_endpoint_error_is_a_row_and_is_retried(tmp_path, loopback):
    broken = {"on": True}

    def flaky(body, path):
        if broken["on"] and "1 or 2" in user_text(body):
            return 400, {"error": {"message": "context length exceeded"}}
        return script(body, path)

    srv = loopback(flaky)
    data, out = write_jsonl(tmp_path / "q.jsonl", n=3), tmp_path / "out"
    args = argv(data, srv.url, out, "--seeds 1 --rules base,verdict --judge-format text")
    assert evaluate.main(args) == 3  # 2 of 6 chains failed: more than --max-error-rate 0.05
    assert (
        evaluate.main(args + ["--max-error-rate", "0.5"]) == 0
    )  # the same table, under a laxer threshold
    rows = {r["id"]: r for r in rows_of(out) if r["method"] == "verdict"}
    assert "context length exceeded" in rows["q1"]["error"] and rows["q1"]["correct"] is False
    assert rows["q0"]["error"] is None and rows["q2"]["error"] is None
    assert json.loads((out / "summary.json").read_text())["stats"]["verdict"]["error_rate"] == 1 / 3
    broken["on"] = False
    assert evaluate.main(args) == 0
    rows = rows_of(out)
    assert len(rows) == 6 and all(r["error"] is None for r in rows)


def test_unreachable_endpoint_fails_fast(tmp_path):
    out = run(
        argv(
            write_jsonl(tmp_path / "q.jsonl"),
            "http://127.0.0.1:9/v1",
            tmp_path / "out",
            "--retries 0",
        )
    )
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert out.stderr.startswith("verdict_lab.evaluate: error: the endpoint cannot be used:")
    assert not (tmp_path / "out" / "summary.json").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--seeds", "0"], "--seeds must be >= 1, got 0"),
        (["--rules", "base,median"], "--rules must list distinct methods"),
        (["--concurrency", "0"], "--concurrency must be >= 1"),
        (["--max-calls", "0"], "--max-calls must be an integer >= 1 or None, got max_calls=0"),
        *VERIFIER_ERRORS,
        (["--data", "x.csv"], "unknown format '.csv'"),
        (["--data", "nowhere.jsonl"], "nowhere.jsonl: no such file"),
        (["--base-url", ""], "--base-url is required"),
        (["--judge-mode", "plain,sgv"], "judge mode 'sgv'"),
        (["--judge-mode", "prior,prior"], "--judge-mode lists a mode twice"),
        (["--judge-mode", "prior,premises,prior"], "--judge-mode lists a mode twice"),
        (["--judge-mode", "premises,gate"], "the gate needs the premises mode"),
        (["--judge-mode", "gate"], "the gate needs the premises mode"),
        # the hidden old names are gone: argparse refuses them
        (
            ["--judge-modes", "plain,prior"],
            "error: unrecognized arguments: --judge-modes plain,prior",
        ),
        (["--score-only"], "error: unrecognized arguments: --score-only"),
    ],
)
def test_bad_flags_one_line_exit_2(tmp_path, args, message):
    out = run(
        argv(write_jsonl(tmp_path / "q.jsonl"), "http://127.0.0.1:9/v1", tmp_path / "o") + args,
        cwd=tmp_path,
    )
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and message in out.stderr, out.stderr


@pytest.mark.parametrize(
    "bad",
    [
        ["--tau", "5", "--eps", "-1"],
        ["--tau", "2"],
        ["--eps", "0"],
        ["--tau", "-0.5"],
        ["--max-steps", "0"],
        ["--judge-mode", "plain,sgv"],
        ["--judge-modes", "plain,zoom"],  # the hidden old names are gone
        ["--score-only"],
    ],
)
def test_a_bad_setting_exits_2_before_any_request(tmp_path, loopback, bad):
    srv = loopback(script)
    data = write_jsonl(tmp_path / "q.jsonl")
    out = run(argv(data, srv.url, tmp_path / "o") + bad)
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert out.stderr.startswith("verdict_lab.evaluate: error: "), out.stderr
    assert srv.requests == [] and not (tmp_path / "o").exists()


def test_the_verifier_flags_default_to_the_settings(capsys):
    # One definition (add_verifier_args): the flags, their defaults (verdict.Config's) and help.
    for parse in (lambda a: evaluate.parse_args(["--data", "x.jsonl", *a]),):
        args = parse([])
        assert (args.n, args.tau, args.eps, args.max_steps) == (3, verdict.TAU, verdict.EPS, 8)
        assert (args.judge_mode, args.revise, args.mode_max_tokens) == (
            "plain",
            False,
            MODE_MAX_TOKENS,
        )
        assert settings_of(args) == Settings()  # every flag's default is verifier.Settings'
    helps = []
    for parse in (evaluate.parse_args,):
        with pytest.raises(SystemExit):
            parse(["-h"])
        text = capsys.readouterr().out
        helps.append(text[text.index("verifier:") :].split("\n\n")[0])
    # The old spellings are gone.
    assert "--judge-modes" not in helps[0] and "--score-only" not in helps[0]
    assert all(
        f in helps[0]
        for f in (
            *(
                "--n",
                "--tau",
                "--eps",
                "--lam",
                "--max-steps",
                "--max-tokens",
                "--judge-max-tokens",
            ),
            *(
                "--judge-format",
                "--weighted",
                "--judge-mode",
                "--mode-max-tokens",
                "--revise",
                "--reasons",
            ),
            *("--speculate", "--layout"),
        )
    )


def test_other_settings_in_out_dir_refused(tmp_path, loopback):
    srv = loopback(script)
    args = argv(
        write_jsonl(tmp_path / "q.jsonl", n=1), srv.url, tmp_path / "o", "--seeds 1 --rules base"
    )
    assert evaluate.main(args) == 0
    out = run(args + ["--max-steps", "2"])
    assert out.returncode == 2
    assert "holds a run with other settings (verifier); use another --out" in out.stderr, out.stderr


# ---------------------------------------------------------------- run directory, cache, exit status


def progress_free(err: str) -> list:
    """The lines of stderr but the progress line's (non-tty: one line per update)."""
    return [line for line in err.splitlines() if not re.match(r"\d+/\d+ items", line)]


def test_a_resume_against_another_endpoint_with_the_same_settings_goes_on_and_says_so_once(
    tmp_path, loopback, capsys
):
    # serve_tiny.sh picks a free port: the same model, back on another port, resumes the run.
    first, second = loopback(script), loopback(script)
    data, out = tmp_path / "q.jsonl", tmp_path / "o"
    write_jsonl(data, n=2)
    flags = "--seeds 1 --rules base,verdict --judge-format text"
    assert evaluate.main(argv(data, first.url, out, flags)) == 0
    kept = rows_of(out)
    write_jsonl(data, n=3)  # one more item, for the second server
    capsys.readouterr()
    assert evaluate.main(argv(data, second.url, out, flags)) == 0
    said = [line for line in progress_free(capsys.readouterr().err) if "was run against" in line]
    assert len(said) == 1 and first.url in said[0] and second.url in said[0], said
    assert rows_of(out)[: len(kept)] == kept and len(rows_of(out)) == 3 * 2
    assert second.chats and all("0 or 1" not in user_text(b) for b in second.chats)
    run_json = json.loads((out / "run.json").read_text())
    assert run_json["settings"]["base_url"] == run_json["settings"]["judge_base_url"] == second.url
    assert run_json["endpoints_before"] == [{"base_url": first.url, "judge_base_url": first.url}]
    # Another model is another table: still refused, before any request.
    sent = len(second.chats)
    assert evaluate.main(argv(data, second.url, out, flags + " --model other")) == 2
    assert "holds a run with other settings (model, judge_model)" in capsys.readouterr().err
    assert len(second.chats) == sent


def test_a_run_that_wrote_no_row_pins_nothing(tmp_path, loopback, capsys):
    # A closed port first: nothing ran, so the right URL, even with other settings, is welcome.
    srv, data, out = loopback(script), write_jsonl(tmp_path / "q.jsonl", n=2), tmp_path / "o"
    wrong = argv(data, "http://127.0.0.1:9/v1", out, "--seeds 1 --rules base --retries 0")
    assert evaluate.main(wrong) == 2 and not (out / "results.jsonl").read_text()
    assert json.loads((out / "run.json").read_text())["settings"]["base_url"].endswith(":9/v1")
    capsys.readouterr()
    assert evaluate.main(argv(data, srv.url, out, "--seeds 1 --rules base --n 2")) == 0
    assert not [line for line in capsys.readouterr().err.splitlines() if "run against" in line]
    assert json.loads((out / "run.json").read_text())["settings"]["base_url"] == srv.url
    assert len(rows_of(out)) == 2


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_on_the_first_request_exits_2_up_front(tmp_path, loopback, capsys, status):
    elsewhere = {"Location": "http://127.0.0.1:9/v1/chat/completions"}
    srv = loopback(lambda body, path: (status, {}, elsewhere))
    data, out = write_jsonl(tmp_path / "q.jsonl", n=3), tmp_path / "o"
    code = evaluate.main(argv(data, srv.url, out, "--seeds 1 --rules base,verdict --concurrency 1"))
    err = progress_free(capsys.readouterr().err)
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("verdict_lab.evaluate: error: the endpoint cannot be used: ")
    assert f"HTTP {status}: redirected to" in err[0] and "run the same command" not in err[0]
    assert len(srv.chats) == 1 and not (out / "summary.json").exists()
    assert not (out / "results.jsonl").read_text()  # the chain that met it left no row


def test_the_progress_line_shows_failed_chains_as_they_happen_and_every_method(
    tmp_path, loopback, capsys
):
    def failing(body, path):  # the first item is answered, then the server breaks
        if "0 or 1" in user_text(body):
            return script(body, path)
        return 500, {"error": {"message": "the model crashed"}}

    srv, data, out = loopback(failing), write_jsonl(tmp_path / "q.jsonl", n=2), tmp_path / "o"
    flags = "--seeds 1 --rules base,mean,verdict --retries 0 --concurrency 1 --judge-format text"
    assert evaluate.main(argv(data, srv.url, out, flags)) == 3
    lines = [line for line in capsys.readouterr().err.splitlines() if " items" in line]
    first = lines[0]  # after q0: every method's accuracy, no failure yet
    assert first.startswith("1/2 items") and "failed" not in first
    assert all(f" {m} " in first for m in ("base", "mean", "verdict")), first
    failed = next(i for i, line in enumerate(lines) if "failed" in line)
    assert lines[failed].startswith("1/2 items")  # before q1 finished: as it happened
    assert "1 of 4 chains failed" in lines[failed] and "the model crashed" in lines[failed]
    assert lines[-1].startswith("2/2 items") and "3 of 6 chains failed" in lines[-1], lines[-1]


def test_a_rerun_of_a_finished_run_says_nothing_new_ran(tmp_path, loopback, capsys):
    srv, data, out = loopback(script), write_jsonl(tmp_path / "q.jsonl", n=2), tmp_path / "o"
    args = argv(data, srv.url, out, "--seeds 1 --rules base")
    assert evaluate.main(args) == 0
    first = capsys.readouterr()
    assert "nothing new ran" not in first.err
    sent = len(srv.chats)
    assert evaluate.main(args) == 0
    again = capsys.readouterr()
    said = [line for line in again.err.splitlines() if "nothing new ran" in line]
    assert said == [
        f"verdict_lab.evaluate: nothing new ran: the 2 rows in {out / 'results.jsonl'} were "
        "already finished; the table is theirs"
    ]
    assert len(srv.chats) == sent and again.out == first.out  # the same table, no request


def test_cache_error_stops_the_run_and_keeps_finished_rows(tmp_path, loopback, monkeypatch, capsys):
    srv = loopback(script)
    gets = {"n": 0}
    real_get = Cache.get

    def failing_get(
        self, key
    ):  # the cache breaks in the middle of the run (a damaged or locked file)
        gets["n"] += 1
        if gets["n"] > 25:
            raise CacheError(
                f"{self.path} is not a readable verdict cache (database disk image is malformed)"
            )
        return real_get(self, key)

    monkeypatch.setattr(Cache, "get", failing_get)
    out = tmp_path / "out"
    flags = "--seeds 1 --rules base,verdict --concurrency 1 --judge-format text"
    code = evaluate.main(argv(write_jsonl(tmp_path / "q.jsonl", n=4), srv.url, out, flags))
    err = capsys.readouterr().err
    assert code == 2 and "malformed" in err
    assert "verdict_lab.evaluate: error: the response cache cannot be used:" in err
    rows = rows_of(out)
    assert rows and all(
        r["error"] is None for r in rows
    )  # the chain that met the broken cache left no row
    assert {(r["id"], r["method"]) for r in rows} == {
        ("q0", "base"),
        ("q0", "verdict"),
        ("q1", "base"),
    }
    assert not (out / "summary.json").exists()


def test_second_run_on_the_same_out_dir_is_refused_at_once(tmp_path, loopback):
    gate, reached, first = threading.Event(), threading.Event(), threading.Lock()

    def holding(body, path):  # the very first request waits until the test lets it go
        if first.acquire(blocking=False):
            reached.set()
            gate.wait(120)
        return script(body, path)

    srv = loopback(holding)
    args = argv(
        write_jsonl(tmp_path / "q.jsonl", n=2), srv.url, tmp_path / "o", "--seeds 1 --rules base"
    )
    proc = start_script("verdict_lab.evaluate", args)
    try:
        assert reached.wait(120), "the first run never sent a request"
        second = run(args)
    finally:
        gate.set()
        proc.wait(120)
    assert second.returncode == 2 and "another run is using" in second.stderr, second.stderr
    assert proc.returncode == 0
    assert len(rows_of(tmp_path / "o")) == 2


def test_every_row_failing_exits_non_zero_and_says_so_at_the_top(tmp_path, loopback):
    srv = loopback(lambda body, path: (500, {"error": {"message": "the model crashed"}}))
    data = write_jsonl(tmp_path / "q.jsonl", n=2)
    out = run(argv(data, srv.url, tmp_path / "o", "--seeds 1 --rules base --retries 0"))
    assert out.returncode == 3, out.stderr
    md = (tmp_path / "o" / "summary.md").read_text()
    assert "2 of 2 chains (100.0%) ended in an error" in md.split("Accuracy")[0]  # above the table
    assert "--max-error-rate" in out.stderr


# ----------------------------------------------------------------------------- bad input files


def test_empty_tsv_is_one_clear_error(tmp_path):
    (tmp_path / "Empty.tsv").write_text("")
    out = run(argv(tmp_path / "Empty.tsv", "http://127.0.0.1:9/v1", tmp_path / "o"))
    assert (
        out.returncode == 2
        and out.stderr.count("\n") == 1
        and "Empty.tsv: empty file" in out.stderr
    ), out.stderr


def test_non_utf8_byte_skips_its_row_and_names_file_and_line(tmp_path, loopback):
    path = tmp_path / "Bad.tsv"
    path.write_bytes(
        b"index\tquestion\tA\tB\tanswer\n1\tWhich is larger, 1 or 2?\t1\t2\tB\n"
        b"2\tWhich is caf\xe9?\tx\ty\tA\n3\tWhich is larger, 3 or 4?\t3\t4\tB\n"
    )
    srv = loopback(script)
    out = run(argv(path, srv.url, tmp_path / "o", "--seeds 1 --rules base"))
    assert out.returncode == 0, out.stderr
    assert "Bad.tsv line 3: not valid UTF-8 (byte 0xe9" in out.stderr
    assert {r["id"] for r in rows_of(tmp_path / "o")} == {"1", "3"}


def test_every_row_skipped_or_no_item_exits_non_zero(tmp_path):
    bad = tmp_path / "AllBad.tsv"
    # Rows VLMEvalKit's pandas could not read (more cells than the header), not rows without an
    # answer: those are scored.
    bad.write_text("index\tquestion\tA\tB\tanswer\n1\tq?\tx\ty\tA\tz\n2\tq?\tx\ty\tA\tz\n")
    header_only = tmp_path / "Header.tsv"
    header_only.write_text("index\tquestion\tA\tB\tanswer\n")
    for path, message in (
        (bad, "AllBad.tsv: no item to run: 2 rows read, 2 skipped"),
        (header_only, "Header.tsv: no item to run: 0 rows read"),
    ):
        out = run(argv(path, "http://127.0.0.1:9/v1", tmp_path / "o"))
        assert out.returncode == 2 and message in out.stderr, out.stderr


def test_limit_does_not_read_the_whole_file(tmp_path, loopback):
    """--limit 2 on a file whose third row is a 40 MB cell: the run never holds that cell in
    memory."""
    import tracemalloc
    from test_benchmarks import b64, png

    path = tmp_path / "Big.tsv"
    with open(path, "w") as fh:
        fh.write("index\timage\tquestion\tA\tB\tanswer\n")
        fh.writelines(
            f"{i}\t{b64(png('red'))}\tWhich is larger, {i} or {i + 1}?\t{i}\t{i + 1}\tB\n"
            for i in range(2)
        )
        fh.write("9\t" + "QUFB" * 10_000_000 + "\tq?\tx\ty\tA\n")
    srv = loopback(script)
    tracemalloc.start()
    try:
        code = evaluate.main(
            argv(path, srv.url, tmp_path / "o", "--limit 2 --seeds 1 --rules base")
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code == 0 and len(rows_of(tmp_path / "o")) == 2
    assert peak < 20_000_000, f"peak {peak / 1e6:.0f} MB"


def test_extract_model_reads_what_the_rules_cannot_and_is_counted_apart(tmp_path, loopback):
    """The reasoner answers "the larger number" (no letter, no option text): without --extract-model
    the item is unanswered; with it, the extraction model (another server) names the letter, in one
    call counted apart."""

    def vague(body, path):
        if role_of(body["messages"]) == "reasoner":
            return 200, chat_response(["Final answer: the larger number"] * body.get("n", 1))
        return script(body, path)

    srv, extractor = loopback(vague), loopback(lambda body, path: chat_response(["B"]))
    data, flags = write_jsonl(tmp_path / "q.jsonl", n=2), "--seeds 1 --rules base --max-calls 1"
    assert evaluate.main(argv(data, srv.url, tmp_path / "plain", flags)) == 0
    assert {r["extracted"] for r in rows_of(tmp_path / "plain")} == {"unanswered"}
    extract = " --extract-model reader --extract-base-url " + extractor.url
    assert evaluate.main(argv(data, srv.url, tmp_path / "x", flags + extract)) == 0
    rows = rows_of(tmp_path / "x")
    assert [
        (r["pred"], r["extracted"], r["correct"], r["calls"], r["extract_calls"]) for r in rows
    ] == [
        ("B", "judge", True, 1, 1),
        ("B", "judge", True, 1, 1),
    ]  # answers B, B: both right; the budget of 1 call holds
    assert len(extractor.chats) == 2 and {c["model"] for c in extractor.chats} == {"reader"}
    assert "Reply: the larger number" in user_text(extractor.chats[0])
    summary = json.loads((tmp_path / "x" / "summary.json").read_text())
    assert (
        summary["stats"]["base"]["extract_calls_per_item"] == 1
        and summary["stats"]["base"]["extracted"]["judge"] == 2
    )
    assert (
        summary["settings"]["extract_model"] == "reader"
        and summary["settings"]["extract_base_url"] == extractor.url
    )


def look_and_revise(body, path):
    """Candidates every judge rejects (json scores 8, 2, 8: the conflict), a region request naming
    the top-left quarter, and a reviser whose "Final answer: A" the judges accept (6, 6, 6)."""
    role = role_of(body["messages"])
    if role == "reasoner":
        return chat_response([f"Maybe {j}." for j in range(body["n"])])
    if role == "zoom":
        return chat_response('{"boxes": [[0, 0, 500, 500]]}')
    if role == "reviser":
        return chat_response("Final answer: A")
    content = body["messages"][1]["content"]  # with close-ups, the task is the last text part
    step = re.search(r"<step>\n(.*?)\n</step>", content[-1]["text"], re.S).group(1)
    score = 6 if step == "Final answer: A" else (8, 2, 8)[verdict.JUDGES.index(role)]
    return chat_response(json.dumps({"reason": "because", "score": score}))


def test_zoom_and_revise_rows_record_their_paths_and_costs(tmp_path, loopback):
    path, _ = tiny_tsv(tmp_path)
    srv = loopback(look_and_revise)
    out = tmp_path / "out"
    assert (
        evaluate.main(
            argv(
                path,
                srv.url,
                out,
                "--seeds 1 --limit 1 --rules verdict --judge-mode plain,zoom --revise --n 2 "
                "--max-steps 2",
            )
        )
        == 0
    )
    rows = {r["method"]: r for r in rows_of(out)}
    assert list(rows) == ["verdict", "verdict+zoom", "verdict+revise", "verdict+zoom+revise"]
    # Without revision every step falls back to "Maybe 0." until max_steps; with it,
    # step 1's revision is taken.
    assert (
        rows["verdict"]["stopped"] == "max_steps" and rows["verdict+revise"]["stopped"] == "final"
    )
    assert rows["verdict+revise"]["correct"] and not rows["verdict"]["correct"]
    # verdict+zoom: a region request per candidate of each step (2 steps × 2), every box valid.
    z = rows["verdict+zoom"]
    assert (z["zoom_requests"], z["zoomed"], z["extra_calls"]) == (4, 4, 4) and z["revisions"] == 0
    # The revision costs the reviser's call and its 3 judgements; in the zoom mode also the
    # revision's region request.
    r, zr = rows["verdict+revise"], rows["verdict+zoom+revise"]
    assert (r["revisions"], r["revised"], r["revise_calls"]) == (1, 1, 4) and r["revise_tokens"] > 0
    assert (zr["revisions"], zr["revised"], zr["revise_calls"], zr["zoom_requests"]) == (1, 1, 5, 3)
    step = r["trace"]["steps"][0]
    assert (
        step["fallback"] and step["revision"]["taken"] and step["revision"]["usage"]["calls"] == 4
    )
    stats = json.loads((out / "summary.json").read_text())["stats"]
    assert (
        stats["verdict+revise"]["revise_calls_per_item"] == 4
        and stats["verdict+revise"]["revised_rate"] == 1.0
    )
    assert stats["verdict"]["revised_rate"] is None


def test_a_lone_surrogate_in_a_jsonl_cell_is_read_as_u_fffd_and_every_file_is_written(
    tmp_path, loopback
):
    # "\ud800" in a JSONL question is valid JSON but no text: no UTF-8 file could hold it. It is
    # read as U+FFFD, so the chains run and the predictions, the rows and the tables are written.
    data = tmp_path / "lone.jsonl"
    row = {"id": "q0", "question": "Which? \ud800", "options": {"A": "x", "B": "y"}, "answer": "B"}
    data.write_text(json.dumps(row) + "\n", encoding="utf-8")
    assert "\\ud800" in data.read_text(encoding="utf-8")  # the escape, as a JSON writer puts it
    out = tmp_path / "out"
    assert (
        evaluate.main(argv(data, loopback(script).url, out, "--seeds 1 --rules base --max-steps 2"))
        == 0
    )
    (r,) = rows_of(out)
    assert r["input"]["question"] == "Which? \ufffd" and r["error"] is None
    tsvs = [
        f
        for d, _, fs in os.walk(out)
        for f in (os.path.join(d, x) for x in fs)
        if f.endswith("_lone.tsv")
    ]
    assert tsvs and all("\ufffd" in open(f, encoding="utf-8").read() for f in tsvs)
