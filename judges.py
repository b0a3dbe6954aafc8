"""The base reasoner and the three verification agents of VERDICT, over any OpenAI-compatible endpoint.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via Disagreement-Aware
Consensus", ECCV 2026: the reasoner samples n candidate next steps (T = 0.8, top-p = 0.6); three frozen
agents (prompts/*.txt), visual (λ_V), logical (λ_L) and contextual (λ_C), each score a candidate: a raw ŝ_i
in [0, 1], or NaN (abstain) if two replies held no valid score. Not in the paper: the Reviser (after ReVISE).

One judge call, top to bottom: Judge.judgement lays out its messages (role_first: the prompt, the images as
PNG data URLs within the pixel budget, the candidate last), posts them (Endpoint.chat, bounded retries),
reads the reply (JSON: the schema's score, the weighted one from top_logprobs), asks again if need be (ask).

Seams: roles take `client` (chat(messages, **params) -> a chat completion; Endpoint here) and `layout`
((name, state, note="", **fields) -> messages; role_first here), Judge a `reply` (a Reply; JSON here);
verdict_lab/ plugs in its own. With verdict.py and prompts/, live judges need only numpy, requests, pillow."""

from __future__ import annotations

import base64
import io
import json
import math
import os
import random
import re
import threading
import time
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
from PIL import Image, ImageOps

import verdict

_HERE = Path(__file__).resolve().parent
# prompts/ beside this file (a checkout, a vendored copy), else where `pip install` puts it
PROMPTS = next((p for p in (_HERE / "prompts", _HERE / "verdict_lab" / "prompts") if p.is_dir()), _HERE)
# a prompt file's sections: a plain prompt (answer extraction), a role of the step, shared.txt (read first)
SECTIONS = (("system", "user"), ("instructions", "context", "task"), ("system", "question", "steps"))
# VLMEvalKit (e8e78f05, vlmeval/config.py) runs Qwen2.5-VL-7B with max_pixels = 16384·28·28: the default
# budget. Images are only ever downscaled; raising a small one is the server's processor's job.
MAX_PIXELS = 16384 * 28 * 28  # 12 845 056
MAX_FILE = 2**28  # 256 MiB: a larger image file is refused before it is read
_pil = threading.Lock()  # a caller's PIL image: two threads decoding one lazily opened image corrupt it
MAX_WAIT = 60.0  # seconds; no retry waits longer, whatever Retry-After says
DEFAULT_KEY_ENV = "OPENAI_API_KEY"
SCALE = "one digit from 0 to 9, where 0 means certainly wrong and 9 certainly right"
JSON_SCORE_ONLY = 'Reply with one JSON object of this form, without explanation:\n{"score": <' + SCALE + ">}"
JSON_EXPLAIN = 'Reply with one JSON object of this form:\n{"reason": "<why, in one or two sentences>", '
JSON_EXPLAIN += '"score": <' + SCALE + ">}"
REASON_CHARS = 200  # the longest "reason" the schema allows
_FENCED = re.compile(r"(?s)\A\s*```(?:json)?\s*(.*?)\s*```\s*\Z")  # a reply wrapped in a ``` fence
STOP = ["\n\n", "\nStep "]  # one candidate = one step: it ends at a blank line or a new "Step" label
SEED_STRIDE = 1000  # sampling seeds per reasoner seed (see Reasoner)


def _int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)  # True is an int


def one_line(text, limit: int = 300) -> str:
    """text on one line (whitespace folded, control characters dropped), cut to `limit` characters + "..."."""
    text = " ".join("".join(c for c in str(text) if c.isprintable() or c.isspace()).split())
    return text if len(text) <= limit else text[:limit] + "..."


@dataclass(frozen=True)
class Prompt:
    """A prompt file: named sections of text (SECTIONS), templates with {placeholders}."""

    sections: tuple  # ((name, text), ...)
    path: str

    def __getitem__(self, name: str) -> str:
        return dict(self.sections)[name]

    def render(self, section: str = "user", **fields: str) -> str:
        """The section, {placeholders} filled from fields (extras ignored, a missing one a ValueError)."""
        missing = [m for m in re.findall(r"\{(\w+)\}", self[section]) if m not in fields]
        if missing:
            raise ValueError(f"{self.path}: unknown placeholder {{{missing[0]}}}; known: {sorted(fields)}")
        return re.sub(r"\{(\w+)\}", lambda m: fields[m.group(1)], self[section])


