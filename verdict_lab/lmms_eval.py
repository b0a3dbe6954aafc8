"""VERDICT as an lmms-eval model: `python -m lmms_eval --model verdict --model_args ...` runs any of
lmms-eval's tasks (the paper's: mmstar, blink, cv_bench_2d, cv_bench_3d, 3dsrbench, mmmu_val,
mathvista_testmini, ai2d) through VERDICT's step-wise loop on a served reasoner and served judges.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026 (the step-wise loop, the consensus and the dual test:
verdict.run).

lmms-eval (EvolvingLMMs-Lab/lmms-eval, read at 75571cfe and checked against its PyPI release 0.7.3)
finds a model through the entry-point group `lmms_eval.models`, whose value here is `manifest`, a
ModelManifest naming the class Verdict (pyproject.toml; `pip install <checkout>[lmms-eval]`). The
class subclasses lmms_eval.api.model.lmms with is_simple = True, so each request's args are
(context, gen_kwargs, doc_to_visual, doc_id, task, split), its images
doc_to_visual(self.task_dict[task][split][doc_id]) as PIL images, and every request of a task
arrives in one generate_until call.

- One verifier: every item runs through vlmevalkit.VerdictVLM.answer, the VLMEvalKit model's own,
  built from the same settings in the same place (its constructor: verifier.Settings, the clients,
  the reply format, the Sidecar). PIL images go to the judges as they are, with no file written.
- --model_args: every keyword of VerdictVLM under its name; lam as JSON ("[1.5,1.0,0.8]", quoted
  or not) or "1.5|1.0|0.8"; "None" for an optional count. model= defaults to the one model the
  server's /v1/models names. num_concurrent: items run at once (4). batch_size, max_batch_size and
  device, which lmms-eval always passes, are accepted and not used; so is each request's
  gen_kwargs (VERDICT samples with its own settings).
- A failed item (the endpoint failed after its retries, or an image that is no image) answers ""
  (no letter, no value: lmms-eval scores it wrong), is counted, and is said once on stderr with its
  reason; the task goes on. lmms-eval 0.7.3 exits 0 even when an evaluation failed: read the
  counts.
- The Sidecar of settings and counts goes beside lmms-eval's results: <output_path>/<name>/
  <name>_<task>_verdict.json, where output_path is work_dir= or the command's --output_path and
  name is entry_name("verdict", ...), the settings' digest (none without an output path).
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed

import requests
from lmms_eval.api.model import lmms  # lmms-eval is the optional extra "lmms-eval"

from judges import DEFAULT_KEY_ENV, api_key
from verdict_lab import verifier
from verdict_lab.client import check_base_url
from verdict_lab.text import one_line
from verdict_lab.vlmevalkit import VerdictVLM, entry_name, final_output

MODEL_ID = "verdict"
FAILED = ""  # a failed item's answer: lmms-eval's scorers read no answer in it
NO_USAGE = dict.fromkeys(("calls", "requests", "cache_hits", "call_tokens"), 0)
# Settings whose value may be None, given as the text "None" on the command line.
OPTIONAL = ("judge_max_tokens", "max_calls", "judge_model", "judge_base_url", "cache", "retries")


def manifest():
    """The entry point's payload: lmms-eval's ModelManifest for `--model verdict`."""
    from lmms_eval.models.registry_v2 import ModelManifest

    return ModelManifest(model_id=MODEL_ID, simple_class_path=f"{__name__}.Verdict")


def parse_lam(value) -> tuple:
    """λ from --model_args: a list or tuple, JSON ("[1.5,1.0,0.8]") or "1.5|1.0|0.8". ValueError
    naming the value otherwise; verifier.Settings checks the numbers."""
    if isinstance(value, (list, tuple)):
        return tuple(value)
    text = value.strip().strip("'\"") if isinstance(value, str) else None
    try:
        lam = json.loads(text) if text and text[0] == "[" else [float(v) for v in text.split("|")]
    except (ValueError, AttributeError):
        lam = None
    if not (isinstance(lam, list) and all(isinstance(v, (int, float)) for v in lam)):
        raise ValueError(f"lam must be JSON such as [1.5,1.0,0.8] or 1.5|1.0|0.8, got {value!r}")
    return tuple(lam)


def served_model(base_url: str, api_key_env: str = DEFAULT_KEY_ENV, timeout: float = 30.0) -> str:
    """The one model GET <base_url>/models names; ValueError naming what the server said when it
    names none or several, or cannot be asked."""
    url = check_base_url(base_url) + "/models"
    key = api_key(api_key_env)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        r = requests.get(url, headers=headers, timeout=timeout)
        r.raise_for_status()
        ids = [m["id"] for m in r.json()["data"]]
    except (requests.RequestException, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"model= is not given and {url} did not list models ({e})") from None
    if len(ids) != 1:
        raise ValueError(
            f"model= is not given and {url} names {len(ids)} models ({', '.join(map(str, ids))}); "
            "name one with model="
        )
    return ids[0]


def output_path(argv) -> str | None:
    """The --output_path of lmms-eval's command line (`--output_path X` or `--output_path=X`)."""
    for i, a in enumerate(argv):
        if a == "--output_path" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--output_path="):
            return a.split("=", 1)[1]
    return None


