"""The base reasoner and the three judges of VERDICT, over any OpenAI-compatible endpoint.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026. The base reasoner samples n candidate next steps
(temperature 0.8, top-p 0.6). Three frozen, prompt-defined agents score each candidate: the visual
(λ_V), the logical (λ_L) and the contextual (λ_C) judge. Each returns a raw score ŝ_i in [0, 1], or
NaN to abstain when two replies in a row held no valid score.

One judge call, in the order this file reads:
1. the prompt file (prompts/visual.txt, ...): literally what is sent, with {placeholders};
2. the chat messages: the images as PNG data URLs within a pixel budget, then the text;
3. one POST to {base_url}/chat/completions, with bounded retries;
4. the reply: a JSON object whose score is one digit from 0 to 9 (a JSON schema constrains it), and
   the probability-weighted score read from the digit's top_logprobs;
5. Reasoner, Judge and make_judges, which put these together for verdict.run.

With verdict.py and prompts/, this file runs live judges with numpy, requests and pillow alone.
verdict_lab/ adds what long runs need (a cache, a wall-clock deadline, other reply formats and
layouts) by passing its own client, layout or reply format to these classes.
"""

from __future__ import annotations

import base64
import io
import json
import math
import os
import random
import re
import stat
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

import verdict

# ----------------------------------------------------------------------------- 1. the prompt files

_HERE = Path(__file__).resolve().parent
# prompts/ beside this file (a checkout or a vendored copy), else where `pip install` puts it.
PROMPTS = next(
    (p for p in (_HERE / "prompts", _HERE / "verdict_lab" / "core_prompts") if p.is_dir()), _HERE
)
ROLE = ("system", "question", "instructions", "steps", "task")  # the sections of a role's prompt
JUDGE = ROLE + ("reply",)  # a judge's prompt ends with the reply it asks for


@dataclass(frozen=True)
class Prompt:
    """A prompt file: named sections of text, which may hold {placeholders}."""

    sections: tuple  # ((name, text), ...), in the file's order
    path: str

    def __getitem__(self, name: str) -> str:
        return dict(self.sections)[name]

    def render(self, section: str, **fields: str) -> str:
        """The section with its {placeholders} filled from fields (extra fields are ignored)."""
        text = self[section]
        missing = [m for m in re.findall(r"\{(\w+)\}", text) if m not in fields]
        if missing:
            raise ValueError(
                f"{self.path}: unknown placeholder {{{missing[0]}}}; known: {sorted(fields)}"
            )
        return re.sub(r"\{(\w+)\}", lambda m: fields[m.group(1)], text)


def read_prompt(path: Path, allowed: Sequence[tuple]) -> Prompt:
    """The prompt file at `path`, whose sections must be one of the `allowed` tuples, in order.

    A section starts with a line "[name]"; its text is stripped. ValueError when the file cannot be
    read or holds other sections.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ValueError(f"cannot read the prompt {path} ({e.strerror})") from None
    parts = re.split(r"(?m)^\[(\w+)\][ \t]*\n", text)
    names = tuple(parts[1::2])
    if parts[0].strip() or names not in allowed:
        expected = " or ".join("".join(f"[{n}]" for n in s) for s in allowed)
        found = "".join(f"[{n}]" for n in names) or "none"
        raise ValueError(
            f"{path} must hold the sections {expected}, in this order; it holds {found}"
        )
    return Prompt(tuple(zip(names, (p.strip() for p in parts[2::2]))), str(path))


@lru_cache(maxsize=None)
def load_prompt(name: str) -> Prompt:
    """prompts/{name}.txt: the reasoner's (ROLE's sections) or a judge's (JUDGE's)."""
    return read_prompt(PROMPTS / f"{name}.txt", (ROLE, JUDGE))


def steps_text(steps: Sequence[str]) -> str:
    """The previous steps as the prompts show them: "Step 1: ..." lines, or "(none yet)"."""
    return "\n".join(f"Step {i}: {s}" for i, s in enumerate(steps, 1)) or "(none yet)"


def fence(step: str) -> str:
    """The candidate with any <step> or </step> of its own defused, so that it cannot close the
    <step></step> fence that the judges' prompts put around it."""
    return re.sub(r"(?i)<(/?)step>", r"[\1step]", step)


# ----------------------------------------------------------------------------- 2. the messages

# VLMEvalKit (e8e78f05, vlmeval/config.py) runs Qwen2.5-VL-7B with max_pixels = 16384·28·28, so that
# is the default budget. Images are only ever scaled down: scaling a small one up is the server's.
MAX_PIXELS = 16384 * 28 * 28  # 12 845 056


