"""Tests for how the judges see images: verdict_lab/images.py's load, to_rgb and encode (every
colour mode, EXIF orientation, the pixel budget of judges.budget_size, bad inputs, memoisation), and
the chat messages that carry images (judges.chat_messages), with MMMU's placement
(verdict_lab.layouts.placed)."""

import base64
import io
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from PIL import Image

import judges
import verdict
from judges import chat_messages
from verdict_lab.images import encode as encode_image
from verdict_lab import flags, layouts, verifier
from verdict_lab.loopback import chat_response

# VLMEvalKit (e8e78f05, vlmeval/config.py) runs Qwen2.5-VL-7B-Instruct with
# min_pixels = 1280·28·28 (1.0 MP); the client never raises an image to it (the server's processor
# does), so only the tests name it.
MIN_PIXELS = 1280 * 28 * 28


def decode(url: str) -> Image.Image:
    assert url.startswith("data:image/png;base64,")
    return Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))


def _mode_image(mode):
    if mode == "I;16":
        return Image.fromarray(np.full((6, 8), 32768, dtype=np.uint16))
    if mode == "P":
        img = Image.new("P", (8, 6), 1)
        img.putpalette([0, 0, 0, 200, 10, 10] + [0] * 762)
        return img
    if mode == "P+transparency":
        img = Image.new("P", (8, 6), 0)
        img.putpalette([0, 0, 0] * 256)
        img.info["transparency"] = 0
        return img
    return Image.new(
        mode,
        (8, 6),
        {
            "RGBA": (0, 0, 0, 0),
            "LA": (0, 0),
            "CMYK": (0, 255, 255, 0),
            "L": 128,
            "1": 1,
            "F": 3.5,
            "I": 70000,
            "RGB": (1, 2, 3),
        }[mode],
    )


@pytest.mark.parametrize(
    "mode, pixel",
    [
        ("RGBA", (255, 255, 255)),  # fully transparent: composited on white, not black
        ("LA", (255, 255, 255)),
        ("P", (200, 10, 10)),
        ("P+transparency", (255, 255, 255)),
        ("CMYK", (255, 0, 0)),
        ("I;16", (128, 128, 128)),  # 32768 of 65535, not clipped to white
        ("L", (128, 128, 128)),
        ("1", (255, 255, 255)),
        ("F", (0, 0, 0)),  # a constant float image: min..max stretch of a single value
        ("I", (0, 0, 0)),
        ("RGB", (1, 2, 3)),
    ],
)
def test_every_mode_becomes_rgb(mode, pixel, tmp_path):
    img = _mode_image(mode)
    for source in (img, tmp_path / ("x.tiff" if mode in ("CMYK", "F", "I") else "x.png")):
        if not isinstance(source, Image.Image):
            img.save(source)
        out = decode(encode_image(source))
        assert out.mode == "RGB" and out.size == (8, 6)
        assert max(abs(a - b) for a, b in zip(out.getpixel((3, 3)), pixel)) <= 1


def test_exif_orientation_is_applied(tmp_path):
    img = Image.new("RGB", (40, 20), (255, 0, 0))
    img.paste((0, 0, 255), (20, 0, 40, 20))  # right half blue
    exif = Image.Exif()
    exif[0x0112] = 6  # display rotated 90° clockwise
    path = tmp_path / "rotated.jpg"
    img.save(path, "JPEG", exif=exif, quality=95)
    for source in (path, path.read_bytes(), Image.open(path)):
        out = decode(encode_image(source))
        assert out.size == (20, 40)
        top, bottom = out.getpixel((10, 5)), out.getpixel((10, 35))
        # The right half is now at the bottom.
        assert top[0] > 200 > top[2] and bottom[2] > 200 > bottom[0]


def test_huge_image_is_downscaled_to_the_budget_keeping_aspect(tmp_path):
    path = tmp_path / "huge.png"
    Image.new("RGB", (2400, 1800), "white").save(path, compress_level=1)
    w, h = decode(encode_image(path, max_pixels=MIN_PIXELS)).size  # 4.3 MP at a 1.0 MP budget
    assert 0.98 * MIN_PIXELS <= w * h <= MIN_PIXELS
    assert abs(w / h - 4 / 3) < 0.01
    # At the default budget, 12.8 MP, it is sent as is.
    assert decode(encode_image(path)).size == (2400, 1800)
    w, h = decode(encode_image(path, max_pixels=100)).size
    assert w * h <= 100 and (w, h) == (11, 8)
    assert decode(encode_image(path.read_bytes(), max_pixels=12)).size == (4, 3)


