"""The colour projector (verdict_lab/mmproj.py): its GGUF reader and writer, and llama.cpp's `mlp`
graph (tools/mtmd/models/llava.cpp) run in numpy on its tensors, so that every patch of a solid
image is checked to land on its colour word's embedding.

The graph, as llava.cpp builds it for PROJECTOR_TYPE_MLP with no CLS token and no pre_ln/post_ln:
pixels normalised per channel, (v/255 − mean_c)/std_c; a stride-P convolution, row-major patches;
plus the position embeddings; blocks 0 … n−2, each x += attn(ln1(x)), x += ffn(ln2(x)); then
gelu(mm.0 x + b0) through mm.2. ggml's gelu is the tanh approximation.
"""

import hashlib
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

from verdict_lab import mmproj

WORDS = [w for _, w in mmproj.CORNERS] + [mmproj.NEUTRAL]
SERVED = os.path.expanduser("~/.cache/verdict-tiny/SmolLM2-135M-Instruct.Q4_1.gguf")


def gelu(x):
    """ggml's gelu: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))."""
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def layer_norm(x, w, b, eps=mmproj.LN_EPS):
    """[N, E] -> [N, E], normalised over E."""
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def attention(x, t, b):
    """Multi-head self-attention of block prefix `b`: [N, E] -> [N, E]."""
    n, e = x.shape
    h = mmproj.N_HEADS

    def heads(name):  # [N, E] -> [H, N, E/H]
        return (
            (x @ t[b + name + ".weight"].T + t[b + name + ".bias"]).reshape(n, h, -1).swapaxes(0, 1)
        )

    q, k, v = heads("attn_q"), heads("attn_k"), heads("attn_v")
    logits = q @ k.swapaxes(1, 2) / np.sqrt(e // h)  # [H, N, N]
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    out = (p @ v).swapaxes(0, 1).reshape(n, e)  # [N, E]
    return out @ t[b + "attn_out.weight"].T + t[b + "attn_out.bias"]


def graph(t: dict, pixels: np.ndarray) -> np.ndarray:
    """llava.cpp's `mlp` graph on a [64, 64, 3] uint8 image: [16, 576] image-token embeddings."""
    t = {k: v.astype(np.float64) for k, v in t.items()}
    P, g = mmproj.PATCH_SIZE, mmproj.IMAGE_SIZE // mmproj.PATCH_SIZE
    x = (pixels / 255.0 - mmproj.CLIP_MEAN) / mmproj.CLIP_STD  # [64, 64, 3]
    patches = x.reshape(g, P, g, P, 3).transpose(0, 2, 4, 1, 3).reshape(g * g, 3, P, P)  # row-major
    x = np.einsum("ncij,ecij->ne", patches, t["v.patch_embd.weight"]) + t["v.patch_embd.bias"]
    x = x + t["v.position_embd.weight"]  # [16, E]
    for i in range(mmproj.N_BLOCKS - 1):  # the last block never runs
        b = f"v.blk.{i}."
        x = x + attention(layer_norm(x, t[b + "ln1.weight"], t[b + "ln1.bias"]), t, b)
        y = layer_norm(x, t[b + "ln2.weight"], t[b + "ln2.bias"])
        y = gelu(y @ t[b + "ffn_up.weight"].T + t[b + "ffn_up.bias"])
        x = x + y @ t[b + "ffn_down.weight"].T + t[b + "ffn_down.bias"]
    assert "v.post_ln.weight" not in t and "v.pre_ln.weight" not in t
    h = gelu(x @ t["mm.0.weight"].T + t["mm.0.bias"])  # [16, H]
    return h @ t["mm.2.weight"].T + t["mm.2.bias"]  # [16, 576]


def cosine(a, b):
    """Row-wise cosine of [N, D] and [D]: [N]."""
    return a @ b / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b))


@pytest.fixture
def emb():
    """Embeddings like SmolLM2's (spread about 0.1), one row per word of WORDS."""
    return np.random.default_rng(7).normal(0, 0.1, (len(WORDS), mmproj.TEXT_WIDTH))


