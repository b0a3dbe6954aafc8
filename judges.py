"""The base reasoner and the three verification agents of VERDICT, over any OpenAI-compatible endpoint.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026. This module implements:

- the base reasoner, which samples n candidate next steps at T = 0.8, top-p = 0.6 (experiments);
- the three frozen agents, each defined entirely by its prompt (prompts/*.txt, after the paper's
  agent descriptions): visual (λ_V), logical (λ_L) and contextual (λ_C). Each scores one candidate in
  isolation and returns a raw score ŝ_i in [0, 1], or NaN when it abstains (its reply carried no
  valid score, twice);
- revise on reject (after ReVISE's self-correction; not in the paper): the Reviser, which rewrites the best
  rejected candidate of a step from the judges' reasons, for verdict.run's `revise`;
- what the paper leaves to an implementation: the "ask once more" follow-up, a thread-pool map so
  the n×m judge calls of a step overlap, what a trace keeps about each judge call (Judge.judgement, which
  verdict.step keeps in call order) and about the run's judges (record). How the reply formats fare on a
  real server is measured by perf/reply_formats.py (`python -m perf.reply_formats URL`).

The prompt files and how each request is laid out (a prefix shared by every role of a step) are
prompting.py, the reply formats and the reading of replies are replies.py, the HTTP client is client.py,
images and chat messages are images.py, and the judge modes of the related papers (SGV's prior, EVPV's
premises, ReVISE's look again) are in modes/.
"""

from __future__ import annotations

import math
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence


import verdict
from client import Client
from prompting import DEFAULT_LAYOUT, check_layout, load_prompt, role_messages
from replies import (
    EXPLAIN,
    FOLLOW_UP,
    FORMATS,
    JSON_EXPLAIN,
    JSON_FOLLOW_UP,
    JSON_SCORE_ONLY,
    SCALE,
    SCORE_ONLY,
    JudgeFormat,
    digit_probs,
    fence,
    json_score,
    logprob_score,
    one_line,
    parse_score,
    reason_of,
    response_format,
    score_schema,
    text_of,
)

STOP = ["\n\n", "\nStep "]  # one candidate = one step: it ends at a blank line or a new "Step" label


# ----------------------------------------------------------------------------- one step


def one_step(text: str) -> str:
    """The first step of a reply: up to a blank line or a new "Step k" label, without its own label."""
    text = re.split(r"\n[ \t]*\n|\n(?=[ \t*_#]*step[ \t]*\d)", text.strip(), flags=re.I)[0]
    return re.sub(r"(?i)^[ \t*_#]*step[ \t]*\d+[ \t]*[:.)-][ \t*_]*", "", text).strip()


# ----------------------------------------------------------------------------- reasoner


SEED_STRIDE = 1000  # sampling seeds per reasoner seed (see Reasoner)


def sampling_seed(seed: int, i: int, n: int) -> int:
    """The `seed` field of reasoner seed `seed`'s i-th request of a step for n candidates; the server
    samples its choices j < n with seed + j, all inside [seed·SEED_STRIDE, (seed + 1)·SEED_STRIDE)."""
    return seed * SEED_STRIDE + i * n


