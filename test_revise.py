"""Tests for revise.py: ZoomIn's crop geometry and box conventions, the Scharr edge map, and ReVISE's GRPO
rewards. Golden values carry their derivation; seeded loops check the properties; IoU and the Scharr
filter are compared with independent brute-force oracles."""
import base64
import io
import math

import numpy as np
import pytest
from PIL import Image

import images
import revise
from revise import (crop_box, edges, format_reward, grounding_reward, accuracy_reward, iou, matched_iou, out_size,
                    scharr_magnitude, self_correction_reward, sent_size, to_source, turns, zoom_in)

RED, GREY = (220, 20, 20), (128, 128, 128)


def scene(size=(200, 100), square=(120, 30, 160, 70)) -> Image.Image:
    """A grey image with a red square at `square` (x1, y1, x2, y2)."""
    img = Image.new("RGB", size, GREY)
    img.paste(RED, square)
    return img


def red_fraction(img: Image.Image) -> float:
    a = np.asarray(img.convert("RGB"), dtype=int)                       # [h, w, 3]
    return float(((a[..., 0] > 170) & (a[..., 1] < 70)).mean())         # [h, w] -> []


def red_bbox(img: Image.Image) -> tuple:
    a = np.asarray(img.convert("RGB"), dtype=int)
    ys, xs = np.nonzero((a[..., 0] > 170) & (a[..., 1] < 70))           # [h, w] -> [k], [k]
    return xs.min(), ys.min(), xs.max() + 1, ys.max() + 1


# ----------------------------------------------------------------------------- boxes and conventions

@pytest.mark.parametrize("box, message", [
    ([1, 2, 3], "4 numbers"),
    (None, "4 numbers"),
    (["a", 0, 1, 1], "4 numbers"),
    ([0, 0, float("nan"), 5], "non-finite"),
    ([0, 0, 5, float("inf")], "non-finite"),
    ([5, 0, 5, 10], "degenerate"),      # zero width
    ([0, 9, 10, 3], "degenerate"),      # y2 < y1
])
def test_a_bad_box_is_a_value_error_naming_it(box, message):
    with pytest.raises(ValueError, match=message) as e:
        zoom_in(scene(), box, 2.0, coords="source")
    assert "box" in str(e.value)


def test_a_box_outside_the_image_is_a_value_error_naming_it():
    for box in ([300, 10, 400, 50], [-50, -50, -1, -1], [200, 0, 250, 50]):  # the last only touches the edge
        with pytest.raises(ValueError, match=r"box=.* lies outside the 200×100 image"):
            zoom_in(scene(), box, 2.0, coords="source")
    with pytest.raises(ValueError, match="outside"):
        zoom_in(scene(), [1001, 0, 1100, 500], 2.0, coords="norm1000")


def test_unknown_convention_and_bad_zoom_are_value_errors():
    with pytest.raises(ValueError, match="coords must be one of source, sent, norm1000, got coords='xyxy'"):
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
    assert to_source([100, 10, 200, 20], "sent", (1001, 500), sent=(500, 250)) == (200.2, 20, 400.4, 40)
    assert to_source([1, 2, 3, 4], "source", (10, 10)) == (1, 2, 3, 4)


def test_sent_size_is_the_size_encode_image_sends():
    img = Image.new("RGB", (2000, 1500), GREY)  # 3.0 MP, above the 1.0 MP budget
    w, h = sent_size(img)
    png = base64.b64decode(images.encode_image(img).split(",", 1)[1])
    assert (w, h) == Image.open(io.BytesIO(png)).size
    assert w * h <= images.MAX_PIXELS and (w, h) != (2000, 1500)
    assert sent_size(Image.new("RGB", (64, 48))) == (64, 48)  # under the budget: sent as is


