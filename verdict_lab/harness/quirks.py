"""VLMEvalKit's quirks, counted: which rows of a run a quirk of VLMEvalKit's reading decided, and
the hit each row would have under the corrected reading.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026, reports VLMEvalKit's accuracy. The harness reproduces it,
quirks included (docs/parity.md), so that its numbers are comparable with published tables; this
module says how many rows each quirk decided and what the corrected reading gives, so that a reader
sees both numbers.

A quirk decided a row when correcting it alone changes the row's hit, on the same reply. The
corrected reading corrects them all at once. It re-reads the replies the run got: the prompts stay
VLMEvalKit's (an option it dropped was not shown). Only rules are re-run: a row whose letter the
extraction model chose, an error row, a JSONL file's row, and a row whose hit the rules do not give
back as recorded keep their hit.

Two quirks are of the inputs, not of the reading (INPUTS): images re-saved by VLMEvalKit's
dump_image whose pixels that changed, and the whitespace VLMEvalKit's build_prompt leaves at the end
of the prompt. They are reproduced by default (items.Inputs), so the run's model saw what
VLMEvalKit's would; a row they touched is counted, from what the reading recorded (its
"as_vlmevalkit"), and keeps its hit under the corrected reading: what the model would have answered
otherwise takes another run (--original-images, --stripped-prompts).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from verdict_lab.harness import answers, tsv
from verdict_lab.harness.cells import NA_VALUES, shown
from verdict_lab.harness.items import LETTER
from verdict_lab.harness.rows import Row

QUIRKS = {  # name -> what the summary says it did
    "float_options": 'numeric option cells printed as pandas prints them ("1" as "1.0")',
    "na_options": 'option cells "None", "NA", "null" (pandas\' missing values) dropped',
    "unstripped": 'option and answer cells not stripped (" A" is no letter)',
    "float_exact": "MathVista floats compared exactly, not at the row's precision",
    "int_of_float": 'MathVista integers written as floats ("14.0") failing int()',
    "text_never": "MathVista text and list answers never right",
    "zero_dropped": "MathVista answer 0 not prefetched",
    "z_answer": 'answer cell "Z" right on a reply nothing was read from',
    "resaved_images": (
        "images sent as VLMEvalKit's dump_image re-saves them, with other pixels (an input: "
        "the corrected reading keeps the hit; --original-images sends the file's own)"
    ),
    "prompt_whitespace": (
        'the prompt ending as VLMEvalKit\'s build_prompt ends it, "...options above. \\n" '
        "(an input: the corrected reading keeps the hit; --stripped-prompts drops it)"
    ),
}
INPUTS = ("resaved_images", "prompt_whitespace")  # quirks of what the model was sent
_MC = ("answer", "answer_option")  # besides the option letters, the cells the option quirks touch


def _cell(cell: str, dtype: str, col: str, fixes) -> str | None:
    """A cell as VLMEvalKit's pandas shows it (cells.shown), with the option quirks in `fixes`
    corrected."""
    if not (LETTER.fullmatch(col) or col in _MC):
        return shown(cell, dtype)
    if cell in NA_VALUES:
        keep = (
            "na_options" in fixes and cell and LETTER.fullmatch(col)
        )  # no missing-value name has spaces
        return cell if keep else None
    if dtype in ("int", "float") and "float_options" in fixes:
        return cell.strip()  # as written (pandas drops the spaces around a number too)
    v = shown(cell, dtype)
    return v.strip() if "unstripped" in fixes and dtype == "object" else v


def _post_check(response: str, answer: str, value: answers.Value, fixes, prefetch: bool) -> bool:
    """answers.post_check's hit, with the MathVista quirks in `fixes` corrected."""
    if value.answer_type not in ("integer", "float"):  # VLMEvalKit compares the string 'None'
        read = answers.read_value(response, value) if "text_never" in fixes else None
        return read is not None and answers.value_matches(read, answer, value)
    kind = int if value.answer_type == "integer" else float

    def number(s):
        try:
            return kind(s)
        except (ValueError, OverflowError, TypeError):
            if kind is int and "int_of_float" in fixes:  # int("14.0") fails; float() reads it
                try:
                    f = float(s)
                except (ValueError, OverflowError, TypeError):
                    return None
                return int(f) if f.is_integer() else None
            return None

    res, ans = number(response), number(answers.typed(answer, value.dtype))
    if res is None or ans is None:
        return False
    right = res == ans
    if kind is float and "float_exact" in fixes and not right:
        digits = value.precision if value.precision is not None else len(answer.partition(".")[2])
        right = round(res, digits) == round(ans, digits)
    return right and (
        bool(res) or not prefetch or "zero_dropped" in fixes
    )  # a falsy 0 is not prefetched


