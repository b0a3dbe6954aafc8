"""Tests for verdict_lab.evaluate's sweeps (verdict_lab/harness/sweep.py): τ sweeps whose settings
agree everywhere cost one run, sweeps whose decisions differ cost less than separate runs, by counts
derived from the scripted replies; a resumed sweep sends nothing twice; judge and reasoner lists;
the flags' checks; the tables and picture."""

import csv
import json
import os
import re

import numpy as np
import pytest
from PIL import Image

from verdict_lab import evaluate
import verdict
from verdict_lab.harness import sweep
from verdict_lab.loopback import chat_response, user_text
from verdict_lab.layouts import role_of
from test_demo import run_script
from test_evaluate import HERE, argv, write_jsonl

N, M = 3, 3  # candidates per step, judges
TAUS = (0.1, 0.3, 0.6, 0.7, 0.9)


def scripted(step1: dict):
    """A server: step 1 offers "Idea j for seed s." (j < n), which judge k scores step1[j][k]; step
    2 offers n distinct final answers ("Thus. Final answer: A", ...), every judge 0.7."""

    def handler(body, path):
        role, text = role_of(body["messages"]), user_text(body)
        if role == "reasoner":
            n, seed = body.get("n", 1), body["seed"]
            if re.search(r"(?m)^Step 1:", text):
                finals = [
                    f"{w} Final answer: {'AB'[j % 2]}"
                    for j, w in enumerate(("Thus.", "Hence.", "So."))
                ]
                return 200, chat_response(finals[:n], prompt_tokens=20)
            return 200, chat_response(
                [f"Idea {j} for seed {seed}." for j in range(n)], prompt_tokens=20
            )
        step = re.search(r"<step>\n(.*?)\n</step>", text, re.S).group(1)
        j = re.match(r"Idea (\d)", step)
        score = step1[int(j.group(1))][verdict.JUDGES.index(role)] if j else 0.7
        return 200, chat_response([f"Checked.\nScore: {score}"], prompt_tokens=20)

    return handler


AGREE = {
    j: (0.7, 0.7, 0.7) for j in range(N)
}  # every τ takes candidate 0 (a tie, or the fallback's tie)
# Candidate 0 conflicts (Δ* = 0.109 > ε: never accepted) but ranks first in the fallback (s̄* − Δ* =
# 0.70); 1 passes for τ < 0.65 (s̄* = 0.65, Δ* = 0); 2 for τ < 0.5. So τ < 0.65 takes 1, τ >= 0.65
# falls back to 0.
DIFFER = {0: (1.0, 0.4, 1.0), 1: (0.65, 0.65, 0.65), 2: (0.5, 0.5, 0.5)}


def expected(step1: dict, taus, chains: int) -> dict:
    """The requests of a τ sweep of base and verdict over `chains` (item, seed) pairs, from the
    script. Per chain: base sends 2 (n = 1 at each of its two steps); verdict's step 1 (1 reasoner
    call + n·m judge calls) is the same request for every τ; its step 2 (1 + n·m) depends only on
    the candidate step 1 chose, so the sweep sends one step 2 per distinct choice, and a run of one
    τ alone sends one."""
    s_hat = np.array([step1[j] for j in range(N)])  # [n, m]
    choices = [verdict.select(s_hat, tau=t).index for t in taus]
    one_run = 2 + 2 * (1 + N * M)
    return {
        "choices": choices,
        "one_run": chains * one_run,
        "sweep": chains * (2 + (1 + N * M) * (1 + len(set(choices)))),
        "separate": chains * one_run * len(taus),
    }


def sweep_argv(data, url, out, taus=TAUS, more=""):
    flags = "--seeds 2 --rules base,verdict --judge-format text --max-steps 3"
    flags += f" --sweep tau={','.join(map(str, taus))}"
    return argv(data, url, out, f"{flags} {more}")


