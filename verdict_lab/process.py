"""VERDICT's step-level mode: the three judges score human-labelled reasoning steps, and every rule
is scored on the same judge scores (VisualProcessBench and files converted to its generic layout).

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026: Proposition 1 says the dual test (s̄* > τ and Δ* < ε)
tells a valid step from an invalid one better than a plain mean of the judges. Here that is measured
against human labels, with no reasoner in the way:

    python -m verdict_lab.process --data test.jsonl --base-url URL --model NAME --out runs/vpb

- Input (read_file): VisualProcessBench's test.jsonl as it ships (`image` a list of paths under the
  image root, `question`, `response.steps`, `response.process_correctness`, `data_source`), or the
  generic layout, one JSON object a line: `question`, `images` (paths), `steps`, `labels` in
  {1, 0, −1}, optional `id` and `source`. A bad row is one line on stderr naming its line and
  field (steps and labels of different lengths, an unknown label, a missing image); the rest run.
- Judging (judge_sample): for each step t, the judges of verifier.build score step t as a candidate
  with state = (question, images, steps 1..t−1), exactly as verdict.step scores a candidate inside a
  chain: m calls per step, no reasoner call. The client, its cache (OUT/cache.sqlite by default),
  --concurrency, --timeout, the judge formats, modes and --weighted are evaluate's (flags.py).
- Resume (OUT, one run at a time): process_rows.jsonl holds one row per judged sample, appended
  whole; a rerun keeps the rows of samples whose input (question, steps, image bytes) is unchanged
  and judges the rest, through the cache. τ, ε, λ and --sweep decide nothing about the calls: a
  rerun with other values costs no call, and needs no --base-url once every sample is judged.
- Output (process_metrics.report and sweep): process_summary.md and .json, process_steps.csv (one
  line per step: its label, ŝ, s*, s̄*, Δ* and every rule's decision) and process_f1.png (VERDICT's
  macro F1 over (τ, ε) beside each baseline's best). docs/process.md describes them.

Exit status: 0; 1 when rows were skipped as malformed (the others ran and the tables are written); 2
when nothing could run (a bad flag, no valid row, an OUT in use or run with other judge settings);
3 when samples failed on the endpoint (their rows are missing: the same command retries them); 130
on Ctrl-C (the rows written are kept).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass

import verdict
from judges import EndpointError, shown_url
from verdict_lab import cli, flags, verifier
from verdict_lab import process_metrics as pm
from verdict_lab import process_report
from verdict_lab.cache import CacheError
from verdict_lab.formats import JudgeFormat
from verdict_lab.harness import rundir
from verdict_lab.harness.chains import file_sha256
from verdict_lab.harness.items import image_file

ROW_FORMAT = "verdict-process-row/1"
RUN_FORMAT = "verdict-process-run/1"
LABELS = (1, 0, -1)  # correct, neutral, incorrect


# ----------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class Sample:
    """One labelled reasoning chain: its steps in order and a label per step."""

    data: str  # the file's name without its extension
    id: str
    row: int  # its line in the file
    source: str  # data_source (VisualProcessBench) or source; "all" when absent
    question: str
    images: tuple  # image file paths
    steps: tuple  # [T] str
    labels: tuple  # [T] int in LABELS


class RowError(ValueError):
    """A malformed row: the field and what is wrong with it."""


def _strings(v, field: str) -> list:
    if not (isinstance(v, list) and v and all(isinstance(s, str) and s.strip() for s in v)):
        raise RowError(f"{field}: expected a non-empty list of non-empty strings, got {v!r:.60}")
    return v


def _fields(obj: dict) -> tuple:
    """(layout, question, images, steps, labels, source, id) of a row in either layout."""
    if "response" in obj:  # VisualProcessBench's own layout
        r = obj["response"]
        if not isinstance(r, dict):
            raise RowError(f"response: expected an object, got {r!r:.60}")
        images = obj.get("image", [])
        images = [images] if isinstance(images, str) else images
        got = ("visualprocessbench", obj.get("question"), images, r.get("steps"))
        return got + (r.get("process_correctness"), obj.get("data_source"), obj.get("id"))
    images = obj.get("images", obj.get("image", []))
    images = [images] if isinstance(images, str) else images
    got = ("generic", obj.get("question"), images, obj.get("steps"), obj.get("labels"))
    return got + (obj.get("source"), obj.get("id"))


def parse_row(obj, data: str, row: int, root: str, allow_any_path: bool = False) -> Sample:
    """A Sample of one parsed JSON line; RowError naming the field that is wrong."""
    if not isinstance(obj, dict):
        raise RowError(f"expected a JSON object, got {type(obj).__name__}")
    layout, question, images, steps, labels, source, id_ = _fields(obj)
    steps_field, labels_field = (
        ("response.steps", "response.process_correctness")
        if layout == "visualprocessbench"
        else ("steps", "labels")
    )
    if not (isinstance(question, str) and question.strip()):
        raise RowError("question: missing or empty")
    steps = _strings(steps, steps_field)
    if not isinstance(labels, list):
        raise RowError(f"{labels_field}: expected a list of 1, 0 and -1, got {labels!r:.60}")
    if len(labels) != len(steps):
        raise RowError(
            f"{steps_field} and {labels_field} differ in length: {len(steps)} steps, "
            f"{len(labels)} labels"
        )
    for t, y in enumerate(labels):
        if not (type(y) is int and y in LABELS):  # a bool or 1.0 is no label
            raise RowError(f"{labels_field}[{t}]: unknown label {y!r}; labels are 1, 0 and -1")
    if not isinstance(images, list) or not all(isinstance(p, str) for p in images):
        raise RowError(f"images: expected a list of paths, got {images!r:.60}")
    try:
        paths = tuple(image_file(root, p, allow_any_path) for p in images)
    except ValueError as e:
        raise RowError(f"image: {e}") from None
    sid = str(id_) if id_ is not None else f"line{row}"
    src = str(source) if source not in (None, "") else "all"
    return Sample(data, sid, row, src, question, paths, tuple(steps), tuple(labels))


def read_file(path: str, root: str | None, limit: int | None, allow_any_path: bool) -> tuple:
    """([Sample], [(line, reason)]) of a JSONL file, the first `limit` valid samples; images are
    looked for under `root` (default: the file's directory). OSError if it cannot be read."""
    data = os.path.splitext(os.path.basename(path))[0]
    root = root or os.path.dirname(os.path.abspath(path))
    samples, bad, ids = [], [], set()
    with open(path, "rb") as fh:
        for row, raw in enumerate(fh, 1):
            if limit is not None and len(samples) >= limit:
                break
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw.decode("utf-8"))
                s = parse_row(obj, data, row, root, allow_any_path)
                if s.id in ids:
                    raise RowError(f"id: {s.id!r} is the id of an earlier row")
            except RowError as e:
                bad.append((row, str(e)))
                continue
            except ValueError as e:  # not JSON, not UTF-8
                bad.append((row, f"not a JSON line ({e})"))
                continue
            ids.add(s.id)
            samples.append(s)
    return samples, bad