@lru_cache(maxsize=None)
def load_prompt(name: str) -> Prompt:
    """prompts/{name}.txt; ValueError when it cannot be read or its sections are not one of SECTIONS."""
    path = PROMPTS / f"{name}.txt"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ValueError(f"no prompt {name!r}: cannot read {path} ({e.strerror})") from None
    parts = re.split(r"(?m)^\[(\w+)\][ \t]*\n", text)
    names = tuple(parts[1::2])
    if parts[0].strip() or names not in SECTIONS:
        expected = " or ".join("".join(f"[{n}]" for n in s) for s in SECTIONS)
        found = "".join(f"[{n}]" for n in names) or "none"
        raise ValueError(f"{path} must hold the sections {expected}, in this order; it holds {found}")
    return Prompt(tuple(zip(names, (p.strip() for p in parts[2::2]))), str(path))


def load(image) -> Image.Image:
    """A PIL image of a path, bytes or PIL image, decoded now; ValueError if unreadable or over MAX_FILE."""
    if isinstance(image, Image.Image):
        return image
    name = str(image) if isinstance(image, (str, Path)) else f"<{len(image)} bytes>"
    try:
        if isinstance(image, (str, Path)) and (size := os.path.getsize(image)) > MAX_FILE:
            raise ValueError(f"{size:,} bytes, more than the {MAX_FILE:,} an image file may hold")
        data = Path(image).read_bytes() if isinstance(image, (str, Path)) else bytes(image)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # the budget downscales it
            img = Image.open(io.BytesIO(data))
            img.load()  # decode now, so a truncated file fails here
        return img
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:  # bomb: 2·MAX_IMAGE_PIXELS
        raise ValueError(f"cannot decode image {name}: {e}") from None


def to_rgb(img: Image.Image) -> Image.Image:
    """RGB, EXIF-rotated, alpha on white; I;16 and I scaled from 0..65535, else (and F) min..max."""
    img = ImageOps.exif_transpose(img)
    if img.mode.startswith("I;16") or img.mode in ("I", "F"):  # convert("RGB") would clip these to white
        a = np.asarray(img, dtype=np.float64)  # [h, w]
        fits = img.mode != "F" and a.min() >= 0 and a.max() <= 65535  # the same pixels, the same render
        lo, hi = (0.0, 65535.0) if fits else (a.min(), a.max())
        img = Image.fromarray(np.round((a - lo) * (255 / max(hi - lo, 1e-12))).clip(0, 255).astype(np.uint8))
    if img.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in img.info:
        img = Image.alpha_composite(Image.new("RGBA", img.size, (255, 255, 255, 255)), img.convert("RGBA"))
    return img.convert("RGB")


