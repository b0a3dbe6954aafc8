"""Tests for bench.py and the sections it wires: the sequential formula, the report's sections and
targets (a --quick run), the memory and cache sections (perf/footprint.py), and starting and
stopping servers (perf/llama_server.py). No timing is asserted."""

import os
import re
import subprocess
import sys
from dataclasses import replace

import numpy as np
from PIL import Image

from verdict_lab import bench
from verdict_lab.perf import client_cpu, footprint, llama_server
from verdict_lab.loopback import LoopbackServer
from verdict_lab.perf.overhead import (
    BASE,
    CONC,
    CONC_SCORE,
    ORDER,
    SEQ,
    SEQ_SCORE,
    Result,
    in_layouts,
)
from verdict_lab.perf.simserver import LatencyModel, SimulatedServer
from verdict_lab.layouts import DEFAULT_LAYOUT


def test_sequential_explanation_formula():
    # n + n·m·L_judge / L_step with L_step = 48: 3 + 9·80/48 = 18.0 and 3 + 9·6/48 = 4.125.
    text = bench.sequential_explanation(LatencyModel())[0]
    assert "18.0×" in text and "4.1×" in text


def test_quick_report_has_every_section(tmp_path, monkeypatch):
    monkeypatch.delenv("VERDICT_LIVE_URL", raising=False)
    out = tmp_path / "report.md"
    assert bench.main(["--quick", "--out", str(out)]) == 0
    text = out.read_text()
    for heading in (
        "## 1. Consensus throughput",
        "### 2a. Simulated",
        "**This is a simulation**",
        "### 2b. Real",
        "skipped: no live server",
        "### 2c. llama-server's flags",
        "skipped: pass --serve",
        "## 3. Memory",
        "## 4. The response cache",
        "| judge replies (with logprobs) |",
        "| response cache: ≤ 2 KB per judge reply",
        "## Targets",
        "| sequential",
        "| computed by the server |",
        "![overhead per mode and prompt layout](bench_overhead.png)",
        "### 2d. The client's own CPU per judge request",
        "Adaptive verification (verdict_lab/adaptive.py; perf/adaptive_rows.py)",
        "| full VERDICT | 9.00 | 0% | ",
    ):
        assert heading in text
    assert re.search(
        r"^\| client's CPU per judge request ≤ 300× json\.dumps of its request \(section 2d\) "
        r"\| [\d,.]+× \| — \| — \| (met|missed) \|$",
        text,
        re.M,
    )
    for signal in ("agree > 0.9", "mean-prob > 0.85", "min-prob > 0.5"):
        assert re.search(rf"^\| {signal} \| [\d.]+ \| \d+% \| [\d.]+× \(", text, re.M)
    assert re.search(
        r"^[\d,]+ µs of the client's CPU per judge request \(median of 20\)", text, re.M
    )
    assert Image.open(tmp_path / "bench_overhead.png").size == (
        440,
        360,
    )  # one panel: the simulation
    targets = [line for line in text.splitlines() if line.startswith("| simulated server: ")]
    assert len(targets) == 3 and all(
        re.search(r"(\| [\d.]+× ){3}\| (met|missed) \|$", t)
        for t in targets
        if "--speculate" not in t
    )
    assert re.search(
        r"--speculate` ≤ 1\.25× base, whole chains \(median\)"
        r"( \| (—|[\d.]+×)){3} \| (met|missed) \|$",
        targets[2],
    )
    assert targets[2].count("×") == 2  # the target's and the one measured, in the default layout
    assert "| computed vs floor |" in text and "VERDICT " in text and "with `--speculate`" in text
    assert (
        text.count("| real llama-server:") == 1 and text.count("| — | — | — | not measured |") >= 1
    )  # no live server
    # Every evaluate.py run succeeded: the memory section's figure, both cache runs, and no
    # failure anywhere.
    assert "failed" not in text and re.search(
        r"every method, .*: exit code 0, [\d,]+ requests, \d+ s\.\n\n"
        r"\*\*Peak RSS of the verdict_lab\.evaluate process: \d+ MiB\*\*",
        text,
    )
    assert re.search(r"^- cache in a file: .*exit code 0", text, re.M) and re.search(
        r"^- cache in memory: .*--cache "
        r":memory:.*exit code 0",
        text,
        re.M,
    )
    assert re.search(r"^\| file \| [\d,]+ µs per put \| [\d,]+ µs per put \|$", text, re.M)
    assert "not measured" in text  # --quick does not reach N = 10⁵ and 10⁶
    assert np.all(
        [line.count("|") >= 4 for line in text.splitlines() if line.startswith("| closed form")]
    )


