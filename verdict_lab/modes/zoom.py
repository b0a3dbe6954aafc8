"""ReVISE's ZoomIn tool, and the zoom judge mode built on it: the visual judge names regions, each
is checked, and it scores the step from their close-ups.

Cheng, Goel and Bilen, "Think, Look, and Revise: Inconsistency-Aware Visual Self-Correction in
MLLMs" (ReVISE), appendix B: a model calls ZoomIn on a box of its choice and looks at the crop; a
tool's output is verified, and when it is unreliable the model falls back to its own perception of
the whole image.

zoom_in   App. B: "returning high-resolution crops centered on the box. The crop is clipped to image
          boundaries, adjusted to keep aspect ratio within 4:1, and upsampled with Lanczos
          interpolation; zoom is capped at 4.0, with optional scaling for minimum resolution."
the mode  before it scores a candidate, the visual judge names at most K regions of the image
          (prompts/zoom.txt, a JSON request under regions_schema); every box is checked
          (check_region: inside the image, not degenerate, not a copy of the whole image); when all
          pass, zoom_in's crops are attached to the judge's request, just before its task, and the
          judge scores from the image and the close-ups. When the judge names none, a box fails its
          check, or the reply is unreadable twice, the judge scores from the full image alone, as
          plain VERDICT does, and the record says which path was taken and why (modes/judge.py
          makes the calls).

Box conventions (a box is [x1, y1, x2, y2], x to the right, y down, x2 > x1 and y2 > y1):
  "source"    pixels of the source image, after its EXIF orientation (what the model is shown);
  "sent"      pixels of the image as judges.encode_image sends it: downscaled to the pixel budget
              (max_pixels), aspect ratio kept;
  "norm1000"  ReVISE's normalised coordinates: 0..1000 across the width and across the height.
The judge names boxes in "norm1000". They are relative to the image, so they mean the same region of
the image as sent and of the source image; to_source maps them to source pixels (x·W/1000, y·H/1000)
and the crop is cut from the source, at its full resolution. A question with several images: the
boxes name regions of the first.

Nothing here makes a request: this module is geometry and pillow.
"""

from __future__ import annotations

import base64
import io
import json
import math
import numbers
from dataclasses import dataclass

import numpy as np
from PIL import Image

from judges import MAX_PIXELS
from verdict_lab.images import encode as encode_image, load, to_rgb
from verdict_lab.text import one_line
from verdict_lab.formats import json_object

COORDS = ("source", "sent", "norm1000")
MAX_ZOOM = 4.0  # App. B: "zoom is capped at 4.0"
MAX_RATIO = 4  # App. B: "aspect ratio within 4:1"
# In pixels: a coordinate this close to a whole pixel is that pixel, since x·W/1000 is rarely exact.
EPS = 1e-6
MIN_SIDE = 28  # the optional minimum resolution: one Qwen2.5-VL patch is 28×28 pixels


# ----------------------------------------------------------------------------- boxes


def check_box(box, name: str = "box") -> tuple:
    """(x1, y1, x2, y2) as floats; ValueError naming the box if it is not 4 finite numbers with
    x2 > x1 and y2 > y1 (a degenerate box has no area to look at)."""
    try:
        b = tuple(float(v) for v in box)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int no float holds
        b = ()
    if len(b) != 4:
        raise ValueError(f"a box must be 4 numbers [x1, y1, x2, y2], got {name}={box!r}")
    if not all(math.isfinite(v) for v in b):
        raise ValueError(f"{name}={list(box)} has a non-finite coordinate")
    if not (b[2] > b[0] and b[3] > b[1]):
        raise ValueError(f"{name}={list(box)} is degenerate: it needs x2 > x1 and y2 > y1")
    return b


def sent_size(image, max_pixels: int = MAX_PIXELS) -> tuple:
    """(width, height) of `image` as judges.encode_image sends it at `max_pixels` (read from the PNG
    it encodes, which is memoised, so a judge that already sent the image pays nothing)."""
    png = base64.b64decode(encode_image(image, max_pixels).split(",", 1)[1])
    return Image.open(io.BytesIO(png)).size