def test_corrupt_missing_and_wrong_inputs_raise_value_error_naming_the_file(tmp_path):
    junk = tmp_path / "junk.png"
    junk.write_bytes(b"\x89PNG\r\n\x1a\nthis is not really a png")
    good = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(
        good, "PNG"
    )
    cut = tmp_path / "truncated.png"
    cut.write_bytes(good.getvalue()[: len(good.getvalue()) // 2])
    for path in (junk, cut, tmp_path / "missing.png", tmp_path):
        with pytest.raises(ValueError, match=str(path.name)):
            encode_image(path)
    with pytest.raises(ValueError, match="bytes"):
        encode_image(b"not an image")
    with pytest.raises(ValueError, match="int"):
        encode_image(123)
    with pytest.raises(ValueError, match="max_pixels"):
        encode_image(junk, max_pixels=0)


def test_encodings_are_memoised_and_follow_file_changes(png):
    a = encode_image(png)
    assert encode_image(png) is a and encode_image(str(png)) is a
    assert encode_image(png.read_bytes()) == a and encode_image(Image.open(png)) == a
    # Bytes are memoised by their value.
    assert encode_image(png.read_bytes()) is encode_image(png.read_bytes())
    Image.new("RGB", (64, 48), "black").save(png)
    os.utime(png, ns=(1, 1))
    assert encode_image(png) != a


def _palette_image(palette, transparency=None):
    img = Image.new("P", (8, 6), 1)  # every pixel is index 1
    img.putpalette(palette + [0] * (768 - len(palette)))
    if transparency is not None:
        img.info["transparency"] = transparency
    return img


def test_palette_images_with_the_same_indices_and_another_palette_or_transparency_differ():
    red, blue = _palette_image([0, 0, 0, 200, 10, 10]), _palette_image([0, 0, 0, 10, 10, 200])
    clear = _palette_image([0, 0, 0, 200, 10, 10], transparency=1)
    assert red.tobytes() == blue.tobytes() == clear.tobytes()  # the same indices
    pixels = [decode(encode_image(img)).getpixel((3, 3)) for img in (red, blue, clear)]
    assert pixels == [(200, 10, 10), (10, 10, 200), (255, 255, 255)]  # index 1 transparent: white


def test_one_lazily_opened_image_encoded_from_many_threads_at_once(tmp_path):
    path = tmp_path / "noise.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (400, 400, 3), dtype=np.uint8)).save(
        path
    )
    expected = encode_image(path)
    for _ in range(5):  # each time a fresh, not yet decoded image shared by 8 threads
        lazy = Image.open(path)
        with ThreadPoolExecutor(8) as pool:
            assert list(pool.map(lambda _: encode_image(lazy), range(8))) == [expected] * 8


@pytest.mark.parametrize(
    "size, budget, expected",
    [
        (
            (5000, 1),
            1000,
            (1000, 1),
        ),  # the short side cannot shrink below 1: the long one takes the budget
        ((1, 5000), 1000, (1, 1000)),
        ((5000, 3), 1000, (1000, 1)),  # r = 0.258: 1290 × 0.77 -> 1290 × 1 -> 1000 × 1
        ((2400, 1800), 100, (11, 8)),  # r = 0.00481: 11.5 × 8.7 -> 11 × 8
    ],
)
def test_budget_size_golden(size, budget, expected):
    assert judges.budget_size(size, budget) == expected


@pytest.mark.parametrize("seed", range(5))
def test_budget_size_keeps_the_budget_for_any_aspect_ratio(seed):
    rng = np.random.default_rng(seed)
    for _ in range(500):
        w, h = (int(x) for x in np.exp(rng.uniform(0, np.log(20000), 2)))
        budget = int(rng.integers(1, w * h + 1))
        w2, h2 = judges.budget_size((w, h), budget)
        assert 1 <= w2 <= w and 1 <= h2 <= h and w2 * h2 <= budget
        if min(w2, h2) >= 20:  # both sides large enough to carry the aspect ratio
            assert abs(np.log((w2 / h2) / (w / h))) < 0.1


def test_extreme_aspect_ratio_is_encoded_within_the_budget():
    w, h = decode(encode_image(Image.new("RGB", (5000, 1), "red"), max_pixels=1000)).size
    assert w * h <= 1000 and (w, h) == (1000, 1)


def test_modes_i_and_i16_with_the_same_pixels_render_the_same(tmp_path):
    a = np.random.default_rng(1).integers(0, 65536, (6, 8)).astype(np.uint16)
    sixteen, wide = Image.fromarray(a), Image.fromarray(a.astype(np.int32))
    assert (sixteen.mode, wide.mode) == ("I;16", "I")
    out = [np.asarray(decode(encode_image(img))) for img in (sixteen, wide)]
    assert np.array_equal(out[0], out[1])
    # 0..65535 is scaled to 0..255.
    assert np.array_equal(out[0][..., 0], np.round(a / 65535 * 255).astype(np.uint8))


def test_a_float_image_with_nan_or_inf_pixels_is_scaled_by_its_finite_pixels(recwarn):
    # Its finite pixels span 0..2; +inf shows white, -inf and NaN black, and nothing warns.
    a = np.array([[0.0, 1.0, 2.0, np.nan], [np.inf, -np.inf, 2.0, 0.0]], dtype=np.float32)
    out = np.asarray(decode(encode_image(Image.fromarray(a, "F"))))
    assert np.array_equal(out[..., 0], [[0, 128, 255, 0], [255, 0, 255, 0]])
    assert np.array_equal(out[..., 0], out[..., 2])
    nothing = Image.fromarray(np.full((2, 3), np.nan, dtype=np.float32), "F")
    assert not np.asarray(decode(encode_image(nothing))).any()  # no finite pixel: black
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


# --------------------------------------------------------------- chat messages: where the images go


def sheet(text: str):
    """A layout (name, state, note="", **fields) -> messages whose user text is `text`:
    chat_messages with the state's images, for layouts.placed to place them."""
    return lambda name, state, note="", **fields: chat_messages("sys", state.images, text)


def test_images_come_first_unless_the_question_names_them():
    red, blue = Image.new("RGB", (4, 4), "red"), Image.new("RGB", (4, 4), "blue")
    r, b = ({"type": "image_url", "image_url": {"url": encode_image(im)}} for im in (red, blue))
    t = lambda s: {"type": "text", "text": s}
    expected = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": [r, t("Image 2:"), b, t("Question:\nIs it red?")]},
    ]
    assert chat_messages("sys", (red, blue), "Question:\nIs it red?") == expected
    placed = lambda text, q, images=(red, blue): layouts.placed(sheet(text))(
        "visual", verdict.State(q, images)
    )
    # With no <image k>, the images come first.
    assert placed("Question:\nIs it red?", "Is it red?") == expected
    # MMMU (VLMEvalKit's split_MMMU): each <image k> of the question becomes the k-th image, at that
    # place; an image named twice is sent twice; the text around the question stays as it is.
    q = "Compare <image 2> with <image 2> and A. <image 1>"
    got = placed(f"Question:\n{q}\n\nWrite the next step.", q)
    assert got[0] == {"role": "system", "content": "sys"} and got[1]["content"] == [
        t("Question:\nCompare "),
        b,
        t(" with "),
        b,
        t(" and A. "),
        r,
        t("\n\nWrite the next step."),
    ]
    only = placed("Question: <image 2>", "<image 2>")
    # Image 1 is never named: it is left out, as VLMEvalKit leaves it out.
    assert only[1]["content"] == [t("Question: "), b]
    # a marker outside the question (a previous step, a candidate) is text, and so is one
    # with no image sent at all
    step = placed(f"{q}\nStep 1: see <image 1>", q)[1]["content"]
    assert (
        step[-1] == t("\nStep 1: see <image 1>")
        and len([p for p in step if p["type"] == "image_url"]) == 3
    )
    assert placed(f"Question: {q}", q, images=())[1]["content"] == f"Question: {q}"
    # chat_messages alone never places the images.
    assert chat_messages("sys", (), f"Question: {q}")[1]["content"] == f"Question: {q}"


