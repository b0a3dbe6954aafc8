"""The base reasoner and the three verification agents of VERDICT, over any OpenAI-compatible endpoint.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026. This module implements:

- the base reasoner, which samples n candidate next steps at T = 0.8, top-p = 0.6 (experiments);
- the three frozen agents, each defined entirely by its prompt (prompts/*.txt, after the paper's
  agent descriptions and appendix prompts): visual (λ_V), logical (λ_L) and contextual (λ_C).
  Each scores one candidate in isolation and returns a raw score ŝ_i in [0, 1], or NaN when it
  abstains (its reply carried no valid score, twice);
- what the paper leaves to an implementation: the HTTP client (bounded retries, an on-disk
  cache), image encoding, a message layout that lets vLLM reuse the image's prefix cache,
  score parsing, and a thread-pool map so the n×m judge calls of a step overlap;
- two opt-in judge modes from the related papers (JudgeMode, Grounding): SGV's self-grounded prior
  and EVPV's fact sheet with its reliability gate (see the section "judge modes").

Works with vLLM, SGLang, llama.cpp's llama-server, llama-cpp-python's server and hosted APIs.
"""
from __future__ import annotations

import base64
import copy
import hashlib
import io
import json
import math
import os
import random
import re
import sqlite3
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import requests
from PIL import Image, ImageOps

import verdict

PROMPTS = Path(__file__).resolve().with_name("prompts")
MAX_PIXELS = 1280 * 28 * 28      # Qwen2.5-VL's default budget: 1280 visual tokens of 28×28 pixels
CACHE_FORMAT = "verdict-cache/1"
MAX_WAIT = 60.0                  # seconds; no single retry waits longer, whatever Retry-After says
STOP = ["\n\n", "\nStep "]       # one candidate = one step: it ends at a blank line or a new "Step" label


# ----------------------------------------------------------------------------- HTTP client

class EndpointError(RuntimeError):
    """The endpoint failed. `status` is the HTTP status, or None for a connection error, a timeout
    or a malformed body; `message` is the server's own message, with the API key redacted."""

    def __init__(self, url: str, status: int | None, message: str):
        self.url, self.status, self.message = url, status, message
        super().__init__(f"{url}: {f'HTTP {status}' if status is not None else 'no valid response'}: {message}")


def _one_line(text: Any, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + "..."


def _server_message(r: requests.Response) -> str:
    """The message of an error body: OpenAI's {"error": {"message": ...}}, vLLM's {"message": ...}, or text."""
    try:
        body = r.json()
    except ValueError:
        return _one_line(r.text) or r.reason or "(empty body)"
    err = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(err, dict):
        err = err.get("message") or err.get("detail") or err
    return _one_line(err if isinstance(err, str) else json.dumps(err))


def _retry_after(r: requests.Response) -> float | None:
    """Retry-After in seconds (the HTTP-date form is not honoured), capped at MAX_WAIT."""
    try:
        wait = float(r.headers.get("Retry-After", ""))
    except ValueError:
        return None
    return min(wait, MAX_WAIT) if wait >= 0 else None


def cache_key(payload: dict) -> str:
    """sha256 over the canonical JSON of a request (model, messages, sampling parameters, n, seed),
    with every data URL (image) replaced by its own sha256."""
    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items()}
        if isinstance(x, list):
            return [strip(v) for v in x]
        if isinstance(x, str) and x.startswith("data:"):
            return "sha256:" + hashlib.sha256(x.encode()).hexdigest()
        return x
    canon = json.dumps(strip(payload), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canon.encode()).hexdigest()


class Cache:
    """On-disk response cache (stdlib sqlite3): a re-run of the same requests is free and a crashed
    run resumes. Each response is committed in its own transaction; one Cache may serve many
    threads. A corrupt file, or one of another format, raises ValueError naming the file."""

    def __init__(self, path):
        self.path, self.hits, self.misses = Path(path), 0, 0
        self._lock = threading.Lock()
        self._db = None
        try:
            self._db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30.0)
            tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if not tables:  # a new file
                with self._db:
                    self._db.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT)")
                    self._db.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, response TEXT NOT NULL)")
                    self._db.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?)", (CACHE_FORMAT,))
            row = self._db.execute("SELECT value FROM meta WHERE name='format'").fetchone() if "meta" in tables or not tables else None
        except sqlite3.DatabaseError as e:
            self.close()
            raise ValueError(f"{self.path} is not a readable verdict cache ({e}); delete it or choose another file") from None
        if row is None or row[0] != CACHE_FORMAT:  # never read answers written under other rules
            self.close()
            raise ValueError(f"{self.path} holds format {row[0] if row else 'unknown'!r}, expected {CACHE_FORMAT!r}; "
                             "delete it or choose another file")

    def get(self, key: str) -> dict | None:
        with self._lock:
            row = self._sql("SELECT response FROM responses WHERE key=?", (key,)).fetchone()
            self.hits, self.misses = self.hits + (row is not None), self.misses + (row is None)
        if row is None:
            return None
        try:
            return json.loads(row[0])
        except ValueError:
            raise ValueError(f"{self.path}: entry {key[:16]} is not valid JSON; the cache is corrupt") from None

    def put(self, key: str, response: dict) -> None:
        with self._lock, self._db:  # one transaction: the entry is written whole or not at all
            self._sql("INSERT OR REPLACE INTO responses VALUES (?, ?)", (key, json.dumps(response)))

    def _sql(self, query: str, args: tuple):
        try:
            return self._db.execute(query, args)
        except sqlite3.DatabaseError as e:
            raise ValueError(f"{self.path} is not a readable verdict cache ({e})") from None

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