def digest(s: Sample) -> str:
    """What the judges read of a sample: its question, its steps and its images' bytes (not its
    labels: a relabelled file needs no new call)."""
    h = hashlib.sha256(json.dumps([s.question, s.steps]).encode("ascii"))
    for p in s.images:
        h.update(bytes.fromhex(file_sha256(p)))
    return h.hexdigest()[:32]


# ----------------------------------------------------------------------------- judging


def judge_sample(s: Sample, digest_: str, settings, client, fmt: JudgeFormat) -> dict:
    """The row of one sample (whose digest is digest_): every step scored by the m judges of
    verifier.build, step t as a candidate after steps 1..t−1 (verdict.State), with the calls and
    tokens it cost. EndpointError and CacheError propagate: the sample has no row, and a rerun
    judges it again."""
    c = client.fork()
    try:
        v = verifier.build(settings, c, fmt=fmt)
        state = verdict.State(s.question, s.images)
        s_hat = []  # [T, m]
        for step in s.steps:
            s_hat.append([float(judge(state, step)) for judge in v.judges])
            state = state.extend(step)
        used = c.usage
    finally:
        c.close()
    return {
        "format": ROW_FORMAT,
        "data": s.data,
        "id": s.id,
        "row": s.row,
        "source": s.source,
        "digest": digest_,
        "labels": list(s.labels),
        "s_hat": [[None if math.isnan(x) else x for x in r] for r in s_hat],
        "judge_calls": used["calls"],
        "requests": used["requests"],
        "tokens": used["call_tokens"],
    }