def test_image_placement_refuses_a_missing_image_or_a_question_not_in_the_text():
    red = Image.new("RGB", (4, 4), "red")
    q = "<image 1> or <image 2>?"
    with pytest.raises(ValueError, match="names <image 2> but there are 1 image"):
        layouts.placed(sheet(f"Question: {q}"))("visual", verdict.State(q, (red,)))
    with pytest.raises(ValueError, match="does not hold the question"):
        layouts.placed(sheet("Question: something else"))(
            "visual", verdict.State("<image 1>?", (red,))
        )


class Recorder:
    """A client (chat(messages, **params)) that keeps every request's messages and answers each with
    n copies of a json judge's reply (the reasoner takes it as its step)."""

    def __init__(self):
        self.requests = []

    def chat(self, messages, **params):
        self.requests.append(messages)
        return chat_response(['{"score": 7}'] * params.get("n", 1))


def sent_sizes(requests) -> list:
    """The size of every image the requests sent, in order."""
    urls = [
        p["image_url"]["url"]
        for m in requests
        for p in m[1]["content"]
        if p.get("type") == "image_url"
    ]
    return [decode(u).size for u in urls]


def test_the_default_budget_is_vlmevalkits_and_max_pixels_sets_it(tmp_path):
    """VLMEvalKit e8e78f05 (vlmeval/config.py) runs Qwen2.5-VL-7B-Instruct with
    min_pixels = 1280·28·28 and max_pixels = 16384·28·28; the budget is the latter, and
    --max-pixels (flags.py, shared by demo.py and verdict_lab.evaluate) sets Settings.max_pixels,
    the budget every image of the chain is sent at: the reasoner's, every judge's
    (layouts.layout(name, max_pixels))."""
    import argparse

    assert (MIN_PIXELS, judges.MAX_PIXELS) == (1_003_520, 12_845_056) == (1280 * 784, 16384 * 784)
    assert verifier.Settings().max_pixels == judges.MAX_PIXELS
    p = argparse.ArgumentParser()
    flags.add_endpoint_args(p)
    flags.add_verifier_args(p)
    assert p.parse_args([]).max_pixels == judges.MAX_PIXELS
    assert flags.settings_of(p.parse_args([])).max_pixels == judges.MAX_PIXELS
    path = tmp_path / "a.png"
    Image.new("RGB", (40, 30), "white").save(path)
    state = verdict.State("Is it white?", (path,))
    args = p.parse_args(["--base-url", "http://127.0.0.1:9/v1", "--max-pixels", "300"])
    settings = flags.settings_of(args)
    assert settings.max_pixels == 300
    client = Recorder()
    v = verifier.build(settings, client)
    assert (
        v.propose(state, 1) == ['{"score": 7}']
        and [j(state, "It is.") for j in v.judges] == [pytest.approx(7 / 9)] * 3
    )
    # 300 pixels, at 4:3.
    assert len(client.requests) == 4 and sent_sizes(client.requests) == [(20, 15)] * 4
    for name in layouts.LAYOUTS:  # every layout at that budget
        msgs = layouts.layout(name, 300)("visual", state, step="It is.", reply="Score:")
        assert sent_sizes([msgs]) == [(20, 15)]
        assert sent_sizes(
            [layouts.layout(name)("visual", state, step="It is.", reply="Score:")]
        ) == [(40, 30)]
    with pytest.raises(ValueError, match="--max-pixels must be an integer >= 1, got max_pixels=0"):
        flags.settings_of(
            p.parse_args(["--base-url", "http://127.0.0.1:9/v1", "--max-pixels", "0"])
        )
    client = Recorder()  # the default budget, 12.8 MP: sent as is
    v = verifier.build(flags.settings_of(p.parse_args([])), client)
    v.propose(state, 1), v.judges[0](state, "It is.")
    assert sent_sizes(client.requests) == [(40, 30)] * 2
    assert decode(encode_image(path)).size == (40, 30)