def to_source(box, coords: str, source: tuple, sent: tuple | None = None) -> tuple:
    """A box in `coords` ("source", "sent" or "norm1000") as floats in source pixels.

    source = (W, H) of the source image; sent = (w, h) of the image the model saw (needed for
    "sent").
      sent:      x ← x·W/w, y ← y·H/h (each axis on its own: the budget's rounding makes them
                 differ);
      norm1000:  x ← x·W/1000, y ← y·H/1000.
    Raises ValueError naming the box when it is not a valid box (check_box) or the convention is
    unknown.
    """
    x1, y1, x2, y2 = check_box(box)
    W, H = source
    if coords == "source":
        sx, sy = 1.0, 1.0
    elif coords == "sent":
        if sent is None:
            raise ValueError("coords='sent' needs the sent image's size (sent_size)")
        sx, sy = W / sent[0], H / sent[1]
    elif coords == "norm1000":
        sx, sy = W / 1000.0, H / 1000.0
    else:
        raise ValueError(f"coords must be one of {', '.join(COORDS)}, got coords={coords!r}")
    return x1 * sx, y1 * sy, x2 * sx, y2 * sy


def _whole(lo: float, hi: float, limit: int) -> tuple:
    """[lo, hi) ⊂ [0, limit] rounded outwards to whole pixels, at least one pixel long."""
    a = min(math.floor(lo + EPS), limit - 1)
    return a, max(math.ceil(hi - EPS), a + 1)


def _span(c: float, n: int, limit: int) -> tuple:
    """[a, a + n): n pixels centred on c, shifted to lie inside [0, limit] (n ≤ limit)."""
    a = min(max(math.floor(c - n / 2), 0), limit - n)
    return a, a + n


def crop_box(box, size: tuple) -> tuple:
    """The integer crop (x1, y1, x2, y2) that ZoomIn takes for a box in source pixels on an image of
    `size`.

    1. Clip to the image, then round outwards to whole pixels (a box overlapping the image keeps
       ≥ 1 px; a coordinate within EPS of a whole pixel is that pixel, so a box survives a round
       trip through [0, 1000]).
    2. Keep the ratio long/short ≤ 4 (App. B's 4:1): widen the short side to ⌈long/4⌉ about the
       box's centre, shifted back inside the image at a border. Only when the image itself is too
       thin for that (short side of the image < long/4) is the long side narrowed to 4 × short
       about the centre.
    The crop then contains the clipped box, except in that last case. ValueError if the box
    (check_box) is invalid or does not overlap the image.
    """
    x1, y1, x2, y2 = check_box(box)
    W, H = size
    if not (min(x2, W) > max(x1, 0) and min(y2, H) > max(y1, 0)):
        raise ValueError(f"box={[x1, y1, x2, y2]} lies outside the {W}×{H} image")
    (a, b), (c, d) = _whole(max(x1, 0.0), min(x2, W), W), _whole(max(y1, 0.0), min(y2, H), H)
    if d - c > MAX_RATIO * (b - a):  # tall: solve it as a wide box on the transposed image
        t = _fit_wide((c, a, d, b), (H, W))
        return t[1], t[0], t[3], t[2]
    return _fit_wide((a, c, b, d), (W, H))


def _fit_wide(c: tuple, size: tuple) -> tuple:
    """crop_box's step 2 for a box no taller than 4 × its width."""
    (x1, y1, x2, y2), (W, H) = c, size
    w = x2 - x1
    if w <= MAX_RATIO * (y2 - y1):
        return c
    n = min(math.ceil(w / MAX_RATIO), H)  # widen the short side ...
    y1, y2 = _span((y1 + y2) / 2, n, H)
    if w > MAX_RATIO * n:  # ... or, on a too-thin image, narrow the long side
        x1, x2 = _span((x1 + x2) / 2, MAX_RATIO * n, W)
    return x1, y1, x2, y2


# ----------------------------------------------------------------------------- ZoomIn


@dataclass(frozen=True)
class Crop:
    """What zoom_in returns: the upsampled crop, the crop box in source pixels, and the scale
    applied."""

    image: Image.Image
    box: tuple  # (x1, y1, x2, y2), integers, source pixels (after EXIF orientation)
    zoom: float  # output pixels per source pixel, before rounding to whole pixels


