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
from harness.cells import NA_VALUES, Column, mangle, shown
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


def make_item(
    data, id, row, question="", options=(), answer="", images=(), hint="", prompt="", value=None, **extra
) -> Item:
    """Validate one row's fields (ValueError names what is wrong) and build its Item."""
    if extra.pop("as_read", False):  # a TSV row, scored as VLMEvalKit scores it: every cell as pandas read it
        text = prompt or build_question(question, options, hint)
        return Item(data, str(id), row, text, tuple(options), answer, tuple(images), value=value, **extra)
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
        if any(c in low for c in CIRCULAR_NAMES)  # by name only: g_index alone is not circular
        else "vanilla"
    )
    return {
        "setting": setting,
        "macro": "source" if name.startswith("CV-Bench-2D") and "source" in columns else None,
        "kind": kind(name),
    }


def kind(name: str) -> str:
    """The conventions VLMEvalKit applies to a file, chosen by its name as build_dataset chooses a class:
    "mathvista" (MathVista_MINI: a VQA file), "mmmu" ('MMMU' in the name: open questions become A/B),
    "cvbench" (CV-Bench-2D/3D: the prompt column is the text), else "mcq"."""
    return (
        "mathvista"
        if "MathVista" in name
        else "mmmu"
        if "MMMU" in name
        else "cvbench"
        if name.startswith("CV-Bench")
        else "mcq"
    )


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


def swallowed(cells: list) -> int:
    """Lines inside a quoted cell that look like rows of their own (they hold a tab): an unclosed " in an
    earlier cell made them part of it, as it does for pandas (and so for VLMEvalKit)."""
    return sum(line.count("\t") > 0 for c in cells if "\n" in c for line in c.split("\n")[1:])


def _cell(cells: list, i: int | None) -> str:
    v = cells[i] if i is not None and i < len(cells) else ""
    return "" if v in NA_VALUES else v  # a missing value, as pandas reads it


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
                self.note(_cell(cells, self.index).strip(), start, end)
                if _cell(cells, self.index).strip() == index:
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


def _mathvista(r: dict, dtypes: dict) -> dict:
    """MathVista's row: the question cell as is; multi_choice -> options from `choices` (a list literal),
    answer `answer_option`; any other question_type -> a free-form Value, compared by VLMEvalKit's rule."""
    if r["question_type"] != "multi_choice":
        try:
            precision = int(float(r["precision"])) if r["precision"] else None
        except ValueError:
            raise ValueError(f"precision {r['precision']!r} is not a number") from None
        return dict(
            prompt=r["question"] or "nan",
            options=(),
            answer=r["answer"] or "nan",
            value=Value(
                r["answer_type"] or "text", precision, r["unit"] or "", dtypes.get("answer", "object")
            ),
        )
    try:
        choices = ast.literal_eval(r["choices"] or "")
    except (ValueError, SyntaxError):
        choices = None
    if not isinstance(choices, (list, tuple)) or len(choices) > 26:
        raise ValueError(
            f"choices must be a list literal of at most 26 options, got {(r['choices'] or '')[:40]!r}"
        )
    options = [(chr(65 + i), str(c)) for i, c in enumerate(choices)]
    return dict(prompt=r["question"] or "nan", options=options, answer=r["answer_option"] or "nan")


def _question(r: dict, letters: list, kind: str, dtypes: dict) -> dict:
    """What a row asks and how its answer is read, by the dataset's conventions (None: a missing value)."""
    if kind == "mathvista":
        return _mathvista(r, dtypes)
    options = [(k, r[k]) for k in letters if r[k] is not None]
    question, hint, answer = r["question"] or "nan", r["hint"] or "", r["answer"] or "nan"
    if kind == "mmmu":  # MMMU_preproc: an open question (no A) reads A = its answer, B = "Other Answers"
        prompt = build_question(question, options, hint)
        if r["A"] is None:
            filled = {**dict(options), "A": r["answer"], "B": "Other Answers"}
            options = sorted((k, v) for k, v in filled.items() if v is not None)
        gt = answer if LETTER.fullmatch(answer) else "A"
        return dict(prompt=prompt, options=options, answer=gt)
    prompt = r["prompt"] if kind == "cvbench" else None
    return dict(question=question, options=options, answer=answer, hint=hint, prompt=prompt or "")


def _check_placeholders(item: Item) -> Item:
    named = [int(k) for k in PLACEHOLDER.findall(item.question)]
    if any(not 1 <= k <= len(item.images) for k in named):
        raise ValueError(f"the text names <image {max(named)}> but the row has {len(item.images)} image(s)")
    return item


