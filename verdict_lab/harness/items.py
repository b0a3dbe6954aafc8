"""A benchmark row ready to run (Item), a malformed one (Skipped), and what every reader shares: the
multiple-choice prompt, images decoded or found on disk, a row's fields checked, and what reaches
the model (Inputs: by default VLMEvalKit's own, its build_prompt's text and its dump_image's
re-saved images).

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026, reports accuracy on six multiple-choice benchmarks
(3DSRBench, CV-Bench-3D, CV-Bench-2D, BLINK, MMStar, AI2D_TEST) in VLMEvalKit's file format.

Image paths are relative to the data file's directory, or absolute inside its tree (VLMEvalKit's
LOCALIZE writes LMUData/images/<name>/...); one that resolves outside it (symlinks followed) is an
error unless allow_any_path. VLMEvalKit's behaviour is read in its code at commit e8e78f05
(docs/parity.md, "What reaches the model").
"""

from __future__ import annotations

import base64
import binascii
import io
import os
import re
from dataclasses import dataclass

from PIL import Image

from verdict_lab.images import load as load_image, to_rgb
from verdict_lab.harness.answers import Value

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
    value: Value | None = (
        None  # how a free-form answer is compared (MathVista); None: multiple choice
    )


@dataclass(frozen=True)
class Skipped:
    """A malformed row: never run, never scored, counted in the summary."""

    file: str
    row: int
    reason: str


def build_question(question: str, options, hint: str = "", stripped: bool = False) -> str:
    """VLMEvalKit's multiple-choice prompt (ImageMCQDataset.build_prompt at e8e78f05), whitespace
    included: "Hint: {hint}\n" (when there is one), "Question: {question}\n", then "Options:\n", an
    "A. ...\n" line per option and "Please select the correct answer from the options above. \n" (a
    space, then a newline); with no options (an MMMU open question), Hint: and Question: alone, each
    ending in "\n". stripped: the same lines joined by newlines with nothing after the last
    (--stripped-prompts)."""
    lines = ([f"Hint: {hint}"] if hint else []) + [f"Question: {question}"]
    if options:
        lines += ["Options:"] + [f"{k}. {v}" for k, v in options]
        lines += ["Please select the correct answer from the options above."]
    if stripped:
        return "\n".join(lines)
    if options:
        lines[-1] += " "
    return "".join(line + "\n" for line in lines)


def decoded(s) -> tuple:
    """(bytes, the decoded PIL image) of bytes, base64 or a base64 data URL; ValueError when it is
    no image. The image is decoded now (images.load), so a truncated one fails here, not in the
    middle of a run."""
    try:
        data = (
            s
            if isinstance(s, bytes)
            else base64.b64decode(
                s.split(",", 1)[-1] if s.startswith("data:") else s, validate=True
            )
        )
        image = load_image(data)
    except (binascii.Error, ValueError) as e:
        raise ValueError(
            f"undecodable image ({len(s)} {'bytes' if isinstance(s, bytes) else 'chars'}: {e})"
        ) from None
    return data, image


def decode_image(s) -> bytes:
    """Bytes, base64 or a base64 data URL -> the bytes of an image that decodes; ValueError
    otherwise."""
    return decoded(s)[0]


def vlmeval_resave(data: bytes, ext: str) -> bytes:
    """The bytes VLMEvalKit's dump_image writes for an image whose file name ends in `ext`
    (vlmeval/smp/vlm.py decode_base64_to_image_file at e8e78f05): decoded; converted to RGB only
    from the modes RGBA, P and LA (alpha dropped, not composited on white); saved with pillow's
    defaults in the extension's format (PNG: lossless; JPEG: quality 75, 4:2:0; EXIF dropped, so an
    orientation tag no longer rotates it). ValueError when pillow cannot write it (CMYK as PNG, I;16
    as JPEG, an unknown extension): VLMEvalKit's build_prompt then fails, and with it VLMEvalKit's
    run of the whole file."""
    try:
        image = Image.open(io.BytesIO(data))
        if image.mode in ("RGBA", "P", "LA"):
            image = image.convert("RGB")
        fmt = Image.registered_extensions().get(ext.lower())
        if fmt is None:
            raise ValueError(f"unknown file extension {ext!r}")
        if fmt not in Image.SAVE:  # .psd, .fits, .xpm, .cur, .pcd, ...: pillow reads them only
            raise ValueError(f"pillow reads {fmt} files but cannot write them")
        buf = io.BytesIO()
        image.save(buf, format=fmt)
    except (OSError, ValueError) as e:
        raise ValueError(
            f"VLMEvalKit's dump_image cannot write this image as "
            f"{ext or 'a name without extension'} ({e}), so its run of this file fails; "
            "--original-images sends the file's own bytes"
        ) from None
    return buf.getvalue()


