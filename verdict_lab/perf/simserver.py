"""A simulated continuous-batching GPU server for VERDICT's requests: replies by role, latency by a
model.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026 (the step-wise loop with n candidates and m judges, and its
wall-clock overhead). bench.py measures that overhead against this server; it is a simulation, not a
measurement of a GPU:

- LatencyModel: a vLLM server serving a 7B model on one A100, as sleep times (SOURCES);
- prompt_units and block_hashes: the prompt as pseudo-tokens in the order the request lays them out
  (the system message, each image's tokens where the message puts the image, the text) and the
  chained hashes of its 16-token blocks, as vLLM's automatic prefix caching names them;
- sim_reply: the reasoner's candidates and the judges' replies (any reply format); sim_logprobs:
  their logprobs, when asked, in llama-server's shape (a reasoner step's confidence varies with its
  text: step_logprob);
- SimulatedServer: a loopback.LoopbackServer handler that queues (first come, first served),
  prefills what its prefix cache lacks, decodes, and reports the cached prompt tokens
  (usage.prompt_tokens_details.cached_tokens) as servers do; with replicas = K, K such servers
  behind vLLM's data-parallel front end (--data-parallel-size K), which routes a request to the
  replica its X-data-parallel-rank header names, else to the least busy one;
- Remote: a SimulatedServer in a process of its own, so that its CPU (parsing, hashing, writing
  replies) never holds the client's interpreter lock: a GPU server is another machine.
"""

from __future__ import annotations

import hashlib
import json
import math
import multiprocessing
import urllib.request
import re
import threading
import time
from dataclasses import dataclass

from verdict_lab import formats
from verdict_lab.client import RANK_HEADER
from verdict_lab.loopback import LoopbackServer, chat_response

BLOCK = 16  # prefix-cache block size in tokens (vLLM's default block size)
TOKEN = re.compile(r"\w+|[^\w\s]")  # one pseudo-token: a word or a punctuation mark


@dataclass(frozen=True)
class LatencyModel:
    """A continuous-batching GPU server (vLLM, a 7B model, one A100) as sleep times. SIMULATED.

    A request takes n of `capacity` sequence slots (it queues while they are busy), prefills its
    uncached prompt tokens on the one prefill engine (prompts are prefilled one after another), then
    decodes its reply at decode_tps per sequence, alongside every other admitted sequence. Requests
    are admitted and prefilled first come, first served, as vLLM's default scheduling policy (fcfs)
    does. With prefix_cache, prompt blocks prefilled before are free (vLLM's automatic prefix
    caching). Sources of the defaults: SOURCES. Sleeps are model seconds × time_scale (0: no
    sleeping).
    """

    prefill_tps: float = 5700.0  # prompt tokens/s (a lower bound)
    decode_tps: float = 84.28  # generated tokens/s of one sequence
    capacity: int = 12  # sequences decoded at once at full speed
    image_tokens: int = 1280  # tokens per image, at Qwen2.5-VL's 1280·28·28-pixel budget
    step_tokens: int = 48  # one reasoner step (its prompt asks for one or two sentences)
    rationale_tokens: int = 80  # a judge's reply: at most three sentences, then "Score: 0.8"
    score_tokens: int = 6  # a score-only reply, "Score: 0.8" (Qwen tokenizes digits one by one)
    final_tokens: int = 4  # "Final answer: B"
    prefix_cache: bool = True
    time_scale: float = 1.0

    def __post_init__(self):
        if not (self.prefill_tps > 0 and self.decode_tps > 0):  # a rate of 0 would sleep forever
            raise ValueError(
                f"rates must be > 0, got prefill_tps={self.prefill_tps!r}, "
                f"decode_tps={self.decode_tps!r}"
            )
        if not (isinstance(self.capacity, int) and self.capacity >= 1):
            raise ValueError(f"capacity must be an integer >= 1, got {self.capacity!r}")
        if self.time_scale < 0:
            raise ValueError(f"time_scale must be >= 0, got {self.time_scale!r}")

    def seconds(self, prompt_tokens: int, reply_tokens: int) -> float:
        """Model seconds of one request that finds free slots and an idle prefill engine."""
        return prompt_tokens / self.prefill_tps + reply_tokens / self.decode_tps


