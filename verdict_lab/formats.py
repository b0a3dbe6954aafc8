"""The judges' other reply formats, and the run's one reply format with its fallback from json
to text.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026: each agent returns a raw score ŝ_i in [0, 1]; the paper
leaves open how a model's reply becomes that number. judges.py asks for a JSON object under a schema
(judges.JSON). This module holds the other replies a Judge can ask for (judges.Reply), for servers
without structured output and for comparison (perf/reply_formats.py):

- TEXT: a last line "Score: x", x in [0, 1]; DIGIT: a last line "Score: d", d in 0..9,
  ŝ = d / 9, whose one-token digit has a weighted score. parse_score reads both, ignoring what the
  judge quotes of the candidate (unquote); an invalid or out-of-range value is never clamped;
- JudgeFormat: the format of one run's judges and of its judge modes' JSON requests, with its one,
  said-aloud fallback from json to text when a server refuses response_format; FormatJudge: a judge
  that replies in the run's format.
"""

from __future__ import annotations

import json
import math
import re
import sys
import threading
from typing import Any, Callable

from judges import JSON, SCALE as DIGIT_SCALE, Reply, fence
from verdict_lab.text import one_line

# A judge replies with a JSON object under a schema, a "Score:" line or a digit.
FORMATS = ("json", "text", "digit")
SCALE = {  # the answer scales parse_score reads
    "unit": "a number from 0 to 1, where 0 means certainly wrong and 1 certainly right",
    "digit": DIGIT_SCALE,
}
EXPLAIN = (
    "Explain your judgement in at most three sentences, then end your reply with this one line:\n"
    "Score: <{scale}>"
)
SCORE_ONLY = "Reply with this one line only, without explanation:\nScore: <{scale}>"
FOLLOW_UP = (
    "Your reply did not end with a valid score line. Reply with this one line only:\n"
    "Score: <{scale}>"
)

_SCORE_LINE = re.compile(
    r"(?im)^[ \t>*_#`-]*(?:(?:final|overall)[ \t]+)?score[ \t*_`]*[:=][ \t]*(.*)$"
)
_UNIT = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(%|/(\d+(?:\.\d*)?))?")


# ----------------------------------------------------------------------------- what a reply reports

# The largest token count or millisecond figure a reply may report, so that sums stay finite.
MAX_REPORTED = 10**15


def _count_ok(v) -> bool:
    """A count a server may report: an int in [0, MAX_REPORTED] (a bool is no count)."""
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_REPORTED


def reported_usage(response: dict) -> dict:
    """{"prompt_tokens", "completion_tokens"} of a response's OpenAI "usage", each 0 when the server
    sent none or a value that is no count (not an int, negative, or above MAX_REPORTED)."""
    usage = response.get("usage") if isinstance(response.get("usage"), dict) else {}
    return {
        k: usage[k] if _count_ok(usage.get(k)) else 0
        for k in ("prompt_tokens", "completion_tokens")
    }


def reported_cache(response: dict) -> dict:
    """What a response reports of its prompt's reuse, None for each value it lacks:
    "cached_tokens": usage.prompt_tokens_details.cached_tokens, the prompt tokens a prefix cache
        served (OpenAI, llama-server, vLLM with --enable-prompt-tokens-details, SGLang with
        --enable-cache-report; vLLM leaves it out when it is 0, so a missing value is unknown,
        not 0);
    "cache_n", "prompt_n": llama-server's timings, the prompt tokens reused from its cache and those
        computed;
    "prompt_ms", "predicted_ms": llama-server's timings, the milliseconds it spent computing the
        prompt and generating the reply (a request's own; requests in parallel slots overlap in
        wall time).
    A value that is not a number in [0, MAX_REPORTED] counts as not reported."""
    usage = response.get("usage") if isinstance(response.get("usage"), dict) else {}
    details = usage.get("prompt_tokens_details")
    details = details if isinstance(details, dict) else {}
    timings = response.get("timings") if isinstance(response.get("timings"), dict) else {}
    count = lambda d, k: d[k] if _count_ok(d.get(k)) else None
    number = lambda v: (
        isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= MAX_REPORTED
    )
    ms = lambda k: float(timings[k]) if number(timings.get(k)) else None
    return {
        "cached_tokens": count(details, "cached_tokens"),
        "cache_n": count(timings, "cache_n"),
        "prompt_n": count(timings, "prompt_n"),
        "prompt_ms": ms("prompt_ms"),
        "predicted_ms": ms("predicted_ms"),
    }


SURROGATE = re.compile("[\ud800-\udfff]")  # after json.loads, a surrogate is always a lone one


