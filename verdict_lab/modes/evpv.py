"""EVPV's explicit visual premises and reliability gate, as pure functions: the fact sheet and the
premise check (their JSON schemas and readers), the reliability r of a step's claims and the gate
that pulls a score toward neutral as r falls. modes/judge.py makes the calls; nothing here makes a
request.

"Grounding the Score: Explicit Visual Premise Verification for Reliable Vision-Language Process
Reward Models" (EVPV), methodology 2 to 4. One call per question extracts a JSON fact sheet C
(objects, numbers, relations, structure, uncertain facts marked); one text-only call per candidate
labels each visual claim of the step against C. r = (Π_j p_j)^(1/J), the geometric mean of the
claims' agreement p_j (AGREEMENT), so one contradicted premise gives r = 0; a step with no claim
keeps its scores. EVPV's R_t = α(r)·R_base shrinks a signed reward toward its neutral 0; on a
judge's [0, 1] scale, whose neutral is 0.5 (R = 2ŝ − 1), it reads ŝ ← 0.5 + α(r)·(ŝ − 0.5).
"""

from __future__ import annotations

import json
import math

import numpy as np

from verdict_lab.text import one_line
from verdict_lab.formats import json_object

# Whose scores the gate pulls toward neutral: every judge's ("step"), or ŝ_V's only ("visual").
GATE_TARGETS = ("step", "visual")
GATE_TARGET = "step"  # the default: EVPV gates the step's reward R_t, not one judge's view of it
FACT_KINDS = ("objects", "numbers", "relations", "structure")
# The agreement p_j of a claim, by its label; a claim the sheet lacks or doubts is a coin flip.
AGREEMENT = {"supported": 1.0, "uncertain": 0.5, "contradicted": 0.0}
# The steepness and midpoint of α: α(0) = 0, α(0.5) = 0.5, α(0.8) = 0.959, α(1) = 1.
GATE_K, GATE_R0 = 10.0, 0.5
# The schemas' list bounds (EVPV's sheets hold 3 to 8 key facts in all).
FACTS_PER_KIND, CLAIMS_PER_STEP = 3, 6
TEXT_CHARS = 80  # the longest fact or claim the schemas allow


def reliability(p) -> float:
    """r = (Π_j p_j)^(1/J), the geometric mean of the per-claim agreement p_j in [0, 1] (EVPV,
    methodology 3): one contradicted claim (p_j = 0) gives r = 0. No claim (no visual premise):
    r = 1."""
    p = np.asarray(p, dtype=float)  # [J]
    if p.ndim != 1 or not np.all((p >= 0) & (p <= 1)):  # NaN or out of range: a bug in the caller
        raise ValueError(f"agreements must be a list of numbers in [0, 1], got {p.tolist()}")
    with np.errstate(divide="ignore"):  # log 0 = −inf, and exp(−inf) = 0
        return float(np.exp(np.log(p).mean())) if p.size else 1.0  # [J] -> scalar


def alpha(r: float, k: float = GATE_K, r0: float = GATE_R0) -> float:
    """α(r) = (σ(k(r − r0)) − σ(−k·r0)) / (σ(k(1 − r0)) − σ(−k·r0)), σ the logistic function: EVPV's
    sigmoid gate, rescaled so that α(0) = 0 (the score becomes neutral) and α(1) = 1 (unchanged)."""
    if not 0 <= r <= 1:  # also rejects NaN
        raise ValueError(f"r must lie in [0, 1], got r={r!r}")
    if not (0 < k < math.inf and 0 <= r0 <= 1):
        raise ValueError(f"need 0 < k < inf and 0 <= r0 <= 1, got k={k!r}, r0={r0!r}")
    sigma = lambda x: 1.0 / (1.0 + math.exp(-x))
    lo, hi = sigma(-k * r0), sigma(k * (1 - r0))
    return (sigma(k * (r - r0)) - lo) / (hi - lo)


def gate(s: float, r: float) -> float:
    """ŝ ← 0.5 + α(r)·(ŝ − 0.5): a judge's score pulled toward neutral as the premises' reliability
    r falls.

    EVPV (methodology 4) gates a signed step reward, R_t = α(r)·R_base, whose neutral is 0. A
    judge's score here lies in [0, 1], where 0.5 is "cannot tell" and every τ > 0.5 rejects it; with
    R = 2ŝ − 1 the same gate reads ŝ_t = 0.5 + α(r)(ŝ − 0.5). Multiplying ŝ itself by α would drag
    it toward 0, "certainly wrong": a penalty for the premise, where EVPV withholds both reward and
    penalty. NaN stays NaN."""
    if math.isnan(s):
        return s
    if not 0 <= s <= 1:  # out of range is a bug in the judge, never clamped
        raise ValueError(f"s must lie in [0, 1] or be NaN, got s={s!r}")
    return 0.5 + alpha(r) * (s - 0.5)