class Client:
    """POST {base_url}/chat/completions on a requests.Session, with bounded retries.

    Retries (at most `retries`, waiting backoff·2^attempt·U(0.5, 1) or Retry-After) happen only on
    connection errors, timeouts, 429 and 5xx; any other 4xx raises EndpointError at once. The API
    key is read from os.environ[api_key_env] at each request and never kept, printed or logged.
    """

    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY", timeout: float = 120.0,
                 retries: int = 4, cache: Cache | None = None, backoff: float = 0.5, sleep: Callable = time.sleep):
        if not (isinstance(retries, int) and retries >= 0):
            raise ValueError(f"retries must be an integer >= 0, got retries={retries!r}")
        if not (timeout > 0 and backoff >= 0):
            raise ValueError(f"need timeout > 0 and backoff >= 0, got timeout={timeout!r}, backoff={backoff!r}")
        self.base_url, self.model, self.api_key_env = base_url.rstrip("/"), model, api_key_env
        self.timeout, self.retries, self.cache, self.backoff, self._sleep = timeout, retries, cache, backoff, sleep
        self.session = requests.Session()
        self.session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=64))  # one connection per thread
        self.session.mount("https://", requests.adapters.HTTPAdapter(pool_maxsize=64))
        self._lock = threading.Lock()
        self._usage = dict(requests=0, calls=0, cache_hits=0, prompt_tokens=0, completion_tokens=0)

    def __repr__(self) -> str:
        return f"Client(base_url={self.base_url!r}, model={self.model!r})"

    @property
    def usage(self) -> dict:
        """requests (HTTP attempts), calls (chat calls), cache_hits, and the tokens the server reported."""
        with self._lock:
            return dict(self._usage)

    def _count(self, **inc) -> None:
        with self._lock:
            for k, v in inc.items():
                self._usage[k] += v

    def _redact(self, text: str) -> str:
        key = os.environ.get(self.api_key_env)
        return text.replace(key, "***") if key else text

    def chat(self, messages: list, **params) -> dict:
        """The response JSON of one chat completion; parameters set to None are not sent."""
        payload = {"model": self.model, "messages": messages, **{k: v for k, v in params.items() if v is not None}}
        self._count(calls=1)
        key = cache_key(payload) if self.cache is not None else None
        if key is not None and (hit := self.cache.get(key)) is not None:
            self._count(cache_hits=1)
            return hit
        response = self._post(payload)
        if key is not None:
            self.cache.put(key, response)
        return response

    def _post(self, payload: dict) -> dict:
        url = f"{self.base_url}/chat/completions"
        key = os.environ.get(self.api_key_env)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        for attempt in range(self.retries + 1):
            wait = self.backoff * 2 ** attempt * random.uniform(0.5, 1.0)
            self._count(requests=1)
            try:
                r = self.session.post(url, json=payload, headers=headers, timeout=self.timeout)
            except requests.Timeout:
                error = EndpointError(url, None, f"timed out after {self.timeout} s")
            except requests.RequestException as e:  # connection refused, reset, DNS, ...
                error = EndpointError(url, None, self._redact(f"connection failed: {_one_line(e)}"))
            else:
                if r.status_code == 429 or r.status_code >= 500:  # transient: wait as told, else back off
                    error = EndpointError(url, r.status_code, self._redact(_server_message(r)))
                    told = _retry_after(r)
                    wait = wait if told is None else told
                elif r.status_code >= 400:  # the request itself is wrong: retrying cannot help
                    raise EndpointError(url, r.status_code, self._redact(_server_message(r)))
                else:
                    return self._validate(url, r)
            if attempt < self.retries:
                self._sleep(min(wait, MAX_WAIT))
        raise error

    def _validate(self, url: str, r: requests.Response) -> dict:
        """The body must be JSON with non-empty "choices", each holding a message with string content."""
        try:
            body = r.json()
        except ValueError:
            raise EndpointError(url, None, f"HTTP {r.status_code} body is not JSON: {_one_line(r.text, 120)!r}") from None
        choices = body.get("choices") if isinstance(body, dict) else None
        if not isinstance(choices, list) or not choices:
            said = f" (server said: {self._redact(_server_message(r))})" if isinstance(body, dict) and "error" in body else ""
            raise EndpointError(url, None, f"response has no choices{said}")
        for c in choices:
            if not (isinstance(c, dict) and isinstance(c.get("message"), dict) and isinstance(c["message"].get("content"), str)):
                raise EndpointError(url, None, f"a choice has no message with string content: {_one_line(c, 120)}")
        usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
        self._count(**{k: usage[k] for k in ("prompt_tokens", "completion_tokens") if isinstance(usage.get(k), int)})
        return body


# ----------------------------------------------------------------------------- images and messages

_encoded: OrderedDict = OrderedDict()  # (fingerprint, max_pixels) -> data URL, least recently used first
_encoded_lock = threading.Lock()


def _fingerprint(image) -> tuple:
    """What identifies an image's content cheaply: path + mtime + size, or a hash of the bytes/pixels."""
    if isinstance(image, (str, Path)):
        try:
            st = os.stat(image)
        except OSError as e:
            raise ValueError(f"cannot read image {image}: {e.strerror}") from None
        return ("path", str(Path(image).resolve()), st.st_mtime_ns, st.st_size)
    if isinstance(image, (bytes, bytearray, memoryview)):
        return ("bytes", hashlib.sha256(image).hexdigest())
    if isinstance(image, Image.Image):
        h = hashlib.sha256(f"{image.mode}{image.size}{image.getexif().get(0x0112)}".encode())
        h.update(image.tobytes())
        return ("pil", h.hexdigest())
    raise ValueError(f"an image must be a path, bytes or a PIL.Image, got {type(image).__name__}")


