"""Judge modes as judges: ModeJudge wraps a judge and returns a judges.Judgement (score and record),
with what its judge mode adds (SGV's self-grounded prior, EVPV's explicit visual premises and
reliability gate, ReVISE's look again); ModeChain makes the mode's calls for one chain, shared by
the chain's ModeJudges. They change what the judges see, and verdict.py not at all.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026, is the system these modes plug into: a ModeJudge is a
judge like any other for verdict.step.

prior     Self-Grounded Verification (SGV): "Let's Think in Two Steps: Mitigating Agreement Bias in
          MLLMs with Self-Grounded Verification", ICLR 2026, method steps 1 and 2. One call per
          question, with the question and images only, writes the prior k̂_q: what a correct
          solution must establish. Every judge reads it as reference expectations, before the
          previous steps (the judge's `note`, after what every role of an item shares), so the
          prefix cache still holds.
premises  Explicit Visual Premise Verification (EVPV): "Grounding the Score: Explicit Visual Premise
          Verification for Reliable Vision-Language Process Reward Models", methodology 2 to 4. One
          call per question extracts a JSON fact sheet C (objects, numbers, relations, structure,
          uncertain facts marked); the visual judge reads it as independent evidence. A malformed
          sheet is asked for once more; then the mode degrades to no fact sheet, and the record says
          so.
gate      EVPV's reliability gate (needs premises), methodology 3 and 4. One text-only call per
          candidate labels each visual claim of the step against C. ν_t = 1 when it lists a claim; a
          step with none (ν_t = 0) keeps its scores. r = (Π_j p_j)^(1/J), the geometric mean of the
          claims' agreement p_j (AGREEMENT), so one contradicted premise gives r = 0. EVPV's
          R_t = α(r)·R_base shrinks a signed reward toward its neutral 0; on a judge's [0, 1] scale,
          whose neutral is 0.5 (R = 2ŝ − 1), it reads ŝ ← 0.5 + α(r)·(ŝ − 0.5), applied inside the
          judges, before the consensus, to the scores of the gate's target: "step" (the default,
          EVPV's R_t read as the step's score) gates every judge's score of the candidate; "visual"
          gates the visual judge's ŝ_V only. Mode words "gate", "gate-step" and "gate-visual" choose
          it.

zoom      ReVISE's look again ("Think, Look, and Revise: Inconsistency-Aware Visual Self-Correction
          in MLLMs", appendix B; modes/zoom.py): before it scores a candidate, the visual judge
          names at most zoom.K regions of the first image (a JSON request, prompts/zoom.txt, boxes
          in 0..1000 coordinates); when every box passes zoom.check_region, their zoom.zoom_in crops
          go into its request just before its task, after the shared prefix; when it names none, a
          box fails or the reply is unreadable twice, it scores from the full image (ReVISE's
          fallback to the model's own perception). The record keeps the path and the boxes.

Structured output. The fact sheet and the premise check are JSON requests (ask_json): each sends its
schema (fact_sheet_schema, claims_schema) in response_format, so a server that applies it makes even
a tiny model's reply well-formed, with bounded lists and strings so that it ends within max_tokens.
The run's JudgeFormat decides, shared with the judges: json sends schemas; text or digit, or a
server that refused response_format (the fallback, said once for the run), sends the prompt alone.
Every reply is validated either way (servers skip keywords they do not support, and a 200 proves
nothing).

Extra calls per chain: prior 1; premises 1 (2 if the first sheet is malformed); gate 1 per distinct
candidate that a gated judge scored with a number (2 if the first reply is malformed; none once the
sheet degraded), however many judges it gates; zoom 1 per distinct candidate the visual judge scores
(2 if the first reply is malformed; none without an image). A judge call's own part (the close-ups
it saw, its score before and after the gate) goes into that call's record, which the trace keeps in
call order; the chain's part (the prior, the fact sheet, every check and region request, the extra
calls and tokens) is ModeChain.record(), for the trace's meta. All are at temperature 0 with a fixed
seed, so the on-disk Cache serves them again on a re-run.
"""

from __future__ import annotations

import copy
import math
import threading
from typing import Any, Callable

import verdict
from judges import MAX_PIXELS, Judgement, ask, fence, response_format, text_of
from verdict_lab.formats import reported_usage
from verdict_lab.formats import JudgeFormat
from verdict_lab.layouts import role_first_of, with_looks
from verdict_lab.modes import MODE_MAX_TOKENS, JudgeMode, evpv, zoom

