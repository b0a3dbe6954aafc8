"""VERDICT as a VLMEvalKit model: run any of VLMEvalKit's datasets, with its own prompts and official scoring,
through VERDICT's step-wise loop on a served reasoner and served judges.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026 (the step-wise loop, the consensus and the dual test: verdict.run).

VLMEvalKit (github.com/open-compass/VLMEvalKit; read at commit e8e78f05) builds a model from an entry of
vlmeval/config.py's supported_VLM, a functools.partial of its class, and calls
`generate(message, dataset=dataset_name)`, where message is a list of {"type": "image" | "text", "value": ...}
(image values are local file paths, dumped by the dataset's build_prompt). VerdictVLM answers with the chain's
final output: the text after "Final answer:", or the last chosen step of a chain cut by max_steps (as
evaluate reads it). VLMEvalKit then extracts and scores the answer as it does for any model.

    from functools import partial
    from verdict_lab.vlmevalkit import VerdictVLM
    supported_VLM["VERDICT-Qwen2.5-VL-7B"] = partial(VerdictVLM, base_url="http://127.0.0.1:8000/v1",
                                                       model="Qwen/Qwen2.5-VL-7B-Instruct")

docs/vlmevalkit.md has the whole recipe. This module imports nothing of VLMEvalKit: it has VLMEvalKit's model
interface without its base class, so it imports, and is tested, without torch.

- is_api = True: VLMEvalKit then runs it as an API model (inference.infer_data_api), `--api-nproc` items at
  once on threads, with no GPU in its own process. Every call forks the clients (its own HTTP session and
  counters; the cache and the merging of identical requests shared), so concurrent calls are safe.
- INTERLEAVE = True: images stay where the message puts them. Images before all of the text (every MCQ
  dataset) go first, as the harness sends them; an image between texts (MMMU, split by VLMEvalKit's
  split_MMMU) goes at its place, as <image k> in the question that layouts.placed places.
- A server failure that survives the client's retries (judges.EndpointError) returns VLMEvalKit's own
  failure message, "Failed to obtain answer via API.", with the reason: VLMEvalKit keeps the other answers
  and asks again for those items on its next run (unless --keep-failed). Any other error is raised.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import replace

import verdict
from judges import DEFAULT_KEY_ENV, EndpointError, one_line
from verdict_lab import client, verifier
from verdict_lab.cache import Cache
from verdict_lab.formats import JudgeFormat
from verdict_lab.layouts import PLACEHOLDER

FAIL_MSG = "Failed to obtain answer via API."  # VLMEvalKit's FAIL_MSG (inference.py): such answers are re-run


def final_output(trace: verdict.Trace) -> str:
    """What the model answers: the text after the final-answer marker, else the last chosen step (a chain
    stopped by max_steps), else "" (no step)."""
    if trace.stopped == "final":
        return trace.answer
    return trace.chain[-1] if trace.steps else ""


def question_and_images(message) -> tuple:
    """(question, [image paths]) from a VLMEvalKit message: a str, one {"type", "value"} dict, or a list of
    them (a list of plain strings is text). Texts are joined by newlines. When an image follows a text, each
    image becomes <image k> at its place in the question (layouts.placed puts it back there), unless a text
    already names images that way (then VLMEvalKit's own markers place them). ValueError for another type
    (video), an item without a value, or a message with no text."""
    if not isinstance(message, (str, dict, list, tuple)):
        raise ValueError(
            f"a VLMEvalKit message is a str, a dict or a list of them, got {type(message).__name__}"
        )
    items = [message] if isinstance(message, (str, dict)) else list(message)
    items = [{"type": "text", "value": m} if isinstance(m, str) else m for m in items]
    for m in items:
        if not (
            isinstance(m, dict) and m.get("type") in ("text", "image") and isinstance(m.get("value"), str)
        ):
            raise ValueError(f"VerdictVLM takes text and image items with a str value, got {m!r}")
    texts = [m["value"] for m in items if m["type"] == "text"]
    images = [m["value"] for m in items if m["type"] == "image"]
    if not any(t.strip() for t in texts):
        raise ValueError(f"the message has no text: {items!r}")
    first_text = next(i for i, m in enumerate(items) if m["type"] == "text")
    interleaved = any(m["type"] == "image" for m in items[first_text:])
    if not interleaved or any(PLACEHOLDER.search(t) for t in texts):
        return "\n".join(texts), images
    pieces, k, prev = [], 0, None
    for m in items:
        if m["type"] == "image":
            k += 1
            pieces.append(f"<image {k}>")
        else:
            pieces.append(("\n" if prev == "text" else "") + m["value"])
        prev = m["type"]
    return "".join(pieces).strip("\n"), images


class VerdictVLM:
    """VERDICT with VLMEvalKit's model interface: generate(message, dataset=None) -> the chain's final output.

    base_url, model: the reasoner's OpenAI-compatible endpoint (".../v1") and model name; judge_base_url,
    judge_model: the judges' (default: the reasoner's). api_key_env: the variable holding the API key (read
    at each request, never kept). timeout, retries: per request (named `retries`, not VLMEvalKit's `retry`,
    so run.py's --retry default of 6 does not override it). cache: a sqlite response cache file (None: off),
    which makes a re-run free. concurrency: judge calls of one step in flight at once (1; VLMEvalKit already
    runs --api-nproc items at once). seed: the reasoner's. Every other keyword is a field of
    verifier.Settings, with its defaults (the paper's VERDICT) and its checks: rule, n, tau, eps, lam,
    max_steps, max_tokens, judge_format, judge_max_tokens, reasons, weighted, judge_mode, mode_max_tokens,
    revise, speculate, max_calls, max_pixels, layout; a keyword that names none is a ValueError. use_vllm:
    ignored; VLMEvalKit passes it to an entry whose name holds "Qwen2.5-VL", "Qwen2-VL" or "Llama-4".
    """

    is_api = True  # VLMEvalKit: run through infer_data_api, items on threads, no model in this process
    INTERLEAVE = True  # images keep their place in the message
    allowed_types = ["text", "image"]

    def __init__(
        self,
        base_url: str,
        model: str,
        judge_model: str | None = None,
        judge_base_url: str | None = None,
        api_key_env: str = DEFAULT_KEY_ENV,
        timeout: float = 120.0,
        retries: int = 4,
        cache: str | None = None,
        concurrency: int = 1,
        seed: int = 0,
        use_vllm: bool = False,
        verbose: bool = False,
        **settings,
    ):
        self.settings = verifier.Settings.of(**settings)
        if not (isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0):
            raise ValueError(f"seed must be an integer >= 0, got seed={seed!r}")
        store = Cache(cache) if cache else None
        self.reasoner = client.Client(base_url, model, api_key_env, timeout, retries, store)
        judge_url, judge_model = judge_base_url or base_url, judge_model or model
        same = (judge_url, judge_model) == (base_url, model)
        self.judge = (
            self.reasoner
            if same
            else client.Client(judge_url, judge_model, api_key_env, timeout, retries, store)
        )
        self.format = JudgeFormat(self.settings.judge_format)  # one for the run: a fallback holds for all
        self.map_fn, self.seed, self.verbose = verifier.thread_map(concurrency), seed, verbose
        self.dump_image_func = None
        self._lock = threading.Lock()
        self.totals = {"items": 0, "failed": 0, "steps": 0, "fallbacks": 0, "calls": 0, "call_tokens": 0}

    # VLMEvalKit's model interface (vlmeval/vlm/base.py, vlmeval/api/base.py) -------------------------------

    def use_custom_prompt(self, dataset) -> bool:
        """False: every dataset's own build_prompt makes the message, so its official scoring applies."""
        return False

    def set_dump_image(self, dump_image_func) -> None:
        self.dump_image_func = dump_image_func

    def dump_image(self, line, dataset=None):
        return self.dump_image_func(line)

    def generate(self, message, dataset=None) -> str:
        """The chain's final output for one VLMEvalKit message (see question_and_images); dataset, the
        dataset's name, changes nothing. FAIL_MSG and the reason when the endpoint fails after its retries."""
        question, images = question_and_images(message)
        reasoner = self.reasoner.fork()
        judge = reasoner if self.judge is self.reasoner else self.judge.fork()
        try:
            trace = self.chain(question, images, reasoner, judge)
        except EndpointError as e:
            with self._lock:
                self.totals["items"] += 1
                self.totals["failed"] += 1
            print(f"VerdictVLM ({dataset}): {e}", file=sys.stderr)
            return f"{FAIL_MSG} ({one_line(str(e))})"
        finally:
            usage = client.total_usage((reasoner, judge))
            for c in {reasoner, judge}:
                c.close()
        with self._lock:
            tot = trace.totals()
            self.totals["items"] += 1
            self.totals["steps"] += tot["steps"]
            self.totals["fallbacks"] += tot["fallbacks"]
            self.totals["calls"] += usage["calls"]
            self.totals["call_tokens"] += usage["call_tokens"]
        if self.verbose:
            print(
                f"VerdictVLM ({dataset}): {tot['steps']} steps, {tot['fallbacks']} fallbacks, "
                f"{usage['calls']} calls, stopped {trace.stopped}",
                file=sys.stderr,
            )
        return final_output(trace)

    def chain(
        self, question: str, images: list, reasoner: client.Client, judge: client.Client
    ) -> verdict.Trace:
        """verifier.run with the served reasoner and judges, as evaluate runs a chain."""
        v = verifier.build(self.settings, reasoner, judge, self.seed, self.format)
        trace = verifier.run(v, question, images or None, map_fn=self.map_fn)
        return replace(trace, meta={"model": reasoner.model, "judge_model": judge.model, **trace.meta})
