"""Benchmark files for VERDICT's harness: VLMEvalKit TSVs and JSONL files become items, read by the
conventions VLMEvalKit applies to each of the paper's benchmarks.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026, reports accuracy on six multiple-choice benchmarks
(3DSRBench, CV-Bench-3D, CV-Bench-2D, BLINK, MMStar, AI2D_TEST) in VLMEvalKit's file format.

A VLMEvalKit TSV: index, image, question, optional hint, option columns A..Z (an empty cell is no option),
answer (a letter), and labels (category, l2-category, split, ...). `image` is base64; 64 characters or
fewer are the index of the row whose image this row reuses; a list literal ['<b64>', ...] holds several
images (BLINK). A file with `image_path` and no `image` (VLMEvalKit's *_local.tsv) names image files,
relative to the TSV's directory or to images/<name>/ beside it (VLMEvalKit's layout). A row whose `image`
is empty is dropped and counted, as VLMEvalKit drops it. By dataset:
- CV-Bench: the `prompt` column is the whole text (any file with a `prompt` column is read so);
- MMMU (a name containing MMMU): an open question (no options) is kept as VLMEvalKit keeps it, as two
  options, A its answer text and B "Other Answers", answer A; its images go where the text says <image k>;
- MathVista (a `question_type` column): the question cell is the whole text; multi_choice rows take their
  options from `choices` and their answer from `answer_option`; other rows are free-form values compared
  with the row's answer_type, precision and unit (answers.py);
- 3DSRBench (its qid column), circular files (a g_index column, or a name with mmbench, ccbench, circular
  or mmcr) and CV-Bench-2D (per-source accuracy) differ only in scoring: `scoring` tells tables.py.

A JSONL file holds one {"id", "question", "options": {"A": ...}, "answer", "hint"?, "image"?: path |
base64 | [...]} per line. Image paths are relative to the data file and may not leave its directory
unless allow_any_path. Files are streamed: with a limit, reading stops at the limit. A malformed row
(no question, no answer, fewer than two options, an answer that is no option, an image that is missing
or does not decode, bytes that are not UTF-8, a repeated id) is reported with its line, skipped and
counted: it is never run and never scored.
"""

from __future__ import annotations

import ast
import base64
import binascii
import csv
import json
import os
import re
from collections import defaultdict
from dataclasses import dataclass

from harness.answers import Value
from images import PLACEHOLDER, load as load_image

LETTER = re.compile(r"[A-Z]")
CIRCULAR_NAMES = ("mmbench", "ccbench", "circular", "mmcr")
_BAD_BYTE = re.compile("[\udc80-\udcff]")  # what surrogateescape makes of a byte that is not UTF-8


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
    scoring: dict  # {"setting": "vanilla" | "circular" | "3dsr", "macro": a column to average over, or None}
    limited: bool  # reading stopped at the limit

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
        }


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
    within it). Absolute paths and paths that leave `base` raise ValueError unless allow_any_path, as do a
    missing file and one that does not decode."""
    full = os.path.normpath(os.path.join(base, name))
    if not allow_any_path and (os.path.isabs(name) or os.path.commonpath([full, base]) != base):
        raise ValueError(f"image path {name} is outside {base}; --allow-any-path reads it")
    if also and not os.path.isfile(full) and os.path.isfile(os.path.join(base, also, name)):
        full = os.path.normpath(os.path.join(base, also, name))
    if not os.path.isfile(full):
        raise ValueError(f"image file not found: {name}")
    load_image(full)  # decode now: a broken file is this row's error, not a failed request
    return full


def make_item(
    data, id, row, question="", options=(), answer="", images=(), hint="", prompt="", value=None, **extra
) -> Item:
    """Validate one row's fields (ValueError names what is wrong) and build its Item."""
    answer = str(answer).strip() if answer is not None else ""
    if not (prompt or (isinstance(question, str) and question.strip())):
        raise ValueError("missing question")
    if not answer:
        raise ValueError("missing answer")
    if value is None and len(options) < 2:  # a question with one option cannot be answered wrong
        raise ValueError(f"needs at least two options, got {len(options)}")
    if value is None and answer not in dict(options):
        raise ValueError(f"answer {answer!r} is not one of the options {', '.join(k for k, _ in options)}")
    text = prompt or build_question(question.strip(), options, hint)
    return Item(data, str(id), row, text, tuple(options), answer, tuple(images), value=value, **extra)


