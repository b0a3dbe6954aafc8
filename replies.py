"""What a VERDICT judge is asked to reply, and how its reply is read.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026. Each agent returns a raw score ŝ_i in [0, 1] for a candidate
step; the paper leaves open how a model's reply becomes that number. This module holds that part:

- the reply formats: json (a JSON object under a schema sent as response_format, so a server that
  supports structured output makes every reply well-formed), text (a last line "Score: x", x in [0, 1])
  and digit (a last line "Score: d", d in 0..9);
- reading a reply: parse_score, json_score, and the probability-weighted score logprob_score, each
  ignoring what the judge quotes of the candidate (fence, unquote); an invalid or out-of-range value
  is never clamped;
- JudgeFormat: the format of one run's judges, and its one, said-aloud fallback from json to text
  when a server refuses response_format; the judge modes' JSON requests (modes/calls.py's ask_json) share it,
  so a run sends a schema in response_format everywhere or, after a refusal, nowhere.
"""

from __future__ import annotations

import json
import math
import re
import sys
import threading
from typing import Any, Callable

import numpy as np


# ----------------------------------------------------------------------------- formats

FORMATS = (
    "json",
    "text",
    "digit",
)  # a judge's reply: a JSON object under a schema, a "Score:" line, a digit line
SCALE = {  # the answer scales parse_score reads
    "unit": "a number from 0 to 1, where 0 means certainly wrong and 1 certainly right",
    "digit": "one digit from 0 to 9, where 0 means certainly wrong and 9 certainly right",
}
EXPLAIN = (
    "Explain your judgement in at most three sentences, then end your reply with this one line:\n"
    "Score: <{scale}>"
)
SCORE_ONLY = "Reply with this one line only, without explanation:\nScore: <{scale}>"
FOLLOW_UP = "Your reply did not end with a valid score line. Reply with this one line only:\nScore: <{scale}>"
JSON_EXPLAIN = (
    'Reply with one JSON object of this form:\n{"reason": "<why, in one or two sentences>", "score": <'
    + SCALE["digit"]
    + ">}"
)
JSON_SCORE_ONLY = (
    'Reply with one JSON object of this form, without explanation:\n{"score": <' + SCALE["digit"] + ">}"
)
JSON_FOLLOW_UP = "Your reply was not the JSON object asked for ({reason}). Reply with that object only."
REASON_CHARS = 200  # the longest "reason" the json format's schema allows

_SCORE_LINE = re.compile(r"(?im)^[ \t>*_#`-]*(?:(?:final|overall)[ \t]+)?score[ \t*_`]*[:=][ \t]*(.*)$")
_JSON_SCORE = re.compile(r'"score"\s*:\s*')
_UNIT = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(%|/(\d+(?:\.\d*)?))?")
_FENCED = re.compile(
    r"(?s)\A\s*```(?:json)?\s*(.*?)\s*```\s*\Z"
)  # a reply wrapped in a ``` (or ```json) fence


def text_of(response: dict, i: int = 0) -> str:
    """The content of choice i of a chat completion (client.Client validates that it is a string)."""
    return response["choices"][i]["message"]["content"]