def budget_size(size: tuple, max_pixels: int) -> tuple:
    """(w, h) scaled by sqrt(max_pixels / (w·h)) and rounded down, each side at least 1 pixel.

    A very long image keeps a side of 1 pixel: 5000×1 at a budget of 1000 becomes 1000×1.
    """
    w, h = size
    r = math.sqrt(max_pixels / (w * h))
    w2, h2 = max(1, int(w * r)), max(1, int(h * r))
    if w2 * h2 > max_pixels:  # the shorter side was raised to 1 pixel
        w2, h2 = (max_pixels // h2, h2) if w2 > h2 else (w2, max_pixels // w2)
    return w2, h2


def encode_image(image, max_pixels: int = MAX_PIXELS) -> str:
    """A PNG data URL of an image: a path, bytes, a PIL image, or a data URL (sent as it is).

    The image is turned upright by its EXIF orientation, converted to RGB and scaled down to at most
    max_pixels pixels. PIL's RGB conversion drops an alpha channel and clips 16-bit values;
    verdict_lab.images prepares such images first.
    """
    if not (isinstance(max_pixels, int) and not isinstance(max_pixels, bool) and max_pixels >= 1):
        raise ValueError(f"max_pixels must be an integer >= 1, got max_pixels={max_pixels!r}")
    if isinstance(image, str) and image.startswith("data:image/"):
        return image
    if isinstance(image, (str, Path, bytes, bytearray, memoryview)):
        image = decode_image(image)
    if not isinstance(image, Image.Image):
        raise ValueError(
            f"an image must be a path, bytes or a PIL.Image, got {type(image).__name__}"
        )
    image = ImageOps.exif_transpose(image).convert("RGB")
    if image.width * image.height > max_pixels:
        size = budget_size(image.size, max_pixels)
        image = image.resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0)
    png = io.BytesIO()
    image.save(png, "PNG")
    return "data:image/png;base64," + base64.b64encode(png.getvalue()).decode("ascii")


def decode_image(source) -> Image.Image:
    """The PIL image of a path or bytes, decoded now, so that a truncated file fails here.
    ValueError naming the file when it cannot be read or decoded. A path must name a regular file:
    a pipe or a device such as /dev/zero would never end."""
    name = str(source) if isinstance(source, (str, Path)) else f"<{len(source)} bytes>"
    try:
        if isinstance(source, (str, Path)):
            if not stat.S_ISREG(os.stat(source).st_mode):
                raise ValueError(f"cannot read image {name}: not a regular file")
            data = Path(source).read_bytes()
        else:
            data = bytes(source)
    except OSError as e:
        raise ValueError(f"cannot read image {name}: {e.strerror}") from None
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except UnidentifiedImageError:
        raise ValueError(f"cannot decode image {name}: not an image format Pillow reads") from None
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
        raise ValueError(f"cannot decode image {name}: {e}") from None
    return image


def chat_messages(system: str, images: Sequence, text: str, max_pixels: int = MAX_PIXELS) -> list:
    """[system message, user message]: the images first, then the text.

    The images come first so that a server's prefix cache can share them across requests. From the
    second image on, each follows a label "Image k:", so that no two images are adjacent: on
    llama-server, a cached prompt [A][B][text] makes a later [A][text] fail. With no image, the
    user's content is a plain string, which every server reads.
    """
    if not images:
        return [{"role": "system", "content": system}, {"role": "user", "content": text}]
    content = []
    for k, image in enumerate(images, 1):
        if k > 1:
            content.append({"type": "text", "text": f"Image {k}:"})
        url = encode_image(image, max_pixels)
        content.append({"type": "image_url", "image_url": {"url": url}})
    content.append({"type": "text", "text": text})
    return [{"role": "system", "content": system}, {"role": "user", "content": content}]


