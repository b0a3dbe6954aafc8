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

import contextlib
import datetime
import errno
import hashlib
import json
import numbers
import os
import re
import sys
import threading
import uuid
from dataclasses import replace
from functools import partial

import numpy as np

import verdict
from judges import DEFAULT_KEY_ENV, EndpointError
from verdict_lab.text import one_line
from verdict_lab import client, verifier
from verdict_lab.cache import Cache
from verdict_lab.formats import JudgeFormat
from verdict_lab.harness.rundir import ADDED, _write_atomic
from verdict_lab.layouts import PLACEHOLDER
from verdict_lab.search import memoise

try:  # POSIX: a lock on a file that holds across processes (Sidecar)
    import fcntl
except ImportError:  # Windows: Sidecar's writes are atomic, but not serialised across processes
    fcntl = None

# VLMEvalKit's FAIL_MSG (inference.py): VLMEvalKit runs the items that got it again.
FAIL_MSG = "Failed to obtain answer via API."
SIDECAR_FORMAT = "verdict-vlmeval-run/1"
DAMAGED = "it is left as it is; move it aside to record runs"  # what a damaged sidecar says
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
# verdict.Config's real-valued knobs (τ, ε, λ): 1 and 1.0 are one value of each
REAL_SETTINGS = ("tau", "eps", "lam")


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


def plain_numbers(settings: dict) -> dict:
    """settings with every number in one spelling, so that equal settings make one record and one
    digest: τ, ε and each λ as a float (tau=1 is tau=1.0: verdict.Config takes them as floats),
    any other integer as an int (NumPy's too), a tuple or a NumPy array as a list. Anything else
    is left as given, for Settings' checks to take or refuse: a bool stays a bool, "0.6" a str."""
    return {k: _plain(v, real=k in REAL_SETTINGS) for k, v in settings.items()}


def _plain(v, real: bool):
    """One value of plain_numbers: a float if real, else an int for an integer."""
    if isinstance(v, np.ndarray):
        v = v.tolist()  # NumPy's numbers become Python's
    if isinstance(v, (list, tuple)):
        return [_plain(x, real) for x in v]
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        return v
    if real:
        try:
            return float(v)
        except OverflowError:  # 10**400: no float holds it, and verdict.Config refuses it
            return v
    return int(v) if isinstance(v, numbers.Integral) else v


def settings_record(model: str, judge_model: str | None = None, seed: int = 0, **settings) -> dict:
    """What decides a VerdictVLM's predictions, JSON-ready: the models, the reasoner's seed and
    every field of verifier.Settings (defaults filled in), each number spelled as plain_numbers
    spells it. ValueError naming the keyword for a model or judge_model that is not a model's name,
    a seed that is not an integer >= 0, and a keyword that names no setting."""
    for key, value in (("model", model), ("judge_model", judge_model)):
        if not (isinstance(value, str) and value.strip()) and (key, value) != ("judge_model", None):
            raise ValueError(
                f"{key} must be the served model's name, a non-empty string; got {key}={value!r}"
            )
    seed = _plain(seed, real=False)
    if not verifier._count(seed, 0):
        raise ValueError(f"seed must be an integer >= 0, got seed={seed!r}")
    kw = plain_numbers({k: v for k, v in settings.items() if k not in NOT_SETTINGS})
    return {
        "model": model,
        "judge_model": judge_model or model,
        "seed": seed,
        **verifier.Settings.of(**kw).record(),
    }


def settings_digest(record: dict) -> str:
    """The first 8 hex digits of the sha256 of a settings_record's canonical JSON. A setting added
    later (rundir.ADDED) is left out at its ADDED value, so names given before it still hold."""
    kept = {k: v for k, v in record.items() if k not in ADDED or v != ADDED[k]}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:8]


def spelled_digest(record: dict, settings: dict) -> str | None:
    """The digest entry_name gave a record's settings before numbers were spelled one way: the
    settings hashed as given (tau=1 as 1, not 1.0). None when they have no JSON form (a NumPy
    number). A name that holds it names the same settings, so it still holds."""
    kw = {k: v for k, v in settings.items() if k not in NOT_SETTINGS}
    try:
        given = verifier.Settings.of(**kw).record()
        return settings_digest({k: record[k] for k in ("model", "judge_model", "seed")} | given)
    except (TypeError, ValueError):
        return None


