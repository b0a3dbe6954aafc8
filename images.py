"""How VERDICT's agents see images: loading, orientation, colour modes, the pixel budget, data URLs,
and the chat messages that carry them.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026. The reasoner and the three agents all see the question's
images. An image is sent as a PNG data URL inside an OpenAI-style chat message:

- load: a path, bytes or a PIL image, decoded at once so that a truncated file fails early;
- encode_image: EXIF orientation applied, any colour mode to RGB, downscaled to the pixel budget
  (pixel_budget: by default VLMEvalKit's max_pixels for Qwen2.5-VL-7B, 16384 visual tokens of 28×28 pixels;
  demo.py's and evaluate.py's --max-pixels), lossless PNG, memoised;
- messages: [system, user] with the images first, then the text, so a server's prefix cache can reuse
  the image across calls; or, when the question names them as <image k> (MMMU), each image at its
  marker inside the question; a plain string when there is no image;
- font: the font pillow draws labels with in the demo's and the simulation's pictures.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import math
import os
import re
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image, ImageFont, ImageOps

# VLMEvalKit (e8e78f05, vlmeval/config.py) runs Qwen2.5-VL-7B-Instruct with min_pixels = 1280·28·28 and
# max_pixels = 16384·28·28. The client only downscales, to MAX_PIXELS by default; raising a small image to
# MIN_PIXELS is the server's processor's job (vLLM: --mm-processor-kwargs, docs/serving.md).
MIN_PIXELS = 1280 * 28 * 28  # 1 003 520
MAX_PIXELS = 16384 * 28 * 28  # 12 845 056: the default budget
_budget = [MAX_PIXELS]  # the budget in force (set_pixel_budget)
PLACEHOLDER = re.compile(r"<image (\d+)>")  # a question's k-th image, where the question names it (MMMU)


_encoded: OrderedDict = OrderedDict()  # (fingerprint, max_pixels) -> data URL, least recently used first
_encoded_lock = threading.Lock()
_pil_lock = threading.RLock()  # a PIL image may decode lazily, and two threads decoding one image corrupt it


def fingerprint(image) -> tuple:
    """What identifies an image's content cheaply: path + mtime + size, or a hash of the bytes, or of a PIL
    image's mode, size, orientation, palette, transparency and pixels (everything to_rgb reads)."""
    if isinstance(image, (str, Path)):
        try:
            st = os.stat(image)
        except OSError as e:
            raise ValueError(f"cannot read image {image}: {e.strerror}") from None
        return ("path", str(Path(image).resolve()), st.st_mtime_ns, st.st_size)
    if isinstance(image, (bytes, bytearray, memoryview)):
        return ("bytes", hashlib.sha256(image).hexdigest())
    if isinstance(image, Image.Image):
        with _pil_lock:
            pixels = image.tobytes()  # decodes a lazily opened image first
            palette = (image.palette.mode, image.palette.tobytes()) if image.palette is not None else None
            meta = (
                image.mode,
                image.size,
                image.getexif().get(0x0112),
                palette,
                image.info.get("transparency"),
            )
        return ("pil", hashlib.sha256(repr(meta).encode() + pixels).hexdigest())
    raise ValueError(f"an image must be a path, bytes or a PIL.Image, got {type(image).__name__}")


def load(image) -> Image.Image:
    """A PIL image from a path, bytes or a PIL image, decoded now; ValueError names what cannot be read."""
    if isinstance(image, Image.Image):
        return image
    name = str(image) if isinstance(image, (str, Path)) else f"<{len(image)} bytes>"
    try:
        data = Path(image).read_bytes() if isinstance(image, (str, Path)) else bytes(image)
        img = Image.open(io.BytesIO(data))
        img.load()  # decode now, so a truncated file fails here
        return img
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
        raise ValueError(f"cannot decode image {name}: {e}") from None


def to_rgb(img: Image.Image) -> Image.Image:
    """RGB from any mode: integer greyscale (I;16, I) scaled from 0..65535 when its values fit there, else,
    like F, stretched min..max; alpha composited on white."""
    img = ImageOps.exif_transpose(img)
    if img.mode.startswith("I;16") or img.mode in ("I", "F"):  # convert("RGB") would clip these to white
        a = np.asarray(img, dtype=np.float64)  # [h, w]
        sixteen_bit = (
            img.mode != "F" and a.min() >= 0 and a.max() <= 65535
        )  # the same pixels, the same render
        lo, hi = (0.0, 65535.0) if sixteen_bit else (a.min(), a.max())
        img = Image.fromarray(
            np.round((a - lo) * (255.0 / max(hi - lo, 1e-12))).clip(0, 255).astype(np.uint8)
        )
    if img.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in img.info:
        rgba = img.convert("RGBA")
        img = Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba)
    return img.convert("RGB")


