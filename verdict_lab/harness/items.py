"""A benchmark row ready to run (Item), a malformed one (Skipped), and what every reader shares: the
multiple-choice prompt, images decoded or found on disk, a row's fields checked.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026, reports accuracy on six multiple-choice benchmarks
(3DSRBench, CV-Bench-3D, CV-Bench-2D, BLINK, MMStar, AI2D_TEST) in VLMEvalKit's file format.

Image paths are relative to the data file's directory, or absolute inside its tree (VLMEvalKit's LOCALIZE
writes LMUData/images/<name>/...); one that resolves outside it (symlinks followed) is an error unless
allow_any_path.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from dataclasses import dataclass

from verdict_lab.harness.answers import Value
from judges import load as load_image

LETTER = re.compile(r"[A-Z]")
BAD_BYTE = re.compile("[\udc80-\udcff]")  # what surrogateescape makes of a byte that is not UTF-8


@dataclass(frozen=True)
class Item:
    """One question, ready to run."""

    data: str  # the benchmark: its file name without the extension
    id: str
    row: int  # line number in the file (TSV: where the record ends; the header is line 1)
    question: str  # the whole text the reasoner sees, options included
    options: tuple  # (("A", text), ...) the answer is read against; () for a free-form value
    answer: str  # the correct letter, or the value
    images: tuple = ()  # image bytes or file paths
    fields: tuple = ()  # ((column, cell), ...): every input column but the image
    value: Value | None = None  # how a free-form answer is compared (MathVista); None: multiple choice


@dataclass(frozen=True)
class Skipped:
    """A malformed row: never run, never scored, counted in the summary."""

    file: str
    row: int
    reason: str


def build_question(question: str, options, hint: str = "") -> str:
    """VLMEvalKit's multiple-choice prompt: Hint:, Question:, then Options: with "A. ..." lines and the
    request to choose; with no options (an MMMU open question), Hint: and Question: alone."""
    lines = ([f"Hint: {hint}"] if hint else []) + [f"Question: {question}"]
    if options:
        lines += (
            ["Options:"]
            + [f"{k}. {v}" for k, v in options]
            + ["Please select the correct answer from the options above."]
        )
    return "\n".join(lines)


def decode_image(s) -> bytes:
    """Bytes, base64 or a base64 data URL -> the bytes of an image that decodes; ValueError otherwise.
    The image is decoded now (images.load), so a truncated one fails here, not in the middle of a run."""
    try:
        data = (
            s
            if isinstance(s, bytes)
            else base64.b64decode(s.split(",", 1)[-1] if s.startswith("data:") else s, validate=True)
        )
        load_image(data)
    except (binascii.Error, ValueError) as e:
        raise ValueError(
            f"undecodable image ({len(s)} {'bytes' if isinstance(s, bytes) else 'chars'}: {e})"
        ) from None
    return data


def image_file(base: str, name: str, allow_any_path: bool = False, also: str = "") -> str:
    """The path of an image file a benchmark file names: relative to its directory `base` (or to `also`
    within it), or absolute inside `base`'s tree (VLMEvalKit's LOCALIZE writes LMUData/images/<name>/...).
    A path that resolves outside `base` after following symlinks raises ValueError unless allow_any_path,
    as do a missing file and one that does not decode."""
    full = os.path.normpath(os.path.join(base, name))
    if also and not os.path.isfile(full) and os.path.isfile(os.path.join(base, also, name)):
        full = os.path.normpath(os.path.join(base, also, name))
    if not allow_any_path:
        real, root = os.path.realpath(full), os.path.realpath(base)
        if os.path.commonpath([real, root]) != root:
            raise ValueError(
                f"image path {name} resolves to {real} (symlinks followed), outside {root}, the data file's "
                "directory tree; --allow-any-path reads it"
            )
    if not os.path.isfile(full):
        raise ValueError(f"image file not found: {name} (looked for {full})")
    load_image(full)  # decode now: a broken file is this row's error, not a failed request
    return full


def make_item(data, id, row, question, options, answer, images, hint: str, fields: tuple) -> Item:
    """A JSONL row's Item, its fields checked (ValueError names what is wrong). A TSV row is not checked:
    VLMEvalKit scores every row as pandas read it (tsv.py)."""
    answer = str(answer).strip() if answer is not None else ""
    if not (isinstance(question, str) and question.strip()):
        raise ValueError("missing question")
    if not answer:
        raise ValueError("missing answer")
    if len(options) < 2:  # a question with one option cannot be answered wrong
        raise ValueError(f"needs at least two options, got {len(options)}")
    if answer not in dict(options):
        raise ValueError(f"answer {answer!r} is not one of the options {', '.join(k for k, _ in options)}")
    text = build_question(question.strip(), options, hint)
    return Item(data, str(id), row, text, tuple(options), answer, tuple(images), fields)


def check_utf8(text: str, where: str = "") -> None:
    """ValueError naming the first byte that was not UTF-8 (a lone surrogate after surrogateescape)."""
    m = BAD_BYTE.search(text)
    if m:
        raise ValueError(f"not valid UTF-8 (byte 0x{ord(m.group()) - 0xDC00:02x}{where})")