def out_size(
    w: int, h: int, zoom: float, min_side: int = MIN_SIDE, max_pixels: int = MAX_PIXELS
) -> tuple:
    """The (width, height) a w×h crop is resampled to, and the scale s:

      s = min(zoom, 4.0)                    App. B's cap
      s = max(s, min_side / min(w, h))      the optional minimum resolution (min_side = 0: off)
      s = min(s, sqrt(max_pixels / (w·h)))  never more pixels than the budget the crop is sent at
                                            (encode_image would downscale it to that anyway)
    Each side is ⌊side·s⌋ (at least 1), and the long side is then cut to 4 × the short side, so the
    output's ratio stays ≤ 4 after rounding. The budget wins over min_side when they conflict.
    """
    if not (isinstance(zoom, numbers.Real) and math.isfinite(zoom) and zoom >= 1.0):
        raise ValueError(
            f"ZoomIn upsamples: zoom must be a number >= 1 (capped at {MAX_ZOOM}), "
            f"got zoom={zoom!r}"
        )
    s = min(float(zoom), MAX_ZOOM)
    if min_side:
        s = max(s, min_side / min(w, h))
    s = min(s, math.sqrt(max_pixels / (w * h)))
    short, long_ = (max(1, math.floor(v * s + 1e-9)) for v in sorted((w, h)))
    long_ = min(long_, MAX_RATIO * short)
    return ((long_, short) if w >= h else (short, long_)), s


def zoom_in(
    image,
    box,
    zoom: float = 1.0,
    *,
    coords: str,
    min_side: int = MIN_SIDE,
    max_pixels: int = MAX_PIXELS,
) -> Crop:
    """ReVISE's ZoomIn (App. B): a high-resolution crop of `image` centred on `box`.

    image: a path, bytes or PIL image; it is oriented by its EXIF tag and converted to RGB first, as
    judges.encode_image does, so "source" pixels are those of the image the model was shown.
    box: [x1, y1, x2, y2] in the convention `coords` names (required, as a box alone is ambiguous):
      "source"   source pixels;
      "sent"     pixels of the image as sent at `max_pixels` (a model answering in the pixels it
                 saw);
      "norm1000" ReVISE's [0, 1000] normalised coordinates.
    The crop is crop_box's (clipped, ratio ≤ 4 about the box's centre), resampled with Lanczos to
    out_size's size (zoom capped at 4.0; scaled up so its short side is at least `min_side`; no more
    than `max_pixels`). ValueError names a bad box (not 4 finite numbers, degenerate, outside the
    image), an unknown `coords` or a zoom below 1.
    """
    img = to_rgb(load(image))
    sent = sent_size(image, max_pixels) if coords == "sent" else None
    x1, y1, x2, y2 = crop_box(to_source(box, coords, img.size, sent), img.size)
    size, s = out_size(x2 - x1, y2 - y1, zoom, min_side, max_pixels)
    return Crop(
        img.crop((x1, y1, x2, y2)).resize(size, Image.Resampling.LANCZOS), (x1, y1, x2, y2), s
    )


def iou(a, b) -> np.ndarray:
    """IoU = |a ∩ b| / |a ∪ b| of every box in a [p, 4] against every box in b [r, 4] -> [p, r].

    A box with x2 ≤ x1 or y2 ≤ y1 has no area, so its IoU is 0; so is that of two such boxes
    (empty union).
    """
    a = np.asarray(a, dtype=np.float64)[:, None, :]  # [p, 4] -> [p, 1, 4]
    b = np.asarray(b, dtype=np.float64)[None, :, :]  # [r, 4] -> [1, r, 4]
    # The width and the height of each intersection, both [p, r].
    iw = np.clip(np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0]), 0, None)
    ih = np.clip(np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1]), 0, None)
    area = lambda z: (
        np.clip(z[..., 2] - z[..., 0], 0, None) * np.clip(z[..., 3] - z[..., 1], 0, None)
    )
    inter, union = iw * ih, area(a) + area(b) - iw * ih  # [p, r]
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)  # [p, r]


# ----------------------------------------------------------------------------- the zoom mode