def budget_size(size: tuple, max_pixels: int) -> tuple:
    """(w', h') with w'·h' <= max_pixels, each >= 1, keeping the aspect ratio of size = (w, h) as far as that
    allows: both sides scaled by r = sqrt(max_pixels / (w·h)), rounded down; a side that would fall below
    1 pixel stays 1 and the other side takes the rest of the budget (5000×1 at 1000 pixels: 1000×1)."""
    w, h = size
    r = math.sqrt(max_pixels / (w * h))
    w2, h2 = max(1, int(w * r)), max(1, int(h * r))
    if w2 * h2 > max_pixels:  # the shorter side was raised to 1 pixel: the longer one takes what is left
        w2, h2 = (max_pixels // h2, h2) if w2 > h2 else (w2, max_pixels // w2)
    return w2, h2


def pixel_budget() -> int:
    """The pixel budget in force: MAX_PIXELS unless set_pixel_budget changed it."""
    return _budget[0]


def set_pixel_budget(max_pixels: int) -> None:
    """Set the budget every image is sent at from now on (--max-pixels, for the reasoner and every judge)."""
    if not (isinstance(max_pixels, int) and max_pixels >= 1):  # bool is int, but True pixels is no budget
        raise ValueError(f"--max-pixels must be an integer >= 1, got {max_pixels!r}")
    _budget[0] = max_pixels


def encode_image(image, max_pixels: int | None = None) -> str:
    """A "data:image/png;base64,..." URL for a path, bytes or PIL.Image.

    EXIF orientation applied, any mode converted to RGB (alpha composited on white), downscaled to
    at most `max_pixels` pixels (default: pixel_budget()) keeping the aspect ratio, encoded as PNG
    (lossless: the model sees the pixels it was given). Memoised, so the n×m judge calls of a step encode
    once. Thread-safe, also for one lazily opened PIL image encoded from several threads at once.
    """
    max_pixels = pixel_budget() if max_pixels is None else max_pixels
    if not (isinstance(max_pixels, int) and max_pixels >= 1):
        raise ValueError(f"max_pixels must be an integer >= 1, got max_pixels={max_pixels!r}")
    with (
        _pil_lock if isinstance(image, Image.Image) else contextlib.nullcontext()
    ):  # the caller's image: one reader
        key = (fingerprint(image), max_pixels)
        with _encoded_lock:
            if key in _encoded:
                _encoded.move_to_end(key)
                return _encoded[key]
        img = to_rgb(load(image))  # a new image, this thread's own
    if img.width * img.height > max_pixels:
        img = img.resize(budget_size(img.size, max_pixels), Image.Resampling.LANCZOS, reducing_gap=3.0)
    buf = io.BytesIO()
    img.save(buf, "PNG")
    url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
    with _encoded_lock:
        _encoded[key] = url
        while len(_encoded) > 32:
            _encoded.popitem(last=False)
    return url


def messages(
    system: str, images: Sequence, text: str, question: str | None = None, max_pixels: int | None = None
) -> list:
    """[system, user]: the system message, then the user message: the images, then the text.

    Callers put the fixed part of the text (question, previous steps) before the varying part (the
    candidate), so a server's prefix cache reuses the images and all of that. With no image, the user
    content is a plain string: some llama.cpp chat formats drop list-valued content.

    MMMU's placement (VLMEvalKit's split_MMMU): when `question` names images as <image k>, the question's
    first occurrence in `text` is cut at each marker and the k-th image goes there, in place of the marker;
    images the question never names are left out, as VLMEvalKit leaves them out, and one named twice is sent
    twice. Only the question is searched, so a marker in a step or a candidate stays text. ValueError when the
    question names an image that is not there, or when `text` does not hold the question.
    """
    if not images:
        return [{"role": "system", "content": system}, {"role": "user", "content": text}]
    url = lambda k: {"type": "image_url", "image_url": {"url": encode_image(images[k], max_pixels)}}
    if question is None or not PLACEHOLDER.search(question):
        content = [url(k) for k in range(len(images))] + [{"type": "text", "text": text}]
        return [{"role": "system", "content": system}, {"role": "user", "content": content}]
    before, found, after = text.partition(question)
    if not found:  # a caller's bug: the question it names is not in its text
        raise ValueError(f"the text does not hold the question {question[:60]!r}")
    pieces = PLACEHOLDER.split(question)  # text, k, text, k, ..., text
    named = [int(k) for k in pieces[1::2]]
    if not all(1 <= k <= len(images) for k in named):
        raise ValueError(f"the question names <image {max(named)}> but there are {len(images)} image(s)")
    parts = [before + pieces[0]]
    for k, piece in zip(named, pieces[2::2]):
        parts += [url(k - 1), piece]
    parts[-1] += after
    content = [p if isinstance(p, dict) else {"type": "text", "text": p} for p in parts if p != ""]
    return [{"role": "system", "content": system}, {"role": "user", "content": content}]


def font(size: int):
    """pillow's default font at `size` points (its one small bitmap size before Pillow 10.1). It has no
    Greek letters, so pictures label τ, ε and Δ* in ASCII."""
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1 has one bitmap size only
        return ImageFont.load_default()
