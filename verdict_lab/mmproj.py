"""A vision projector that sees colour, for SmolLM2-135M on llama-server (docs/tiny_server.md).

llama-server gives a text model eyes with `--mmproj FILE`. No vision weights can be downloaded here,
so this writes a LLaVA-1.5 style (`mlp`) projector by hand: a ViT on 64-pixel images (patch 16, so
16 image tokens, row-major, no CLS token) and an MLP to SmolLM2's width 576. Its only learnt numbers
are SmolLM2's own token embeddings, read from the served GGUF. The route of one 16×16 patch through
llama.cpp's `mlp` graph (tools/mtmd/models/llava.cpp):

1. `v.patch_embd` undoes CLIP's normalisation: channel c is the patch's mean of colour c in [0, 1],
   x = (r, g, b, 0, …, 0); the position embeddings are 0.
2. The ViT blocks have zero weights: attention and feed-forward add 0, so x passes through (the
   graph runs blocks 0 … n−2; with no `pre_ln`/`post_ln` no LayerNorm touches the residual).
3. `mm.0` + GELU: one unit per corner k of the RGB cube, with signs σ_k = 2·corner_k − 1:
   h_k = gelu(ALPHA · σ_k·(2x − 1) − BETA), which is 10 at corner k, gelu(−3) ≈ −0.004 at the
   three neighbouring corners and 0 beyond.
4. `mm.2`: y = emb(gray) + Σ_k h_k · (emb(word_k) − emb(gray)) / 10, so a patch of corner k's
   colour becomes exactly emb(word_k), the embedding of " red", " blue", ….

The model then reads a solid red image as 16 tokens of " red". It sees the colours of 16 patches:
no shapes, and (at 135M) no positions. Colours between the corners (orange, dark green) land
between two words or on gray.

    python -m verdict_lab.mmproj MODEL.gguf OUT.gguf

MODEL.gguf is the served SmolLM2-135M-Instruct.Q4_1.gguf (its `token_embd` is Q8_0, dequantised
exactly). The command writes OUT.gguf (EXPECTED_BYTES bytes) after checking its sha256: every step
is exact or correctly rounded IEEE arithmetic, so the bytes are the same on every machine. The GGUF
reader and writer below need only numpy.
"""

import contextlib
import hashlib
import os
import struct
import sys

import numpy as np

EXPECTED_SHA256 = "7d853b918eedcf75b2f167900c2f4cbd18783f790c5796ed61fe8adce077bee8"
EXPECTED_BYTES = 626_496

IMAGE_SIZE = 64  # pixels per side; llama-server resizes (and pads) every image to this
PATCH_SIZE = 16  # -> (64 / 16)^2 = 16 image tokens
N_PATCHES = (IMAGE_SIZE // PATCH_SIZE) ** 2
WIDTH = 64  # ViT embedding width E; channels 0-2 carry the patch's mean colour
FF = 256  # ViT feed-forward width; must differ from WIDTH (else the loader swaps up and down)
N_BLOCKS = 2  # LLaVA runs all but the last block, so at least 2
N_HEADS = 2
TEXT_WIDTH = 576  # SmolLM2-135M's n_embd; the server exits if the output width differs
LN_EPS = 1e-5
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]

# The corners of the RGB cube and the word each becomes; the word for every other colour.
CORNERS = (
    ((0, 0, 0), "black"),
    ((1, 0, 0), "red"),
    ((0, 1, 0), "green"),
    ((0, 0, 1), "blue"),
    ((1, 1, 0), "yellow"),
    ((1, 0, 1), "purple"),
    ((0, 1, 1), "cyan"),
    ((1, 1, 1), "white"),
)
NEUTRAL = "gray"
HIDDEN = len(CORNERS)  # the projector MLP's hidden width H: one unit per corner
PEAK = 10.0  # h_k at its own corner; ggml's gelu returns x itself from 10 up
ALPHA, BETA = 6.5, 9.5  # 3·ALPHA − BETA = PEAK at the corner, ALPHA − BETA = −3 at a neighbour

