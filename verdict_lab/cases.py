"""The case viewer: one self-contained HTML page per run, OUT/cases.html, that steps through the
chains where VERDICT and the base model differ.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026. The paper's case viewer steps "through cases where the
base model drifts away from the specific scene", and through "one honest failure case where
VERDICT overcorrects": the image, the base chain, the verified chain, and at each step what the
judges said and why the step was taken. This page shows the same for every (item, seed) of a run:

- the list of cases, filtered by benchmark, method pair (A against B) and outcome (A right and B
  wrong, the reverse, both right, both wrong), by seed, and by "a fallback step in A's chain"; the
  counts of right answers per method, file and seed beside summary.json's accuracy;
- one case: its images, the question as the reasoner read it (options included), the correct
  answer, and each method's chain side by side, its final answer marked right or wrong;
- one step: every candidate with its raw scores ŝ per judge, the consensus s* (the fixed point of
  (1 + λ_i) s_i − (1/(m−1)) Σ_{j≠i} s_j = λ_i ŝ_i), s̄* = (1/m) Σ s_i* and
  Δ* = (1/m) Σ |s_i* − s̄*|, whether it passed the rule's filter (VERDICT: s̄* > τ and Δ* < ε), the
  chosen one and why, the judges' reasons when the trace recorded them, and the step's decision
  plane (Δ*, s̄*) with the acceptance region Δ* < ε, s̄* > τ shaded;
- keys: ← and → move through the steps, ↑ and ↓ through the cases; the URL's fragment names the view
  (#data=…&id=…&seed=…&method=…&step=…, and the filters), so a link opens one case at one step.

The page is one file that needs no network: its style and script inline, each image downscaled to at
most IMAGE_SIZE pixels on its longer side and embedded as a JPEG data URL (an image shared by items
is embedded once), the run's data as JSON of format PAGE_FORMAT in a script element. Numbers are the
trace's, exactly (rounded to 3 decimals for display only; each cell keeps the exact value in its
data-value attribute). Text from a run (candidates, reasons, questions) is data: the JSON escapes
<, > and &, and the page's script puts every text in with textContent, never as markup. Steps that
several methods share (the chains coincide through the response cache) are stored once.

    python -m verdict_lab.cases RUN_DIR [--data FILE ...]        # rebuild RUN_DIR/cases.html
    python -m verdict_lab.cases TRACE.json [--image PATH] [--answer B] [--out PAGE.html]

A run directory keeps no image: evaluate writes the page with the images of the items it ran, and a
rebuild takes them from --data, the run's benchmark files, read as the run read them (run.json's
inputs); an item whose input differs from the one its rows ran (chains.input_digest) shows no image.
Whatever is missing (an image, a trace, summary.json) is said in its place on the page.
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import json
import math
import os
import sys
from concurrent.futures import ThreadPoolExecutor

from PIL import Image

import verdict
from verdict_lab import cli
from verdict_lab.cases_page import PAGE
from verdict_lab.images import load as load_image, to_rgb

PAGE_FORMAT = "verdict-cases/1"
IMAGE_SIZE = 384  # the longer side of an embedded image, in pixels
JPEG_QUALITY = 80
# Why a rule took its candidate, in verdict.select's words (its docstring defines each rule).
RULE_WHY = {
    "verdict": "accepted (s̄* > τ and Δ* < ε), the highest s̄* among the accepted",
    "mean": "the highest raw mean",
    "min": "the highest minimum raw score",
    "max": "the highest maximum raw score",
    "majority": "the most judges with a raw score above τ, ties broken by the raw mean",
    "variance": "the highest raw mean among candidates whose raw standard deviation is below ε",
    "raw-dual": "accepted on the raw scores (raw mean > τ and raw Δ < ε), the highest raw mean",
    "no-filter": "the highest s̄*, with no filter",
    "no-rank": "the first accepted candidate in sampling order",
}
FALLBACK_WHY = {
    "verdict": "fallback: no candidate accepted; the highest s̄* − Δ*",
    "raw-dual": "fallback: no candidate accepted; the highest raw mean − raw Δ",
    "no-rank": "none accepted: the first candidate",
    "variance": "none under the spread threshold: the highest raw mean overall",
}


# ----------------------------------------------------------------------------- images


def thumbnail(image, size: int = IMAGE_SIZE) -> str:
    """A JPEG data URL of an image (bytes, a path or a PIL image), upright, in RGB, scaled down so
    that its longer side is at most `size` pixels (never up). ValueError naming the image if it
    cannot be read."""
    if size < 16:  # A smaller picture shows nothing.
        raise ValueError(f"the image size must be at least 16 pixels, got {size}")
    img = to_rgb(load_image(image))
    img.thumbnail((size, size), Image.Resampling.BILINEAR)  # twice as fast as bicubic here
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=JPEG_QUALITY)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


class Images:
    """The page's image table: each distinct image once, as a data URL; an item names images by
    their index in it, or by the text that says why it has none."""

    def __init__(self, size: int = IMAGE_SIZE):
        self.size, self.urls, self.index, self.ready = size, [], {}, {}

    @staticmethod
    def key(image) -> str:
        """An image's identity: the hash of its bytes, or its file's real path."""
        if isinstance(image, (bytes, bytearray)):
            return hashlib.sha256(image).hexdigest()
        return f"path:{os.path.realpath(image)}"

    def _scaled(self, image) -> str:
        """thumbnail(image), or the line that says why it cannot be shown."""
        try:
            return thumbnail(image, self.size)
        except (ValueError, OSError) as e:
            return f"image not shown: {e}"

    def prepare(self, images: list) -> None:
        """Scale the images not yet scaled, a thread per core (Pillow decodes, scales and encodes
        without holding the GIL); add() then takes them from here."""
        todo = {self.key(im): im for im in images}
        todo = {k: im for k, im in todo.items() if k not in self.ready}
        with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
            self.ready.update(zip(todo, pool.map(self._scaled, todo.values())))

    def add(self, image) -> int | str:
        """The index of `image` (bytes or a path) in the table, or, when it cannot be shown, a line
        that says why."""
        key = self.key(image)
        if key not in self.index:
            url = self.ready[key] if key in self.ready else self._scaled(image)
            if not url.startswith("data:"):
                return url
            self.urls.append(url)
            self.index[key] = len(self.urls) - 1
        return self.index[key]


# ----------------------------------------------------------------------------- steps and rows


def why(step: dict, rule: str) -> str:
    """Why the step's candidate was taken, in one line: unverified (no judge), revised, fallback,
    or the rule's own reason."""
    if not step.get("verified", True) and not any(step.get("s_hat") or [[]]):
        return "unverified: the reasoner alone, its first candidate"
    revision = step.get("revision")
    if revision and revision.get("taken"):
        return "revised: no candidate passed; the reviser's step passed and was taken"
    if step.get("fallback"):
        said = FALLBACK_WHY.get(rule, "fallback: no candidate passed the rule's filter")
        return said + ("; the reviser's step did not pass" if revision else "")
    if not step.get("verified", True):
        return "no candidate had two or more judges' scores: the first candidate"
    return RULE_WHY.get(rule, f"chosen by the rule {rule}")