def model_keywords(args: dict) -> dict:
    """--model_args as VerdictVLM's keywords: lam parsed, "None" as None for an optional setting;
    a setting's value is left for VerdictVLM and verifier.Settings to check."""
    kw = dict(args)
    if "lam" in kw:
        kw["lam"] = parse_lam(kw["lam"])
    for name in OPTIONAL:
        if isinstance(kw.get(name), str) and kw[name].strip().lower() in ("none", "null", ""):
            kw[name] = None
    return kw


class Verdict(lmms):
    """VERDICT with lmms-eval's simple model interface (see the module's docstring)."""

    is_simple = True

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        num_concurrent: int = 4,
        work_dir: str | None = None,
        batch_size=None,
        max_batch_size=None,
        device=None,
        **model_args,
    ):
        super().__init__()
        if not verifier._count(num_concurrent):
            raise ValueError(f"num_concurrent must be an integer >= 1, got {num_concurrent!r}")
        kw = model_keywords(model_args)
        if model is None:
            model = served_model(base_url, kw.get("api_key_env", DEFAULT_KEY_ENV))
        name = entry_name(MODEL_ID, model=model, **kw)  # a keyword that names no setting fails here
        out = work_dir or output_path(sys.argv)
        named = {"name": name, "work_dir": out} if out else {}
        self.vlm = VerdictVLM(base_url, model, **named, **kw)
        self.name, self.num_concurrent = name, num_concurrent
        self.failed, self._said = 0, False

    # lmms-eval's model interface (lmms_eval/api/model.py) ----------------------------------------

    def generate_until(self, requests_) -> list:
        """The chain's final output for each request, in the requests' order; num_concurrent items
        at once, with a progress bar on stderr."""
        args = [r.args for r in requests_]
        out = [FAILED] * len(args)
        bar = _progress(len(args))
        with ThreadPoolExecutor(max(1, min(self.num_concurrent, len(args)))) as pool:
            running = {pool.submit(self._one, *a): i for i, a in enumerate(args)}
            for done in as_completed(running):
                out[running[done]] = done.result()
                bar.update(1)
        bar.close()
        if self.failed:
            print(
                f'verdict (lmms-eval): {self.failed} items failed so far; each answered "" and '
                "scores as wrong (counts in the sidecar)",
                file=sys.stderr,
            )
        return out

    def _one(self, context, gen_kwargs, doc_to_visual, doc_id, task, split) -> str:
        """One request's answer; FAILED (counted, the first said on stderr) when it fails."""
        try:
            images = _images(doc_to_visual(self.task_dict[task][split][doc_id]))
            trace, error = self.vlm.answer(context, images, task)
        except Exception as e:  # anything else an item raises fails that item; the task goes on
            self.vlm._count(task, None, NO_USAGE)  # VerdictVLM.answer counts only its own failures
            return self._fail(task, doc_id, e)
        return self._fail(task, doc_id, error) if error is not None else final_output(trace)

    def _fail(self, task, doc_id, error: BaseException) -> str:
        with self.vlm._lock:
            self.failed += 1
            first, self._said = not self._said, True
        if first:
            reason = one_line(str(error)) or type(error).__name__
            print(
                f'verdict (lmms-eval): {task} item {doc_id} failed: {reason}; it answers "" '
                "(scored wrong), and later failures are counted",
                file=sys.stderr,
            )
        return FAILED

    def loglikelihood(self, requests_) -> list:
        raise NotImplementedError("verdict generates chains; it computes no loglikelihood")

    def generate_until_multi_round(self, requests_) -> list:
        raise NotImplementedError("verdict answers one round per item")


def _images(visuals) -> list:
    """doc_to_visual's result as a list of images: PIL images (passed as they are) or image file
    paths; None entries dropped. ValueError for anything else (video, audio)."""
    from PIL import Image

    visuals = visuals if isinstance(visuals, (list, tuple)) else [visuals]
    images = [v for v in visuals if v is not None]
    for v in images:
        if not isinstance(v, (Image.Image, str)):
            raise ValueError(f"verdict takes images (PIL or a file path), got {type(v).__name__}")
    return images


class _Lines:
    """A progress counter on stderr when tqdm is not installed: a line at each tenth."""

    def __init__(self, total: int):
        self.total, self.n = total, 0

    def update(self, k: int) -> None:
        self.n += k
        if self.total and (self.n == self.total or self.n % max(1, self.total // 10) == 0):
            print(f"verdict: {self.n}/{self.total} items", file=sys.stderr)

    def close(self) -> None:
        pass


def _progress(total: int):
    try:
        from tqdm import tqdm
    except ImportError:
        return _Lines(total)
    return tqdm(total=total, desc="verdict", file=sys.stderr)