def whole_text(x):
    """x with every lone surrogate in its strings ("\\ud800" in a JSON reply) replaced by U+FFFD:
    such a string is no text, and no UTF-8 file (a trace, a predictions TSV) or console could take
    it."""
    if isinstance(x, str):
        return SURROGATE.sub("\ufffd", x)
    if isinstance(x, dict):
        return {whole_text(k): whole_text(v) for k, v in x.items()}
    if isinstance(x, list):
        return [whole_text(v) for v in x]
    return x


def json_object(text: str) -> dict:
    """The JSON object in a reply, from its first "{" to its last "}" (prose or a ``` fence around
    it allowed); ValueError says why there is none."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise ValueError("no JSON object in the reply")
    try:
        return json.loads(text[start : end + 1])
    except (ValueError, RecursionError) as e:
        raise ValueError(f"invalid JSON: {e}") from None


def unquote(text: str, step: str | None = None) -> str:
    """text with what the judge quotes of the candidate blanked out, every position and line kept:
    each <step>…</step>, and after a <step> left open, the candidate's own text (`step`, whitespace
    aside) if it follows. Any other open <step> is a stray tag and hides only itself. Without `step`
    a quote cannot be told from a stray tag, and an open <step> hides the rest of the reply.

    A candidate that says "score" could smuggle its own score line through a judge that echoes it,
    so its text is blanked wherever it appears, tags or none. Any other candidate is blanked only
    inside tags: its text may be the judge's own value ("1" in "Score: 1").
    """
    blank = lambda m: re.sub(r"[^\n]", " ", m.group(0))
    text = re.sub(r"(?is)<step>.*?</step>", blank, text)
    if step is None:
        return re.sub(r"(?is)<step>.*\Z", blank, text)
    words = r"\s+".join(map(re.escape, fence(step).split()))
    text = re.sub(r"(?i)<step>(?:\s*" + words + ")?", blank, text)
    if words and re.search(r"(?i)score", step):  # an echo of the candidate, untagged
        text = re.sub(words, blank, text)
    return text


def _value_at(line: re.Match) -> int:
    """Where the value of a _SCORE_LINE match starts, after markdown decorations such as ** or `."""
    return line.start(1) + len(line.group(1)) - len(line.group(1).lstrip(" \t*_`(<"))


def parse_score(text: str, scale: str = "unit", step: str | None = None) -> float:
    """The judge's score from its reply, or NaN when there is no valid one (never 0, 0.5 or a
    clamp).

    The LAST score line decides: a line starting "Score:" (or "Score =", "Final score:", markdown
    decorations such as **Score:** allowed), its first word being the value, bare or in the prompt's
    own <…>. If that value is invalid, the result is NaN even when an earlier line held a valid one.
    What the judge quotes of the candidate `step` is ignored (see unquote).
    unit  : 0.85, .85, 1, 0, "85%" (= 0.85) and "8/10" (= 0.8) are read; anything outside [0, 1]
            (1.2, -0.1, 85, 150%), words, "0,8" or an empty value is NaN.
    digit : a single digit d in 0..9 gives d / 9 (the one-token scale of the digit format).
    """
    if scale not in SCALE:
        raise ValueError(f"unknown scale {scale!r}; expected one of {', '.join(SCALE)}")
    lines = list(_SCORE_LINE.finditer(unquote(text, step))) if isinstance(text, str) else []
    if not lines:
        return math.nan
    value = re.sub(r"[ \t]*/[ \t]*", "/", lines[-1].string[_value_at(lines[-1]) : lines[-1].end(1)])
    words = value.strip().split()
    value = words[0].rstrip(".,;:!)*_`>") if words else ""
    if scale == "digit":
        return int(value) / 9 if re.fullmatch(r"\d", value) else math.nan
    m = _UNIT.fullmatch(value)
    if not m:
        return math.nan
    s = float(m.group(1))
    if m.group(2) == "%":
        s /= 100
    elif m.group(3) is not None:
        s = s / float(m.group(3)) if float(m.group(3)) > 0 else math.nan
    return s if 0 <= s <= 1 else math.nan  # out of range is NaN, never clamped


def reason_of(text: str) -> str:
    """The prose before the last score line of a text or digit reply ("" for a score-only reply)."""
    lines = list(_SCORE_LINE.finditer(text))
    return (text[: lines[-1].start()] if lines else text).strip()


def _score_line_digit(text: str, step: str | None = None) -> int | None:
    """Where the value of the last score line outside the quoted candidate `step` is, if a digit."""
    lines = list(_SCORE_LINE.finditer(unquote(text, step)))
    at = _value_at(lines[-1]) if lines else None
    return at if at is not None and re.match(r"[0-9]", text[at:]) else None


def _score_line(scale: str) -> Reply:
    """The reply format of a last "Score:" line on `scale` ("unit" or "digit")."""

    def read(text: str, reasons: bool, step: str) -> tuple:
        s = parse_score(text, scale, step)
        if math.isnan(s):
            raise ValueError("no valid score line")
        return s, reason_of(text)

    return Reply(
        "text" if scale == "unit" else "digit",
        line=lambda reasons: (EXPLAIN if reasons else SCORE_ONLY).format(scale=SCALE[scale]),
        params=lambda reasons: {},
        read=read,
        digit_at=_score_line_digit if scale == "digit" else None,
        follow_up=lambda reason: FOLLOW_UP.format(scale=SCALE[scale]),
        max_tokens=(16, 256),
        follow_up_tokens=16,
    )


TEXT, DIGIT = _score_line("unit"), _score_line("digit")
REPLIES = {"json": JSON, "text": TEXT, "digit": DIGIT}  # FORMATS' replies


# ------------------------------------------------------------------ a run's format and its fallback


class JudgeFormat:
    """The reply format of one run's judges, shared by all of them (FormatJudge) and by the run's
    other JSON requests (the judge modes' ask_json): json sends a schema in response_format, text
    and digit send none.

    `requested` is what the run asked for. json falls back to text, for the rest of the run, when
    the server refuses response_format: a 4xx whose message names it or its schema (a server that
    cannot constrain its output). The switch is said once on stderr and record() keeps when it
    happened: never silently. Thread-safe, as a step's n×m judge calls run at once: the first
    refusal switches and speaks, the others just retry.
    """

    REFUSAL = re.compile(r"(?i)response_format|json_schema|schema|grammar")

    def __init__(self, requested: str = "json"):
        if requested not in FORMATS:
            raise ValueError(
                f"unknown judge format {requested!r}; expected one of {', '.join(FORMATS)}"
            )
        self.requested, self._active, self._calls, self._fallback = requested, requested, 0, None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"JudgeFormat({self.requested!r}, active={self.active!r})"

    @property
    def active(self) -> str:
        with self._lock:
            return self._active

    def begin(self) -> tuple:
        """A call starts: (its number in the run, counting from 1; the format it uses)."""
        with self._lock:
            self._calls += 1
            return self._calls, self._active

    def fall_back(self, call: int, error: Exception) -> bool:
        """True if `error` is the server refusing the json format's response_format: from now on,
        text."""
        status = getattr(error, "status", None)
        if not (
            self.requested == "json"
            and isinstance(status, int)
            and 400 <= status < 500
            and self.REFUSAL.search(str(error))
        ):
            return False
        with self._lock:
            first, self._active = self._fallback is None, "text"
            if first:
                self._fallback = {"at_call": call, "error": one_line(error)}
        if first:
            print(
                f"judges: the server refused response_format ({one_line(error)}); the judges "
                "reply in the text format, and JSON requests go without a schema, for the rest "
                "of this run",
                file=sys.stderr,
                flush=True,
            )
        return True

    def run(self, attempt: Callable[[str], Any]) -> Any:
        """attempt(the format in use), counted as one call; if the server refuses response_format
        there (fall_back), attempt("text") at once. Any other error propagates."""
        call, fmt = self.begin()
        try:
            return attempt(fmt)
        except Exception as e:  # the client's EndpointError carries the HTTP status fall_back reads
            if fmt != "json" or not self.fall_back(call, e):
                raise
        return attempt("text")

    def record(self) -> dict:
        """{"format": requested, "format_used": the one in use now, "fallback": None or
        {"at_call", "error"}}; at_call counts the calls run() made, judge calls and the judge
        modes' JSON requests alike."""
        with self._lock:
            return {
                "format": self.requested,
                "format_used": self._active,
                "fallback": self._fallback,
            }


class FormatJudge:
    """A judge in the run's reply format: judges[fmt.active] judges, so every judge of a run falls
    back to text together when the server refuses the json format's response_format
    (JudgeFormat.run). `judges`: {format name: a judge(state, step, note)}, the same judge in json
    and in text."""

    def __init__(self, judges: dict, fmt: JudgeFormat):
        self.judges, self.format, self.name = judges, fmt, judges[fmt.requested].name

    def __repr__(self) -> str:
        return f"FormatJudge({self.name!r}, {self.format!r})"

    def __call__(self, state, step: str, note: str = ""):
        return self.format.run(lambda fmt: self.judges[fmt](state, step, note))