def budget_size(size: tuple, max_pixels: int) -> tuple:
    """(w, h) = size scaled by sqrt(max_pixels / (w·h)), rounded down, sides >= 1 (5000×1 at 1000: 1000×1)."""
    w, h = size
    r = math.sqrt(max_pixels / (w * h))
    w2, h2 = max(1, int(w * r)), max(1, int(h * r))
    if w2 * h2 > max_pixels:  # the shorter side was raised to 1 pixel
        w2, h2 = (max_pixels // h2, h2) if w2 > h2 else (w2, max_pixels // w2)
    return w2, h2


def encode_image(image, max_pixels: int = MAX_PIXELS) -> str:
    """A PNG data URL of a path, bytes or PIL image (to_rgb, budget_size), a file or bytes encoded once."""
    if not (_int(max_pixels) and max_pixels >= 1):
        raise ValueError(f"max_pixels must be an integer >= 1, got max_pixels={max_pixels!r}")
    if isinstance(image, (str, Path)):
        try:
            st = os.stat(image)
        except OSError as e:
            raise ValueError(f"cannot read image {image}: {e.strerror}") from None
        return _encoded(str(Path(image).resolve()), st.st_mtime_ns, st.st_size, max_pixels)
    if isinstance(image, (bytes, bytearray, memoryview)):
        return _encoded(bytes(image), None, None, max_pixels)
    if not isinstance(image, Image.Image):
        raise ValueError(f"an image must be a path, bytes or a PIL.Image, got {type(image).__name__}")
    with _pil:
        img = to_rgb(image)  # a new image, this thread's own
    return _png_url(img, max_pixels)


@lru_cache(maxsize=32)
def _encoded(source, mtime, size, max_pixels: int) -> str:
    return _png_url(to_rgb(load(source)), max_pixels)


def _png_url(img: Image.Image, max_pixels: int) -> str:
    if img.width * img.height > max_pixels:
        img = img.resize(budget_size(img.size, max_pixels), Image.Resampling.LANCZOS, reducing_gap=3.0)
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def chat_messages(system: str, images: Sequence, text: str, max_pixels: int = MAX_PIXELS) -> list:
    """[system, user]: images before text (a prefix cache), from the second each after "Image k:" (on
    llama-server a cached [A][B][text] fails a later [A][text]: "Chunk not found"); no image: a string."""
    content, part = text, lambda t: {"type": "text", "text": t}
    if images:
        url = lambda im: {"type": "image_url", "image_url": {"url": encode_image(im, max_pixels)}}
        content = [p for k, im in enumerate(images, 1) for p in [part(f"Image {k}:")][: k - 1] + [url(im)]]
        content.append(part(text))
    return [{"role": "system", "content": system}, {"role": "user", "content": content}]


def steps_text(steps: Sequence[str]) -> str:
    """The previous steps as the prompts show them: "Step 1: ..." lines, or "(none yet)"."""
    return "\n".join(f"Step {i}: {s}" for i, s in enumerate(steps, 1)) or "(none yet)"


def role_first(name: str, state: verdict.State, note: str = "", images=None, max_pixels=MAX_PIXELS, **fields):
    """Role `name`'s messages about `state` (images: state's, or these): shared.txt's system and question (the
    same bytes in every request of an item, for a prefix cache), instructions, `note`, steps, task(fields)."""
    role, shared = load_prompt(name), load_prompt("shared")
    steps = note + shared.render("steps", steps=steps_text(state.steps))
    parts = [shared.render("question", question=state.question), role["instructions"], steps]
    text = "\n\n".join(parts + [role.render("task", **fields)])
    return chat_messages(shared["system"], state.images if images is None else images, text, max_pixels)


class EndpointError(RuntimeError):
    """The endpoint failed: `status` (HTTP, or None: no connection, timeout, bad body) and its `message`."""

    def __init__(self, url: str, status: int | None, message: str):
        self.url, self.status, self.message = url, status, message
        super().__init__(f"{url}: {'no valid response' if status is None else f'HTTP {status}'}: {message}")


def api_key(name: str) -> str | None:
    """$name stripped, or None; ValueError (key unshown) if `name` is no name or the key no header value."""
    if not (isinstance(name, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name)):
        raise ValueError(
            "the API key's variable must be a name such as OPENAI_API_KEY, not a key (not shown)"
        )
    key = os.environ.get(name, "").strip()
    if any(ord(c) < 32 or ord(c) == 127 or ord(c) > 255 for c in key):
        raise ValueError(f"${name} holds a character that an HTTP header cannot carry; the key is not shown")
    return key or None


def shown_url(url: str) -> str:
    """url as it may be shown or stored: user information (user:password@, token@) and query values ***."""
    return re.sub(r"([?&][^=&#]*=)[^&#]*", r"\1***", re.sub(r"(?<=://)[^/@?#]*@", "***@", url))


def shape_problem(body) -> str | None:
    """None if body is a chat completion (choices, each a message with string content), else what is wrong."""
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices:
        return "response has no choices"
    message = lambda c: c.get("message") if isinstance(c, dict) and isinstance(c.get("message"), dict) else {}
    bad = [c for c in choices if not isinstance(message(c).get("content"), str)]
    return f"a choice has no message with string content: {json.dumps(bad[0])}" if bad else None


def _requests():
    """requests, imported by the first Endpoint: reading prompts or images here imports no HTTP."""
    import requests

    return requests


def _server_message(r) -> str:
    """An error body's message: OpenAI's {"error": {"message"}}, vLLM's {"message"}, or the text."""
    try:
        body = r.json()
    except (ValueError, RecursionError):
        return r.text.strip() or r.reason or "(empty body)"
    err = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(err, dict):
        err = err.get("message") or err.get("detail") or err
    return err if isinstance(err, str) else json.dumps(err)


class Endpoint:
    """POST {base_url}/chat/completions with bounded retries: chat(messages, **params) -> the response.

    Retries (at most `retries`, waiting backoff·2^attempt·U(0.5, 1) or Retry-After up to MAX_WAIT) only
    on connection errors, timeouts, 429, 5xx, a 200 that is no chat completion; no error shows the key.
    llama-server's HTTP 500 "Chunk not found" (its prompt cache cut inside an image) is retried uncached."""

    def __init__(self, base_url: str, model: str, api_key_env=DEFAULT_KEY_ENV, timeout=120.0, retries=4):
        if not (_int(retries) and retries >= 0):
            raise ValueError(f"retries must be an integer >= 0, got retries={retries!r}")
        if not 0 < timeout <= threading.TIMEOUT_MAX:  # NaN fails too
            raise ValueError(f"timeout must be > 0 seconds, got timeout={timeout!r}")
        api_key(api_key_env)  # a key no request can carry stops here, before any call
        self.base_url, self.model, self.api_key_env = base_url.rstrip("/"), model, api_key_env
        self.timeout, self.retries, self.backoff, self.sleep = timeout, retries, 0.5, time.sleep
        self.session = _requests().Session()  # verdict_lab may swap session, backoff and sleep

    def chat(self, messages: list, **params) -> dict:
        """One chat completion; parameters set to None are not sent."""
        params = {k: v for k, v in params.items() if v is not None}
        return self.post({"model": self.model, "messages": messages, **params})

    def post(self, payload: dict) -> dict:
        """The response to `payload`, after at most `retries` retries; EndpointError with the last failure."""
        for attempt in range(self.retries + 1):
            body, error, told = self._attempt(payload)
            if body is not None:
                return body
            if attempt < self.retries:
                if "Chunk not found" in error.message:  # llama-server's image prompt cache: ask without it
                    payload = {**payload, "cache_prompt": False}
                wait = self.backoff * 2**attempt * random.uniform(0.5, 1.0) if told is None else told
                self.sleep(min(wait, MAX_WAIT))
        raise error

    def error(self, status: int | None, message: str) -> EndpointError:
        """An EndpointError of this endpoint: the API key removed, the message on one line."""
        raw, url = os.environ.get(self.api_key_env, ""), shown_url(f"{self.base_url}/chat/completions")
        for k in sorted({k for k in (raw, raw.strip()) if k}, key=len, reverse=True):  # the longer one first
            url, message = url.replace(k, "***"), message.replace(k, "***")
        return EndpointError(url, status, one_line(message))

    def _attempt(self, payload: dict) -> tuple:
        """One request: (body, None, None), or (None, EndpointError, Retry-After) to retry; else it raises."""
        requests = _requests()
        try:
            key = api_key(self.api_key_env)  # read at each request, never kept
        except ValueError as e:  # the variable changed since __init__ checked it
            raise self.error(None, str(e)) from None
        url, headers = f"{self.base_url}/chat/completions", {"Authorization": f"Bearer {key}"} if key else {}
        try:  # a redirect is not followed: answers from another server are not this endpoint's
            r = self.session.post(
                url, json=payload, headers=headers, timeout=self.timeout, allow_redirects=False
            )
        except ValueError as e:  # requests' InvalidURL, MissingSchema, ...: retrying cannot help
            raise self.error(None, f"unusable request: {e}") from None
        except requests.Timeout:
            return None, self.error(None, f"timed out after {self.timeout:g} s"), None
        except requests.RequestException as e:  # refused, reset, DNS, a body cut short, ...
            return None, self.error(None, f"connection failed: {e}"), None
        if r.status_code == 429 or r.status_code >= 500:  # transient: wait as told, else back off
            told = r.headers.get("Retry-After", "")  # seconds (the HTTP-date form is not honoured)
            told = float(told) if re.fullmatch(r"\s*\d+(\.\d*)?\s*", told) else None
            return None, self.error(r.status_code, _server_message(r)), told
        if r.status_code >= 300:  # the request itself is wrong, or the endpoint is elsewhere
            where = f" to {r.headers.get('Location')!r}; name that endpoint" if r.status_code < 400 else ""
            raise self.error(r.status_code, f"redirected{where}" if where else _server_message(r))
        try:
            body = r.json()
        except (ValueError, RecursionError):  # RecursionError: nested too deep to read
            return None, self.error(None, f"HTTP {r.status_code} body is not JSON: {r.text}"), None
        problem = shape_problem(body)
        if problem == "response has no choices" and isinstance(body, dict) and "error" in body:
            problem += f" (server said: {_server_message(r)})"
        return (None, self.error(None, problem), None) if problem else (body, None, None)


def text_of(response: dict, i: int = 0) -> str:
    """The content of choice i of a chat completion."""
    return response["choices"][i]["message"]["content"]


@dataclass(frozen=True)
class Reply:
    """A reply format: what a judge asks its reply to be, and how it reads it (JSON here; verdict_lab.formats
    has text and digit). `reasons`: a reason before the score; `step`: the candidate a reply may quote."""

    name: str
    line: Callable[[bool], str]  # line(reasons): the prompt's {reply}
    params: Callable[[bool], dict]  # params(reasons): what the request adds
    read: Callable[[str, bool, str], tuple]  # (text, reasons, step) -> (ŝ, reason or ""), or ValueError: why
    digit_at: Callable[[str, str], Any] | None  # (text, step) -> where the one-token digit is; None: none
    follow_up: Callable[[str], str]  # follow_up(why): the message that asks once more
    max_tokens: tuple = (24, 256)  # (score alone, with a reason)
    follow_up_tokens: int | None = None  # the follow-up's max_tokens (None: the same)


def score_schema(reasons: bool = False) -> dict:
    """{"score": an integer 0..9}, after a "reason" of 1..REASON_CHARS characters with reasons. An integer:
    llama.cpp's grammar bounds integers only; one digit, one Qwen/SmolLM2 token: its top_logprobs hold all."""
    props = {"score": {"type": "integer", "minimum": 0, "maximum": 9}}
    if reasons:
        props = {"reason": {"type": "string", "minLength": 1, "maxLength": REASON_CHARS}, **props}
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def response_format(name: str, schema: dict) -> dict:
    """The field vLLM, SGLang, llama-server and OpenAI take for `schema`; some skip keywords: read replies."""
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}


