"""The base reasoner and the three verification agents of VERDICT, over any OpenAI-compatible endpoint.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026. This module implements:

- the base reasoner, which samples n candidate next steps at T = 0.8, top-p = 0.6 (experiments);
- the three frozen agents, each defined entirely by its prompt (prompts/*.txt, after the paper's
  agent descriptions): visual (λ_V), logical (λ_L) and contextual (λ_C). Each scores one candidate in
  isolation and returns a raw score ŝ_i in [0, 1], or NaN when it abstains (its reply carried no
  valid score, twice);
- what the paper leaves to an implementation: prompt files, score parsing, the "ask once more"
  follow-up, and a thread-pool map so the n×m judge calls of a step overlap.

The HTTP client is client.py, images and chat messages are images.py, and the judge modes of the
related papers (SGV's prior, EVPV's premises) are grounding.py.
"""
from __future__ import annotations

import math
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

import verdict
from client import Client, text_of
from images import messages

PROMPTS = Path(__file__).resolve().with_name("prompts")
STOP = ["\n\n", "\nStep "]  # one candidate = one step: it ends at a blank line or a new "Step" label


# ----------------------------------------------------------------------------- prompts

@dataclass(frozen=True)
class Prompt:
    """A prompt file: a [system] section (sent unchanged) and a [user] template with {placeholders}."""
    system: str
    user: str
    path: str

    def render(self, **fields: str) -> str:
        def fill(m):
            if m.group(1) not in fields:
                raise ValueError(f"{self.path}: unknown placeholder {{{m.group(1)}}}; known: {sorted(fields)}")
            return fields[m.group(1)]
        return re.sub(r"\{(\w+)\}", fill, self.user)  # other braces in the file are left alone


@lru_cache(maxsize=None)
def load_prompt(name: str) -> Prompt:
    path = PROMPTS / f"{name}.txt"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ValueError(f"no prompt {name!r}: cannot read {path} ({e.strerror})") from None
    parts = re.split(r"(?m)^\[(system|user)\][ \t]*\n", text)
    sections = dict(zip(parts[1::2], (p.strip() for p in parts[2::2])))
    if parts[0].strip() or len(parts) != 5 or set(sections) != {"system", "user"}:
        raise ValueError(f"{path} must hold a [system] section and then a [user] section")
    return Prompt(sections["system"], sections["user"], str(path))


def steps_text(steps: Sequence[str]) -> str:
    """The previous steps as the prompts show them: "Step 1: ..." lines, or "(none yet)"."""
    return "\n".join(f"Step {i}: {s}" for i, s in enumerate(steps, 1)) or "(none yet)"


def fence(step: str) -> str:
    """The candidate with any <step> or </step> of its own defused, so it cannot close its fence."""
    return re.sub(r"(?i)<(/?)step>", r"[\1step]", step)


def one_step(text: str) -> str:
    """The first step of a reply: up to a blank line or a new "Step k" label, without its own label."""
    text = re.split(r"\n[ \t]*\n|\n(?=[ \t*_#]*step[ \t]*\d)", text.strip(), flags=re.I)[0]
    return re.sub(r"(?i)^[ \t*_#]*step[ \t]*\d+[ \t]*[:.)-][ \t*_]*", "", text).strip()


# ----------------------------------------------------------------------------- reasoner

class Reasoner:
    """The base reasoner: propose(state, n) -> n candidate next steps, for verdict.run.

    One request asks for n choices at `temperature` and `top_p` (the paper's 0.8 and 0.6), with top_k sent
    explicitly (vLLM serving Qwen2.5-VL otherwise applies the model's top_k = 1 and every candidate
    comes out identical; top_k=None omits it for hosted APIs that reject it). Each candidate is one
    step: generation stops at STOP and `one_step` trims the rest. If the server returns fewer
    choices (llama-cpp-python ignores n), at most `max_topups` further requests (default: n) with
    seeds seed+1, seed+2, ... ask for the rest. Candidates are kept as the model wrote them, even empty.
    The same state and seed give byte-identical requests (so a Cache shares them across runs).
    The prompt asks for "Final answer: <letter or value>", which verdict.FINAL_ANSWER recognises.
    """

    def __init__(self, client: Client, temperature: float = 0.8, top_p: float = 0.6, top_k: int | None = -1,
                 max_tokens: int = 256, seed: int = 0, max_topups: int | None = None):
        if not (math.isfinite(temperature) and temperature >= 0 and 0 < top_p <= 1):  # NaN fails too
            raise ValueError(f"need temperature >= 0 and 0 < top_p <= 1, got temperature={temperature!r}, top_p={top_p!r}")
        self.client, self.temperature, self.top_p, self.top_k = client, temperature, top_p, top_k
        self.max_tokens, self.seed, self.max_topups = max_tokens, seed, max_topups
        self.prompt = load_prompt("reasoner")

    def __call__(self, state: verdict.State, n: int) -> list:
        if not (isinstance(n, int) and n >= 1):
            raise ValueError(f"n must be an integer >= 1, got n={n!r}")
        text = self.prompt.render(question=state.question, steps=steps_text(state.steps))
        msgs = messages(self.prompt.system, state.images, text)
        candidates: list = []
        for i in range(1 + (n if self.max_topups is None else self.max_topups)):
            if len(candidates) >= n:
                break
            r = self.client.chat(msgs, temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
                                 n=n - len(candidates), seed=self.seed + i, stop=STOP, max_tokens=self.max_tokens)
            candidates += [one_step(c["message"]["content"]) for c in r["choices"]][: n - len(candidates)]
        return candidates


