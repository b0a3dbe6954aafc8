"""Benchmark files for VERDICT's harness: VLMEvalKit TSVs and JSONL files become items, read by the
conventions VLMEvalKit applies to each of the paper's benchmarks.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026, reports accuracy on six multiple-choice benchmarks
(3DSRBench, CV-Bench-3D, CV-Bench-2D, BLINK, MMStar, AI2D_TEST) in VLMEvalKit's file format.

A VLMEvalKit TSV (tsv.py) is read as VLMEvalKit reads it, by the conventions its name selects
(tsv.kind); 3DSRBench (its qid column), circular files (a name with mmbench, ccbench, circular or
mmcr) and CV-Bench-2D (per-source accuracy) differ only in scoring: `scoring` tells accuracy.py.

A JSONL file holds one {"id", "question", "options": {"A": ...}, "answer", "hint"?, "image"?: path |
base64 | [...]} per line. Image paths are relative to the data file and may not leave its directory
unless allow_any_path. Files are streamed: with a limit, reading stops at the limit. A malformed row
(no question, no answer, fewer than two options, an answer that is no option, an image that is
missing or does not decode, bytes that are not UTF-8, a repeated id) is reported with its line,
skipped and counted: it is never run and never scored.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from verdict_lab.harness import tsv
from verdict_lab.harness.items import (
    LETTER,
    Inputs,
    Item,
    Skipped,
    check_utf8,
    decode_image,
    image_file,
    make_item,
)
from verdict_lab.harness.tsv import kind
from verdict_lab.formats import whole_text

CIRCULAR_NAMES = ("mmbench", "ccbench", "circular", "mmcr")


@dataclass(frozen=True)
class Loaded:
    """One benchmark file, read: its items (this shard's) and what reading it found."""

    name: str
    file: str
    items: list
    total: int  # valid items read (all shards')
    read: int  # rows read
    skipped: list  # [Skipped]
    dropped: int  # rows without an image, dropped as VLMEvalKit drops them
    warnings: list  # [str]
    # How accuracy.py scores the rows (scoring()):
    # {"setting": "vanilla" | "circular" | "3dsr", "macro": a column to average over, or None}
    scoring: dict
    limited: bool  # reading stopped at the limit
    # what reached the model (Inputs.record) and "resaved": the ids whose pixels dump_image's
    # re-save changed
    as_vlmevalkit: dict = field(default_factory=lambda: {**Inputs().record(), "resaved": []})

    def reading(self) -> dict:
        """What the summary says about reading this file (JSON)."""
        return {
            "file": self.file,
            "read": self.read,
            "total": self.total,
            "items": len(self.items),
            "skipped": [vars(s) for s in self.skipped],
            "dropped": self.dropped,
            "warnings": self.warnings,
            "scoring": self.scoring,
            "limited": self.limited,
            "as_vlmevalkit": self.as_vlmevalkit,
        }


def scoring(name: str, columns, splits=frozenset()) -> dict:
    """How accuracy.py scores a file's rows, as VLMEvalKit does for that dataset: 3DSRBench's four
    settings from qid, circular groups (every rotation right) from g_index, or one row one question.
    A CV-Bench file whose rows' `split` cells are all "2D" (`splits`: the set of them) is scored as
    VLMEvalKit's CVBench.evaluate scores it, by that test and not by name: its Overall is the
    unweighted mean over its `source` values ("macro"); any other is report_acc's."""
    low = name.lower()
    setting = (
        "3dsr"
        if "3dsrbench" in low and "qid" in columns
        else "circular"
        if any(c in low for c in CIRCULAR_NAMES)  # by name only: g_index alone is not circular
        else "vanilla"
    )
    return {
        "setting": setting,
        "macro": "source"
        if kind(name) == "cvbench" and "source" in columns and set(splits) == {"2D"}
        else None,
        "kind": kind(name),
    }


# ----------------------------------------------------------------------------- JSONL


def _jsonl_image(base: str, s, allow_any_path: bool):
    """A JSONL image: a file path (it has a "." or exists; base64 never holds a ".") or base64,
    which may start with "/" (a JPEG's starts "/9j/"). A short name (64 characters or fewer) that
    is neither a file nor an image in base64 is said to be a missing file."""
    if not isinstance(s, str) or not s:
        raise ValueError(f"an image must be a path or base64 string, got {s!r}")
    if "." in s or os.path.isfile(os.path.join(base, s)):
        return image_file(base, s, allow_any_path)
    try:
        return decode_image(s)
    except ValueError as e:
        if len(s) > 64:  # too long for a name: base64 that does not decode
            raise
        raise ValueError(
            f"image file not found: {s} (looked for {os.path.join(base, s)}; nor is it base64: {e})"
        ) from None


JSON_KINDS = {list: "array", str: "string", bool: "boolean", type(None): "null"}  # else a number


def _jsonl_item(
    name: str, line: int, text: str, base: str, allow_any_path: bool, stripped: bool
) -> Item:
    try:
        d = json.loads(text)
    except ValueError:
        raise ValueError("not valid JSON") from None
    except RecursionError:  # a line nested 100,000 deep: one row's error, not a crash
        raise ValueError("not valid JSON here: nested too deep to read") from None
    check_utf8(text)
    d = whole_text(
        d
    )  # a lone surrogate ("\\ud800" in the JSON) is no text: U+FFFD, as in a server's reply
    if not isinstance(d, dict):  # a line is one item: an object, never a list of them
        raise ValueError(
            f"a JSON {JSON_KINDS.get(type(d), 'number')}, where each line must be one JSON object: "
            '{"question": ..., "options": {"A": ..., "B": ...}, "answer": ...}'
        )
    given = d.get("options")
    if not isinstance(given, dict) or not all(
        isinstance(k, str) and LETTER.fullmatch(k) for k in given
    ):
        raise ValueError('"options" must be an object with letter keys, like {"A": "..."}')
    options = sorted(
        (k, str(v).strip()) for k, v in given.items() if v is not None and str(v).strip()
    )
    ims = d.get("image")
    ims = [] if ims in (None, "", []) else ims if isinstance(ims, list) else [ims]
    scalars = {
        k: v
        for k, v in d.items()
        if k != "image" and not isinstance(v, (dict, list))  # "options" is a dict
    }
    fields = tuple(
        (k, "" if v is None else str(v)) for k, v in {**scalars, **dict(options)}.items()
    )
    return make_item(
        name,
        d.get("id", line),
        line,
        d.get("question"),
        options,
        d.get("answer"),
        [_jsonl_image(base, s, allow_any_path) for s in ims],
        str(d.get("hint") or "").strip(),
        fields=fields,
        stripped=stripped,
    )


def _jsonl(path: str, name: str, keep, allow_any_path: bool, warnings: list, info: dict):
    """(line, Item | Skipped) for each non-blank line of a JSONL benchmark."""
    base, stripped = os.path.dirname(os.path.abspath(path)), info["inputs"].stripped_prompt
    with open(path, "rb") as fh:
        for line, raw in enumerate(fh, 1):
            text = raw.decode("utf-8", "surrogateescape").lstrip("\ufeff")
            if not text.strip():
                continue
            try:
                yield line, _jsonl_item(name, line, text, base, allow_any_path, stripped)
            except ValueError as e:
                yield line, Skipped(os.path.basename(path), line, str(e))


# ----------------------------------------------------------------------------- any file


def load(
    path: str,
    limit: int | None = None,
    keep=None,
    allow_any_path: bool = False,
    inputs: Inputs = Inputs(),
) -> Loaded:
    """A .tsv or .jsonl file, streamed: the first `limit` valid items (all if None), of which those
    whose id keep(id) accepts (all if None) are returned. A repeated id is skipped like any
    malformed row. `inputs`: what reaches the model (VLMEvalKit's images and prompt text by default;
    a JSONL file's images are its own)."""
    file = os.path.basename(path)
    name, ext = os.path.splitext(file)
    readers = {".tsv": tsv.read, ".jsonl": _jsonl}
    if ext.lower() not in readers:
        raise ValueError(f"{path}: unknown format {ext!r}; expected .tsv (VLMEvalKit) or .jsonl")
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such file")
    keep = keep or (lambda id: True)
    warnings = []
    items = []
    skipped = []
    columns = []  # the first valid row's fields
    first = {}  # id -> the row it was first read at
    read = 0
    dropped = 0
    limited = False
    splits = set()  # the valid rows' split cells (CV-Bench-2D's test)
    info: dict = {"limit": limit, "inputs": inputs}
    rows = readers[ext.lower()](path, name, keep, allow_any_path, warnings, info)
    try:
        for line, got in rows:
            read += 1
            if got is None:
                dropped += 1
            elif isinstance(got, Skipped):
                skipped.append(got)
            elif got.id in first:
                skipped.append(
                    Skipped(file, line, f"repeated id {got.id!r} (first at row {first[got.id]})")
                )
            else:
                first[got.id], columns = line, columns or [k for k, _ in got.fields]
                splits.add(dict(got.fields).get("split"))
                items += [got] if keep(got.id) else []
                if limit is not None and len(first) >= limit:
                    limited = True
                    break
    finally:
        rows.close()
    # The TSV's dtypes go with the scoring, for the quirks.
    how = {**scoring(name, columns, splits), "dtypes": info.get("dtypes", {})}
    sent = {**inputs.record(), "resaved": list(dict.fromkeys(info.get("resaved", [])))}
    if ext.lower() == ".jsonl":
        # VLMEvalKit does not read JSONL: its images are sent as they are.
        sent["images"] = "original"
    return Loaded(
        name, file, items, len(first), read, skipped, dropped, warnings, how, limited, sent
    )