SOURCES = [
    "decode 84.28 tokens/s per sequence: Qwen2.5-7B-Instruct, BF16, vLLM 0.6.3, one A100 80GB, "
    "batch 1, input length 1, 2048 generated tokens (Qwen2.5 Speed Benchmark, qwen.readthedocs.io; "
    "QwenLM/Qwen2.5 docs/source/benchmark/speed_benchmark.rst).",
    "prefill 5,700 tokens/s: the same table gives 80.70 tokens/s at input length 6,144, so "
    "2048/80.70 − 2048/84.28 = 1.08 s more for 6,143 more prompt tokens; charging all of it to "
    "prefill gives at least 5,700 tokens/s, a deliberately low rate.",
    "capacity 12 sequences = generated tokens/s at saturation ÷ 84.28: Qwen1.5-7B-Chat on vLLM, "
    "one A100-80G, 1,000 prompt + 1,000 generated tokens per request, 1.15 requests/s (2298.89 "
    "tokens/s in all, ≈ 1,150 generated; Qwen1.5-MoE blog, qwenlm.github.io); reproducing it, a "
    "user measured ≈ 1,000 tokens/s (QwenLM/Qwen3 issue 244); 1,000 / 84.28 ≈ 12.",
    "1280 tokens per image: one token per 28×28-pixel patch (Qwen2-VL-7B-Instruct model card, "
    "discussion 47), so Qwen2.5-VL sees a 1280·28·28-pixel image (VLMEvalKit's min_pixels for "
    "Qwen2.5-VL-7B) as 1280 visual tokens; the simulation charges 1280 visual tokens per image.",
    "prefix caching: vLLM's automatic prefix caching covers image tokens (its prefix-caching "
    "design doc hashes a block's multimodal inputs with its tokens); 16-token blocks.",
    "first come, first served: vLLM's scheduling policy is fcfs unless --scheduling-policy "
    "priority is given (its SchedulerConfig: SchedulerPolicy = Literal['fcfs', 'priority']).",
]


def prompt_units(messages, image_tokens: int) -> list:
    """The prompt as pseudo-tokens, in the order the messages lay it out: a role marker per message,
    a word or punctuation mark of text, image_tokens units per image where the message puts it (each
    named by its URL's hash, so an image cached in one request is cached for another that puts it at
    the same place)."""
    units = []
    for msg in messages:
        content = msg.get("content")
        units.append(f"<{msg.get('role')}>")
        for part in (
            [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        ):
            if part.get("type") == "image_url":
                h = hashlib.sha256(part["image_url"]["url"].encode()).hexdigest()[:16]
                units += [f"{h}:{i}" for i in range(image_tokens)]
            else:
                units += TOKEN.findall(part.get("text") or "")
    return units


def block_hashes(units) -> list:
    """One chained hash per full BLOCK of units, as vLLM names prefix-cache blocks.

    [T] -> [T // BLOCK]
    """
    out, h = [], ""
    for i in range(0, len(units) - len(units) % BLOCK, BLOCK):
        h = hashlib.sha256((h + "\x1f".join(units[i : i + BLOCK])).encode()).hexdigest()
        out.append(h)
    return out


def sim_reply(body: dict, lm: LatencyModel, final_at: int) -> tuple:
    """(texts, tokens per text) for a request of VERDICT's reasoner or a judge. The reasoner (it
    sends `stop`) writes step t as n different candidates, and from step final_at on n identical
    final answers. A judge writes its score in the format it asks for: a JSON object under
    response_format (with a reason, or the score alone), else a rationale and a score line, or the
    score line alone (formats.SCORE_ONLY)."""
    user = body["messages"][-1]["content"]
    user = (
        user
        if isinstance(user, str)
        else " ".join(p.get("text", "") for p in user if p.get("type") == "text")
    )
    n = int(body.get("n") or 1)
    if "stop" in body:
        t = len(re.findall(r"(?m)^Step \d+:", user))
        if t >= final_at:
            return ["Final answer: B"] * n, lm.final_tokens
        seed = body.get("seed", 0)  # the sequential mode asks for its n candidates with n seeds
        return [
            f"Observation {t}.{seed}.{i}: " + " ".join(["detail"] * (lm.step_tokens - 4))
            for i in range(n)
        ], lm.step_tokens
    digit = 5 + int(hashlib.sha256(user.encode()).hexdigest(), 16) % 5
    reason = " ".join(["because"] * (lm.rationale_tokens - 10))
    if "response_format" in body:
        short = "reason" not in json.dumps(body["response_format"])
        reply = {"score": digit} if short else {"reason": reason, "score": digit}
        return [json.dumps(reply)], lm.score_tokens if short else lm.rationale_tokens
    line = (
        f"Score: {digit}" if formats.SCALE["digit"] in user else f"Score: 0.{digit}"
    )  # the digit or the text format
    if formats.SCORE_ONLY.splitlines()[0] in user:
        return [line], lm.score_tokens
    return [f"{reason}\n{line}"], lm.rationale_tokens


def step_logprob(text: str) -> float:
    """The log-probability of a reasoner step's tokens: ln p with p = 0.6 + 0.39·u, u in [0, 1) a
    hash of the text, so that candidates and steps differ in confidence (adaptive.py's signals) and
    the same text always has the same."""
    u = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) / 16**8  # [0, 1)
    return math.log(0.6 + 0.39 * u)


