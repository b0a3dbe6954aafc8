"""Reading a chain's final answer as VLMEvalKit reads a response: an option letter (can_infer), or a
free-form value (MathVista), with an optional model that extracts what the rules cannot.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026, scores six multiple-choice benchmarks with VLMEvalKit. Its
exact-matching rules (vlmeval/utils/matching_util.py as of commit e8e78f05, 2026-08-18: the letter
must be among the last four tokens, option texts only match a reply at most twice their total
length, and "answer is X" is a last resort) are `can_infer` here, rule for rule; test_answers.py
checks them on a table of 73 replies traced by hand.

Free-form values (MathVista's free_form rows) are compared here, where VLMEvalKit asks a GPT judge
to extract the value and then compares. The differences:
- the value is read from the final answer itself (one number, or the text), with no judge unless
  --extract-model names one; VLMEvalKit always calls gpt-4o-mini (5 tries, then counts it wrong);
- floats are equal when both round to the same value at the row's `precision` (default: the answer's
  own decimals); VLMEvalKit compares floats exactly and ignores `precision` (1.449 vs 1.45 is
  wrong);
- an integer answer accepts "14.0"; VLMEvalKit's int("14.0") fails, so it counts that wrong;
- text and list answers are compared after normalising case, spaces and outer punctuation;
  VLMEvalKit counts every text and list answer wrong (its comparison reads the string 'None');
- the row's `unit` is removed from the value; VLMEvalKit does not read `unit` (its judge drops
  units).
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass

from judges import chat_messages, text_of
from verdict_lab.layouts import lab_prompt

REFUSALS = (
    "Sorry, I can't help with images of people yet.",
    "I can't process this file.",
    "I'm sorry, but without the image provided",
    "Cannot determine the answer",
)
API_FAILURE = "Failed to obtain answer via API"
_SEPARATORS = re.compile(r"[.()\[\],:;!*#{}]")
_ANSWER_IS = re.compile(r"answer\s+is\s+\**([ABCD])", re.I)
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")


@dataclass(frozen=True)
class Value:
    """How a free-form answer is compared: answer_type "integer", "float", "text" or "list"; the
    number of decimals a float is rounded to (None: the answer's own); the unit a reply may append.
    """

    answer_type: str = "text"
    precision: int | None = None
    unit: str = ""
    dtype: str = (
        "object"  # the answer column's pandas dtype (harness/cells.py): VLMEvalKit's int() reads it
    )


# ----------------------------------------------------------------------------- options (can_infer)


def can_infer_option(answer: str, choices: dict):
    """A letter, "Z" (the model declined) or False. The reply is cut into tokens at whitespace and
    at . ( ) [ ] , : ; ! * # { }; exactly one distinct option letter must be a token, and its first
    occurrence among the last four tokens. Else a lone token Z declines, else "answer is X" (X in
    A-D, case-insensitive, asterisks allowed) names X if it is an option."""
    if API_FAILURE in answer:
        return False
    if any(r in answer for r in REFUSALS):
        return "Z"
    tokens = _SEPARATORS.sub(" ", answer).split()
    found = [k for k in choices if k in tokens]
    if len(found) == 1 and tokens.index(found[0]) > len(tokens) - 5:
        return found[0]
    if not found and "Z" in tokens:
        return "Z"
    m = _ANSWER_IS.search(answer)
    return m.group(1).upper() if m and m.group(1).upper() in choices else False


def can_infer_text(answer: str, choices: dict):
    """The one option whose text is a substring of the reply (both lower-cased), or False. A reply
    longer than twice the options' total length matches nothing."""
    answer = answer.lower()
    if len(answer) > 2 * sum(len(str(v)) for v in choices.values()):
        return False
    found = [k for k, v in choices.items() if str(v).lower() in answer]
    return found[0] if len(found) == 1 else False


def can_infer(answer, choices: dict):
    """VLMEvalKit's exact matching: can_infer_option, else can_infer_text. A letter, "Z" or
    False."""
    answer = str(answer)
    return can_infer_option(answer, choices) or can_infer_text(answer, choices)


def extract(text, options) -> tuple:
    """(letter or None, how) from a final answer: how is "letter" (can_infer_option), "text"
    (can_infer_text), "declined" (Z: the model said it cannot answer; scored wrong) or "unanswered"
    (nothing matched, or no final answer)."""
    if not text:
        return None, "unanswered"
    choices = dict(options)
    letter = can_infer_option(text, choices)
    if letter:
        return (None, "declined") if letter == "Z" else (letter, "letter")
    letter = can_infer_text(text, choices)
    return (letter, "text") if letter else (None, "unanswered")


# ----------------------------------------------------------------------------- free-form values


def _normal_text(s: str) -> str:
    return " ".join(str(s).lower().split()).strip(" .,;:!?'\"`*$")


def read_value(text, value: Value) -> str | None:
    """The value a final answer gives, as text: \\boxed{}, $, ** and the unit removed, thousands
    commas dropped; a number type takes the one number in it (None if there are none or several)."""
    if not text:
        return None
    s = re.sub(r"\\boxed\{(.*)\}", r"\1", str(text)).replace("$", "").replace("**", "").strip()
    if value.unit:
        s = re.sub(re.escape(value.unit.strip()) + r"\s*\.?\s*$", "", s, flags=re.I).strip()
    if value.answer_type in ("integer", "float"):
        numbers = _NUMBER.findall(re.sub(r"(?<=\d),(?=\d{3}\b)", "", s))
        return numbers[0] if len(numbers) == 1 else None
    return _normal_text(s) or None


def _as_list(s: str) -> list | None:
    try:
        v = ast.literal_eval(s)
    except (ValueError, SyntaxError):
        v = s.strip("[]()").split(",")
    return [_normal_text(x) for x in v] if isinstance(v, (list, tuple)) else None


def value_matches(pred: str, answer: str, value: Value) -> bool:
    """integer: the same whole number ("14.0" is 14); float: equal after rounding both to
    `precision` decimals (default: the answer's); list: the same normalised elements in order; text:
    the same normalised text (case, spaces, outer punctuation)."""
    if value.answer_type in ("integer", "float"):
        try:
            p, a = float(pred), float(answer)
        except ValueError:
            return False
        if not (math.isfinite(p) and math.isfinite(a)):
            return False
        if value.answer_type == "integer":
            return p == a and p == int(p)
        digits = value.precision if value.precision is not None else len(answer.partition(".")[2])
        return round(p, digits) == round(a, digits)
    if value.answer_type == "list":
        p, a = _as_list(pred), _as_list(answer)
        return p is not None and p == a
    return _normal_text(pred) == _normal_text(answer)


def typed(answer: str, dtype: str):
    """A printed answer cell back as the value pandas held, where that matters: a float column's
    "14.0" is the float 14.0, so int() of it is 14 (int("14.0") fails). An int column's cell reads
    the same under int() and float() as its text does, so it stays text, as any other cell does."""
    try:
        return float(answer) if dtype == "float" else answer
    except ValueError:
        return answer


def post_check(response, answer: str, value: Value):
    """VLMEvalKit's MathVista rule (utils/mathvista.py post_check) on a free-form row: the value
    read, or None when it is not read. integer: int() of the reply and the answer, equal; float:
    float() of both, equal exactly (1.449 is not 1.45); any other answer_type compares the string
    'None' with the answer, so it is never right. Returns (value read or None, right)."""
    ans = typed(answer, value.dtype)
    kind = {"integer": int, "float": float}.get(value.answer_type)
    if kind is None:  # res = str(None): never the answer (a cell "None" is a missing value, "nan")
        return None, False
    try:
        res = kind(response)
        ans = kind(ans)
    except (ValueError, OverflowError, TypeError):
        return (res if "res" in locals() else None), False
    return res, res == ans


def score(item, text) -> tuple:
    """(prediction, how, correct) for an item (options, answer, value) and its final answer text, as
    VLMEvalKit scores it under exact matching: a multiple-choice reply nothing is read from is "Z",
    which is right when the answer is Z; a MathVista value by its rule (post_check): a value it
    reads as right but 0 is not taken (VLMEvalKit then asks its judge), and a reply it cannot read
    is unanswered."""
    if item.value is None:
        pred, how = extract(text, item.options)
        return pred, how, (pred or "Z") == item.answer
    res, right = post_check(
        str(text), item.answer, item.value
    )  # None reads "None": no int() nor float()
    if res is None or (
        right and not res
    ):  # not read, or the falsy 0 that VLMEvalKit's prefetch drops
        return (None if res is None else str(res)), "unanswered", False
    return str(res), "value", right


def prefetched(how: str, correct: bool) -> bool:
    """MathVista's post_check(line, prefetch=True) is truthy, so VLMEvalKit logs "Prefetch succeed"
    and asks no judge (utils/mathvista.py MathVista_auxeval at e8e78f05), for a final answer score()
    read as `how`: a multiple-choice reply can_infer reads, right or wrong, a "Z" included
    (declined); a free-form value only when it is right (score() reads a right 0 as unanswered:
    post_check's 0 is falsy). Every other row goes on to VLMEvalKit's judge."""
    return how in ("letter", "text", "declined") or (how == "value" and correct)


# ---------------------------------------------------------------------------- a model that extracts

# VLMEvalKit asks its judge three times; each try here is hotter, so a cache does not repeat it
TRIES = 3


def ask_model(chat, item, text: str) -> tuple:
    """(prediction, how, correct) from an extraction model, for a final answer the rules could not
    read: prompts/extract_choice.txt (the options) or extract_value.txt (a free-form value), text
    only, at temperatures 0, 0.5, 1. A reply that can_infer (or read_value) cannot read uses a try.
    After TRIES, the item stays unanswered (VLMEvalKit then picks a random letter)."""
    if item.value is None:
        prompt = lab_prompt("extract_choice")
        user = prompt.render(
            "user",
            question=item.question,
            prediction=text,
            options="\n".join(f"{k}. {v}" for k, v in item.options),
        )
    else:
        prompt = lab_prompt("extract_value")
        user = prompt.render("user", question=item.question, prediction=text)
    for i in range(TRIES):
        reply = text_of(
            chat(chat_messages(prompt["system"], (), user), temperature=0.5 * i, max_tokens=32)
        )
        if item.value is None:
            letter = can_infer(reply, dict(item.options))
            if letter:
                return (
                    (None, "declined", False)
                    if letter == "Z"
                    else (letter, "judge", letter == item.answer)
                )
        elif (pred := read_value(reply, item.value)) is not None and _normal_text(reply) != "none":
            return (
                pred,
                "judge",
                post_check(pred, item.answer, item.value)[1],
            )  # the value, by VLMEvalKit's rule
    return None, "unanswered", False
