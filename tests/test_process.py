"""verdict_lab.process and process_metrics: VERDICT and the baselines scored against human step
labels. Golden numbers worked by hand (the derivations are in the comments), an AUROC oracle, the
rules' decisions against verdict.select, and the command on a scripted loopback server: m judge
calls per step and no reasoner call, a rerun that costs nothing, a resumed run, bad rows, both
layouts."""

import csv
import json
import math
import os
import re

import numpy as np
import pytest

import verdict
from make_process_data import make
from verdict_lab import process, process_metrics as pm
from verdict_lab.layouts import role_of
from verdict_lab.loopback import LoopbackServer, chat_response, user_text

LAM = verdict.STUBBORNNESS
# Judge digits (visual, logical, contextual); a json judge's ŝ is the digit / 9.
PATTERNS = {"H": (7, 7, 7), "X": (9, 2, 9), "M": (6, 5, 6), "L": (2, 2, 2)}
# (id, source, [(pattern, label)]): the steps of each sample, in order.
SAMPLES = (
    ("s1", "geo", [("H", 1), ("X", -1), ("L", -1)]),
    ("s2", "geo", [("H", 1), ("M", 1), ("X", -1)]),
    ("s3", "chart", [("M", 1), ("X", 1), ("H", 0), ("L", -1)]),
    ("s4", "chart", [("H", 1), ("H", 1)]),
)
# Hand-worked, with the consensus row weights of DESIGN §3 (s̄* = 0.4007 ŝ_V + 0.3206 ŝ_L +
# 0.2787 ŝ_C) and Proposition 1's Δ* scaled (Δ* is linear in the spread and ignores a shift):
#   H = (7,7,7)/9: s̄* = 0.7778, Δ* = 0           -> VERDICT accepts; raw mean 0.7778 > 0.6 accepts.
#   X = (9,2,9)/9 = 1 − (7/9)e_L: s̄* = 1 − 0.3206·7/9 = 0.7507; Δ* = 0.1268·(7/9)/0.7 = 0.1409
#       > ε -> VERDICT rejects; raw mean 20/27 = 0.7407 > 0.6 -> mean accepts.
#   M = (6,5,6)/9 = 6/9 − (1/9)e_L: s̄* = 0.6311, Δ* = 0.0181·(1/9)/0.1 = 0.0201 -> both accept
#       (raw mean 17/27 = 0.6296).
#   L = (2,2,2)/9: 0.2222 -> both reject.
# Counted steps (the neutral one dropped): 7 correct (H×4, M×2, X×1), 4 incorrect (X×2, L×2).
#   VERDICT: correct accepted 6 (the correct X rejected), incorrect rejected 4.
#     F1_correct = 2·6/(2·6 + 0 + 1) = 12/13; F1_incorrect = 2·4/(2·4 + 1 + 0) = 8/9;
#     macro F1 = (12/13 + 8/9)/2 = 0.905983.
#   mean: correct accepted 7, incorrect rejected 2 (both X accepted).
#     F1_correct = 14/(14 + 2) = 7/8; F1_incorrect = 2·2/(2·2 + 0 + 2) = 2/3; macro = 0.770833.
# AUROC (28 pairs, correct steps positive). VERDICT's score "key": accepted 1 + s̄* (H 1.778,
#   M 1.631), rejected s̄* − Δ* (X 0.610, L 0.222): H×4 and M×2 beat all 4 -> 24; the correct X
#   ties both X (2·½) and beats both L (2) -> 3; AUROC = 27/28.
#   mean's raw mean: H 0.778 > X 0.741 > M 0.630 > L 0.222: H×4 -> 16; M×2 beat L×2 only -> 4;
#   X ties 2 X, beats 2 L -> 3; AUROC = 23/28.
# First error (ProcessBench): true first −1 at s1 step 2, s2 step 3, s3 step 4, s4 none.
#   VERDICT rejects first: s1 step 2 ✓, s2 step 3 ✓, s3 step 2 (the correct X) ✗, s4 none ✓:
#     acc. erroneous 2/3, acc. correct 1/1, F1 = 2·(2/3)·1/(2/3 + 1) = 0.8.
#   mean rejects first: s1 step 3 ✗, s2 none ✗, s3 step 4 ✓, s4 none ✓: 1/3, 1, F1 = 0.5.
GOLDEN = {
    "verdict": (12 / 13, 8 / 9, (12 / 13 + 8 / 9) / 2, 6 / 7, 1.0, 27 / 28, 2 / 3, 0.8),
    "mean": (7 / 8, 2 / 3, (7 / 8 + 2 / 3) / 2, 1.0, 0.5, 23 / 28, 1 / 3, 0.5),
}
# Per source, VERDICT: geo has H+ X− L− H+ M+ X−, all right: macro F1 1. chart has M+ X+ L− H+ H+
# (the neutral H dropped): correct accepted 3 of 4, the incorrect L rejected: F1_correct = 6/7,
# F1_incorrect = 2/3, macro 0.761905.
PER_SOURCE = {"geo": 1.0, "chart": (6 / 7 + 2 / 3) / 2}
# The mean of the sources weighted by counted steps (geo 6, chart 5): (6·1 + 5·0.761905)/11 =
# 0.891775, below the pooled 0.905983.
BY_SOURCE = (6 * 1.0 + 5 * (6 / 7 + 2 / 3) / 2) / 11


