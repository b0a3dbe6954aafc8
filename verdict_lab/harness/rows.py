"""The rows of VERDICT's harness: one row of results.jsonl, and the name of the method that
wrote it.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026: its table compares methods run with the same agents ("same
agents, different aggregation"), one chain per (item, seed, method). These two types are the
contract between the harness's chains, which write a Row per chain, and tables.py and rundir.py,
which read them back:

- Method: "base", or a rule of verdict.RULES judged in a judge mode (JudgeMode), revising on reject
  or not, or a test-time search (search.py) with its settings; its str is its one spelling,
  "verdict+zoom+revise", "bon8+last+key", "wbon8+min+mean", "maj8", "beam2x3+last+key+filter", and
  Method.parse reads it back;
- Row: every field of a row, typed; to_json is the object results.jsonl holds
  ("verdict-eval-row/3"), from_json reads one back and raises ValueError naming the first bad
  field. A row records the digest of the input it ran (chains.input_digest).

Left out: the trace stays verdict.Trace.to_dict's dict (it has its own format), and the input
columns stay the benchmark file's values.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import MISSING, dataclass, field, fields

import verdict
from verdict_lab import search
from verdict_lab.modes import JudgeMode

ROW_FORMAT = "verdict-eval-row/3"
# The searches (best-of-N, weighted best-of-N, majority vote with no judge, beam search), each
# with its answer rule.
SEARCHES = {"bon": "best", "wbon": "weighted", "maj": "majority", "beam": "best"}
SPELLINGS = (
    "bonN+AGGREGATE+STEP_SCORE, wbonN+AGGREGATE+STEP_SCORE, majN, "
    "beamWxE+AGGREGATE+STEP_SCORE[+filter]"
)
# How answers.py read an answer.
EXTRACTED = ("letter", "text", "value", "judge", "declined", "unanswered")
# a fact sheet: valid at once, valid when asked once more, malformed twice
SHEET_STATUSES = ("ok", "retried", "degraded")


@dataclass(frozen=True)
class Method:
    """What ran a chain: "base" (the reasoner alone), a judged rule, or a search. str(m) is its name
    in the table and in results.jsonl ("verdict", "mean+prior", "verdict+premises+gate+revise",
    "bon8+last+key"); Method.parse(str(m)) == m.

    The searches (search.py; plain judges, no revising), every setting in the name, none left out:
    - bonN+AGGREGATE+STEP_SCORE: best-of-N, the answer of the chain scored highest
      ("bon8+last+key");
    - wbonN+AGGREGATE+STEP_SCORE: weighted best-of-N, the answer whose chains' scores sum highest;
    - majN: majority vote over N chains, no judge;
    - beamWxE+AGGREGATE+STEP_SCORE, +filter: beam search, W beams of E candidates a step, the best
      W kept (+filter: only the expansions that pass the dual test, when any does), the best
      finished beam's answer.
    AGGREGATE is last, min or prod (search.AGGREGATES), STEP_SCORE one of search.STEP_SCORES."""

    rule: str  # "base", one of verdict.RULES, or a search: one of SEARCHES
    # The judges' mode; plain is left out of the name.
    mode: JudgeMode = field(default_factory=JudgeMode)
    revise: bool = False  # revise on reject (revise.Reviser): "+revise", last
    n: int | None = None  # bon, wbon, maj: N, the chains sampled
    width: int | None = None  # beam: W, the beams kept
    expand: int | None = None  # beam: E, the candidates each beam proposes a step
    aggregate: str | None = None  # bon, wbon, beam: a chain's score from its step scores
    step_score: str | None = None  # bon, wbon, beam: a step's score from its judges'
    dual_filter: bool = False  # beam: "+filter"

    def __post_init__(self):
        if self.rule not in ("base",) + verdict.RULES + tuple(SEARCHES):
            raise ValueError(
                f"unknown rule {self.rule!r}; expected base, one of {', '.join(verdict.RULES)}, or "
                f"a search: {SPELLINGS}"
            )
        if not isinstance(self.mode, JudgeMode):
            raise ValueError(f"mode must be a JudgeMode, got {self.mode!r}")
        if not isinstance(self.revise, bool):
            raise ValueError(f"revise must be a bool, got {self.revise!r}")
        # Base runs no judge, so it can take neither a judge mode nor a revision.
        if self.rule == "base" and (self.mode.active or self.revise):
            raise ValueError(
                f"base runs no judges: it takes no judge mode and no +revise, got mode "
                f"{self.mode.name!r}, revise={self.revise}"
            )
        self._check_search()

    def _check_search(self) -> None:
        """A search's settings, present and in range (search.check); none on another method."""
        given = {k: getattr(self, k) for k in ("n", "width", "expand", "aggregate", "step_score")}
        need = {"bon": ("n", "aggregate", "step_score"), "wbon": ("n", "aggregate", "step_score")}
        need |= {"maj": ("n",), "beam": ("width", "expand", "aggregate", "step_score")}
        wanted = need.get(self.rule, ())
        extra = [k for k, v in given.items() if v is not None and k not in wanted]
        if (
            extra
            or (self.dual_filter and self.rule != "beam")
            or not isinstance(self.dual_filter, bool)
        ):
            raise ValueError(f"{self.rule} takes no {(extra or ['dual_filter'])[0]} setting")
        if not self.search:
            return
        if not self.plain:  # the searches judge with the plain judges
            raise ValueError(
                f"a search runs plain judges: no judge mode and no +revise, got {self.rule}"
            )
        counts = {"N": self.n} if self.rule != "beam" else {"W": self.width, "E": self.expand}
        if self.rule == "maj":
            return search.check(**counts)
        if self.aggregate is None or self.step_score is None:
            raise ValueError(f"{self.rule} needs an aggregate and a step score")
        search.check(self.step_score, self.aggregate, **counts)

    def __str__(self) -> str:
        if self.rule in ("bon", "wbon"):
            return f"{self.rule}{self.n}+{self.aggregate}+{self.step_score}"
        if self.rule == "maj":
            return f"maj{self.n}"
        if self.rule == "beam":
            scored = f"+{self.aggregate}+{self.step_score}" + "+filter" * self.dual_filter
            return f"beam{self.width}x{self.expand}{scored}"
        mode, revise = (
            f"+{self.mode.name}" if self.mode.active else "",
            "+revise" if self.revise else "",
        )
        return self.rule + mode + revise

    @property
    def judged(self) -> bool:
        """The chain ran judges (every method but base and majority vote)."""
        return self.rule not in ("base", "maj")

    @property
    def plain(self) -> bool:
        """No judge mode and no revising: the rule's own calls only."""
        return not (self.mode.active or self.revise)

    @property
    def search(self) -> bool:
        """A test-time search (search.py) over several chains or beams."""
        return self.rule in SEARCHES

    @property
    def answer(self) -> str | None:
        """A search's answer rule (search.ANSWERS): best, weighted or majority; None for the
        other methods."""
        return SEARCHES.get(self.rule)

    @property
    def family(self) -> str:
        """The name with its count left out ("bonN+last+key", "majN", "beamWx3+last+key+filter"):
        the methods of one family differ in N (or W) alone, a curve of accuracy against compute."""
        return re.sub(r"^(w?bon|maj)\d+", r"\1N", re.sub(r"^beam\d+x", "beamWx", str(self)))

    @property
    def size(self) -> int | None:
        """N of a best-of-N or majority method, W of a beam search; None for other methods."""
        return self.width if self.rule == "beam" else self.n

    @classmethod
    def parse(cls, text: str) -> Method:
        """ "verdict+zoom+revise" -> Method("verdict", JudgeMode(zoom=True), True);
        "beam2x3+last+key+filter" -> Method("beam", width=2, expand=3, aggregate="last",
        step_score="key", dual_filter=True). ValueError for an unknown rule, mode word or search
        setting, a base with a mode, and a name spelled otherwise than str() spells it
        ("verdict+plain", "verdict+zoom+prior", "bon08+last+key"): one method, one name, one row
        key."""
        if not isinstance(text, str):
            raise ValueError(f"a method name is a string, got {text!r}")
        try:
            method = _parse_search(text)
            if method is None:
                rule, _, mode = text.removesuffix("+revise").partition("+")
                method = cls(rule, JudgeMode.parse(mode), text.endswith("+revise"))
        except ValueError as e:
            raise ValueError(f"method {text!r}: {e}") from None
        if str(method) != text:
            raise ValueError(f"method {text!r} is spelled {str(method)!r}")
        return method


