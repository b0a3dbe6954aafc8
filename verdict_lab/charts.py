"""The one plotting helper of VERDICT's pictures (pillow only): one palette, and text that is
measured before it is drawn, so that no label overlaps another and none is cut at the image's edge.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026. The decision plane (demo.plot), the simulation
(perf/simulation_report.plot), the harness's summary (harness/tables.picture) and the step overhead
(perf/overhead.picture) draw with:

- PALETTE: Tableau's ten colours, named; INK, GRID and tint for the rest;
- Canvas: an image, its ImageDraw (`draw`, for lines and shapes) and `texts`, every text drawn
  with its box.
  Canvas.text wraps a text to a width, shrinks it when its widest word or its line count does not
  fit, keeps it inside the image, and tries the offsets it is given in turn until it overlaps no
  text drawn before (nor a shape given to Canvas.avoid); when none works it leaves the text out (so
  tick and value labels thin themselves). Draw what matters first: a later text gives way;
- legend: swatches and their labels in a column or a row, each label wrapped to the legend's width;
- nice: an axis's ends and tick step, round numbers.

Left out: rotated text, and keeping text off lines and bars unless a chart asks (Canvas.avoid).
"""

from __future__ import annotations

import math
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont


def font(size: int):
    """pillow's default font at `size` points (its one small bitmap size before Pillow 10.1). It has
    no Greek letters, so pictures label τ, ε and Δ* in ASCII."""
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1 has one bitmap size only
        return ImageFont.load_default()


PALETTE = (
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
)  # Tableau 10
BLUE, ORANGE, GREEN, RED, PURPLE, BROWN, PINK, GREY, OLIVE, CYAN = PALETTE
INK, GRID = (0, 0, 0), (225, 225, 225)
MIN_SIZE, GAP = 8, 2  # the smallest text drawn, in points; the pixels kept clear between two texts


def tint(colour: tuple, amount: float) -> tuple:
    """`colour` mixed with white: amount 0 is the colour, 1 is white."""
    return tuple(round(c + (255 - c) * amount) for c in colour)


def wrap(text: str, fnt, width: float) -> list:
    """Greedy word wrap of each line of `text` to `width` pixels; a wider word has a line of its
    own."""
    lines = []
    for paragraph in text.split("\n"):
        line = ""
        for word in paragraph.split(" "):
            wider = f"{line} {word}" if line else word
            if line and fnt.getlength(wider) > width:
                lines.append(line)
                wider = word
            line = wider
        lines.append(line)
    return lines


def layout(text: str, size: int, width: float, lines: int | None = None) -> tuple:
    """(font, lines, w, h, pitch): `text` wrapped to `width`, at `size` points or smaller, down to
    MIN_SIZE, until every line fits the width and there are at most `lines` of them."""
    while True:
        fnt = font(size)
        rows = wrap(text, fnt, width)
        w = max(fnt.getbbox(r, anchor="la")[2] for r in rows)
        if size <= MIN_SIZE or (w <= width and (lines is None or len(rows) <= lines)):
            break
        size -= 1
    ascent, descent = fnt.getmetrics()
    return fnt, rows, w, len(rows) * (ascent + descent), ascent + descent


def intersects(a: tuple, b: tuple, gap: float = 0) -> bool:
    """Whether boxes a and b, (x0, y0, x1, y1), come closer than `gap` pixels on both axes."""
    return a[0] < b[2] + gap and b[0] < a[2] + gap and a[1] < b[3] + gap and b[1] < a[3] + gap