def role_first(
    role: str | Prompt,
    state: verdict.State,
    note: str = "",
    images=None,
    max_pixels: int = MAX_PIXELS,
    reply: str | None = None,
    **fields: str,
) -> list:
    """The messages of `role` about `state`, as its prompt file (prompts/{role}.txt) lays them out.

    The system message is the file's [system]. The user message holds the images (state's, or
    `images`), then the [question], the role's [instructions], `note` and the [steps] so far, the
    [task] with its fields, and for a judge the [reply] it asks for (or `reply` in its place). The
    system message, the images and the question are the same bytes in every request about one
    question, so a server's prefix cache computes them once.
    """
    prompt = load_prompt(role) if isinstance(role, str) else role
    parts = [
        prompt.render("question", question=state.question),
        prompt["instructions"],
        note + prompt.render("steps", steps=steps_text(state.steps)),
        prompt.render("task", **fields),
    ]
    if "reply" in dict(prompt.sections):  # a judge's: the reply it asks for, or `reply` instead
        parts.append(prompt["reply"] if reply is None else reply)
    images = state.images if images is None else images
    return chat_messages(prompt["system"], images, "\n\n".join(parts), max_pixels)


# ----------------------------------------------------------------------------- 3. the endpoint

DEFAULT_KEY_ENV = "OPENAI_API_KEY"
MAX_WAIT = 60.0  # seconds: no retry waits longer, whatever Retry-After says
MAX_MESSAGE = 300  # the most characters of a server's message that an error shows


class EndpointError(RuntimeError):
    """The endpoint failed: its HTTP `status` (None: no connection, a timeout or a bad body) and the
    server's `message`."""

    def __init__(self, url: str, status: int | None, message: str):
        self.url = url
        self.status = status
        self.message = message
        what = "no valid response" if status is None else f"HTTP {status}"
        super().__init__(f"{url}: {what}: {message}")


def api_key(name: str) -> str | None:
    """The API key in the environment variable `name`, stripped, or None when it is unset or empty.

    ValueError when `name` is not a variable's name (a key given by mistake) or the key holds a
    character that no HTTP header can carry. No message shows the key.
    """
    if not (isinstance(name, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name)):
        raise ValueError(
            "the API key's variable must be a name such as OPENAI_API_KEY, not a key (not shown)"
        )
    key = os.environ.get(name, "").strip()
    if any(ord(c) < 32 or ord(c) == 127 or ord(c) > 255 for c in key):
        raise ValueError(
            f"${name} holds a character that an HTTP header cannot carry; the key is not shown"
        )
    return key or None


def shown_url(url: str) -> str:
    """url as it may be shown or stored: its user information (user:password@) and its query
    values as ***."""
    url = re.sub(r"(?<=://)[^/@?#]*@", "***@", url)
    return re.sub(r"([?&][^=&#]*=)[^&#]*", r"\1***", url)


def shape_problem(body) -> str | None:
    """None if body is a chat completion (choices, each a message with string content), else what is
    wrong with it."""
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices:
        return "response has no choices"
    for choice in choices:
        message = choice.get("message") if isinstance(choice, dict) else None
        if not (isinstance(message, dict) and isinstance(message.get("content"), str)):
            return f"a choice has no message with string content: {json.dumps(choice)}"
    return None


def server_message(r) -> str:
    """An error body's message: OpenAI's {"error": {"message"}}, vLLM's {"message"}, or the text."""
    try:
        body = r.json()
    except (ValueError, RecursionError):  # RecursionError: JSON nested too deep to read
        return r.text.strip() or r.reason or "(empty body)"
    error = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(error, dict):
        error = error.get("message") or error.get("detail") or error
    return error if isinstance(error, str) else json.dumps(error)


