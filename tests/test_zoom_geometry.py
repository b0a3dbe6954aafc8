"""Tests for modes/zoom.py's geometry: ZoomIn's crops and the box conventions. Golden values carry
their derivation; seeded loops check the properties; IoU is compared with a brute-force pixel
count."""

import base64
import io
import math

import numpy as np
import pytest
from PIL import Image

import judges
from verdict_lab.modes.zoom import crop_box, out_size, sent_size, to_source, zoom_in

RED, GREY = (220, 20, 20), (128, 128, 128)
ONE_MP = (
    1280 * 28 * 28
)  # 1 003 520 pixels: a 1.0 MP budget (VLMEvalKit's min_pixels for Qwen2.5-VL)


def scene(size=(200, 100), square=(120, 30, 160, 70)) -> Image.Image:
    """A grey image with a red square at `square` (x1, y1, x2, y2)."""
    img = Image.new("RGB", size, GREY)
    img.paste(RED, square)
    return img


def red_fraction(img: Image.Image) -> float:
    a = np.asarray(img.convert("RGB"), dtype=int)  # [h, w, 3]
    return float(((a[..., 0] > 170) & (a[..., 1] < 70)).mean())  # [h, w] -> []


def red_bbox(img: Image.Image) -> tuple:
    a = np.asarray(img.convert("RGB"), dtype=int)
    ys, xs = np.nonzero((a[..., 0] > 170) & (a[..., 1] < 70))  # [h, w] -> [k], [k]
    return xs.min(), ys.min(), xs.max() + 1, ys.max() + 1


# ---------------------------------------------------------------------------- boxes and conventions


@pytest.mark.parametrize(
    "box, message",
    [
        ([1, 2, 3], "4 numbers"),
        (None, "4 numbers"),
        (["a", 0, 1, 1], "4 numbers"),
        ([0, 0, float("nan"), 5], "non-finite"),
        ([0, 0, 5, float("inf")], "non-finite"),
        ([5, 0, 5, 10], "degenerate"),  # zero width
        ([0, 9, 10, 3], "degenerate"),  # y2 < y1
    ],
)
def test_a_bad_box_is_a_value_error_naming_it(box, message):
    with pytest.raises(ValueError, match=message) as e:
        zoom_in(scene(), box, 2.0, coords="source")
    assert "box" in str(e.value)


def test_a_box_outside_the_image_is_a_value_error_naming_it():
    for box in (
        [300, 10, 400, 50],
        [-50, -50, -1, -1],
        [200, 0, 250, 50],
    ):  # the last only touches the edge
        with pytest.raises(ValueError, match=r"box=.* lies outside the 200×100 image"):
            zoom_in(scene(), box, 2.0, coords="source")
    with pytest.raises(ValueError, match="outside"):
        zoom_in(scene(), [1001, 0, 1100, 500], 2.0, coords="norm1000")


def test_unknown_convention_and_bad_zoom_are_value_errors():
    with pytest.raises(
        ValueError, match="coords must be one of source, sent, norm1000, got coords='xyxy'"
    ):
        zoom_in(scene(), [0, 0, 10, 10], coords="xyxy")
    for zoom in (0.5, 0.0, -2.0, float("nan"), float("inf"), "2"):
        with pytest.raises(ValueError, match="zoom must be a number >= 1"):
            zoom_in(scene(), [0, 0, 10, 10], zoom, coords="source")
    with pytest.raises(ValueError, match="needs the sent image's size"):
        to_source([0, 0, 1, 1], "sent", (10, 10))


