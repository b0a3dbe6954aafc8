"""VLMEvalKit's TSV files for VERDICT's harness: records read as pandas reads them, images found
(base64, another row's by index, a list, or image_path), each row made an Item by the conventions of
its dataset.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026, reports accuracy on six multiple-choice benchmarks
(3DSRBench, CV-Bench-3D, CV-Bench-2D, BLINK, MMStar, AI2D_TEST) in VLMEvalKit's file format.

A VLMEvalKit TSV: index, image, question, optional hint, option columns A..Z (an empty cell is no
option), answer (a letter), and labels (category, l2-category, split, ...). `image` is base64; 64
characters or fewer are the index of the row whose image this row reuses; a list literal
['<b64>', ...] holds several images (BLINK). A file with `image_path` and no `image` (VLMEvalKit's
*_local.tsv) names image files, relative to the TSV's directory or to images/<name>/ beside it
(VLMEvalKit's layout). A row whose `image` is empty is dropped and counted, as VLMEvalKit drops it.
Cells are read as pandas reads them (cells.py). What reaches the model is VLMEvalKit's
(items.Inputs): each base64 image as its dump_image re-saves it, in the format the file's name gives
(<index>.png, or image_path's name, often .jpg), and build_prompt's text, whitespace included; a
*_local.tsv's image files are sent as they are, as VLMEvalKit sends them.
The conventions are chosen by the file's name, as VLMEvalKit's build_dataset chooses a class (kind):
- CV-Bench (a name starting CV-Bench): the `prompt` column is the whole text;
- MMMU (a name containing MMMU): an open question (no options) is kept as VLMEvalKit keeps it, as
  two options, A its answer text and B "Other Answers", answer A; its images go where the text says
  <image k>;
- MathVista (a name containing MathVista): the question cell is the whole text; multi_choice rows
  take their options from `choices` and their answer from `answer_option`; other rows are free-form
  values compared by VLMEvalKit's rule (answers.post_check).
"""

from __future__ import annotations

import ast
import csv
import os
from collections import defaultdict

from verdict_lab.harness.answers import Value
from verdict_lab.harness.cells import NA_VALUES, Column, mangle, shown
from verdict_lab.harness import items
from verdict_lab.harness.items import BAD_BYTE, LETTER, Item, Skipped, build_question, check_utf8
from verdict_lab.layouts import PLACEHOLDER


def kind(name: str) -> str:
    """The conventions VLMEvalKit applies to a file, chosen by its name as build_dataset chooses a
    class: "mathvista" (MathVista_MINI: a VQA file), "mmmu" ('MMMU' in the name: open questions
    become A/B), "cvbench" (CV-Bench-2D/3D: the prompt column is the text), else "mcq"."""
    return (
        "mathvista"
        if "MathVista" in name
        else "mmmu"
        if "MMMU" in name
        else "cvbench"
        if name.startswith("CV-Bench")
        else "mcq"
    )


def _records(fh):
    """(line where the record ends, its start offset, its end offset, cells) of each TSV record from
    a binary file at its position, read one line at a time; bytes that are not UTF-8 become lone
    surrogates."""
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
    """Lines inside a quoted cell that look like rows of their own (they hold a tab): an
    unclosed " in an earlier cell made them part of it, as it does for pandas (and so for
    VLMEvalKit)."""
    return sum(line.count("\t") > 0 for c in cells if "\n" in c for line in c.split("\n")[1:])


def _cell(cells: list, i: int | None) -> str:
    v = cells[i] if i is not None and i < len(cells) else ""
    return "" if v in NA_VALUES else v  # a missing value, as pandas reads it