def test_a_box_read_off_the_sent_image_maps_back_to_the_source_region():
    # The square sits at [1200, 300, 1400, 500] of a 2000×1500 source that is sent downscaled. Read its box
    # off the sent image, as a model would, and map it back: it lands on the square, to within one sent pixel.
    square = (1200, 300, 1400, 500)
    img = scene((2000, 1500), square)
    sent = Image.open(io.BytesIO(base64.b64decode(images.encode_image(img).split(",", 1)[1])))
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

@pytest.mark.parametrize("box, size, expected", [
    # inside, ratio 1: the box itself
    ([10, 10, 30, 30], (100, 80), (10, 10, 30, 30)),
    # fractional: rounded outwards, floor(10.2) = 10, ceil(29.1) = 30
    ([10.2, 10.5, 29.1, 29.9], (100, 80), (10, 10, 30, 30)),
    # partly outside: clipped to [0, 100] × [0, 80]
    ([-20, 50, 30, 120], (100, 80), (0, 50, 30, 80)),
    # 80 × 2, wide: the height grows to ceil(80/4) = 20 about y = 41: floor(41 − 10) = 31 -> [31, 51)
    ([10, 40, 90, 42], (100, 80), (10, 31, 90, 51)),
    # the same tall (transposed): the width grows to 20 about x = 41
    ([40, 10, 42, 90], (80, 100), (31, 10, 51, 90)),
    # 40 × 2 at the top border: height 10 about y = 1 -> floor(1 − 5) = −4, shifted inside to [0, 10)
    ([0, 0, 40, 2], (100, 80), (0, 0, 40, 10)),
    # at the bottom border: [79, 80) -> height 10 about 79.5 -> floor(74.5) = 74 -> shifted to [70, 80)
    ([0, 79, 40, 80], (100, 80), (0, 70, 40, 80)),
    # a 100 × 10 image, the whole of it: it cannot grow to 25 high, so the width shrinks to 4·10 = 40
    # about x = 50: [30, 70)
    ([0, 0, 100, 10], (100, 10), (30, 0, 70, 10)),
    # a sliver thinner than EPS still gives one whole pixel: [5, 6) × [5, 9)
    ([5, 5, 5.0000005, 9], (100, 80), (5, 5, 6, 9)),
    # whole pixels up to float error stay those pixels: 31 px through [0, 1000] on a 60-wide image is
    # 1000·31/60·60/1000 = 30.999999999999996, which floor would make 30
    ([1000 * 31 / 60 * 60 / 1000, 10, 50, 29], (60, 80), (31, 10, 50, 29)),
    # exactly 4:1 is kept as is
    ([0, 0, 40, 10], (100, 80), (0, 0, 40, 10)),
])
def test_crop_box_golden(box, size, expected):
    assert crop_box(box, size) == expected


@pytest.mark.parametrize("w, h, zoom, kwargs, expected", [
    (20, 20, 2.0, dict(min_side=0), ((40, 40), 2.0)),
    (20, 20, 10.0, dict(min_side=0), ((80, 80), 4.0)),            # capped at 4.0
    (20, 10, 1.0, dict(min_side=28), ((56, 28), 2.8)),            # short side 10 -> 28: s = 2.8
    (20, 10, 1.0, dict(min_side=0), ((20, 10), 1.0)),             # min_side off
    (100, 100, 4.0, dict(max_pixels=10_000), ((100, 100), 1.0)),  # budget: s = sqrt(10⁴ / 10⁴) = 1
    (40, 10, 1.3, dict(min_side=0), ((52, 13), 1.3)),             # floor(52.0) × floor(13.0), ratio 4
    (40, 10, 1.05, dict(min_side=0), ((40, 10), 1.05)),           # floor(42) = 42 > 4·floor(10.5) = 40: cut to 40
])
def test_out_size_golden(w, h, zoom, kwargs, expected):
    size, s = out_size(w, h, zoom, **kwargs)
    assert size == expected[0] and s == pytest.approx(expected[1])