def test_a_sweep_that_agrees_everywhere_costs_one_run(tmp_path, loopback):
    srv, data = loopback(scripted(AGREE)), write_jsonl(tmp_path / "q.jsonl", n=3)
    want = expected(AGREE, TAUS, chains=3 * 2)
    assert len(set(want["choices"])) == 1 and want["sweep"] == want["one_run"] == 6 * 22
    assert evaluate.main(sweep_argv(data, srv.url, tmp_path / "out")) == 0
    assert len(srv.chats) == want["one_run"]  # 5 settings, the requests of one run
    bodies = [json.dumps(c, sort_keys=True) for c in srv.chats]
    assert len(set(bodies)) == len(bodies)
    alone = loopback(scripted(AGREE))  # one run of one τ, on its own: the same count
    assert (
        evaluate.main(
            argv(
                data,
                alone.url,
                tmp_path / "one",
                "--seeds 2 --rules base,verdict --judge-format text --max-steps 3 --tau 0.3",
            )
        )
        == 0
    )
    assert len(alone.chats) == want["one_run"]
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["format"] == sweep.SWEEP_FORMAT and s["settings"] == [f"tau={t:g}" for t in TAUS]
    assert s["cost"]["needed"]["calls"] == s["cost"]["sent"]["calls"] == want["one_run"]
    assert s["cost"]["separate"]["calls"] == want["separate"] == 5 * want["one_run"]
    assert s["cost"]["separate"]["tokens"] == 5 * s["cost"]["needed"]["tokens"] > 0


def test_a_sweep_whose_decisions_differ_costs_less_than_separate_runs(tmp_path, loopback):
    srv, data = loopback(scripted(DIFFER)), write_jsonl(tmp_path / "q.jsonl", n=3)
    want = expected(DIFFER, TAUS, chains=3 * 2)
    assert 1 < len(set(want["choices"])) < len(TAUS)  # some decisions differ, not all
    out = tmp_path / "out"
    assert evaluate.main(sweep_argv(data, srv.url, out)) == 0
    assert len(srv.chats) == want["sweep"] < want["separate"]
    assert want["sweep"] > want["one_run"]
    s = json.loads((out / "summary.json").read_text())
    assert (
        s["cost"]["needed"]["calls"] == want["sweep"]
        and s["cost"]["separate"]["calls"] == want["separate"]
    )
    for t, c in zip(
        TAUS, want["choices"]
    ):  # each setting's chains took the candidate verdict.select says
        with open(out / f"tau={t:g}" / "results.jsonl") as fh:
            rows = [json.loads(line) for line in fh]
        assert {r["trace"]["steps"][0]["index"] for r in rows if r["method"] == "verdict"} == {c}
        assert (out / f"tau={t:g}" / "summary.md").exists()
    # The tables: the paper's form, one table per setting, a column per setting in the CSV, and
    # the picture.
    md = (out / "summary.md").read_text()
    assert "| τ | base | verdict | fallback |" in md and s["margin"] == {}  # no Mean: no margin
    assert all(f"Setting tau={t:g}" in md for t in TAUS) and "separate runs" in md
    with open(out / "sweep_acc.csv") as fh:
        table = list(csv.reader(fh))
    assert table[0] == ["method", "column"] + s["settings"] and len(table) == 1 + 2 * 2
    assert Image.open(out / "summary.png").size == (760, 440)