class _TsvImages:
    """A TSV row's images. A reference (an `image` of 64 characters or fewer) is the index of
    another row, found by where that row starts in the file: rows read so far are noted, and a
    reference to a later row scans ahead for it. Decoded images of rows that are kept are held once
    for the rows reusing them. Unless inputs.original_images, each image is sent as VLMEvalKit's
    dump_image leaves it (items.dumped); `resaved` collects the ids of the rows (all shards') whose
    pixels that changed."""

    def __init__(
        self, path: str, fields: list, name: str, allow_any_path: bool, inputs: items.Inputs
    ):
        self.fh, self.allow, self.inputs = open(path, "rb"), allow_any_path, inputs
        self.base = os.path.dirname(os.path.abspath(path))
        self.index = fields.index("index") if "index" in fields else None
        self.image = fields.index("image") if "image" in fields else None
        self.paths = (
            "image_path" in fields
        )  # dump_image then names each image file after that column
        self.path_at = fields.index("image_path") if self.paths else None
        self.also = os.path.join(
            "images", name[: -len("_local")] if name.endswith("_local") else name
        )
        self.at, self.scanned, self.held = {}, 0, {}
        self.resaved = []

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

    def of_cell(self, field: str, keep: bool, id: str, path_cell: str | None = None) -> tuple:
        """The images of an `image` cell (base64, a reference, or a list literal of base64 strings),
        as the model gets them; path_cell: the row's image_path cell, which names dump_image's
        files."""
        ref = (
            field if len(field) <= 64 else None
        )  # VLMEvalKit: the index of the row whose image this reuses
        if ref is not None and ref in self.held:
            found = self.held[ref]
        else:
            if ref is not None and len(field := self._cell_of(ref)) <= 64:
                raise ValueError(f"image refers to index {ref!r}, which holds no image")
            found = tuple(items.decoded(p) for p in _list_cell(field))
            if (
                keep and ref is not None
            ):  # the bytes only: decoded pixels would take far more memory
                self.held[ref] = tuple((data, None) for data, _ in found)
        if self.inputs.original_images:
            return tuple(data for data, _ in found)
        exts = dump_names(len(found), path_cell if self.paths else None)
        sent = [items.dumped(data, ext, image) for (data, image), ext in zip(found, exts)]
        if any(changed for _, changed in sent):
            self.resaved.append(id)
        return tuple(data for data, _ in sent)

    def of_paths(self, field: str) -> tuple:
        """The images of an `image_path` cell: one path or a list literal of paths."""
        if not field:
            raise ValueError("empty image_path")
        return tuple(
            items.image_file(self.base, p, self.allow, self.also) for p in _list_cell(field)
        )

    def close(self) -> None:
        self.fh.close()


def dump_names(n: int, path_cell: str | None) -> list:
    """The extension of each file VLMEvalKit's dump_image (image_base.py at e8e78f05) writes for a
    row's n images, which decides the format it re-saves them in: <index>.png, or <index>_<i>.png
    for a list, without an image_path column (path_cell None); else the names image_path gives
    (often .jpg). A list of images whose image_path names fewer files is cut to them (zip), as
    dump_image cuts it. ValueError where VLMEvalKit fails: an empty image_path, one name for several
    images (zipped character by character: names without an extension), several names for one image.
    """
    if path_cell is None:
        return [".png"] * n
    if not path_cell:
        raise ValueError(
            "image_path is empty, which VLMEvalKit's toliststr cannot read (its run fails)"
        )
    names = _list_cell(path_cell)
    if (n == 1) != (len(names) == 1):
        raise ValueError(
            f"{n} image(s) but image_path names {len(names)} file(s): VLMEvalKit's dump_image "
            f"fails on it"
        )
    return [os.path.splitext(p)[1] for p in names[:n]]


def _list_cell(field: str) -> list:
    """VLMEvalKit's toliststr: a cell '[...]' is a list literal of strings; any other cell is one
    string."""
    if not (field.startswith("[") and field.endswith("]")):
        return [field]
    try:
        parts = ast.literal_eval(field)
    except (ValueError, SyntaxError):
        parts = None
    if not (isinstance(parts, list) and all(isinstance(p, str) for p in parts)):
        raise ValueError("image starts with '[' but is not a list of strings")
    return parts