def scoring(name: str, columns) -> dict:
    """How tables.py scores a file's rows, as VLMEvalKit does for that dataset: 3DSRBench's four settings
    from qid, circular groups (every rotation right) from g_index, or one row one question; CV-Bench-2D's
    Overall is the unweighted mean over its `source` values."""
    low = name.lower()
    setting = (
        "3dsr"
        if "3dsrbench" in low and "qid" in columns
        else "circular"
        if "g_index" in columns or any(c in low for c in CIRCULAR_NAMES)
        else "vanilla"
    )
    return {
        "setting": setting,
        "macro": "source" if name.startswith("CV-Bench-2D") and "source" in columns else None,
    }


def _check_utf8(text: str, where: str = "") -> None:
    """ValueError naming the first byte that was not UTF-8 (a lone surrogate after surrogateescape)."""
    m = _BAD_BYTE.search(text)
    if m:
        raise ValueError(f"not valid UTF-8 (byte 0x{ord(m.group()) - 0xDC00:02x}{where})")


# ----------------------------------------------------------------------------- VLMEvalKit TSV


def _records(fh):
    """(line where the record ends, its start offset, its end offset, cells) of each TSV record from a binary
    file at its position, read one line at a time; bytes that are not UTF-8 become lone surrogates."""
    at = fh.tell()
    pos = [at]

    def lines():
        for raw in iter(fh.readline, b""):
            pos[0] += len(raw)
            yield raw.decode("utf-8", "surrogateescape")

    reader = csv.reader(lines(), delimiter="\t")
    for cells in reader:
        if cells:  # a blank line is no record
            yield reader.line_num, at, pos[0], cells
        at = pos[0]


def _cell(cells: list, i: int | None) -> str:
    v = cells[i].strip() if i is not None and i < len(cells) else ""
    return "" if v.lower() == "nan" else v  # pandas writes a missing value as "" or "nan"


class _TsvImages:
    """A TSV row's images. A reference (an `image` of 64 characters or fewer) is the index of another
    row, found by where that row starts in the file: rows read so far are noted, and a reference to a later
    row scans ahead for it. Decoded images of rows that are kept are held once for the rows reusing them."""

    def __init__(self, path: str, fields: list, name: str, allow_any_path: bool):
        self.fh, self.allow = open(path, "rb"), allow_any_path
        self.base = os.path.dirname(os.path.abspath(path))
        self.index = fields.index("index") if "index" in fields else None
        self.image = fields.index("image") if "image" in fields else None
        self.also = os.path.join("images", name[: -len("_local")] if name.endswith("_local") else name)
        self.at, self.scanned, self.held = {}, 0, {}

    def note(self, index: str, start: int, end: int) -> None:
        self.at.setdefault(index, start)
        self.scanned = max(self.scanned, end)

    def _cell_of(self, index: str) -> str:
        if index not in self.at:  # a later row: scan ahead, noting every row on the way
            self.fh.seek(self.scanned)
            for _, start, end, cells in _records(self.fh):
                self.note(_cell(cells, self.index), start, end)
                if _cell(cells, self.index) == index:
                    break
        if index not in self.at:
            raise ValueError(f"image refers to index {index!r}, which no row has")
        self.fh.seek(self.at[index])
        return _cell(next(_records(self.fh))[3], self.image)

    def of_cell(self, field: str, keep: bool) -> tuple:
        """The images of an `image` cell: base64, a reference, or a list literal of base64 strings."""
        ref = field if len(field) <= 64 else None  # VLMEvalKit: the index of the row whose image this reuses
        if ref is not None and ref in self.held:
            return self.held[ref]
        if ref is not None and len(field := self._cell_of(ref)) <= 64:
            raise ValueError(f"image refers to index {ref!r}, which holds no image")
        images = tuple(decode_image(p) for p in _list_cell(field))
        if keep and ref is not None:
            self.held[ref] = images
        return images

    def of_paths(self, field: str) -> tuple:
        """The images of an `image_path` cell: one path or a list literal of paths."""
        if not field:
            raise ValueError("empty image_path")
        return tuple(image_file(self.base, p, self.allow, self.also) for p in _list_cell(field))

    def close(self) -> None:
        self.fh.close()


