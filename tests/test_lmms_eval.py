"""The lmms-eval model (verdict_lab/lmms_eval.py) against a scripted loopback server: first against
a stand-in of lmms-eval's interface, written here from the facts read in its code
(EvolvingLMMs-Lab/lmms-eval@75571cfe, PyPI 0.7.3): the base class lmms, ModelManifest,
simple_parse_args_string and the request args of a simple model; then, when an lmms-eval is
installed (here, or in the interpreter $VERDICT_LMMS_EVAL_PYTHON names), the real
`python -m lmms_eval` on a small MMStar-shaped task read through --include_path, whose printed
accuracy must be the one the scripted replies imply."""

import dataclasses
import importlib
import json
import os
import re
import subprocess
import sys
import threading
import tomllib
import types
from pathlib import Path

import pytest
from PIL import Image

from verdict_lab.layouts import role_of
from verdict_lab.loopback import chat_response

ROOT = Path(__file__).resolve().parent.parent


# ----------------------------------------------------------------------------- the stand-in


def _convert(v: str):
    """lmms-eval's handle_arg_string: true/false -> bool, digits -> int, a float -> float."""
    if v.lower() in ("true", "false"):
        return v.lower() == "true"
    if v.isnumeric():
        return int(v)
    try:
        return float(v)
    except ValueError:
        return v


def simple_parse_args_string(text: str) -> dict:
    """lmms-eval's --model_args parsing: split on commas outside quotes and brackets, then
    key=value, each value converted."""
    parts, cur, depth, quote = [], "", 0, None
    for c in text.strip():
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        cur += c
    parts += [cur] if cur else []
    return {k: _convert(v) for k, v in (p.split("=", 1) for p in parts)}


class lmms:  # noqa: N801 (lmms-eval's name)
    is_simple = True

    def __init__(self):
        self._rank, self._world_size, self.task_dict = 0, 1, {}

    @classmethod
    def create_from_arg_string(cls, arg_string, additional_config=None):
        extra = {k: v for k, v in (additional_config or {}).items() if v is not None}
        return cls(**simple_parse_args_string(arg_string), **extra)


@dataclasses.dataclass(frozen=True)
class ModelManifest:
    model_id: str
    simple_class_path: str | None = None
    chat_class_path: str | None = None


class Instance:
    def __init__(self, args):
        self.args = args


@pytest.fixture
def lmms_module(monkeypatch):
    """verdict_lab.lmms_eval imported over the stand-in, put in sys.modules for the test."""
    mods = {
        n: types.ModuleType(n)
        for n in ("lmms_eval", "lmms_eval.api", "lmms_eval.models", "lmms_eval.utils")
    }
    mods["lmms_eval.api.model"] = types.ModuleType("lmms_eval.api.model")
    mods["lmms_eval.models.registry_v2"] = types.ModuleType("lmms_eval.models.registry_v2")
    mods["lmms_eval.api.model"].lmms = lmms
    mods["lmms_eval.models.registry_v2"].ModelManifest = ModelManifest
    mods["lmms_eval.utils"].simple_parse_args_string = simple_parse_args_string
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.delitem(sys.modules, "verdict_lab.lmms_eval", raising=False)
    module = importlib.import_module("verdict_lab.lmms_eval")
    yield module
    sys.modules.pop("verdict_lab.lmms_eval", None)


# The scripted server: the reasoner answers "Final answer: <letter>", the letter the question names
# after "pick"; the judges give 8/9 to every step (accepted: s̄* = 0.889 > τ, Δ* = 0).
def script(body, path):
    text = "\n".join(
        c if isinstance(c, str) else "".join(p.get("text", "") for p in c)
        for c in (m["content"] for m in body["messages"])
    )
    if role_of(body["messages"]) == "reasoner":
        letter = re.search(r"pick (\w)", text).group(1)
        return chat_response([f"Final answer: {letter}"] * body.get("n", 1))
    return chat_response(json.dumps({"reason": "ok", "score": 8}))