def _mathvista(r: dict, dtypes: dict) -> dict:
    """MathVista's row: the question cell as is; multi_choice -> options from `choices` (a list
    literal), answer `answer_option`; any other question_type -> a free-form Value, compared by
    VLMEvalKit's rule."""
    if r["question_type"] != "multi_choice":
        try:
            precision = int(float(r["precision"])) if r["precision"] else None  # OverflowError: inf
        except (ValueError, OverflowError):
            raise ValueError(
                f"precision {r['precision']!r} is not a number (of decimals, finite)"
            ) from None
        if precision is not None and precision < 0:
            raise ValueError(f"precision {r['precision']!r} is not a number of decimals (>= 0)")
        return dict(
            question=r["question"] or "nan",
            options=(),
            answer=r["answer"] or "nan",
            value=Value(
                r["answer_type"] or "text",
                precision,
                r["unit"] or "",
                dtypes.get("answer", "object"),
            ),
        )
    try:
        choices = ast.literal_eval(r["choices"] or "")
    except (ValueError, SyntaxError):
        choices = None
    if not isinstance(choices, (list, tuple)) or len(choices) > 26:
        raise ValueError(
            f"choices must be a list literal of at most 26 options, got "
            f"{(r['choices'] or '')[:40]!r}"
        )
    options = tuple((chr(65 + i), str(c)) for i, c in enumerate(choices))
    return dict(
        question=r["question"] or "nan", options=options, answer=r["answer_option"] or "nan"
    )


def question(r: dict, letters: list, kind: str, dtypes: dict, stripped: bool = False) -> dict:
    """What a row asks and how its answer is read, by the dataset's conventions (None: a missing
    value): the Item's question (the whole text: build_question's, `stripped` as there), options,
    answer and, for a free-form MathVista row, value."""
    if kind == "mathvista":
        return _mathvista(r, dtypes)
    options = [(k, r[k]) for k in letters if r[k] is not None]
    question, hint, answer = r["question"] or "nan", r["hint"] or "", r["answer"] or "nan"
    if (
        kind == "mmmu"
    ):  # MMMU_preproc: an open question (no A) reads A = its answer, B = "Other Answers"
        prompt = build_question(question, options, hint, stripped)
        if r["A"] is None:
            filled = {**dict(options), "A": r["answer"], "B": "Other Answers"}
            options = sorted((k, v) for k, v in filled.items() if v is not None)
        gt = answer if LETTER.fullmatch(answer) else "A"
        return dict(question=prompt, options=tuple(options), answer=gt)
    prompt = r["prompt"] if kind == "cvbench" else None
    return dict(
        question=prompt or build_question(question, options, hint, stripped),
        options=tuple(options),
        answer=answer,
    )


def _check_placeholders(item: Item) -> Item:
    named = [int(k) for k in PLACEHOLDER.findall(item.question)]
    if any(not 1 <= k <= len(item.images) for k in named):
        raise ValueError(
            f"the text names <image {max(named)}> but the row has {len(item.images)} image(s)"
        )
    return item


def _header(fields: list, path: str, warnings: list) -> list:
    """A TSV's column names as pandas names them (not stripped; a repeated name gets ".1"), checked:
    a question or prompt column; a warning when no image column, and for each repeated name."""
    raw = [fields[0].lstrip("\ufeff")] + fields[
        1:
    ]  # a BOM is not part of "index"; a record has a cell
    if any(map(BAD_BYTE.search, raw)):
        raise ValueError(f"{path} line 1: the header is not valid UTF-8")
    fields = mangle(raw)
    for k, (a, b) in enumerate(zip(raw, fields)):
        if a != b:
            warnings.append(
                f"{os.path.basename(path)}: column {k + 1} repeats the name {a!r}; as pandas does "
                f"for VLMEvalKit, it is read as {b!r}"
                + (", which is no option" if LETTER.fullmatch(a) else "")
            )
    if "question" not in fields and "prompt" not in fields:
        raise ValueError(
            f"{path}: no question or prompt column (columns: {', '.join(fields) or 'none'})"
        )
    if "image" not in fields and "image_path" not in fields:
        warnings.append(
            f"{os.path.basename(path)} has neither an image nor an image_path column: "
            "its questions run without images"
        )
    return fields