def step_text(sample: str, t: int, pattern: str) -> str:
    return f"Step {t + 1} of {sample} ({pattern})."


def arrays():
    samples, sources, labels, s_hat = [], [], [], []
    for sid, src, steps in SAMPLES:
        for pattern, y in steps:
            samples.append(sid), sources.append(src), labels.append(y)
            s_hat.append(np.array(PATTERNS[pattern]) / 9)
    return samples, sources, np.array(labels), np.array(s_hat)


# ----------------------------------------------------------------------------- the metrics


def test_hand_worked_metrics():
    rep = pm.report(*arrays(), LAM, 0.6, 0.1)
    for rule, want in GOLDEN.items():
        m = rep["overall"]["rules"][rule]
        fe = m["first_error"]
        got = (m["f1_correct"], m["f1_incorrect"], m["macro_f1"], m["acc_correct"])
        got += (m["acc_incorrect"], m["auroc"], fe["acc_erroneous"], fe["f1"])
        assert got == pytest.approx(want, abs=1e-12), rule
    for src, f1 in PER_SOURCE.items():
        assert rep[src]["rules"]["verdict"]["macro_f1"] == pytest.approx(f1, abs=1e-12)
    by_source = rep["overall"]["rules"]["verdict"]["macro_f1_by_source"]
    assert by_source == pytest.approx(BY_SOURCE, abs=1e-12)
    assert rep["overall"]["steps"] == {"+1": 7, "0": 1, "-1": 4}
    assert (rep["geo"]["counted"], rep["chart"]["counted"], rep["overall"]["counted"]) == (6, 5, 11)


def test_neutral_counted_as_correct_or_incorrect():
    # With the neutral H counted, VERDICT accepts it: as correct it is one more true acceptance
    # (F1_correct = 14/15), as incorrect one more false one (F1_correct = 12/14, F1_incorrect
    # = 8/10).
    samples, sources, labels, s_hat = arrays()
    accept = pm.decide(pm.stats(s_hat), 0.6, 0.1)["verdict"]
    assert pm.macro_f1(labels, accept, "correct")["f1_correct"] == pytest.approx(14 / 15)
    m = pm.macro_f1(labels, accept, "incorrect")
    assert (m["f1_correct"], m["f1_incorrect"]) == pytest.approx((12 / 14, 8 / 10))
    with pytest.raises(ValueError, match="neutral must be one of"):
        pm.counted(labels, "ignore")


def pairwise_auroc(score, positive) -> float:
    """The oracle: the share of (positive, negative) pairs the positive wins, ties ½, NaN lowest."""
    s = np.nan_to_num(np.asarray(score, float), nan=-np.inf)
    pos, neg = s[positive], s[~positive]
    wins = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return wins / (len(pos) * len(neg))


@pytest.mark.parametrize("seed", range(20))
def test_auroc_equals_the_pairwise_oracle(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 60))
    score = rng.integers(0, 6, n) / 5.0  # few values: many ties
    score[rng.random(n) < 0.1] = np.nan
    positive = rng.random(n) < 0.5
    positive[:2] = (True, False)  # both classes present
    assert pm.auroc(score, positive) == pytest.approx(pairwise_auroc(score, positive), abs=1e-12)


def test_auroc_golden_and_degenerate():
    assert pm.auroc([0.1, 0.4, 0.35, 0.8], [False, False, True, True]) == 0.75  # 3 of 4 pairs
    assert pm.auroc([0.5, 0.5], [True, False]) == 0.5  # a tie is half a win
    assert math.isnan(pm.auroc([0.2, 0.9], [True, True]))  # one class: no pair


@pytest.mark.parametrize("seed", range(10))
def test_verdict_and_raw_dual_decisions_are_selects_filters(seed):
    # One candidate per step: verdict.select's `accepted` is the rule's own filter.
    rng = np.random.default_rng(seed)
    s_hat = rng.integers(0, 10, (50, 3)) / 9
    s_hat[rng.random((50, 3)) < 0.1] = np.nan
    tau, eps = float(rng.choice([0.3, 0.6, 2 / 3])), float(rng.choice([0.05, 0.1, 0.2]))
    got = pm.decide(pm.stats(s_hat), tau, eps)
    sel = verdict.select_all(s_hat[:, None, :], LAM, tau, eps, rules=("verdict", "raw-dual"))
    for rule in ("verdict", "raw-dual"):
        assert (got[rule] == sel[rule].accepted[:, 0]).all(), rule