def slim_step(step: dict, rule: str) -> dict:
    """What the page shows of one step of a trace: its numbers as the trace holds them, the chosen
    text, why, and the judges' reasons ([n][m], None where none) when any was recorded."""
    calls = step.get("calls") or []
    reasons = [[(c or {}).get("reason") or None for c in row] for row in calls]
    revision = step.get("revision")
    chosen = (
        revision["candidate"]
        if revision and revision.get("taken")
        else step["candidates"][step["index"]]
    )
    keys = ("candidates", "s_hat", "s_star", "s_bar_star", "delta_star", "accepted", "index")
    return {
        **{k: step[k] for k in keys},
        "fallback": bool(step.get("fallback")),
        "verified": bool(step.get("verified", True)),
        "chosen": chosen,
        "why": why(step, rule),
        "reasons": reasons if any(r for row in reasons for r in row) else None,
        "revision": _slim_revision(revision),
    }


def _slim_revision(revision: dict | None) -> dict | None:
    """A step's revision (loop.Revision.to_dict) without its usage and calls."""
    if not revision:
        return None
    keys = ("candidate", "s_hat", "s_star", "s_bar_star", "delta_star", "taken")
    return {k: revision.get(k) for k in keys}


class Steps:
    """The page's step table: a step that several rows share is stored once."""

    def __init__(self):
        self.steps, self.index = [], {}

    def add(self, step: dict) -> int:
        key = json.dumps(step, sort_keys=True)
        if key not in self.index:
            self.steps.append(step)
            self.index[key] = len(self.steps) - 1
        return self.index[key]