def images_per_request(srv) -> list:
    return [
        sum(p.get("type") == "image_url" for p in c["messages"][1]["content"])
        if isinstance(c["messages"][1]["content"], list)
        else 0
        for c in srv.chats
    ]


DOCS = [  # MMStar's fields; the reasoner picks the letter after "pick"
    {"question": "Which side? pick A\nA. left\nB. right", "answer": "A", "colour": (200, 0, 0)},
    {"question": "Which side? pick B\nA. left\nB. right", "answer": "B", "colour": (0, 200, 0)},
    {"question": "Which side? pick A\nA. left\nB. right", "answer": "B", "colour": (0, 0, 200)},
]


def stand_in_task(m):
    """(task_dict, requests) as lmms-eval's evaluator gives a simple model: every request of the
    task at once, its images from doc_to_visual(task_dict[task][split][doc_id])."""
    docs = [{**d, "image": Image.new("RGB", (24, 16), d["colour"])} for d in DOCS]
    seen = []

    def doc_to_visual(doc):
        seen.append(doc["image"])
        return [doc["image"]]

    reqs = [
        Instance((d["question"], {"until": ["\n\n"]}, doc_to_visual, i, "mmstar", "val"))
        for i, d in enumerate(docs)
    ]
    m.task_dict = {"mmstar": {"val": docs}}
    return reqs, seen


def test_the_manifest_names_the_class_and_pyproject_registers_it(lmms_module):
    m = lmms_module.manifest()
    assert (m.model_id, m.simple_class_path) == ("verdict", "verdict_lab.lmms_eval.Verdict")
    entry = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    assert entry["lmms_eval.models"] == {"verdict": "verdict_lab.lmms_eval:manifest"}
    cls = lmms_module.Verdict
    assert issubclass(cls, lmms) and cls.is_simple is True


def test_a_task_runs_in_order_with_pil_images_as_they_are(lmms_module, loopback, tmp_path):
    srv = loopback(script)
    args = f"base_url={srv.url},model=qwen-loopback,n=3,lam=[1.5,1.0,0.8],num_concurrent=3"
    m = lmms_module.Verdict.create_from_arg_string(
        args + f",work_dir={tmp_path}", {"batch_size": 1, "max_batch_size": None, "device": None}
    )
    reqs, seen = stand_in_task(m)
    assert m.generate_until(reqs) == ["A", "B", "A"]  # in the requests' order
    assert len(seen) == 3 and images_per_request(srv) == [1] * len(srv.chats)
    # 1 reasoner request (n = 3) and 3 judges for the one distinct candidate, per item
    assert len(srv.chats) == 3 * (1 + 3)
    side = json.loads((tmp_path / m.name / f"{m.name}_mmstar_verdict.json").read_text())
    assert side["runs"][0]["counts"]["items"] == 3 and side["runs"][0]["counts"]["failed"] == 0
    assert side["runs"][0]["settings"]["lam"] == [1.5, 1.0, 0.8] and m.name.startswith("verdict-s")
    with pytest.raises(NotImplementedError):
        m.loglikelihood(reqs)


def test_lam_as_json_or_bars_names_the_same_entry_and_model_comes_from_the_server(
    lmms_module, loopback
):
    srv = loopback(script, model="only-model")
    a = lmms_module.Verdict.create_from_arg_string(f"base_url={srv.url},lam='[1.5, 1.0, 0.8]'")
    b = lmms_module.Verdict.create_from_arg_string(f"base_url={srv.url},lam=1.5|1.0|0.8")
    assert a.name == b.name and a.vlm.reasoner.model == "only-model"
    assert a.vlm.settings.lam == (1.5, 1.0, 0.8)
    none = lmms_module.Verdict.create_from_arg_string(f"base_url={srv.url},max_calls=None")
    assert none.vlm.settings.max_calls is None