def _load(image) -> Image.Image:
    if isinstance(image, Image.Image):
        return image
    name = str(image) if isinstance(image, (str, Path)) else f"<{len(image)} bytes>"
    try:
        data = Path(image).read_bytes() if isinstance(image, (str, Path)) else bytes(image)
        img = Image.open(io.BytesIO(data))
        img.load()  # decode now, so a truncated file fails here
        return img
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
        raise ValueError(f"cannot decode image {name}: {e}") from None


def _to_rgb(img: Image.Image) -> Image.Image:
    """RGB from any mode: 16-bit greyscale scaled from 0..65535, I/F stretched min..max, alpha on white."""
    img = ImageOps.exif_transpose(img)
    if img.mode.startswith("I;16") or img.mode in ("I", "F"):  # convert("RGB") would clip these to white
        a = np.asarray(img, dtype=np.float64)                                      # [h, w]
        lo, hi = (0.0, 65535.0) if img.mode.startswith("I;16") else (a.min(), a.max())
        img = Image.fromarray(np.round((a - lo) * (255.0 / max(hi - lo, 1e-12))).clip(0, 255).astype(np.uint8))
    if img.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in img.info:
        rgba = img.convert("RGBA")
        img = Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba)
    return img.convert("RGB")


def encode_image(image, max_pixels: int = MAX_PIXELS) -> str:
    """A "data:image/png;base64,..." URL for a path, bytes or PIL.Image.

    EXIF orientation applied, any mode converted to RGB (alpha composited on white), downscaled to
    at most `max_pixels` pixels keeping the aspect ratio, encoded as PNG (lossless: the model sees
    the pixels it was given). Memoised, so the n×m judge calls of a step encode once.
    """
    if not (isinstance(max_pixels, int) and max_pixels >= 1):
        raise ValueError(f"max_pixels must be an integer >= 1, got max_pixels={max_pixels!r}")
    key = (_fingerprint(image), max_pixels)
    with _encoded_lock:
        if key in _encoded:
            _encoded.move_to_end(key)
            return _encoded[key]
    img = _to_rgb(_load(image))
    w, h = img.size
    if w * h > max_pixels:
        r = math.sqrt(max_pixels / (w * h))
        w2 = max(1, int(w * r))
        img = img.resize((w2, max(1, min(int(h * r), max_pixels // w2))), Image.Resampling.LANCZOS, reducing_gap=3.0)
    buf = io.BytesIO()
    img.save(buf, "PNG")
    url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
    with _encoded_lock:
        _encoded[key] = url
        while len(_encoded) > 32:
            _encoded.popitem(last=False)
    return url


def messages(system: str, images: Sequence, text: str, max_pixels: int = MAX_PIXELS) -> list:
    """[system, user]: the system message first (fixed per role), then the images, then the text.

    Callers put the fixed part of the text (question, previous steps) before the varying part
    (the candidate), so a server's prefix cache reuses the image. With no image, the user content
    is a plain string: some llama.cpp chat formats drop list-valued content.
    """
    if not images:
        return [{"role": "system", "content": system}, {"role": "user", "content": text}]
    parts = [{"type": "image_url", "image_url": {"url": encode_image(im, max_pixels)}} for im in images]
    return [{"role": "system", "content": system}, {"role": "user", "content": parts + [{"type": "text", "text": text}]}]


# ----------------------------------------------------------------------------- prompts

@dataclass(frozen=True)
class Prompt:
    """A prompt file: a [system] section (sent unchanged) and a [user] template with {placeholders}."""
    system: str
    user: str
    path: str

    def render(self, **fields: str) -> str:
        def fill(m):
            if m.group(1) not in fields:
                raise ValueError(f"{self.path}: unknown placeholder {{{m.group(1)}}}; known: {sorted(fields)}")
            return fields[m.group(1)]
        return re.sub(r"\{(\w+)\}", fill, self.user)  # other braces in the file are left alone


@lru_cache(maxsize=None)
def load_prompt(name: str) -> Prompt:
    path = PROMPTS / f"{name}.txt"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ValueError(f"no prompt {name!r}: cannot read {path} ({e.strerror})") from None
    parts = re.split(r"(?m)^\[(system|user)\][ \t]*\n", text)
    sections = dict(zip(parts[1::2], (p.strip() for p in parts[2::2])))
    if parts[0].strip() or len(parts) != 5 or set(sections) != {"system", "user"}:
        raise ValueError(f"{path} must hold a [system] section and then a [user] section")
    return Prompt(sections["system"], sections["user"], str(path))


def _steps(steps: Sequence[str]) -> str:
    return "\n".join(f"Step {i}: {s}" for i, s in enumerate(steps, 1)) or "(none yet)"


def _fence(step: str) -> str:
    """The candidate with any <step> or </step> of its own defused, so it cannot close its fence."""
    return re.sub(r"(?i)<(/?)step>", r"[\1step]", step)


def one_step(text: str) -> str:
    """The first step of a reply: up to a blank line or a new "Step k" label, without its own label."""
    text = re.split(r"\n[ \t]*\n|\n(?=[ \t*_#]*step[ \t]*\d)", text.strip(), flags=re.I)[0]
    return re.sub(r"(?i)^[ \t*_#]*step[ \t]*\d+[ \t]*[:.)-][ \t*_]*", "", text).strip()


# ----------------------------------------------------------------------------- reasoner

class Reasoner:
    """The base reasoner: propose(state, n) -> n candidate next steps, for verdict.run.

    One request asks for n choices at config.temperature and config.top_p, with top_k sent
    explicitly (vLLM serving Qwen2.5-VL otherwise applies the model's top_k = 1 and every candidate
    comes out identical; top_k=None omits it for hosted APIs that reject it). Each candidate is one
    step: generation stops at STOP and `one_step` trims the rest. If the server returns fewer
    choices (llama-cpp-python ignores n), at most `max_topups` further requests with seeds
    seed+1, seed+2, ... ask for the rest. Candidates are kept as the model wrote them, even empty.
    The same state and seed give byte-identical requests (so a Cache shares them across runs).
    The prompt asks for "Final answer: <letter or value>", which verdict.FINAL_ANSWER recognises.
    """

    def __init__(self, client: Client, config: verdict.Config = verdict.Config(), top_k: int | None = -1,
                 max_tokens: int = 256, seed: int = 0, max_topups: int | None = None):
        self.client, self.config, self.top_k, self.max_tokens, self.seed = client, config, top_k, max_tokens, seed
        self.max_topups = config.n if max_topups is None else max_topups
        self.prompt = load_prompt("reasoner")

    def __call__(self, state: verdict.State, n: int) -> list:
        if not (isinstance(n, int) and n >= 1):
            raise ValueError(f"n must be an integer >= 1, got n={n!r}")
        text = self.prompt.render(question=state.question, steps=_steps(state.steps))
        msgs = messages(self.prompt.system, state.images, text)
        candidates: list = []
        for i in range(self.max_topups + 1):
            if len(candidates) >= n:
                break
            r = self.client.chat(msgs, temperature=self.config.temperature, top_p=self.config.top_p, top_k=self.top_k,
                                 n=n - len(candidates), seed=self.seed + i, stop=STOP, max_tokens=self.max_tokens)
            candidates += [one_step(c["message"]["content"]) for c in r["choices"]][: n - len(candidates)]
        return candidates

    propose = __call__


# ----------------------------------------------------------------------------- judges

SCALE = {  # the answer scales parse_score reads
    "unit": "a number from 0 to 1, where 0 means certainly wrong and 1 certainly right",
    "digit": "one digit from 0 to 9, where 0 means certainly wrong and 9 certainly right",
}
EXPLAIN = "Explain your judgement in at most three sentences, then end your reply with this one line:\nScore: <{scale}>"
SCORE_ONLY = "Reply with this one line only, without explanation:\nScore: <{scale}>"
FOLLOW_UP = "Your reply did not end with a valid score line. Reply with this one line only:\nScore: <{scale}>"

_SCORE_LINE = re.compile(r"(?im)^[ \t>*_#`-]*(?:(?:final|overall)[ \t]+)?score[ \t*_`]*[:=][ \t]*(.*)$")
_QUOTED_STEP = re.compile(r"(?is)<step>.*?(?:</step>|\Z)")
_UNIT = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(%|/(\d+(?:\.\d*)?))?")


def parse_score(text: str, scale: str = "unit") -> float:
    """The judge's score from its reply, or NaN when there is no valid one (never 0, 0.5 or a clamp).

    The LAST score line decides: a line starting "Score:" (or "Score =", "Final score:", markdown
    decorations such as **Score:** allowed), its first word being the value. If that value is
    invalid, the result is NaN even when an earlier line held a valid one. Text the judge quotes
    between <step> and </step> is the candidate's, and is ignored.
    unit  : 0.85, .85, 1, 0, "85%" (= 0.85) and "8/10" (= 0.8) are read; anything outside [0, 1]
            (1.2, -0.1, 85, 150%), words, "0,8" or an empty value is NaN.
    digit : a single digit d in 0..9 gives d / 9 (the one-token scale of Judge(logprobs=True)).
    """
    if scale not in SCALE:
        raise ValueError(f"unknown scale {scale!r}; expected one of {', '.join(SCALE)}")
    lines = _SCORE_LINE.findall(_QUOTED_STEP.sub("", text)) if isinstance(text, str) else []
    if not lines:
        return math.nan
    words = re.sub(r"[ \t]*/[ \t]*", "/", lines[-1]).strip(" \t*_`(").split()
    value = words[0].rstrip(".,;:!)*_`") if words else ""
    if scale == "digit":
        return int(value) / 9 if re.fullmatch(r"\d", value) else math.nan
    m = _UNIT.fullmatch(value)
    if not m:
        return math.nan
    s = float(m.group(1))
    if m.group(2) == "%":
        s /= 100
    elif m.group(3) is not None:
        s = s / float(m.group(3)) if float(m.group(3)) > 0 else math.nan
    return s if 0 <= s <= 1 else math.nan  # out of range is NaN, never clamped


def logprob_score(logprobs: Any) -> float:
    """Σ_d p(d)·d/9 over the digits 0..9 among the top_logprobs of the score token (the first token
    of the value on the last score line), with p renormalised over those digits; NaN when the
    server returned no usable logprobs. DESIGN.md §5: digits are single tokens for Qwen."""
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list) or not all(isinstance(t, dict) and isinstance(t.get("token"), str) for t in content):
        return math.nan
    text = "".join(t["token"] for t in content)
    lines = list(_SCORE_LINE.finditer(text))
    if not lines:
        return math.nan
    at = lines[-1].start(1) + len(lines[-1].group(1)) - len(lines[-1].group(1).lstrip(" \t*_`("))
    pos = 0
    for t in content:
        if pos + len(t["token"]) > at:
            break
        pos += len(t["token"])
    p = np.zeros(10)                                                  # [10] probability of each digit
    for alt in t.get("top_logprobs") or []:
        d = str(alt.get("token", "")).strip() if isinstance(alt, dict) else ""
        if re.fullmatch(r"\d", d) and isinstance(alt.get("logprob"), (int, float)):
            p[int(d)] += math.exp(alt["logprob"])
    return float(p @ np.arange(10) / 9 / p.sum()) if p.sum() > 0 else math.nan


class Judge:
    """One frozen verification agent: judge(state, step) -> ŝ in [0, 1], or NaN (abstain).

    The prompt is prompts/{name}.txt; the candidate sits between <step> and </step>, last, after
    the images, question and previous steps. Temperature 0: the judge is deterministic, as a frozen
    verifier should be. If the reply holds no valid score, the judge asks once more (its own reply,
    then FOLLOW_UP) and abstains with NaN if that fails too. score_only asks for the score line
    alone (max_tokens 16). logprobs=True asks for one digit 0..9 and returns the probability-
    weighted digit / 9 from top_logprobs, or the parsed digit when the server sends none.
    `counts` tallies calls, replies, parsed replies, retries and abstentions. An endpoint that
    fails raises EndpointError: a failed request is an error, not an abstention.
    `grounding` (a Grounding, see "judge modes") adds the per-question evidence of the SGV and EVPV
    modes at the prompt's {evidence}, and gates the visual judge's score; None is plain VERDICT.
    """

    def __init__(self, client: Client, name: str, max_tokens: int | None = None, score_only: bool = False,
                 logprobs: bool = False, seed: int = 0, top_logprobs: int = 10, grounding: Grounding | None = None):
        self.client, self.name, self.score_only, self.logprobs, self.seed = client, name, score_only, logprobs, seed
        self.prompt, self.grounding = load_prompt(name), grounding
        if grounding is not None and grounding.mode.active and "{evidence}" not in self.prompt.user:
            raise ValueError(f"{self.prompt.path} has no {{evidence}} placeholder, so judge mode "
                             f"{grounding.mode.name!r} could not show the judge its evidence")
        self.max_tokens = max_tokens or (16 if score_only else 256)
        self.scale = "digit" if logprobs else "unit"
        self.params = dict(temperature=0.0, seed=seed, max_tokens=self.max_tokens)
        if logprobs:
            self.params.update(logprobs=True, top_logprobs=top_logprobs)
        self._lock = threading.Lock()
        self._counts = dict(calls=0, replies=0, parsed=0, retries=0, abstentions=0)

    def __repr__(self) -> str:
        return f"Judge({self.name!r}, score_only={self.score_only}, logprobs={self.logprobs})"

    @property
    def counts(self) -> dict:
        with self._lock:
            return dict(self._counts)

    def _score(self, response: dict) -> float:
        choice = response["choices"][0]
        s = parse_score(choice["message"]["content"], self.scale)
        if self.logprobs and not math.isnan(s):
            weighted = logprob_score(choice.get("logprobs"))
            return s if math.isnan(weighted) else weighted
        return s

    def __call__(self, state: verdict.State, step: str) -> float:
        reply = (SCORE_ONLY if self.score_only else EXPLAIN).format(scale=SCALE[self.scale])
        evidence = self.grounding.evidence(self.name, state) if self.grounding is not None else ""
        text = self.prompt.render(question=state.question, evidence=evidence, steps=_steps(state.steps),
                                  step=_fence(step), reply=reply)
        msgs = messages(self.prompt.system, state.images, text)
        first = self.client.chat(msgs, **self.params)
        s, tries = self._score(first), 1
        if math.isnan(s):  # ask once more, then abstain
            msgs = msgs + [{"role": "assistant", "content": first["choices"][0]["message"]["content"]},
                           {"role": "user", "content": FOLLOW_UP.format(scale=SCALE[self.scale])}]
            s, tries = self._score(self.client.chat(msgs, **{**self.params, "max_tokens": 16})), 2
        with self._lock:
            c = self._counts
            c["calls"], c["replies"], c["retries"] = c["calls"] + 1, c["replies"] + tries, c["retries"] + tries - 1
            c["parsed"], c["abstentions"] = c["parsed"] + (not math.isnan(s)), c["abstentions"] + math.isnan(s)
        return s if self.grounding is None else self.grounding.gated(self.name, state, step, s)


def make_judges(client: Client, grounding: Grounding | None = None, **judge_kwargs) -> list:
    """The three judges in the order of verdict.JUDGES and verdict.STUBBORNNESS, sharing `grounding`
    (a judge mode's per-question evidence; None for plain VERDICT)."""
    return [Judge(client, name, grounding=grounding, **judge_kwargs) for name in verdict.JUDGES]


def thread_map(k: int) -> Callable:
    """A map_fn for verdict.run: f over items on at most k threads, results in input order."""
    if not (isinstance(k, int) and k >= 1):
        raise ValueError(f"k must be an integer >= 1, got k={k!r}")
    if k == 1:
        return lambda f, items: list(map(f, items))

    def map_fn(f, items):
        items = list(items)
        with ThreadPoolExecutor(max_workers=max(1, min(k, len(items)))) as pool:
            return list(pool.map(f, items))
    return map_fn


# ----------------------------------------------------------------------------- judge modes: SGV prior, EVPV premises
#
# Two opt-in, training-free modes from the related papers (DESIGN.md, seeds/). They change what the
# judges see, and verdict.py not at all.
#
# prior     Self-Grounded Verification (SGV): "Let's Think in Two Steps: Mitigating Agreement Bias in
#           MLLMs with Self-Grounded Verification", ICLR 2026, method steps 1 and 2. One call per
#           question, with the question and images only, writes the prior k̂_q: what a correct solution
#           must establish. Every judge reads it as reference expectations, after the question and
#           before the previous steps and the candidate, so the prefix cache still holds.
# premises  Explicit Visual Premise Verification (EVPV): "Grounding the Score: Explicit Visual Premise
#           Verification for Reliable Vision-Language Process Reward Models", methodology 2 to 4. One
#           call per question extracts a JSON fact sheet C (objects, numbers, relations, structure,
#           uncertain facts marked); the visual judge reads it as independent evidence. A malformed
#           sheet is asked for once more; then the mode degrades to no fact sheet, and the record says so.
# gate      EVPV's reliability gate (needs premises). One text-only call per candidate that has a visual
#           score labels each visual claim of the step against C. r = (Π_j p_j)^(1/J), the geometric mean
#           of the claims' agreement p_j (AGREEMENT), so one contradicted premise gives r = 0. Then
#           ŝ_V ← 0.5 + α(r)·(ŝ_V − 0.5) inside the visual judge, before the consensus.
#
# Extra calls per question: prior 1; premises 1 (2 if the first sheet is malformed); gate 1 per candidate
# whose ŝ_V is a number (none once the sheet degraded). All are at temperature 0 with a fixed seed, so
# the on-disk Cache serves them again on a re-run.

MODES = ("prior", "premises", "gate")
FACT_KINDS = ("objects", "numbers", "relations", "structure")
AGREEMENT = {"supported": 1.0, "uncertain": 0.5, "contradicted": 0.0}  # p_j of a claim's label; a claim the
                                                                        # sheet lacks or doubts is a coin flip
GATE_K, GATE_R0 = 10.0, 0.5  # α's steepness and midpoint: α(0) = 0, α(0.5) = 0.5, α(0.8) = 0.959, α(1) = 1
REFERENCE = ("Reference expectations, written from the question and the image alone before any step was seen "
             "(what a correct solution must establish; a guide, not proof):\n{prior}\n\n")
FACT_SHEET = ("Fact sheet, extracted from the image before any step was seen (independent evidence; "
              "facts marked uncertain may be wrong):\n{facts}\n\n")
JSON_FOLLOW_UP = "Your reply was not a valid fact sheet ({error}). Reply with the JSON object only."


@dataclass(frozen=True)
class JudgeMode:
    """Which modes are on. JudgeMode() is plain VERDICT. `name` is "plain", "prior", "premises+gate", ..."""
    prior: bool = False
    premises: bool = False
    gate: bool = False

    def __post_init__(self):
        if self.gate and not self.premises:  # the gate checks steps against the fact sheet
            raise ValueError("the gate needs the premises mode (its fact sheet), got gate=True, premises=False")

    @property
    def active(self) -> bool:
        return self.prior or self.premises

    @property
    def name(self) -> str:
        return "+".join(k for k in MODES if getattr(self, k)) or "plain"

    @classmethod
    def parse(cls, text: str) -> "JudgeMode":
        """"prior,premises,gate", "prior+premises" (any order); "" or "plain" is plain VERDICT."""
        words = [w.strip() for w in re.split(r"[,+]", text or "") if w.strip() not in ("", "plain")]
        bad = [w for w in words if w not in MODES]
        if bad or len(set(words)) != len(words):
            raise ValueError(f"judge mode {text!r}: expected distinct words from {', '.join(MODES)}")
        return cls(**{w: True for w in words})


def reliability(p) -> float:
    """r = (Π_j p_j)^(1/J), the geometric mean of the per-claim agreement p_j in [0, 1] (EVPV,
    methodology 3): one contradicted claim (p_j = 0) gives r = 0. No claim (no visual premise): r = 1."""
    p = np.asarray(p, dtype=float)                              # [J]
    if p.ndim != 1 or not np.all((p >= 0) & (p <= 1)):  # NaN or out of range: a bug in the caller
        raise ValueError(f"agreements must be a list of numbers in [0, 1], got {p.tolist()}")
    with np.errstate(divide="ignore"):                          # log 0 = −inf, and exp(−inf) = 0
        return float(np.exp(np.log(p).mean())) if p.size else 1.0  # [J] -> scalar


def alpha(r: float, k: float = GATE_K, r0: float = GATE_R0) -> float:
    """α(r) = (σ(k(r − r0)) − σ(−k·r0)) / (σ(k(1 − r0)) − σ(−k·r0)), σ the logistic function: EVPV's
    sigmoid gate, rescaled so that α(0) = 0 (the score becomes neutral) and α(1) = 1 (unchanged)."""
    if not 0 <= r <= 1:  # also rejects NaN
        raise ValueError(f"r must lie in [0, 1], got r={r!r}")
    if not (0 < k < math.inf and 0 <= r0 <= 1):
        raise ValueError(f"need 0 < k < inf and 0 <= r0 <= 1, got k={k!r}, r0={r0!r}")
    sigma = lambda x: 1.0 / (1.0 + math.exp(-x))
    lo, hi = sigma(-k * r0), sigma(k * (1 - r0))
    return (sigma(k * (r - r0)) - lo) / (hi - lo)


def gate(s_v: float, r: float) -> float:
    """ŝ_V ← 0.5 + α(r)·(ŝ_V − 0.5): pulled toward neutral as the premises' reliability r falls (EVPV,
    methodology 4, with 0.5 as the neutral score of a [0, 1] judge). NaN (an abstention) stays NaN."""
    if math.isnan(s_v):
        return s_v
    if not 0 <= s_v <= 1:  # out of range is a bug in the judge, never clamped
        raise ValueError(f"s_v must lie in [0, 1] or be NaN, got s_v={s_v!r}")
    return 0.5 + alpha(r) * (s_v - 0.5)


def _json_object(text: str) -> dict:
    """The JSON object in a reply (prose or a ``` fence around it allowed); ValueError says why not."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise ValueError("no JSON object in the reply")
    try:
        return json.loads(text[start:end + 1])
    except ValueError as e:
        raise ValueError(f"invalid JSON: {e}") from None


def parse_fact_sheet(text: str) -> dict:
    """{kind: [{"fact": str, "uncertain": bool}, ...]} for each kind in FACT_KINDS, from a reply.

    Each kind must be a list (maybe empty); each entry needs a non-empty "fact" string, and its
    "uncertain", when present, must be true or false (absent means false). Other keys are dropped.
    ValueError, naming what is wrong, for anything else, or for a sheet without a single fact.
    """
    obj, sheet = _json_object(text), {}
    for kind in FACT_KINDS:
        entries = obj.get(kind)
        if not isinstance(entries, list):
            raise ValueError(f"{kind!r} must be a list, got {_one_line(json.dumps(entries), 60)}")
        for e in entries:
            if not (isinstance(e, dict) and isinstance(e.get("fact"), str) and e["fact"].strip()
                    and isinstance(e.get("uncertain", False), bool)):
                raise ValueError(f"a {kind} entry needs a non-empty \"fact\" and a true/false \"uncertain\", "
                                 f"got {_one_line(json.dumps(e), 80)}")
        sheet[kind] = [{"fact": e["fact"].strip(), "uncertain": e.get("uncertain", False)} for e in entries]
    if not any(sheet.values()):  # valid, but no evidence at all
        raise ValueError("the fact sheet holds no fact")
    return sheet


def fact_lines(sheet: dict) -> str:
    """The fact sheet as the judges read it: one "- kind: fact" line each, "(uncertain)" marked."""
    return "\n".join(f"- {kind}: {e['fact']}" + (" (uncertain)" if e["uncertain"] else "")
                     for kind in FACT_KINDS for e in sheet[kind])


def parse_claims(text: str) -> list:
    """[{"claim": str, "label": a key of AGREEMENT}, ...] from a premise-check reply
    {"claims": [...]}; [] when the step makes no visual claim. ValueError names what is malformed."""
    claims = _json_object(text).get("claims")
    if not isinstance(claims, list):
        raise ValueError(f"\"claims\" must be a list, got {_one_line(json.dumps(claims), 60)}")
    label = lambda c: c.get("label").strip().lower() if isinstance(c.get("label"), str) else None
    for c in claims:
        if not (isinstance(c, dict) and isinstance(c.get("claim"), str) and label(c) in AGREEMENT):
            raise ValueError(f"a claim needs a \"claim\" string and a \"label\" in {', '.join(AGREEMENT)}, "
                             f"got {_one_line(json.dumps(c), 80)}")
    return [{"claim": c["claim"].strip(), "label": label(c)} for c in claims]


class Grounding:
    """A JudgeMode's per-question evidence, shared by one set of judges (make_judges(grounding=...)).

    The prior and the fact sheet are made once per (model, question, images) and kept in memory;
    their requests are identical across runs (temperature 0, fixed seed), so an on-disk Cache serves
    them again. Thread-safe: when the n×m judge calls of a step ask at once, one call is made.
    record(question, images) is what a trace's meta should hold for that question.
    """

    def __init__(self, client: Client, mode: JudgeMode = JudgeMode(), max_tokens: int = 512, seed: int = 0):
        if not (isinstance(max_tokens, int) and max_tokens >= 1):
            raise ValueError(f"max_tokens must be an integer >= 1, got max_tokens={max_tokens!r}")
        self.client, self.mode, self.params = client, mode, dict(temperature=0.0, seed=seed, max_tokens=max_tokens)
        self._lock = threading.Lock()
        self._records: dict = {}  # question key -> its record (see record)
        self._made: dict = {}     # (kind, question key) -> {"lock": Lock, "value": the artefact once made}

    def __repr__(self) -> str:
        return f"Grounding({self.client!r}, mode={self.mode.name!r})"

    def _key(self, question: str, images: tuple) -> tuple:
        return self.client.model, question, tuple(_fingerprint(im) for im in images)

    def _update(self, state: verdict.State, change: Callable[[dict], Any]) -> None:
        key = self._key(state.question, state.images)
        with self._lock:
            change(self._records.setdefault(key, {"extra_calls": 0, "extra_tokens": 0}))

    def _chat(self, state: verdict.State, msgs: list) -> str:
        """One extra call for this question, counted with its tokens (a cached reply's too)."""
        r = self.client.chat(msgs, **self.params)
        usage = r.get("usage") if isinstance(r.get("usage"), dict) else {}
        tokens = sum(v for v in (usage.get("prompt_tokens"), usage.get("completion_tokens")) if isinstance(v, int))
        self._update(state, lambda rec: rec.update(extra_calls=rec["extra_calls"] + 1,
                                                   extra_tokens=rec["extra_tokens"] + tokens))
        return r["choices"][0]["message"]["content"]

    def _once(self, kind: str, state: verdict.State, make: Callable) -> Any:
        """make(state), once per question, however many threads ask at once (an error is not kept)."""
        key = (kind, self._key(state.question, state.images))
        with self._lock:
            slot = self._made.setdefault(key, {"lock": threading.Lock()})
        with slot["lock"]:
            if "value" not in slot:
                slot["value"] = make(state)
        return slot["value"]

    def prior(self, state: verdict.State) -> str:
        """SGV's prior k̂_q: the question and images only, no step shown (prompts/prior.txt)."""
        def make(state):
            p = load_prompt("prior")
            text = self._chat(state, messages(p.system, state.images, p.render(question=state.question))).strip()
            self._update(state, lambda rec: rec.update(prior=text))
            return text
        return self._once("prior", state, make)

    def fact_sheet(self, state: verdict.State) -> dict | None:
        """EVPV's fact sheet (prompts/premises.txt), or None when it degraded: malformed twice."""
        def make(state):
            p = load_prompt("premises")
            msgs, errors = messages(p.system, state.images, p.render(question=state.question)), []
            for _ in range(2):
                reply = self._chat(state, msgs)
                try:
                    sheet = parse_fact_sheet(reply)
                except ValueError as e:  # ask once more, with the reason
                    errors.append(str(e))
                    msgs = msgs + [{"role": "assistant", "content": reply},
                                   {"role": "user", "content": JSON_FOLLOW_UP.format(error=e)}]
                    continue
                status = "retried" if errors else "ok"
                self._update(state, lambda rec: rec.update(fact_sheet=sheet, fact_sheet_status=status,
                                                           fact_sheet_errors=errors))
                return sheet
            self._update(state, lambda rec: rec.update(fact_sheet=None, fact_sheet_status="degraded",
                                                       fact_sheet_errors=errors))
            return None
        return self._once("premises", state, make)

    def evidence(self, judge: str, state: verdict.State) -> str:
        """What a judge's prompt holds at {evidence}: the prior (every judge), the fact sheet (visual)."""
        text = ""
        if self.mode.prior and (prior := self.prior(state)):
            text += REFERENCE.format(prior=prior)
        if self.mode.premises and judge == "visual" and (sheet := self.fact_sheet(state)) is not None:
            text += FACT_SHEET.format(facts=fact_lines(sheet))
        return _fence(text)  # the evidence cannot open or close the candidate's fence

    def gated(self, judge: str, state: verdict.State, step: str, s: float) -> float:
        """The visual judge's ŝ_V through EVPV's gate (mode.gate); any other score as it is. NaN stays
        NaN; no fact sheet (degraded) or an unreadable premise check leaves ŝ_V as it is."""
        if not (self.mode.gate and judge == "visual") or math.isnan(s) or (sheet := self.fact_sheet(state)) is None:
            return s
        p = load_prompt("premise_check")
        text = p.render(facts=fact_lines(sheet), question=state.question, steps=_steps(state.steps), step=_fence(step))
        reply = self._chat(state, messages(p.system, (), text))  # text only: the step's claims against C
        entry = {"step": len(state.steps), "candidate": step, "s_hat_v": s}
        try:
            claims = parse_claims(reply)
        except ValueError as e:
            entry.update(r=None, gated=s, error=str(e))
        else:
            r = reliability([AGREEMENT[c["label"]] for c in claims])
            entry.update(claims=claims, r=r, gated=gate(s, r))
        self._update(state, lambda rec: rec.setdefault("gate", []).append(entry))
        return entry["gated"]

    def record(self, question: str, images=()) -> dict:
        """This question's artefacts for trace.meta, JSON-ready: the mode; "prior"; "fact_sheet" (None
        when degraded), "fact_sheet_status" ("ok", "retried" or "degraded") and the parse errors; "gate",
        one entry per check (step index, candidate, claims, r, ŝ_V before and after); and the extra
        calls and tokens this mode spent on the question (cached replies counted, as their cost)."""
        images = () if images is None else tuple(images) if isinstance(images, (list, tuple)) else (images,)
        key = self._key(question, images)
        with self._lock:
            rec = copy.deepcopy(self._records.get(key, {"extra_calls": 0, "extra_tokens": 0}))
        if "gate" in rec:
            rec["gate"].sort(key=lambda e: e["step"])  # checks finish in any order within a step
        return {"judge_mode": self.mode.name, **rec}


# ----------------------------------------------------------------------------- command-line flags

def add_endpoint_args(parser) -> None:
    """The flags of a live run (used by demo.py and evaluate.py)."""
    g = parser.add_argument_group("endpoint (live mode)")
    g.add_argument("--base-url", help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1")
    g.add_argument("--model", default="default", help="the reasoner's model name")
    g.add_argument("--judge-model", help="the judges' model name (default: --model)")
    g.add_argument("--judge-base-url", help="the judges' endpoint (default: --base-url)")
    g.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key")
    g.add_argument("--timeout", type=float, default=120.0, help="seconds per request (120)")
    g.add_argument("--retries", type=int, default=4, help="retries on connection errors, timeouts, 429, 5xx (4)")
    g.add_argument("--concurrency", type=int, default=4,
                   help="requests in flight at once (4): demo.py overlaps a step's judge calls, evaluate.py runs items")
    g.add_argument("--cache", help="sqlite response cache file (demo.py: off by default; evaluate.py: OUT/cache.sqlite)")


def clients_from_args(args) -> tuple:
    """(reasoner client, judge client) from add_endpoint_args' flags; the same object when they agree."""
    cache = Cache(args.cache) if args.cache else None
    make = lambda url, model: Client(url, model, args.api_key_env, args.timeout, args.retries, cache)
    rc = make(args.base_url, args.model)
    judge_url, judge_model = args.judge_base_url or args.base_url, args.judge_model or args.model
    return rc, rc if (judge_url, judge_model) == (args.base_url, args.model) else make(judge_url, judge_model)