def _list_cell(field: str) -> list:
    """VLMEvalKit's toliststr: a cell '[...]' is a list literal of strings; any other cell is one string."""
    if not (len(field) > 1 and field.startswith("[") and field.endswith("]")):
        return [field]
    try:
        parts = ast.literal_eval(field)
    except (ValueError, SyntaxError):
        parts = None
    if not (isinstance(parts, list) and all(isinstance(p, str) for p in parts)):
        raise ValueError("image starts with '[' but is not a list of strings")
    return parts


def _mathvista(r: dict) -> dict:
    """MathVista's row: the question cell as is; multi_choice -> options from `choices`, answer
    `answer_option` (else the letter of `answer`); any other question_type -> a free-form Value."""
    if r["question_type"] != "multi_choice":
        try:
            precision = int(float(r["precision"])) if r["precision"] else None
        except ValueError:
            raise ValueError(f"precision {r['precision']!r} is not a number") from None
        return dict(
            prompt=r["question"],
            options=(),
            answer=r["answer"],
            value=Value(r["answer_type"] or "text", precision, r["unit"]),
        )
    try:
        choices = ast.literal_eval(r["choices"])
    except (ValueError, SyntaxError):
        choices = None
    if not isinstance(choices, (list, tuple)) or len(choices) > 26:
        raise ValueError(f"choices must be a list literal of at most 26 options, got {r['choices'][:40]!r}")
    options = [(chr(65 + i), str(c)) for i, c in enumerate(choices)]
    answer = r["answer_option"] or next((k for k, v in options if v == r["answer"]), r["answer"])
    return dict(prompt=r["question"], options=options, answer=answer)


def _question(r: dict, letters: list, mmmu: bool, mathvista: bool) -> dict:
    """What a row asks and how its answer is read, by the dataset's conventions."""
    if mathvista:
        return _mathvista(r)
    options = [(k, r[k]) for k in letters if r[k]]
    if mmmu and not options and r["answer"]:  # an open question: A is its answer text, B "Other Answers"
        return dict(
            prompt=build_question(r["question"], (), r["hint"]),
            answer="A",
            options=[("A", r["answer"]), ("B", "Other Answers")],
        )
    return dict(
        question=r["question"], options=options, answer=r["answer"], hint=r["hint"], prompt=r["prompt"]
    )


def _check_placeholders(item: Item) -> Item:
    named = [int(k) for k in PLACEHOLDER.findall(item.question)]
    if any(not 1 <= k <= len(item.images) for k in named):
        raise ValueError(f"the text names <image {max(named)}> but the row has {len(item.images)} image(s)")
    return item


def _header(fields: list, path: str, warnings: list) -> list:
    """A TSV's column names, checked: a question or prompt column; a warning when no image column."""
    fields = [c.lstrip("\ufeff").strip() for c in fields]  # a BOM is not part of "index"
    if _BAD_BYTE.search("".join(fields)):
        raise ValueError(f"{path} line 1: the header is not valid UTF-8")
    if "question" not in fields and "prompt" not in fields:
        raise ValueError(f"{path}: no question or prompt column (columns: {', '.join(fields) or 'none'})")
    if "image" not in fields and "image_path" not in fields:
        warnings.append(
            f"{os.path.basename(path)} has neither an image nor an image_path column: "
            "its questions run without images"
        )
    return fields


def _tsv_item(name: str, line: int, cells: list, fields: list, images: _TsvImages, keep) -> Item | None:
    """One TSV record as an Item, or None for a row without an image; ValueError says what is wrong."""
    if len(cells) > len(fields):
        raise ValueError(f"{len(cells)} cells, the header has {len(fields)}")
    for k, cell in zip(fields, cells):
        _check_utf8(cell, f" in column {k}")
    r = defaultdict(str, {k: _cell(cells, i) for i, k in enumerate(fields)})  # a missing column reads ""
    if "image" in fields and not r["image"]:  # VLMEvalKit drops a row without an image
        return None
    id = r["index"] or str(line)
    ims = (
        images.of_cell(r["image"], keep(id))
        if "image" in fields
        else images.of_paths(r["image_path"])
        if "image_path" in fields
        else ()
    )
    mmmu = "MMMU" in name.upper()
    item = make_item(
        name,
        id,
        line,
        images=ims,
        fields=tuple((k, cells[i] if i < len(cells) else "") for i, k in enumerate(fields) if k != "image"),
        **_question(r, [c for c in fields if LETTER.fullmatch(c)], mmmu, "question_type" in fields),
    )
    return _check_placeholders(item) if mmmu else item