def seen(image: Image.Image) -> tuple:
    """What a request carries of an image: its size and images.to_rgb's pixels (EXIF rotation
    applied, alpha composited on white), before the pixel budget."""
    rgb = to_rgb(image)
    return rgb.size, rgb.tobytes()


def dumped(data: bytes, ext: str, image: Image.Image | None = None) -> tuple:
    """(the bytes to send, True when the model sees other pixels than the file's own): the image as
    dump_image leaves it (vlmeval_resave). When the re-save leaves what a request carries unchanged
    (seen), the file's own bytes are kept, so requests, cache entries and input digests stay as they
    were; a PNG of an RGB, L or 1 image without transparency and EXIF rotation is known to, and is
    not re-saved at all."""
    image = image if image is not None else load_image(data)
    plain = image.mode in ("RGB", "L", "1") and "transparency" not in image.info
    if (
        ext.lower() == ".png" and plain and image.getexif().get(0x0112, 1) == 1
    ):  # 0x0112: Orientation
        return data, False
    again = vlmeval_resave(data, ext)
    return (data, False) if seen(image) == seen(load_image(again)) else (again, True)


@dataclass(frozen=True)
class Inputs:
    """What reaches the model of a benchmark file's row: by default VLMEvalKit's, its images as
    dump_image leaves them and its prompt as build_prompt writes it."""

    original_images: bool = False  # the file's own image bytes (--original-images)
    stripped_prompt: bool = (
        False  # the prompt without VLMEvalKit's trailing " \n" (--stripped-prompts)
    )

    @classmethod
    def of_args(cls, args) -> "Inputs":
        """evaluate's --original-images and --stripped-prompts (False when args has neither)."""
        return cls(
            getattr(args, "original_images", False), getattr(args, "stripped_prompts", False)
        )

    def record(self) -> dict:
        """JSON-ready: {"images": "dump_image" | "original",
        "prompt": "build_prompt" | "stripped"}."""
        return {
            "images": "original" if self.original_images else "dump_image",
            "prompt": "stripped" if self.stripped_prompt else "build_prompt",
        }


def image_file(base: str, name: str, allow_any_path: bool = False, also: str = "") -> str:
    """The path of an image file a benchmark file names: relative to its directory `base` (or to
    `also` within it), or absolute inside `base`'s tree (VLMEvalKit's LOCALIZE writes
    LMUData/images/<name>/...). A path that resolves outside `base` after following symlinks raises
    ValueError unless allow_any_path, as do a missing file and one that does not decode."""
    full = os.path.normpath(os.path.join(base, name))
    if also and not os.path.isfile(full) and os.path.isfile(os.path.join(base, also, name)):
        full = os.path.normpath(os.path.join(base, also, name))
    if not allow_any_path:
        real, root = os.path.realpath(full), os.path.realpath(base)
        if os.path.commonpath([real, root]) != root:
            raise ValueError(
                f"image path {name} resolves to {real} (symlinks followed), outside {root}, the "
                f"data file's directory tree; --allow-any-path reads it"
            )
    if not os.path.isfile(full):
        raise ValueError(f"image file not found: {name} (looked for {full})")
    load_image(full)  # decode now: a broken file is this row's error, not a failed request
    return full


def make_item(
    data,
    id,
    row,
    question,
    options,
    answer,
    images,
    hint: str,
    fields: tuple,
    stripped: bool = False,
) -> Item:
    """A JSONL row's Item, its fields checked (ValueError names what is wrong), its prompt
    build_question's (`stripped` as there). A TSV row is not checked: VLMEvalKit scores every row as
    pandas read it (tsv.py)."""
    answer = str(answer).strip() if answer is not None else ""
    if not (isinstance(question, str) and question.strip()):
        raise ValueError("missing question")
    if not answer:
        raise ValueError("missing answer")
    if len(options) < 2:  # a question with one option cannot be answered wrong
        raise ValueError(f"needs at least two options, got {len(options)}")
    if answer not in dict(options):
        raise ValueError(
            f"answer {answer!r} is not one of the options {', '.join(k for k, _ in options)}"
        )
    text = build_question(question.strip(), options, hint, stripped)
    return Item(data, str(id), row, text, tuple(options), answer, tuple(images), fields)


def check_utf8(text: str, where: str = "") -> None:
    """ValueError naming the first byte that was not UTF-8 (a lone surrogate after
    surrogateescape)."""
    m = BAD_BYTE.search(text)
    if m:
        raise ValueError(f"not valid UTF-8 (byte 0x{ord(m.group()) - 0xDC00:02x}{where})")