def json_score(text: str, reasons: bool = False, step: str | None = None) -> tuple:
    """(d / 9, reason) of {"reason": "...", "score": d}, d in 0..9, ```json fence allowed; else ValueError."""
    try:
        reply = json.loads(_FENCED.sub(r"\1", text))
    except (ValueError, RecursionError):
        raise ValueError("not valid JSON") from None
    if not isinstance(reply, dict) or "score" not in reply:
        raise ValueError('not a JSON object with a "score"')
    score, reason = reply["score"], reply.get("reason")
    if not (_int(score) and 0 <= score <= 9):
        raise ValueError(f'"score" must be an integer from 0 to 9, got {one_line(json.dumps(score), 40)}')
    if reasons and not isinstance(reason, str):
        raise ValueError('"reason" must be a string')
    reason = re.sub("[\ud800-\udfff]", "\ufffd", reason.strip()) if isinstance(reason, str) else ""
    return score / 9, reason  # a lone surrogate ("\\ud800" in the JSON) is no text a file could hold


def json_digit_at(text: str, step: str | None = None) -> int | None:
    """Where the digit of the last "score" key of a JSON reply is, or None."""
    m = list(re.finditer(r'"score"\s*:\s*', text))
    return m[-1].end() if m and re.match(r"[0-9]", text[m[-1].end() :]) else None


