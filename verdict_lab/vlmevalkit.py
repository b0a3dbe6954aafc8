"""VERDICT as a VLMEvalKit model: run any of VLMEvalKit's datasets, with its own prompts and
official scoring, through VERDICT's step-wise loop on a served reasoner and served judges.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026 (the step-wise loop, the consensus and the dual test:
verdict.run).

VLMEvalKit (github.com/open-compass/VLMEvalKit; read at commit e8e78f05) builds a model from an
entry of vlmeval/config.py's supported_VLM, a functools.partial of its class, and calls
`generate(message, dataset=dataset_name)`, where message is a list of
{"type": "image" | "text", "value": ...} (image values are local file paths, dumped by the dataset's
build_prompt). VerdictVLM answers with the chain's final output: the text after "Final answer:", or
the last chosen step of a chain cut by max_steps (as evaluate reads it). VLMEvalKit then extracts
and scores the answer as it does for any model.

    from verdict_lab.vlmevalkit import entry
    name, vlm = entry("VERDICT-Qwen2.5-VL-7B", base_url="http://127.0.0.1:8000/v1",
                      model="Qwen/Qwen2.5-VL-7B-Instruct")
    supported_VLM[name] = vlm  # name: "VERDICT-Qwen2.5-VL-7B-s<digest of the settings>"

docs/vlmevalkit.md has the whole recipe. This module imports nothing of VLMEvalKit: it has
VLMEvalKit's model interface without its base class, so it imports, and is tested, without torch.

- is_api = True: VLMEvalKit then runs it as an API model (inference.infer_data_api), `--api-nproc`
  items at once on threads, with no GPU in its own process. Every call forks the clients (its own
  HTTP session and counters; the cache and the merging of identical requests shared), so concurrent
  calls are safe.
- INTERLEAVE = True: images stay where the message puts them. Images before all of the text (every
  MCQ dataset) go first, as the harness sends them; an image between texts (MMMU, split by
  VLMEvalKit's split_MMMU) goes at its place, as <image k> in the question that layouts.placed
  places.
- A server failure that survives the client's retries (judges.EndpointError) returns VLMEvalKit's
  own failure message, "Failed to obtain answer via API.", with the reason: VLMEvalKit keeps the
  other answers and asks again for those items on its next run (unless --keep-failed). Any other
  error is raised.
- Each chain's judges are memoised (search.Memo): identical candidates of a step are judged once,
  with no response cache (VLMEvalKit's runs have none unless the entry names one).
- entry() names an entry after a digest of its settings (entry_name), so VLMEvalKit's --reuse, which
  picks earlier predictions by model and dataset name, never takes one setting's predictions for
  another's; a named model writes the settings and counts of each run beside VLMEvalKit's
  predictions, in <work_dir>/<name>/<name>_<dataset>_verdict.json (Sidecar).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import sys
import threading
import uuid
from dataclasses import replace
from functools import partial

import verdict
from judges import DEFAULT_KEY_ENV, EndpointError
from verdict_lab.text import one_line
from verdict_lab import client, verifier
from verdict_lab.cache import Cache
from verdict_lab.formats import JudgeFormat
from verdict_lab.layouts import PLACEHOLDER
from verdict_lab.search import memoise

# VLMEvalKit's FAIL_MSG (inference.py): VLMEvalKit runs the items that got it again.
FAIL_MSG = "Failed to obtain answer via API."
SIDECAR_FORMAT = "verdict-vlmeval-run/1"
DIGEST = re.compile(r"-s([0-9a-f]{8})$")  # the settings digest entry_name puts at the end of a name
# keywords that change no prediction: the endpoints, how requests are made, where files go
NOT_SETTINGS = (
    "base_url",
    "judge_base_url",
    "api_key_env",
    "timeout",
    "retry",
    "retries",
    "cache",
    "concurrency",
    "use_vllm",
    "verbose",
    "name",
    "work_dir",
)


def final_output(trace: verdict.Trace) -> str:
    """What the model answers: the text after the final-answer marker, else the last chosen step (a
    chain stopped by max_steps), else "" (no step)."""
    if trace.stopped == "final":
        return trace.answer
    return trace.chain[-1] if trace.steps else ""


def question_and_images(message) -> tuple:
    """(question, [image paths]) from a VLMEvalKit message: a str, one {"type", "value"} dict, or a
    list of them (a list of plain strings is text). Texts are joined by newlines, each kept as
    VLMEvalKit wrote it (its whitespace too). When an image follows a text, each image becomes
    <image k> at its place in the question (layouts.placed puts it back there), unless a text
    already names images that way (then VLMEvalKit's own markers place them). ValueError for another
    type (video), an item without a value, or a message with no text."""
    if not isinstance(message, (str, dict, list, tuple)):
        raise ValueError(
            f"a VLMEvalKit message is a str, a dict or a list of them, got {type(message).__name__}"
        )
    items = [message] if isinstance(message, (str, dict)) else list(message)
    items = [{"type": "text", "value": m} if isinstance(m, str) else m for m in items]
    for m in items:
        if not (
            isinstance(m, dict)
            and m.get("type") in ("text", "image")
            and isinstance(m.get("value"), str)
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
    return "".join(pieces), images


def settings_record(model: str, judge_model: str | None = None, seed: int = 0, **settings) -> dict:
    """What decides a VerdictVLM's predictions, JSON-ready: the models, the reasoner's seed and
    every field of verifier.Settings (defaults filled in; ValueError for a keyword that names
    none)."""
    kw = {k: v for k, v in settings.items() if k not in NOT_SETTINGS}
    return {
        "model": model,
        "judge_model": judge_model or model,
        "seed": seed,
        **verifier.Settings.of(**kw).record(),
    }


def settings_digest(record: dict) -> str:
    """The first 8 hex digits of the sha256 of a settings_record's canonical JSON."""
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:8]


