"""ReVISE's parts that need no training: the ZoomIn and Scharr-edge tools, and its GRPO rewards as plain
functions.

Cheng, Goel and Bilen, "Think, Look, and Revise: Inconsistency-Aware Visual Self-Correction in MLLMs"
(ReVISE), appendix B (the tools) and §3.3 (the rewards). The tools give a model a closer look at a
region, or the image's edges; the rewards score completions in any GRPO trainer.

zoom_in   App. B: "returning high-resolution crops centered on the box. The crop is clipped to image
          boundaries, adjusted to keep aspect ratio within 4:1, and upsampled with Lanczos
          interpolation; zoom is capped at 4.0, with optional scaling for minimum resolution."
edges     App. B: the Scharr operator on the greyscale image; the gradient magnitude, min-max
          normalised to [0, 255].
rewards   §3.3: format (1 for the prescribed tags, −1 otherwise), self-correction (−1 when the model
          emits "re-examine" but answers incorrectly, else 0), grounding (mean IoU against reference
          boxes plus the positive localisation improvement, 0 when no box is produced or updated) and
          answer accuracy. Each is `reward(completions, **kwargs) -> list`, the signature TRL's
          GRPOTrainer calls with the dataset's columns as keyword arguments.

Box conventions (a box is [x1, y1, x2, y2], x to the right, y down, x2 > x1 and y2 > y1):
  "source"    pixels of the source image, after its EXIF orientation (what the model is shown);
  "sent"      pixels of the image as images.encode_image sends it: downscaled to the pixel budget
              (images.MAX_PIXELS), aspect ratio kept;
  "norm1000"  ReVISE's normalised coordinates: 0..1000 across the width and across the height.
"""
from __future__ import annotations

import base64
import io
import json
import math
import numbers
import re
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from PIL import Image

from images import MAX_PIXELS, to_rgb, encode_image, load

COORDS = ("source", "sent", "norm1000")
MAX_ZOOM = 4.0   # App. B: "zoom is capped at 4.0"
MAX_RATIO = 4    # App. B: "aspect ratio within 4:1"
EPS = 1e-6       # pixels: a coordinate this close to a whole pixel is that pixel (x·W/1000 is rarely exact)
MIN_SIDE = 28    # the optional minimum resolution: one Qwen2.5-VL patch is 28×28 pixels


# ----------------------------------------------------------------------------- boxes

def check_box(box, name: str = "box") -> tuple:
    """(x1, y1, x2, y2) as floats; ValueError naming the box if it is not 4 finite numbers with x2 > x1
    and y2 > y1 (a degenerate box has no area to look at)."""
    try:
        b = tuple(float(v) for v in box)
    except (TypeError, ValueError):
        b = ()
    if len(b) != 4:
        raise ValueError(f"a box must be 4 numbers [x1, y1, x2, y2], got {name}={box!r}")
    if not all(math.isfinite(v) for v in b):
        raise ValueError(f"{name}={list(box)} has a non-finite coordinate")
    if not (b[2] > b[0] and b[3] > b[1]):
        raise ValueError(f"{name}={list(box)} is degenerate: it needs x2 > x1 and y2 > y1")
    return b


def sent_size(image, max_pixels: int = MAX_PIXELS) -> tuple:
    """(width, height) of `image` as images.encode_image sends it at `max_pixels` (read from the PNG it
    encodes, which is memoised, so a judge that already sent the image pays nothing)."""
    png = base64.b64decode(encode_image(image, max_pixels).split(",", 1)[1])
    return Image.open(io.BytesIO(png)).size