JSON = Reply(
    "json",
    line=lambda reasons: JSON_EXPLAIN if reasons else JSON_SCORE_ONLY,
    params=lambda reasons: {"response_format": response_format("judgement", score_schema(reasons))},
    read=json_score,
    digit_at=json_digit_at,
    follow_up="Your reply was not the JSON object asked for ({}). Reply with that object only.".format,
)


def fence(step: str) -> str:
    """The candidate with any <step> or </step> of its own defused, so it cannot close its fence."""
    return re.sub(r"(?i)<(/?)step>", r"[\1step]", step)


def digit_probs(logprobs: Any, reply: Reply = JSON, step: str | None = None) -> np.ndarray:
    """[10] each digit's probability, as sent, in the top_logprobs of the token at reply.digit_at (" 7" counts
    for 7); all 0 without usable logprobs (not the OpenAI shape, a logprob > 0, digits summing above 1)."""
    p = np.zeros(10)  # [10]
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    tokens = lambda c: all(isinstance(t, dict) and isinstance(t.get("token"), str) for t in c)
    if not (isinstance(content, list) and tokens(content)):
        return p
    at = reply.digit_at("".join(t["token"] for t in content), step) if reply.digit_at else None
    pos = 0
    for t in content if at is not None else ():
        if pos + len(t["token"]) > at:
            break
        pos += len(t["token"])
    else:
        return p
    before = t["token"][: at - pos].strip()  # what the digit's token holds before it (often nothing)
    alts = t.get("top_logprobs") if isinstance(t.get("top_logprobs"), list) else []
    for a in (a for a in alts if isinstance(a, dict) and isinstance(a.get("token"), str)):
        d, lp = a["token"].strip(), a.get("logprob")
        d = d[len(before) :] if d.startswith(before) else ""
        if re.fullmatch(r"[0-9]", d) and isinstance(lp, (int, float)) and not isinstance(lp, bool):
            if not -1e300 <= lp <= 0:  # a probability above 1, NaN, or a number no float holds
                return np.zeros(10)
            p[int(d)] += math.exp(float(lp))
    return p if p.sum() <= 1 + 1e-6 else np.zeros(10)


