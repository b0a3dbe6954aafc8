"""Judge modes from two related papers, for VERDICT's agents: SGV's self-grounded prior and EVPV's
explicit visual premises with their reliability gate. They change what the judges see, and verdict.py
not at all.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026, is the system these modes plug into (judges.Judge's grounding).

prior     Self-Grounded Verification (SGV): "Let's Think in Two Steps: Mitigating Agreement Bias in
          MLLMs with Self-Grounded Verification", ICLR 2026, method steps 1 and 2. One call per
          question, with the question and images only, writes the prior k̂_q: what a correct solution
          must establish. Every judge reads it as reference expectations, before the candidate and
          after what every role of the step shares (prompting.role_messages), so the prefix cache still holds.
premises  Explicit Visual Premise Verification (EVPV): "Grounding the Score: Explicit Visual Premise
          Verification for Reliable Vision-Language Process Reward Models", methodology 2 to 4. One
          call per question extracts a JSON fact sheet C (objects, numbers, relations, structure,
          uncertain facts marked); the visual judge reads it as independent evidence. A malformed
          sheet is asked for once more; then the mode degrades to no fact sheet, and the record says so.
gate      EVPV's reliability gate (needs premises), methodology 3 and 4. One text-only call per candidate
          labels each visual claim of the step against C. ν_t = 1 when it lists a claim; a step with none
          (ν_t = 0) keeps its scores. r = (Π_j p_j)^(1/J), the geometric mean of the claims' agreement p_j
          (AGREEMENT), so one contradicted premise gives r = 0. EVPV's R_t = α(r)·R_base shrinks a signed
          reward toward its neutral 0; on a judge's [0, 1] scale, whose neutral is 0.5 (R = 2ŝ − 1), it reads
          ŝ ← 0.5 + α(r)·(ŝ − 0.5), applied inside the judges, before the consensus, to the scores of the
          gate's target: "step" (the default, EVPV's R_t read as the step's score) gates every judge's score
          of the candidate; "visual" gates the visual judge's ŝ_V only. Mode words "gate", "gate-step" and
          "gate-visual" choose it.

zoom      ReVISE's look again ("Think, Look, and Revise: Inconsistency-Aware Visual Self-Correction in MLLMs",
          appendix B; modes/zoom.py): before it scores a candidate, the visual judge names at most zoom.K
          regions of the first image (a JSON request, prompts/zoom.txt, boxes in 0..1000 coordinates); when
          every box passes zoom.check_region, their zoom.zoom_in crops go into its request just before its
          task, after the shared prefix; when it names none, a box fails or the reply is unreadable twice, it
          scores from the full image (ReVISE's fallback to the model's own perception). The record keeps the
          path and the boxes.

Structured output. The fact sheet and the premise check are JSON requests (ask_json): each sends its schema
(fact_sheet_schema, claims_schema) in response_format, so a server that applies it makes even a tiny model's
reply well-formed, with bounded lists and strings so that it ends within max_tokens. The run's JudgeFormat
decides, shared with the judges: json sends schemas; text or digit, or a server that refused response_format
(the fallback, said once for the run), sends the prompt alone. Every reply is validated either way (servers
skip keywords they do not support, and a 200 proves nothing).

Extra calls per question: prior 1; premises 1 (2 if the first sheet is malformed); gate 1 per distinct
candidate that a gated judge scored with a number (2 if the first reply is malformed; none once the sheet
degraded), however many judges it gates; zoom 1 per distinct candidate the visual judge scores (2 if the
first reply is malformed; none without an image). A judge call's own part (the close-ups it saw, its score
before and after the gate) goes into that call's record (judges.Judge.judgement), which the trace keeps in
call order.
All are at temperature 0 with a fixed seed, so the on-disk Cache serves them again on a re-run.

flags.py defines, once for demo.py and evaluate.py, the flags of verdict.Config and the judge mode.
"""

from __future__ import annotations

import copy
import math
import threading
from typing import Any, Callable

import verdict
from client import Client
from images import fingerprint
from judges import ask
from modes import MODE_MAX_TOKENS, JudgeMode, evpv, zoom
from prompting import DEFAULT_LAYOUT, check_layout, role_messages
from replies import (
    JSON_FOLLOW_UP as OBJECT_FOLLOW_UP,
    JudgeFormat,
    fence,
    reported_usage,
    response_format,
    text_of,
)