def slim_row(row: dict, steps: Steps) -> dict:
    """What the page shows of one row of results.jsonl (or of a demo's trace): its method, seed and
    answer, its steps as indices into `steps`, and `gap`, a line saying what is missing, if any."""
    trace = row.get("trace")
    out = {k: row.get(k) for k in ("method", "seed", "pred", "correct", "stopped", "error")}
    out.update(steps=[], chain=[], gap=None, notes=None)
    if not isinstance(trace, dict):
        out["gap"] = "no trace: " + (row.get("error") or "the row holds none")
        return out
    config = trace.get("config") or {}
    rule = config.get("rule", str(row.get("method")))
    out.update(tau=config.get("tau", verdict.TAU), eps=config.get("eps", verdict.EPS))
    out["judges"] = judge_names(len(config.get("lam") or verdict.STUBBORNNESS))
    out["chain"] = [str(c) for c in trace.get("chain") or []]
    meta = {k: v for k, v in (trace.get("meta") or {}).items() if k not in ("method", "seed")}
    out["notes"] = json.dumps(meta, indent=1, ensure_ascii=False) if meta else None
    if str(trace.get("format", "")).startswith("verdict-trace/"):
        try:
            out["steps"] = [steps.add(slim_step(s, rule)) for s in trace.get("steps") or []]
        except (KeyError, TypeError, IndexError, AttributeError) as e:  # a damaged trace
            out["steps"], out["gap"] = [], f"the trace's steps cannot be read ({e!r})"
    else:  # A search's record (search.py): its chosen chain, without step tables.
        out["gap"] = f"a {trace.get('format')} record: the chain it chose, without its steps"
    return out


def judge_names(m: int) -> list:
    """The judges' names: the paper's three, or judge 1..m."""
    if m == len(verdict.JUDGES):
        return list(verdict.JUDGES)
    return [f"judge {k + 1}" for k in range(m)]


# ----------------------------------------------------------------------------- the page's data


def payload(rows: list, images: dict, summary: dict | None, title: str, size: int = IMAGE_SIZE):
    """The page's data (PAGE_FORMAT) from rows of results.jsonl as dicts (Row.to_json), `images`
    ({(data, id): [image bytes or paths] or a line saying why there are none}) and the run's
    summary.json (None if it has none)."""
    table, steps, items, order = Images(size), Steps(), [], {}
    ran = {(r["data"], r["id"]) for r in rows}
    table.prepare([im for k, v in images.items() if k in ran and isinstance(v, list) for im in v])
    out_rows = []
    for row in rows:
        key = (row["data"], row["id"])
        if key not in order:
            order[key] = len(items)
            pictures = images.get(key, "image not found in the benchmark files read")
            items.append(_item(row, pictures, table))
        item = items[order[key]]
        if item["question"] is None and isinstance(row.get("trace"), dict):
            item["question"] = row["trace"].get("question")
        item["rows"].setdefault(str(row["method"]), {})[str(row["seed"])] = len(out_rows)
        out_rows.append(slim_row(row, steps))
    methods = list(summary["methods"]) if summary else _unique(str(r["method"]) for r in rows)
    seeds = list(summary["seeds"]) if summary else sorted({r["seed"] for r in rows})
    return {
        "format": PAGE_FORMAT,
        "title": title,
        "image_size": size,
        "files": _unique(r["data"] for r in rows),
        "methods": methods,
        "seeds": seeds,
        "summary": _accuracy(summary),
        "images": table.urls,
        "steps": steps.steps,
        "items": items,
        "rows": out_rows,
    }


def _item(row: dict, pictures, table: Images) -> dict:
    """An item of the page: its file, id and line, the question, the right answer, its input
    columns, and its images (indices into the image table, or a line saying why one is missing)."""
    shown = [table.add(p) for p in pictures] if isinstance(pictures, (list, tuple)) else [pictures]
    return {
        "data": row["data"],
        "id": str(row["id"]),
        "line": row.get("row"),
        "question": None,
        "answer": row.get("answer"),
        "input": row.get("input") or {},
        "images": shown or ["no image: the item has none"],
        "rows": {},
    }


def _unique(values) -> list:
    """The distinct values, in the order first met."""
    return list(dict.fromkeys(values))


def _accuracy(summary: dict | None) -> dict | None:
    """{method: {file: [accuracy per seed, %]}} of summary.json, what the page's counts are checked
    against; None without a summary. A value that is not a finite number is left out (None)."""
    if not summary:
        return None
    finite = lambda v: v if isinstance(v, (int, float)) and math.isfinite(v) else None
    return {
        method: {
            f: [finite(v) for v in cell.get("per_seed", [])]
            for f, cell in files.items()
            if f in summary.get("files", []) and isinstance(cell, dict)
        }
        for method, files in (summary.get("accuracy") or {}).items()
    }