GGUF_ALIGNMENT = 32  # the default; tensor data offsets are multiples of it
GGUF_UINT32, GGUF_FLOAT32, GGUF_BOOL, GGUF_STRING, GGUF_ARRAY = 4, 6, 7, 8, 9  # value type tags
GGML_TYPE_F32, GGML_TYPE_Q8_0 = 0, 8  # tensor type tags
Q8_0_BLOCK = 32  # values per Q8_0 block: an f16 scale d, then 32 int8 q; value = d·q
# Scalar GGUF value types: tag -> struct format.
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q"}
SCALARS[12] = "d"


# ----------------------------------------------------------------------------- reading a GGUF


class _Reader:
    """Little-endian values from `buf`, from `pos` on."""

    def __init__(self, buf: bytes):
        self.buf, self.pos = buf, 0

    def take(self, fmt: str):
        (v,) = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return v

    def string(self) -> str:
        n = self.take("Q")
        self.pos += n
        return self.buf[self.pos - n : self.pos].decode("utf-8", errors="replace")

    def value(self, tag: int):
        if tag in SCALARS:
            return self.take(SCALARS[tag])
        if tag == GGUF_STRING:
            return self.string()
        if tag == GGUF_ARRAY:
            inner, n = self.take("I"), self.take("Q")
            return [self.value(inner) for _ in range(n)]
        raise ValueError(f"GGUF value type {tag} is unknown")


def read_gguf(path: str) -> tuple:
    """(metadata dict, {tensor name: (numpy shape, ggml type, absolute byte offset)}) of a GGUF v3
    file, reading its header only."""
    with open(path, "rb") as f:
        buf = f.read()
    if buf[:4] != b"GGUF":
        raise ValueError(f"{path}: not a GGUF file")
    r = _Reader(buf)
    r.pos = 4
    try:
        version, n_tensors, n_kv = r.take("I"), r.take("Q"), r.take("Q")
        if version != 3:
            raise ValueError(f"{path}: GGUF version {version}, only 3 is read")
        meta = {}
        for _ in range(n_kv):
            key = r.string()
            meta[key] = r.value(r.take("I"))
        infos = {}
        for _ in range(n_tensors):
            name, n_dims = r.string(), r.take("I")
            dims = [r.take("Q") for _ in range(n_dims)]
            infos[name] = (tuple(dims[::-1]), r.take("I"), r.take("Q"))  # numpy order
    except struct.error:  # a header that ends early
        raise ValueError(f"{path}: the GGUF header is truncated") from None
    align = meta.get("general.alignment", GGUF_ALIGNMENT)
    start = r.pos + (-r.pos % align)
    return meta, {k: (shape, t, start + off) for k, (shape, t, off) in infos.items()}


def dequantize_q8_0(raw: bytes, shape: tuple) -> np.ndarray:
    """Q8_0 bytes -> float64 [rows, cols]: each block of 32 is d (f16) · q (int8), exact in f64."""
    rows, cols = shape
    if cols % Q8_0_BLOCK:
        raise ValueError(f"Q8_0 rows of {cols} values are not whole blocks of {Q8_0_BLOCK}")
    blocks = np.frombuffer(raw, np.dtype([("d", "<f2"), ("q", "i1", Q8_0_BLOCK)]))
    values = blocks["d"].astype(np.float64)[:, None] * blocks["q"]  # [blocks, 32]
    return values.reshape(rows, cols)


def word_embeddings(model_path: str, words) -> np.ndarray:
    """[len(words), n_embd] float64: each word's token embedding, with its leading space, from the
    model GGUF's Q8_0 `token_embd`. Each word must be one token of the vocabulary."""
    meta, infos = read_gguf(model_path)
    vocab = {t: i for i, t in enumerate(meta.get("tokenizer.ggml.tokens", []))}
    shape, ggml_type, offset = infos.get("token_embd.weight", (None, None, None))
    if ggml_type != GGML_TYPE_Q8_0:
        raise ValueError(f"{model_path}: token_embd.weight is type {ggml_type}, not Q8_0 (8)")
    ids = []
    for w in words:
        token = "\u0120" + w  # byte-level BPE spells a leading space as Ġ
        if token not in vocab:
            raise ValueError(f"{model_path}: ' {w}' is not a single token of the vocabulary")
        ids.append(vocab[token])
    row_bytes = shape[1] // Q8_0_BLOCK * (2 + Q8_0_BLOCK)
    rows = []
    with open(model_path, "rb") as f:
        for i in ids:
            f.seek(offset + i * row_bytes)
            rows.append(dequantize_q8_0(f.read(row_bytes), (1, shape[1]))[0])
    return np.stack(rows)  # [k, n_embd]