def test_first_error_golden():
    # Sample a: true first error at its step 2; rejected first at step 2. b: no error, nothing
    # rejected. c: error at step 1, rejected first at step 3. Erroneous 1/2, correct 1/1: F1 2/3.
    fe = pm.first_error(list("aabbccc"), [1, -1, 1, 1, -1, 1, 1], [1, 0, 1, 1, 1, 1, 0])
    assert (fe["acc_erroneous"], fe["acc_correct"], fe["f1"]) == pytest.approx((0.5, 1.0, 2 / 3))


def test_the_sweep_reuses_the_scores():
    _, _, labels, s_hat = arrays()
    sw = pm.sweep(labels, s_hat, [0.5, 0.6], [0.1, 0.2], [LAM])
    # At (0.6, 0.1) VERDICT's F1 is the golden one; at ε = 0.2 it accepts X (Δ* 0.141) like mean.
    assert sw["verdict"][0][1][0] == pytest.approx(GOLDEN["verdict"][2])
    assert sw["verdict"][0][1][1] == pytest.approx(GOLDEN["mean"][2])
    assert sw["best"]["verdict"]["macro_f1"] == pytest.approx(GOLDEN["verdict"][2])


# ----------------------------------------------------------------------------- the command


def write_samples(path, root, samples=SAMPLES):
    from PIL import Image

    Image.new("RGB", (32, 24), (200, 30, 30)).save(root / "red.png")
    with open(path, "w") as fh:
        for sid, src, steps in samples:
            texts = [step_text(sid, t, p) for t, (p, _) in enumerate(steps)]
            row = {"id": sid, "source": src, "question": f"Q of {sid}?", "images": ["red.png"]}
            fh.write(json.dumps({**row, "steps": texts, "labels": [y for _, y in steps]}) + "\n")


def judge_server():
    """Each judge answers its digit of the step's pattern (read from the step's text)."""
    index = {"visual": 0, "logical": 1, "contextual": 2}

    def handler(body, path):
        role = role_of(body["messages"])
        pattern = re.search(r"<step>\s*Step \d+ of s\d \((\w)\)", user_text(body)).group(1)
        return chat_response(json.dumps({"score": PATTERNS[pattern][index[role]]}))

    return LoopbackServer(handler)


def run(argv, capsys):
    status = process.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_the_command_pins_the_hand_worked_numbers(tmp_path, capsys):
    data, out = tmp_path / "labels.jsonl", tmp_path / "out"
    write_samples(data, tmp_path)
    with judge_server() as srv:
        status, md, err = run(["--data", data, "--base-url", srv.url, "--out", out], capsys)
        chats = srv.chats
    assert status == 0, err
    # m = 3 judge calls per step (12 steps, the neutral one too), no reasoner call, each with the
    # image, step t judged after steps 1..t−1.
    assert len(chats) == 3 * 12
    assert {role_of(b["messages"]) for b in chats} == {"visual", "logical", "contextual"}
    assert all("image_url" in json.dumps(b["messages"]) for b in chats)
    s3 = [user_text(b) for b in chats if "Step 3 of s3" in user_text(b).split("<step>")[-1]]
    assert s3 and all("Step 1 of s3" in u and "Step 2 of s3" in u for u in s3)
    s = json.loads((out / "process_summary.json").read_text())
    assert s["judge_calls"] == 36 and s["judge_calls_per_step"] == 3.0
    for rule, want in GOLDEN.items():
        m = s["report"]["overall"]["rules"][rule]
        assert (m["macro_f1"], m["auroc"], m["first_error"]["f1"]) == pytest.approx(
            (want[2], want[5], want[7]), abs=1e-12
        )
    assert "| verdict | s̄* > τ and Δ* < ε (the dual test) | 0.906 |" in md
    with open(out / "process_steps.csv") as fh:
        lines = list(csv.DictReader(fh))
    assert len(lines) == 12 and lines[1]["sample"] == "labels/s1" and lines[1]["label"] == "-1"
    assert (lines[1]["verdict"], lines[1]["mean"]) == ("0", "1")  # X: rejected, accepted
    assert float(lines[1]["delta_star"]) == pytest.approx(0.1268 * (7 / 9) / 0.7, abs=1e-4)
    assert (out / "process_f1.png").stat().st_size > 0