def test_a_failed_evaluate_run_reports_the_failure_and_no_peak_rss(monkeypatch):
    # a benchmark file that is not there: evaluate.py exits 2
    monkeypatch.setattr(
        footprint, "write_items", lambda folder, k: os.path.join(folder, "missing.jsonl")
    )
    lines = footprint.memory_section(1)
    text = "\n".join(lines)
    assert (
        "**the run failed** (exit code 2" in text
        and "missing.jsonl: no such file" in text
        and "Peak RSS" not in text
    )
    assert lines[-1] == "No peak RSS is reported for a failed run."
    lines, per_judge = footprint.cache_section(1, 10)
    cache = "\n".join(lines)
    assert per_judge is None
    assert cache.count("**the run failed**") == 2 and "takes" not in cache


def result(ratio: float, computed: float | None = None) -> Result:
    return Result(
        seconds=1.0,
        ratio=ratio,
        warm=None,
        judge_requests=9.0,
        skipped=0.0,
        prompt=1000.0,
        computed=computed,
        completion=50.0,
        reported=1.0,
        server_ms=None,
        chains=[],
    )


def test_targets_are_the_issues_judged_on_the_default_layout():
    at = lambda m, lay: replace(m, layout=lay)
    default, other = DEFAULT_LAYOUT, next(lay for lay in ORDER if lay != DEFAULT_LAYOUT)
    floor = lambda r, f: replace(r, floor=f)
    sim = {
        BASE: result(1.0, 100.0),
        at(CONC_SCORE, default): result(1.55, 150.0),
        at(CONC_SCORE, other): result(1.7, 300.0),
        at(SEQ_SCORE, default): result(4.9, 900.0),  # 4.9 / 3.8 = 1.29: outside ±25%
        at(SEQ_SCORE, other): result(4.7, 900.0),  # 1.24: inside
    }
    live = {
        BASE: result(1.0, 50.0),
        at(CONC_SCORE, default): floor(result(9.0, 600.0), 400.0),  # 600 / 400 = 1.50: met
        at(CONC_SCORE, other): floor(result(9.0, 900.0), 400.0),
    }
    cpu = client_cpu.ClientCpu(10, 5e-3, 1e-4, 1e-5, 50.0, 301.0)
    spec = {"speculate": [1.3, 1.2, 1.25]}
    rows = bench.targets({10**5: {"loop": 80.0}}, sim, live, 634.4, spec, cpu)
    find = lambda start: next(r for r in rows if r.startswith(start))
    col = lambda v_default, v_other: [
        v_default if lay == default else v_other if lay == other else "—" for lay in ORDER
    ]
    cells = lambda *vs: "| " + " | ".join(col(*vs)) + " |"
    assert rows[0] == f"Met or missed on the default layout ({DEFAULT_LAYOUT})."
    assert find("| closed form ≥ 50×").endswith("| 80.00× | — | — | met |")
    assert find("| closed form ≤ 10×").endswith("| — | — | — | not measured |")
    assert find("| response cache: ≤ 2 KB").endswith("| 634 B | — | — | met |")
    assert find("| client's CPU per judge request ≤ 300×").endswith("| 301.00× | — | — | missed |")
    assert find("| simulated server: default settings").endswith(cells("1.55×", "1.70×") + " met |")
    assert find("| simulated server: the paper's sequential").endswith(
        cells("4.90×", "4.70×") + " missed |"
    )
    assert find("| simulated server: `--speculate`").endswith(
        cells("1.25×", "—") + " met |"
    )  # the median
    assert find("| real llama-server: default settings").endswith(
        cells("1.50×", "2.25×") + " met |"
    )
    real = [
        r for r in bench.targets({}, sim, None) if r.startswith("| real llama-server")
    ]  # no live server
    assert real[0].endswith("| — | — | — | not measured |")