def logprob_score(logprobs: Any, reply: Reply = JSON, step: str | None = None) -> float:
    """Σ_d p(d)·d/9, p = digit_probs renormalised, or NaN: on llama-server (top_logprobs before the grammar)
    the grammar's distribution at the digit, if the digits made the list; vLLM masks first, the same."""
    p = digit_probs(logprobs, reply, step)  # [10]
    return _weighted(p) if p.sum() > 0 else math.nan


def _weighted(p: np.ndarray) -> float:
    return float(p @ np.arange(10) / 9 / p.sum())  # [10] @ [10] -> scalar


def ask(chat: Callable, msgs: list, read: Callable, follow_up: Callable, params: dict, retry=None) -> tuple:
    """read(chat(msgs, **params)); on ValueError, once more (params `retry`) with the reply and follow_up(why)
    appended. -> (value, or None when both were unreadable; the responses; why they failed)."""
    responses, errors = [], []
    for attempt in range(2):
        response = chat(msgs, **(params if attempt == 0 else retry or params))
        responses.append(response)
        try:
            return read(response), responses, errors
        except ValueError as e:
            errors.append(str(e))
            said, told = {"role": "assistant", "content": text_of(response)}, follow_up(str(e))
            msgs = msgs + [said, {"role": "user", "content": told}]
    return None, responses, errors


def one_step(text: str) -> str:
    """A reply's first step: up to a blank line or a new "Step k" label, without its label or any echo of the
    template line "Final answer: <the option letter, or the value>" (an echoed system prompt ends with it)."""
    text = re.split(r"\n[ \t]*\n|\n(?=[ \t*_#]*step[ \t]*\d)", text.strip(), flags=re.I)[0]
    text = re.sub(r"(?i)^[ \t*_#]*step[ \t]*\d+[ \t]*[:.)-][ \t*_]*", "", text)
    return re.sub(r"(?im)^[ \t]*final answer\s*:\s*<[a-z][^<>\n]*\s[^<>\n]*>\.?[ \t]*$", "", text).strip()


def sampling_seed(seed: int, i: int, n: int) -> int:
    """The `seed` of reasoner seed `seed`'s i-th request of a step for n candidates (see Reasoner)."""
    return seed * SEED_STRIDE + i * n