REFERENCE = (
    "Reference expectations, written from the question and the image alone before any step was "
    "seen (what a correct solution must establish; a guide, not proof):\n{prior}\n\n"
)
FACT_SHEET = (
    "Fact sheet, extracted from the image before any step was seen (independent evidence; "
    "facts marked uncertain may be wrong):\n{facts}\n\n"
)
CHECKED_SHEET = "Fact sheet:\n{facts}\n\n"  # what the premise check reads the step against
OBJECT_FOLLOW_UP = "Your reply was not the JSON object asked for ({}). Reply with that object only."
SHEET_FOLLOW_UP = "Your reply was not a valid fact sheet ({}). Reply with the JSON object only."


def ask_json(
    chat: Callable, fmt: JudgeFormat, schema: tuple, msgs: list, read: Callable, follow_up, params
) -> tuple:
    """judges.ask for a JSON reply: (value or None, responses, errors). schema = (name, JSON
    schema), sent in response_format while fmt is json; with text or digit, or once the server has
    refused response_format (fmt's fallback, said once for the run, then this request again without
    it), the prompt alone asks for the JSON. `read` validates every reply either way, and an
    unreadable one is asked for once more."""

    def attempt(used: str) -> tuple:
        sent = {**params, "response_format": response_format(*schema)} if used == "json" else params
        return ask(chat, msgs, read, follow_up, sent)

    return fmt.run(attempt)