def test_live_section_against_a_simulated_server():
    with LoopbackServer(SimulatedServer(LatencyModel(time_scale=0.0), final_at=1)) as srv:
        lines, res = llama_server.live_section(srv.url, "sim", 1, 2, in_layouts((CONC,)))
        resets = []
        spec, _ = llama_server.live_section(
            srv.url, "sim", 1, 2, (), 1, lambda: resets.append(1), speculate=True
        )
    # the server started again before each mode's chains (BASE alone), each speculation kind (3) and
    # each layout's chains of the per-role tally (3)
    assert len(resets) == 7 and "started again (cold" in "\n".join(spec)
    assert any(
        re.search(
            r"`--speculate` on this server .*: VERDICT [\d.]+× base .*, with `--speculate` [\d.]+×",
            line,
        )
        for line in spec
    )
    per_layout = [
        line for line in spec if re.match(r"\| (per-role|shared|role-first) \| [\d,]+ \(", line)
    ]
    assert len(per_layout) == 3  # computed per chain and per step, median (min–max), each layout
    roles = {
        tuple(line.split(" | ")[:2])
        for line in spec
        if re.match(r"\| \S+ \| (reasoner|visual) \|", line)
    }
    assert roles == {(f"| {lay}", role) for lay in ORDER for role in ("reasoner", "visual")}
    text = "\n".join(lines)
    assert (
        list(res) == list(in_layouts((CONC,))) and "2 text question(s), 2 steps per chain" in text
    )
    assert (
        "| concurrent | shared |" in text
        and "| prompt tokens per step | computed by the server |" in text
    )
    assert res[BASE].computed is not None and SEQ not in res


def test_the_live_section_sends_each_question_its_image_when_the_server_takes_images(monkeypatch):
    monkeypatch.setattr(llama_server, "server_props", lambda url: {"modalities": {"vision": True}})
    with LoopbackServer(SimulatedServer(LatencyModel(time_scale=0.0), final_at=1)) as srv:
        lines, _ = llama_server.live_section(srv.url, "sim", 1, 2, (), 2)
        chats = srv.chats
    images = [[p for p in c["messages"][1]["content"] if p["type"] == "image_url"] for c in chats]
    assert chats and all(len(i) == 1 for i in images)  # every request, its question's one image
    assert len({i[0]["image_url"]["url"] for i in images}) == 2  # two questions, two images
    assert "2 question(s), each with its own 448×448 image in every request" in "\n".join(lines)


def test_start_server_reads_the_url_and_pid_and_stop_server_stops_it(monkeypatch):
    said = subprocess.CompletedProcess(
        [], 0, "building...\nVERDICT_LIVE_URL=http://127.0.0.1:5/v1\nVERDICT_SERVER_PID=77\n", ""
    )
    seen = {}
    monkeypatch.setattr(
        llama_server.subprocess, "run", lambda cmd, env, **kw: seen.update(env=env) or said
    )
    assert llama_server.start_server("-kvu") == ("http://127.0.0.1:5/v1", 77)
    assert (
        seen["env"]["VERDICT_TINY_FLAGS"] == "-kvu"
        and seen["env"]["VERDICT_TINY_MODEL"] == "smollm2"
    )
    monkeypatch.setattr(
        llama_server.subprocess,
        "run",
        lambda cmd, env, **kw: subprocess.CompletedProcess([], 1, "", "no model"),
    )
    with np.testing.assert_raises_regex(
        RuntimeError, "serve_tiny.sh with '-np 2' failed \\(exit code 1\\): no model"
    ):
        llama_server.start_server("-np 2")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    llama_server.stop_server(child.pid)
    assert child.wait(timeout=10) == -15  # SIGTERM