@pytest.mark.parametrize("seed", range(6))
def test_crop_stays_inside_the_image_with_ratio_at_most_4(seed):
    rng = np.random.default_rng(seed)
    for _ in range(400):
        W, H = (int(v) for v in rng.integers(1, 3000, size=2))
        if rng.random() < 0.3:  # very thin images, where the ratio cannot be met by growing
            W, H = (W, int(rng.integers(1, 8))) if rng.random() < 0.5 else (int(rng.integers(1, 8)), H)
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
        if math.ceil(max(iw, ih) / 4) <= (H if iw > ih else W):  # the image is not too thin to widen the box
            assert x1 <= clipped[0] and y1 <= clipped[1] and x2 >= clipped[2] and y2 >= clipped[3]
        centre = ((x1 + x2) / 2, (y1 + y2) / 2)
        for a, b, lo, hi, n in ((centre[0], (clipped[0] + clipped[2]) / 2, x1, x2, W),
                                (centre[1], (clipped[1] + clipped[3]) / 2, y1, y2, H)):
            if lo > 0 and hi < n:  # not pushed by a border: centred on the box, to within a pixel
                assert abs(a - b) <= 1
        zoom = float(rng.uniform(1, 6))
        (ow, oh), s = out_size(w, h, zoom, min_side=int(rng.choice([0, 28])), max_pixels=images.MAX_PIXELS)
        assert max(ow, oh) <= 4 * min(ow, oh) and ow * oh <= images.MAX_PIXELS
        assert s <= max(4.0, 28 / min(w, h))


@pytest.mark.parametrize("seed", range(3))
def test_zoom_in_output_matches_its_geometry_and_shows_the_region(seed):
    rng = np.random.default_rng(seed)
    for _ in range(8):
        W, H = (int(v) for v in rng.integers(60, 400, size=2))
        sx, sy = int(rng.integers(0, W - 20)), int(rng.integers(0, H - 20))
        sw, sh = int(rng.integers(10, min(60, W - sx) + 1)), int(rng.integers(10, min(60, H - sy) + 1))
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
        norm = [1000 * square[0] / W, 1000 * square[1] / H, 1000 * square[2] / W, 1000 * square[3] / H]
        assert zoom_in(img, norm, zoom, coords="norm1000").box == crop.box


def test_zoom_in_upsamples_with_lanczos():
    # A black|white step cropped 2×1 and zoomed 4×: the pixels are pillow's Lanczos resampling of that
    # crop, and not its bilinear one (the two differ next to the step).
    img = Image.new("L", (4, 4), 0)
    img.paste(255, (2, 0, 4, 4))
    crop = zoom_in(img, [1, 1, 3, 2], 4.0, coords="source", min_side=0)
    assert crop.box == (1, 1, 3, 2) and crop.image.size == (8, 4)
    rgb = img.convert("RGB").crop(crop.box)
    assert np.array_equal(np.asarray(crop.image), np.asarray(rgb.resize((8, 4), Image.Resampling.LANCZOS)))
    assert not np.array_equal(np.asarray(crop.image), np.asarray(rgb.resize((8, 4), Image.Resampling.BILINEAR)))


# ----------------------------------------------------------------------------- Scharr edges

def test_scharr_single_bright_pixel_golden():
    # I = 1 at (2, 2) of a 5×5 zero image. Gx[y, x] = Σ K[i, j] I[y+i−1, x+j−1] picks K[3−y, 3−x] for
    # |y−2|, |x−2| ≤ 1, with K = [[−3, 0, 3], [−10, 0, 10], [−3, 0, 3]]; Gy the same with Kᵀ:
    #   (1,1): Gx = K[2,2] = 3,   Gy = Kᵀ[2,2] = 3   -> |∇| = 3√2
    #   (1,2): Gx = K[2,1] = 0,   Gy = Kᵀ[2,1] = 10  -> 10
    #   (2,1): Gx = K[1,2] = 10,  Gy = Kᵀ[1,2] = 0   -> 10
    #   (2,2): Gx = K[1,1] = 0,   Gy = 0             -> 0
    # and by symmetry the other corners are 3√2, the other edge neighbours 10, the outer ring 0.
    g = np.zeros((5, 5))
    g[2, 2] = 1
    r = 3 * math.sqrt(2)
    expected = np.array([[0, 0, 0, 0, 0],
                         [0, r, 10, r, 0],
                         [0, 10, 0, 10, 0],
                         [0, r, 10, r, 0],
                         [0, 0, 0, 0, 0]])
    np.testing.assert_allclose(scharr_magnitude(g), expected, atol=1e-12)