# ----------------------------------------------------------------------------- the projector


def projector_tensors(emb: np.ndarray) -> dict:
    """Tensor name -> float32 array (numpy shapes; the GGUF stores them reversed), from `emb`
    [HIDDEN + 1, TEXT_WIDTH]: the embeddings of the CORNERS' words, then of NEUTRAL.

    Every weight is computed in float64 and rounded to float32 once.
    """
    if emb.shape != (HIDDEN + 1, TEXT_WIDTH) or not np.isfinite(emb).all():
        raise ValueError(
            f"need {HIDDEN + 1} finite embeddings of width {TEXT_WIDTH}, got {emb.shape}"
        )
    E, P, t = WIDTH, PATCH_SIZE, {}

    def put(name, weight, bias):
        t[name + ".weight"] = np.asarray(weight, np.float64).astype(np.float32)
        t[name + ".bias"] = np.asarray(bias, np.float64).astype(np.float32)

    # Channel c: Σ over the patch of std_c/P² · (v − mean_c)/std_c, plus mean_c, = mean of v.
    patch = np.zeros((E, 3, P, P))  # [E, 3, P, P]
    for c in range(3):
        patch[c, c] = CLIP_STD[c] / (P * P)
    put("v.patch_embd", patch, np.r_[CLIP_MEAN, np.zeros(E - 3)])
    t["v.position_embd.weight"] = np.zeros((N_PATCHES, E), np.float32)  # [N, E]
    for i in range(N_BLOCKS):
        b = f"v.blk.{i}."
        put(b + "ln1", np.ones(E), np.zeros(E))
        put(b + "ln2", np.ones(E), np.zeros(E))
        for proj in ("attn_q", "attn_k", "attn_v", "attn_out"):
            put(b + proj, np.zeros((E, E)), np.zeros(E))  # [E, E]
        put(b + "ffn_up", np.zeros((FF, E)), np.zeros(FF))  # [FF, E]
        put(b + "ffn_down", np.zeros((E, FF)), np.zeros(E))  # [E, FF]
    # Unit k: ALPHA · σ_k·(2x − 1) − BETA = (2·ALPHA·σ_k)·x − (ALPHA·Σσ_k + BETA).
    sigma = 2.0 * np.array([c for c, _ in CORNERS]) - 1.0  # [H, 3]
    mm0 = np.zeros((HIDDEN, E))  # [H, E]
    mm0[:, :3] = 2 * ALPHA * sigma
    put("mm.0", mm0, -(ALPHA * sigma.sum(1) + BETA))
    # Column k of mm.2 is (emb(word_k) − emb(gray)) / PEAK; the bias is emb(gray).
    put("mm.2", ((emb[:HIDDEN] - emb[HIDDEN]) / PEAK).T, emb[HIDDEN])  # [576, H]
    return t


def projector_metadata():
    """The keys llama.cpp's clip loader reads; ints are u32, floats f32 (it aborts on others)."""
    return {
        "general.architecture": "clip",
        "general.name": "verdict colour mmproj (mlp, for SmolLM2-135M)",
        "clip.projector_type": "mlp",
        "clip.has_vision_encoder": True,
        "clip.use_gelu": True,
        "clip.vision.image_size": IMAGE_SIZE,
        "clip.vision.patch_size": PATCH_SIZE,
        "clip.vision.embedding_length": WIDTH,
        "clip.vision.feed_forward_length": FF,
        "clip.vision.block_count": N_BLOCKS,
        "clip.vision.attention.head_count": N_HEADS,
        "clip.vision.projection_dim": TEXT_WIDTH,
        "clip.vision.attention.layer_norm_epsilon": LN_EPS,
        "clip.vision.image_mean": CLIP_MEAN,
        "clip.vision.image_std": CLIP_STD,
    }