def one_line(text, limit: int = 300) -> str:
    """text on one line (whitespace runs folded), cut to `limit` characters with "..." when longer."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + "..."


def json_object(text: str) -> dict:
    """The JSON object in a reply, from its first "{" to its last "}" (prose or a ``` fence around it
    allowed); ValueError says why there is none."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise ValueError("no JSON object in the reply")
    try:
        return json.loads(text[start : end + 1])
    except ValueError as e:
        raise ValueError(f"invalid JSON: {e}") from None


def score_schema(score_only: bool = False) -> dict:
    """The JSON schema of a json-format reply: {"reason": 1..REASON_CHARS characters, "score": an integer
    0..9}, reason first so the score comes after it; {"score"} alone with score_only. An integer, because
    llama.cpp's grammar enforces minimum/maximum on integers only (on "number" it ignores them), and one
    digit, which is one token in Qwen's and SmolLM2's tokenizers, so top_logprobs at that token hold the whole
    score."""
    props = {"score": {"type": "integer", "minimum": 0, "maximum": 9}}
    if not score_only:
        props = {"reason": {"type": "string", "minLength": 1, "maxLength": REASON_CHARS}, **props}
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def response_format(name: str, schema: dict) -> dict:
    """The request field that asks for a reply under a JSON schema, in the shape vLLM, SGLang, llama.cpp's
    llama-server and the OpenAI API accept. llama-server reads only json_schema.schema (a "schema" beside
    "type" it would ignore) and skips keywords it does not support, so a 200 proves nothing: read every
    reply."""
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}


def fence(step: str) -> str:
    """The candidate with any <step> or </step> of its own defused, so it cannot close its fence."""
    return re.sub(r"(?i)<(/?)step>", r"[\1step]", step)


def unquote(text: str, step: str | None = None) -> str:
    """text with what the judge quotes of the candidate blanked out, every position and line kept: each
    <step>…</step>, and after a <step> left open, the candidate's own text (`step`, whitespace aside) if it
    follows. Any other open <step> is a stray tag and hides only itself. Without `step` a quote cannot be
    told from a stray tag, and an open <step> hides the rest of the reply."""
    blank = lambda m: re.sub(r"[^\n]", " ", m.group(0))
    text = re.sub(r"(?is)<step>.*?</step>", blank, text)
    if step is None:
        return re.sub(r"(?is)<step>.*\Z", blank, text)
    quote = r"\s*" + r"\s+".join(map(re.escape, fence(step).split()))
    return re.sub(r"(?i)<step>(?:" + quote + ")?", blank, text)


def _value_at(line: re.Match) -> int:
    """Where the value of a _SCORE_LINE match starts, after markdown decorations such as ** or `."""
    return line.start(1) + len(line.group(1)) - len(line.group(1).lstrip(" \t*_`(<"))


def parse_score(text: str, scale: str = "unit", step: str | None = None) -> float:
    """The judge's score from its reply, or NaN when there is no valid one (never 0, 0.5 or a clamp).

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


def json_score(text: str, score_only: bool = False) -> float:
    """d / 9 from a json-format reply {"reason": "...", "score": d}, d an integer 0..9; a ```json fence around
    it is allowed. Anything else raises ValueError saying what is wrong (the follow-up tells the judge): the
    server may have ignored the schema, and a 200 proves nothing. Out of range is an error, never a clamp."""
    body = _FENCED.sub(r"\1", text)
    try:
        reply = json.loads(body)
    except ValueError:
        raise ValueError("not valid JSON") from None
    if not isinstance(reply, dict) or "score" not in reply:
        raise ValueError('not a JSON object with a "score"')
    score = reply["score"]
    if not (isinstance(score, int) and not isinstance(score, bool) and 0 <= score <= 9):
        raise ValueError(f'"score" must be an integer from 0 to 9, got {json.dumps(score)}')
    if not score_only and not isinstance(reply.get("reason"), str):
        raise ValueError('"reason" must be a string')
    return score / 9


def reason_of(text: str, fmt: str) -> str:
    """A judge's reason from a reply that held a valid score: the json format's "reason" (after any ```
    fence), else the prose before the last score line; "" when there is none (a score_only reply)."""
    if fmt == "json":
        try:
            reason = json.loads(_FENCED.sub(r"\1", text)).get("reason")
        except (ValueError, AttributeError):
            return ""
        return reason.strip() if isinstance(reason, str) else ""
    lines = list(_SCORE_LINE.finditer(text))
    return (text[: lines[-1].start()] if lines else text).strip()


def _score_at(text: str, fmt: str, step: str | None) -> int | None:
    """Where the score's digit is in a reply of format fmt (json, or a text score line), or None."""
    if fmt == "json":
        m = list(_JSON_SCORE.finditer(text))
        at = m[-1].end() if m else None
    else:
        lines = list(_SCORE_LINE.finditer(unquote(text, step)))
        at = _value_at(lines[-1]) if lines else None
    return at if at is not None and re.match(r"[0-9]", text[at:]) else None


def digit_probs(logprobs: Any, fmt: str = "digit", step: str | None = None) -> np.ndarray:
    """[10] the probability of each digit 0..9 among the top_logprobs of the score's digit token, as the
    server sent them (not renormalised; all 0 without usable logprobs). The token is found in the reply the
    tokens spell: the "score" value of a json reply, or the value of the last score line outside the quoted
    candidate `step`. A token holding more than the digit (" 7") counts for its digit."""
    p = np.zeros(10)  # [10]
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list) or not all(
        isinstance(t, dict) and isinstance(t.get("token"), str) for t in content
    ):
        return p
    at = _score_at("".join(t["token"] for t in content), fmt, step)
    if at is None:
        return p
    pos = 0
    for t in content:
        if pos + len(t["token"]) > at:
            break
        pos += len(t["token"])
    before = t["token"][: at - pos].strip()  # what the digit's token holds before it (often nothing)
    for tok, lp in (
        (a.get("token"), a.get("logprob")) for a in t.get("top_logprobs") or [] if isinstance(a, dict)
    ):
        d = tok.strip()[len(before) :] if isinstance(tok, str) and tok.strip().startswith(before) else ""
        if re.fullmatch(r"[0-9]", d) and isinstance(lp, (int, float)) and math.isfinite(lp):
            p[int(d)] += math.exp(lp)
    return p