def entry_name(prefix: str, **keywords) -> str:
    """An entry's name for VLMEvalKit: prefix, "-s", the digest of the settings the keywords give
    ("VERDICT-Qwen2.5-VL-7B-s1a2b3c4d"). Entries of other settings get other names, so --reuse,
    which picks predictions by model and dataset name, cannot mix them; the endpoints, timeouts,
    retries, cache and threads do not enter it (they change no prediction)."""
    return f"{prefix}-s{settings_digest(settings_record(**keywords))}"


def entry(prefix: str, **keywords) -> tuple:
    """(entry_name(prefix, **keywords), functools.partial(VerdictVLM, name=that name, **keywords)):
    an entry for supported_VLM, its keywords checked now (a bad one is a ValueError in
    config.py)."""
    name = entry_name(prefix, **keywords)
    return name, partial(VerdictVLM, name=name, **keywords)


class Sidecar:
    """The settings and counts of each run of a named VerdictVLM, per dataset, beside VLMEvalKit's
    predictions: <work_dir>/<name>/<name>_<dataset>_verdict.json ("verdict-vlmeval-run/1"), one
    record per run (process) in "runs", updated after every item (written whole: a temporary file
    renamed over it). A file whose earlier runs had other settings gets a warning on stderr:
    VLMEvalKit's --reuse would have taken their predictions (name entries with entry_name). A file
    that cannot be written gets one warning, not an error: VLMEvalKit's run goes on."""

    def __init__(self, work_dir: str, name: str, settings: dict):
        self.dir, self.name, self.settings = os.path.join(work_dir, name), name, settings
        self.digest = settings_digest(settings)
        self.run = {
            "run": uuid.uuid4().hex[:12],  # this instance's: a new VerdictVLM is a new run
            "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "pid": os.getpid(),
        }
        self._lock, self._warned = threading.Lock(), set()

    def path(self, dataset) -> str:
        return os.path.join(self.dir, f"{self.name}_{dataset}_verdict.json")

    def write(self, dataset, counts: dict) -> None:
        path, run = (
            self.path(dataset),
            {**self.run, "digest": self.digest, "settings": self.settings},
        )
        with self._lock:
            try:
                runs = self._runs(path)
                others = [r for r in runs if r.get("run") != run["run"]]
                body = {"format": SIDECAR_FORMAT, "entry": self.name, "dataset": dataset}
                body["runs"] = others + [{**run, "counts": counts}]
                os.makedirs(self.dir, exist_ok=True)
                with open(path + ".tmp", "w", encoding="utf-8") as fh:
                    json.dump(body, fh, indent=1)
                os.replace(path + ".tmp", path)
            except (OSError, ValueError) as e:
                self._warn(path, f"cannot write {path}: {e}")
                return
            if any(r.get("digest") != self.digest for r in others):
                self._warn(
                    path + "/digest",
                    f"{path} holds runs with other settings under the name {self.name}: "
                    "VLMEvalKit's --reuse takes earlier predictions by that name; name entries "
                    "with verdict_lab.vlmevalkit.entry",
                )

    def _runs(self, path: str) -> list:
        try:
            with open(path, encoding="utf-8") as fh:
                body = json.load(fh)
        except FileNotFoundError:
            return []
        if not (isinstance(body, dict) and body.get("format") == SIDECAR_FORMAT):
            raise ValueError(f"it is not a {SIDECAR_FORMAT} file")
        return [r for r in body.get("runs", []) if isinstance(r, dict)]

    def _warn(self, key: str, text: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            print(f"VerdictVLM: warning: {text}", file=sys.stderr)


COUNTS = ("items", "failed", "steps", "fallbacks", "calls", "requests", "cache_hits", "call_tokens")


class VerdictVLM:
    """VERDICT with VLMEvalKit's model interface: generate(message, dataset=None) -> the chain's
    final output.

    base_url, model: the reasoner's OpenAI-compatible endpoint (".../v1") and model name;
    judge_base_url, judge_model: the judges' (default: the reasoner's). api_key_env: the variable
    holding the API key (read at each request, never kept). timeout: per request (120 s). retry:
    retries per request, VLMEvalKit's name, which run.py's --retry (default 6) sets when the entry
    has it; retries: the same, which run.py leaves alone (4 when neither is given; both is a
    ValueError). cache: a sqlite response cache file (None: off), which makes a re-run free.
    concurrency: judge calls of one step in flight at once (1; VLMEvalKit already runs --api-nproc
    items at once). seed: the reasoner's. name: the entry's name (entry_name); with it, each run's
    settings and counts go to a Sidecar in <work_dir>/<name>/ (work_dir: $MMEVAL_ROOT, else
    "./outputs", run.py's --work-dir default), and a name ending in another settings digest than
    these settings' is a ValueError (a --config JSON or an edited partial changed them). Every other
    keyword is a field of verifier.Settings, with its defaults (the paper's VERDICT) and its checks:
    rule (base: the reasoner alone), n, tau, eps, lam, max_steps, max_tokens, judge_format,
    judge_max_tokens, reasons, weighted, judge_mode, mode_max_tokens, revise, speculate, max_calls,
    max_pixels, layout; a keyword that names none is a ValueError. use_vllm: ignored; VLMEvalKit
    passes it to an entry whose name holds "Qwen2.5-VL", "Qwen2-VL" or "Llama-4". verbose: a line on
    stderr per item (run.py's --verbose sets it when the entry has it, and clears it when the flag
    is not given).
    """

    # VLMEvalKit runs an API model through infer_data_api, its items on threads, with no model in
    # this process.
    is_api = True
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
        retries: int | None = None,
        retry: int | None = None,
        cache: str | None = None,
        concurrency: int = 1,
        seed: int = 0,
        use_vllm: bool = False,
        verbose: bool = False,
        name: str | None = None,
        work_dir: str | None = None,
        **settings,
    ):
        self.settings = verifier.Settings.of(**settings)
        if not (isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0):
            raise ValueError(f"seed must be an integer >= 0, got seed={seed!r}")
        if retries is not None and retry is not None:
            raise ValueError(
                "give retry (VLMEvalKit's --retry sets it) or retries, not both: "
                f"{retry}, {retries}"
            )
        self.record = settings_record(model, judge_model, seed, **settings)
        self.sidecar = self._sidecar(name, work_dir)
        store = Cache(cache) if cache else None
        tries = 4 if retry is None and retries is None else retry if retry is not None else retries
        self.reasoner = client.Client(base_url, model, api_key_env, timeout, tries, store)
        judge_url, judge_model = judge_base_url or base_url, judge_model or model
        same = (judge_url, judge_model) == (base_url, model)
        self.judge = (
            self.reasoner
            if same
            else client.Client(judge_url, judge_model, api_key_env, timeout, tries, store)
        )
        # One format for the run, so that a fallback holds for all its chains.
        self.format = JudgeFormat(self.settings.judge_format)
        self.map_fn, self.seed, self.verbose = verifier.thread_map(concurrency), seed, verbose
        self.dump_image_func = None
        self._lock = threading.Lock()
        self.totals = dict.fromkeys(COUNTS, 0)
        self.by_dataset: dict = {}  # dataset -> its counts, as totals

    def _sidecar(self, name: str | None, work_dir: str | None) -> Sidecar | None:
        """The Sidecar of a named model (None without a name); ValueError for a name that carries
        another settings digest than this model's."""
        if name is None:
            return None
        if not (isinstance(name, str) and name.strip()):
            raise ValueError(f"name must be an entry's name, got name={name!r}")
        m, digest = DIGEST.search(name), settings_digest(self.record)
        if m and m.group(1) != digest:
            raise ValueError(
                f"the entry {name!r} was named for the settings of digest {m.group(1)}, but these "
                f"settings digest to {digest}: something changed them after the entry was named (a "
                "--config JSON, an edited partial), and --reuse would take the other settings' "
                "predictions; name the entry with verdict_lab.vlmevalkit.entry"
            )
        return Sidecar(work_dir or os.environ.get("MMEVAL_ROOT") or "./outputs", name, self.record)

    # VLMEvalKit's model interface (vlmeval/vlm/base.py, vlmeval/api/base.py) ----------------------

    def use_custom_prompt(self, dataset) -> bool:
        """False: every dataset's own build_prompt makes the message, so its official scoring
        applies."""
        return False

    def set_dump_image(self, dump_image_func) -> None:
        self.dump_image_func = dump_image_func

    def dump_image(self, line, dataset=None):
        return self.dump_image_func(line)

    def generate(self, message, dataset=None) -> str:
        """The chain's final output for one VLMEvalKit message (see question_and_images); dataset,
        the dataset's name, names the Sidecar's file. FAIL_MSG and the reason when the endpoint
        fails after its retries."""
        question, images = question_and_images(message)
        reasoner = self.reasoner.fork()
        judge = reasoner if self.judge is self.reasoner else self.judge.fork()
        trace = error = None
        try:
            trace = self.chain(question, images, reasoner, judge)
        except EndpointError as e:
            error = e
        finally:
            usage = client.total_usage((reasoner, judge))
            for c in {reasoner, judge}:
                c.close()
        self._count(dataset, trace, usage)
        if error is not None:
            print(f"VerdictVLM ({dataset}): {error}", file=sys.stderr)
            return f"{FAIL_MSG} ({one_line(str(error))})"
        if self.verbose:
            tot = trace.totals()
            print(
                f"VerdictVLM ({dataset}): {tot['steps']} steps, {tot['fallbacks']} fallbacks, "
                f"{usage['calls']} calls, stopped {trace.stopped}",
                file=sys.stderr,
            )
        return final_output(trace)

    def _count(self, dataset, trace: verdict.Trace | None, usage: dict) -> None:
        """Add one item to totals and to its dataset's counts (trace None: it failed); write the
        Sidecar."""
        tot = trace.totals() if trace is not None else {"steps": 0, "fallbacks": 0}
        add = {
            "items": 1,
            "failed": int(trace is None),
            "steps": tot["steps"],
            "fallbacks": tot["fallbacks"],
        }
        add |= {k: usage[k] for k in ("calls", "requests", "cache_hits", "call_tokens")}
        with self._lock:
            mine = self.by_dataset.setdefault(dataset, dict.fromkeys(COUNTS, 0))
            for k, v in add.items():
                self.totals[k] += v
                mine[k] += v
            counts = dict(mine)
            if self.sidecar is not None:
                self.sidecar.write(dataset, counts)

    def chain(
        self, question: str, images: list, reasoner: client.Client, judge: client.Client
    ) -> verdict.Trace:
        """verifier.run with the served reasoner and judges, as evaluate runs a chain, each judge
        memoised for the chain (search.memoise)."""
        v = verifier.build(self.settings, reasoner, judge, self.seed, self.format)
        v = replace(v, judges=memoise(v.judges))
        trace = verifier.run(v, question, images or None, map_fn=self.map_fn)
        return replace(
            trace, meta={"model": reasoner.model, "judge_model": judge.model, **trace.meta}
        )
