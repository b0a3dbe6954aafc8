"""ReVISE's "look again" for VERDICT's visual judge: the judge names regions, each is checked, and the
close-ups it scores the step with (grounding.py's zoom mode).

Cheng, Goel and Bilen, "Think, Look, and Revise: Inconsistency-Aware Visual Self-Correction in MLLMs"
(ReVISE): a model calls ZoomIn on a box of its choice and looks at the crop (appendix B); a tool's output
is verified, and when it is unreliable the model falls back to its own perception of the whole image.
Here the visual judge, before it scores a candidate, names at most k regions of the image (prompts/zoom.txt,
a JSON request under regions_schema); every box is checked (check_region: inside the image, not degenerate,
not a copy of the whole image); when all pass, revise.zoom_in's crops are attached to the judge's request,
just before its task, and the judge scores from the image and the close-ups. When the judge names none, a
box fails its check, or the reply is unreadable twice, the judge scores from the full image alone, as
plain VERDICT does, and the record says which path was taken and why.

Boxes are asked for in ReVISE's normalised coordinates, 0..1000 across the width and the height
(revise's "norm1000"). They are relative to the image, so they mean the same region of the image as sent
(downscaled to the pixel budget, ratio kept) and of the source image; revise.to_source maps them to
source pixels (x·W/1000, y·H/1000) and the crop is cut from the source, at its full resolution. A question
with several images: the boxes name regions of the first.
"""
from __future__ import annotations

import json
import numbers

import revise
from client import one_line

K = 3             # the most regions the judge may name per candidate
ZOOM = 2.0        # the crops' upsampling (revise.zoom_in caps it at 4.0)
COPY_IOU = 0.9    # a box whose IoU with the whole image exceeds this is a copy of the image, not a region
SCALE = 1000      # the boxes' coordinates: 0..SCALE across the width and the height
LOOKS = ("Close-ups of the regions named for this step follow, in this order (boxes in 0-1000 coordinates "
         "across the image's width and height): {boxes}. Check the step against them and the image.\n\n")


def regions_schema(k: int = K) -> dict:
    """The region request's JSON schema: {"boxes": at most k lists of 4 integers in 0..SCALE}."""
    coord = {"type": "integer", "minimum": 0, "maximum": SCALE}
    box = {"type": "array", "items": coord, "minItems": 4, "maxItems": 4}
    return {"type": "object", "properties": {"boxes": {"type": "array", "items": box, "maxItems": k}},
            "required": ["boxes"], "additionalProperties": False}


def parse_regions(text: str, k: int = K) -> list:
    """The boxes of a region reply {"boxes": [[x1, y1, x2, y2], ...]}, as lists of floats; [] for none.
    ValueError (the reply is asked for again) when it is not that shape: not a JSON object, "boxes" not a
    list of at most k entries, or an entry not 4 real numbers. Whether a box is usable is check_region's."""
    start, end = text.find("{"), text.rfind("}")
    try:
        boxes = json.loads(text[start:end + 1]).get("boxes") if 0 <= start < end else None
    except (ValueError, AttributeError):
        boxes = None
    if not isinstance(boxes, list):
        raise ValueError(f"no JSON object with a \"boxes\" list in {one_line(text, 60)!r}")
    if len(boxes) > k:
        raise ValueError(f"at most {k} boxes, got {len(boxes)}")
    real = lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool)
    for b in boxes:
        if not (isinstance(b, list) and len(b) == 4 and all(real(v) for v in b)):
            raise ValueError(f"a box must be 4 numbers [x1, y1, x2, y2], got {one_line(json.dumps(b), 60)}")
    return [[float(v) for v in b] for b in boxes]


def check_region(box) -> str | None:
    """None if `box` (0..SCALE coordinates) is a usable region, else why not: not finite, degenerate
    (x2 ≤ x1 or y2 ≤ y1), not inside the image (a coordinate outside 0..SCALE), or a copy of the whole
    image (IoU with [0, 0, SCALE, SCALE] above COPY_IOU: a close-up of everything shows nothing new)."""
    try:
        b = revise.check_box(box)
    except ValueError as e:
        return str(e)
    if not all(0 <= v <= SCALE for v in b):
        return f"box={list(box)} is not inside the image (coordinates 0..{SCALE})"
    overlap = float(revise.iou([b], [[0, 0, SCALE, SCALE]])[0, 0])  # [1, 4] × [1, 4] -> [1, 1]
    if overlap > COPY_IOU:
        return f"box={list(box)} is a copy of the whole image (IoU {overlap:.2f} > {COPY_IOU})"
    return None


def looks(image, boxes: list, zoom: float = ZOOM) -> tuple:
    """(the close-ups of `boxes`, their crops in source pixels): revise.zoom_in of each box, norm1000."""
    crops = [revise.zoom_in(image, b, zoom, coords="norm1000") for b in boxes]
    return [c.image for c in crops], [list(c.box) for c in crops]


def looks_note(boxes: list) -> str:
    """What the judge reads before the close-ups: the boxes, in order."""
    return LOOKS.format(boxes=", ".join(f"{i} {[int(v) if float(v).is_integer() else v for v in b]}"
                                         for i, b in enumerate(boxes, 1)))


def decide(boxes: list | None, has_image: bool) -> tuple:
    """(path, why, each box's error or None): "zoom" when there is an image and every named box passes
    check_region; else "full" with why: "no image", "unreadable" (boxes None), "none named" or "invalid"."""
    if not has_image:
        return "full", "no image", []
    if boxes is None:
        return "full", "unreadable", []
    errors = [check_region(b) for b in boxes]
    if not boxes:
        return "full", "none named", errors
    return ("full", "invalid", errors) if any(errors) else ("zoom", None, errors)