def sim_logprobs(text: str, k: int, lp: float = -0.1, first: float | None = None) -> dict:
    """A choice's logprobs as llama-server sends them: each pseudo-token of `text` (its leading
    space kept, so the tokens spell the text) with its id, logprob `lp` (the first token's
    `first`, when given) and bytes, and k top_logprobs of the same shape; at a digit, the ten digits
    come first. What a response cache would store of a judge's reply."""

    def entry(tok: str, lp: float, i: int) -> dict:
        return {"id": 1000 + i, "token": tok, "bytes": list(tok.encode()), "logprob": lp}

    content = []
    for t, tok in enumerate(re.findall(r"\s*(?:\w+|[^\w\s])|\s+$", text)):
        names = [str(d) for d in range(10)] if tok.strip().isdigit() else []
        names += [f"{tok}{i}" for i in range(k - len(names))]
        own = first if t == 0 and first is not None else lp
        top = [entry(a, own - i, i) for i, a in enumerate(names[:k])]
        content.append({**entry(tok, own, 0), "top_logprobs": top})
    return {"content": content}


class _Replica:
    """One engine: its sequence slots, its prefill engine and its prefix cache (block hashes), with
    the schedule of the requests it has admitted.

    A request's times are set when it arrives, on the clock the server sleeps by (schedule), so the
    order of arrival alone decides the order of service: how late this machine wakes a server
    thread moves no other request."""

    def __init__(self):
        self.lock, self.cache = threading.Lock(), set()
        self.held: list = []  # [(end, sequences)] of the requests admitted and not yet ended
        self.admitted = self.prefilled = -math.inf  # the last request's admission and prefill end
        self.busy = 0  # sequences in flight, queued ones too (what the front end balances)

    def schedule(self, now: float, n: int, capacity: int, prefill: float, decode: float) -> tuple:
        """(admitted, prefilled, end) of a request of n sequences arriving at `now` that takes
        `prefill` seconds to prefill and `decode` to decode; call in order of arrival, under lock.

            admitted  = the first t ≥ max(now, the previous request's admission) at which
                        n + Σ sequences of the held requests with end > t ≤ capacity
            prefilled = max(admitted, the previous request's prefilled) + prefill
            end       = prefilled + decode

        First come, first served: a request waits for those that arrived before it, in the slots
        and on the prefill engine.
        """
        self.held = [(e, k) for e, k in self.held if e > now]  # ended before anything to come
        t = max(now, self.admitted)
        for e in sorted(e for e, _ in self.held if e > t):
            if n + sum(k for e2, k in self.held if e2 > t) <= capacity:
                break
            t = e  # the next release of slots
        self.admitted = t
        self.prefilled = max(t, self.prefilled) + prefill
        end = self.prefilled + decode
        self.held.append((end, n))
        return t, self.prefilled, end