def _header(fields: list, path: str, warnings: list) -> list:
    """A TSV's column names as pandas names them (not stripped; a repeated name gets ".1"), checked: a
    question or prompt column; a warning when no image column, and for each repeated name."""
    raw = [fields[0].lstrip("\ufeff")] + fields[1:] if fields else fields  # a BOM is not part of "index"
    if _BAD_BYTE.search("".join(raw)):
        raise ValueError(f"{path} line 1: the header is not valid UTF-8")
    fields = mangle(raw)
    for k, (a, b) in enumerate(zip(raw, fields)):
        if a != b:
            warnings.append(
                f"{os.path.basename(path)}: column {k + 1} repeats the name {a!r}; as pandas does for "
                f"VLMEvalKit, it is read as {b!r}" + (", which is no option" if LETTER.fullmatch(a) else "")
            )
    if "question" not in fields and "prompt" not in fields:
        raise ValueError(f"{path}: no question or prompt column (columns: {', '.join(fields) or 'none'})")
    if "image" not in fields and "image_path" not in fields:
        warnings.append(
            f"{os.path.basename(path)} has neither an image nor an image_path column: "
            "its questions run without images"
        )
    return fields


def _tsv_item(
    name: str, line: int, cells: list, fields: list, images: _TsvImages, keep, dtypes: dict
) -> Item | None:
    """One TSV record as an Item, or None for a row without an image; ValueError says what is wrong."""
    if len(cells) > len(fields):
        raise ValueError(f"{len(cells)} cells, the header has {len(fields)}")
    for k, cell in zip(fields, cells):
        _check_utf8(cell, f" in column {k}")
    raw = {k: cells[i] if i < len(cells) else "" for i, k in enumerate(fields)}
    r = defaultdict(lambda: None, {k: shown(v, dtypes.get(k, "object")) for k, v in raw.items()})
    if "image" in fields and raw["image"] in NA_VALUES:  # VLMEvalKit drops a row without an image
        return None
    id = _cell(cells, images.index).strip() or str(line)
    ims = (
        images.of_cell(raw["image"], keep(id))
        if "image" in fields
        else images.of_paths(raw["image_path"])
        if "image_path" in fields
        else ()
    )
    k = kind(name)
    item = make_item(
        name,
        id,
        line,
        images=ims,
        fields=tuple((c, v) for c, v in raw.items() if c != "image"),
        as_read=True,
        **_question(r, [c for c in fields if LETTER.fullmatch(c)], k, dtypes),
    )
    return _check_placeholders(item) if k == "mmmu" else item


def _types(path: str, fields: list, warnings: list, limit: int | None = None) -> dict:
    """{column: dtype} as pandas infers it from every cell (the image columns are left out), and a warning
    for each record that swallowed rows into a quoted cell."""
    cols = {k: Column() for k in fields if k not in ("image", "image_path")}
    with open(path, "rb") as fh:
        records = _records(fh)
        next(records, None)
        for n_read, (line, _, _, cells) in enumerate(records, 1):
            if n := swallowed(cells):
                warnings.append(
                    f"{os.path.basename(path)} line {line}: a quoted cell holds {n} line(s) that look like "
                    'rows (an unclosed "?); pandas, and so VLMEvalKit, reads them as part of that cell too'
                )
            for i, k in enumerate(fields):
                if k in cols:
                    cols[k].note(cells[i] if i < len(cells) else "")
            if (
                limit is not None and n_read >= limit
            ):  # --limit: typed as a file of the rows it reads would be
                break
    return {k: c.dtype for k, c in cols.items()}


def _tsv(path: str, name: str, keep, allow_any_path: bool, warnings: list, info: dict):
    """(line, Item | Skipped | None for a row without an image) for each record of a VLMEvalKit TSV."""
    csv.field_size_limit(2**31 - 1)  # a base64 image is one huge field
    with open(path, "rb") as fh:
        records = _records(fh)
        head = next(records, None)
        if head is None:
            raise ValueError(f"{path}: empty file (no header line)")
        fields = _header(head[3], path, warnings)
        dtypes = info["dtypes"] = _types(path, fields, warnings, info.get("limit"))
        images = _TsvImages(path, fields, name, allow_any_path)
        try:
            for line, start, end, cells in records:
                images.note(_cell(cells, images.index).strip(), start, end)
                try:
                    yield line, _tsv_item(name, line, cells, fields, images, keep, dtypes)
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
    except RecursionError:  # a line nested 100,000 deep: one row's error, not a crash
        raise ValueError("not valid JSON here: nested too deep to read") from None
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


def _jsonl(path: str, name: str, keep, allow_any_path: bool, warnings: list, info: dict):
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
    info: dict = {"limit": limit}
    rows = readers[ext.lower()](path, name, keep, allow_any_path, warnings, info)
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
    how = {**scoring(name, columns), "dtypes": info.get("dtypes", {})}  # dtypes: the TSV's, for the quirks
    return Loaded(name, file, items, len(first), read, skipped, dropped, warnings, how, limited)