class ModeChain:
    """A JudgeMode over one chain: the prior and the fact sheet (made once), the premise checks and
    region requests (once per steps so far and candidate text), shared by the chain's ModeJudges,
    and their record.

    Thread-safe: when the n×m judge calls of a step ask at once, one call is made. Every request is
    laid out by `layout` (judges.role_first's signature) and is the same across runs (temperature 0,
    fixed seed), so a response cache serves it again. `fmt` is the run's JudgeFormat, shared with
    its judges. One chain: a state of another question is a ValueError."""

    def __init__(
        self,
        client,
        mode: JudgeMode = JudgeMode(),
        max_tokens: int = MODE_MAX_TOKENS,
        seed: int = 0,
        fmt: JudgeFormat | None = None,
        layout: Callable = role_first_of,
        max_pixels: int = MAX_PIXELS,
    ):
        if not (isinstance(max_tokens, int) and max_tokens >= 1):
            raise ValueError(f"max_tokens must be an integer >= 1, got max_tokens={max_tokens!r}")
        self.client, self.mode, self.layout, self.max_pixels = client, mode, layout, max_pixels
        self.params = dict(temperature=0.0, seed=seed, max_tokens=max_tokens)
        self.format = fmt or JudgeFormat()
        self._lock, self._question = threading.Lock(), None
        self._record: dict = {"extra_calls": 0, "extra_tokens": 0}
        self._made: dict = {}  # (kind, ...) -> {"lock": Lock, "value": the artefact once made}

    def __repr__(self) -> str:
        return f"ModeChain({self.client!r}, mode={self.mode.name!r})"

    def _update(self, change: Callable[[dict], Any]) -> None:
        with self._lock:
            change(self._record)

    def _chat(self, msgs: list, **params) -> dict:
        """One extra call of this chain, counted with its tokens (a cached reply's too)."""
        r = self.client.chat(msgs, **params)
        tokens = sum(reported_usage(r).values())
        self._update(
            lambda rec: rec.update(
                extra_calls=rec["extra_calls"] + 1, extra_tokens=rec["extra_tokens"] + tokens
            )
        )
        return r

    def _ask_json(
        self, schema: tuple, msgs: list, parse: Callable, follow_up=OBJECT_FOLLOW_UP.format
    ) -> tuple:
        """(parse(reply) or None when unreadable twice, the reasons replies failed): one JSON
        request of this chain under the run's format, each call counted."""
        read = lambda r: parse(text_of(r))
        value, _, errors = ask_json(
            self._chat, self.format, schema, msgs, read, follow_up, self.params
        )
        return value, errors

    def _once(self, key: tuple, state: verdict.State, make: Callable[[], Any]) -> Any:
        """make(), once per key, however many threads ask at once (an error is not kept)."""
        with self._lock:
            question = (state.question, state.images)
            if self._question is None:
                self._question = question
            elif question != self._question:  # a judge mode's artefacts are one question's
                raise ValueError(
                    f"a ModeChain serves one chain; got another question: {state.question[:60]!r}"
                )
            slot = self._made.setdefault(key, {"lock": threading.Lock()})
        with slot["lock"]:
            if "value" not in slot:
                slot["value"] = make()
        return slot["value"]

    def prior(self, state: verdict.State) -> str:
        """SGV's prior k̂_q: the question and images only, no step shown (prompts/prior.txt)."""

        def make():
            # The prior is written before any step is seen.
            msgs = self.layout("prior", verdict.State(state.question, state.images))
            text = text_of(self._chat(msgs, **self.params)).strip()
            self._update(lambda rec: rec.update(prior=text))
            return text

        return self._once(("prior",), state, make)

    def fact_sheet(self, state: verdict.State) -> dict | None:
        """EVPV's fact sheet (prompts/premises.txt), or None when it degraded: malformed twice."""

        def make():
            msgs = self.layout("premises", verdict.State(state.question, state.images))
            schema = ("fact_sheet", evpv.fact_sheet_schema())
            sheet, errors = self._ask_json(
                schema, msgs, evpv.parse_fact_sheet, SHEET_FOLLOW_UP.format
            )
            status = "degraded" if sheet is None else "retried" if errors else "ok"
            self._update(
                lambda rec: rec.update(
                    fact_sheet=sheet, fact_sheet_status=status, fact_sheet_errors=errors
                )
            )
            return sheet

        return self._once(("premises",), state, make)

    def note(self, judge: str, state: verdict.State) -> str:
        """What a judge reads of the mode before the previous steps: the prior (every judge), the
        fact sheet (visual), fenced so that it cannot open or close the candidate's fence."""
        text = ""
        if self.mode.prior and (prior := self.prior(state)):
            text += REFERENCE.format(prior=prior)
        if (
            self.mode.premises
            and judge == "visual"
            and (sheet := self.fact_sheet(state)) is not None
        ):
            text += FACT_SHEET.format(facts=evpv.fact_lines(sheet))
        return fence(text)

    def gated(self, judge: str, state: verdict.State, step: str, s: float) -> tuple:
        """(a judge's score of candidate `step` through EVPV's gate, the gate's part of that call's
        record), when mode.gates(judge); else (s as it is, None).

        ŝ ← gate(ŝ, r) when the candidate's premise check lists a visual claim (ν_t = 1); a step
        without one (ν_t = 0) keeps ŝ. The check is made once per (steps so far, candidate text),
        whichever of its gated judges comes first, and the others wait for it. NaN stays NaN and no
        fact sheet (degraded) leaves ŝ as it is (both: no record); an unreadable check leaves ŝ as
        it is. The record: {"s_hat": ŝ before, "gated": ŝ after, "nu", "r", "alpha"} (the check's;
        None when it was unreadable)."""
        if not self.mode.gates(judge) or math.isnan(s) or (sheet := self.fact_sheet(state)) is None:
            return s, None
        check = self._once(
            ("premise_check", state.steps, step),
            state,
            lambda: self._premise_check(state, sheet, step),
        )
        # A step with no visual claim (ν_t = 0) or an unreadable check is not gated.
        out = evpv.gate(s, check["r"]) if check["nu"] == 1 else s
        return out, {
            "s_hat": s,
            "gated": out,
            "nu": check["nu"],
            "r": check["r"],
            "alpha": check["alpha"],
        }

    def _premise_check(self, state: verdict.State, sheet: dict, step: str) -> dict:
        """One premise check (prompts/premise_check.txt), text only: the step's visual claims
        against C. Its record entry: claims, ν_t (nu), r and α(r) (alpha, None when ν_t = 0), or,
        when both replies were unreadable (a malformed one is asked for once more), the last one's
        error."""
        checked = CHECKED_SHEET.format(facts=evpv.fact_lines(sheet))
        # The premise check reads the fact sheet alone, without the images.
        msgs = self.layout("premise_check", state, checked, images=(), step=fence(step))
        claims, errors = self._ask_json(
            ("premise_check", evpv.claims_schema()), msgs, evpv.parse_claims
        )
        entry = {"step": len(state.steps), "candidate": step}
        if claims is None:  # unreadable twice: the step is not gated
            entry.update(nu=None, r=None, alpha=None, error=errors[-1])
        else:
            nu = int(bool(claims))  # ν_t: a visual claim
            r = evpv.reliability([evpv.AGREEMENT[c["label"]] for c in claims])
            entry.update(claims=claims, nu=nu, r=r, alpha=evpv.alpha(r) if nu else None)
        self._update(lambda rec: rec.setdefault("gate", []).append(entry))
        return entry

    def look(self, state: verdict.State, step: str) -> tuple:
        """(the note the visual judge reads before its close-ups, the close-ups, the zoom's part of
        that call's record: {"path", "why", "boxes"}): the zoom mode's look again at candidate
        `step` ("" and () for the full image). One region request per (steps so far, candidate
        text), made once however many calls ask, and none without an image (that call's record says
        "no image"). Its entry in the chain's record: the step index, the candidate, the boxes named
        (0..1000; None when unreadable twice), each box's error (None: it passed), the path ("zoom"
        or "full"), why the full image ("unreadable", "none named", "invalid"; None on "zoom"), the
        crops in source pixels and the parse errors."""
        return self._once(("zoom", state.steps, step), state, lambda: self._look(state, step))

    def _look(self, state: verdict.State, step: str) -> tuple:
        boxes, errors = None, []
        if state.images:
            msgs = self.layout("zoom", state, step=fence(step), k=str(zoom.K))
            boxes, errors = self._ask_json(
                ("regions", zoom.regions_schema()), msgs, zoom.parse_regions
            )
        path, why, box_errors = zoom.decide(boxes, bool(state.images))
        images, crops = (
            zoom.looks(state.images[0], boxes, max_pixels=self.max_pixels)
            if path == "zoom"
            else ([], [])
        )
        entry = dict(
            step=len(state.steps),
            candidate=step,
            boxes=boxes,
            box_errors=box_errors,
            path=path,
            why=why,
            crops=crops,
            errors=errors,
        )
        if state.images:  # a region request was made: the chain's record lists it
            self._update(lambda rec: rec.setdefault("zoom", []).append(entry))
        seen = {"path": path, "why": why, "boxes": boxes}
        return (zoom.looks_note(boxes), tuple(images), seen) if path == "zoom" else ("", (), seen)

    def record(self) -> dict:
        """This chain's artefacts for trace.meta, JSON-ready: the mode (and "gate_target" with the
        gate); "prior"; "fact_sheet" (None when degraded), "fact_sheet_status" ("ok", "retried" or
        "degraded") and the parse errors; "gate", one entry per premise check (step index,
        candidate, claims, nu, r, alpha; each gated judge's ŝ before and after is in that call's
        record, see gated); "zoom", one entry per region request (see look); and the extra calls and
        tokens this mode spent (cached replies counted, as their cost). The checks and region
        requests are in the order of (step, candidate)."""
        with self._lock:
            rec = copy.deepcopy(self._record)
        # A step's judges answer in any order, and so do its checks and requests: sort them.
        for kind in ("gate", "zoom"):
            rec.get(kind, []).sort(key=lambda e: (e["step"], e["candidate"]))
        gate_target = {"gate_target": self.mode.gate_target} if self.mode.gate else {}
        return {"judge_mode": self.mode.name, **gate_target, **rec}