def test_a_pil_images_encoding_is_kept_by_its_pixels(monkeypatch):
    from verdict_lab import images

    encoded, real = [], images.encode_image
    monkeypatch.setattr(
        images, "encode_image", lambda im, mp: encoded.append(im.size) or real(im, mp)
    )
    monkeypatch.setattr(images, "_memo", {})
    red = Image.new("RGB", (5, 4), (255, 0, 0))
    first = encode_image(red)
    assert encode_image(Image.new("RGB", (5, 4), (255, 0, 0))) == first  # other object, same pixels
    assert encode_image(red.convert("RGBA")) == first  # the same pixels once made RGB
    blue = encode_image(Image.new("RGB", (5, 4), (0, 0, 255)))
    assert blue != first and encode_image(red, max_pixels=10) != first
    assert encoded == [(5, 4), (5, 4), (5, 4)]  # red, blue, red in another budget
    for k in range(images.MEMO):  # the least recent goes first
        encode_image(Image.new("RGB", (1, 1), (k, 0, 0)))
    assert len(images._memo) == images.MEMO
    encode_image(red)
    assert len(encoded) == 3 + images.MEMO + 1


def test_a_pil_image_that_to_rgb_changes_is_kept_by_what_it_shows(monkeypatch):
    # The same RGB bytes, rotated by EXIF or with a transparent colour, show something else: each
    # is memoised by its upright RGB pixels, never as the plain image.
    from verdict_lab import images

    monkeypatch.setattr(images, "_memo", {})
    pixels = np.zeros((4, 6, 3), np.uint8)
    pixels[:, :3] = (255, 0, 0)  # the left half red
    plain = Image.fromarray(pixels)
    rotated = Image.fromarray(pixels)
    rotated.getexif()[images.ORIENTATION] = 6  # shown turned by 90°
    keyed = Image.fromarray(pixels)
    keyed.info["transparency"] = (255, 0, 0)  # red is transparent: shown white
    urls = [encode_image(im) for im in (plain, rotated, keyed)]
    assert len(set(urls)) == 3
    assert decode(urls[1]).size == (4, 6)
    assert decode(urls[2]).getpixel((0, 0)) == (255, 255, 255)
    assert encode_image(Image.fromarray(pixels)) == urls[0]