def test_scharr_borders_reflect_without_repeating_the_edge():
    # A flat image has no gradient anywhere, borders included (zero padding would make the border an edge).
    np.testing.assert_array_equal(scharr_magnitude(np.full((4, 6), 7.0)), np.zeros((4, 6)))
    # I = 1 at the corner (0, 0) of a 4×4 zero image. Reflect-101 pads row −1 with row 1 and column −1 with
    # column 1, so the pixel has no copy in the padding and contributes only where it lies in the window:
    #   (0,0): it is at the window's centre, K[1,1] = 0            -> 0
    #   (0,1): Gx = K[1,0] = −10, Gy = Kᵀ[1,0] = K[0,1] = 0       -> 10
    #   (1,0): Gx = K[0,1] = 0,   Gy = Kᵀ[0,1] = K[1,0] = −10     -> 10
    #   (1,1): Gx = K[0,0] = −3,  Gy = Kᵀ[0,0] = −3               -> 3√2
    # (replicating the border would give Gx(0,0) = K[0,0] + K[0,1] + K[1,0] + K[1,1] = −13 instead.)
    g = np.zeros((4, 4))
    g[0, 0] = 1
    expected = np.zeros((4, 4))
    expected[0, 1] = expected[1, 0] = 10
    expected[1, 1] = 3 * math.sqrt(2)
    np.testing.assert_allclose(scharr_magnitude(g), expected, atol=1e-12)
    # one pixel reflects onto itself: no gradient
    assert scharr_magnitude(np.array([[5.0]])).tolist() == [[0.0]]


def _reflect101(i: int, n: int) -> int:
    return 0 if n == 1 else (-i if i < 0 else 2 * (n - 1) - i if i >= n else i)