def _parse_search(text: str) -> Method | None:
    """A search's name read (Method.parse); None when the name is no search's. ValueError for a
    search's name with the wrong parts: bonN and wbonN take AGGREGATE+STEP_SCORE, majN nothing,
    beamWxE AGGREGATE+STEP_SCORE and an optional +filter."""
    head, *rest = text.split("+")
    counted = re.fullmatch(r"(w?bon|maj)(-?\d+)?", head)
    beam = re.fullmatch(r"beam(?:(-?\d+)x(-?\d+))?", head)
    if not (counted or beam):
        return None
    rule = counted.group(1) if counted else "beam"
    filtered = rule == "beam" and rest[-1:] == ["filter"]
    parts = rest[:-1] if filtered else rest
    if (
        len(parts) != (0 if rule == "maj" else 2)
        or (counted or beam).group(2 if counted else 1) is None
    ):
        like = {
            "bon": "bon8+last+key",
            "wbon": "wbon8+min+mean",
            "maj": "maj8",
            "beam": "beam2x3+last+key",
        }
        raise ValueError(f"a {rule} method is spelled like {like[rule]} ({SPELLINGS})")
    scored = dict(zip(("aggregate", "step_score"), parts))
    if counted:
        return Method(rule, n=int(counted.group(2)), **scored)
    width, expand = int(beam.group(1)), int(beam.group(2))
    return Method("beam", width=width, expand=expand, dual_filter=filtered, **scored)