@pytest.mark.parametrize(
    "args,says",
    [
        (",lam=1.5;1.0", "lam must be JSON such as [1.5,1.0,0.8] or 1.5|1.0|0.8, got '1.5;1.0'"),
        (",lam=[1.5,1.0]", "lam must hold 3 values"),
        (",n=0", "n must be an integer >= 1"),
        (",tau=high", "tau must be in [0, 1]"),
        (",colour=red", "unknown setting 'colour'"),
        (",num_concurrent=0", "num_concurrent must be an integer >= 1, got 0"),
    ],
)
def test_bad_model_args_fail_at_construction_with_one_line(lmms_module, loopback, args, says):
    srv = loopback(script)
    with pytest.raises(ValueError) as info:
        lmms_module.Verdict.create_from_arg_string(f"base_url={srv.url},model=m" + args)
    assert says in str(info.value) and "\n" not in str(info.value)
    assert srv.chats == []


def test_model_is_required_when_the_server_names_several(lmms_module, monkeypatch):
    class Reply:
        def raise_for_status(self):
            pass

        def json(self):
            return {"data": [{"id": "a"}, {"id": "b"}]}

    monkeypatch.setattr(lmms_module.requests, "get", lambda url, **kw: Reply())
    with pytest.raises(ValueError, match=r"names 2 models \(a, b\); name one with model="):
        lmms_module.served_model("http://127.0.0.1:9/v1")


def test_rule_base_runs_the_reasoner_alone(lmms_module, loopback):
    srv = loopback(script)
    m = lmms_module.Verdict.create_from_arg_string(f"base_url={srv.url},model=q,rule=base")
    reqs, _ = stand_in_task(m)
    assert m.generate_until(reqs) == ["A", "B", "A"]
    assert [role_of(c["messages"]) for c in srv.chats] == ["reasoner"] * 3
    assert all(c.get("n", 1) == 1 for c in srv.chats)


def test_a_failed_item_answers_empty_is_counted_and_said_once(lmms_module, loopback, capsys):
    lock, calls = threading.Lock(), []

    def failing(body, path):
        with lock:
            calls.append(1)
        if "pick B" in json.dumps(body):
            return 400, {"error": {"message": "context length exceeded"}}
        return script(body, path)

    srv = loopback(failing)
    m = lmms_module.Verdict.create_from_arg_string(f"base_url={srv.url},model=q,retries=0")
    reqs, _ = stand_in_task(m)
    reqs.append(Instance(("Which? pick A", {}, lambda doc: ["not-an-image"], 0, "mmstar", "val")))
    reqs.append(Instance(("Which? pick A", {}, lambda doc: [object()], 0, "mmstar", "val")))
    assert m.generate_until(reqs) == ["A", "", "A", "", ""]
    assert m.failed == 3 and m.vlm.by_dataset["mmstar"]["failed"] == 3
    err = capsys.readouterr().err
    assert err.count("failed:") == 1 and "3 items failed so far" in err


# ----------------------------------------------------------------------------- the real lmms-eval


def lmms_python() -> str | None:
    """An interpreter with lmms-eval installed: $VERDICT_LMMS_EVAL_PYTHON, or this one."""
    named = os.environ.get("VERDICT_LMMS_EVAL_PYTHON")
    if named:
        return named
    return sys.executable if importlib.util.find_spec("lmms_eval") else None


TASK_YAML = """task: "mmstar_local"
dataset_path: parquet
dataset_kwargs:
  data_files:
    val: {parquet}
test_split: val
output_type: generate_until
doc_to_visual: !function utils.mmstar_doc_to_visual
doc_to_text: !function utils.mmstar_doc_to_text
doc_to_target: "answer"
process_results: !function utils.mmstar_process_results
metric_list:
  - metric: coarse perception
    aggregation: !function utils.mmstar_aggregate_results
    higher_is_better: true
  - metric: average
    aggregation: !function utils.mmstar_aggregate_results
    higher_is_better: true
lmms_eval_specific_kwargs:
  default:
    pre_prompt: ""
    post_prompt: "\\nAnswer with the option's letter from the given choices directly"
metadata:
  - version: 0.0
"""
# The docs as MMStar's dataset holds them (an Image feature), written by `datasets` itself.
MAKE_PARQUET = """
import io, json, sys
from datasets import Dataset, Features, Image, Value
from PIL import Image as PIL
docs = json.loads(sys.argv[2])
for i, d in enumerate(docs):
    d["image"] = PIL.new("RGB", (24, 16), tuple(d.pop("colour")))
    d.update(index=i, category="coarse perception", l2_category="image style & quality")
features = Features({"question": Value("string"), "answer": Value("string"), "image": Image(),
                     "index": Value("int64"), "category": Value("string"),
                     "l2_category": Value("string")})
Dataset.from_list(docs, features=features).to_parquet(sys.argv[1])
"""