def test_causes_say_the_floor_multiples_and_the_real_servers_time():
    per = lambda ratio, computed, ms, f=None: replace(
        result(ratio, computed), server_ms=ms, floor=f
    )
    at = lambda m: replace(m, layout=DEFAULT_LAYOUT)
    sim = {
        BASE: result(1.0, 100.0),
        at(CONC_SCORE): replace(per(1.2, 900.0, None, 600.0), per_chain=4321.0),
    }
    live = {
        BASE: per(1.0, 30.0, (40.0, 160.0)),
        at(CONC_SCORE): per(9.0, 600.0, (900.0, 2100.0), 400.0),
    }
    floor, chain, time_ = bench.causes(sim, live)
    said = [f"{'4,321' if lay == DEFAULT_LAYOUT else '—'} in the {lay} layout" for lay in ORDER]
    assert f"the simulated server {', '.join(said)};" in chain
    # 900 / 600 = 1.50×, 600 / 400 = 1.50×; 160 / (40 + 160) = 80% generating, 2,100 / 3,000 = 70%
    assert f"1.50× in the {DEFAULT_LAYOUT} layout" in floor and floor.count("1.50×") == 2
    assert floor.count("— in the") == 2 * (len(ORDER) - 1)
    assert (
        "base (reasoner alone, n = 1) (per-role) 40 ms computing prompts and 160 ms generating "
        "(80% generating)" in time_
    )
    assert (
        f"concurrent, short judges ({DEFAULT_LAYOUT}) 900 ms computing prompts and 2,100 ms "
        "generating (70% generating)" in time_
    )
    assert (
        len(bench.causes(sim, None)) == 2
        and bench.causes(sim, None)[0].count("— in the") == 2 * len(ORDER) - 1
    )


def test_a_flag_set_the_workload_cannot_run_on_is_reported_and_the_others_run(monkeypatch):
    # llama-server with -np 2 refuses n = 3 (HTTP 400): that flag set's row says so, and the run
    # goes on.
    from judges import EndpointError

    started, stopped = [], []
    monkeypatch.setattr(
        llama_server,
        "start_server",
        lambda flags, port=None: (
            started.append((flags, port))
            or (f"http://127.0.0.1:{port or 900 + len(started)}/v1", len(started))
        ),
    )
    monkeypatch.setattr(llama_server, "stop_server", stopped.append)

    def live(url, model, reps, steps, modes, questions, restart, speculate=False):
        assert speculate == (modes == llama_server.LIVE_MODES)  # --speculate measured in 2b only
        # Before a mode's chains: the server stopped and started again, cold, on the same port.
        restart()
        if url.endswith(":903/v1"):  # the second flag set
            raise EndpointError(
                url, 400, "Field 'n': Value must be between 1 <= value <= 2, but got 3"
            )
        return [f"section at {url}"], {m: result(1.0, 10.0) for m in modes}

    monkeypatch.setattr(llama_server, "live_section", live)
    lines, rows, first = llama_server.flags_section(2, 2, "m", 1, 1)
    # each flag set: started on a free port, then again on the same port; every PID stopped once
    flag_sets = [f for f, _ in llama_server.SERVER_FLAGS]
    assert started == [(f, p) for i, f in enumerate(flag_sets) for p in (None, 901 + 2 * i)]
    assert stopped == list(range(1, len(started) + 1))
    assert lines == ["section at http://127.0.0.1:901/v1"] and set(first) == set(
        llama_server.LIVE_MODES
    )
    failed = [r for r in rows if "the run failed" in r]
    assert (
        len(failed) == 1
        and failed[0].startswith(f"| `{llama_server.SERVER_FLAGS[1][0]}` |")
        and "got 3" in failed[0]
    )
    assert len(rows) == 4 + 1 + len(llama_server.FLAG_MODES) * (
        len(llama_server.SERVER_FLAGS) - 1
    )  # intro, header, failure, rest