def page(data: dict) -> str:
    """The HTML page of `data`: PAGE with the data as JSON in its script element. <, >, & and the
    two JSON line separators are written as \\u escapes, so no text of a run can end the element
    or be read as markup."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    for ch in "<>&\u2028\u2029":
        text = text.replace(ch, f"\\u{ord(ch):04x}")
    head, tail = PAGE.split("{{DATA}}")  # The title is put in the head alone, never in the data.
    return head.replace("{{TITLE}}", html.escape(data["title"], quote=False)) + text + tail


def write(path: str, html: str) -> None:
    """Write the page whole or not at all (rundir._write_atomic)."""
    from verdict_lab.harness.rundir import _write_atomic

    _write_atomic(path, html)


# ----------------------------------------------------------------------------- the sources


def write_run(out: str, rows: list, items: list, summary: dict, size: int = IMAGE_SIZE) -> str:
    """OUT/cases.html of a finished run: its rows (rows.Row), the items it ran (benchmarks' Item,
    their images as they were sent) and its summary. Returns the page's path."""
    images = {(it.data, it.id): list(it.images) for it in items}
    data = payload([r.to_json() for r in rows], images, summary, os.path.basename(out), size)
    path = os.path.join(out, "cases.html")
    write(path, page(data))
    return path


def run_rows(out: str) -> tuple:
    """(the rows of a run directory as dicts, its summary or None, a note on what is missing). With
    a summary, the rows of the items, methods and seeds it counted (a later row replaces an
    earlier); without one, every row results.jsonl holds."""
    from verdict_lab.harness import rundir  # Here, so that a trace's page needs no harness.

    found, _ = rundir.read_rows(os.path.join(out, "results.jsonl"))
    try:
        summary = rundir.read_summary(out)
    except ValueError as e:
        rows = {r.key: r for r in found}
        return [r.to_json() for r in rows.values()], None, f"{e}; counts not checked"
    inputs = {
        (f, id): digest
        for f in summary["files"]
        for id, digest in summary["reading"][f]["inputs"].items()
    }
    methods, seeds = set(summary["methods"]), set(summary["seeds"])
    rows = {
        r.key: r
        for r in found
        if inputs.get((r.data, r.id)) == r.input_digest and str(r.method) in methods
        if r.seed in seeds
    }
    return [r.to_json() for r in rows.values()], summary, None


def data_images(rows: list, paths: list, settings: dict, allow_any_path: bool) -> dict:
    """{(data, id): the images of each item of the benchmark files `paths`, read as the run read
    them (settings: run.json's, its "inputs"), or a line saying why they are not shown: the item
    differs from the one its rows ran}. ValueError for a file that cannot be read."""
    from verdict_lab.harness import benchmarks  # Here, like chains: only a rebuild reads files.
    from verdict_lab.harness.chains import input_digest  # chains sends requests; a page needs none.
    from verdict_lab.harness.items import Inputs

    given = (settings or {}).get("inputs") or {}
    inputs = Inputs(given.get("images") == "original", given.get("prompt") == "stripped")
    ran = {(r["data"], r["id"]): r.get("input_digest") for r in rows}
    found = {}
    for path in paths:
        for it in benchmarks.load(path, None, None, allow_any_path, inputs).items:
            same = ran.get((it.data, it.id)) in (None, input_digest(it))
            found[(it.data, it.id)] = (
                list(it.images)
                if same
                else f"image not shown: item {it.id} of {path} differs from the one its rows ran"
            )
    return found


def rebuild(out: str, paths: list = (), allow_any_path: bool = False, size: int = IMAGE_SIZE):
    """(the path of OUT/cases.html rebuilt from the run directory OUT, a note on what is missing or
    None). ValueError if OUT is no run directory, or a --data file cannot be read."""
    from verdict_lab.harness import rundir

    if not os.path.isdir(out):
        raise ValueError(f"{out} is not a directory")
    run = rundir.read_run(out)
    if run is None and not os.path.exists(os.path.join(out, "results.jsonl")):
        raise ValueError(f"{out} holds no run (neither run.json nor results.jsonl)")
    rows, summary, note = run_rows(out)
    if paths:
        images = data_images(rows, list(paths), (run or {}).get("settings"), allow_any_path)
    else:
        files = ", ".join(sorted({r["data"] for r in rows})) or "the run's"
        images = {
            (r["data"], r["id"]): f"image not embedded: rebuild with --data (the file of {files})"
            for r in rows
        }
    title = os.path.basename(os.path.abspath(out))
    path = os.path.join(out, "cases.html")
    write(path, page(payload(rows, images, summary, title, size)))
    return path, note