class ModeJudge:
    """A judge in a judge mode: judge(state, step) -> judges.Judgement, as `judge`'s (a
    judges.Judge) with what the mode adds. Its judge reads the mode's note (the prior, the fact
    sheet) before the previous steps; in the zoom mode the visual judge scores with the close-ups of
    the regions it named just before its task; the gate pulls the scores it targets toward neutral.
    The record is the judge's, with "zoom" (the path, why and the boxes of the close-ups seen) and
    "gate" (ŝ before and after, ν_t, r, α(r)) where they apply; the scores in it are the judge's
    own, ŝ is after the gate."""

    def __init__(self, judge, chain: ModeChain):
        self.judge, self.chain, self.name = judge, chain, judge.name

    def __repr__(self) -> str:
        return f"ModeJudge({self.judge!r}, {self.chain.mode.name!r})"

    def __call__(self, state: verdict.State, step: str, note: str = "") -> Judgement:
        note += self.chain.note(self.name, state)
        # ReVISE's look again: the visual judge scores with close-ups of the regions it names.
        if self.chain.mode.zoom and self.name == "visual":
            more, looks, seen = self.chain.look(state, step)
            msgs = self.judge.messages(state, step, note + more)
            msgs = (
                with_looks(msgs, looks, self.judge.task(step), self.chain.max_pixels)
                if looks
                else msgs
            )
            j = self.judge.score(msgs, step)
            j = Judgement(j, {**j.record, "zoom": seen})
        else:
            j = self.judge(state, step, note)
        # EVPV's gate changes the scores of the judges it targets only.
        s, gate = self.chain.gated(self.name, state, step, float(j))
        return j if gate is None else Judgement(s, {**j.record, "gate": gate})