SLOT_LOG = """\
0.00.602.308 I slot get_availabl: id  3 | task -1 | selected slot by LRU, t_last = -1
0.00.602.483 I slot launch_slot_: id  0 | task 1 | processing task, is_child = 1
0.00.602.542 I slot launch_slot_: id  3 | task 0 | processing task, is_child = 0
0.01.512.601 I slot print_timing: id  0 | task 1 | prompt eval time =     758.48 ms /   269 tokens
0.01.675.166 I slot print_timing: id  3 | task 0 | prompt eval time =     760.30 ms /   269 tokens
0.01.779.086 I slot get_availabl: id  3 | task -1 | selected slot by LCP similarity, \
f_sim_best = 0.353 (> 0.1 thold), f_keep = 0.429
0.01.783.386 I slot launch_slot_: id  3 | task 28 | processing task, is_child = 0
0.09.974.348 I slot print_timing: id  3 | task 28 | prompt eval time =    3673.57 ms /    22 tokens
0.09.974.400 I slot get_availabl: id  1 | task -1 | selected slot by LCP similarity, \
f_sim_best = 0.801 (> 0.1 thold), f_keep = 0.812
0.09.974.500 I slot launch_slot_: id  1 | task 30 | processing task, is_child = 0
"""


def test_slot_requests_read_how_llama_server_chose_each_slot_and_what_it_computed():
    # a request is known by its task: its slot's choice is logged just before its launch; a task
    # still running when the log ends (30) computed nothing yet and is left out
    assert llama_server.slot_requests(SLOT_LOG) == [
        (0, "child", None, 269),
        (3, "LRU", None, 269),
        (3, "LCP similarity", 0.429, 22),
    ]
    assert llama_server.slot_lines(llama_server.slot_requests(SLOT_LOG))[2:] == [
        "| LCP similarity | 1 | 22 | 22 | 0.43 |",
        "| LRU | 1 | 269 | 269 | — |",
        "| child | 1 | 269 | 269 | — |",
    ]


def test_roles_lines_give_each_layouts_computed_tokens_and_each_roles_cached_share_by_hand():
    from collections import Counter
    from types import SimpleNamespace

    def chains(first, later, reported=10):  # one chain of 2 steps: its two steps' usage
        step = lambda computed: {
            "replies": 10,
            "cache_reports": reported,
            "computed_prompt_tokens": computed,
        }
        return SimpleNamespace(chains=[object()], usage=[step(first), step(later)])

    counts = {
        "visual": Counter(replies=6, prompt=2400, cached=600, reported=6),
        None: Counter(replies=2),
    }
    runs = {
        "role-first": [(counts, chains(300, 100)), (counts, chains(200, 50))],
        "per-role": [
            (counts, chains(300, 100)),
            ({}, chains(300, 100, reported=9)),
        ],  # one reply unreported
    }
    lines = llama_server.roles_lines(runs, 2, 2, cold=True)
    # whole chains 400 and 250, later steps 100 and 50: the medians of two are their means
    assert "| role-first | 325 (250–400) | 75 (50–100) |" in lines
    assert "| per-role | — | — |" in lines  # a repetition whose computed tokens are unknown
    # visual, both repetitions pooled: 12 replies over 2 chains, 4800 prompt tokens, 1200 of
    # them cached.
    assert "| role-first | visual | 6.0 | 400 | 25% |" in lines
    assert "| role-first | other | 2.0 | 0 | — |" in lines


def test_client_cpu_times_each_call_and_its_references_and_divides_them():
    c = client_cpu.measure(requests=3, batch=2)
    assert c.requests == 3 and min(c.per_request, c.loads, c.dumps) > 0
    # No timing is asserted: the figure exists, and the words name what was timed.
    assert 0 < c.reply_ratio < float("inf") and 0 < c.request_ratio < float("inf")
    text = client_cpu.said(c)
    assert "(median of 3)" in text and "json.loads of its reply" in text