@dataclass(frozen=True)
class Row:
    """One row of results.jsonl: one chain (item, seed, method), its answer, its cost and its trace.
    The fields' order is the keys' order in the file. The fields with a default came after the
    format did: a row written before them reads as 0 (None for the fact sheet)."""

    data: str  # the benchmark file's name (benchmarks.Item.data)
    id: str  # the item's id in that file
    row: int  # the item's line in that file (the tables' order)
    seed: int  # the reasoner's seed
    method: Method  # what ran the chain
    answer: str  # the right answer: a letter or a value
    pred: str | None  # the answer read from the chain; None when none was
    extracted: str  # how it was read: one of EXTRACTED
    correct: bool  # pred is right (an error row counts wrong)
    prediction: str | None  # the text it was read from (VLMEvalKit's prediction column)
    stopped: str | None  # how it ended: "final", "max_steps", "budget"; None: no trace
    error: str | None  # "EndpointError: ..." when the chain ended in an error
    calls: int  # model calls of the reasoner and judges, cached replies counted
    sent: int  # HTTP requests this run made for them
    cached: int  # calls the response cache answered
    replies: int  # replies received from the endpoint
    tokens: int  # tokens of those calls
    seconds: float  # wall time of the chain
    extra_calls: int = 0  # the judge mode's own calls (prior, fact sheet, checks, regions)
    extra_tokens: int = 0  # and their tokens
    fact_sheet_status: str | None = None  # one of SHEET_STATUSES; None without a fact sheet
    gate_checks: int = 0  # premise checks made (the premises mode)
    zoom_requests: int = 0  # region requests made (the zoom mode)
    revisions: int = 0  # revisions written (revise on reject)
    revised: int = 0  # revisions taken
    revise_calls: int = 0  # the revisions' calls: the reviser's and their judgements
    revise_tokens: int = 0  # and their tokens
    zoomed: int = 0  # region requests that sent close-ups
    extract_calls: int = 0  # calls of the extraction model (--extract-model)
    extract_tokens: int = 0  # and their tokens
    reasoner_calls: int = (
        0  # the reasoner's model calls (proposals, top-ups, revisions), cached ones too
    )
    reasoner_tokens: int = 0  # and their tokens: the reasoner's compute
    judge_calls: int = (
        0  # the judges' model calls (scores, asks again, a judge mode's), cached ones too
    )
    input_digest: str | None = (
        None  # the digest of the item it ran (chains.input_digest); None: unknown
    )
    input: dict = field(default_factory=dict)  # the item's input columns, never the image
    trace: dict | None = None  # verdict.Trace.to_dict() with its meta; None when it failed

    def __post_init__(self):
        for f in fields(self):
            v, types = getattr(self, f.name), _types(f.type)
            if not any(_is(v, t) for t in types):
                raise ValueError(
                    f"row field {f.name!r} must be {' or '.join(map(_said, types))}, got {v!r}"
                )
            if type(v) is int and v < 0:  # a line, a seed or a count
                raise ValueError(f"row field {f.name!r} must be >= 0, got {v}")
        # JSON's NaN and Infinity read as floats, so the type check alone lets them through.
        if not (math.isfinite(self.seconds) and self.seconds >= 0):
            raise ValueError(
                f"row field 'seconds' must be a finite number >= 0, got {self.seconds!r}"
            )
        if self.extracted not in EXTRACTED:
            raise ValueError(
                f"row field 'extracted' must be one of {', '.join(EXTRACTED)}, got "
                f"{self.extracted!r}"
            )
        if self.input_digest == "":
            raise ValueError("row field 'input_digest' must be a digest or null, got ''")
        if self.fact_sheet_status not in (None,) + SHEET_STATUSES:
            raise ValueError(
                f"row field 'fact_sheet_status' must be one of {', '.join(SHEET_STATUSES)} "
                f"or null, got {self.fact_sheet_status!r}"
            )
        if self.trace is not None:
            _check_trace(self.trace)

    @property
    def key(self) -> tuple:
        """(data, id, seed, method name): one row per key in a run."""
        return self.data, self.id, self.seed, str(self.method)

    def to_json(self) -> dict:
        """The object results.jsonl holds: "format" first, then every field, the method as its
        name."""
        return {
            "format": ROW_FORMAT,
            **{f.name: getattr(self, f.name) for f in fields(self)},
            "method": str(self.method),
        }

    @classmethod
    def from_json(cls, d) -> Row:
        """A row of results.jsonl, read back. ValueError names what is wrong: another format, a
        missing or unknown field, a field of the wrong type or value ("correct": "yes")."""
        if not isinstance(d, dict):
            raise ValueError(f"a row is a JSON object, got {type(d).__name__}")
        form = d.get("format")
        if form != ROW_FORMAT:
            raise ValueError(f"a row of format {form!r}, not {ROW_FORMAT!r}")
        known = {f.name: f for f in fields(cls)}
        unknown = [k for k in d if k not in known and k != "format"]
        if unknown:
            raise ValueError(f"row field {unknown[0]!r} is not a field of {form}")
        required = [
            k for k, f in known.items() if f.default is MISSING and f.default_factory is MISSING
        ]
        required += ["input_digest"]
        missing = [k for k in required if k not in d]
        if missing:
            raise ValueError(f"row field {missing[0]!r} is missing")
        try:
            method = Method.parse(d["method"])
        except ValueError as e:
            raise ValueError(f"row field 'method': {e}") from None
        return cls(**{**{k: v for k, v in d.items() if k != "format"}, "method": method})