def _tsv(path: str, name: str, keep, allow_any_path: bool, warnings: list):
    """(line, Item | Skipped | None for a row without an image) for each record of a VLMEvalKit TSV."""
    csv.field_size_limit(2**31 - 1)  # a base64 image is one huge field
    with open(path, "rb") as fh:
        records = _records(fh)
        head = next(records, None)
        if head is None:
            raise ValueError(f"{path}: empty file (no header line)")
        fields = _header(head[3], path, warnings)
        images = _TsvImages(path, fields, name, allow_any_path)
        try:
            for line, start, end, cells in records:
                images.note(_cell(cells, images.index), start, end)
                try:
                    yield line, _tsv_item(name, line, cells, fields, images, keep)
                except ValueError as e:
                    yield line, Skipped(os.path.basename(path), line, str(e))
        finally:
            images.close()


# ----------------------------------------------------------------------------- JSONL


def _jsonl_image(base: str, s, allow_any_path: bool):
    """A JSONL image: a file path (it has a "." or exists; base64 never holds a ".") or base64."""
    if not isinstance(s, str) or not s:
        raise ValueError(f"an image must be a path or base64 string, got {s!r}")
    if "." in s or os.path.isabs(s) or os.path.isfile(os.path.join(base, s)):
        return image_file(base, s, allow_any_path)
    return decode_image(s)


def _jsonl_item(name: str, line: int, text: str, base: str, allow_any_path: bool) -> Item:
    try:
        d = json.loads(text)
    except ValueError:
        raise ValueError("not valid JSON") from None
    _check_utf8(text)
    given = d.get("options") if isinstance(d, dict) else None
    if not isinstance(given, dict) or not all(isinstance(k, str) and LETTER.fullmatch(k) for k in given):
        raise ValueError('"options" must be an object with letter keys, like {"A": "..."}')
    options = sorted((k, str(v).strip()) for k, v in given.items() if v is not None and str(v).strip())
    ims = d.get("image")
    ims = [] if ims in (None, "", []) else ims if isinstance(ims, list) else [ims]
    scalars = {
        k: v for k, v in d.items() if k not in ("image", "options") and not isinstance(v, (dict, list))
    }
    fields = tuple((k, "" if v is None else str(v)) for k, v in {**scalars, **dict(options)}.items())
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
    )


def _jsonl(path: str, name: str, keep, allow_any_path: bool, warnings: list):
    """(line, Item | Skipped) for each non-blank line of a JSONL benchmark."""
    base = os.path.dirname(os.path.abspath(path))
    with open(path, "rb") as fh:
        for line, raw in enumerate(fh, 1):
            text = raw.decode("utf-8", "surrogateescape").lstrip("\ufeff")
            if not text.strip():
                continue
            try:
                yield line, _jsonl_item(name, line, text, base, allow_any_path)
            except ValueError as e:
                yield line, Skipped(os.path.basename(path), line, str(e))


# ----------------------------------------------------------------------------- any file


def load(path: str, limit: int | None = None, keep=None, allow_any_path: bool = False) -> Loaded:
    """A .tsv or .jsonl file, streamed: the first `limit` valid items (all if None), of which those whose id
    keep(id) accepts (all if None) are returned. A repeated id is skipped like any malformed row."""
    file = os.path.basename(path)
    name, ext = os.path.splitext(file)
    readers = {".tsv": _tsv, ".jsonl": _jsonl}
    if ext.lower() not in readers:
        raise ValueError(f"{path}: unknown format {ext!r}; expected .tsv (VLMEvalKit) or .jsonl")
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such file")
    keep = keep or (lambda id: True)
    warnings, items, skipped, first, read, dropped, limited, columns = [], [], [], {}, 0, 0, False, []
    rows = readers[ext.lower()](path, name, keep, allow_any_path, warnings)
    try:
        for line, got in rows:
            read += 1
            if got is None:
                dropped += 1
            elif isinstance(got, Skipped):
                skipped.append(got)
            elif got.id in first:
                skipped.append(Skipped(file, line, f"repeated id {got.id!r} (first at row {first[got.id]})"))
            else:
                first[got.id], columns = line, columns or [k for k, _ in got.fields]
                items += [got] if keep(got.id) else []
                if limit is not None and len(first) >= limit:
                    limited = True
                    break
    finally:
        rows.close()
    return Loaded(
        name, file, items, len(first), read, skipped, dropped, warnings, scoring(name, columns), limited
    )