def logprob_score(logprobs: Any, fmt: str = "digit", step: str | None = None) -> float:
    """The probability-weighted score Σ_d p(d)·d/9 at the score's digit token, with p the digit_probs
    renormalised over the digits; NaN without usable logprobs.

    So it is the model's distribution over the score digit, given that a digit comes there. On llama.cpp's
    llama-server, whose top_logprobs come from the raw logits before any grammar, over the whole vocabulary,
    that is the distribution the grammar leaves where only digits may come, provided the digits carrying mass
    made the top list (digit_probs(...).sum() says how much they hold); on vLLM, which masks the logits by the
    grammar before computing logprobs, the list holds only allowed tokens and the same renormalisation gives
    the same quantity. A digit missing from the list counts as 0, so ask for enough (top_logprobs=20). The
    digits 0..9 are single tokens in Qwen's and SmolLM2's tokenizers; a decimal such as "0.85" spreads over
    several tokens, so the text format has no weighted score.
    """
    p = digit_probs(logprobs, fmt, step)  # [10]
    return float(p @ np.arange(10) / 9 / p.sum()) if p.sum() > 0 else math.nan  # [10] @ [10] -> scalar


# ------------------------------------------------------------------ a chat completion's shape and usage

MAX_REPORTED = 10**15  # the largest token count or millisecond figure a reply may report: sums stay finite


def _count_ok(v) -> bool:
    """A token count a server may report: an int in [0, MAX_REPORTED] (a bool is no count)."""
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_REPORTED


def reported_usage(response: dict) -> dict:
    """The token counts a response reports in its OpenAI "usage" object: {"prompt_tokens": int,
    "completion_tokens": int}, each 0 when the server sent none, or a value that is no count (not an int,
    negative, or above MAX_REPORTED, which would overflow the sums)."""
    usage = response.get("usage") if isinstance(response.get("usage"), dict) else {}
    return {k: usage[k] if _count_ok(usage.get(k)) else 0 for k in ("prompt_tokens", "completion_tokens")}