def load_rows(path: str, digests: dict) -> tuple:
    """({(data, id): row} of the rows a resumed run keeps, rows dropped): a row is kept when it is
    whole, of this format, not repeated and made from the input its sample has now (digests); the
    file is rewritten without the others."""
    if not os.path.exists(path):
        return {}, 0
    with open(path, "rb") as fh:
        lines = fh.read().splitlines()
    rows = {}
    for line in lines:
        try:
            r = json.loads(line.decode("utf-8"))
            key = (r["data"], r["id"])
            ok = r.get("format") == ROW_FORMAT and digests.get(key) == r["digest"]
        except (ValueError, KeyError, TypeError):
            continue
        if ok and key not in rows:
            rows[key] = r
    dropped = sum(bool(x.strip()) for x in lines) - len(rows)
    if dropped:
        text = "".join(json.dumps(r, allow_nan=False) + "\n" for r in rows.values())
        rundir._write_atomic(path, text)
    return rows, dropped


# ----------------------------------------------------------------------------- the run


def parse_args(argv):
    p = cli.Parser(
        prog="verdict_lab.process",
        description="Score VERDICT and the baselines against human step labels.",
    )
    p.add_argument("--data", action="append", required=True, help="a labelled JSONL; repeatable")
    p.add_argument("--images", help="the image root (default: each data file's directory)")
    p.add_argument("--out", default="runs/process", help="output directory (runs/process)")
    p.add_argument("--limit", type=int, help="the first N valid samples of each file")
    p.add_argument(
        "--neutral",
        choices=pm.NEUTRAL,
        default="drop",
        help="what a neutral (0) step counts as in the metrics: drop (left out, as "
        "VisualProcessBench's scoring does), correct or incorrect (drop)",
    )
    p.add_argument(
        "--sweep",
        action="append",
        default=[],
        help="NAME=V1,V2,... for NAME in tau, eps, lam (λ as V/L/C, e.g. lam=1.5/1/0.8,1/1/1); "
        "repeatable; recomputed from the judged scores with no new call",
    )
    p.add_argument(
        "--allow-any-path", action="store_true", help="read images outside the image root"
    )
    g = p.add_argument_group("verifier")
    d = verifier.Settings()
    g.add_argument("--tau", type=float, default=d.tau, help=f"τ: accept if s̄* > τ ({d.tau})")
    g.add_argument("--eps", type=float, default=d.eps, help=f"ε: accept if Δ* < ε ({d.eps})")
    g.add_argument("--lam", type=flags.floats, default=d.lam, help="λ_V,λ_L,λ_C (1.5,1.0,0.8)")
    flags._add_reply_args(g, d)
    flags._add_mode_args(g, d)
    g.add_argument("--reasons", action="store_true", help="judges write a reason first")
    g.add_argument("--layout", default=d.layout, help=f"request layout ({d.layout})")
    flags.add_endpoint_args(p)
    return p.parse_args(argv)


def fail(e) -> int:
    print(f"verdict_lab.process: error: {e}", file=sys.stderr)
    return 2


def run_record(args, settings) -> dict:
    """What a resumed run must share: the judges' endpoint, model and settings."""
    url = args.judge_base_url or args.base_url
    judged = {k: v for k, v in settings.record().items() if k in process_report.JUDGED}
    return {
        "judge_model": args.judge_model or args.model,
        "judge_base_url": shown_url(url.rstrip("/")) if url else None,
        **judged,
    }


def check_run(out: str, record: dict, claim: bool) -> None:
    """ValueError when OUT holds a run with other judge settings; with claim, record these. A run
    with no --base-url (the tables again) does not compare the endpoint."""
    path = os.path.join(out, "process_run.json")
    old = rundir._json(path) if os.path.exists(path) else None
    if old is not None and not (
        isinstance(old, dict)
        and old.get("format") == RUN_FORMAT
        and isinstance(old.get("settings"), dict)
    ):
        raise ValueError(f"{path} is not a run record of format {RUN_FORMAT!r}; use another --out")
    keys = [k for k in record if claim or k != "judge_base_url"]
    diff = [k for k in keys if old is not None and old["settings"].get(k) != record[k]]
    if diff:
        shown = ", ".join(diff)
        raise ValueError(f"{out} holds a run with other settings ({shown}); use another --out")
    if claim:
        text = json.dumps({"format": RUN_FORMAT, "settings": record}, indent=1)
        rundir._write_atomic(path, text)


def main(argv=None) -> int:
    """The command; Ctrl-C ends it with one line and exit 130, the rows written kept."""
    try:
        return _main(sys.argv[1:] if argv is None else list(argv))
    except KeyboardInterrupt:
        print("verdict_lab.process: interrupted; the rows written are kept", file=sys.stderr)
        return 130


