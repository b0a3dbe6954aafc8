"""Benchmark files for VERDICT's harness: VLMEvalKit TSVs and JSONL files become items, and a chain's
final answer becomes an option letter.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026, reports accuracy on six multiple-choice benchmarks
(3DSRBench, CV-Bench-3D, CV-Bench-2D, BLINK, MMStar, AI2D) in VLMEvalKit's file format.

A VLMEvalKit TSV: index, image, question, optional hint, option columns A, B, ..., answer, optional
prompt (the whole text, used as is). `image` is base64, or, if 64 characters or fewer, the index of the
row whose image it reuses. A multi-image row holds a list literal of base64 strings, as VLMEvalKit
writes it: ['<b64>', '<b64>'] (JSON quoting works too). A JSONL file holds one
{"id", "question", "options": {"A": ...}, "answer", "hint"?, "image"?: path | base64 | [...]} per line,
paths relative to the file. A malformed row (no question, no answer, fewer than two options, an answer
that is no option, an undecodable image, a repeated id) is reported with its row number, skipped and
counted: it is never run and never scored.

Answers follow VLMEvalKit's rules: a single option letter among the last four tokens, else a unique
option text, else unanswered (scored wrong).
"""
from __future__ import annotations

import ast
import base64
import binascii
import csv
import json
import os
import re
from dataclasses import dataclass

from images import load as load_image

LETTER = re.compile(r"[A-Z]")


@dataclass(frozen=True)
class Item:
    """One multiple-choice question, ready to run."""
    data: str           # the benchmark: its file name without the extension
    id: str
    row: int            # line number in the file (TSV: where the record ends; the header is line 1)
    question: str       # the whole text the reasoner sees, options included
    options: tuple      # (("A", text), ...)
    answer: str         # the correct letter
    images: tuple = ()  # image bytes


@dataclass(frozen=True)
class Skipped:
    """A malformed row: never run, never scored, counted in the summary."""
    data: str
    row: int
    reason: str


def build_question(question: str, options, hint: str = "") -> str:
    """VLMEvalKit's multiple-choice prompt: Hint:, Question:, Options: with "A. ..." lines."""
    lines = ([f"Hint: {hint}"] if hint else []) + [f"Question: {question}", "Options:"] + [f"{k}. {v}" for k, v in options]
    return "\n".join(lines + ["Please select the correct answer from the options above."])


def decode_image(s) -> bytes:
    """Bytes, base64 or a base64 data URL -> the bytes of an image that decodes; ValueError otherwise.
    The image is decoded now (images.load), so a truncated one fails here, not in the middle of a run."""
    try:
        data = s if isinstance(s, bytes) else base64.b64decode(s.split(",", 1)[-1] if s.startswith("data:") else s,
                                                               validate=True)
        load_image(data)
    except (binascii.Error, ValueError) as e:
        raise ValueError(f"undecodable image ({len(s)} {'bytes' if isinstance(s, bytes) else 'chars'}: {e})") from None
    return data


def make_item(data, id, row, question, options, answer, images=(), hint="", prompt="") -> Item:
    """Validate one row's fields (ValueError names what is wrong) and build its Item."""
    answer = str(answer).strip() if answer is not None else ""
    if not (prompt or (isinstance(question, str) and question.strip())):
        raise ValueError("missing question")
    if not answer:
        raise ValueError("missing answer")
    if len(options) < 2:  # a question with one option cannot be answered wrong
        raise ValueError(f"needs at least two options, got {len(options)}")
    if answer not in dict(options):
        raise ValueError(f"answer {answer!r} is not one of the options {', '.join(k for k, _ in options)}")
    text = prompt or build_question(question.strip(), options, hint)
    return Item(data, str(id), row, text, tuple(options), answer, tuple(images))


def _cell(r: dict, k: str) -> str:
    v = (r.get(k) or "").strip()
    return "" if v.lower() == "nan" else v  # pandas writes a missing value as "" or "nan"