class Reasoner:
    """The base reasoner: propose(state, n) -> n candidate next steps, for verdict.run.

    One request asks for n choices at `temperature` and `top_p` (the paper's 0.8 and 0.6), with top_k sent
    explicitly (vLLM serving Qwen2.5-VL otherwise applies the model's top_k = 1 and every candidate
    comes out identical; top_k=None omits it for hosted APIs that reject it). Each candidate is one
    step: generation stops at STOP and `one_step` trims the rest. If the server returns fewer
    choices (llama-cpp-python ignores n), at most `max_topups` further requests (default: n) ask for the rest.
    Candidates are kept as the model wrote them, even empty.

    Sampling seeds (sampling_seed): vLLM and llama-server give the j-th of a request's choices the seed
    `seed + j`, so reasoner seeds 0 and 1 sent as is would share n − 1 of their first step's n candidates.
    Reasoner seed k therefore owns the block [k·SEED_STRIDE, (k + 1)·SEED_STRIDE), and its i-th request
    of a step (0: the first, then the top-ups) sends k·SEED_STRIDE + i·n: no two seeds, and no two requests
    of one step, share a sampling seed.
    The same state and seed give byte-identical requests (so a Cache shares them across runs).
    The prompt asks for "Final answer: <letter or value>", which verdict.FINAL_ANSWER recognises.
    `layout` is how the request is laid out (role_messages; the default prompting.DEFAULT_LAYOUT): "shared"
    shares its prefix with the judges' requests of the step; "per-role" is the reasoner's own system message.
    """

    def __init__(
        self,
        client: Client,
        temperature: float = 0.8,
        top_p: float = 0.6,
        top_k: int | None = -1,
        max_tokens: int = 256,
        seed: int = 0,
        max_topups: int | None = None,
        layout: str = DEFAULT_LAYOUT,
    ):
        if not (math.isfinite(temperature) and temperature >= 0 and 0 < top_p <= 1):  # NaN fails too
            raise ValueError(
                f"need temperature >= 0 and 0 < top_p <= 1, got temperature={temperature!r}, top_p={top_p!r}"
            )
        if not (isinstance(seed, int) and seed >= 0):  # a negative seed would reach into another's block
            raise ValueError(f"seed must be an integer >= 0, got seed={seed!r}")
        check_layout(layout)
        self.client, self.temperature, self.top_p, self.top_k = client, temperature, top_p, top_k
        self.max_tokens, self.seed, self.max_topups, self.layout = max_tokens, seed, max_topups, layout

    def __call__(self, state: verdict.State, n: int) -> list:
        if not (isinstance(n, int) and n >= 1):
            raise ValueError(f"n must be an integer >= 1, got n={n!r}")
        msgs = role_messages("reasoner", state, self.layout)
        requests = 1 + (n if self.max_topups is None else self.max_topups)
        if requests * n > SEED_STRIDE:  # the step's seeds would run into the next reasoner seed's block
            raise ValueError(
                f"n = {n} with {requests - 1} top-ups needs {requests * n} sampling seeds, more than "
                f"SEED_STRIDE = {SEED_STRIDE}"
            )
        candidates: list = []
        for i in range(requests):
            if len(candidates) >= n:
                break
            r = self.client.chat(
                msgs,
                temperature=self.temperature,
                top_p=self.top_p,
                top_k=self.top_k,
                n=n - len(candidates),
                seed=sampling_seed(self.seed, i, n),
                stop=STOP,
                max_tokens=self.max_tokens,
            )
            candidates += [one_step(c["message"]["content"]) for c in r["choices"]][: n - len(candidates)]
        return candidates


# ----------------------------------------------------------------------------- reviser


class Reviser:
    """Revise on reject (after ReVISE's self-correction): revise(state, record) -> one revised step, for
    verdict.run's `revise`, which calls it when no candidate of a step passed the dual test.

    It shows the reasoner's model the best rejected candidate (the fallback's choice, record.chosen), each
    judge's raw score of it and the reason its reply gave (the "reason" in that call's record, record.calls:
    the json format's "reason"; "(no reason given)" for a plain callable or a score-only reply, the default:
    then it revises from the scores alone, and --reasons gives it the judges' objections), in
    prompts/reviser.txt laid out like every role of the step (role_messages), and asks for one step at
    temperature 0 with a fixed seed (so a Cache serves it again). None when the reply holds no step.
    """

    def __init__(
        self,
        client: Client,
        judge_fns: Sequence,
        max_tokens: int = 256,
        seed: int = 0,
        layout: str = DEFAULT_LAYOUT,
    ):
        self.client, self.judge_fns, self.max_tokens, self.seed = client, tuple(judge_fns), max_tokens, seed
        self.layout = check_layout(layout)

    def reasons(self, record: verdict.StepRecord) -> str:
        """One line per judge: its name, its raw score of the chosen candidate and the reason of that call."""
        s_hat = record.s_hat[record.selection.index]  # [m]
        calls = record.calls[record.selection.index] if record.calls else (None,) * len(s_hat)  # [m]
        lines = []
        for k, (judge, s, call) in enumerate(zip(self.judge_fns, s_hat, calls)):
            name = getattr(judge, "name", None) or (
                verdict.JUDGES[k] if len(s_hat) == 3 else f"judge {k + 1}"
            )
            why = (call or {}).get("reason")
            score = "no score (abstained)" if math.isnan(s) else f"score {s:.2f}"
            lines.append(f"- {name} checker, {score}: {one_line(why or '(no reason given)', 400)}")
        return "\n".join(lines)

    def __call__(self, state: verdict.State, record: verdict.StepRecord) -> str | None:
        msgs = role_messages(
            "reviser", state, self.layout, step=fence(record.chosen), reasons=fence(self.reasons(record))
        )
        r = self.client.chat(msgs, temperature=0.0, seed=self.seed, stop=STOP, max_tokens=self.max_tokens)
        return one_step(text_of(r)) or None