COUNTS = ("steps", "fallbacks", "abstentions", "judge_calls")  # a trace's totals the tables read
SEARCH_COUNTS = (
    "steps",
    "abstentions",
    "judge_calls",
)  # a search's (search.Search.totals): no fallback


def _check_trace(trace: dict) -> None:
    """ValueError naming what is wrong with a row's trace (verdict.Trace.to_dict, or a search's
    search.Search.to_dict) where it is read back: its totals' counts (integers >= 0, fallbacks at
    most the steps and abstentions at most the judge calls), their usage (counters to numbers >= 0)
    and its chain (strings)."""
    tot = trace.get("totals")
    counts = SEARCH_COUNTS if trace.get("format") == search.SEARCH_FORMAT else COUNTS
    bad = [
        k for k in counts if not (isinstance(tot, dict) and _is(tot.get(k), int) and tot[k] >= 0)
    ]
    if bad:
        got = tot.get(bad[0]) if isinstance(tot, dict) else tot
        raise ValueError(
            f"row field 'trace': totals {bad[0]!r} must be an integer >= 0, got {got!r}"
        )
    if tot.get("fallbacks", 0) > tot["steps"] or tot["abstentions"] > tot["judge_calls"]:
        raise ValueError(
            f"row field 'trace': totals do not add up: {json.dumps({k: tot[k] for k in counts})}"
        )
    usage, number = tot.get("usage", {}), lambda v: _is(v, float) and math.isfinite(v) and v >= 0
    if not (
        isinstance(usage, dict) and all(isinstance(k, str) and number(v) for k, v in usage.items())
    ):
        raise ValueError(
            f"row field 'trace': totals' usage must map counters to numbers >= 0, got {usage!r:.80}"
        )
    chain = trace.get("chain", [])
    if not (isinstance(chain, list) and all(isinstance(c, str) for c in chain)):
        raise ValueError("row field 'trace': its chain must be a list of steps (strings)")


TYPES = {
    "str": str,
    "int": int,
    "float": float,
    "bool": bool,
    "dict": dict,
    "Method": Method,
    "None": None,
}


def _types(annotation: str) -> list:
    """A Row field's annotation, as written ("str | None"), as its types: [str, None]."""
    return [TYPES[t.strip()] for t in annotation.split("|")]


def _is(v, t) -> bool:
    """v is of type t, None being null; a bool is neither an int nor a float, and an int is a float
    too."""
    if t is None:
        return v is None
    if t in (int, float):
        return isinstance(v, (int,) if t is int else (int, float)) and not isinstance(v, bool)
    return isinstance(v, t)


def _said(t) -> str:
    """A type as an error message says it: "a bool", "an int", "a number", "null"."""
    return (
        "null"
        if t is None
        else "an int"
        if t is int
        else "a number"
        if t is float
        else f"a {t.__name__}"
    )