def entry_point_dist(where: Path) -> None:
    """A dist-info with pyproject.toml's lmms_eval.models entry point, as `pip install <checkout>`
    writes it, so that the checkout on PYTHONPATH is found as installed."""
    entry = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    info = where / "verdict_consensus-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: verdict-consensus\nVersion: 0.1.0\n"
    )
    lines = [f"{k} = {v}" for k, v in entry["lmms_eval.models"].items()]
    (info / "entry_points.txt").write_text("[lmms_eval.models]\n" + "\n".join(lines) + "\n")


@pytest.mark.skipif(
    lmms_python() is None, reason="lmms-eval is not installed (pip install .[lmms-eval])"
)
def test_the_real_lmms_eval_runs_verdict_on_an_mmstar_shaped_task(loopback, tmp_path):
    python, task = lmms_python(), tmp_path / "tasks" / "mmstar_local"
    task.mkdir(parents=True)
    parquet = tmp_path / "mmstar.parquet"
    docs = [{k: list(v) if k == "colour" else v for k, v in d.items()} for d in DOCS]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    subprocess.run(
        [python, "-c", MAKE_PARQUET, str(parquet), json.dumps(docs)], check=True, env=env
    )
    (task / "mmstar_local.yaml").write_text(TASK_YAML.format(parquet=parquet))
    (task / "utils.py").write_text("from lmms_eval.tasks.mmstar.utils import *  # noqa: F403\n")
    entry_point_dist(tmp_path / "site")
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "site"), str(ROOT)])
    srv = loopback(script)
    out = tmp_path / "out"
    argv = [python, "-m", "lmms_eval", "--model", "verdict", "--tasks", "mmstar_local"]
    argv += ["--model_args", f"base_url={srv.url},model=qwen-loopback,n=3,lam=1.5|1.0|0.8"]
    argv += ["--include_path", str(tmp_path / "tasks"), "--output_path", str(out)]
    run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    # The scripted replies: items 0 and 1 answered right, item 2 ("pick A", answer B) wrong: 2/3.
    row = re.search(r"\|mmstar_local\|.*?\|average\s*\|[^|]*\|\s*([0-9.]+)\|", run.stdout)
    assert row is not None, run.stdout[-3000:]
    assert float(row.group(1)) == pytest.approx(2 / 3, abs=1e-4)
    assert images_per_request(srv) == [1] * len(srv.chats) and len(srv.chats) == 3 * 4
    sidecars = list(out.glob("verdict-s*/verdict-s*_mmstar_local_verdict.json"))
    assert len(sidecars) == 1
    counts = json.loads(sidecars[0].read_text())["runs"][0]["counts"]
    assert counts["items"] == 3 and counts["failed"] == 0


@pytest.mark.live
def test_one_item_with_an_image_against_the_live_server(lmms_module, live):
    # One MMStar-shaped request, its PIL image sent in every request to the live server.
    m = lmms_module.Verdict.create_from_arg_string(
        f"base_url={live.url},model=tiny,n=2,max_steps=1,max_tokens=24"
    )
    image = Image.new("RGB", (32, 24), (200, 30, 30))
    m.task_dict = {"mmstar": {"val": [{"image": image}]}}
    req = Instance(
        ("What colour is it?\nA. red\nB. blue", {}, lambda d: [d["image"]], 0, "mmstar", "val")
    )
    (answer,) = m.generate_until([req])
    assert isinstance(answer, str) and m.failed == 0
    assert m.vlm.by_dataset["mmstar"]["items"] == 1
    assert live.mine and all(
        sum(p.get("type") == "image_url" for p in e.body["messages"][1]["content"]) == 1
        for e in live.mine
    )