# ----------------------------------------------------------------------------- asking once more


def ask(
    chat: Callable[..., dict],
    msgs: list,
    read: Callable[[dict], Any],
    follow_up: Callable[[str], str],
    params: dict,
    retry_params: dict | None = None,
) -> tuple:
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
            msgs = msgs + [
                {"role": "assistant", "content": text_of(response)},
                {"role": "user", "content": follow_up(str(e))},
            ]
    return None, responses, errors


# ----------------------------------------------------------------------------- judges


def scale_of(fmt: str) -> str:
    """The answer scale a text or digit reply is asked for (replies.SCALE)."""
    return SCALE["unit" if fmt == "text" else "digit"]


class Judge:
    """One frozen verification agent: judge(state, step) -> ŝ in [0, 1], or NaN (abstain).

    The prompt is prompts/{name}.txt; the candidate sits between <step> and </step>, last, after the images,
    question and previous steps, laid out by `layout` (role_messages: "shared" puts the judge's
    instructions after the question and steps that every role of the step shares). Temperature 0: the judge
    is deterministic, as a frozen verifier should be.
    `fmt` (a FORMATS name, or a JudgeFormat shared by a run's judges) is the reply asked for; score_only (the
    default, as the paper's agents "return a single scalar") asks for the score alone, score_only=False (the
    commands' --reasons) for a reason before it; the prompt is the same either way but for that reply line:
      json  : {"score" 0..9} (or {"reason", "score"}) under score_schema() in response_format; ŝ = score / 9.
              If the server refuses response_format, the run falls back to text (JudgeFormat).
      text  : a last line "Score: x", x in [0, 1] (score_only=False: after a rationale).
      digit : the same with one digit 0..9; ŝ = digit / 9.
    Every reply is validated; if it holds no valid score, the judge asks once more (its own reply, then
    the follow-up) and abstains with NaN if that fails too. json and digit also ask for top_logprobs (0: not
    at all) and compute the probability-weighted score (logprob_score) beside the sampled one: ŝ is the
    sampled score, or with weighted=True the weighted one where the server returned logprobs. judgement()
    gives ŝ with the call's record (both scores, the digits' share of the list, the reason, the format used),
    and verdict.step calls it, so each record reaches the trace with its own call. `counts` tallies calls,
    replies, parsed replies, retries and abstentions. An endpoint that fails raises EndpointError: a failed
    request is an error, not an abstention.
    `grounding` (a modes.calls.ModeCalls) adds the per-question evidence of the SGV and EVPV modes at the
    prompt's {evidence}, gates the judges' scores, and in the zoom mode gives the visual judge close-ups of
    the regions it named (just before its task); None is plain VERDICT.
    """

    def __init__(
        self,
        client: Client,
        name: str,
        max_tokens: int | None = None,
        score_only: bool = True,
        fmt: str | JudgeFormat = "text",
        weighted: bool = False,
        top_logprobs: int = 20,
        seed: int = 0,
        grounding: Any = None,
        layout: str = DEFAULT_LAYOUT,
    ):
        self.client, self.name, self.score_only, self.seed, self.layout = (
            client,
            name,
            score_only,
            seed,
            layout,
        )
        check_layout(layout)
        self.format = fmt if isinstance(fmt, JudgeFormat) else JudgeFormat(fmt)
        if not (isinstance(top_logprobs, int) and 0 <= top_logprobs <= 20) or (
            weighted and top_logprobs == 0
        ):
            raise ValueError(
                f"need top_logprobs in 1..20 for a weighted score (0..20 otherwise), got {top_logprobs!r}"
            )
        self.weighted, self.top_logprobs, self._max_tokens = weighted, top_logprobs, max_tokens
        self.prompt, self.grounding = load_prompt(name), grounding
        if (
            grounding is not None
            and grounding.mode.active
            and layout == "per-role"
            and "{evidence}" not in self.prompt["context"]
        ):  # the shared layout always shows it
            raise ValueError(
                f"{self.prompt.path} has no {{evidence}} placeholder, so judge mode "
                f"{grounding.mode.name!r} could not show the judge its evidence"
            )
        self._lock = threading.Lock()
        self._counts = dict(calls=0, replies=0, parsed=0, retries=0, abstentions=0)

    def __repr__(self) -> str:
        return (
            f"Judge({self.name!r}, fmt={self.format.requested!r}, score_only={self.score_only}, "
            f"weighted={self.weighted})"
        )

    @property
    def counts(self) -> dict:
        with self._lock:
            return dict(self._counts)

    def params(self, fmt: str) -> tuple:
        """(the request's parameters, the follow-up's) for format fmt."""
        max_tokens = self._max_tokens or ((24 if fmt == "json" else 16) if self.score_only else 256)
        params = dict(temperature=0.0, seed=self.seed, max_tokens=max_tokens)
        if fmt == "json":
            params["response_format"] = response_format("judgement", score_schema(self.score_only))
        if fmt != "text" and self.top_logprobs:
            params.update(logprobs=True, top_logprobs=self.top_logprobs)
        return params, params if fmt == "json" else {**params, "max_tokens": 16}

    def _read(self, response: dict, fmt: str, step: str) -> tuple:
        """(sampled, weighted, digit mass, reason) from a response; ValueError saying why when it holds no
        valid score."""
        choice = response["choices"][0]
        text = choice["message"]["content"]
        if fmt == "json":
            s = json_score(text, self.score_only)
        elif math.isnan(s := parse_score(text, "unit" if fmt == "text" else "digit", step)):
            raise ValueError("no valid score line")
        weighted = logprob_score(choice.get("logprobs"), fmt, step) if fmt != "text" else math.nan
        mass = (
            math.nan if math.isnan(weighted) else float(digit_probs(choice.get("logprobs"), fmt, step).sum())
        )
        return s, weighted, mass, reason_of(text, fmt)

    def reply_line(self, fmt: str) -> str:
        """What the request asks the reply to be, in format fmt (its prompt's {reply})."""
        if fmt == "json":
            return JSON_SCORE_ONLY if self.score_only else JSON_EXPLAIN
        return (SCORE_ONLY if self.score_only else EXPLAIN).format(scale=scale_of(fmt))

    def task(self, step: str, fmt: str | None = None) -> str:
        """The judge's task about `step` as its request holds it (the prompt's [task]: the candidate, fenced,
        and the reply line of fmt, by default the format in use): the text no other request of a step holds,
        in every layout (perf/overhead.py's floor of computed tokens)."""
        return self.prompt.render("task", step=fence(step), reply=self.reply_line(fmt or self.format.active))

    def _ask(self, state: verdict.State, step: str, fmt: str) -> dict:
        """One call in format fmt: its record without the gate (see judgement), NaN where a score is missing
        and a None reason when both replies were unreadable."""
        reply = self.reply_line(fmt)
        if fmt == "json":
            follow_up = lambda reason: JSON_FOLLOW_UP.format(reason=reason)
        else:
            follow_up = lambda reason: FOLLOW_UP.format(scale=scale_of(fmt))
        evidence, looks, zoomed = "", (), {}
        if self.grounding is not None:
            evidence = self.grounding.evidence(self.name, state)
            if (
                self.grounding.mode.zoom and self.name == "visual"
            ):  # ReVISE's look again: close-ups of its regions
                note, looks, zoomed["zoom"] = self.grounding.look(state, step)
                evidence += note
        msgs = role_messages(
            self.name, state, self.layout, evidence, looks=looks, step=fence(step), reply=reply
        )
        value, responses, _ = ask(
            self.client.chat, msgs, lambda r: self._read(r, fmt, step), follow_up, *self.params(fmt)
        )
        sampled, weighted, share, reason = (math.nan,) * 3 + (None,) if value is None else value  # unreadable
        return {
            "judge": self.name,
            "format": fmt,
            "replies": len(responses),
            "sampled": sampled,
            "weighted": weighted,
            "digit_share": share,
            "reason": reason,
            **zoomed,
        }

    def judgement(self, state: verdict.State, step: str) -> verdict.Judgement:
        """ŝ of `step` after state.steps, with this call's record; verdict.step calls this, and keeps the
        record in StepRecord.calls, in call order. The record: the judge's name, the format used, how many
        replies it took, "sampled" (what the reply said), "weighted" (logprob_score) and "digit_share" (the
        digits' share of the score token's top_logprobs), each None where there is none (all three when it
        abstained), and "reason" (replies.reason_of: the json format's "reason", the prose before a text score
        line; None without a readable reply). A judge mode adds "zoom" (ModeCalls.look: the path, why and the
        boxes of the close-ups the visual judge saw) and "gate" (ModeCalls.gated: ŝ before and after the gate,
        with ν_t, r and α(r)). The scores are the judge's own, before the gate; ŝ is after it."""
        call = self.format.run(lambda fmt: self._ask(state, step, fmt))  # json, or text once refused
        sampled, weighted = call["sampled"], call["weighted"]
        s = weighted if self.weighted and not math.isnan(weighted) else sampled
        with self._lock:
            c, tries = self._counts, call["replies"]
            c["calls"], c["replies"], c["retries"] = (
                c["calls"] + 1,
                c["replies"] + tries,
                c["retries"] + tries - 1,
            )
            c["parsed"], c["abstentions"] = (
                c["parsed"] + (not math.isnan(s)),
                c["abstentions"] + math.isnan(s),
            )
        record = {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in call.items()}  # JSON
        gate = None
        if self.grounding is not None:  # a judge mode's gate (EVPV), on the judges it targets
            s, gate = self.grounding.gated(self.name, state, step, s)
        return verdict.Judgement(s, record if gate is None else {**record, "gate": gate})

    def __call__(self, state: verdict.State, step: str) -> float:
        """ŝ in [0, 1], or NaN (abstain): judgement(state, step) without its record."""
        return self.judgement(state, step).score