def trace_payload(
    trace: dict, images: list, answer: str | None, title: str, size: int = IMAGE_SIZE
) -> dict:
    """The page's data for one trace (verdict-trace/N, as demo.py writes it): one case, one chain,
    named by the trace's rule; `answer` the right one (None: unknown, and the chain's answer is
    marked neither right nor wrong)."""
    if not (isinstance(trace, dict) and str(trace.get("format", "")).startswith("verdict-trace/")):
        got = trace.get("format") if isinstance(trace, dict) else type(trace).__name__
        raise ValueError(f"not a verdict trace (format {got!r})")
    config = trace.get("config") or {}
    pred = trace.get("answer")
    row = {
        "data": "demo",
        "id": "1",
        "row": 1,
        "seed": int((trace.get("meta") or {}).get("seed", 0)),
        "method": config.get("rule", "verdict"),
        "answer": answer if answer is not None else "unknown",
        "pred": pred,
        "correct": None if answer is None else _same_answer(pred, answer),
        "stopped": trace.get("stopped"),
        "error": None,
        "input": {},
        "trace": trace,
    }
    return payload([row], {("demo", "1"): list(images)}, None, title, size)


def _same_answer(pred: str | None, answer: str) -> bool:
    """The chain's answer is the right one: equal, or its first word is (a letter with its reason
    after it: "B, since ...")."""
    if pred is None:
        return False
    first = pred.strip().split()[0].rstrip(".,:;)") if pred.strip() else ""
    return pred.strip() == answer.strip() or first == answer.strip()


def write_trace_page(
    path: str, trace: dict, images: list = (), answer: str | None = None, size: int = IMAGE_SIZE
) -> str:
    """Write the page of one trace to `path` (whole or not at all); returns the path."""
    title = os.path.splitext(os.path.basename(path))[0]
    write(path, page(trace_payload(trace, images, answer, title, size)))
    return path


# ----------------------------------------------------------------------------- the command


def parse_args(argv):
    p = cli.Parser(
        prog="verdict_lab.cases",
        description="Write the case viewer (one HTML file) of a run directory or of a trace.",
    )
    p.add_argument("source", help="a run directory (evaluate's --out), or a trace JSON file")
    p.add_argument(
        "--data",
        action="append",
        default=[],
        help="a run: a benchmark file it read, for its images (repeat for several)",
    )
    p.add_argument("--allow-any-path", action="store_true", help="as evaluate's flag")
    p.add_argument("--image", action="append", default=[], help="a trace: an image it read")
    p.add_argument("--answer", help="a trace: the right answer (unknown if not given)")
    p.add_argument("--out", help="a trace: the page's path (its name with .html)")
    p.add_argument(
        "--image-size",
        type=int,
        default=IMAGE_SIZE,
        help=f"the longer side of an embedded image, in pixels ({IMAGE_SIZE})",
    )
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.image_size < 16:
            raise ValueError(f"--image-size must be at least 16, got {args.image_size}")
        if os.path.isdir(args.source):
            if args.image or args.answer or args.out:
                raise ValueError("--image, --answer and --out are for a trace, not a run directory")
            path, note = rebuild(args.source, args.data, args.allow_any_path, args.image_size)
        else:
            path, note = _trace_main(args), None
    except (ValueError, OSError) as e:
        print(f"verdict_lab.cases: error: {e}", file=sys.stderr)
        return 2
    if note:
        print(f"verdict_lab.cases: warning: {note}", file=sys.stderr)
    print(f"wrote {path}")
    return 0


def _trace_main(args) -> str:
    """The page of a trace file; ValueError if it is no readable trace."""
    if args.data:
        raise ValueError("--data is for a run directory, not a trace")
    try:
        with open(args.source, encoding="utf-8") as fh:
            trace = json.load(fh)
    except ValueError as e:
        raise ValueError(f"{args.source} is not UTF-8 JSON: {e}") from None
    out = args.out or os.path.splitext(args.source)[0] + ".html"
    return write_trace_page(out, trace, args.image, args.answer, args.image_size)


if __name__ == "__main__":
    sys.exit(main())