# ----------------------------------------------------------------------------- writing a GGUF


def _string(s):
    return struct.pack("<Q", len(s.encode())) + s.encode()


def _value(key, v):
    """GGUF type tag + value.

    bool -> BOOL, int -> UINT32, float -> FLOAT32, str -> STRING, a list of floats or of strings ->
    an ARRAY of FLOAT32 or STRING.
    """
    if isinstance(v, bool):
        return struct.pack("<I?", GGUF_BOOL, v)
    if isinstance(v, int):
        return struct.pack("<II", GGUF_UINT32, v)
    if isinstance(v, float):
        return struct.pack("<If", GGUF_FLOAT32, v)
    if isinstance(v, str):
        return struct.pack("<I", GGUF_STRING) + _string(v)
    if isinstance(v, list) and all(isinstance(x, float) for x in v):
        return struct.pack("<IIQ", GGUF_ARRAY, GGUF_FLOAT32, len(v)) + struct.pack(
            f"<{len(v)}f", *v
        )
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return struct.pack("<IIQ", GGUF_ARRAY, GGUF_STRING, len(v)) + b"".join(map(_string, v))
    raise TypeError(f"GGUF key {key!r}: no encoding for value {v!r} of type {type(v).__name__}")


def gguf_bytes(metadata, tensors):
    """GGUF v3: header, key-values, tensor infos, then f32 data, each tensor padded to 32 bytes."""
    out = [b"GGUF", struct.pack("<IQQ", 3, len(tensors), len(metadata))]
    out += [_string(k) + _value(k, v) for k, v in metadata.items()]
    offset, data = 0, []
    for name, a in tensors.items():
        if a.dtype != np.float32:
            raise TypeError(f"tensor {name!r} is {a.dtype}, only float32 is written")
        dims = a.shape[::-1]  # GGUF/ggml lists dimensions fastest-first
        out.append(
            _string(name)
            + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, GGML_TYPE_F32, offset)
        )
        raw = a.astype("<f4").tobytes()
        data.append(raw + bytes(-len(raw) % GGUF_ALIGNMENT))
        offset += len(data[-1])
    head = b"".join(out)
    return head + bytes(-len(head) % GGUF_ALIGNMENT) + b"".join(data)


def projector_bytes(model_path: str) -> bytes:
    """The projector GGUF for the model GGUF at `model_path`."""
    words = [w for _, w in CORNERS] + [NEUTRAL]
    return gguf_bytes(projector_metadata(), projector_tensors(word_embeddings(model_path, words)))


def main(argv):
    if len(argv) != 3:
        sys.exit(f"usage: python {os.path.basename(argv[0])} MODEL.gguf OUT.gguf")
    try:
        blob = projector_bytes(argv[1])
    except (OSError, ValueError) as e:
        sys.exit(f"mmproj: {e}")
    digest = hashlib.sha256(blob).hexdigest()
    if digest != EXPECTED_SHA256:
        sys.exit(
            f"mmproj: sha256 {digest} != expected {EXPECTED_SHA256}; nothing written "
            "(a different model file, or the generator changed: then update EXPECTED_SHA256)"
        )
    part = argv[2] + ".part"  # written whole, then renamed: never a partial file
    try:
        with open(part, "wb") as f:
            f.write(blob)
        os.replace(part, argv[2])
    except OSError as e:  # a missing folder, a folder in its place, no permission, a full disk
        with contextlib.suppress(OSError):
            os.remove(part)
        sys.exit(f"mmproj: cannot write {argv[2]}: {e.strerror or e}; nothing written")
    print(f"{argv[2]}: {len(blob)} bytes, sha256 {digest}")


if __name__ == "__main__":
    main(sys.argv)