def test_a_rerun_costs_nothing_and_an_interrupted_run_resumes(tmp_path, capsys):
    data, out = tmp_path / "labels.jsonl", tmp_path / "out"
    write_samples(data, tmp_path)
    with judge_server() as srv:
        first = run(["--data", data, "--base-url", srv.url, "--out", out], capsys)
        sent = len(srv.chats)
        again = run(["--data", data, "--base-url", srv.url, "--out", out], capsys)
        assert len(srv.chats) == sent  # every sample's row is kept
        rows = (out / "process_rows.jsonl").read_text().splitlines()
        # Killed while writing the third row, with the cache lost too: s1 and s2 are kept, s3 and
        # s4 (6 steps) are judged again: 18 calls.
        kept = [r for r in rows if json.loads(r)["id"] in ("s1", "s2")]
        cut = next(r for r in rows if json.loads(r)["id"] == "s3")[:30]
        (out / "process_rows.jsonl").write_text("\n".join(kept) + "\n" + cut)
        (out / "cache.sqlite").unlink()
        resumed = run(["--data", data, "--base-url", srv.url, "--out", out], capsys)
        assert len(srv.chats) == sent + 18
    assert first[0] == again[0] == resumed[0] == 0
    assert first[1] == again[1] == resumed[1]  # the same tables
    # Other τ and ε, and a sweep, with no endpoint at all: the scores are read back.
    sweep = ["--sweep", "tau=0.5,0.6", "--sweep", "eps=0.1,0.2", "--tau", "0.5"]
    status, md, err = run(["--data", data, "--out", out, *sweep], capsys)
    assert status == 0, err
    s = json.loads((out / "process_summary.json").read_text())
    assert s["settings"]["tau"] == 0.5 and s["sweep"]["taus"] == [0.5, 0.6]
    assert s["sweep"]["best"]["verdict"]["macro_f1"] == pytest.approx(GOLDEN["verdict"][2])


def test_a_run_record_without_settings_is_one_line_and_exit_2(tmp_path, capsys):
    # A process_run.json of the right format but no "settings" is named, not a traceback.
    data, out = tmp_path / "labels.jsonl", tmp_path / "out"
    write_samples(data, tmp_path)
    out.mkdir()
    (out / "process_run.json").write_text(json.dumps({"format": process.RUN_FORMAT}))
    status, _, err = run(
        ["--data", data, "--base-url", "http://127.0.0.1:9/v1", "--out", out], capsys
    )
    assert status == 2 and "process_run.json is not a run record" in err
    assert "Traceback" not in err


def test_bad_rows_are_named_and_the_others_run(tmp_path, capsys):
    data, out = tmp_path / "labels.jsonl", tmp_path / "out"
    write_samples(data, tmp_path, SAMPLES[:1])
    bad = [
        {"id": "b1", "question": "Q?", "images": ["red.png"], "steps": ["a", "b"], "labels": [1]},
        {"id": "b2", "question": "Q?", "images": ["red.png"], "steps": ["a"], "labels": [2]},
        {"id": "b3", "question": "Q?", "images": ["gone.png"], "steps": ["a"], "labels": [1]},
    ]
    with open(data, "a") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in bad)
    with judge_server() as srv:
        status, _, err = run(["--data", data, "--base-url", srv.url, "--out", out], capsys)
        assert len(srv.chats) == 9  # s1's three steps
    lines = [x for x in err.splitlines() if "skipping" in x]
    assert status == 1 and len(lines) == 3
    assert "line 2: steps and labels differ in length: 2 steps, 1 labels" in lines[0]
    assert "line 3: labels[0]: unknown label 2" in lines[1]
    assert "line 4: image: image file not found: gone.png" in lines[2]
    assert json.loads((out / "process_summary.json").read_text())["samples"] == 1


def test_both_layouts_of_the_made_files_read(tmp_path):
    make(str(tmp_path))
    generic, bad = process.read_file(str(tmp_path / "generic.jsonl"), None, None, False)
    vpb_path = tmp_path / "visualprocessbench" / "test.jsonl"
    vpb, bad_vpb = process.read_file(str(vpb_path), None, None, False)
    assert len(generic) == len(vpb) == 12 and not bad and not bad_vpb
    assert [s.labels for s in generic] == [s.labels for s in vpb]
    assert {s.source for s in vpb} == {"colour", "count"}
    assert all(os.path.isfile(p) for s in generic + vpb for p in s.images)
    labels = [y for s in vpb for y in s.labels]
    assert (labels.count(1), labels.count(0), labels.count(-1)) == (
        26,
        5,
        10,
    )  # 12 first steps and 7 right chains × 2


def test_the_checked_in_files_are_the_scripts(tmp_path):
    make(str(tmp_path))
    here = os.path.join(os.path.dirname(__file__), "data", "process")
    for name in ("generic.jsonl", "visualprocessbench/test.jsonl"):
        with open(os.path.join(here, name)) as a, open(tmp_path / name) as b:
            assert a.read() == b.read(), name