def hit(r: Row, reading: dict, fixes=frozenset()) -> bool | None:
    """r's hit with the quirks in `fixes` corrected, from its input cells and reply; None when the
    rules cannot give it (not a TSV row, an error, a letter the extraction model chose)."""
    scoring = reading.get("scoring", {})
    if r.error or not reading.get("file", "").endswith(".tsv"):
        return None
    kind = scoring.get("kind") or tsv.kind(r.data)
    dtypes = scoring.get("dtypes", {})
    row = defaultdict(
        lambda: None, {k: _cell(v, dtypes.get(k, "object"), k, fixes) for k, v in r.input.items()}
    )
    try:
        q = tsv.question(row, [k for k in r.input if LETTER.fullmatch(k)], kind, dtypes)
    except ValueError:
        return None
    if (
        q.get("value") is not None
    ):  # a MathVista value: the prefetch reads the reply, the judge's its value
        judged = r.extracted == "judge"
        text = r.pred if judged else r.prediction
        return _post_check(
            "" if text is None else str(text), q["answer"], q["value"], fixes, not judged
        )
    if r.extracted == "judge":
        return None
    pred, _ = answers.extract(r.prediction, q["options"])
    if "z_answer" in fixes and "Z" not in dict(q["options"]):
        return pred == q["answer"]
    return (pred or "Z") == q["answer"]


def applicable(r: Row, reading: dict) -> list:
    """The quirks that could decide r (a cheap look at its cells), in QUIRKS' order."""
    dtypes = reading.get("scoring", {}).get("dtypes", {})
    kind = reading.get("scoring", {}).get("kind") or tsv.kind(r.data)
    out = set()
    for k, v in r.input.items():
        if not (LETTER.fullmatch(k) or k in _MC):
            continue
        dtype = dtypes.get(k, "object")
        if v in NA_VALUES and v and LETTER.fullmatch(k):
            out.add("na_options")
        elif v not in NA_VALUES and dtype in ("int", "float") and shown(v, dtype) != v.strip():
            out.add("float_options")
        elif v not in NA_VALUES and dtype == "object" and v != v.strip():
            out.add("unstripped")
    if kind == "mathvista":
        out |= {"float_exact", "int_of_float", "text_never", "zero_dropped"}
    elif r.input.get("answer") == "Z":
        out.add("z_answer")
    return [q for q in QUIRKS if q in out]


def inputs(r: Row, reading: dict, resaved: set) -> list:
    """The input quirks that touched r, from its file's reading: its images' pixels changed by
    dump_image's re-save (`resaved`: the reading's ids, as a set), and VLMEvalKit's whitespace in a
    prompt built from the question and options (build_question: every TSV but CV-Bench's prompt
    column and MathVista's question cell; a JSONL file is the project's own, not VLMEvalKit's)."""
    sent = reading.get("as_vlmevalkit") or {}
    kind = reading.get("scoring", {}).get("kind") or tsv.kind(r.data)
    built = str(reading.get("file")).endswith(".tsv") and kind in ("mcq", "mmmu")
    return ["resaved_images"] * (r.id in resaved) + ["prompt_whitespace"] * (
        built and sent.get("prompt") == "build_prompt"
    )


def resaved_of(reading: dict) -> set:
    """The ids of the rows whose pixels dump_image's re-save changed, as the reading recorded
    them."""
    return set((reading.get("as_vlmevalkit") or {}).get("resaved", ()))


def decided(r: Row, reading: dict, resaved: set) -> tuple:
    """([the quirks that decided r, then the input quirks that touched it], r's hit under the
    corrected reading); resaved: resaved_of(reading)."""
    qs, touched = applicable(r, reading), inputs(r, reading, resaved)
    if (
        not qs or hit(r, reading) != r.correct
    ):  # nothing to correct, or a hit the rules do not give back
        return touched, r.correct
    by = [q for q in qs if hit(r, reading, {q}) != r.correct]
    return by + touched, hit(r, reading, set(qs))


def tally(rows: list, reading: dict) -> tuple:
    """({quirk: rows it decided (an input quirk: rows it touched)}, only quirks with a row; the rows
    with their corrected hits)."""
    counts, fixed, resaved = dict.fromkeys(QUIRKS, 0), [], resaved_of(reading)
    for r in rows:
        qs, h = decided(r, reading, resaved)
        for q in qs:
            counts[q] += 1
        fixed.append(replace(r, correct=h))
    return {q: n for q, n in counts.items() if n}, fixed