def test_conversions_golden():
    # norm1000 on a 640×480 source: x·640/1000, y·480/1000.
    assert to_source([250, 500, 750, 1000], "norm1000", (640, 480)) == (160, 240, 480, 480)
    # sent 500×250 of a 1000×500 source: every coordinate doubles.
    assert to_source([10, 20, 30, 40], "sent", (1000, 500), sent=(500, 250)) == (20, 40, 60, 80)
    # the axes scale separately: 1001×500 sent as 500×250 -> x·1001/500, y·2.
    assert to_source([100, 10, 200, 20], "sent", (1001, 500), sent=(500, 250)) == (
        200.2,
        20,
        400.4,
        40,
    )
    assert to_source([1, 2, 3, 4], "source", (10, 10)) == (1, 2, 3, 4)


def test_sent_size_is_the_size_encode_image_sends():
    img = Image.new("RGB", (2000, 1500), GREY)  # 3.0 MP, above a 1.0 MP budget
    w, h = sent_size(img, ONE_MP)
    png = base64.b64decode(judges.encode_image(img, ONE_MP).split(",", 1)[1])
    assert (w, h) == Image.open(io.BytesIO(png)).size
    assert w * h <= ONE_MP and (w, h) != (2000, 1500)
    assert sent_size(img) == (2000, 1500)  # under the default budget, 16384·28·28: sent as is
    assert sent_size(Image.new("RGB", (64, 48))) == (64, 48)  # under the budget: sent as is


def test_a_box_read_off_the_sent_image_maps_back_to_the_source_region():
    # The square sits at [1200, 300, 1400, 500] of a 2000×1500 source that is sent downscaled. Read
    # its box off the sent image, as a model would, and map it back: it lands on the square, to
    # within one sent pixel.
    square = (1200, 300, 1400, 500)
    img = scene((2000, 1500), square)
    sent = Image.open(io.BytesIO(base64.b64decode(judges.encode_image(img).split(",", 1)[1])))
    px = 2000 / sent.size[0]  # source pixels per sent pixel (~1.73)
    back = to_source(red_bbox(sent), "sent", img.size, sent.size)
    assert max(abs(a - b) for a, b in zip(back, square)) <= px + 1
    crop = zoom_in(img, red_bbox(sent), 2.0, coords="sent")
    assert max(abs(a - b) for a, b in zip(crop.box, square)) <= px + 1
    assert red_fraction(crop.image) > 0.95


def test_norm1000_box_on_an_exif_rotated_image_is_read_on_the_image_as_shown(tmp_path):
    # Stored 40×20 (left red, right blue) with orientation 6: shown 20×40, red on top, blue below.
    img = Image.new("RGB", (40, 20), RED)
    img.paste((20, 20, 220), (20, 0, 40, 20))
    exif = Image.Exif()
    exif[0x0112] = 6
    path = tmp_path / "rotated.png"
    img.save(path, "PNG", exif=exif)
    top = zoom_in(path, [0, 0, 1000, 500], 1.0, coords="norm1000", min_side=0)
    assert top.box == (0, 0, 20, 20) and red_fraction(top.image) > 0.95
    bottom = zoom_in(path, [0, 500, 1000, 1000], 1.0, coords="norm1000", min_side=0)
    assert bottom.box == (0, 20, 20, 40) and red_fraction(bottom.image) == 0.0


# ----------------------------------------------------------------------------- the crop's geometry