def load_tsv(path: str, data: str) -> tuple:
    """A VLMEvalKit TSV -> (items, skipped)."""
    csv.field_size_limit(2 ** 31 - 1)  # a base64 image is one huge field
    with open(path, newline="", encoding="utf-8-sig") as fh:  # -sig: a BOM is not part of "index"
        reader = csv.DictReader(fh, delimiter="\t")
        rows = [(reader.line_num, r) for r in reader]
    fields = reader.fieldnames or []
    if "question" not in fields and "prompt" not in fields:
        raise ValueError(f"{path}: no question or prompt column (columns: {', '.join(fields) or 'none'})")
    letters = [c for c in fields if LETTER.fullmatch(c)]
    image_of = {_cell(r, "index"): _cell(r, "image") for _, r in rows}
    decoded: dict = {}  # base64 -> bytes, so a reused image is decoded and held once

    def images_of(field: str) -> tuple:
        if field and len(field) <= 64:  # VLMEvalKit: the index of the row whose image this row reuses
            if len(image_of.get(field, "")) <= 64:
                raise ValueError(f"image refers to index {field!r}, which holds no image")
            field = image_of[field]
        parts = [field] if field else []
        if field.startswith("["):  # a multi-image row: a list literal of base64 strings
            try:
                parts = ast.literal_eval(field)
            except (ValueError, SyntaxError):
                parts = None
            if not (isinstance(parts, list) and all(isinstance(p, str) for p in parts)):
                raise ValueError("image starts with '[' but is not a list of base64 strings")
        for p in parts:
            if p not in decoded:
                decoded[p] = decode_image(p)
        return tuple(decoded[p] for p in parts)

    items, skipped = [], []
    for line, r in rows:
        try:
            if None in r:  # csv puts the cells past the header's last column under the key None
                raise ValueError(f"{len(fields) + len(r[None])} cells, the header has {len(fields)}")
            options = [(k, _cell(r, k)) for k in letters if _cell(r, k)]
            items.append(make_item(data, _cell(r, "index") or line, line, _cell(r, "question"), options,
                                   _cell(r, "answer"), images_of(_cell(r, "image")), _cell(r, "hint"), _cell(r, "prompt")))
        except ValueError as e:
            skipped.append(Skipped(data, line, str(e)))
    return items, skipped


def load_jsonl(path: str, data: str) -> tuple:
    """A JSONL benchmark -> (items, skipped). Image paths are relative to the file."""
    here = os.path.dirname(os.path.abspath(path))

    def image(s) -> bytes:
        if not isinstance(s, str) or not s:
            raise ValueError(f"an image must be a path or base64 string, got {s!r}")
        p = os.path.join(here, s)
        if len(s) < 4096 and os.path.isfile(p):
            with open(p, "rb") as fh:
                return decode_image(fh.read())
        return decode_image(s)

    items, skipped = [], []
    with open(path, encoding="utf-8-sig") as fh:
        for line, text in enumerate(fh, 1):
            if not text.strip():
                continue
            try:
                try:
                    d = json.loads(text)
                except ValueError:
                    raise ValueError("not valid JSON") from None
                given = d.get("options") if isinstance(d, dict) else None
                if not isinstance(given, dict) or not all(isinstance(k, str) and LETTER.fullmatch(k) for k in given):
                    raise ValueError('"options" must be an object with letter keys, like {"A": "..."}')
                options = sorted((k, str(v).strip()) for k, v in given.items() if v is not None and str(v).strip())
                ims = d.get("image")
                ims = [] if ims in (None, "", []) else ims if isinstance(ims, list) else [ims]
                items.append(make_item(data, d.get("id", line), line, d.get("question"), options, d.get("answer"),
                                       [image(s) for s in ims], str(d.get("hint") or "").strip()))
            except ValueError as e:
                skipped.append(Skipped(data, line, str(e)))
    return items, skipped


def load(path: str) -> tuple:
    """(name, items, skipped) for a .tsv or .jsonl file; a repeated id is skipped like any malformed row."""
    name, ext = os.path.splitext(os.path.basename(path))
    loaders = {".tsv": load_tsv, ".jsonl": load_jsonl}
    if ext.lower() not in loaders:
        raise ValueError(f"{path}: unknown format {ext!r}; expected .tsv (VLMEvalKit) or .jsonl")
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such file")
    items, skipped = loaders[ext.lower()](path, name)
    first: dict = {}
    for it in items:
        first.setdefault(it.id, it.row)
    skipped += [Skipped(name, it.row, f"repeated id {it.id!r} (first at row {first[it.id]})")
                for it in items if first[it.id] != it.row]
    return name, [it for it in items if first[it.id] == it.row], sorted(skipped, key=lambda s: s.row)



# ----------------------------------------------------------------------------- answers

def extract(text, options) -> tuple:
    """(letter or None, how) from a final answer, VLMEvalKit's rules (can_infer_option, can_infer_text):
    "letter"     : exactly one option letter among the tokens (.()[],:;!*#{} split words), and it is
                   one of the last four tokens;
    "text"       : else exactly one option's text is a substring (case-insensitive);
    "unanswered" : else, or when there is no final answer."""
    if text:
        tokens = re.sub(r"[.()\[\],:;!*#{}]", " ", text).split()
        found = [k for k, _ in options if k in tokens]
        if len(found) == 1 and tokens.index(found[0]) > len(tokens) - 5:
            return found[0], "letter"
        found = [k for k, v in options if v.lower() in text.lower()]
        if len(found) == 1:
            return found[0], "text"
    return None, "unanswered"