REFERENCE = (
    "Reference expectations, written from the question and the image alone before any step was seen "
    "(what a correct solution must establish; a guide, not proof):\n{prior}\n\n"
)
FACT_SHEET = (
    "Fact sheet, extracted from the image before any step was seen (independent evidence; "
    "facts marked uncertain may be wrong):\n{facts}\n\n"
)
CHECKED_SHEET = "Fact sheet:\n{facts}\n\n"  # what the premise check reads the step against
JSON_FOLLOW_UP = "Your reply was not a valid fact sheet ({}). Reply with the JSON object only."
# the schemas' list bounds (EVPV's sheets hold 3 to 8 key facts in all)
FACTS_PER_KIND, CLAIMS_PER_STEP = 3, 6


def ask_json(
    chat: Callable[..., dict],
    fmt: JudgeFormat,
    schema: tuple,
    msgs: list,
    read: Callable[[dict], Any],
    follow_up: Callable[[str], str],
    params: dict,
) -> tuple:
    """judges.ask for a JSON reply: (value or None, responses, errors). schema = (name, JSON schema), sent in
    response_format while fmt is json; with text or digit, or once the server has refused response_format
    (fmt's fallback, said once for the run, then this request again without it), the prompt alone asks for
    the JSON. `read` validates every reply either way, and an unreadable one is asked for once more."""

    def attempt(used: str) -> tuple:
        sent = {**params, "response_format": response_format(*schema)} if used == "json" else params
        return ask(chat, msgs, read, follow_up, sent)

    return fmt.run(attempt)