def fact_sheet_schema() -> dict:
    """The fact sheet's JSON schema: each kind of FACT_KINDS a list of at most FACTS_PER_KIND
    entries {"fact": 1..TEXT_CHARS characters, "uncertain": true or false}, every key required. The
    bounds end a reply however a model loops (a tiny one fills every list to the brim): 12 entries,
    indented, of 80 characters each, are about 500 tokens, within the default max_tokens (512)."""
    entry = {
        "type": "object",
        "properties": {
            "fact": {"type": "string", "minLength": 1, "maxLength": TEXT_CHARS},
            "uncertain": {"type": "boolean"},
        },
        "required": ["fact", "uncertain"],
        "additionalProperties": False,
    }
    kind = {"type": "array", "items": entry, "maxItems": FACTS_PER_KIND}
    return {
        "type": "object",
        "properties": {k: kind for k in FACT_KINDS},
        "required": list(FACT_KINDS),
        "additionalProperties": False,
    }


def claims_schema() -> dict:
    """The premise check's JSON schema: {"claims": at most CLAIMS_PER_STEP entries
    {"claim": 1..TEXT_CHARS characters, "label": a key of AGREEMENT}}, every key required."""
    claim = {
        "type": "object",
        "properties": {
            "claim": {"type": "string", "minLength": 1, "maxLength": TEXT_CHARS},
            "label": {"type": "string", "enum": list(AGREEMENT)},
        },
        "required": ["claim", "label"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {"claims": {"type": "array", "items": claim, "maxItems": CLAIMS_PER_STEP}},
        "required": ["claims"],
        "additionalProperties": False,
    }


def parse_fact_sheet(text: str) -> dict:
    """{kind: [{"fact": str, "uncertain": bool}, ...]} for each kind in FACT_KINDS, from a reply.

    Each kind must be a list (maybe empty); each entry needs a non-empty "fact" string, and its
    "uncertain", when present, must be true or false (absent means false). Other keys are dropped.
    ValueError, naming what is wrong, for anything else, or for a sheet without a single fact.
    """
    obj, sheet = json_object(text), {}
    for kind in FACT_KINDS:
        entries = obj.get(kind)
        if not isinstance(entries, list):
            raise ValueError(f"{kind!r} must be a list, got {one_line(json.dumps(entries), 60)}")
        for e in entries:
            if not (
                isinstance(e, dict)
                and isinstance(e.get("fact"), str)
                and e["fact"].strip()
                and isinstance(e.get("uncertain", False), bool)
            ):
                raise ValueError(
                    f'a {kind} entry needs a non-empty "fact" and a true/false "uncertain", '
                    f"got {one_line(json.dumps(e), 80)}"
                )
        sheet[kind] = [
            {"fact": e["fact"].strip(), "uncertain": e.get("uncertain", False)} for e in entries
        ]
    if not any(sheet.values()):  # valid, but no evidence at all
        raise ValueError("the fact sheet holds no fact")
    return sheet


def fact_lines(sheet: dict) -> str:
    """The fact sheet as the judges read it: one "- kind: fact" line each, "(uncertain)" marked."""
    return "\n".join(
        f"- {kind}: {e['fact']}" + (" (uncertain)" if e["uncertain"] else "")
        for kind in FACT_KINDS
        for e in sheet[kind]
    )


def parse_claims(text: str) -> list:
    """[{"claim": str, "label": a key of AGREEMENT}, ...] from a premise-check reply
    {"claims": [...]}; [] when the step makes no visual claim. ValueError names what is
    malformed."""
    claims = json_object(text).get("claims")
    if not isinstance(claims, list):
        raise ValueError(f'"claims" must be a list, got {one_line(json.dumps(claims), 60)}')
    label = lambda c: c.get("label").strip().lower() if isinstance(c.get("label"), str) else None
    for c in claims:
        if not (isinstance(c, dict) and isinstance(c.get("claim"), str) and label(c) in AGREEMENT):
            raise ValueError(
                f'a claim needs a "claim" string and a "label" in {", ".join(AGREEMENT)}, '
                f"got {one_line(json.dumps(c), 80)}"
            )
    return [{"claim": c["claim"].strip(), "label": label(c)} for c in claims]