def to_source(box, coords: str, source: tuple, sent: tuple | None = None) -> tuple:
    """A box in `coords` ("source", "sent" or "norm1000") as floats in source pixels.

    source = (W, H) of the source image; sent = (w, h) of the image the model saw (needed for "sent").
      sent:      x ← x·W/w, y ← y·H/h (each axis on its own: the budget's rounding makes them differ);
      norm1000:  x ← x·W/1000, y ← y·H/1000.
    Raises ValueError naming the box when it is not a valid box (check_box) or the convention is unknown.
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
    """The integer crop (x1, y1, x2, y2) that ZoomIn takes for a box in source pixels on an image of `size`.

    1. Clip to the image, then round outwards to whole pixels (a box overlapping the image keeps ≥ 1 px;
       a coordinate within EPS of a whole pixel is that pixel, so a box survives a round trip through
       [0, 1000]).
    2. Keep the ratio long/short ≤ 4 (App. B's 4:1): widen the short side to ⌈long/4⌉ about the box's
       centre, shifted back inside the image at a border. Only when the image itself is too thin for that
       (short side of the image < long/4) is the long side narrowed to 4 × short about the centre.
    The crop then contains the clipped box, except in that last case. ValueError if the box (check_box)
    is invalid or does not overlap the image.
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
    n = min(math.ceil(w / MAX_RATIO), H)            # widen the short side ...
    y1, y2 = _span((y1 + y2) / 2, n, H)
    if w > MAX_RATIO * n:                           # ... or, on a too-thin image, narrow the long side
        x1, x2 = _span((x1 + x2) / 2, MAX_RATIO * n, W)
    return x1, y1, x2, y2


# ----------------------------------------------------------------------------- ZoomIn

@dataclass(frozen=True)
class Crop:
    """What zoom_in returns: the upsampled crop, the crop box in source pixels, and the scale applied."""
    image: Image.Image
    box: tuple    # (x1, y1, x2, y2), integers, source pixels (after EXIF orientation)
    zoom: float   # output pixels per source pixel, before rounding to whole pixels


def out_size(w: int, h: int, zoom: float, min_side: int = MIN_SIDE, max_pixels: int = MAX_PIXELS) -> tuple:
    """The (width, height) a w×h crop is resampled to, and the scale s:

      s = min(zoom, 4.0)                    App. B's cap
      s = max(s, min_side / min(w, h))      the optional minimum resolution (min_side = 0: off)
      s = min(s, sqrt(max_pixels / (w·h)))  never more pixels than the budget the crop is sent at
                                            (encode_image would downscale it to that anyway)
    Each side is ⌊side·s⌋ (at least 1), and the long side is then cut to 4 × the short side, so the
    output's ratio stays ≤ 4 after rounding. The budget wins over min_side when they conflict.
    """
    if not (isinstance(zoom, numbers.Real) and math.isfinite(zoom) and zoom >= 1.0):
        raise ValueError(f"ZoomIn upsamples: zoom must be a number >= 1 (capped at {MAX_ZOOM}), got zoom={zoom!r}")
    s = min(float(zoom), MAX_ZOOM)
    if min_side:
        s = max(s, min_side / min(w, h))
    s = min(s, math.sqrt(max_pixels / (w * h)))
    short, long_ = (max(1, math.floor(v * s + 1e-9)) for v in sorted((w, h)))
    long_ = min(long_, MAX_RATIO * short)
    return ((long_, short) if w >= h else (short, long_)), s


def zoom_in(image, box, zoom: float = 1.0, *, coords: str, min_side: int = MIN_SIDE,
            max_pixels: int = MAX_PIXELS) -> Crop:
    """ReVISE's ZoomIn (App. B): a high-resolution crop of `image` centred on `box`.

    image: a path, bytes or PIL image; it is oriented by its EXIF tag and converted to RGB first, as
    images.encode_image does, so "source" pixels are those of the image the model was shown.
    box: [x1, y1, x2, y2] in the convention `coords` names (required, as a box alone is ambiguous):
      "source"   source pixels;
      "sent"     pixels of the image as sent at `max_pixels` (a model answering in the pixels it saw);
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
    return Crop(img.crop((x1, y1, x2, y2)).resize(size, Image.Resampling.LANCZOS), (x1, y1, x2, y2), s)


# ----------------------------------------------------------------------------- Scharr edges

SCHARR_X = np.array([[-3, 0, 3], [-10, 0, 10], [-3, 0, 3]], dtype=np.float64)  # OpenCV's 3×3 Scharr, d/dx
SCHARR_Y = SCHARR_X.T                                                           # d/dy
GREY = np.array([0.299, 0.587, 0.114])  # ITU-R BT.601 luma, OpenCV's RGB2GRAY and pillow's "L"


def scharr_magnitude(grey: np.ndarray) -> np.ndarray:
    """|∇I| = sqrt(Gx² + Gy²), Gx = K ⋆ I and Gy = Kᵀ ⋆ I with K = SCHARR_X, as correlations:

      Gx[y, x] = Σ_{i,j ∈ {0,1,2}} K[i, j] · I[y + i − 1, x + j − 1]

    Borders are reflected without repeating the edge pixel (…c b | a b c … , OpenCV's default
    BORDER_REFLECT_101), so a region that is flat up to the border has no gradient there. A 1-pixel-wide
    axis reflects onto itself. grey: [h, w] finite floats; ValueError otherwise.
    """
    g = np.asarray(grey, dtype=np.float64)
    if g.ndim != 2 or g.size == 0:  # a greyscale image is one non-empty [h, w] plane
        raise ValueError(f"a greyscale image must be a non-empty 2-D array, got shape {g.shape}")
    if not np.isfinite(g).all():
        raise ValueError("a greyscale image must be finite, got NaN or infinity")
    h, w = g.shape
    p = np.pad(g, 1, mode="reflect")                                              # [h, w] -> [h+2, w+2]
    gx = sum(SCHARR_X[i, j] * p[i:i + h, j:j + w] for i in range(3) for j in range(3))  # [h, w]
    gy = sum(SCHARR_Y[i, j] * p[i:i + h, j:j + w] for i in range(3) for j in range(3))  # [h, w]
    return np.hypot(gx, gy)                                                       # [h, w]


def edges(image) -> Image.Image:
    """ReVISE's edge tool (App. B): the Scharr gradient magnitude of the greyscale image, min-max
    normalised to [0, 255] and rounded, as a mode "L" image of the source's size (after EXIF orientation).

    Grey = 0.299 R + 0.587 G + 0.114 B on the RGB image, kept in floating point. E = 255·(M − min M) /
    (max M − min M); a flat image (max M = min M) gives all zeros, as OpenCV's NORM_MINMAX does.
    """
    rgb = np.asarray(to_rgb(load(image)), dtype=np.float64)  # [h, w, 3]
    m = scharr_magnitude(rgb @ GREY)                           # [h, w, 3] -> [h, w]
    span = m.max() - m.min()
    e = (m - m.min()) * (255.0 / span) if span > 0 else np.zeros_like(m)  # [h, w]
    return Image.fromarray(np.rint(e).astype(np.uint8))  # uint8 [h, w] -> mode "L"


# ----------------------------------------------------------------------------- GRPO rewards (§3.3)

FORMAT = re.compile(r"\s*<think>.*?</think>\s*(?:<tool_call>.*?</tool_call>|<answer>.*?</answer>)\s*", re.S)
REEXAMINE = re.compile(r"(?i)\bre-?examin")   # "re-examine", "Re-examining", "reexamined", ...
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)
_BOXED = re.compile(r"\\boxed\{((?:[^{}]|\{[^{}]*\})*)\}")
_NUM = r"\s*(-?\d+(?:\.\d+)?)\s*"
_BOX = re.compile(r"\[" + ",".join([_NUM] * 4) + r"\]")  # [x1, y1, x2, y2]: four plain decimal numbers


def turns(completion) -> list:
    """The assistant's text, one string per assistant turn, from either completion format TRL passes:

    - standard: a string, which is one turn;
    - conversational: a list of messages. Each message whose role is "assistant" (or that has no role)
      is a turn; "tool", "user" and "system" messages are not the model's words and are skipped. Its
      text is the content (a string, or the "text" parts of a list), followed by each structured tool
      call written as Qwen2.5's chat template writes it: <tool_call>{"name": ..., "arguments": ...}</tool_call>.
    """
    if isinstance(completion, str):
        return [completion]
    if not isinstance(completion, (list, tuple)):
        raise ValueError(f"a completion must be a string or a list of messages, got {type(completion).__name__}")
    out = []
    for m in completion:
        if not isinstance(m, dict):
            raise ValueError(f"a message must be a dict with a 'content', got {type(m).__name__}")
        if m.get("role", "assistant") != "assistant":
            continue
        c = m.get("content") or ""
        text = c if isinstance(c, str) else "".join(p.get("text", "") for p in c if isinstance(p, dict))
        out.append(text + "".join(_tool_call_text(t) for t in m.get("tool_calls") or ()))
    return out


def _tool_call_text(call: dict) -> str:
    f = call.get("function", call)
    args = f.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            pass
    return "<tool_call>" + json.dumps({"name": f.get("name"), "arguments": args}) + "</tool_call>"


def final_answer(texts: Sequence[str], answer_pattern=ANSWER) -> str | None:
    """The last <answer>…</answer> over the turns (the content of a \\boxed{…} inside it, if any); None
    when there is none."""
    found = [m for t in texts for m in re.findall(answer_pattern, t)]
    if not found:
        return None
    boxed = _BOXED.findall(found[-1])
    return boxed[-1] if boxed else found[-1]


def _norm(s: Any) -> str:
    s = " ".join(str(s).replace("$", "").split()).casefold().rstrip(".")
    while len(s) >= 2 and s[0] + s[-1] in ("()", "[]", '""', "''"):
        s = s[1:-1].strip()
    return s


def is_correct(answer: str | None, solution: Any) -> bool:
    """Whether a final answer matches the solution: both stripped of "$", whitespace collapsed, case
    folded, a trailing "." and enclosing (), [] or quotes removed; then equal as numbers if both are
    numbers ("3" = "3.0"), else equal as strings ("(B)" = "b"). No answer is never correct."""
    if answer is None:
        return False
    a, b = _norm(answer), _norm(solution)
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
    except ValueError:
        return a == b


def _column(values, n: int, name: str) -> list:
    """A dataset column as TRL passes it: one value per completion."""
    if values is None or isinstance(values, (str, bytes)) or len(values) != n:
        raise ValueError(f"{name} must give one value per completion ({n}), got {name}={values!r}")
    return list(values)


def accuracy_reward(completions, solution, answer_pattern=ANSWER, **kwargs) -> list:
    """Answer accuracy: 1.0 when the final answer (final_answer) is correct (is_correct), else 0.0;
    None where the solution is None (TRL then leaves this reward out for that sample)."""
    sol = _column(solution, len(completions), "solution")
    return [None if s is None else float(is_correct(final_answer(turns(c), answer_pattern), s))
            for c, s in zip(completions, sol)]


def format_reward(completions, format_pattern=FORMAT, **kwargs) -> list:
    """Format: 1.0 when every assistant turn fully matches `format_pattern` (and there is one), else −1.0.

    ReVISE does not list its prescribed tags. The default is <think>…</think> followed by either
    <tool_call>…</tool_call> or <answer>…</answer>, with nothing but whitespace around them.
    """
    def ok(c) -> bool:
        t = turns(c)
        return bool(t) and all(re.fullmatch(format_pattern, x) for x in t)
    return [1.0 if ok(c) else -1.0 for c in completions]


def self_correction_reward(completions, solution, reexamine_pattern=REEXAMINE, answer_pattern=ANSWER,
                           **kwargs) -> list:
    """Self-correction: −1.0 when an assistant turn says "re-examine" (reexamine_pattern) and the final
    answer is wrong, else 0.0; None where the solution is None. As written in §3.3 there is no bonus
    for a re-examination that ends right: "reflection is rewarded only when the final answer is
    correct" through the accuracy reward."""
    def reward(c, s) -> float | None:
        if s is None:
            return None
        t = turns(c)
        wrong = not is_correct(final_answer(t, answer_pattern), s)
        return -1.0 if wrong and any(re.search(reexamine_pattern, x) for x in t) else 0.0
    return [reward(c, s) for c, s in zip(completions, _column(solution, len(completions), "solution"))]


def iou(a, b) -> np.ndarray:
    """IoU = |a ∩ b| / |a ∪ b| of every box in a [p, 4] against every box in b [r, 4] -> [p, r]. A box with
    x2 ≤ x1 or y2 ≤ y1 has no area, so its IoU is 0; so is that of two such boxes (empty union)."""
    a = np.asarray(a, dtype=np.float64)[:, None, :]   # [p, 4] -> [p, 1, 4]
    b = np.asarray(b, dtype=np.float64)[None, :, :]   # [r, 4] -> [1, r, 4]
    iw = np.clip(np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0]), 0, None)      # [p, r]
    ih = np.clip(np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1]), 0, None)      # [p, r]
    area = lambda z: np.clip(z[..., 2] - z[..., 0], 0, None) * np.clip(z[..., 3] - z[..., 1], 0, None)
    inter, union = iw * ih, area(a) + area(b) - iw * ih                                            # [p, r]
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)                      # [p, r]