# ----------------------------------------------------------------------------- asking once more

def ask(chat: Callable[..., dict], msgs: list, read: Callable[[dict], Any], follow_up: Callable[[str], str],
        params: dict, retry_params: dict | None = None) -> tuple:
    """read(chat(msgs, **params)); if read raises ValueError, ask once more, with the model's own reply and
    follow_up(reason) appended to the conversation (retry_params, default params), and read that.

    Returns (value, or None when both replies were unreadable; the responses; the reasons they failed).
    A model that missed the format once usually gets it right when told what was wrong; twice is the bound.
    """
    responses, errors = [], []
    for attempt in range(2):
        response = chat(msgs, **(params if attempt == 0 else retry_params or params))
        responses.append(response)
        try:
            return read(response), responses, errors
        except ValueError as e:
            errors.append(str(e))
            msgs = msgs + [{"role": "assistant", "content": text_of(response)},
                           {"role": "user", "content": follow_up(str(e))}]
    return None, responses, errors


# ----------------------------------------------------------------------------- judges

SCALE = {  # the answer scales parse_score reads
    "unit": "a number from 0 to 1, where 0 means certainly wrong and 1 certainly right",
    "digit": "one digit from 0 to 9, where 0 means certainly wrong and 9 certainly right",
}
EXPLAIN = "Explain your judgement in at most three sentences, then end your reply with this one line:\nScore: <{scale}>"
SCORE_ONLY = "Reply with this one line only, without explanation:\nScore: <{scale}>"
FOLLOW_UP = "Your reply did not end with a valid score line. Reply with this one line only:\nScore: <{scale}>"

_SCORE_LINE = re.compile(r"(?im)^[ \t>*_#`-]*(?:(?:final|overall)[ \t]+)?score[ \t*_`]*[:=][ \t]*(.*)$")
_QUOTED_STEP = re.compile(r"(?is)<step>.*?(?:</step>|\Z)")
_UNIT = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(%|/(\d+(?:\.\d*)?))?")


def parse_score(text: str, scale: str = "unit") -> float:
    """The judge's score from its reply, or NaN when there is no valid one (never 0, 0.5 or a clamp).

    The LAST score line decides: a line starting "Score:" (or "Score =", "Final score:", markdown
    decorations such as **Score:** allowed), its first word being the value. If that value is
    invalid, the result is NaN even when an earlier line held a valid one. Text the judge quotes
    between <step> and </step> is the candidate's, and is ignored.
    unit  : 0.85, .85, 1, 0, "85%" (= 0.85) and "8/10" (= 0.8) are read; anything outside [0, 1]
            (1.2, -0.1, 85, 150%), words, "0,8" or an empty value is NaN.
    digit : a single digit d in 0..9 gives d / 9 (the one-token scale of Judge(logprobs=True)).
    """
    if scale not in SCALE:
        raise ValueError(f"unknown scale {scale!r}; expected one of {', '.join(SCALE)}")
    lines = _SCORE_LINE.findall(_QUOTED_STEP.sub("", text)) if isinstance(text, str) else []
    if not lines:
        return math.nan
    words = re.sub(r"[ \t]*/[ \t]*", "/", lines[-1]).strip(" \t*_`(").split()
    value = words[0].rstrip(".,;:!)*_`") if words else ""
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


def logprob_score(logprobs: Any) -> float:
    """Σ_d p(d)·d/9 over the digits 0..9 among the top_logprobs of the score token (the first token
    of the value on the last score line), with p renormalised over those digits; NaN when the
    server returned no usable logprobs. The digits 0..9 are single tokens in Qwen's tokenizer (as in most),
    so one token carries the whole score; a decimal such as "0.85" would spread over several."""
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list) or not all(isinstance(t, dict) and isinstance(t.get("token"), str) for t in content):
        return math.nan
    text = "".join(t["token"] for t in content)
    lines = list(_SCORE_LINE.finditer(text))
    if not lines:
        return math.nan
    at = lines[-1].start(1) + len(lines[-1].group(1)) - len(lines[-1].group(1).lstrip(" \t*_`("))
    pos = 0
    for t in content:
        if pos + len(t["token"]) > at:
            break
        pos += len(t["token"])
    p = np.zeros(10)                                                  # [10] probability of each digit
    for alt in t.get("top_logprobs") or []:
        d = str(alt.get("token", "")).strip() if isinstance(alt, dict) else ""
        if re.fullmatch(r"\d", d) and isinstance(alt.get("logprob"), (int, float)):
            p[int(d)] += math.exp(alt["logprob"])
    return float(p @ np.arange(10) / 9 / p.sum()) if p.sum() > 0 else math.nan