class Reasoner:
    """The base reasoner: propose(state, n) -> n candidate next steps (a request's choices), for verdict.run.

    Choice j is sampled with seed + j: reasoner seed k owns [k·SEED_STRIDE, (k + 1)·SEED_STRIDE), and its i-th
    request of a step sends sampling_seed(k, i, n), so no two requests share a seed."""

    def __init__(
        self,
        client,
        max_tokens=256,
        seed=0,
        *,
        temperature=0.8,  # the paper's T = 0.8
        top_p=0.6,  # and top-p = 0.6
        top_k=-1,  # sent (None: not): vLLM serving Qwen2.5-VL otherwise applies top_k = 1, n identical steps
        max_topups=None,  # requests for missing choices (llama-cpp-python ignores n); None: n
        layout=role_first,
    ):
        if not (math.isfinite(temperature) and temperature >= 0 and 0 < top_p <= 1):  # NaN fails too
            raise ValueError(f"need temperature >= 0 and 0 < top_p <= 1, got {temperature=}, {top_p=}")
        if not (_int(seed) and seed >= 0):  # a negative seed would reach into another seed's block
            raise ValueError(f"seed must be an integer >= 0, got seed={seed!r}")
        self.client, self.max_tokens, self.seed, self.max_topups = client, max_tokens, seed, max_topups
        self.temperature, self.top_p, self.top_k, self.layout = temperature, top_p, top_k, layout

    def __call__(self, state: verdict.State, n: int) -> list:
        if not (_int(n) and n >= 1):
            raise ValueError(f"n must be an integer >= 1, got n={n!r}")
        asks = 1 + (n if self.max_topups is None else self.max_topups)
        if asks * n > SEED_STRIDE:  # the step's seeds would run into the next reasoner seed's block
            raise ValueError(f"n = {n} with {asks - 1} top-ups needs {asks * n} seeds, over {SEED_STRIDE}")
        msgs, out = self.layout("reasoner", state), []
        sampling = dict(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k, stop=STOP)
        for i in range(asks):
            if len(out) >= n:
                break
            seed = sampling_seed(self.seed, i, n)
            r = self.client.chat(msgs, n=n - len(out), seed=seed, max_tokens=self.max_tokens, **sampling)
            out += [one_step(c["message"]["content"]) for c in r["choices"]][: n - len(out)]
        return out


