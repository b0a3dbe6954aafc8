"""A vision projector with random weights, so the tiny text server accepts images (docs/serving.md).

llama-server gives a text model eyes with `--mmproj FILE`. No vision weights can be downloaded here,
so this writes a LLaVA-1.5 style (`mlp`) projector for SmolLM2-135M-Instruct with random weights: a
ViT on 64-pixel images (patch 16, so 16 image tokens), 2 blocks of width 64, and an MLP to SmolLM2's
width 576. The model does not see: the file proves the plumbing, the request shapes and the cost of
images.

    python -m verdict_lab.mmproj OUT.gguf

The command writes OUT.gguf (934,784 bytes) after checking its sha256.

Weights: SHAKE-256 of (SEED, tensor name), made floats with + - * / sqrt only (exactly rounded by
IEEE), so the bytes are the same on every machine and numpy version. The GGUF v3 writer below needs
only numpy.
"""

import hashlib
import math
import os
import struct
import sys

import numpy as np

SEED = "verdict-mmproj/1"
EXPECTED_SHA256 = "b1557797427096774e3f7a520bc1f5e37a437e700ec6a9797b50054d55b4ee65"

IMAGE_SIZE = 64  # pixels per side; llama-server resizes every image to this
PATCH_SIZE = 16  # -> (64 / 16)^2 = 16 image tokens
N_PATCHES = (IMAGE_SIZE // PATCH_SIZE) ** 2
WIDTH = 64  # ViT embedding width E
FF = 256  # ViT feed-forward width; must differ from WIDTH (else the loader swaps up and down)
N_BLOCKS = 2  # LLaVA runs all but the last block, so at least 2
N_HEADS = 2
HIDDEN = 128  # the projector MLP's hidden width H
TEXT_WIDTH = 576  # SmolLM2-135M's n_embd; the server exits if the output width differs
TARGET_STD = 0.13  # spread of SmolLM2's token embeddings, so image tokens look like tokens
GELU_SECOND_MOMENT = 0.4252  # E[gelu(z)^2] for z ~ N(0, 1), by numerical integration
LN_EPS = 1e-5
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]

GGUF_ALIGNMENT = 32  # the default; tensor data offsets are multiples of it
GGUF_UINT32, GGUF_FLOAT32, GGUF_BOOL, GGUF_STRING, GGUF_ARRAY = 4, 6, 7, 8, 9  # value type tags
GGML_TYPE_F32 = 0  # tensor type tag


def uniform(name, shape, std):
    """Uniform floats with mean 0 and standard deviation `std`, from SHAKE-256(SEED/name)."""
    u = np.frombuffer(
        hashlib.shake_256(f"{SEED}/{name}".encode()).digest(4 * math.prod(shape)), "<u4"
    )
    unit = ((u >> 8).astype(np.float64) + 0.5) / 2**23 - 1.0  # 24 bits -> exact, in (-1, 1)
    # The variance of U(-a, a) is a^2 / 3.
    return (unit * (std * math.sqrt(3))).astype(np.float32).reshape(shape)


def projector_tensors():
    """Tensor name -> float32 array, in numpy shapes (the GGUF stores them reversed).

    Biases are 0.
    """
    E, P, t = WIDTH, PATCH_SIZE, {}

    def linear(name, shape, std, key=None):  # weight [out, in...] and bias [out]
        t[name + ".weight"] = uniform(key or name, shape, std)
        t[name + ".bias"] = np.zeros(shape[0], np.float32)

    def layer_norm(name):  # weight 1, bias 0
        t[name + ".weight"], t[name + ".bias"] = np.ones(E, np.float32), np.zeros(E, np.float32)

    linear("v.patch_embd", (E, 3, P, P), 1 / math.sqrt(3 * P * P), key="patch")  # [E, 3, P, P]
    t["v.position_embd.weight"] = uniform("pos", (N_PATCHES, E), 0.02)  # [N, E], CLIP's init
    for i in range(N_BLOCKS):
        b = f"v.blk.{i}."
        layer_norm(b + "ln1")
        layer_norm(b + "ln2")
        for proj in ("attn_q", "attn_k", "attn_v", "attn_out"):
            linear(b + proj, (E, E), 1 / math.sqrt(E))  # [E, E]
        linear(b + "ffn_up", (FF, E), 1 / math.sqrt(E))  # [FF, E]
        linear(b + "ffn_down", (E, FF), 1 / math.sqrt(FF))  # [E, FF]
    # A final LayerNorm gives the projector unit-variance input, so its output spread is known:
    # mm.0 keeps unit variance, gelu leaves E[g^2] = 0.4252, mm.2 scales to TARGET_STD.
    layer_norm("v.post_ln")
    linear("mm.0", (HIDDEN, E), 1 / math.sqrt(E))  # [H, E]
    # The weight of mm.2 is [576, H].
    linear("mm.2", (TEXT_WIDTH, HIDDEN), TARGET_STD / math.sqrt(HIDDEN * GELU_SECOND_MOMENT))
    return t


def projector_metadata():
    """The keys llama.cpp's clip loader reads; ints are u32, floats f32 (it aborts on others)."""
    return {
        "general.architecture": "clip",
        "general.name": "verdict random mmproj (mlp, for SmolLM2-135M)",
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


def _string(s):
    return struct.pack("<Q", len(s.encode())) + s.encode()


def _value(key, v):
    """GGUF type tag + value.

    bool -> BOOL, int -> UINT32, float -> FLOAT32, list -> FLOAT32 ARRAY.
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


def main(argv):
    if len(argv) != 2:
        sys.exit(f"usage: python {os.path.basename(argv[0])} OUT.gguf")
    blob = gguf_bytes(projector_metadata(), projector_tensors())
    digest = hashlib.sha256(blob).hexdigest()
    if digest != EXPECTED_SHA256:
        sys.exit(
            f"mmproj: sha256 {digest} != expected {EXPECTED_SHA256}; nothing written "
            "(if the generator changed on purpose, update EXPECTED_SHA256)"
        )
    with open(argv[1] + ".part", "wb") as f:  # written whole, then renamed: never a partial file
        f.write(blob)
    os.replace(argv[1] + ".part", argv[1])
    print(f"{argv[1]}: {len(blob)} bytes, sha256 {digest}")


if __name__ == "__main__":
    main(sys.argv)