def _tsv_item(
    name: str, line: int, cells: list, fields: list, images: _TsvImages, keep, dtypes: dict
) -> Item | None:
    """One TSV record as an Item, or None for a row without an image; ValueError says what is
    wrong."""
    if len(cells) > len(fields):
        raise ValueError(f"{len(cells)} cells, the header has {len(fields)}")
    for k, cell in zip(fields, cells):
        check_utf8(cell, f" in column {k}")
    raw = {k: cells[i] if i < len(cells) else "" for i, k in enumerate(fields)}
    r = defaultdict(lambda: None, {k: shown(v, dtypes[k]) for k, v in raw.items() if k in dtypes})
    if "image" in fields and raw["image"] in NA_VALUES:  # VLMEvalKit drops a row without an image
        return None
    id = _cell(cells, images.index).strip() or str(line)
    ims = (
        images.of_cell(raw["image"], keep(id), id, _cell(cells, images.path_at))
        if "image" in fields
        else images.of_paths(raw["image_path"])
        if "image_path" in fields
        else ()
    )
    k = kind(name)
    item = Item(  # not checked: VLMEvalKit scores every row as pandas read it
        name,
        id,
        line,
        images=ims,
        fields=tuple((c, v) for c, v in raw.items() if c != "image"),
        **question(
            r, [c for c in fields if LETTER.fullmatch(c)], k, dtypes, images.inputs.stripped_prompt
        ),
    )
    return _check_placeholders(item) if k == "mmmu" else item


def _types(path: str, fields: list, warnings: list, limit: int | None = None) -> dict:
    """{column: dtype} as pandas infers it from every cell (the image columns are left out), and a
    warning for each record that swallowed rows into a quoted cell."""
    cols = {k: Column() for k in fields if k not in ("image", "image_path")}
    with open(path, "rb") as fh:
        records = _records(fh)
        next(records)  # the header: read() found it
        for n_read, (line, _, _, cells) in enumerate(records, 1):
            if n := swallowed(cells):
                warnings.append(
                    f"{os.path.basename(path)} line {line}: a quoted cell holds {n} line(s) that "
                    f'look like rows (an unclosed "?); pandas, and so VLMEvalKit, reads them as '
                    "part of that cell too"
                )
            for i, k in enumerate(fields):
                if k in cols:
                    cols[k].note(cells[i] if i < len(cells) else "")
            if (
                limit is not None and n_read >= limit
            ):  # --limit: typed as a file of the rows it reads would be
                break
    return {k: c.dtype for k, c in cols.items()}


def read(path: str, name: str, keep, allow_any_path: bool, warnings: list, info: dict):
    """(line, Item | Skipped | None for a row without an image) for each record of a
    VLMEvalKit TSV."""
    csv.field_size_limit(2**31 - 1)  # a base64 image is one huge field
    with open(path, "rb") as fh:
        records = _records(fh)
        head = next(records, None)
        if head is None:
            raise ValueError(f"{path}: empty file (no header line)")
        fields = _header(head[3], path, warnings)
        dtypes = info["dtypes"] = _types(path, fields, warnings, info.get("limit"))
        images = _TsvImages(path, fields, name, allow_any_path, info["inputs"])
        info["resaved"] = images.resaved
        try:
            for line, start, end, cells in records:
                images.note(_cell(cells, images.index).strip(), start, end)
                try:
                    yield line, _tsv_item(name, line, cells, fields, images, keep, dtypes)
                except ValueError as e:
                    yield line, Skipped(os.path.basename(path), line, str(e))
        finally:
            images.close()