def make_judges(
    client: Client, grounding: Any = None, fmt: str | JudgeFormat = "text", **judge_kwargs
) -> list:
    """The three judges in the order of verdict.JUDGES and verdict.STUBBORNNESS, sharing `grounding`
    (a judge mode's per-question evidence; None for plain VERDICT) and one JudgeFormat (so a fallback
    from json to text holds for all three)."""
    fmt = fmt if isinstance(fmt, JudgeFormat) else JudgeFormat(fmt)
    return [Judge(client, name, grounding=grounding, fmt=fmt, **judge_kwargs) for name in verdict.JUDGES]


def record(judge_fns: Sequence) -> dict:
    """What a trace's meta keeps about a run's Judges ({} for plain callables or none): the reply format asked
    for and the one used, when it fell back (JudgeFormat.record), and which score fed ŝ. Each call's own
    scores and reason are in its step's "calls" (Judge.judgement)."""
    if not judge_fns or not all(isinstance(j, Judge) for j in judge_fns):
        return {}
    fed = "weighted" if judge_fns[0].weighted else "sampled"
    return {"judges": {**judge_fns[0].format.record(), "s_hat": fed}}


def add_format_arg(parser) -> None:
    """--judge-format, for demo.py and evaluate.py."""
    parser.add_argument(
        "--judge-format",
        choices=FORMATS,
        default="json",
        help="the judges' replies: json (a JSON schema in response_format, score 0-9; falls back to "
        "text, once and said aloud, if the server refuses it), text (a 'Score:' line, 0 to 1), "
        "digit (a 'Score:' digit, 0 to 9) (json)",
    )


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