def run_digest(run: dict):
    """A sidecar run's settings digest, from its settings spelled as plain_numbers spells them
    (a run recorded before that holds them as given); its recorded digest if it has none."""
    if isinstance(run.get("settings"), dict):
        return settings_digest(plain_numbers(run["settings"]))
    return run.get("digest")


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
    record per run (process) in "runs", updated after every item.

    Every update reads the file, replaces this run's record and writes the file whole, under an
    exclusive lock on <file>.lock that holds across processes (fcntl.flock), so that the runs of
    several processes on one entry keep each other's records. The new file is written to a
    temporary name of this process's own, created exclusively in the same folder, then renamed over
    the old one: a reader sees the old file or the new, never a torn one. Without fcntl (Windows),
    the writes stay whole, but two processes that update at the same moment may drop each other's
    latest count until their next update.

    A file whose earlier runs had other settings gets a warning on stderr: VLMEvalKit's --reuse
    would have taken their predictions (name entries with entry_name). A file that cannot be read
    as a sidecar or cannot be written gets one warning, is left as it is, and VLMEvalKit's run goes
    on without recording its counts there."""

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
        path = self.path(dataset)
        run = {**self.run, "digest": self.digest, "settings": self.settings, "counts": counts}
        with self._lock:
            try:
                os.makedirs(self.dir, exist_ok=True)
                with _locked(path + ".lock"):
                    others = [r for r in self._runs(path) if r.get("run") != run["run"]]
                    body = {"format": SIDECAR_FORMAT, "entry": self.name, "dataset": dataset}
                    _write_atomic(path, json.dumps(body | {"runs": others + [run]}, indent=1))
                mixed = any(run_digest(r) != self.digest for r in others)
            except (OSError, ValueError, TypeError, RecursionError) as e:
                self._warn(
                    path,
                    f"cannot write {path}: {one_line(str(e))}; the run goes on without "
                    "recording its counts",
                )
                return
        if mixed:
            self._warn(
                path + "/digest",
                f"{path} holds runs with other settings under the name {self.name}: "
                "VLMEvalKit's --reuse takes earlier predictions by that name; name entries "
                "with verdict_lab.vlmevalkit.entry",
            )

    @staticmethod
    def _runs(path: str) -> list:
        """The runs recorded in the file ([] when there is none yet); ValueError when it is not a
        sidecar: not JSON, nested deeper than json reads, another format, or "runs" not a list."""
        try:
            with open(path, encoding="utf-8") as fh:
                body = json.load(fh)
        except FileNotFoundError:
            return []
        except (ValueError, RecursionError) as e:  # a UnicodeDecodeError is a ValueError
            raise ValueError(f"it is damaged ({e}): {DAMAGED}") from None
        if not (isinstance(body, dict) and body.get("format") == SIDECAR_FORMAT):
            raise ValueError(f"it is not a {SIDECAR_FORMAT} file")
        runs = body.get("runs", [])
        if not isinstance(runs, list):
            raise ValueError(
                f'it is damaged ("runs" is {type(runs).__name__}, not a list): {DAMAGED}'
            )
        return [r for r in runs if isinstance(r, dict)]

    def _warn(self, key: str, text: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            print(f"VerdictVLM: warning: {text}", file=sys.stderr)


@contextlib.contextmanager
def _locked(path: str):
    """An exclusive lock on the file at path (created if need be, never through a symlink), held
    across processes until the block ends (fcntl.flock; closing the file releases it). Without
    fcntl (Windows), or on a file system that has no locks, no lock."""
    if fcntl is None:
        yield
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as e:
            # A file system without locks: the writes stay whole, as on Windows.
            if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP):
                raise
        yield
    finally:
        os.close(fd)


COUNTS = ("items", "failed", "steps", "fallbacks", "calls", "requests", "cache_hits", "call_tokens")


def check_keywords(
    timeout, retries, retry, concurrency, api_key_env, cache, work_dir, verbose
) -> None:
    """VerdictVLM's keywords that are not settings, checked: ValueError naming the keyword and its
    value for a wrong kind or range (a key given as api_key_env by mistake is not shown)."""
    if not (isinstance(api_key_env, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", api_key_env)):
        shown = "(a str, not shown)" if isinstance(api_key_env, str) else repr(api_key_env)
        raise ValueError(
            "api_key_env must name the variable that holds the API key, such as OPENAI_API_KEY; "
            f"got api_key_env={shown}"
        )
    real = isinstance(timeout, numbers.Real) and not isinstance(timeout, bool)
    path = (str, os.PathLike)
    checks = (
        # threading's own bound on a wait; NaN fails the range too
        (
            "timeout",
            timeout,
            real and 0 < timeout <= threading.TIMEOUT_MAX,
            "a number of seconds > 0",
        ),
        (
            "retries",
            retries,
            retries is None or verifier._count(retries, 0),
            "an integer >= 0 or None",
        ),
        ("retry", retry, retry is None or verifier._count(retry, 0), "an integer >= 0 or None"),
        ("concurrency", concurrency, verifier._count(concurrency, 1), "an integer >= 1"),
        ("cache", cache, cache is None or isinstance(cache, path), "a file's path or None"),
        ("work_dir", work_dir, work_dir is None or isinstance(work_dir, path), "a path or None"),
        ("verbose", verbose, isinstance(verbose, bool), "True or False"),
    )
    for key, value, ok, what in checks:
        if not ok:
            raise ValueError(f"{key} must be {what}, got {key}={value!r:.80}")


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
        # The models and the seed are checked by settings_record, the settings by Settings.
        check_keywords(timeout, retries, retry, concurrency, api_key_env, cache, work_dir, verbose)
        self.record = settings_record(model, judge_model, seed, **settings)
        self.settings = verifier.Settings.of(**plain_numbers(settings))
        seed = self.record["seed"]  # a NumPy integer as an int
        if retries is not None and retry is not None:
            raise ValueError(
                "give retry (VLMEvalKit's --retry sets it) or retries, not both: "
                f"{retry}, {retries}"
            )
        self.sidecar = self._sidecar(name, work_dir, settings)
        store = Cache(cache) if cache else None
        tries = int(
            4 if retry is None and retries is None else retry if retry is not None else retries
        )
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

    def _sidecar(self, name: str | None, work_dir: str | None, settings: dict) -> Sidecar | None:
        """The Sidecar of a named model (None without a name); ValueError for a name that carries
        another settings digest than this model's (settings: the keywords as given). A name that
        carries the digest of the settings as spelled (spelled_digest) holds too."""
        if name is None:
            return None
        if not (isinstance(name, str) and name.strip()):
            raise ValueError(f"name must be an entry's name, got name={name!r}")
        m, digest = DIGEST.search(name), settings_digest(self.record)
        if m and m.group(1) not in (digest, spelled_digest(self.record, settings)):
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
        trace, error = self.answer(question, images, dataset)
        if error is not None:
            print(f"VerdictVLM ({dataset}): {error}", file=sys.stderr)
            return f"{FAIL_MSG} ({one_line(str(error))})"
        return final_output(trace)

    def answer(self, question: str, images: list, dataset=None) -> tuple:
        """(the item's trace, None), or (None, the judges.EndpointError) when the endpoint fails
        after its retries, for one question and its images (paths, bytes or PIL images, passed as
        they are), on forks of the clients; counted under `dataset` (and in its Sidecar). VerdictVLM
        and the lmms-eval model (verdict_lab/lmms_eval.py) run every item through here."""
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
        if self.verbose and trace is not None:
            tot = trace.totals()
            print(
                f"VerdictVLM ({dataset}): {tot['steps']} steps, {tot['fallbacks']} fallbacks, "
                f"{usage['calls']} calls, stopped {trace.stopped}",
                file=sys.stderr,
            )
        return trace, error

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