@pytest.mark.parametrize(
    "box, size, expected",
    [
        # inside, ratio 1: the box itself
        ([10, 10, 30, 30], (100, 80), (10, 10, 30, 30)),
        # fractional: rounded outwards, floor(10.2) = 10, ceil(29.1) = 30
        ([10.2, 10.5, 29.1, 29.9], (100, 80), (10, 10, 30, 30)),
        # partly outside: clipped to [0, 100] × [0, 80]
        ([-20, 50, 30, 120], (100, 80), (0, 50, 30, 80)),
        # 80 × 2, wide: the height grows to ceil(80/4) = 20 about y = 41:
        # floor(41 − 10) = 31 -> [31, 51)
        ([10, 40, 90, 42], (100, 80), (10, 31, 90, 51)),
        # the same tall (transposed): the width grows to 20 about x = 41
        ([40, 10, 42, 90], (80, 100), (31, 10, 51, 90)),
        # 40 × 2 at the top border: height 10 about y = 1 -> floor(1 − 5) = −4,
        # shifted inside to [0, 10)
        ([0, 0, 40, 2], (100, 80), (0, 0, 40, 10)),
        # at the bottom border: [79, 80) -> height 10 about 79.5 -> floor(74.5) = 74
        # -> shifted to [70, 80)
        ([0, 79, 40, 80], (100, 80), (0, 70, 40, 80)),
        # a 100 × 10 image, the whole of it: it cannot grow to 25 high, so the width shrinks to
        # 4·10 = 40 about x = 50: [30, 70)
        ([0, 0, 100, 10], (100, 10), (30, 0, 70, 10)),
        # a sliver thinner than EPS still gives one whole pixel: [5, 6) × [5, 9)
        ([5, 5, 5.0000005, 9], (100, 80), (5, 5, 6, 9)),
        # whole pixels up to float error stay those pixels: 31 px through [0, 1000] on a 60-wide
        # image is 1000·31/60·60/1000 = 30.999999999999996, which floor would make 30
        ([1000 * 31 / 60 * 60 / 1000, 10, 50, 29], (60, 80), (31, 10, 50, 29)),
        # exactly 4:1 is kept as is
        ([0, 0, 40, 10], (100, 80), (0, 0, 40, 10)),
    ],
)
def test_crop_box_golden(box, size, expected):
    assert crop_box(box, size) == expected


@pytest.mark.parametrize(
    "w, h, zoom, kwargs, expected",
    [
        (20, 20, 2.0, dict(min_side=0), ((40, 40), 2.0)),
        (20, 20, 10.0, dict(min_side=0), ((80, 80), 4.0)),  # capped at 4.0
        (20, 10, 1.0, dict(min_side=28), ((56, 28), 2.8)),  # short side 10 -> 28: s = 2.8
        (20, 10, 1.0, dict(min_side=0), ((20, 10), 1.0)),  # min_side off
        (
            100,
            100,
            4.0,
            dict(max_pixels=10_000),
            ((100, 100), 1.0),
        ),  # budget: s = sqrt(10⁴ / 10⁴) = 1
        (40, 10, 1.3, dict(min_side=0), ((52, 13), 1.3)),  # floor(52.0) × floor(13.0), ratio 4
        (
            40,
            10,
            1.05,
            dict(min_side=0),
            ((40, 10), 1.05),
        ),  # floor(42) = 42 > 4·floor(10.5) = 40: cut to 40
    ],
)
def test_out_size_golden(w, h, zoom, kwargs, expected):
    size, s = out_size(w, h, zoom, **kwargs)
    assert size == expected[0] and s == pytest.approx(expected[1])