class Judge:
    """One frozen verification agent: judge(state, step) -> ŝ in [0, 1], or NaN (abstain).

    The prompt is prompts/{name}.txt; the candidate sits between <step> and </step>, last, after
    the images, question and previous steps. Temperature 0: the judge is deterministic, as a frozen
    verifier should be. If the reply holds no valid score, the judge asks once more (its own reply,
    then FOLLOW_UP) and abstains with NaN if that fails too. score_only asks for the score line
    alone (max_tokens 16). logprobs=True asks for one digit 0..9 and returns the probability-
    weighted digit / 9 from top_logprobs, or the parsed digit when the server sends none.
    `counts` tallies calls, replies, parsed replies, retries and abstentions. An endpoint that
    fails raises EndpointError: a failed request is an error, not an abstention.
    `grounding` (a grounding.Grounding) adds the per-question evidence of the SGV and EVPV modes at the
    prompt's {evidence}, and gates the visual judge's score; None is plain VERDICT.
    """

    def __init__(self, client: Client, name: str, max_tokens: int | None = None, score_only: bool = False,
                 logprobs: bool = False, seed: int = 0, top_logprobs: int = 10, grounding: Any = None):
        self.client, self.name, self.score_only, self.logprobs, self.seed = client, name, score_only, logprobs, seed
        self.prompt, self.grounding = load_prompt(name), grounding
        if grounding is not None and grounding.mode.active and "{evidence}" not in self.prompt.user:
            raise ValueError(f"{self.prompt.path} has no {{evidence}} placeholder, so judge mode "
                             f"{grounding.mode.name!r} could not show the judge its evidence")
        self.max_tokens = max_tokens or (16 if score_only else 256)
        self.scale = "digit" if logprobs else "unit"
        self.params = dict(temperature=0.0, seed=seed, max_tokens=self.max_tokens)
        if logprobs:
            self.params.update(logprobs=True, top_logprobs=top_logprobs)
        self._lock = threading.Lock()
        self._counts = dict(calls=0, replies=0, parsed=0, retries=0, abstentions=0)

    def __repr__(self) -> str:
        return f"Judge({self.name!r}, score_only={self.score_only}, logprobs={self.logprobs})"

    @property
    def counts(self) -> dict:
        with self._lock:
            return dict(self._counts)

    def _score(self, response: dict) -> float:
        choice = response["choices"][0]
        s = parse_score(choice["message"]["content"], self.scale)
        if self.logprobs and not math.isnan(s):
            weighted = logprob_score(choice.get("logprobs"))
            return s if math.isnan(weighted) else weighted
        return s

    def _read(self, response: dict) -> float:
        s = self._score(response)
        if math.isnan(s):
            raise ValueError("no valid score line")
        return s

    def __call__(self, state: verdict.State, step: str) -> float:
        reply = (SCORE_ONLY if self.score_only else EXPLAIN).format(scale=SCALE[self.scale])
        evidence = self.grounding.evidence(self.name, state) if self.grounding is not None else ""
        text = self.prompt.render(question=state.question, evidence=evidence, steps=steps_text(state.steps),
                                  step=fence(step), reply=reply)
        msgs = messages(self.prompt.system, state.images, text)
        follow_up = lambda reason: FOLLOW_UP.format(scale=SCALE[self.scale])
        s, responses, _ = ask(self.client.chat, msgs, self._read, follow_up, self.params, {**self.params, "max_tokens": 16})
        s, tries = (math.nan if s is None else s), len(responses)  # unreadable twice: abstain
        with self._lock:
            c = self._counts
            c["calls"], c["replies"], c["retries"] = c["calls"] + 1, c["replies"] + tries, c["retries"] + tries - 1
            c["parsed"], c["abstentions"] = c["parsed"] + (not math.isnan(s)), c["abstentions"] + math.isnan(s)
        return s if self.grounding is None else self.grounding.gated(self.name, state, step, s)


def make_judges(client: Client, grounding: Any = None, **judge_kwargs) -> list:
    """The three judges in the order of verdict.JUDGES and verdict.STUBBORNNESS, sharing `grounding`
    (a judge mode's per-question evidence; None for plain VERDICT)."""
    return [Judge(client, name, grounding=grounding, **judge_kwargs) for name in verdict.JUDGES]


def thread_map(k: int) -> Callable:
    """A map_fn for verdict.run: f over items on at most k threads, results in input order."""
    if not (isinstance(k, int) and k >= 1):
        raise ValueError(f"k must be an integer >= 1, got k={k!r}")
    if k == 1:
        return lambda f, items: list(map(f, items))

    def map_fn(f, items):
        items = list(items)
        with ThreadPoolExecutor(max_workers=max(1, min(k, len(items)))) as pool:
            return list(pool.map(f, items))
    return map_fn
