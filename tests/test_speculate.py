"""Speculative proposing (verdict_lab/speculate.py): the same decisions as a plain run, step for
step, and its cost recorded.

A deterministic scripted server answers every role as a function of its request (a hash of the
messages and the seed), so a plain run and a speculative one must produce the same trace in every
judge mode and with revise on reject, whatever order the requests arrive in."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time

import pytest
from PIL import Image

import judges
from verdict_lab import speculate
import verdict
from verdict_lab import loop
from verdict_lab.revise import Reviser
from verdict_lab.cache import Cache
from verdict_lab.client import Client
from verdict_lab.formats import JudgeFormat
from verdict_lab.modes import JudgeMode
from verdict_lab.modes.judge import ModeChain
from verdict_lab import verifier
from verdict_lab.verifier import Settings, judges_of, thread_map
from verdict_lab.loopback import LoopbackServer, chat_response
from verdict_lab.layouts import role_of


def digest(body, salt="") -> int:
    return int(hashlib.sha256((json.dumps(body["messages"]) + salt).encode()).hexdigest(), 16)


class Deterministic:
    """Replies that depend on the request alone; counts the requests it answered, by role."""

    def __init__(self, delay: float = 0.0):
        self.lock, self.seen, self.delay = threading.Lock(), [], delay

    def __call__(self, body, path):
        role = role_of(body["messages"])
        with self.lock:
            self.seen.append((role, json.dumps(body, sort_keys=True)))
        h = digest(body, str(body.get("seed")))
        depth = json.dumps(body["messages"]).count("Step ")  # a final answer only after two steps
        if role == "reasoner":
            texts = [
                "Final answer: B"
                if depth >= 2 and (h >> (8 * i)) % 3 == 0
                else f"The cube {h % 97}.{i} is {'left' if (h >> i) % 2 else 'right'}."
                for i in range(body.get("n", 1))
            ]
            return chat_response(texts, completion_tokens=7 * len(texts))
        if role == "reviser":
            return chat_response(
                "Final answer: B" if depth >= 2 and h % 2 else f"The cube is at {h % 13}."
            )
        if role == "prior":
            return chat_response("- Find the cube first.")
        if role == "premises":
            facts = {
                "objects": [{"fact": "a cube"}],
                "numbers": [],
                "structure": [],
                "relations": [],
            }
            return chat_response(json.dumps(facts))
        if role == "premise_check":
            label = ("supported", "contradicted", "uncertain")[h % 3]
            return chat_response(json.dumps({"claims": [{"claim": "the cube", "label": label}]}))
        if role == "zoom":
            return chat_response(json.dumps({"boxes": [[100, 100, 600, 600]]}))
        time.sleep(self.delay)  # judges take a while: speculation overlaps them
        d = h % 10
        schema = json.dumps(body.get("response_format") or {})
        if "response_format" in body:
            return chat_response(
                json.dumps({"reason": "ok", "score": d} if "reason" in schema else {"score": d})
            )
        return chat_response(f"Score: {d / 9:.3f}")


def run(url, mode: JudgeMode, spec: bool, revise: bool, tmp_path, cache=None, score_only=True):
    c = Client(url, "m", cache=cache)
    image = tmp_path / "scene.png"
    Image.new("RGB", (64, 64), (200, 40, 40)).save(image)
    fmt = JudgeFormat()  # the run's json format, shared by the judges and the mode's JSON requests
    chain = ModeChain(c, mode, fmt=fmt) if mode.active else None  # one chain: its own ModeChain
    js = judges_of(Settings(judge_mode=mode.name, reasons=not score_only), c, fmt, chain)
    config = verdict.Config(n=3, max_steps=5)
    propose = judges.Reasoner(c, seed=7)
    propose = speculate.Speculator(propose, config) if spec else propose
    trace = loop.run(
        "Where is the cube?",
        propose,
        js,
        config,
        image=str(image),
        map_fn=thread_map(4),
        revise=Reviser(c, js) if revise else None,
    )
    return trace, (propose.finish(len(trace.steps)) if spec else None), c


def decisions(trace) -> dict:
    """The trace without usage counters: speculation changes what the meter sees, not decisions."""
    drop = lambda x: (
        {k: drop(v) for k, v in x.items() if k != "usage"}
        if isinstance(x, dict)
        else [drop(v) for v in x]
        if isinstance(x, list)
        else x
    )
    return drop(trace.to_dict())


MODES = [
    "plain",
    "prior",
    "premises+gate",
    "premises+gate-visual",
    "zoom",
    "prior+premises+gate+zoom",
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("revise", [False, True])
def test_speculation_never_changes_a_decision(tmp_path, mode, revise):
    server = Deterministic(delay=0.005)
    with LoopbackServer(server) as srv:
        plain, _, _ = run(srv.url, JudgeMode.parse(mode), False, revise, tmp_path)
        fast, spent, _ = run(srv.url, JudgeMode.parse(mode), True, revise, tmp_path)
    assert decisions(fast) == decisions(plain)
    assert len(plain.steps) >= 2  # the chains are long enough for speculation to matter
    t = spent["totals"]
    assert len(spent["steps"]) == len(plain.steps) and t["made"] == t["taken"] + t["dropped"]
    assert t["taken"] >= 1 and t["tokens"] >= t["dropped_tokens"] and t["tokens"] > 0
    if revise:
        assert any(r.revision is not None for r in plain.steps)


def test_the_record_per_step_and_no_request_twice(tmp_path):
    """Each step: one proposal per distinct candidate that is not a final answer (none at the last
    step allowed), taken = whether the next step's candidates came from one; every reasoner request
    the plain run sends, the speculative run sends exactly once (the taken proposal is reused, not
    asked again)."""
    server = Deterministic()
    with LoopbackServer(server) as srv:
        plain, _, _ = run(srv.url, JudgeMode(), False, False, tmp_path)
        n_plain = len(server.seen)
        fast, spent, _ = run(srv.url, JudgeMode(), True, False, tmp_path)
    sent = [body for role, body in server.seen[n_plain:] if role == "reasoner"]
    wanted = [body for role, body in server.seen[:n_plain] if role == "reasoner"]
    # No request is sent twice, and every one is sent.
    assert len(set(sent)) == len(sent) and set(wanted) <= set(sent)
    for i, (record, counts) in enumerate(zip(fast.steps, spent["steps"])):
        last = i + 1 == fast.config.max_steps
        expected = 0 if last else len({c for c in record.candidates if "Final answer" not in c})
        assert counts["made"] == expected
        assert counts["taken"] == (1 if i + 1 < len(fast.steps) and counts["made"] else 0)
    # The first step's proposal, then the speculative ones.
    assert len(sent) == 1 + spent["totals"]["made"]
    assert spent["totals"]["dropped"] == len(sent) - len(wanted)


def test_with_the_response_cache_a_speculative_request_is_not_sent_again(tmp_path):
    server = Deterministic()
    with LoopbackServer(server) as srv:
        cache = Cache(str(tmp_path / "c.sqlite"))
        fast, spent, c = run(srv.url, JudgeMode(), True, False, tmp_path, cache=cache)
        replies = c.usage["replies"]
        again, _, c2 = run(srv.url, JudgeMode(), False, False, tmp_path, cache=cache)
    assert decisions(again) == decisions(fast)
    # All of them come from the cache.
    assert c2.usage["replies"] == 0 and c2.usage["cache_hits"] == c2.usage["calls"]
    assert replies == len(server.seen)


def test_a_failed_speculative_proposal_raises_only_when_taken():
    config = verdict.Config(n=2, max_steps=3)
    calls_made = []

    def propose(state, n):
        calls_made.append(state.steps)
        if state.steps == ("a",):
            raise verdict.Stop("budget")
        return ["a", "b"] if not state.steps else ["Final answer: A", "Final answer: B"]

    s = speculate.Speculator(propose, config)
    trace = loop.run("q", s, [lambda st, c: 0.9 if c == "b" else 0.1] * 3, config)
    spent = s.finish(len(trace.steps))
    # "a"'s Stop was dropped.
    assert trace.chain == ["b", "Final answer: A"] and trace.stopped == "final"
    assert spent["totals"] == dict(made=2, taken=1, dropped=1, tokens=0, dropped_tokens=0)
    s = speculate.Speculator(propose, config)
    trace = loop.run("q", s, [lambda st, c: 0.9 if c == "a" else 0.1] * 3, config)
    s.finish()
    # The taken proposal's Stop ends the chain, as in a plain run.
    assert trace.stopped == "budget" and trace.chain == ["a"]


def test_a_dropped_proposal_still_running_never_delays_the_next_steps_proposals():
    # "slow…" proposals hang until released; they are always dropped. With n threads, step 1's
    # dropped "slow1" and step 2's "slow2" would hold both and "fast2"'s proposal would wait for a
    # thread.
    config, release = verdict.Config(n=2, max_steps=5), threading.Event()

    def propose(state, n):
        last = state.steps[-1] if state.steps else ""
        if last.startswith("slow"):
            release.wait()
        k = len(state.steps) + 1
        return [f"slow{k}", f"fast{k}"]

    s = speculate.Speculator(propose, config)
    root = verdict.State("q")
    try:
        assert s(root, 2) == ["slow1", "fast1"]
        assert s(root.extend("fast1"), 2) == ["slow2", "fast2"]  # "slow1" dropped, still running
        taken = []
        worker = threading.Thread(
            target=lambda: taken.append(s(root.extend("fast1").extend("fast2"), 2))
        )
        worker.start()
        # With a free thread it returns at once; without one it waits for release.
        worker.join(timeout=30)
        assert taken == [["slow3", "fast3"]]
    finally:
        release.set()
        s.finish()


def test_the_candidates_go_back_once_their_proposals_are_sent_when_the_client_tells(monkeypatch):
    # Speculative proposals are held before they send until `go` is set. A proposer over a lab
    # Client tells when its request is sent, so the step's candidates wait for that (here for up to
    # 60 s); any other proposer cannot tell, and its candidates go back at once.
    monkeypatch.setattr(speculate, "SEND_WAIT", 60.0)
    config, go, held = verdict.Config(n=2, max_steps=4), threading.Event(), threading.Semaphore(0)

    def hold():
        held.release()
        go.wait()

    class Held(judges.Reasoner):
        def __call__(self, state, n):
            if state.steps:  # a speculative proposal
                hold()
            return super().__call__(state, n)

    def plain(state, n):
        if state.steps:
            hold()
        return ["a", "b"]

    with LoopbackServer(Deterministic()) as srv:
        for propose, waits in ((plain, False), (Held(Client(srv.url, "m")), True)):
            go.clear()
            s, got = speculate.Speculator(propose, config), []
            worker = threading.Thread(target=lambda: got.append(s(verdict.State("q"), 2)))
            worker.start()
            try:
                # Both proposals are held: only a wait for them keeps the candidates back.
                assert held.acquire(timeout=30) and held.acquire(timeout=30)
                worker.join(timeout=0.5 if waits else 30)
                assert worker.is_alive() is waits and len(got) == (0 if waits else 1)
            finally:
                go.set()
            worker.join(timeout=30)
            assert len(got) == 1 and len(got[0]) == 2
            assert s.finish()["totals"]["made"] == 2
        # The held Reasoner's first request and its two proposals reached the server.
        assert [role for role, _ in srv.handler.seen] == ["reasoner"] * 3


def test_the_verifier_and_evaluate_take_speculate():
    from verdict_lab import evaluate

    with LoopbackServer(Deterministic()) as srv:
        settings = Settings(speculate=True, max_steps=4)
        trace = verifier.run(verifier.build(settings, Client(srv.url, "m")), "Where?")
    d = trace.to_dict()
    assert len(d["meta"]["speculation"]["steps"]) == len(d["steps"])
    args = evaluate.parse_args(
        ["--data", "x.jsonl", "--base-url", "http://127.0.0.1:1/v1", "--speculate"]
    )
    assert evaluate.check_args(args)[1].speculate is True


def test_the_simulated_measurement_runs():
    from verdict_lab.perf.speculation import measure

    ratios = measure(reps=1, time_scale=0.0, steps=3, questions=1)
    assert set(ratios) == {"verdict", "speculate"} and all(
        len(r) == 1 and r[0] > 0 for r in ratios.values()
    )


def test_the_measurement_runs_on_any_server_text_only_and_resets_before_each_kind():
    from verdict_lab.perf import speculation

    resets, server = [], Deterministic()
    with LoopbackServer(server) as srv:
        out = speculation.ratios(
            Client(srv.url, "m"),
            2,
            3,
            ["Where is the cube?"],
            None,
            "role-first",
            lambda: resets.append(1),
            48,
        )
    # 3 kinds × 2 repetitions.
    assert len(resets) == 6 and all(len(r) == 2 and r[0] > 0 for r in out.values())
    roles = {role for role, _ in server.seen}
    assert roles == {"reasoner", *verdict.JUDGES} and all(
        '"max_tokens": 48' in b for r, b in server.seen if r == "reasoner"
    )
    figure = r"[\d.]+× base \(min–max [\d.]+–[\d.]+\)"
    assert re.fullmatch(f"VERDICT {figure}, with `--speculate` {figure}", speculation.said(out))