class Endpoint:
    """One OpenAI-compatible endpoint: chat(messages, **params) -> the chat completion.

    Each chat is one POST to {base_url}/chat/completions. It is retried, at most `retries` times,
    only on a failure that may pass: no connection, a timeout, HTTP 429, a 5xx, or a 200 that holds
    no chat completion. Before retry k it waits backoff · 2^k · U(0.5, 1) seconds, or what the
    server's Retry-After says, never more than MAX_WAIT. Any other status fails at once, with the
    server's message. A redirect is not followed: answers from another server are not this
    endpoint's. base_url is the API's root (http://127.0.0.1:8000/v1). The API key is read from the
    environment at each request, and no message shows it.
    `session` (a requests.Session), `backoff` and `sleep` may be given, for example by verdict_lab's
    client, which passes a session with a wall-clock deadline.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = DEFAULT_KEY_ENV,
        timeout: float = 120.0,
        retries: int = 4,
        *,
        session=None,
        backoff: float = 0.5,
        sleep: Callable[[float], Any] = time.sleep,
    ):
        if not (isinstance(retries, int) and not isinstance(retries, bool) and retries >= 0):
            raise ValueError(f"retries must be an integer >= 0, got retries={retries!r}")
        if base_url.rstrip("/").endswith("/chat/completions"):  # it would POST to .../chat/...
            raise ValueError(
                f"the base URL names the API's root, without /chat/completions, e.g. "
                f"http://127.0.0.1:8000/v1; got {shown_url(base_url)!r}"
            )
        if not 0 < timeout <= threading.TIMEOUT_MAX:  # NaN fails too
            raise ValueError(f"timeout must be > 0 seconds, got timeout={timeout!r}")
        if not backoff >= 0:  # NaN fails too
            raise ValueError(f"backoff must be >= 0 seconds, got backoff={backoff!r}")
        api_key(api_key_env)  # a key that no request can carry stops here, before any call
        if session is None:
            import requests  # imported here, so that reading prompts and images imports no HTTP

            session = requests.Session()
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key_env = api_key_env
        self.timeout = timeout
        self.retries = retries
        self.session = session
        self.backoff = backoff
        self.sleep = sleep

    def chat(self, messages: list, **params) -> dict:
        """One chat completion. Parameters set to None are not sent."""
        params = {k: v for k, v in params.items() if v is not None}
        return self.post({"model": self.model, "messages": messages, **params})

    def post(self, payload: dict) -> dict:
        """The response to `payload`, after at most `retries` retries; else EndpointError with the
        last failure."""
        for attempt in range(self.retries + 1):
            body, error, told = self._attempt(payload)
            if body is not None:
                return body
            if attempt < self.retries:
                wait = (
                    self.backoff * 2**attempt * random.uniform(0.5, 1.0) if told is None else told
                )
                self.sleep(min(wait, MAX_WAIT))
        raise error

    def error(self, status: int | None, message: str) -> EndpointError:
        """An EndpointError of this endpoint: its message on one line of printable text, with the
        API key removed."""
        raw = os.environ.get(self.api_key_env, "")
        url = shown_url(f"{self.base_url}/chat/completions")
        for key in sorted({k for k in (raw, raw.strip()) if k}, key=len, reverse=True):
            url = url.replace(key, "***")  # the longer form first
            message = message.replace(key, "***")
        # One line of printable text: a server's escape sequences never reach a terminal.
        message = " ".join("".join(c for c in message if c.isprintable() or c.isspace()).split())
        if len(message) > MAX_MESSAGE:
            message = message[:MAX_MESSAGE] + "..."
        return EndpointError(url, status, message)

    def _attempt(self, payload: dict) -> tuple:
        """One request: (body, None, None), or (None, an EndpointError, Retry-After) to retry.
        A failure that retrying cannot mend raises the EndpointError at once."""
        import requests

        try:
            key = api_key(self.api_key_env)  # read at each request, never kept
        except ValueError as e:  # the variable changed since __init__ checked it
            raise self.error(None, str(e)) from None
        url = f"{self.base_url}/chat/completions"
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        try:
            r = self.session.post(
                url, json=payload, headers=headers, timeout=self.timeout, allow_redirects=False
            )
        except ValueError as e:  # requests' InvalidURL, MissingSchema, ...: retrying cannot help
            raise self.error(None, f"unusable request: {e}") from None
        except requests.Timeout:
            return None, self.error(None, f"timed out after {self.timeout:g} s"), None
        except requests.RequestException as e:  # refused, reset, a body cut short, ...
            return None, self.error(None, f"connection failed: {e}"), None
        if r.status_code == 429 or r.status_code >= 500:  # it may pass: wait as told, or back off
            told = r.headers.get("Retry-After", "")  # in seconds; the HTTP-date form is not read
            told = float(told) if re.fullmatch(r"\s*\d+(\.\d*)?\s*", told) else None
            return None, self.error(r.status_code, server_message(r)), told
        if 300 <= r.status_code < 400:  # the endpoint is elsewhere
            where = shown_url(r.headers.get("Location") or "nowhere")
            raise self.error(r.status_code, f"redirected to {where!r}; name that endpoint")
        if r.status_code >= 400:  # the request itself is wrong
            raise self.error(r.status_code, server_message(r))
        try:
            body = r.json()
        except (ValueError, RecursionError):
            return None, self.error(None, f"HTTP {r.status_code} body is not JSON: {r.text}"), None
        problem = shape_problem(body)
        said = isinstance(body, dict) and ("error" in body or body.get("object") == "error")
        if problem == "response has no choices" and said:
            problem += f" (server said: {server_message(r)})"
        return (None, self.error(None, problem), None) if problem else (body, None, None)


def text_of(response: dict, i: int = 0) -> str:
    """The content of choice i of a chat completion."""
    return response["choices"][i]["message"]["content"]


# ----------------------------------------------------------------------------- 4. the reply

# The paper's judges each return one scalar. A score of one digit is one token for Qwen and SmolLM2,
# so the top_logprobs at that token hold the probability of every score (DESIGN.md §5).
SCALE = "one digit from 0 to 9, where 0 means certainly wrong and 9 certainly right"
JSON_EXPLAIN = (
    'Reply with one JSON object of this form:\n{"reason": "<why, in one or two sentences>", '
    '"score": <' + SCALE + ">}"
)
REASON_CHARS = 200  # the longest "reason" the schema allows
_FENCED = re.compile(r"(?s)\A\s*```(?:json)?\s*(.*?)\s*```\s*\Z")  # a reply wrapped in a ``` fence


def score_schema(reasons: bool = False) -> dict:
    """The JSON schema of a judge's reply: {"score": an integer from 0 to 9}, after a "reason" of 1
    to REASON_CHARS characters when reasons are asked for.

    The score is an integer because llama.cpp's grammar bounds integers only.
    """
    props = {"score": {"type": "integer", "minimum": 0, "maximum": 9}}
    if reasons:
        props = {"reason": {"type": "string", "minLength": 1, "maxLength": REASON_CHARS}, **props}
    return {
        "type": "object",
        "properties": props,
        "required": list(props),
        "additionalProperties": False,
    }


def response_format(name: str, schema: dict) -> dict:
    """The request field that vLLM, SGLang, llama-server and OpenAI read for a JSON schema. Some
    servers skip some keywords, so replies are read as carefully as ever."""
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}


def json_score(text: str, reasons: bool = False, step: str | None = None) -> tuple:
    """(d / 9, reason) of a reply {"reason": "...", "score": d} with d in 0..9; else ValueError.

    A reply wrapped in a ```json fence is read too. The schema leaves no room to quote the candidate
    `step`, but a server may skip it: a reply that only repeats the candidate (whitespace aside) is
    an echo, not a score, even when the candidate is itself such an object.
    """
    if step is not None and text.split() == step.split():
        raise ValueError("the reply only repeats the candidate step")
    try:
        reply = json.loads(_FENCED.sub(r"\1", text))
    except (ValueError, RecursionError):
        raise ValueError("not valid JSON") from None
    if not isinstance(reply, dict) or "score" not in reply:
        raise ValueError('not a JSON object with a "score"')
    score, reason = reply["score"], reply.get("reason")
    if not (isinstance(score, int) and not isinstance(score, bool) and 0 <= score <= 9):
        shown = json.dumps(score)
        raise ValueError(
            f'"score" must be an integer from 0 to 9, got {shown[:40]}' + "..." * (len(shown) > 40)
        )
    if reasons and not isinstance(reason, str):
        raise ValueError('"reason" must be a string')
    # A lone surrogate ("\ud800" in the JSON) is no text that a file could hold.
    reason = re.sub("[\ud800-\udfff]", "\ufffd", reason.strip()) if isinstance(reason, str) else ""
    return score / 9, reason


def json_digit_at(text: str, step: str | None = None) -> int | None:
    """Where the digit of the last "score" key of a JSON reply is, or None."""
    found = list(re.finditer(r'"score"\s*:\s*', text))
    return found[-1].end() if found and re.match(r"[0-9]", text[found[-1].end() :]) else None


@dataclass(frozen=True)
class Reply:
    """A reply format: what a judge asks its reply to be, and how it reads it.

    This file has JSON; verdict_lab.formats has a text and a digit format. `reasons` asks for a
    reason before the score; `step` is the candidate, which a reply may quote.
    """

    name: str
    line: Callable[[bool], str | None]  # line(reasons): the reply asked for (None: the prompt's)
    params: Callable[[bool], dict]  # params(reasons): what the request adds
    read: Callable[[str, bool, str], tuple]  # (text, reasons, step) -> (ŝ, reason), or ValueError
    digit_at: Callable[[str, str], Any] | None  # (text, step) -> where the digit is; None: none
    follow_up: Callable[[str], str]  # follow_up(why): the message that asks once more
    max_tokens: tuple = (24, 256)  # (the score alone, with a reason)
    follow_up_tokens: int | None = None  # the follow-up's max_tokens (None: the same)


JSON = Reply(
    "json",
    line=lambda reasons: JSON_EXPLAIN if reasons else None,
    params=lambda reasons: {"response_format": response_format("judgement", score_schema(reasons))},
    read=json_score,
    digit_at=json_digit_at,
    follow_up=(
        "Your reply was not the JSON object asked for ({}). Reply with that object only."
    ).format,
)


def digit_probs(logprobs: Any, reply: Reply = JSON, step: str | None = None) -> np.ndarray:
    """[10] the probability of each digit, as sent, in the top_logprobs of the token at the reply's
    digit (reply.digit_at). A token " 7" counts for 7.

    All zeros without usable logprobs: not the OpenAI shape, a log-probability above 0, or digits
    whose probabilities sum to more than 1.
    """
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
    before = t["token"][
        : at - pos
    ].strip()  # what the digit's token holds before it (often nothing)
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
    """The probability-weighted score Σ_d p(d) · d/9, with p = digit_probs renormalised, or NaN.

    On llama-server, top_logprobs come before the grammar, so this is the model's own distribution
    over the digits, when they made the list; vLLM masks first, to the same effect.
    """
    p = digit_probs(logprobs, reply, step)  # [10]
    return _weighted(p) if p.sum() > 0 else math.nan


def _weighted(p: np.ndarray) -> float:
    return float(p @ np.arange(10) / 9 / p.sum())  # [10] @ [10] -> scalar


def ask(chat: Callable, msgs: list, read: Callable, follow_up: Callable, params: dict, retry=None):
    """read(chat(msgs, **params)); if that raises ValueError, once more, with the reply and
    follow_up(why) appended to the messages (and the parameters `retry`, if given).

    -> (the value, or None when both replies were unreadable; the responses; why they failed)
    """
    responses, errors = [], []
    for attempt in range(2):
        response = chat(msgs, **(params if attempt == 0 else retry or params))
        responses.append(response)
        try:
            return read(response), responses, errors
        except ValueError as e:
            errors.append(str(e))
            said = {"role": "assistant", "content": text_of(response)}
            told = {"role": "user", "content": follow_up(str(e))}
            msgs = msgs + [said, told]
    return None, responses, errors


# ----------------------------------------------------------------------------- 5. the roles

STOP = ["\n\n", "\nStep "]  # a candidate is one step: it ends at a blank line or a new "Step" label
SEED_STRIDE = 1000  # sampling seeds per reasoner seed (see Reasoner)
PLACEHOLDER = "<the option letter, or the value>"  # the reasoner prompt's "Final answer: ..." line
# An echo of that line, literally: "Final answer: <image 2>" or "Final answer: <A>" is an answer.
_TEMPLATE_LINE = r"(?im)^[ \t]*final answer\s*:\s*" + re.escape(PLACEHOLDER) + r"\.?[ \t]*$"


def one_step(text: str) -> str:
    """A reply's first step: up to a blank line or a new "Step k" label, without its own label.

    An echo of the prompt's template line "Final answer: <the option letter, or the value>" is no
    answer and is dropped (an echoed system prompt ends with it); any other "Final answer: <...>" is
    the model's answer.
    """
    text = re.split(r"\n[ \t]*\n|\n(?=[ \t*_#]*step[ \t]*\d)", text.strip(), flags=re.I)[0]
    text = re.sub(r"(?i)^[ \t*_#]*step[ \t]*\d+[ \t]*[:.)-][ \t*_]*", "", text)
    return re.sub(_TEMPLATE_LINE, "", text).strip()


def sampling_seed(seed: int, i: int, n: int) -> int:
    """The `seed` that reasoner seed `seed` sends with its i-th request of a step for n candidates
    (see Reasoner)."""
    return seed * SEED_STRIDE + i * n


class Reasoner:
    """The base reasoner: propose(state, n) -> n candidate next steps, for verdict.run.

    One request asks for n choices at the paper's temperature 0.8 and top-p 0.6. A server that
    returns fewer (llama-cpp-python ignores n) is asked again for the rest, at most `max_topups`
    times. Choice j of a request is sampled with its seed + j: reasoner seed k owns the seeds
    [k · SEED_STRIDE, (k + 1) · SEED_STRIDE), and its i-th request of a step sends
    sampling_seed(k, i, n), so no two requests of a step share a seed. Every step and every
    question of seed k starts from the same seed, so a rerun sends the same requests. With
    `logprobs`, it asks for each token's log-probability and returns each candidate as a Candidate
    carrying their statistics.
    """

    def __init__(
        self,
        client,
        max_tokens: int = 256,
        seed: int = 0,
        *,
        temperature: float = 0.8,
        top_p: float = 0.6,
        top_k: int | None = -1,  # vLLM serving Qwen2.5-VL applies top_k = 1 unless a request says
        max_topups: int | None = None,  # None: n
        layout: Callable = role_first,
        logprobs: bool = False,
    ):
        if not (math.isfinite(temperature) and temperature >= 0 and 0 < top_p <= 1):
            raise ValueError(
                f"need temperature >= 0 and 0 < top_p <= 1, got {temperature=}, {top_p=}"
            )
        if not (isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0):
            # A negative seed would reach into another seed's block.
            raise ValueError(f"seed must be an integer >= 0, got seed={seed!r}")
        self.client = client
        self.max_tokens = max_tokens
        self.seed = seed
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k
        self.max_topups = max_topups
        self.layout = layout
        self.logprobs = logprobs

    def __call__(self, state: verdict.State, n: int) -> list:
        if not (isinstance(n, int) and not isinstance(n, bool) and n >= 1):
            raise ValueError(f"n must be an integer >= 1, got n={n!r}")
        asks = 1 + (n if self.max_topups is None else self.max_topups)
        if asks * n > SEED_STRIDE:  # the step's seeds would run into the next reasoner seed's block
            raise ValueError(
                f"n = {n} with {asks - 1} top-ups needs {asks * n} seeds, over {SEED_STRIDE}"
            )
        msgs = self.layout("reasoner", state)
        sampling = dict(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k, stop=STOP)
        if self.logprobs:  # top_logprobs 1: llama-server sends no token logprobs with 0
            sampling.update(logprobs=True, top_logprobs=1)
        out = []
        for i in range(asks):
            if len(out) >= n:
                break
            seed = sampling_seed(self.seed, i, n)
            r = self.client.chat(
                msgs, n=n - len(out), seed=seed, max_tokens=self.max_tokens, **sampling
            )
            choices = _in_order(r["choices"])
            steps = [one_step(c["message"]["content"]) for c in choices]
            if self.logprobs:
                stats = [token_stats(c.get("logprobs")) for c in choices]
                steps = [Candidate(s, lp) for s, lp in zip(steps, stats)]
            out += steps[: n - len(out)]
        return out


class Candidate(str):
    """A reasoner's candidate step, a str, that carries its tokens' log-probability statistics.

    `logprobs` is token_stats of the choice it came from,
    {"tokens": T, "mean": ℓ̄, "min": ℓ_min}, or None when the server sent no usable logprobs.
    """

    logprobs: dict | None

    def __new__(cls, text: str, logprobs: dict | None = None):
        candidate = super().__new__(cls, text)
        candidate.logprobs = logprobs
        return candidate

    def __reduce__(self):
        return Candidate, (str(self), self.logprobs)


def token_stats(logprobs: Any) -> dict | None:
    """{"tokens": T, "mean": ℓ̄ = (1/T) Σ_t ℓ_t, "min": min_t ℓ_t} of a choice's token
    log-probabilities ℓ_t (OpenAI's shape: logprobs.content[t].logprob), over every token the server
    generated for it; None without logprobs, or when any ℓ_t is not a finite number <= 0."""
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not (isinstance(content, list) and content):
        return None
    lp = [t.get("logprob") if isinstance(t, dict) else None for t in content]
    ok = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and -math.inf < v <= 0
    if not all(ok(v) for v in lp):
        return None
    return {"tokens": len(lp), "mean": sum(lp) / len(lp), "min": min(lp)}


def _in_order(choices: list) -> list:
    """The choices by their "index" (choice j was sampled with seed + j), when every one has a
    distinct integer index; else as listed."""
    index = [c.get("index") for c in choices]
    if all(type(i) is int for i in index) and len(set(index)) == len(index):
        return [c for _, c in sorted(zip(index, choices), key=lambda pair: pair[0])]
    return choices


class Judgement(float):
    """A judge's ŝ, a float in [0, 1] or NaN (abstained), that carries its call's record.

    verdict.step reads it as the plain number it is. A caller that wants to keep what the judge
    said (its replies, the sampled and the weighted score, the reason) reads `record`.
    """

    record: dict | None

    def __new__(cls, score: float, record: dict | None = None):
        judgement = super().__new__(cls, score)
        judgement.record = record
        return judgement

    def __reduce__(self):
        return Judgement, (float(self), self.record)


class Judge:
    """One frozen verification agent: judge(state, step) -> ŝ in [0, 1], or NaN to abstain.

    It sends prompts/{name}.txt with the candidate last, between <step> and </step>, at temperature
    0 and a fixed seed, and reads the reply (see ask): a reply with no valid score is asked once
    more, and a second one makes the judge abstain. A failed request raises EndpointError, never
    NaN. With `weighted`, ŝ is the probability-weighted score where the server sent logprobs.
    """

    def __init__(
        self,
        client,
        name: str,
        *,
        reply: Reply = JSON,
        reasons: bool = False,  # a reason before the score; the paper's judges give it alone
        weighted: bool = False,
        max_tokens: int | None = None,  # None: the reply format's
        top_logprobs: int = 20,  # asked for at the one-token digit; 0: none
        seed: int = 0,
        layout: Callable = role_first,
    ):
        if not (isinstance(top_logprobs, int) and 0 <= top_logprobs <= 20):
            raise ValueError(f"top_logprobs must be an integer in 0..20, got {top_logprobs!r}")
        if weighted and not (top_logprobs and reply.digit_at):  # no digit to weigh
            raise ValueError(
                "a weighted score needs top_logprobs >= 1 and a digit, "
                f"got {reply.name} {top_logprobs=}"
            )
        self.client = client
        self.name = name
        self.reply = reply
        self.reasons = reasons
        self.weighted = weighted
        self.top_logprobs = top_logprobs
        self.seed = seed
        self.layout = layout
        self.max_tokens = max_tokens or reply.max_tokens[reasons]
        self.prompt = load_prompt(name)

    def __repr__(self) -> str:
        flags = f"reasons={self.reasons}, weighted={self.weighted}"
        return f"Judge({self.name!r}, {self.reply.name}, {flags})"

    def params(self) -> tuple:
        """(the request's parameters, the follow-up's)."""
        params = dict(temperature=0.0, seed=self.seed, max_tokens=self.max_tokens)
        params.update(self.reply.params(self.reasons))
        if self.reply.digit_at is not None and self.top_logprobs:
            params.update(logprobs=True, top_logprobs=self.top_logprobs)
        tokens = self.reply.follow_up_tokens
        return params, params if tokens is None else {**params, "max_tokens": tokens}

    def reply_line(self) -> str:
        """The reply this judge asks for: the reply format's, or its prompt file's [reply]."""
        line = self.reply.line(self.reasons)
        return self.prompt["reply"] if line is None else line

    def task(self, step: str) -> str:
        """The end of the request about `step`, the part no other request shares: the [task] and the
        reply asked for."""
        return self.prompt.render("task", step=fence(step)) + "\n\n" + self.reply_line()

    def messages(self, state: verdict.State, step: str, note: str = "") -> list:
        """The request's messages about `step` after state.steps, laid out by `layout`."""
        return self.layout(self.name, state, note, step=fence(step), reply=self.reply_line())

    def _read(self, response: dict, step: str) -> dict:
        """The scores and the reason of a reply; ValueError saying why it holds no valid score."""
        choice = response["choices"][0]
        sampled, reason = self.reply.read(choice["message"]["content"], self.reasons, step)
        p = digit_probs(choice.get("logprobs"), self.reply, step)  # [10]
        weighted, share = (_weighted(p), float(p.sum())) if p.sum() > 0 else (None, None)
        return dict(sampled=sampled, weighted=weighted, digit_share=share, reason=reason)

    def score(self, msgs: list, step: str) -> Judgement:
        """ŝ of the reply to `msgs` (see ask), with its record: the judge, the format, the number of
        replies, the sampled and the weighted score, the digits' share of the probability
        (digit_probs(...).sum()) and the reason, each None where there is none."""
        read = lambda r: self._read(r, step)
        value, replies, _ = ask(self.client.chat, msgs, read, self.reply.follow_up, *self.params())
        value = value or dict(sampled=None, weighted=None, digit_share=None, reason=None)
        s = value["sampled"]
        if self.weighted and value["weighted"] is not None:
            s = value["weighted"]
        record = {"judge": self.name, "format": self.reply.name, "replies": len(replies), **value}
        return Judgement(math.nan if s is None else s, record)

    def __call__(self, state: verdict.State, step: str, note: str = "") -> Judgement:
        """ŝ of `step` after state.steps, in [0, 1] or NaN (abstained), with this call's record."""
        return self.score(self.messages(state, step, note), step)


def make_judges(client, **judge_kwargs) -> list:
    """The three judges, in the order of verdict.JUDGES and verdict.STUBBORNNESS."""
    return [Judge(client, name, **judge_kwargs) for name in verdict.JUDGES]