class Canvas:
    """A white image, its ImageDraw and the boxes of the texts drawn on it; see the module's
    docstring."""

    def __init__(self, size: tuple):
        self.img = Image.new("RGB", tuple(int(v) for v in size), "white")
        self.draw = ImageDraw.Draw(self.img)
        # The (text, box) of every text drawn, and the shapes that texts keep off (avoid).
        self.texts, self.shapes = [], []

    @property
    def boxes(self) -> list:
        """The box, (x0, y0, x1, y1), of every text drawn so far, in drawing order."""
        return [b for _, b in self.texts]

    def box(self, xy: tuple, w: float, h: float, anchor: str) -> tuple:
        """The box of a w×h block at xy, anchor being pillow's two letters (l/m/r, then t/a/m/b/d),
        moved inside the image."""
        dx = {"l": 0, "m": w / 2, "r": w}[anchor[0]]
        dy = {"t": 0, "a": 0, "m": h / 2, "b": h, "d": h}[anchor[1]]
        W, H = self.img.size
        x0 = min(max(xy[0] - dx, GAP), W - GAP - w)
        y0 = min(max(xy[1] - dy, GAP), H - GAP - h)
        return (max(x0, 0), max(y0, 0), max(x0, 0) + w, max(y0, 0) + h)

    def text(
        self,
        xy: tuple,
        text: str,
        size: int = 11,
        fill=INK,
        anchor: str = "la",
        width: float | None = None,
        lines: int | None = None,
        moves=((0, 0),),
    ) -> tuple | None:
        """Draws `text` at xy (see Canvas.box), wrapped to `width` pixels (the image's by default)
        in at most `lines` lines, at the first offset of `moves` where it overlaps no text drawn
        before. Returns its box, or None when every offset overlaps and the text is left out."""
        W, H = self.img.size
        width = min(width or W, W - 2 * GAP)
        fnt, rows, w, h, pitch = layout(str(text), size, width, lines)
        for mx, my in moves:
            b = self.box((xy[0] + mx, xy[1] + my), w, h, anchor)
            # Otherwise even MIN_SIZE is too large for the image, and the text is left out.
            fits = b[2] <= W and b[3] <= H
            if fits and not any(intersects(b, o, GAP) for o in self.boxes + self.shapes):
                for i, row in enumerate(rows):  # each line aligned in the block as the anchor says
                    x = b[0] + {"l": 0, "m": 0.5, "r": 1}[anchor[0]] * (w - fnt.getlength(row))
                    self.draw.text((x, b[1] + i * pitch), row, fill=fill, font=fnt, anchor="la")
                self.texts.append((str(text), b))
                return b
        return None

    def avoid(self, box: tuple) -> None:
        """Texts drawn from now on keep off `box`, (x0, y0, x1, y1): a marker, a legend's frame."""
        self.shapes.append(tuple(box))

    def save(self, path) -> None:
        """The picture at path, its directory made if need be."""
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.img.save(path)


def legend(
    c: Canvas,
    xy: tuple,
    items: list,
    width: float = 180,
    size: int = 11,
    line: bool = False,
    frame: bool = False,
    across: bool = False,
) -> float:
    """(label, colour) items from xy, the top left, in a column (in a row if `across`): a 10-pixel
    swatch (a 24-pixel line if `line`) and the label, wrapped to the rest of `width`; a row that
    would pass `width` goes on below. A colour None makes the label a heading, a callable colour
    draws its own swatch, given (draw, swatch box). A frame is drawn on white beneath a column.
    Returns the y below the items."""
    (x, y), left = xy, xy[0]
    indent = 32 if line else 16
    sizes = [layout(label, size, width - indent)[2:4] for label, _ in items]  # (w, h) each
    box = (x - 6, y - 6, x + width + 6, y + sum(h + 3 for _, h in sizes) + 3)  # a column's frame
    if frame:
        c.draw.rectangle(box, fill="white", outline=tint(INK, 0.7))
    for (label, colour), (w, h) in zip(items, sizes):
        # When the row is full, a new one starts below.
        if across and x > left and x + indent + w > left + width:
            x, y = left, y + max(h for _, h in sizes) + 3
        mid = y + min(h, sum(font(size).getmetrics())) / 2  # the first line's middle
        if callable(colour):
            colour(c.draw, (x, mid - 5, x + 10, mid + 5))
        elif colour is not None and line:
            c.draw.line((x, mid, x + 24, mid), fill=colour, width=3)
        elif colour is not None:
            c.draw.rectangle((x, mid - 5, x + 10, mid + 5), fill=colour)
        x0 = x + (0 if colour is None else indent)
        c.text((x0, y), label, size, width=width - indent)
        x, y = (x0 + w + 16, y) if across else (x, y + h + 3)
    if frame:  # later texts keep out of it
        c.avoid(box)
    return y + (max(h for _, h in sizes) + 3 if across else 0)


def nice(lo: float, hi: float, most: int = 6) -> tuple:
    """(low, high, step) of an axis that holds [lo, hi]: a step of 1, 2, 2.5 or 5 times a power of
    ten, at most `most` steps from low to high, both ends whole steps. An empty span (lo == hi) gets
    one step."""
    if not hi > lo:  # one value, or none: a span of one unit around it
        lo, hi = lo - 0.5 if lo else 0.0, hi + 0.5 if hi else 1.0
    mag = 10 ** math.floor(math.log10((hi - lo) / most))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if (hi - lo) / (m * mag) <= most + 1e-9)
    low, high = step * math.floor(lo / step + 1e-9), step * math.ceil(hi / step - 1e-9)
    if (high - low) / step > most:  # the ends rounded outwards took one step too many
        step = next(m * mag for m in (2, 2.5, 5, 10, 20) if m * mag > step)
        low, high = step * math.floor(lo / step + 1e-9), step * math.ceil(hi / step - 1e-9)
    return low, high, step