@pytest.mark.parametrize("seed", range(6))
def test_crop_stays_inside_the_image_with_ratio_at_most_4(seed):
    rng = np.random.default_rng(seed)
    for _ in range(400):
        W, H = (int(v) for v in rng.integers(1, 3000, size=2))
        if rng.random() < 0.3:  # very thin images, where the ratio cannot be met by growing
            W, H = (
                (W, int(rng.integers(1, 8))) if rng.random() < 0.5 else (int(rng.integers(1, 8)), H)
            )
        x = np.sort(rng.uniform(-0.3 * W, 1.3 * W, 2))
        y = np.sort(rng.uniform(-0.3 * H, 1.3 * H, 2))
        box = [x[0], y[0], x[1], y[1]]
        clipped = (max(x[0], 0), max(y[0], 0), min(x[1], W), min(y[1], H))
        if not (clipped[2] > clipped[0] and clipped[3] > clipped[1]):
            with pytest.raises(ValueError, match="outside"):
                crop_box(box, (W, H))
            continue
        x1, y1, x2, y2 = c = crop_box(box, (W, H))
        w, h = x2 - x1, y2 - y1
        assert all(isinstance(v, int) for v in c) and 0 <= x1 < x2 <= W and 0 <= y1 < y2 <= H
        assert max(w, h) <= 4 * min(w, h)
        iw = math.ceil(clipped[2]) - math.floor(clipped[0])  # the clipped box in whole pixels
        ih = math.ceil(clipped[3]) - math.floor(clipped[1])
        if math.ceil(max(iw, ih) / 4) <= (
            H if iw > ih else W
        ):  # the image is not too thin to widen the box
            assert x1 <= clipped[0] and y1 <= clipped[1] and x2 >= clipped[2] and y2 >= clipped[3]
        centre = ((x1 + x2) / 2, (y1 + y2) / 2)
        for a, b, lo, hi, n in (
            (centre[0], (clipped[0] + clipped[2]) / 2, x1, x2, W),
            (centre[1], (clipped[1] + clipped[3]) / 2, y1, y2, H),
        ):
            if lo > 0 and hi < n:  # not pushed by a border: centred on the box, to within a pixel
                assert abs(a - b) <= 1
        zoom = float(rng.uniform(1, 6))
        (ow, oh), s = out_size(
            w, h, zoom, min_side=int(rng.choice([0, 28])), max_pixels=judges.MAX_PIXELS
        )
        assert max(ow, oh) <= 4 * min(ow, oh) and ow * oh <= judges.MAX_PIXELS
        assert s <= max(4.0, 28 / min(w, h))


@pytest.mark.parametrize("seed", range(3))
def test_zoom_in_output_matches_its_geometry_and_shows_the_region(seed):
    rng = np.random.default_rng(seed)
    for _ in range(8):
        W, H = (int(v) for v in rng.integers(60, 400, size=2))
        sx, sy = int(rng.integers(0, W - 20)), int(rng.integers(0, H - 20))
        sw, sh = (
            int(rng.integers(10, min(60, W - sx) + 1)),
            int(rng.integers(10, min(60, H - sy) + 1)),
        )
        square = (sx, sy, sx + sw, sy + sh)
        img = scene((W, H), square)
        zoom = float(rng.uniform(1, 5))
        crop = zoom_in(img, square, zoom, coords="source")
        w, h = crop.box[2] - crop.box[0], crop.box[3] - crop.box[1]
        assert crop.image.size == out_size(w, h, zoom)[0] and crop.zoom == out_size(w, h, zoom)[1]
        assert max(crop.image.size) <= 4 * min(crop.image.size)
        # the crop holds the whole square; its red share is the square's share of the crop (Lanczos
        # rings at the edges only)
        share = (square[2] - square[0]) * (square[3] - square[1]) / (w * h)
        assert abs(red_fraction(crop.image) - share) < 0.12
        norm = [
            1000 * square[0] / W,
            1000 * square[1] / H,
            1000 * square[2] / W,
            1000 * square[3] / H,
        ]
        assert zoom_in(img, norm, zoom, coords="norm1000").box == crop.box


def test_zoom_in_upsamples_with_lanczos():
    # A black|white step cropped 2×1 and zoomed 4×: the pixels are pillow's Lanczos resampling of
    # that crop, and not its bilinear one (the two differ next to the step).
    img = Image.new("L", (4, 4), 0)
    img.paste(255, (2, 0, 4, 4))
    crop = zoom_in(img, [1, 1, 3, 2], 4.0, coords="source", min_side=0)
    assert crop.box == (1, 1, 3, 2) and crop.image.size == (8, 4)
    rgb = img.convert("RGB").crop(crop.box)
    assert np.array_equal(
        np.asarray(crop.image), np.asarray(rgb.resize((8, 4), Image.Resampling.LANCZOS))
    )
    assert not np.array_equal(
        np.asarray(crop.image), np.asarray(rgb.resize((8, 4), Image.Resampling.BILINEAR))
    )