class SimulatedServer:
    """A loopback.LoopbackServer handler: replies as sim_reply, taking as long as the LatencyModel
    says, and reporting the prompt tokens its prefix cache served as
    usage.prompt_tokens_details.cached_tokens (whole blocks, as vLLM counts them; reported even when
    0, as llama-server and SGLang do and vLLM does not).

    replicas: data-parallel engines, each with its own slots, prefill engine and prefix cache. A
    request goes to the replica its X-data-parallel-rank header names (vLLM's; a rank out of range
    is an error, as there), else to the replica with the fewest sequences in flight, ties taken in
    turn (vLLM's front end balances by load, not by prefix). computed: the prompt tokens prefilled,
    over every replica."""

    takes_headers = True

    def __init__(self, lm: LatencyModel, final_at: int = 3, replicas: int = 1):
        if not (isinstance(replicas, int) and replicas >= 1):
            raise ValueError(f"replicas must be an integer >= 1, got {replicas!r}")
        self.lm, self.final_at = lm, final_at
        self.replicas = [_Replica() for _ in range(replicas)]
        self._route, self._turn, self.computed = threading.Lock(), 0, 0

    def reset(self) -> None:
        """Forget every cached prefix (a cold server)."""
        for r in self.replicas:
            with r.lock:
                r.cache.clear()

    def _replica(self, headers: dict | None) -> _Replica:
        rank = {k.lower(): v for k, v in (headers or {}).items()}.get(RANK_HEADER.lower())
        if rank is not None:
            if not (rank.isdigit() and int(rank) < len(self.replicas)):
                raise ValueError(f"{RANK_HEADER} must be 0..{len(self.replicas) - 1}, got {rank!r}")
            return self.replicas[int(rank)]
        with self._route:  # the least busy replica, ties taken in turn
            k = len(self.replicas)
            order = [(self._turn + i) % k for i in range(k)]
            pick = min(order, key=lambda i: self.replicas[i].busy)
            self._turn = (pick + 1) % k
            return self.replicas[pick]

    def __call__(self, body, path, headers: dict | None = None):
        if path.endswith("/tokenize"):  # llama-server's endpoint: the text's pseudo-tokens
            return {"tokens": list(range(len(TOKEN.findall(body["content"]))))}
        lm, replica = self.lm, self._replica(headers)
        texts, tokens = sim_reply(body, lm, self.final_at)
        tokens = min(tokens, body.get("max_tokens") or tokens)
        if len(texts) > lm.capacity:  # such a request could never be scheduled
            raise ValueError(f"n={len(texts)} exceeds the batch capacity {lm.capacity}")
        units = prompt_units(body["messages"], lm.image_tokens)
        # The simulator's own work (hashing the prompt, writing the reply) is done outside the
        # model's time: before the request queues, or while it sleeps to a deadline. So the
        # latency a client sees is the model's, however slow this machine computes it.
        hashes = block_hashes(units) if lm.prefix_cache else []
        with replica.lock:  # in order of arrival
            now = time.perf_counter()
            cached = (
                next((i for i, h in enumerate(hashes) if h not in replica.cache), len(hashes))
                * BLOCK
            )
            replica.cache.update(hashes)
            replica.busy += len(texts)
            computed = len(units) - cached
            _, _, end = replica.schedule(
                now,
                len(texts),
                lm.capacity,
                lm.time_scale * lm.seconds(computed, 0),
                lm.time_scale * lm.seconds(0, tokens),  # the n sequences decode side by side
            )
        with self._route:
            self.computed += computed
        try:
            response = self._response(body, texts, len(units), tokens, cached)
            _sleep_until(end)
        finally:
            with replica.lock:
                replica.busy -= len(texts)
        return response

    def _response(self, body, texts: list, prompt: int, tokens: int, cached: int) -> dict:
        """The chat completion: the texts, the usage with the cached prompt tokens, and the logprobs
        when asked (a reasoner step's by step_logprob, its first token the least likely, p⁴)."""
        response = chat_response(texts, prompt_tokens=prompt, completion_tokens=tokens * len(texts))
        response["usage"]["prompt_tokens_details"] = {"cached_tokens": cached}
        if body.get("logprobs"):
            for c in response["choices"]:
                text, k = c["message"]["content"], int(body.get("top_logprobs") or 0)
                if "stop" in body:
                    lp = step_logprob(text)
                    c["logprobs"] = sim_logprobs(text, k, lp, 4 * lp)
                else:
                    c["logprobs"] = sim_logprobs(text, k)
        return response


def _sleep_until(deadline: float) -> None:
    """Sleep until time.perf_counter() reaches deadline (at once if it has)."""
    left = deadline - time.perf_counter()
    if left > 0:
        time.sleep(left)


RESET = "/sim/reset"  # Remote's path: forget every cached prefix


class Remote:
    """A context manager serving SimulatedServer(lm, final_at, replicas) on loopback from a process
    of its own (spawned, so that it shares nothing with this one). `url` is its /v1 root; reset()
    clears its prefix caches, as SimulatedServer.reset does."""

    def __init__(self, lm: LatencyModel, final_at: int = 3, replicas: int = 1):
        self.args, self.url = (lm, final_at, replicas), None

    def __enter__(self) -> "Remote":
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(target=_serve, args=(*self.args, child), daemon=True)
        self._process.start()
        if not self._conn.poll(60):  # the child imports and binds in about a second
            self._process.kill()
            raise RuntimeError("the simulated server's process did not start within 60 s")
        self.url = self._conn.recv()
        return self

    def reset(self) -> None:
        request = urllib.request.Request(self.url + RESET, data=b"{}", method="POST")
        with urllib.request.urlopen(request, timeout=60) as r:
            r.read()

    def __exit__(self, *exc) -> None:
        self._conn.send("stop")
        self._process.join(timeout=30)
        if self._process.is_alive():
            self._process.kill()


def _serve(lm: LatencyModel, final_at: int, replicas: int, conn) -> None:
    """Remote's process: the server until the parent says stop (or goes away)."""
    sim = SimulatedServer(lm, final_at, replicas)

    def handler(body, path, headers=None):
        if path.endswith(RESET):
            sim.reset()
            return {"reset": True}
        return sim(body, path, headers)

    handler.takes_headers = True
    with LoopbackServer(handler, model="sim") as srv:
        conn.send(srv.url)
        try:
            conn.recv()
        except EOFError:  # the parent is gone
            pass
