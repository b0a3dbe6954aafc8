"""ReVISE's GRPO rewards as plain functions, ready for any GRPO trainer.

Cheng, Goel and Bilen, "Think, Look, and Revise: Inconsistency-Aware Visual Self-Correction in
MLLMs" (ReVISE), §3.3: format (1 for the prescribed tags, −1 otherwise), self-correction (−1 when
the model emits "re-examine" but answers incorrectly, else 0), grounding (mean IoU against reference
boxes plus the positive localisation improvement, 0 when no box is produced or updated) and answer
accuracy.

TRL's GRPOTrainer calls a reward as reward(prompts=..., completions=..., completion_ids=...,
trainer_state=..., log_extra=..., log_metric=..., [environments=...,] **columns), every other
dataset column a keyword argument (trl@f2cd5771, grpo_trainer.py, _calculate_rewards). So a
reward's only named parameters are `completions` and the one column it reads (`solution` or
`ref_boxes`); everything else lands in **kwargs and is ignored. With a response template
(transformers >= 5) or tools, TRL hands over each completion parsed, its <think>…</think> in
"reasoning_content": turns() puts it back. The patterns are bound by factories
(make_accuracy_reward, make_format_reward, make_self_correction_reward), never taken from a column;
accuracy_reward, format_reward and self_correction_reward are their defaults. docs/rewards.md shows
them as a GRPOTrainer's reward_funcs. Left out: the training itself.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Callable, Sequence

import numpy as np

from verdict_lab.modes.zoom import check_box, iou

FORMAT = re.compile(
    r"\s*<think>.*?</think>\s*(?:<tool_call>.*?</tool_call>|<answer>.*?</answer>)\s*", re.S
)
REEXAMINE = re.compile(r"(?i)\bre-?examin")  # "re-examine", "Re-examining", "reexamined", ...
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)
# The keys TRL's response parsing moves <think>…</think> to, by chat template (trl@f2cd5771,
# chat_template_utils.py: qwen3_template and most others "reasoning_content"; LFM2.5's and
# gpt-oss's "thinking").
THINKING = ("reasoning_content", "thinking")
_BOXED = re.compile(r"\\boxed\{((?:[^{}]|\{[^{}]*\})*)\}")
_NUM = r"\s*(-?\d+(?:\.\d+)?)\s*"
# A box [x1, y1, x2, y2] is four plain decimal numbers.
_BOX = re.compile(r"\[" + ",".join([_NUM] * 4) + r"\]")


def turns(completion) -> list:
    """The assistant's text, one string per assistant turn, from either completion format TRL
    passes:

    - standard: a string, which is one turn;
    - conversational: a list of messages. Each message whose role is "assistant" (or that has no
      role) is a turn; "tool", "user" and "system" messages are not the model's words and are
      skipped. Its text is its thinking, then the content (a string, or the "text" parts of a
      list), then each structured tool call written as Qwen2.5's chat template writes it:
      <tool_call>{"name": ..., "arguments": ...}</tool_call>. The thinking is what TRL's response
      parsing (transformers >= 5 with a response template, and GRPOTrainer with tools) moved out
      of the text: "reasoning_content" (Qwen2.5, Qwen3, Qwen3-VL), or "thinking" where a template
      names it so (LFM2.5, gpt-oss). It is put back as Qwen3's template writes it,
      "<think>\n" + thinking + "\n</think>\n\n" before the content, so every reward reads what
      the model wrote.
    What a model's message holds is its output, malformed or not: content that is no text adds no
    text, tool calls that are not a list of objects add none, and arguments no JSON can write
    (nested too deep, an integer of more digits than Python writes) are written as null."""
    if isinstance(completion, str):
        return [completion]
    if not isinstance(completion, (list, tuple)):
        raise ValueError(
            f"a completion must be a string or a list of messages, got {type(completion).__name__}"
        )
    out = []
    for m in completion:
        if not isinstance(m, dict):
            raise ValueError(f"a message must be a dict with a 'content', got {type(m).__name__}")
        if m.get("role", "assistant") != "assistant":
            continue
        c, calls = m.get("content"), m.get("tool_calls")
        parts = c if isinstance(c, list) else []
        text = (
            c
            if isinstance(c, str)
            else "".join(p.get("text", "") for p in parts if isinstance(p, dict))
        )
        calls = [t for t in calls if isinstance(t, dict)] if isinstance(calls, list) else []
        out.append(_thinking(m, text) + "".join(_tool_call_text(t) for t in calls))
    return out


def _thinking(message: dict, text: str) -> str:
    """The content `text` after the message's parsed-out thinking, as Qwen3's template writes
    them; the text alone when the message has none (or it is no string)."""
    think = next(
        (t for t in (message.get(k) for k in THINKING) if isinstance(t, str)),
        None,
    )
    if think is None:
        return text
    return "<think>\n" + think.strip("\n") + "\n</think>\n\n" + text.lstrip("\n")


def _tool_call_text(call: dict) -> str:
    f = call.get("function") if isinstance(call.get("function"), dict) else call
    args = f.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except (ValueError, RecursionError):
            pass
    try:
        written = json.dumps({"name": f.get("name"), "arguments": args})
    except (ValueError, RecursionError, TypeError):  # too deep, too many digits, no JSON value
        written = json.dumps({"name": str(f.get("name")), "arguments": None})
    return "<tool_call>" + written + "</tool_call>"


def final_answer(texts: Sequence[str], answer_pattern=ANSWER) -> str | None:
    """The last <answer>…</answer> over the turns (the content of a \\boxed{…} inside it, if any);
    None when there is none."""
    found = [m for t in texts for m in re.findall(answer_pattern, t)]
    if not found:
        return None
    boxed = _BOXED.findall(found[-1])
    return boxed[-1] if boxed else found[-1]


def _norm(s: Any) -> str:
    s = " ".join(str(s).replace("$", "").split()).casefold().rstrip(".")
    while len(s) >= 2 and s[0] + s[-1] in ("()", "[]", '""', "''"):
        s = s[1:-1].strip()
    return s


def is_correct(answer: str | None, solution: Any) -> bool:
    """Whether a final answer matches the solution: both stripped of "$", whitespace collapsed, case
    folded, a trailing "." and enclosing (), [] or quotes removed; then equal as numbers if both are
    numbers ("3" = "3.0"), else equal as strings ("(B)" = "b"). No answer is never correct."""
    if answer is None:
        return False
    a, b = _norm(answer), _norm(solution)
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
    except ValueError:
        return a == b


def _column(values, n: int, name: str) -> list:
    """A dataset column as TRL passes it: one value per completion."""
    if values is None or isinstance(values, (str, bytes)) or len(values) != n:
        raise ValueError(f"{name} must give one value per completion ({n}), got {name}={values!r}")
    return list(values)


def _pattern(pattern, name: str) -> re.Pattern:
    """A regular expression given as a string or compiled; anything else raises ValueError naming
    it."""
    if not isinstance(pattern, (str, re.Pattern)):
        raise ValueError(
            f"{name} must be a regular expression (str or re.Pattern), got {name}={pattern!r}"
        )
    try:
        return re.compile(pattern)
    except re.error as e:
        raise ValueError(f"{name}={pattern!r} is not a regular expression: {e}") from None


def make_accuracy_reward(answer_pattern=ANSWER) -> Callable:
    """The answer-accuracy reward, reading the final answer with `answer_pattern` (its group 1 is
    the answer):

    accuracy_reward(completions, solution, **kwargs): 1.0 when the final answer (final_answer) is
    correct (is_correct), else 0.0; None where the solution is None (TRL then leaves this reward out
    for that sample).
    """
    answer = _pattern(answer_pattern, "answer_pattern")

    def accuracy_reward(completions, solution=None, **kwargs) -> list:
        sol = _column(solution, len(completions), "solution")
        return [
            None if s is None else float(is_correct(final_answer(turns(c), answer), s))
            for c, s in zip(completions, sol)
        ]

    return accuracy_reward


def make_format_reward(format_pattern=FORMAT) -> Callable:
    """The format reward for the prescribed tags `format_pattern`:

    format_reward(completions, **kwargs): 1.0 when every assistant turn fully matches the pattern
    (and there is one), else −1.0.

    ReVISE does not list its prescribed tags. The default is <think>…</think> followed by either
    <tool_call>…</tool_call> or <answer>…</answer>, with nothing but whitespace around them.
    """
    tags = _pattern(format_pattern, "format_pattern")

    def format_reward(completions, **kwargs) -> list:
        def ok(c) -> bool:
            t = turns(c)
            return bool(t) and all(tags.fullmatch(x) for x in t)

        return [1.0 if ok(c) else -1.0 for c in completions]

    return format_reward


def make_self_correction_reward(reexamine_pattern=REEXAMINE, answer_pattern=ANSWER) -> Callable:
    """The self-correction reward, `reexamine_pattern` saying "re-examine", `answer_pattern` the
    answer:

    self_correction_reward(completions, solution, **kwargs): −1.0 when an assistant turn says
    "re-examine" and the final answer is wrong, else 0.0; None where the solution is None. As
    written in §3.3 there is no bonus for a re-examination that ends right: "reflection is rewarded
    only when the final answer is correct" through the accuracy reward.
    """
    reexamine = _pattern(reexamine_pattern, "reexamine_pattern")
    answer = _pattern(answer_pattern, "answer_pattern")

    def self_correction_reward(completions, solution=None, **kwargs) -> list:
        def reward(c, s) -> float | None:
            if s is None:
                return None
            t = turns(c)
            wrong = not is_correct(final_answer(t, answer), s)
            return -1.0 if wrong and any(reexamine.search(x) for x in t) else 0.0

        return [
            reward(c, s)
            for c, s in zip(completions, _column(solution, len(completions), "solution"))
        ]

    return self_correction_reward


accuracy_reward = make_accuracy_reward()
format_reward = make_format_reward()
self_correction_reward = make_self_correction_reward()


def matched_iou(pred, ref) -> float:
    """Mean IoU of predicted boxes against reference boxes, matched one to one: repeatedly take the
    pair with the highest IoU (lowest indices on ties) and remove both.
    m = Σ matched IoU / max(|pred|, |ref|), so a missed reference and a spare prediction each count
    as 0, and spraying boxes does not pay."""
    m = iou(pred, ref)  # [p, r]
    total, k = 0.0, min(m.shape)
    for _ in range(k):
        i, j = np.unravel_index(np.argmax(m), m.shape)
        total += max(m[i, j], 0.0)
        m[i, :], m[:, j] = -1.0, -1.0
    return float(total / max(m.shape))


def grounding_reward(completions, ref_boxes=None, **kwargs) -> list:
    """Grounding (§3.3): mean IoU against the reference boxes, plus the positive localisation
    improvement.

    The boxes a turn produces are the [x1, y1, x2, y2] lists of four numbers in its text (tool calls
    included, see `turns`). Let B_first and B_last be the boxes of the first and of the last
    assistant turn that produces any, and m = matched_iou. Then

      R = m(B_last, ref) + max(0, m(B_last, ref) − m(B_first, ref))      in [0, 2]

    R = 0 when no box is produced; the improvement term is 0 when the boxes are never updated (one
    turn with boxes; a string completion is one turn). ref_boxes: one list of reference boxes per
    completion, in the same convention as the model's boxes (ReVISE asks for [0, 1000]; IoU does not
    change when both are rescaled per axis, so de-normalising both to pixels gives the same R). None
    or [] for a sample means no grounding for it (e.g. a math question): its reward is None, which
    TRL leaves out. A reference box that is not a valid box raises ValueError naming it.
    """
    out = []
    for k, (c, r) in enumerate(zip(completions, _column(ref_boxes, len(completions), "ref_boxes"))):
        if r is None or len(r) == 0:
            out.append(None)
            continue
        r = [r] if np.ndim(r[0]) == 0 else r  # one box given flat
        ref = [check_box(b, f"ref_boxes[{k}][{i}]") for i, b in enumerate(r)]
        rounds = [
            b for b in ([[float(v) for v in m] for m in _BOX.findall(t)] for t in turns(c)) if b
        ]
        if not rounds:
            out.append(0.0)
            continue
        last = matched_iou(rounds[-1], ref)
        out.append(float(last + max(0.0, last - matched_iou(rounds[0], ref))))
    return out