@pytest.mark.parametrize("k", range(len(mmproj.CORNERS)))
def test_every_patch_of_a_solid_corner_colour_lands_on_its_words_embedding(emb, k):
    t = mmproj.projector_tensors(emb)
    corner, word = mmproj.CORNERS[k]
    pixels = np.full((64, 64, 3), 255 * np.array(corner), np.uint8)
    out = graph(t, pixels)  # [16, 576]
    assert out.shape == (mmproj.N_PATCHES, mmproj.TEXT_WIDTH)
    assert cosine(out, emb[k]).min() >= 0.99, word
    # The word's own embedding is the nearest of the nine, for every patch.
    nearest = np.argmax(out @ emb.T / np.linalg.norm(emb, axis=1), axis=1)  # [16]
    assert (nearest == k).all()


def test_gray_lands_on_gray_and_a_two_colour_image_keeps_its_patches_in_raster_order(emb):
    t = mmproj.projector_tensors(emb)
    out = graph(t, np.full((64, 64, 3), (122, 116, 104), np.uint8))  # llama.cpp's pad colour
    assert cosine(out, emb[-1]).min() >= 0.99
    halves = np.zeros((64, 64, 3), np.uint8)
    halves[:, :32] = (255, 0, 0)  # left red, right blue
    halves[:, 32:] = (0, 0, 255)
    out = graph(t, halves)
    red, blue = WORDS.index("red"), WORDS.index("blue")
    for patch in range(16):  # patch = 4·row + col
        want = red if patch % 4 < 2 else blue
        assert cosine(out[patch : patch + 1], emb[want])[0] >= 0.99, patch


def test_a_near_corner_colour_stays_nearest_its_word(emb):
    # (230, 25, 25): σ·(2x − 1) = 2.61 for red, so h = 6.5·2.61 − 9.5 = 7.5: 3/4 of the way.
    out = graph(mmproj.projector_tensors(emb), np.full((64, 64, 3), (230, 25, 25), np.uint8))
    nearest = np.argmax(out @ emb.T / np.linalg.norm(emb, axis=1), axis=1)
    assert (nearest == WORDS.index("red")).all()


def test_degenerate_embeddings_are_refused(emb):
    with pytest.raises(ValueError, match="need 9 finite embeddings of width 576"):
        mmproj.projector_tensors(emb[:, :100])
    bad = emb.copy()
    bad[3, 5] = np.nan
    with pytest.raises(ValueError, match="finite"):
        mmproj.projector_tensors(bad)


# ----------------------------------------------------------------------------- GGUF in and out


def q8_0(table: np.ndarray) -> tuple:
    """(Q8_0 bytes, the values they dequantise to) of [rows, cols]: per block of 32, d = max|x|/127
    as f16 and q = round(x/d)."""
    blocks = table.reshape(-1, mmproj.Q8_0_BLOCK)
    d = (np.abs(blocks).max(1) / 127).astype("<f2")  # [blocks]
    safe = np.where(d == 0, 1, d.astype(np.float64))
    q = np.clip(np.round(blocks / safe[:, None]), -127, 127).astype("i1")
    raw = b"".join(di.tobytes() + qi.tobytes() for di, qi in zip(d, q))
    return raw, (d.astype(np.float64)[:, None] * q).reshape(table.shape)


def fake_model(path, tokens: list, table: np.ndarray) -> np.ndarray:
    """A model GGUF holding `tokens` and a Q8_0 token_embd of `table`; the dequantised table."""
    raw, exact = q8_0(table)
    meta = {"general.architecture": "llama", "tokenizer.ggml.tokens": tokens}
    head = [b"GGUF", struct.pack("<IQQ", 3, 1, len(meta))]
    head += [mmproj._string(k) + mmproj._value(k, v) for k, v in meta.items()]
    dims = table.shape[::-1]
    head.append(mmproj._string("token_embd.weight") + struct.pack("<I2QIQ", 2, *dims, 8, 0))
    blob = b"".join(head)
    path.write_bytes(blob + bytes(-len(blob) % 32) + raw)
    return exact