def matched_iou(pred, ref) -> float:
    """Mean IoU of predicted boxes against reference boxes, matched one to one: repeatedly take the pair
    with the highest IoU (lowest indices on ties) and remove both. m = Σ matched IoU / max(|pred|, |ref|),
    so a missed reference and a spare prediction each count as 0, and spraying boxes does not pay."""
    m = iou(pred, ref)                        # [p, r]
    total, k = 0.0, min(m.shape)
    for _ in range(k):
        i, j = np.unravel_index(np.argmax(m), m.shape)
        total += max(m[i, j], 0.0)
        m[i, :], m[:, j] = -1.0, -1.0
    return float(total / max(m.shape))


def grounding_reward(completions, ref_boxes, **kwargs) -> list:
    """Grounding (§3.3): mean IoU against the reference boxes, plus the positive localisation improvement.

    The boxes a turn produces are the [x1, y1, x2, y2] lists of four numbers in its text (tool calls
    included, see `turns`). Let B_first and B_last be the boxes of the first and of the last assistant
    turn that produces any, and m = matched_iou. Then

      R = m(B_last, ref) + max(0, m(B_last, ref) − m(B_first, ref))      in [0, 2]

    R = 0 when no box is produced; the improvement term is 0 when the boxes are never updated (one
    turn with boxes; a string completion is one turn). ref_boxes: one list of reference boxes per
    completion, in the same convention as the model's boxes (ReVISE asks for [0, 1000]; IoU does not
    change when both are rescaled per axis, so de-normalising both to pixels gives the same R). None or
    [] for a sample means no grounding for it (e.g. a math question): its reward is None, which TRL
    leaves out. A reference box that is not a valid box raises ValueError naming it.
    """
    out = []
    for k, (c, r) in enumerate(zip(completions, _column(ref_boxes, len(completions), "ref_boxes"))):
        if r is None or len(r) == 0:
            out.append(None)
            continue
        r = [r] if np.ndim(r[0]) == 0 else r  # one box given flat
        ref = [check_box(b, f"ref_boxes[{k}][{i}]") for i, b in enumerate(r)]
        rounds = [b for b in ([[float(v) for v in m] for m in _BOX.findall(t)] for t in turns(c)) if b]
        if not rounds:
            out.append(0.0)
            continue
        last = matched_iou(rounds[-1], ref)
        out.append(float(last + max(0.0, last - matched_iou(rounds[0], ref))))
    return out
