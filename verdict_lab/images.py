"""Images as long runs meet them, made ready for judges.encode_image.

judges.py sends an image as PIL converts it to RGB. A benchmark file holds more than that: 16-bit
and floating-point scans, images with transparency, huge files, the same image in every request of
an item. This module reads any of them into an upright RGB image that shows what the file shows,
and encodes each file once:

- load: a path, bytes or a PIL image, decoded now; a file that holds more than MAX_FILE bytes is
  refused before it is read (and judges.decode_image refuses one that is not a regular file);
- to_rgb: upright RGB, with 16-bit and 32-bit modes scaled rather than clipped, and transparency
  laid on white;
- encode: the PNG data URL that judges.chat_messages sends as it is, cached for files and bytes.
"""

from __future__ import annotations

import hashlib
import os
import threading
import warnings
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

from judges import MAX_PIXELS, decode_image, encode_image

MAX_FILE = 2**28  # 256 MiB: a larger image file is refused before it is read
# Two threads that decode one lazily opened PIL image corrupt it; this lock keeps them apart.
_pil = threading.Lock()
ORIENTATION = 0x0112  # the EXIF tag that ImageOps.exif_transpose reads
MEMO = 32  # PIL images whose encodings encode keeps, by their pixels
_memo: dict = {}  # (digest, mode, size, max_pixels) -> data URL, least recent first


def load(image) -> Image.Image:
    """A PIL image of a path, bytes or PIL image, decoded now by judges.decode_image. A path that
    holds more than MAX_FILE bytes is refused before it is read. ValueError naming the image if it
    cannot be read."""
    if isinstance(image, Image.Image):
        return image
    if isinstance(image, (str, Path)):
        try:
            st = os.stat(image)
        except OSError as e:
            raise ValueError(f"cannot decode image {image}: {e}") from None
        if st.st_size > MAX_FILE:  # judges.decode_image refuses what is not a regular file
            raise ValueError(
                f"cannot decode image {image}: {st.st_size:,} bytes, more than the "
                f"{MAX_FILE:,} an image file may hold"
            )
    with warnings.catch_warnings():
        # The pixel budget scales a large image down, so PIL's warning says nothing new.
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        return decode_image(image)


def to_rgb(img: Image.Image) -> Image.Image:
    """The image upright (by its EXIF orientation) in RGB, showing what the file shows.

    convert("RGB") would clip 16-bit and 32-bit pixels to white, so I;16 and I images are scaled
    from 0..65535 when their values fit, and from their own min..max otherwise (as F always is).
    In an F image, the min..max is that of the finite pixels: +inf shows white, and −inf and NaN
    black. Transparent pixels are laid on white.
    """
    img = ImageOps.exif_transpose(img)
    if img.mode.startswith("I;16") or img.mode in ("I", "F"):
        a = np.asarray(img, dtype=np.float64)  # [h, w]
        finite = a[np.isfinite(a)]  # [k]
        lo, hi = (finite.min(), finite.max()) if finite.size else (0.0, 0.0)
        if img.mode != "F" and lo >= 0 and hi <= 65535:
            lo, hi = 0.0, 65535.0
        a = np.nan_to_num(a, nan=lo, posinf=hi, neginf=lo)
        scaled = np.round((a - lo) * (255 / max(hi - lo, 1e-12))).clip(0, 255)
        img = Image.fromarray(scaled.astype(np.uint8))
    if img.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in img.info:
        white = Image.new("RGBA", img.size, (255, 255, 255, 255))
        img = Image.alpha_composite(white, img.convert("RGBA"))
    return img.convert("RGB")


def encode(image, max_pixels: int = MAX_PIXELS) -> str:
    """The PNG data URL of a path, bytes or PIL image: to_rgb, then judges.encode_image.

    A file (by its path, modification time and size), bytes or a PIL image's pixels are encoded once
    and then served from a cache; a data URL is returned as it is.
    """
    if isinstance(max_pixels, bool) or not (isinstance(max_pixels, int) and max_pixels >= 1):
        raise ValueError(f"max_pixels must be an integer >= 1, got max_pixels={max_pixels!r}")
    if isinstance(image, str) and image.startswith("data:image/"):
        return image
    if isinstance(image, (str, Path)):
        try:
            st = os.stat(image)
        except OSError as e:
            raise ValueError(f"cannot read image {image}: {e.strerror}") from None
        return _encoded(str(Path(image).resolve()), st.st_mtime_ns, st.st_size, max_pixels)
    if isinstance(image, (bytes, bytearray, memoryview)):
        return _encoded(bytes(image), None, None, max_pixels)
    if not isinstance(image, Image.Image):
        raise ValueError(
            f"an image must be a path, bytes or a PIL.Image, got {type(image).__name__}"
        )
    # The same pixels come in every request of an item (lmms-eval hands over PIL images), and a PNG
    # encoding costs milliseconds: the last MEMO encodings are kept by their pixels' digest. An
    # upright RGB image without transparency is what to_rgb would copy, so it is not copied.
    with _pil:  # decoded under the lock; once loaded, its pixels are only read
        rgb = image if _upright_rgb(image) else to_rgb(image)
        rgb.load()
    key = (hashlib.sha256(rgb.tobytes()).digest(), rgb.mode, rgb.size, max_pixels)
    with _pil:
        url = _memo.pop(key, None)
    url = encode_image(rgb, max_pixels) if url is None else url
    with _pil:
        _memo[key] = url  # the most recent last
        while len(_memo) > MEMO:
            del _memo[next(iter(_memo))]
    return url


def _upright_rgb(img: Image.Image) -> bool:
    """Whether to_rgb(img) has img's own pixels: RGB, no transparency, no EXIF rotation."""
    return (
        img.mode == "RGB"
        and "transparency" not in img.info
        and img.getexif().get(ORIENTATION, 1) == 1
    )


@lru_cache(maxsize=32)
def _encoded(source, mtime, size, max_pixels: int) -> str:
    return encode_image(to_rgb(load(source)), max_pixels)
