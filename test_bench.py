"""Tests for bench.py: the latency model's arithmetic, the simulated server's replies and prefix
cache, the step modes' call counts, and the report's sections (a --quick run). No timing is asserted."""
import math
import os
import re

import numpy as np
import pytest

import bench
import judges
import verdict
from loopback import LoopbackServer


def test_latency_model_seconds():
    # 2,000 prompt tokens at 1,000 tokens/s = 2 s; 100 reply tokens at 50 tokens/s = 2 s.
    lm = bench.LatencyModel(prefill_tps=1000.0, decode_tps=50.0)
    assert lm.seconds(2000, 100) == pytest.approx(4.0)
    assert lm.seconds(0, 0) == 0.0
    # The defaults: a 48-token step decodes in 48 / 84.28 = 0.5695 s.
    assert bench.LatencyModel().seconds(0, 48) == pytest.approx(0.5695, abs=1e-4)


@pytest.mark.parametrize("kwargs", [dict(decode_tps=0.0), dict(prefill_tps=-1.0), dict(capacity=0),
                                    dict(capacity=2.5), dict(time_scale=-0.1)])
def test_latency_model_guards(kwargs):
    with pytest.raises(ValueError):
        bench.LatencyModel(**kwargs)


def test_prompt_units_count_image_tokens():
    msgs = [{"role": "system", "content": "You judge."},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                                         {"type": "text", "text": "Is it red?"}]}]
    units = bench.prompt_units(msgs, image_tokens=1280)
    # 2 role markers + "You", "judge", "." + 1280 image tokens + "Is", "it", "red", "?"
    assert len(units) == 2 + 3 + 1280 + 4


def test_block_hashes_are_prefix_stable():
    a = [f"t{i}" for i in range(100)]
    b = a[:40] + ["changed"] + a[41:]
    ha, hb = bench.block_hashes(a), bench.block_hashes(b)
    assert len(ha) == 100 // bench.BLOCK
    assert ha[:2] == hb[:2]          # blocks 0 and 1 (units 0..31) are shared
    assert ha[2:] != hb[2:] and all(x != y for x, y in zip(ha[2:], hb[2:]))  # a chained hash differs from there on


def test_simulated_replies_parse_and_agree_at_the_final_step():
    lm = bench.LatencyModel(time_scale=0.0)
    with LoopbackServer(bench.SimulatedServer(lm, final_at=1)) as srv:
        client = judges.Client(srv.url, "sim")
        state = verdict.State("Which is it? A. x B. y")
        cands = judges.Reasoner(client)(state, 3)
        assert len(set(cands)) == 3
        final = judges.Reasoner(client)(state.extend(cands[0]), 3)
        assert len({" ".join(c.split()) for c in final}) == 1 and len(set(final)) == 3  # whitespace only
        for score_only in (False, True):
            for j in judges.make_judges(client, score_only=score_only):
                s = j(state, cands[0])
                assert 0.5 <= s <= 0.9 and j.counts["retries"] == 0


@pytest.mark.parametrize("mode, judge_requests, skipped", [
    (bench.SEQ, 9 * 3, 0), (bench.CONC, 9 * 3, 0), (bench.CONC_SCORE, 9 * 3, 0), (bench.ADAPTIVE, 9 * 2, 9)])
def test_run_chains_counts(mode, judge_requests, skipped):
    # 3 steps, the last a final answer on which the candidates agree: adaptive skips its 9 judge calls.
    sim = bench.SimulatedServer(bench.LatencyModel(time_scale=0.0), final_at=2)
    with LoopbackServer(sim) as srv:
        times, calls, skip = bench.run_chains(judges.Client(srv.url, "sim"), mode, ["Q? A. x B. y"], 3, (256, 256, 16))
        chats = srv.chats
    assert len(times) == 3 and all(t >= 0 for t in times)
    assert (calls, skip) == (judge_requests, skipped)
    reasoner = [c for c in chats if "stop" in c]
    assert len(reasoner) == (9 if mode is bench.SEQ else 3)  # sequential asks for its candidates one by one
    assert all(c.get("n") == (1 if mode is bench.SEQ else 3) for c in reasoner)
    second = [c["messages"][-1]["content"] for c in chats if "stop" not in c]  # no image: content is a string
    second = [text for text in second if "<step>\nObservation 1." in text]  # the judge prompts of step 2
    assert len(second) == 9 and len(set(second)) == 3  # 3 judges (one user template) × 3 distinct candidates


def test_overhead_shapes():
    sim = bench.SimulatedServer(bench.LatencyModel(time_scale=0.0), final_at=2)
    with LoopbackServer(sim) as srv:
        result = bench.overhead(judges.Client(srv.url, "sim"), (bench.CONC,), ["Q? A. x B. y"], 3, 2, (256, 256, 16))
    assert list(result) == [bench.BASE, bench.CONC]
    sec, ratio, warm, calls, skipped = result[bench.BASE]
    assert ratio == pytest.approx(1.0) and warm == pytest.approx(1.0) and (calls, skipped) == (0, 0)
    assert result[bench.CONC][3] == pytest.approx(9.0) and math.isfinite(result[bench.CONC][1])


def test_sequential_explanation_formula():
    # n + n·m·L_judge / L_step with L_step = 48: 3 + 9·80/48 = 18.0 and 3 + 9·6/48 = 4.125.
    text = bench.sequential_explanation(bench.LatencyModel())[0]
    assert "18.0×" in text and "4.1×" in text


def test_quick_report_has_every_section(tmp_path, monkeypatch):
    monkeypatch.delenv("VERDICT_LIVE_URL", raising=False)
    out = tmp_path / "report.md"
    assert bench.main(["--quick", "--out", str(out)]) == 0
    text = out.read_text()
    for heading in ("## 1. Consensus throughput", "### 2a. Simulated", "**This is a simulation**", "### 2b. Real",
                    "skipped: no live server", "## 3. Memory", "## 4. The response cache", "## Targets", "| sequential"):
        assert heading in text
    # every evaluate.py run succeeded: the memory section's figure, both cache runs, and no failure anywhere
    assert "failed" not in text and re.search(r"every method, .*: exit code 0, [\d,]+ requests, \d+ s\.\n\n"
                                              r"\*\*Peak RSS of the evaluate\.py process: \d+ MiB\*\*", text)
    assert re.search(r"^- cache in a file: .*exit code 0", text, re.M) and re.search(r"^- cache in memory: .*--cache "
                                                                                      r":memory:.*exit code 0", text, re.M)
    assert re.search(r"^\| file \| [\d,]+ µs per put \| [\d,]+ µs per put \|$", text, re.M)
    assert "not measured" in text  # --quick does not reach N = 10⁵ and 10⁶
    assert np.all([line.count("|") >= 4 for line in text.splitlines() if line.startswith("| closed form")])


def test_a_failed_evaluate_run_reports_the_failure_and_no_peak_rss(monkeypatch):
    # a benchmark file that is not there: evaluate.py exits 2
    monkeypatch.setattr(bench, "write_items", lambda folder, k: os.path.join(folder, "missing.jsonl"))
    lines = bench.memory_section(1)
    text = "\n".join(lines)
    assert "**the run failed** (exit code 2" in text and "missing.jsonl: no such file" in text and "Peak RSS" not in text
    assert lines[-1] == "No peak RSS is reported for a failed run."
    cache = "\n".join(bench.cache_section(1, 10))
    assert cache.count("**the run failed**") == 2 and "takes" not in cache