def _main(argv: list) -> int:
    args = parse_args(argv)
    try:
        settings = flags.settings_of(args, judge_mode=args.judge_mode)
        grid = process_report.grid(args.sweep, args.tau, args.eps, settings.lam)
        if args.limit is not None and args.limit < 1:
            raise ValueError(f"--limit must be >= 1, got {args.limit}")
        if args.concurrency < 1:
            raise ValueError(f"--concurrency must be >= 1, got {args.concurrency}")
        held = rundir.lock(args.out)
    except (ValueError, OSError) as e:
        return fail(e)
    try:
        return run(args, settings, grid)
    finally:
        held.close()


def read_all(args) -> tuple:
    """([Sample] of every file, rows skipped); each bad row said on stderr."""
    names = [os.path.splitext(os.path.basename(p))[0] for p in args.data]
    if len(set(names)) != len(names):  # a sample is known by its file's name and its id
        raise ValueError(f"two --data files have the same name: {', '.join(args.data)}")
    samples, skipped = [], 0
    for path in args.data:
        got, bad = read_file(path, args.images, args.limit, args.allow_any_path)
        for row, reason in bad:
            print(f"verdict_lab.process: skipping {path} line {row}: {reason}", file=sys.stderr)
        samples += got
        skipped += len(bad)
    if not samples:
        raise ValueError(f"no valid sample in {', '.join(args.data)}")
    return samples, skipped


def run(args, settings, grid: dict) -> int:
    """Read, judge what is left, write the tables; see the module's exit statuses."""
    rows_path = os.path.join(args.out, "process_rows.jsonl")
    try:
        samples, skipped = read_all(args)
        digests = {(s.data, s.id): digest(s) for s in samples}
        rows, dropped = load_rows(rows_path, digests)
        todo = [s for s in samples if (s.data, s.id) not in rows]
        if todo and not args.base_url:
            raise ValueError(f"--base-url is required: {len(todo)} sample(s) are not judged yet")
        check_run(args.out, run_record(args, settings), claim=bool(args.base_url))
    except (ValueError, OSError) as e:
        return fail(e)
    if dropped:
        print(f"verdict_lab.process: {dropped} row(s) will be judged again", file=sys.stderr)
    failed = judge_all(args, settings, todo, digests, rows, rows_path) if todo else 0
    if isinstance(failed, str):
        return fail(failed)
    done = [rows[(s.data, s.id)] for s in samples if (s.data, s.id) in rows]
    if not done:
        return fail("no sample was judged")
    try:
        md = process_report.write(args.out, done, settings, grid, args.neutral, args)
    except OSError as e:
        return fail(f"cannot write the tables in {args.out}: {e}; the rows are kept")
    print(md, end="")
    if failed:
        print(
            f"verdict_lab.process: {failed} sample(s) failed on the endpoint; the same command "
            "judges them again",
            file=sys.stderr,
        )
        return 3
    return 1 if skipped else 0


def judge_all(args, settings, todo: list, digests: dict, rows: dict, rows_path: str):
    """Judge `todo` on --concurrency threads, each row appended whole as it finishes (by this
    thread); the number of samples that failed on the endpoint, or a message when the run cannot go
    on."""
    try:
        args.cache = args.cache or os.path.join(args.out, "cache.sqlite")
        _, client = flags.clients_from_args(args)
    except (ValueError, CacheError) as e:
        return str(e)
    fmt, failed, errors = JudgeFormat(settings.judge_format), 0, {}
    pool = ThreadPoolExecutor(args.concurrency)
    try:
        with open(rows_path, "ab", buffering=0) as fh:
            futures = {
                pool.submit(judge_sample, s, digests[(s.data, s.id)], settings, client, fmt): s
                for s in todo
            }
            for n, fut in enumerate(as_completed(futures), 1):
                s = futures[fut]
                try:
                    row = fut.result()
                except (EndpointError, CacheError) as e:
                    failed += 1
                    errors[str(e)] = errors.get(str(e), 0) + 1
                    continue
                rundir.append(fh, json.dumps(row, allow_nan=False) + "\n")
                rows[(s.data, s.id)] = row
                print(f"\rverdict_lab.process: {n}/{len(todo)} samples", end="", file=sys.stderr)
    finally:  # on Ctrl-C the samples not started are dropped, those running finish (cached)
        pool.shutdown(wait=True, cancel_futures=True)
    print(file=sys.stderr)
    for e, k in errors.items():
        print(f"verdict_lab.process: {k} sample(s) failed: {e}", file=sys.stderr)
    client.close()
    return failed


if __name__ == "__main__":
    sys.exit(main())