@pytest.mark.parametrize("seed", range(4))
def test_scharr_matches_a_brute_force_loop_and_transposes(seed):
    rng = np.random.default_rng(seed)
    h, w = (int(v) for v in rng.integers(1, 9, size=2))
    g = rng.uniform(0, 255, size=(h, w))
    k = np.array([[-3, 0, 3], [-10, 0, 10], [-3, 0, 3]], dtype=float)
    oracle = np.zeros((h, w))
    for y in range(h):
        for x in range(w):
            win = np.array([[g[_reflect101(y + i - 1, h), _reflect101(x + j - 1, w)] for j in range(3)]
                            for i in range(3)])
            oracle[y, x] = math.hypot((k * win).sum(), (k.T * win).sum())
    np.testing.assert_allclose(scharr_magnitude(g), oracle, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(scharr_magnitude(g.T), scharr_magnitude(g).T, rtol=1e-12, atol=1e-9)  # Gy = Gx of Iᵀ


def test_edges_normalises_to_0_255_golden():
    # Bright pixel: the magnitudes are 10 (max), 3√2 and 0 (min), times the grey level. Min-max to
    # [0, 255]: 10 -> 255, 3√2 -> 255·3√2/10 = 108.19 -> 108, 0 -> 0. Any colour gives the same map.
    img = Image.new("RGB", (5, 5), (0, 0, 0))
    img.putpixel((2, 2), (40, 90, 200))
    e = edges(img)
    assert e.mode == "L" and e.size == (5, 5)
    a = np.asarray(e)
    assert a[1, 1] == a[1, 3] == a[3, 1] == a[3, 3] == 108
    assert a[1, 2] == a[2, 1] == a[2, 3] == a[3, 2] == 255
    assert a[2, 2] == 0 and a[0].tolist() == [0] * 5
    # A vertical step 0 | 100 in columns [0, 0, 100, 100]: Gx = (3 + 10 + 3)·(I[x+1] − I[x−1]) = 1600 in
    # columns 1 and 2; 0 in columns 0 and 3 (the reflection copies column 1 to −1 and column 2 to 4).
    step = Image.fromarray(np.array([[0, 0, 100, 100]] * 3, dtype=np.uint8))
    assert np.asarray(edges(step)).tolist() == [[0, 255, 255, 0]] * 3
    assert np.asarray(edges(Image.new("RGB", (6, 4), GREY))).max() == 0  # flat: all zeros, not NaN


def test_scharr_rejects_what_is_not_a_grey_image():
    bad_inputs = ((np.zeros(5), "2-D"), (np.zeros((0, 3)), "non-empty"), (np.array([[1.0, np.nan]]), "finite"))
    for bad, message in bad_inputs:
        with pytest.raises(ValueError, match=message):
            scharr_magnitude(bad)


# ----------------------------------------------------------------------------- rewards: completions

def test_turns_reads_both_completion_formats():
    assert turns("<think>a</think>") == ["<think>a</think>"]
    conv = [{"role": "assistant", "content": "first"},
            {"role": "tool", "content": "[0, 0, 5, 5] re-examine"},            # the tool's words, not the model's
            {"role": "assistant", "content": [{"type": "text", "text": "sec"}, {"type": "image"},
                                              {"type": "text", "text": "ond"}]},
            {"content": "no role"},
            {"role": "assistant", "content": None,
             "tool_calls": [{"type": "function",
                             "function": {"name": "zoom_in", "arguments": '{"bbox": [1, 2, 3, 4]}'}}]}]
    assert turns(conv) == ["first", "second", "no role",
                           '<tool_call>{"name": "zoom_in", "arguments": {"bbox": [1, 2, 3, 4]}}</tool_call>']
    for bad in (3, None, [["not a message"]]):
        with pytest.raises(ValueError, match="completion must be|message must be"):
            turns(bad)


def test_format_reward_golden():
    ok = "<think>the cup is left</think>\n<answer>A</answer>\n"
    call = "<think>look closer</think><tool_call>{\"name\": \"zoom_in\"}</tool_call>"
    completions = [
        ok,                                                   # +1: think, then answer
        "<answer>A</answer>",                                 # −1: no think
        "<think>x</think><answer>A</answer> trailing words",  # −1: text outside the tags
        "<think>x</think>",                                   # −1: no action after the thought
        [{"role": "assistant", "content": call}, {"role": "tool", "content": "crop"},
         {"role": "assistant", "content": ok}],               # +1: a tool call, the tool's reply, an answer
        [{"role": "assistant", "content": call}, {"role": "assistant", "content": "A"}],  # −1: a bare turn
        [{"role": "user", "content": ok}],                    # −1: no assistant turn at all
    ]
    assert format_reward(completions) == [1.0, -1.0, -1.0, -1.0, 1.0, -1.0, -1.0]
    assert format_reward(["<answer>A</answer>"], format_pattern=r"<answer>.*</answer>") == [1.0]


def test_accuracy_reward_golden():
    completions = ["<think>t</think><answer>\\boxed{3}</answer>",     # boxed 3 = 3.0
                   "<think>t</think><answer>(B)</answer>",            # (B) = b
                   "<think>t</think><answer>4</answer>",              # wrong
                   "<think>t</think> 3",                              # no answer tag: no answer
                   "<answer>2</answer> then <answer>3</answer>",      # the last answer counts
                   "<answer>3</answer>"]
    solution = ["3.0", "b", "3", "3", "3", None]                      # None: not applicable
    assert accuracy_reward(completions, solution) == [1.0, 1.0, 0.0, 0.0, 1.0, None]
    with pytest.raises(ValueError, match=r"solution must give one value per completion \(2\)"):
        accuracy_reward(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="solution must give one value per completion"):
        self_correction_reward(["a"], "3")  # a bare string is not a column, even of the right length


def test_is_correct_normalisation():
    assert revise.is_correct(" Left. ", "left") and revise.is_correct("$12$", "12.0")
    assert revise.is_correct("'cat'", "CAT") and not revise.is_correct("12", "13")
    assert not revise.is_correct(None, "12") and not revise.is_correct("1e400", "12")


def test_self_correction_reward_golden():
    wrong = "<think>Let me re-examine the crop.</think><answer>4</answer>"
    right = "<think>Let me re-examine the crop.</think><answer>3</answer>"
    plain_wrong = "<think>done</think><answer>4</answer>"
    variants = "<think>Re-examining: no. Reexamined.</think><answer>5</answer>"
    tool_says_it = [{"role": "assistant", "content": plain_wrong}, {"role": "tool", "content": "please re-examine"}]
    completions = [wrong, right, plain_wrong, variants, tool_says_it, wrong]
    # −1 only for re-examine AND wrong; the tool's message is not the model's; None where no solution
    assert self_correction_reward(completions, ["3", "3", "3", "3", "3", None]) == [-1.0, 0.0, 0.0, -1.0, 0.0, None]


# ----------------------------------------------------------------------------- rewards: grounding

def test_iou_golden_and_degenerate():
    # [0,0,10,10] vs [0,0,10,20]: ∩ = 100, ∪ = 100 + 200 − 100 = 200 -> 0.5; vs [5,5,15,15]: ∩ = 25,
    # ∪ = 175 -> 1/7; disjoint -> 0; a zero-area box -> 0 (even against itself: empty union).
    m = iou([[0, 0, 10, 10]], [[0, 0, 10, 20], [5, 5, 15, 15], [20, 20, 30, 30], [0, 0, 0, 10]])
    np.testing.assert_allclose(m, [[0.5, 1 / 7, 0.0, 0.0]])
    assert iou([[3, 3, 3, 3]], [[3, 3, 3, 3]]).tolist() == [[0.0]]


@pytest.mark.parametrize("seed", range(3))
def test_iou_matches_a_pixel_count(seed):
    rng = np.random.default_rng(seed)
    for _ in range(50):
        a, b = (np.sort(rng.integers(0, 30, size=(2, 2)), axis=1).T.ravel()[[0, 2, 1, 3]] for _ in range(2))
        grid = np.zeros((2, 30, 30), dtype=bool)                  # [2, y, x]
        for k, (x1, y1, x2, y2) in enumerate((a, b)):
            grid[k, y1:y2, x1:x2] = True
        union = (grid[0] | grid[1]).sum()
        expected = (grid[0] & grid[1]).sum() / union if union else 0.0
        assert iou([a], [b])[0, 0] == pytest.approx(expected)


def test_matched_iou_golden():
    # pred A = [0,0,10,10], B = [0,0,10,5]; ref R1 = [0,0,10,10], R2 = [0,0,10,6]. IoU: A–R1 = 1, A–R2 = 60/100,
    # B–R1 = 50/100, B–R2 = 50/60. Greedy: A–R1 (1), then B–R2 (5/6): (1 + 5/6) / 2 = 11/12.
    A, B, R1, R2 = [0, 0, 10, 10], [0, 0, 10, 5], [0, 0, 10, 10], [0, 0, 10, 6]
    assert matched_iou([A, B], [R1, R2]) == pytest.approx(11 / 12)
    assert matched_iou([A], [R1, [20, 20, 30, 30]]) == pytest.approx(0.5)  # a missed reference counts 0
    assert matched_iou([A, A, A], [R1]) == pytest.approx(1 / 3)            # spraying copies does not pay


def test_grounding_reward_golden():
    ref = [[0, 0, 10, 10]]
    half, exact = "[0, 0, 10, 20]", "[0, 0, 10, 10]"             # IoU 0.5 and 1 with the reference
    def conv(*contents):
        return [{"role": "assistant", "content": c} for c in contents]
    completions = [
        conv(f"zoom {half}", "no box here", f"fixed: {exact}"),   # 1 + max(0, 1 − 0.5) = 1.5
        conv(f"zoom {exact}", f"then {half}"),                    # got worse: 0.5 + 0 = 0.5
        f"<answer>{half} ... {exact}</answer>",                   # one turn, matched: max-IoU pair 1, spare 0 -> 0.5
        conv("no boxes at all"),                                  # 0
        conv(exact),                                              # one turn, never updated: 1 + 0
        [{"role": "assistant", "content": "",
          "tool_calls": [{"function": {"name": "zoom_in", "arguments": {"bbox": [0, 0, 10, 20]}}}]},
         {"role": "tool", "content": "[0, 0, 10, 10]"},           # a box in the tool's reply is not produced
         {"role": "assistant", "content": "<answer>[0, 0, 10, 10]</answer>"}],  # 1 + (1 − 0.5) = 1.5
        conv(exact),
    ]
    refs = [ref, ref, ref, ref, ref, ref, None]                   # None: no grounding for this sample
    assert grounding_reward(completions, refs) == pytest.approx([1.5, 0.5, 0.5, 0.0, 1.0, 1.5, None])
    assert grounding_reward([conv(exact)], [[0, 0, 10, 10]]) == [1.0]  # one reference box given flat
    with pytest.raises(ValueError, match=r"ref_boxes\[0\]\[0\]=\[5, 5, 5, 9\] is degenerate"):
        grounding_reward(["x"], [[[5, 5, 5, 9]]])


@pytest.mark.parametrize("seed", range(3))
def test_grounding_reward_is_the_same_in_pixels_and_in_norm1000(seed):
    # ReVISE de-normalises both boxes to pixels; IoU is unchanged by a per-axis rescaling, so the reward is too.
    rng = np.random.default_rng(seed)
    W, H = 1920, 1080
    for _ in range(20):
        boxes = [np.sort(rng.uniform(0, 1000, (2, 2)), axis=0).T.ravel()[[0, 2, 1, 3]] for _ in range(4)]
        px = [b * [W / 1000, H / 1000, W / 1000, H / 1000] for b in boxes]
        fmt = lambda b: "[" + ", ".join(f"{v:.6f}" for v in b) + "]"
        norm = [{"role": "assistant", "content": fmt(boxes[0])}, {"role": "assistant", "content": fmt(boxes[1])}]
        pixels = [{"role": "assistant", "content": fmt(px[0])}, {"role": "assistant", "content": fmt(px[1])}]
        a = grounding_reward([norm], [[list(boxes[2]), list(boxes[3])]])[0]
        b = grounding_reward([pixels], [[list(px[2]), list(px[3])]])[0]
        assert a == pytest.approx(b, abs=1e-6) and 0.0 <= a <= 2.0


def test_rewards_take_the_keyword_arguments_grpo_trainer_passes():
    # GRPOTrainer calls reward(prompts=..., completions=..., completion_ids=..., trainer_state=..., **columns)
    # and logs each under its __name__; columns the reward does not use (here "answer", "image") are ignored.
    completions = [[{"role": "assistant", "content": "<think>re-examine [0, 0, 10, 10]</think><answer>4</answer>"}]]
    kwargs = dict(prompts=[[{"role": "user", "content": "How many?"}]], completions=completions,
                  completion_ids=[[1, 2]], trainer_state=object(), solution=["3"], ref_boxes=[[[0, 0, 10, 10]]],
                  answer=["3"], image=[None])
    funcs = (accuracy_reward, format_reward, self_correction_reward, grounding_reward)
    assert [f(**kwargs) for f in funcs] == [[0.0], [1.0], [-1.0], [1.0]]
    assert len({f.__name__ for f in funcs}) == 4