K = 3  # the most regions the judge may name per candidate
ZOOM = 2.0  # the crops' upsampling (zoom_in caps it at 4.0)
# A box whose IoU with the whole image exceeds this is a copy of the image, not a region.
COPY_IOU = 0.9
SCALE = 1000  # the boxes' coordinates: 0..SCALE across the width and the height
LOOKS = (
    "Close-ups of the regions named for this step follow, in this order (boxes in 0-1000 "
    "coordinates across the image's width and height): {boxes}. Check the step against them and "
    "the image.\n\n"
)


def regions_schema(k: int = K) -> dict:
    """The region request's JSON schema: {"boxes": at most k lists of 4 integers in 0..SCALE}."""
    coord = {"type": "integer", "minimum": 0, "maximum": SCALE}
    box = {"type": "array", "items": coord, "minItems": 4, "maxItems": 4}
    return {
        "type": "object",
        "properties": {"boxes": {"type": "array", "items": box, "maxItems": k}},
        "required": ["boxes"],
        "additionalProperties": False,
    }


def parse_regions(text: str, k: int = K) -> list:
    """The boxes of a region reply {"boxes": [[x1, y1, x2, y2], ...]}, as lists of floats; [] for
    none. ValueError (the reply is asked for again) when it is not that shape: not a JSON object,
    "boxes" not a list of at most k entries, or an entry not 4 real numbers. Whether a box is usable
    is check_region's."""
    try:
        boxes = json_object(text).get("boxes")
    except (ValueError, AttributeError):
        boxes = None
    if not isinstance(boxes, list):
        raise ValueError(f'no JSON object with a "boxes" list in {one_line(text, 60)!r}')
    if len(boxes) > k:
        raise ValueError(f"at most {k} boxes, got {len(boxes)}")
    # A number too large for a float, such as 1e309, reads as inf, so it is not finite.
    real = lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)
    for b in boxes:
        if not (isinstance(b, list) and len(b) == 4 and all(real(v) for v in b)):
            raise ValueError(
                "a box must be 4 finite numbers [x1, y1, x2, y2], "
                f"got {one_line(json.dumps(b), 60)}"
            )
    return [[float(v) for v in b] for b in boxes]


def check_region(box) -> str | None:
    """None if `box` (0..SCALE coordinates) is a usable region, else why not: not finite, degenerate
    (x2 ≤ x1 or y2 ≤ y1), not inside the image (a coordinate outside 0..SCALE), or a copy of the
    whole image (IoU with [0, 0, SCALE, SCALE] above COPY_IOU: a close-up of everything shows
    nothing new)."""
    try:
        b = check_box(box)
    except ValueError as e:
        return str(e)
    if not all(0 <= v <= SCALE for v in b):
        return f"box={list(box)} is not inside the image (coordinates 0..{SCALE})"
    overlap = float(iou([b], [[0, 0, SCALE, SCALE]])[0, 0])  # [1, 4] × [1, 4] -> [1, 1]
    if overlap > COPY_IOU:
        return f"box={list(box)} is a copy of the whole image (IoU {overlap:.2f} > {COPY_IOU})"
    return None


def looks(image, boxes: list, zoom: float = ZOOM, max_pixels: int = MAX_PIXELS) -> tuple:
    """(the close-ups of `boxes`, their crops in source pixels): zoom_in of each box, norm1000."""
    crops = [zoom_in(image, b, zoom, coords="norm1000", max_pixels=max_pixels) for b in boxes]
    return [c.image for c in crops], [list(c.box) for c in crops]


def looks_note(boxes: list) -> str:
    """What the judge reads before the close-ups: the boxes, in order."""
    return LOOKS.format(
        boxes=", ".join(
            f"{i} {[int(v) if float(v).is_integer() else v for v in b]}"
            for i, b in enumerate(boxes, 1)
        )
    )


def decide(boxes: list | None, has_image: bool) -> tuple:
    """(path, why, each box's error or None): "zoom" when there is an image and every named box
    passes check_region; else "full" with why: "no image", "unreadable" (boxes None), "none named"
    or "invalid"."""
    if not has_image:
        return "full", "no image", []
    if boxes is None:
        return "full", "unreadable", []
    errors = [check_region(b) for b in boxes]
    if not boxes:
        return "full", "none named", errors
    return ("full", "invalid", errors) if any(errors) else ("zoom", None, errors)