class Judge:
    """One frozen verification agent: judge(state, step) -> ŝ in [0, 1], or NaN (abstain).

    prompts/{name}.txt, the candidate last in <step></step>, temperature 0, a fixed seed; a failed request
    raises EndpointError, not NaN. A judge mode adds a `note`, or lays out messages() and calls score()."""

    def __init__(
        self,
        client,
        name: str,
        *,
        reply: Reply = JSON,
        reasons=False,  # a reason before the score (the paper's agents give the score alone)
        weighted=False,  # ŝ = logprob_score where the server sent logprobs, else the sampled score
        max_tokens=None,
        top_logprobs=20,  # asked for at a one-token digit; 0: none
        seed=0,
        layout=role_first,
    ):
        if not (_int(top_logprobs) and 0 <= top_logprobs <= 20):
            raise ValueError(f"top_logprobs must be an integer in 0..20, got {top_logprobs!r}")
        if weighted and not (top_logprobs and reply.digit_at):  # no digit to weigh
            raise ValueError(
                f"a weighted score needs top_logprobs >= 1 and a digit, got {reply.name} {top_logprobs=}"
            )
        self.client, self.name, self.reply, self.reasons = client, name, reply, reasons
        self.weighted, self.top_logprobs, self.seed, self.layout = weighted, top_logprobs, seed, layout
        self.max_tokens, self.prompt = max_tokens or reply.max_tokens[reasons], load_prompt(name)

    def __repr__(self) -> str:
        return f"Judge({self.name!r}, {self.reply.name}, reasons={self.reasons}, weighted={self.weighted})"

    def params(self) -> tuple:
        """(the request's parameters, the follow-up's)."""
        params = dict(temperature=0.0, seed=self.seed, max_tokens=self.max_tokens)
        params.update(self.reply.params(self.reasons))
        if self.reply.digit_at is not None and self.top_logprobs:
            params.update(logprobs=True, top_logprobs=self.top_logprobs)
        tokens = self.reply.follow_up_tokens
        return params, params if tokens is None else {**params, "max_tokens": tokens}

    def task(self, step: str) -> str:
        """The task about `step` as its request holds it: in any layout, the text no other request shares."""
        return self.prompt.render("task", step=fence(step), reply=self.reply.line(self.reasons))

    def messages(self, state: verdict.State, step: str, note: str = "") -> list:
        """The request's messages about `step` after state.steps, laid out by `layout`."""
        return self.layout(self.name, state, note, step=fence(step), reply=self.reply.line(self.reasons))

    def _read(self, response: dict, step: str) -> dict:
        """The scores and reason of a reply; ValueError saying why it holds no valid score."""
        choice = response["choices"][0]
        sampled, reason = self.reply.read(choice["message"]["content"], self.reasons, step)
        p = digit_probs(choice.get("logprobs"), self.reply, step)  # [10]
        weighted, share = (_weighted(p), float(p.sum())) if p.sum() > 0 else (None, None)
        return dict(sampled=sampled, weighted=weighted, digit_share=share, reason=reason)

    def score(self, msgs: list, step: str) -> verdict.Judgement:
        """ŝ of the reply to `msgs` (see ask), with the record: judge, format, replies, sampled, weighted,
        digit_share (digit_probs(...).sum()), reason, each None where there is none (all four: abstained)."""
        read = lambda r: self._read(r, step)
        value, replies, _ = ask(self.client.chat, msgs, read, self.reply.follow_up, *self.params())
        value = value or dict(sampled=None, weighted=None, digit_share=None, reason=None)
        s = value["weighted"] if self.weighted and value["weighted"] is not None else value["sampled"]
        record = {"judge": self.name, "format": self.reply.name, "replies": len(replies), **value}
        return verdict.Judgement(math.nan if s is None else s, record)

    def judgement(self, state: verdict.State, step: str, note: str = "") -> verdict.Judgement:
        """ŝ of `step` after state.steps, with this call's record (score); verdict.step calls this."""
        return self.score(self.messages(state, step, note), step)

    def __call__(self, state: verdict.State, step: str) -> float:
        """ŝ in [0, 1], or NaN (abstain): judgement(state, step) without its record."""
        return self.judgement(state, step).score


def make_judges(client, **judge_kwargs) -> list:
    """The three judges, in the order of verdict.JUDGES and verdict.STUBBORNNESS."""
    return [Judge(client, name, **judge_kwargs) for name in verdict.JUDGES]


class Reviser:
    """Revise on reject (after ReVISE): one step rewriting the best rejected candidate, for verdict.run."""

    def __init__(self, client, judges: Sequence, max_tokens=256, seed=0, layout=role_first):
        self.client, self.judges, self.layout = client, judges, layout
        self.max_tokens, self.seed = max_tokens, seed

    def reasons(self, record: verdict.StepRecord) -> str:
        """One line per judge: its name, its raw score of the chosen candidate and the reason of that call."""
        s_hat = record.s_hat[record.selection.index]  # [m]
        calls = record.calls[record.selection.index] if record.calls else (None,) * len(s_hat)  # [m]
        lines = []
        for k, (judge, s, call) in enumerate(zip(self.judges, s_hat, calls)):
            default = verdict.JUDGES[k] if len(s_hat) == len(verdict.JUDGES) else f"judge {k + 1}"
            name = getattr(judge, "name", None) or default
            why = one_line((call or {}).get("reason") or "(no reason given)", 400)
            lines.append(f"- {name} checker, {'no score (abstained)' if s != s else f'score {s:.2f}'}: {why}")
        return "\n".join(lines)

    def __call__(self, state: verdict.State, record: verdict.StepRecord) -> str | None:
        msgs = self.layout("reviser", state, step=fence(record.chosen), reasons=fence(self.reasons(record)))
        r = self.client.chat(msgs, temperature=0.0, seed=self.seed, stop=STOP, max_tokens=self.max_tokens)
        return one_step(re.sub(r"(?i)</?step>", "", text_of(r))) or None  # an echo of the fence is no step