def reported_cache(response: dict) -> dict:
    """What a response reports of its prompt's reuse, None for each value it lacks:
    "cached_tokens": usage.prompt_tokens_details.cached_tokens, the prompt tokens a prefix cache served
        (OpenAI, llama-server, vLLM with --enable-prompt-tokens-details, SGLang with --enable-cache-report;
        vLLM leaves it out when it is 0, so a missing value is unknown, not 0);
    "cache_n", "prompt_n": llama-server's timings, the prompt tokens reused from its cache and those computed;
    "prompt_ms", "predicted_ms": llama-server's timings, the milliseconds it spent computing the prompt and
        generating the reply (a request's own; requests in parallel slots overlap in wall time).
    A value that is not a number in [0, MAX_REPORTED] is malformed and counts as not reported: a huge
    figure would overflow Client.usage's sums to inf."""
    usage = response.get("usage") if isinstance(response.get("usage"), dict) else {}
    details = (
        usage.get("prompt_tokens_details") if isinstance(usage.get("prompt_tokens_details"), dict) else {}
    )
    timings = response.get("timings") if isinstance(response.get("timings"), dict) else {}
    count = lambda d, k: d[k] if _count_ok(d.get(k)) else None
    ms = lambda k: (
        float(timings[k])
        if isinstance(timings.get(k), (int, float))
        and not isinstance(timings[k], bool)
        and 0 <= timings[k] <= MAX_REPORTED
        else None
    )
    return {
        "cached_tokens": count(details, "cached_tokens"),
        "cache_n": count(timings, "cache_n"),
        "prompt_n": count(timings, "prompt_n"),
        "prompt_ms": ms("prompt_ms"),
        "predicted_ms": ms("predicted_ms"),
    }


SURROGATE = re.compile("[\ud800-\udfff]")  # after json.loads, a surrogate is always a lone one


def whole_text(x):
    """x with every lone surrogate in its strings ("\\ud800" in a JSON reply) replaced by U+FFFD: such a
    string is no text, and no UTF-8 file (a trace, a predictions TSV) or console could take it."""
    if isinstance(x, str):
        return SURROGATE.sub("\ufffd", x)
    if isinstance(x, dict):
        return {whole_text(k): whole_text(v) for k, v in x.items()}
    if isinstance(x, list):
        return [whole_text(v) for v in x]
    return x


def shape_problem(body) -> str | None:
    """None if body is a chat completion: a dict with non-empty "choices", each holding a message with string
    content; else what is wrong, unabridged."""
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices:
        return "response has no choices"
    for c in choices:
        if not (
            isinstance(c, dict)
            and isinstance(c.get("message"), dict)
            and isinstance(c["message"].get("content"), str)
        ):
            return f"a choice has no message with string content: {json.dumps(c)}"
    return None


# -------------------------------------------------------------------------- a run's format and its fallback


class JudgeFormat:
    """The reply format of one run's judges, shared by all of them (make_judges; evaluate.py's chains too) and
    by the run's other JSON requests (modes/calls.py's ModeCalls): json sends a schema in response_format,
    text and digit send none.

    `requested` is what the run asked for. json falls back to text, for the rest of the run, when the server
    refuses response_format: a 4xx whose message names it or its schema (a server that cannot constrain its
    output). The switch is said once on stderr and record() keeps when it happened: never silently.
    Thread-safe, as a step's n×m judge calls run at once: the first refusal switches and speaks, the others
    just retry.
    """

    REFUSAL = re.compile(r"(?i)response_format|json_schema|schema|grammar")

    def __init__(self, requested: str = "json"):
        if requested not in FORMATS:
            raise ValueError(f"unknown judge format {requested!r}; expected one of {', '.join(FORMATS)}")
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
        """True if `error` is the server refusing the json format's response_format: from now on, text."""
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
                f"judges: the server refused response_format ({one_line(error)}); the judges reply in the "
                "text format, and JSON requests go without a schema, for the rest of this run",
                file=sys.stderr,
                flush=True,
            )
        return True

    def run(self, attempt: Callable[[str], Any]) -> Any:
        """attempt(the format in use), counted as one call; if the server refuses response_format there
        (fall_back), attempt("text") at once. Any other error propagates."""
        call, fmt = self.begin()
        try:
            return attempt(fmt)
        except Exception as e:  # the client's EndpointError carries the HTTP status fall_back reads
            if fmt != "json" or not self.fall_back(call, e):
                raise
        return attempt("text")

    def record(self) -> dict:
        """{"format": requested, "format_used": the one in use now, "fallback": None or {"at_call", "error"}};
        at_call counts the calls run() made, judge calls and the judge modes' JSON requests alike."""
        with self._lock:
            return {"format": self.requested, "format_used": self._active, "fallback": self._fallback}