class ModeCalls:
    """A JudgeMode's per-question evidence, shared by one set of judges (make_judges(grounding=...)).

    The prior and the fact sheet are made once per (model, question, images) and kept in memory;
    their requests are identical across runs (temperature 0, fixed seed), so an on-disk Cache serves
    them again. Thread-safe: when the n×m judge calls of a step ask at once, one call is made.
    record(question, images) is what a trace's meta should hold for that question. `layout` lays out its
    requests as prompting.role_messages does: "shared" shares the prefix of the step's other
    requests.
    """

    def __init__(
        self,
        client: Client,
        mode: JudgeMode = JudgeMode(),
        max_tokens: int = MODE_MAX_TOKENS,
        seed: int = 0,
        fmt: str | JudgeFormat = "json",
        layout: str = DEFAULT_LAYOUT,
    ):
        if not (isinstance(max_tokens, int) and max_tokens >= 1):
            raise ValueError(f"max_tokens must be an integer >= 1, got max_tokens={max_tokens!r}")
        self.client, self.mode, self.params = (
            client,
            mode,
            dict(temperature=0.0, seed=seed, max_tokens=max_tokens),
        )
        # the run's, shared with its judges
        self.format = fmt if isinstance(fmt, JudgeFormat) else JudgeFormat(fmt)
        self.layout = check_layout(layout)
        self._lock = threading.Lock()
        self._records: dict = {}  # question key -> its record (see record)
        # (kind, question key, ...) -> {"lock": Lock, "value": the artefact once made}
        self._artefacts: dict = {}

    def __repr__(self) -> str:
        return f"ModeCalls({self.client!r}, mode={self.mode.name!r})"

    def _key(self, question: str, images: tuple) -> tuple:
        return self.client.model, question, tuple(fingerprint(im) for im in images)

    def _update(self, state: verdict.State, change: Callable[[dict], Any]) -> None:
        key = self._key(state.question, state.images)
        with self._lock:
            change(self._records.setdefault(key, {"extra_calls": 0, "extra_tokens": 0}))

    def _chat(self, state: verdict.State, msgs: list, **params) -> dict:
        """One extra call for this question, counted with its tokens (a cached reply's too)."""
        r = self.client.chat(msgs, **params)
        tokens = sum(reported_usage(r).values())
        self._update(
            state,
            lambda rec: rec.update(
                extra_calls=rec["extra_calls"] + 1, extra_tokens=rec["extra_tokens"] + tokens
            ),
        )
        return r

    def _ask_json(
        self,
        state: verdict.State,
        schema: tuple,
        msgs: list,
        parse: Callable[[str], Any],
        follow_up: Callable[[str], str] = lambda e: OBJECT_FOLLOW_UP.format(reason=e),
    ) -> tuple:
        """(parse(reply) or None when unreadable twice, the reasons replies failed): one JSON request of this
        question (ask_json under the run's format), each call counted. follow_up(reason) asks again after an
        unreadable reply; by default for the JSON object (replies.JSON_FOLLOW_UP)."""
        value, _, errors = ask_json(
            lambda m, **params: self._chat(state, m, **params),
            self.format,
            schema,
            msgs,
            lambda r: parse(text_of(r)),
            follow_up,
            self.params,
        )
        return value, errors

    def _once(self, key: tuple, make: Callable[[], Any]) -> Any:
        """make(), once per key, however many threads ask at once (an error is not kept)."""
        with self._lock:
            slot = self._artefacts.setdefault(key, {"lock": threading.Lock()})
        with slot["lock"]:
            if "value" not in slot:
                slot["value"] = make()
        return slot["value"]

    def _per_question(self, kind: str, state: verdict.State, make: Callable) -> Any:
        """make(state), once per question."""
        return self._once((kind, self._key(state.question, state.images)), lambda: make(state))

    def _messages(self, name: str, state: verdict.State, evidence: str = "", images=None, **fields) -> list:
        """The request of prompts/{name}.txt about `state`, laid out as prompting.role_messages lays out this
        ModeCalls' layout."""
        return role_messages(name, state, self.layout, evidence, images, **fields)

    def prior(self, state: verdict.State) -> str:
        """SGV's prior k̂_q: the question and images only, no step shown (prompts/prior.txt)."""

        def make(state):
            msgs = self._messages("prior", verdict.State(state.question, state.images))  # before any step
            text = text_of(self._chat(state, msgs, **self.params)).strip()
            self._update(state, lambda rec: rec.update(prior=text))
            return text

        return self._per_question("prior", state, make)

    def fact_sheet(self, state: verdict.State) -> dict | None:
        """EVPV's fact sheet (prompts/premises.txt), or None when it degraded: malformed twice."""

        def make(state):
            msgs = self._messages("premises", verdict.State(state.question, state.images))
            sheet, errors = self._ask_json(
                state,
                ("fact_sheet", evpv.fact_sheet_schema()),
                msgs,
                evpv.parse_fact_sheet,
                JSON_FOLLOW_UP.format,
            )
            status = "degraded" if sheet is None else "retried" if errors else "ok"
            self._update(
                state,
                lambda rec: rec.update(fact_sheet=sheet, fact_sheet_status=status, fact_sheet_errors=errors),
            )
            return sheet

        return self._per_question("premises", state, make)

    def evidence(self, judge: str, state: verdict.State) -> str:
        """What a judge's prompt holds at {evidence}: the prior (every judge), the fact sheet (visual)."""
        text = ""
        if self.mode.prior and (prior := self.prior(state)):
            text += REFERENCE.format(prior=prior)
        if self.mode.premises and judge == "visual" and (sheet := self.fact_sheet(state)) is not None:
            text += FACT_SHEET.format(facts=evpv.fact_lines(sheet))
        return fence(text)  # the evidence cannot open or close the candidate's fence

    def gated(self, judge: str, state: verdict.State, step: str, s: float) -> tuple:
        """(a judge's score of candidate `step` through EVPV's gate, the gate's part of that call's record),
        when mode.gates(judge); else (s as it is, None).

        ŝ ← gate(ŝ, r) when the candidate's premise check lists a visual claim (ν_t = 1); a step without
        one (ν_t = 0) keeps ŝ. The check is made once per (question, steps so far, candidate text), whichever
        of its gated judges comes first, and the others wait for it: candidates with the same text get the
        same request, so they share its reply. NaN stays NaN and no fact sheet (degraded) leaves ŝ as it is
        (both: no record); an unreadable check leaves ŝ as it is. The record: {"s_hat": ŝ before, "gated": ŝ
        after, "nu", "r", "alpha"} (the check's; None when it was unreadable).
        """
        if not self.mode.gates(judge) or math.isnan(s) or (sheet := self.fact_sheet(state)) is None:
            return s, None
        where = ("premise_check", self._key(state.question, state.images), tuple(state.steps), step)
        check = self._once(where, lambda: self._premise_check(state, sheet, step))
        out = evpv.gate(s, check["r"]) if check["nu"] == 1 else s  # ν_t = 0 or unreadable: not gated
        return out, {"s_hat": s, "gated": out, "nu": check["nu"], "r": check["r"], "alpha": check["alpha"]}

    def _premise_check(self, state: verdict.State, sheet: dict, step: str) -> dict:
        """One premise check (prompts/premise_check.txt), text only: the step's visual claims against C.
        Its record entry: claims, ν_t (nu), r and α(r) (alpha, None when ν_t = 0), or, when both replies were
        unreadable (a malformed one is asked for once more), the last one's error."""
        msgs = self._messages(
            "premise_check", state, CHECKED_SHEET.format(facts=evpv.fact_lines(sheet)), (), step=fence(step)
        )  # text only: the step is checked against the sheet alone
        claims, errors = self._ask_json(
            state, ("premise_check", evpv.claims_schema()), msgs, evpv.parse_claims
        )
        entry = {"step": len(state.steps), "candidate": step}
        if claims is None:  # unreadable twice: the step is not gated
            entry.update(nu=None, r=None, alpha=None, error=errors[-1])
        else:
            nu = int(bool(claims))  # ν_t: a visual claim
            r = evpv.reliability([evpv.AGREEMENT[c["label"]] for c in claims])
            entry.update(claims=claims, nu=nu, r=r, alpha=evpv.alpha(r) if nu else None)
        self._update(state, lambda rec: rec.setdefault("gate", []).append(entry))
        return entry

    def look(self, state: verdict.State, step: str) -> tuple:
        """(the note the visual judge reads before its close-ups, the close-ups, the zoom's part of that
        call's record: {"path", "why", "boxes"}): the zoom mode's look again at candidate `step` ("" and ()
        for the full image). One region request per (question, steps so far, candidate text), made once
        however many calls ask; its record entry: the step index, the candidate, the boxes named (0..1000;
        None when unreadable twice), each box's error (None: it passed), the path ("zoom" or "full"), why the
        full image ("no image", "unreadable", "none named", "invalid"; None on "zoom"), the crops in source
        pixels and the parse errors."""
        where = ("zoom", self._key(state.question, state.images), tuple(state.steps), step)
        return self._once(where, lambda: self._look(state, step))

    def _look(self, state: verdict.State, step: str) -> tuple:
        boxes, errors = None, []
        if state.images:
            msgs = self._messages("zoom", state, step=fence(step), k=str(zoom.K))
            boxes, errors = self._ask_json(
                state, ("regions", zoom.regions_schema()), msgs, zoom.parse_regions
            )
        path, why, box_errors = zoom.decide(boxes, bool(state.images))
        images, crops = zoom.looks(state.images[0], boxes) if path == "zoom" else ([], [])
        entry = {
            "step": len(state.steps),
            "candidate": step,
            "boxes": boxes,
            "box_errors": box_errors,
            "path": path,
            "why": why,
            "crops": crops,
            "errors": errors,
        }
        self._update(state, lambda rec: rec.setdefault("zoom", []).append(entry))
        seen = {"path": path, "why": why, "boxes": boxes}
        return (zoom.looks_note(boxes), tuple(images), seen) if path == "zoom" else ("", (), seen)

    def record(self, question: str, images=()) -> dict:
        """This question's artefacts for trace.meta, JSON-ready: the mode (and "gate_target" with the gate);
        "prior"; "fact_sheet" (None when degraded), "fact_sheet_status" ("ok", "retried" or "degraded") and
        the parse errors; "gate", one entry per premise check (step index, candidate, claims, nu, r, alpha;
        each gated judge's ŝ before and after is in that call's record, see gated); "zoom", one entry per
        region request (see look); and the extra calls and tokens this mode spent on the question (cached
        replies counted, as their cost)."""
        key = self._key(question, verdict.as_images(images))
        with self._lock:
            rec = copy.deepcopy(self._records.get(key, {"extra_calls": 0, "extra_tokens": 0}))
        for kind in ("gate", "zoom"):  # the judges answer in any order, so do the checks and region requests
            rec.get(kind, []).sort(key=lambda e: (e["step"], e["candidate"]))
        gate_target = {"gate_target": self.mode.gate_target} if self.mode.gate else {}
        return {"judge_mode": self.mode.name, **gate_target, **rec}