def test_a_resumed_sweep_makes_no_call_twice(tmp_path, loopback):
    srv, data = loopback(scripted(DIFFER)), write_jsonl(tmp_path / "q.jsonl", n=3)
    want, out = expected(DIFFER, TAUS, chains=3 * 2), tmp_path / "out"
    assert (
        evaluate.main(sweep_argv(data, srv.url, out, TAUS[:2])) == 0
    )  # stopped after two settings
    results = out / "tau=0.7" / "results.jsonl"
    assert evaluate.main(sweep_argv(data, srv.url, out)) == 0
    lines = results.read_text().splitlines(keepends=True)
    results.write_text("".join(lines[: len(lines) // 2]))  # killed halfway through a setting
    before = len(srv.chats)
    assert evaluate.main(sweep_argv(data, srv.url, out)) == 0
    assert len(srv.chats) == before == want["sweep"]
    bodies = [json.dumps(c, sort_keys=True) for c in srv.chats]
    assert len(set(bodies)) == len(bodies)
    s = json.loads((out / "summary.json").read_text())
    assert s["cost"]["sent"]["calls"] == 0 and s["cost"]["needed"]["calls"] == want["sweep"]
    assert len(results.read_text().splitlines()) == len(lines)


def test_judge_models_share_the_reasoner_and_reasoners_the_judge(tmp_path, loopback):
    srv, data = loopback(scripted(AGREE)), write_jsonl(tmp_path / "q.jsonl", n=2)
    flags = "--seeds 1 --rules base,mean,verdict --judge-format text --max-steps 3"
    out = tmp_path / "judges"
    assert evaluate.main(argv(data, srv.url, out, f"{flags} --model r --judge-model j7,j2")) == 0
    chats = srv.chats
    reasoner = [c for c in chats if role_of(c["messages"]) == "reasoner"]
    assert {c["model"] for c in reasoner} == {"r"} and {c["model"] for c in chats} == {
        "r",
        "j7",
        "j2",
    }
    # Every setting's chains agree: base 2 and judged 2 reasoner calls per chain, sent once for
    # both judges.
    assert len(reasoner) == 2 * (2 + 2)
    assert (
        sum(c["model"] == "j7" for c in chats)
        == sum(c["model"] == "j2" for c in chats)
        == 2 * 2 * N * M
    )
    s = json.loads((out / "summary.json").read_text())
    assert s["axis"] == "judge_model" and s["ticks"] == ["j7", "j2"]
    assert (
        set(s["margin"]) == {"judge=j7", "judge=j2"}
        and "judge model" in (out / "summary.md").read_text()
    )
    assert os.path.isdir(out / "judge=j7") and (out / "summary.png").exists()
    out = tmp_path / "reasoners"
    assert evaluate.main(argv(data, srv.url, out, f"{flags} --model r1,r2 --judge-model j")) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["axis"] == "model" and s["settings"] == ["model=r1", "model=r2"]


@pytest.mark.parametrize(
    "flags, says",
    [
        ("--sweep tau=0.1", "two or more distinct"),
        ("--sweep tau=0.1,0.1", "two or more distinct"),
        ("--sweep rho=0.1,0.2", "NAME one of tau"),
        ("--sweep tau=0.1,x", "must be a number"),
        ("--sweep tau=0.1,1.5", "--tau must be in [0, 1]"),
        ("--sweep lam_V=1,-1", "lam"),
        ("--model a,b", "give --judge-model"),
        ("--sweep tau=0.1,0.2 --judge-model a,b", "one thing at a time"),
        ("--judge-model a,,b", "distinct model names"),
    ],
)
def test_bad_sweeps_fail_before_any_call(tmp_path, loopback, capsys, flags, says):
    srv, data = loopback(scripted(AGREE)), write_jsonl(tmp_path / "q.jsonl", n=2)
    assert evaluate.main(argv(data, srv.url, tmp_path / "out", f"--seeds 1 {flags}")) == 2
    assert says in capsys.readouterr().err and srv.chats == []


def test_the_simulator_draws_the_same_curves(tmp_path):
    from verdict_lab import simulate

    s = simulate.curve("tau=0.01,0.6,0.95", trials=300, seeds=3)
    assert s["format"] == sweep.SWEEP_FORMAT and s["settings"] == [
        "tau=0.01",
        "tau=0.6",
        "tau=0.95",
    ]
    assert set(s["accuracy"]["tau=0.6"]) == {"base", "mean", "verdict"}
    # nothing but selection changes with τ: the base (candidate 0) and Mean do not move
    for m in ("base", "mean"):
        assert len({s["accuracy"][k][m]["Avg"]["mean"] for k in s["settings"]}) == 1
    lam = simulate.curve("lam_C=0.5,2", trials=300, seeds=3)
    assert lam["axis"] == "lam_C" and lam["margin"]["lam_C=2"]["Avg"] is not None
    assert (
        simulate.main(
            ["--sweep", "eps=0.05,0.1", "--trials", "100", "--seeds", "2", "--out", str(tmp_path)]
        )
        == 0
    )
    assert (tmp_path / "sim_eps.png").exists() and json.loads(
        (tmp_path / "sim_eps.json").read_text()
    )["axis"] == "eps"


# ----------------------------------------------------------------------------- the scripted demo

DOCS = os.path.join(HERE, "docs")


def docs_stamp() -> dict:
    """{name: (size, mtime)} of docs/'s files the τ demo would touch (its picture, sweep_*)."""
    return {
        f: (os.stat(p).st_size, os.stat(p).st_mtime_ns)
        for f in os.listdir(DOCS)
        if f.startswith(("sweep_", "sim_")) and os.path.isfile(p := os.path.join(DOCS, f))
    }


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """python -m verdict_lab.perf.sweep_demo as a new user runs it, from a directory of their own:
    (its output, that directory, docs/'s stamp before, after)."""
    cwd = tmp_path_factory.mktemp("user")
    before = docs_stamp()
    p = run_script("verdict_lab.perf.sweep_demo", [], cwd=str(cwd), timeout=900)
    return p, cwd, before, docs_stamp()


def test_the_sweep_demo_writes_in_the_current_directory_never_in_docs_and_prints_its_table(demo):
    p, cwd, before, after = demo
    assert p.returncode == 0, p.stderr
    assert after == before  # docs/sweep_tau.png untouched
    picture = cwd / "runs" / "sweep-demo" / "sweep_tau.png"
    assert Image.open(picture).size[0] > 0 and f"wrote {picture} (scripted server)" in p.stderr
    taus = re.findall(r"(?m)^\| ([0-9.]+) \| [0-9.]+ ±", p.stdout)
    assert taus == ["0.01", "0.1", "0.3", "0.6", "0.8", "0.95"], p.stdout


def test_the_request_counts_of_docs_sweeps_md_are_what_the_demo_prints(demo):
    p = demo[0]
    needed = re.search(r"(?m)^\| needed \| (\d+) \|", p.stdout).group(1)
    separate = re.search(r"(?m)^\| separate runs \| (\d+) \|", p.stdout).group(1)
    with open(os.path.join(DOCS, "sweeps.md"), encoding="utf-8") as fh:
        text = " ".join(fh.read().split())
    said = re.search(
        r"the sweep needed (\d+) requests where six separate runs would send (\d+)", text
    )
    assert said and said.groups() == (needed, separate), (said and said.groups(), needed, separate)


def test_an_adaptive_threshold_sweep_trades_judge_calls_for_accuracy_in_one_run(tmp_path, loopback):
    # agree's v: step 1 offers n distinct ideas (v = 1/3), step 2 the answers A, B, A (v = 2/3).
    # θ = 0.5 judges step 1 (1/3 is not above 0.5) and not step 2 (2/3 is): 9 judge calls a chain;
    # θ = 0.2 judges neither: 0; θ = 1, added to the sweep, judges both: 18, full VERDICT. AGREE
    # makes full VERDICT take candidate 0 at step 1, the one θ = 0.2 takes unjudged (no two ideas
    # agree: the first), so every setting's reasoner requests are full VERDICT's and the sweep
    # sends the requests of one full run: per chain, base 2 and VERDICT 2 · (1 + n·m) = 20.
    srv, data = loopback(scripted(AGREE)), write_jsonl(tmp_path / "q.jsonl", n=3)
    out = tmp_path / "out"
    flags = "--seeds 2 --rules base,verdict --judge-format text --max-steps 3 --adaptive agree"
    assert (
        evaluate.main(argv(data, srv.url, out, f"{flags} --sweep adaptive_threshold=0.2,0.5")) == 0
    )
    s = json.loads((out / "summary.json").read_text())
    assert s["axis"] == "adaptive_threshold" and s["values"] == [0.2, 0.5, 1.0]
    assert len(srv.chats) == s["cost"]["needed"]["calls"] == 3 * 2 * (2 + 20)
    per_item = {k: v["verdict"] for k, v in s["judge_calls"].items()}
    assert per_item == {
        "adaptive_threshold=0.2": 0,
        "adaptive_threshold=0.5": N * M,
        "adaptive_threshold=1": 2 * N * M,
    }  # per item and seed
    with open(out / "adaptive_threshold=0.5" / "results.jsonl") as fh:
        rows = [json.loads(line) for line in fh if '"verdict"' in line]
    trace = next(r["trace"] for r in rows if r["method"] == "verdict")
    assert [st.get("adaptive", {}).get("judged") for st in trace["steps"]] == [True, False]
    assert trace["totals"]["adaptive"] == {
        "signal": "agree",
        "threshold": 0.5,
        "judged": 1,
        "unverified": 1,
    }
    md = (out / "summary.md").read_text()
    assert "| θ (adaptive) | base | verdict | fallback | VERDICT judge calls / item |" in md
    assert Image.open(out / "compute.png").size == (760, 440)