def test_word_embeddings_are_the_dequantised_rows_of_the_words_with_their_leading_space(tmp_path):
    rng = np.random.default_rng(3)
    tokens = ["<s>", "red", "\u0120red", "\u0120gray", "\u0120blue", "x"]
    table = rng.normal(0, 0.1, (len(tokens), mmproj.TEXT_WIDTH))
    exact = fake_model(tmp_path / "m.gguf", tokens, table)
    got = mmproj.word_embeddings(str(tmp_path / "m.gguf"), ["red", "blue", "gray"])
    np.testing.assert_array_equal(got, exact[[2, 4, 3]])  # Ġred, not the bare "red"
    assert np.abs(got - table[[2, 4, 3]]).max() < 0.01  # Q8_0's error: d/2 <= max|x|/254
    with pytest.raises(ValueError, match="' cyan' is not a single token"):
        mmproj.word_embeddings(str(tmp_path / "m.gguf"), ["cyan"])


def test_the_written_projector_reads_back_with_llamas_shapes_and_metadata(emb, tmp_path):
    t = mmproj.projector_tensors(emb)
    blob = mmproj.gguf_bytes(mmproj.projector_metadata(), t)
    (tmp_path / "p.gguf").write_bytes(blob)
    meta, infos = mmproj.read_gguf(str(tmp_path / "p.gguf"))
    assert meta["clip.projector_type"] == "mlp" and meta["clip.vision.projection_dim"] == 576
    assert meta["clip.vision.image_std"] == pytest.approx(mmproj.CLIP_STD)
    for name, a in t.items():
        shape, ggml_type, offset = infos[name]
        assert shape == a.shape and ggml_type == mmproj.GGML_TYPE_F32 and offset % 32 == 0
        back = np.frombuffer(blob, "<f4", a.size, offset).reshape(shape)
        np.testing.assert_array_equal(back, a)
    assert mmproj.projector_tensors(emb)["mm.2.weight"].tobytes() == t["mm.2.weight"].tobytes()


def test_a_truncated_or_foreign_file_is_one_clear_error(tmp_path):
    (tmp_path / "no.gguf").write_bytes(b"PK\x03\x04 not a gguf")
    (tmp_path / "cut.gguf").write_bytes(b"GGUF" + struct.pack("<I", 3) + b"\x01")
    for name, said in (("no.gguf", "not a GGUF file"), ("cut.gguf", "header is truncated")):
        with pytest.raises(ValueError, match=said):
            mmproj.read_gguf(str(tmp_path / name))
        done = subprocess.run(
            [sys.executable, "-m", "verdict_lab.mmproj", str(tmp_path / name), str(tmp_path / "o")],
            capture_output=True,
            text=True,
        )
        assert done.returncode != 0 and done.stderr.strip() == f"mmproj: {tmp_path / name}: " + (
            "not a GGUF file" if name == "no.gguf" else "the GGUF header is truncated"
        )
        assert not (tmp_path / "o").exists()


@pytest.mark.skipif(not os.path.exists(SERVED), reason="the served SmolLM2 GGUF is not cached")
def test_the_served_models_projector_has_the_pinned_bytes():
    blob = mmproj.projector_bytes(SERVED)
    assert len(blob) == mmproj.EXPECTED_BYTES
    assert hashlib.sha256(blob).hexdigest() == mmproj.EXPECTED_SHA256


@pytest.mark.parametrize("case", ["missing folder", "a folder in its place", "full disk"])
def test_a_projector_that_cannot_be_written_is_one_line_and_leaves_no_part_file(
    tmp_path, monkeypatch, capsys, case
):
    blob = b"projector bytes"
    monkeypatch.setattr(mmproj, "projector_bytes", lambda path: blob)
    monkeypatch.setattr(mmproj, "EXPECTED_SHA256", hashlib.sha256(blob).hexdigest())
    out = tmp_path / "out.gguf"
    if case == "missing folder":
        out = tmp_path / "missing" / "out.gguf"
    elif case == "a folder in its place":
        out.mkdir()
        (out / "keep").write_text("kept")
    else:

        def full(src, dst):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(mmproj.os, "replace", full)
    with pytest.raises(SystemExit) as e:
        mmproj.main(["mmproj.py", "model.gguf", str(out)])
    said = str(e.value.code)
    assert said.startswith(f"mmproj: cannot write {out}: ") and said.endswith("; nothing written")
    assert "\n" not in said and not (tmp_path / "out.gguf.part").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == (
        [] if case != "a folder in its place" else ["out.gguf"]
    )
