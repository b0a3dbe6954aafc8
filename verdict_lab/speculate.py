"""Speculative proposing: the reasoner proposes step t+1 while the judges are still scoring step t.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026 (the step-wise loop: n candidates, m judges, one chosen
step; the 3.80× sequential wall-clock overhead the limitations call "non-trivial"). Not in the
paper: a way to hide the reasoner's next request behind the judges' calls on a server with spare
parallel capacity.

Speculator wraps a proposer for verdict.run, which it does not change. When step t's n candidates
are proposed, it starts, on its own threads, the proposal of step t+1 after each candidate c:
propose(state extended by c, n), the very request a plain run sends once c is chosen (same messages,
same seed). When step t+1 asks for its candidates, the chosen candidate's proposal is taken (waited
for if still running) and the others are dropped. A candidate that is a final answer (config.final)
ends the chain and needs no proposal, nor does any candidate of the last step (config.max_steps).

Decisions never change when the proposer's reply is a function of its request (a deterministic
server, fixed seeds: judges.Reasoner sends byte-identical requests for the same state): step t+1's
candidates are what propose(state, n) returns either way. A chosen revision (verdict.run's revise)
matches no candidate: every proposal is dropped and the proposer is called as in a plain run. A
proposal that raised (an EndpointError, a budget's verdict.Stop) raises when it is taken, as the
plain call would; a dropped one's error is ignored. What speculation costs is not hidden: record()
gives, per step of the trace and in totals, the proposals made, taken and dropped, and their tokens
(as the server reported them). Speculative requests go through the same client: its response cache
stores them, its usage counts them, and a --max-calls budget spends on them too (so a chain stopped
by its budget may stop earlier).

When the proposer's client is a lab Client, the candidates go back to verdict.run only once their
proposals' requests are on their way (or after SEND_WAIT seconds), so before the judges' requests:
a server that serves first come, first served (vLLM's default policy) then starts the step's
longest requests first, whatever order this machine's threads happen to run in.
"""

from __future__ import annotations

import copy
import re
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Sequence

import verdict
from verdict_lab.client import Client, when_sent
from verdict_lab.formats import reported_usage

COUNTS = ("made", "taken", "dropped", "tokens", "dropped_tokens")  # record()'s counters per step
SEND_WAIT = 1.0  # seconds: the longest a step's candidates wait for its proposals to be sent


class _Tally:
    """A client that counts the tokens of the responses it returns (reported_usage), for one
    proposal."""

    def __init__(self, client):
        self.client, self.tokens = client, 0

    def chat(self, messages: list, **params) -> dict:
        response = self.client.chat(messages, **params)
        self.tokens += sum(reported_usage(response).values())
        return response


class Speculator:
    """propose(state, n) -> candidates, as the wrapped `propose`, with step t+1 proposed while t is
    judged.

    `propose` is any proposer; one with a `client` attribute (judges.Reasoner) is copied per
    speculative proposal with a client that counts its tokens. Call finish() when the chain is over
    (it waits for proposals still running, so that their tokens are counted, and stops the threads);
    record() is what the trace keeps."""

    def __init__(
        self, propose: Callable[[verdict.State, int], Sequence[str]], config: verdict.Config
    ):
        self.propose, self.config = propose, config
        # A proposer over the lab's Client tells when its request is sent (client.when_sent).
        self._tells = isinstance(getattr(propose, "client", None), Client)
        # Room for a step's n proposals beside up to n - 1 dropped ones of the step before that may
        # still be running, so that a new proposal never waits for a thread.
        self._pool = ThreadPoolExecutor(max_workers=2 * config.n, thread_name_prefix="speculate")
        self._lock = threading.Lock()
        self._parent: verdict.State | None = None  # the state whose candidates were speculated on
        self._pending: dict = {}  # candidate -> (Future of its proposal, its _Tally or None)
        self._steps: list = []  # [T] per step: COUNTS

    def __repr__(self) -> str:
        return f"Speculator({self.propose!r})"

    def _count(self, t: int, **inc) -> None:
        with self._lock:
            while len(self._steps) <= t:
                self._steps.append(dict.fromkeys(COUNTS, 0))
            for k, v in inc.items():
                self._steps[t][k] += v

    def _take(self, state: verdict.State) -> Future | None:
        """The proposal made for `state`, if its parent's candidates were speculated on; the others
        are dropped (their tokens counted when they finish)."""
        parent, pending, self._parent, self._pending = self._parent, self._pending, None, {}
        if parent is None:
            return None
        t = len(parent.steps)
        child = (
            state.steps[:-1] == parent.steps
            and state.question == parent.question
            and (state.images is parent.images or state.images == parent.images)
        )
        hit = pending.pop(state.steps[-1], None) if child and state.steps else None
        if hit is not None:
            self._count(t, taken=1)
        for future, tally in pending.values():
            self._count(t, dropped=1)
            future.add_done_callback(
                lambda f, tally=tally: self._count(t, dropped_tokens=_tokens(tally))
            )
        return None if hit is None else hit[0]

    def _speculate(self, state: verdict.State, candidates: Sequence[str], n: int) -> None:
        t = len(state.steps)
        if t + 2 > self.config.max_steps:  # the chain ends at this step: no step t+1 to propose
            return
        self._parent, waits = state, []
        for c in dict.fromkeys(candidates):  # each distinct candidate once
            if re.search(self.config.final, c):  # a final answer ends the chain if chosen
                continue
            tally = _Tally(self.propose.client) if hasattr(self.propose, "client") else None
            propose = self.propose
            if tally is not None:
                propose = copy.copy(self.propose)
                propose.client = tally
            sent = threading.Event()
            future = self._pool.submit(_sending, sent, propose, state.extend(c), n)
            future.add_done_callback(lambda f, tally=tally: self._count(t, tokens=_tokens(tally)))
            self._pending[c] = (future, tally)
            self._count(t, made=1)
            waits.append(sent)
        if self._tells:
            deadline = time.monotonic() + SEND_WAIT
            for sent in waits:
                sent.wait(max(0.0, deadline - time.monotonic()))

    def __call__(self, state: verdict.State, n: int) -> list:
        hit = self._take(state)
        candidates = list(hit.result() if hit is not None else self.propose(state, n))
        self._speculate(state, candidates, n)
        return candidates

    def finish(self, steps: int = 0) -> dict:
        """Drop what is still pending, wait for every proposal to end, stop the threads;
        record(steps)."""
        self._take(verdict.State(""))  # matches nothing: every pending proposal is dropped
        self._pool.shutdown(wait=True)
        return self.record(steps)

    def record(self, steps_wanted: int = 0) -> dict:
        """{"steps": [per step of the chain, COUNTS of the proposals made while it was judged (for
        the next step after each of its candidates), "taken" 1 when the next step's candidates came
        from one of them], "totals": COUNTS summed}, the steps padded with zeros to `steps_wanted`;
        tokens are prompt + completion tokens as the server reported them."""
        with self._lock:
            steps = [dict(s) for s in self._steps]
            steps += [dict.fromkeys(COUNTS, 0) for _ in range(steps_wanted - len(steps))]
        return {"steps": steps, "totals": {k: sum(s[k] for s in steps) for k in COUNTS}}


def _sending(sent: threading.Event, propose, state: verdict.State, n: int) -> list:
    """propose(state, n), `sent` set once its request is on its way (client.when_sent), or once the
    call ends, whatever it sent."""
    try:
        with when_sent(sent.set):
            return propose(state, n)
    finally:
        sent.set()


def _tokens(tally: _Tally | None) -> int:
    return 0 if tally is None else tally.tokens
