"""VERDICT evaluation harness: the paper's results table for any served model and benchmark file.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026. This module implements the experiments section:

- the results table: accuracy per benchmark, mean ± std over seeds, the unweighted Avg and the gain
  over the base model, for the base model, the aggregation baselines and VERDICT. "Same agents,
  different aggregation": every rule runs verdict.run with the same reasoner and judges, and only
  verdict.select's rule differs;
- the method section's fallback rate ("roughly 15% of steps"), beside the abstention, unanswered
  and stopped rates and the cost per item (model calls, tokens, seconds);
- the judge modes of the related papers (judges.JudgeMode: SGV's prior, EVPV's fact sheet and gate)
  as further rows of the same table.

    python evaluate.py --data MMStar.tsv --data mine.jsonl --base-url URL --model NAME --seeds 3 --out runs/x

Inputs. A VLMEvalKit TSV: index, image, question, optional hint, option columns A, B, ..., answer,
optional prompt (the whole text, used as is). `image` is base64, or, if 64 characters or fewer, the
index of the row whose image it reuses. A multi-image row holds a list literal of base64 strings,
as VLMEvalKit writes it: ['<b64>', '<b64>'] (JSON quoting works too). A JSONL file holds one
{"id", "question", "options": {"A": ...}, "answer", "hint"?, "image"?: path | base64 | [...]} per
line, paths relative to the file. A malformed row (no question, no answer, fewer than two options,
an answer that is no option, an undecodable image, a repeated id) is reported with its row number,
skipped and counted: it is never run and never scored.

Methods. `base` is the reasoner alone: one sampled chain per seed (n = 1 at Config's T and top-p,
the reasoner's seed = the seed index), no judges, no selection. Rule r runs verdict.run with the
reasoner of the same seed and Config(rule=r). All chains of one item run one after another in one
thread against one response cache (--cache, default OUT/cache.sqlite), so wherever chains coincide
they get the same candidates and scores, from the cache, with no new request.

Judge modes. --judge-modes lists modes (plain, prior, premises, prior+premises, premises+gate, ...);
every judged rule runs in each, as a row named rule+mode: verdict, verdict+prior, verdict+premises,
verdict+prior+premises. The reasoner's requests do not depend on the mode, so the cache gives a mode
row the plain row's candidates wherever their chains coincide, and the rows differ only by the judges.
Each row records the mode's extra calls and tokens (prior, fact sheet, premise checks; cached replies
counted) and whether its fact sheet degraded; its trace's meta holds the prior and the fact sheet.

Answers follow VLMEvalKit's rules, read from the final step: the text after "Final answer:"
(trace.answer), or, for a chain stopped by --max-steps or --max-calls (stopped = "budget"), its
last chosen step, as VLMEvalKit reads a truncated response. A single option letter among the last
four tokens, else a unique option text, else unanswered (scored wrong). Each row records which.

Output in OUT: results.jsonl (one "verdict-eval-row/1" per (item, seed, method), appended and
flushed as each finishes, with its full trace), summary.md and summary.json ("verdict-eval/1").
A re-run with the same OUT keeps finished rows, runs again rows that ended in an error, and drops
a truncated last line; OUT/run.json holds the settings, and a re-run with other ones is refused.
--concurrency K runs K items at once; within an item every call (its seeds, its methods, the n×m
judge calls of a step) runs one after another, so at most K requests are in flight (set K to the
server's parallel slots), and no two threads ever send the same request. If the endpoint cannot be reached (or answers 401, 403, 404) before its
first reply, the run stops with exit 2; any later EndpointError becomes that row's error (wrong).
"""
from __future__ import annotations

import argparse
import ast
import base64
import binascii
import csv
import io
import json
import os
import re
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace

import numpy as np
from PIL import Image

import judges
import verdict

ROW_FORMAT, SUMMARY_FORMAT, RUN_FORMAT = "verdict-eval-row/1", "verdict-eval/1", "verdict-eval-run/1"
METHODS = ("base",) + verdict.RULES
LETTER = re.compile(r"[A-Z]")


# ----------------------------------------------------------------------------- loading

@dataclass(frozen=True)
class Item:
    """One multiple-choice question, ready to run."""
    data: str           # the benchmark: its file name without the extension
    id: str
    row: int            # line number in the file (TSV: where the record ends; the header is line 1)
    question: str       # the whole text the reasoner sees, options included
    options: tuple      # (("A", text), ...)
    answer: str         # the correct letter
    images: tuple = ()  # image bytes


@dataclass(frozen=True)
class Skipped:
    """A malformed row: never run, never scored, counted in the summary."""
    data: str
    row: int
    reason: str


def build_question(question: str, options, hint: str = "") -> str:
    """VLMEvalKit's multiple-choice prompt: Hint:, Question:, Options: with "A. ..." lines."""
    lines = ([f"Hint: {hint}"] if hint else []) + [f"Question: {question}", "Options:"] + [f"{k}. {v}" for k, v in options]
    return "\n".join(lines + ["Please select the correct answer from the options above."])


def decode_image(s) -> bytes:
    """Bytes, base64 or a base64 data URL -> the bytes of an image that decodes; ValueError otherwise."""
    try:
        data = s if isinstance(s, bytes) else base64.b64decode(s.split(",", 1)[-1] if s.startswith("data:") else s,
                                                               validate=True)
        with Image.open(io.BytesIO(data)) as im:
            im.load()  # a truncated image fails here, not in the middle of a run
    except (binascii.Error, ValueError, OSError, SyntaxError, Image.DecompressionBombError) as e:
        raise ValueError(f"undecodable image ({len(s)} {'bytes' if isinstance(s, bytes) else 'chars'}: {e})") from None
    return data


def make_item(data, id, row, question, options, answer, images=(), hint="", prompt="") -> Item:
    """Validate one row's fields (ValueError names what is wrong) and build its Item."""
    answer = str(answer).strip() if answer is not None else ""
    if not (prompt or (isinstance(question, str) and question.strip())):
        raise ValueError("missing question")
    if not answer:
        raise ValueError("missing answer")
    if len(options) < 2:  # a question with one option cannot be answered wrong
        raise ValueError(f"needs at least two options, got {len(options)}")
    if answer not in dict(options):
        raise ValueError(f"answer {answer!r} is not one of the options {', '.join(k for k, _ in options)}")
    text = prompt or build_question(question.strip(), options, hint)
    return Item(data, str(id), row, text, tuple(options), answer, tuple(images))


def _cell(r: dict, k: str) -> str:
    v = (r.get(k) or "").strip()
    return "" if v.lower() == "nan" else v  # pandas writes a missing value as "" or "nan"


def load_tsv(path: str, data: str) -> tuple:
    """A VLMEvalKit TSV -> (items, skipped)."""
    csv.field_size_limit(2 ** 31 - 1)  # a base64 image is one huge field
    with open(path, newline="", encoding="utf-8-sig") as fh:  # -sig: a BOM is not part of "index"
        reader = csv.DictReader(fh, delimiter="\t")
        rows = [(reader.line_num, r) for r in reader]
    fields = reader.fieldnames or []
    if "question" not in fields and "prompt" not in fields:
        raise ValueError(f"{path}: no question or prompt column (columns: {', '.join(fields) or 'none'})")
    letters = [c for c in fields if LETTER.fullmatch(c)]
    image_of = {_cell(r, "index"): _cell(r, "image") for _, r in rows}
    decoded: dict = {}  # base64 -> bytes, so a reused image is decoded and held once

    def images(field: str) -> tuple:
        if field and len(field) <= 64:  # VLMEvalKit: the index of the row whose image this row reuses
            if len(image_of.get(field, "")) <= 64:
                raise ValueError(f"image refers to index {field!r}, which holds no image")
            field = image_of[field]
        parts = [field] if field else []
        if field.startswith("["):  # a multi-image row: a list literal of base64 strings
            try:
                parts = ast.literal_eval(field)
            except (ValueError, SyntaxError):
                parts = None
            if not (isinstance(parts, list) and all(isinstance(p, str) for p in parts)):
                raise ValueError("image starts with '[' but is not a list of base64 strings")
        for p in parts:
            if p not in decoded:
                decoded[p] = decode_image(p)
        return tuple(decoded[p] for p in parts)

    items, skipped = [], []
    for line, r in rows:
        try:
            if None in r:  # csv puts the cells past the header's last column under the key None
                raise ValueError(f"{len(fields) + len(r[None])} cells, the header has {len(fields)}")
            options = [(k, _cell(r, k)) for k in letters if _cell(r, k)]
            items.append(make_item(data, _cell(r, "index") or line, line, _cell(r, "question"), options,
                                   _cell(r, "answer"), images(_cell(r, "image")), _cell(r, "hint"), _cell(r, "prompt")))
        except ValueError as e:
            skipped.append(Skipped(data, line, str(e)))
    return items, skipped


def load_jsonl(path: str, data: str) -> tuple:
    """A JSONL benchmark -> (items, skipped). Image paths are relative to the file."""
    here = os.path.dirname(os.path.abspath(path))

    def image(s) -> bytes:
        if not isinstance(s, str) or not s:
            raise ValueError(f"an image must be a path or base64 string, got {s!r}")
        p = os.path.join(here, s)
        if len(s) < 4096 and os.path.isfile(p):
            with open(p, "rb") as fh:
                return decode_image(fh.read())
        return decode_image(s)

    items, skipped = [], []
    with open(path, encoding="utf-8-sig") as fh:
        for line, text in enumerate(fh, 1):
            if not text.strip():
                continue
            try:
                try:
                    d = json.loads(text)
                except ValueError:
                    raise ValueError("not valid JSON") from None
                opts = d.get("options") if isinstance(d, dict) else None
                if not isinstance(opts, dict) or not all(isinstance(k, str) and LETTER.fullmatch(k) for k in opts):
                    raise ValueError('"options" must be an object with letter keys, like {"A": "..."}')
                options = sorted((k, str(v).strip()) for k, v in opts.items() if v is not None and str(v).strip())
                ims = d.get("image")
                ims = [] if ims in (None, "", []) else ims if isinstance(ims, list) else [ims]
                items.append(make_item(data, d.get("id", line), line, d.get("question"), options, d.get("answer"),
                                       [image(s) for s in ims], str(d.get("hint") or "").strip()))
            except ValueError as e:
                skipped.append(Skipped(data, line, str(e)))
    return items, skipped


def load(path: str) -> tuple:
    """(name, items, skipped) for a .tsv or .jsonl file; a repeated id is skipped like any malformed row."""
    name, ext = os.path.splitext(os.path.basename(path))
    loaders = {".tsv": load_tsv, ".jsonl": load_jsonl}
    if ext.lower() not in loaders:
        raise ValueError(f"{path}: unknown format {ext!r}; expected .tsv (VLMEvalKit) or .jsonl")
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such file")
    items, skipped = loaders[ext.lower()](path, name)
    first: dict = {}
    for it in items:
        first.setdefault(it.id, it.row)
    skipped += [Skipped(name, it.row, f"repeated id {it.id!r} (first at row {first[it.id]})")
                for it in items if first[it.id] != it.row]
    return name, [it for it in items if first[it.id] == it.row], sorted(skipped, key=lambda s: s.row)


# ----------------------------------------------------------------------------- answers

def final_text(trace) -> str | None:
    """The text an answer is read from: after "Final answer:" if the chain ended there, else its last
    chosen step (a chain stopped by a budget); None without a step."""
    if trace is None or not trace.steps:
        return None
    return trace.answer if trace.stopped == "final" else trace.chain[-1]


def extract(text, options) -> tuple:
    """(letter or None, how) from a final answer, VLMEvalKit's rules (can_infer_option, can_infer_text):
    "letter"     : exactly one option letter among the tokens (.()[],:;!*#{} split words), and it is
                   one of the last four tokens;
    "text"       : else exactly one option's text is a substring (case-insensitive);
    "unanswered" : else, or when there is no final answer."""
    if text:
        tokens = re.sub(r"[.()\[\],:;!*#{}]", " ", text).split()
        found = [k for k, _ in options if k in tokens]
        if len(found) == 1 and tokens.index(found[0]) > len(tokens) - 5:
            return found[0], "letter"
        found = [k for k, v in options if v.lower() in text.lower()]
        if len(found) == 1:
            return found[0], "text"
    return None, "unanswered"


# ----------------------------------------------------------------------------- one chain

class _Budget(Exception):
    """--max-calls is spent. Raised inside verdict.run by the task's client (verdict.py stays unchanged)."""


class _TaskClient(judges.Client):
    """A Client for one item's task, used by one thread. It raises _Budget past meter["budget"] calls
    (a meter the task's reasoner and judge clients share), sets `reached` on the first reply from the
    server, and counts the tokens of cached replies too, so a chain's tokens are what it would cost
    alone, whichever method happened to run first."""
    meter: dict
    reached: threading.Event
    tokens = 0

    def chat(self, messages, **params):
        if self.meter["budget"] is not None and self.meter["spent"] >= self.meter["budget"]:
            raise _Budget()
        self.meter["spent"] += 1
        hits = self.usage["cache_hits"]
        r = super().chat(messages, **params)
        if self.usage["cache_hits"] == hits:
            self.reached.set()
        usage = r.get("usage") if isinstance(r.get("usage"), dict) else {}
        self.tokens += sum(v for v in (usage.get("prompt_tokens"), usage.get("completion_tokens")) if isinstance(v, int))
        return r


def _fork(c: judges.Client, meter: dict, reached: threading.Event) -> _TaskClient:
    fork = _TaskClient(c.base_url, c.model, c.api_key_env, c.timeout, c.retries, c.cache)
    fork.meter, fork.reached = meter, reached
    return fork


def _base_step(step: str) -> verdict.StepRecord:
    """A base step: one candidate, no judge (s_hat is [1, 0]), nothing to select."""
    nan = np.full(1, np.nan)
    sel = verdict.Selection(0, False, False, np.ones(1, bool), np.empty((1, 0)), nan, nan)
    return verdict.StepRecord((step,), np.empty((1, 0)), sel)


def run_base(item: Item, propose, config: verdict.Config) -> verdict.Trace:
    """The unverified model: the loop of verdict.run with n = 1 and no judges."""
    state, records = verdict.State(item.question, item.images), []
    try:
        for _ in range(config.max_steps):
            steps = propose(state, 1)
            if not steps:  # as verdict.run requires of a proposer
                raise ValueError("propose returned no candidate")
            step = steps[0]
            records.append(_base_step(step))
            state = state.extend(step)
            if re.search(config.final, step):
                return verdict.Trace(item.question, tuple(records), config, "final")
        return verdict.Trace(item.question, tuple(records), config, "max_steps")
    except _Budget:
        return verdict.Trace(item.question, tuple(records), config, "budget")


def run_rule(item: Item, propose, judge_fns, config: verdict.Config) -> verdict.Trace:
    """verdict.run; if --max-calls stops it, the steps it completed, rebuilt from what the agents returned."""
    log: list = []  # per step: (candidates, raw scores in call order)

    def logged_propose(state, n):
        log.append((tuple(propose(state, n)), []))
        return list(log[-1][0])

    def logged(judge):
        def score(state, step):
            log[-1][1].append(judge(state, step))
            return log[-1][1][-1]
        return score
    try:
        return verdict.run(item.question, logged_propose, [logged(j) for j in judge_fns], config, item.images or None)
    except _Budget:
        records, m = [], len(judge_fns)
        for cands, scores in log:
            if len(scores) < len(cands) * m:
                break
            s_hat = np.array(scores, dtype=float).reshape(len(cands), m)  # [n, m]
            sel = verdict.select(s_hat, config.lam, config.tau, config.eps, config.rule)
            records.append(verdict.StepRecord(cands, s_hat, sel))
        return verdict.Trace(item.question, tuple(records), config, "budget")


def run_chain(item: Item, seed: int, method: str, rc: _TaskClient, jc: _TaskClient, opts: dict) -> tuple:
    """(row of results.jsonl, None), or (error row, the exception) on EndpointError or ValueError."""
    rule, _, mode = method.partition("+")  # "verdict+prior+premises" -> rule verdict, mode prior+premises
    config = replace(opts["config"], n=1) if method == "base" else replace(opts["config"], rule=rule)
    grounding = judges.Grounding(jc, judges.JudgeMode.parse(mode), **opts["mode_kw"])
    clients = [rc] if jc is rc else [rc, jc]
    before = [(c.usage, c.tokens) for c in clients]
    rc.meter.update(spent=0, budget=opts["max_calls"])
    t0, trace, error = time.perf_counter(), None, None
    try:
        reasoner = judges.Reasoner(rc, config, max_tokens=opts["max_tokens"], seed=seed)
        if method == "base":
            trace = run_base(item, reasoner, config)
        else:
            trace = run_rule(item, reasoner, judges.make_judges(jc, grounding=grounding, **opts["judge_kw"]), config)
    except (judges.EndpointError, ValueError) as e:
        error = e
    pred, how = extract(final_text(trace), item.options)
    record = grounding.record(item.question, item.images)
    meta = {"method": method, "seed": seed, **({"grounding": record} if grounding.mode.active else {})}
    used = lambda k: sum(c.usage[k] - u[k] for c, (u, _) in zip(clients, before))
    return {"format": ROW_FORMAT, "data": item.data, "id": item.id, "row": item.row, "seed": seed,
            "method": method, "answer": item.answer, "pred": pred, "extracted": how, "correct": pred == item.answer,
            "stopped": trace.stopped if trace else None, "error": f"{type(error).__name__}: {error}" if error else None,
            "calls": used("calls"), "sent": used("requests"), "cached": used("cache_hits"),
            "tokens": sum(c.tokens - t for c, (_, t) in zip(clients, before)),
            "seconds": round(time.perf_counter() - t0, 3), "extra_calls": record["extra_calls"],
            "extra_tokens": record["extra_tokens"], "fact_sheet_status": record.get("fact_sheet_status"),
            "trace": replace(trace, meta=meta).to_dict() if trace else None}, error


def row_key(row: dict) -> tuple:
    return row["data"], str(row["id"]), int(row["seed"]), row["method"]


# ----------------------------------------------------------------------------- results file

def load_rows(path: str) -> tuple:
    """({key: row} of finished rows, how many lines were dropped). A truncated or unreadable line (a run
    killed mid-write), a repeated key and a row that ended in an error are dropped, and the file is
    rewritten without them (atomically), so they run again."""
    if not os.path.exists(path):
        return {}, 0
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    rows, dropped = {}, 0
    for line in text.splitlines():
        try:
            row = json.loads(line)
            key = row_key(row) if row.get("format") == ROW_FORMAT else None
        except (ValueError, KeyError, TypeError, AttributeError):
            key = None
        if key is None or key in rows or row.get("error"):
            dropped += bool(line.strip())
            continue
        rows[key] = row
    if dropped or (text and not text.endswith("\n")):
        with open(path + ".tmp", "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(r, allow_nan=False) + "\n" for r in rows.values())
        os.replace(path + ".tmp", path)
    return rows, dropped


# ----------------------------------------------------------------------------- summary

def _mean_std(xs: list) -> dict:
    """mean ± sample std (n − 1) over seeds; std is None for one seed, everything None for none."""
    if not xs or any(x is None for x in xs):
        return {"mean": None, "std": None, "per_seed": xs}
    return {"mean": statistics.fmean(xs), "std": statistics.stdev(xs) if len(xs) > 1 else None, "per_seed": xs}


def summarize(rows: list, files: list, methods: list, seeds: list) -> dict:
    """The table (accuracy % per method × file + Avg, mean ± std over seeds; gain over base) and the
    per-method statistics. Avg is, per seed, the unweighted mean over files. Error rows count as wrong."""
    by: dict = {}
    for r in rows:
        by.setdefault((r["method"], r["data"], r["seed"]), []).append(r["correct"])
    acc = lambda m, f, s: 100 * statistics.fmean(by[m, f, s]) if (m, f, s) in by else None
    table, gain = {}, {}
    for m in methods:
        cols = {f: [acc(m, f, s) for s in seeds] for f in files}
        avg = [None if any(cols[f][i] is None for f in files) else statistics.fmean(cols[f][i] for f in files)
               for i in range(len(seeds))]
        table[m] = {**{f: _mean_std(v) for f, v in cols.items()}, "Avg": _mean_std(avg)}
    for m in methods:
        if m != "base" and "base" in table:
            gain[m] = {c: None if None in (v["mean"], table["base"][c]["mean"]) else v["mean"] - table["base"][c]["mean"]
                       for c, v in table[m].items()}
    stats = {}
    for m in methods:
        rs = [r for r in rows if r["method"] == m]
        tot = [r["trace"]["totals"] for r in rs if r["trace"]]
        steps, jcalls = sum(t["steps"] for t in tot), sum(t["judge_calls"] for t in tot)
        per = lambda k: statistics.fmean(r[k] for r in rs) if rs else None
        rate = lambda num, den: num / den if den else None
        stats[m] = {
            "chains": len(rs), "steps": steps,
            "fallback_rate": rate(sum(t["fallbacks"] for t in tot), steps) if m != "base" else None,
            "abstention_rate": rate(sum(t["abstentions"] for t in tot), jcalls),
            "unanswered_rate": rate(sum(r["extracted"] == "unanswered" and not r["error"] for r in rs), len(rs)),
            "error_rate": rate(sum(bool(r["error"]) for r in rs), len(rs)),
            "extracted": {k: sum(r["extracted"] == k for r in rs) for k in ("letter", "text", "unanswered")},
            "stopped": {k: sum(r["stopped"] == k for r in rs) for k in ("final", "max_steps", "budget")},
            "calls_per_item": per("calls"), "tokens_per_item": per("tokens"), "sent_per_item": per("sent"),
            "seconds_per_item": per("seconds"),
            "extra_calls_per_item": statistics.fmean(r.get("extra_calls", 0) for r in rs) if rs else None,
            "extra_tokens_per_item": statistics.fmean(r.get("extra_tokens", 0) for r in rs) if rs else None,
            "degraded_rate": rate(sum(r.get("fact_sheet_status") == "degraded" for r in rs),
                                  sum(bool(r.get("fact_sheet_status")) for r in rs))}
    return {"format": SUMMARY_FORMAT, "files": files, "methods": methods, "seeds": seeds, "accuracy": table,
            "gain_over_base": gain, "stats": stats}


STAT_COLUMNS = (("fallback", "fallback_rate", ".1%"), ("abstention", "abstention_rate", ".1%"),
                ("unanswered", "unanswered_rate", ".1%"), ("errors", "error_rate", ".1%"),
                ("calls/item", "calls_per_item", ".1f"), ("tokens/item", "tokens_per_item", ".0f"),
                ("sent/item", "sent_per_item", ".1f"), ("s/item", "seconds_per_item", ".2f"))
MODE_COLUMNS = (("extra calls/item", "extra_calls_per_item", ".1f"),
                ("extra tokens/item", "extra_tokens_per_item", ".0f"),
                ("sheet degraded", "degraded_rate", ".1%"))  # shown when a judge mode ran
MODE_NOTE = (" Extra calls and tokens are a judge mode's own (prior, fact sheet, premise checks), within calls and "
             "tokens; sheet degraded is the share of a mode's chains whose fact sheet was malformed twice.")


def _pct(c: dict) -> str:
    if c["mean"] is None:
        return "—"
    return f"{c['mean']:.2f}" + (f" ±{c['std']:.2f}" if c["std"] is not None else "")


def render(s: dict) -> str:
    """summary.md: the paper-style table, the gains and the per-method statistics."""
    cols, fmt = s["files"] + ["Avg"], lambda x, f: "—" if x is None else format(x, f)
    head = lambda first, cs: [f"| {first} | " + " | ".join(cs) + " |", "|---" * (len(cs) + 1) + "|"]
    st, cfg = s["settings"], s["settings"]["config"]
    out = [f"# VERDICT evaluation ({SUMMARY_FORMAT})", "",
           f"Reasoner `{st['model']}`, judges `{st['judge_model']}`; {len(s['seeds'])} seed(s); n = {cfg['n']}, "
           f"τ = {cfg['tau']}, ε = {cfg['eps']}, λ = {tuple(cfg['lam'])}, max steps {cfg['max_steps']}, "
           f"max calls per chain {st['max_calls'] or 'unlimited'}.", "",
           "Accuracy (%), mean ± sample std over seeds. Avg: per seed, the unweighted mean over files. "
           "An error or an unanswered item counts as wrong.", ""]
    out += head("Method", [f"{f} ({s['items'][f]})" for f in s["files"]] + ["Avg"])
    out += [f"| {m} | " + " | ".join(_pct(s["accuracy"][m][c]) for c in cols) + " |" for m in s["methods"]]
    if s["gain_over_base"]:
        out += ["", "Gain over base (points)", ""] + head("Method", cols)
        out += [f"| {m} | " + " | ".join(fmt(g[c], "+.2f") for c in cols) + " |" for m, g in s["gain_over_base"].items()]
    modes_ran = any("+" in m for m in s["methods"])
    columns = STAT_COLUMNS + (MODE_COLUMNS if modes_ran else ())
    out += ["", "Per method; an item is one chain (one item, one seed). Rates: fallback per step, abstention per "
            "judge call, unanswered and errors per item. Calls and tokens count cached replies too (the cost of the "
            "method alone); sent counts the HTTP requests this run made, and s the wall time, both of which the "
            "first method of an item pays for the methods after it." + (MODE_NOTE if modes_ran else ""), ""]
    out += head("Method", [name for name, _, _ in columns] + ["final/max/budget"])
    for m in s["methods"]:
        x = s["stats"][m]
        cells = [fmt(x[key], f) for _, key, f in columns] + ["/".join(map(str, x["stopped"].values()))]
        out.append(f"| {m} | " + " | ".join(cells) + " |")
    skipped = s["skipped"]
    out += ["", f"Malformed rows skipped: {len(skipped) or 'none'}"]
    out += [f"- {k['data']} row {k['row']}: {k['reason']}" for k in skipped]
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------- command line

class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit code 2, no usage dump
        self.exit(2, f"{self.prog}: error: {message}\n")


def parse_args(argv):
    p = Parser(prog="evaluate.py", description="The paper's results table for a served model on benchmark files.")
    p.add_argument("--data", action="append", required=True, help="a VLMEvalKit .tsv or a .jsonl; repeat for several")
    p.add_argument("--rules", default=",".join(METHODS), help=f"methods to run, comma-separated ({','.join(METHODS)})")
    p.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 for the reasoner (3)")
    p.add_argument("--limit", type=int, help="the first N valid items of each file")
    p.add_argument("--out", default="runs/eval", help="output directory (runs/eval)")
    p.add_argument("--n", type=int, default=3, help="candidates per step (3)")
    p.add_argument("--tau", type=float, default=0.6, help="confidence threshold τ (0.6)")
    p.add_argument("--eps", type=float, default=0.1, help="dispersion tolerance ε (0.1)")
    p.add_argument("--max-steps", type=int, default=8, help="longest chain (8)")
    p.add_argument("--max-calls", type=int, help="most model calls per chain; past it the chain stops as 'budget'")
    p.add_argument("--max-tokens", type=int, default=256, help="tokens per reasoner step (256)")
    p.add_argument("--judge-max-tokens", type=int, help="tokens per judge reply (judges.py's default)")
    p.add_argument("--score-only", action="store_true", help="judges reply with the score line only")
    p.add_argument("--judge-modes", default="plain", help="judge modes, comma-separated, each a row per judged rule: "
                   "plain, prior (SGV), premises (EVPV), premises+gate, prior+premises, ... (plain)")
    p.add_argument("--mode-max-tokens", type=int, help="tokens per prior, fact-sheet, premise-check reply (512)")
    judges.add_endpoint_args(p)  # --base-url, --model, --judge-*, --timeout, --retries, --concurrency, --cache
    return p.parse_args(argv)


def _check(args) -> tuple:
    """(methods, config, loaded files) from the flags; ValueError names the first bad flag or file."""
    rules = [m.strip() for m in args.rules.split(",") if m.strip()]
    if not rules or len(set(rules)) != len(rules) or not set(rules) <= set(METHODS):
        raise ValueError(f"--rules must list distinct methods from {','.join(METHODS)}, got {args.rules!r}")
    modes = [judges.JudgeMode.parse(m) for m in args.judge_modes.split(",")]
    if len(set(modes)) != len(modes):
        raise ValueError(f"--judge-modes lists a mode twice: {args.judge_modes!r}")
    methods = []
    for r in rules:  # a judged rule runs once per mode: verdict, verdict+prior, ...
        methods += [r] if r == "base" else [r + (f"+{m.name}" if m.active else "") for m in modes]
    for flag, v in (("--seeds", args.seeds), ("--limit", args.limit), ("--concurrency", args.concurrency),
                    ("--max-calls", args.max_calls), ("--max-tokens", args.max_tokens),
                    ("--judge-max-tokens", args.judge_max_tokens), ("--mode-max-tokens", args.mode_max_tokens)):
        if v is not None and v < 1:
            raise ValueError(f"{flag} must be >= 1, got {v}")
    if not args.base_url:
        raise ValueError("--base-url is required (evaluate.py runs a real model)")
    config = verdict.Config(n=args.n, tau=args.tau, eps=args.eps, max_steps=args.max_steps)
    loaded = [load(path) for path in args.data]
    names = [name for name, _, _ in loaded]
    if len(set(names)) != len(names):
        raise ValueError(f"two --data files have the same name {next(n for n in names if names.count(n) > 1)!r}")
    return methods, config, loaded


def claim_out(out: str, settings: dict) -> None:
    """Create OUT, or check that the run it holds has the same settings: two runs never share a table."""
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "run.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            old = json.load(fh).get("settings", {})
        diff = [k for k in settings if old.get(k) != settings[k]]
        if diff:
            raise ValueError(f"{out} holds a run with other settings ({', '.join(diff)}); use another --out")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump({"format": RUN_FORMAT, "settings": settings}, fh, indent=1)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        methods, config, loaded = _check(args)
        settings = json.loads(json.dumps({  # what a resumed run must share (not --concurrency, --timeout, ...)
            "model": args.model, "judge_model": args.judge_model or args.model,
            "config": {**asdict(config), "rule": None}, "max_calls": args.max_calls, "max_tokens": args.max_tokens,
            "judge_max_tokens": args.judge_max_tokens, "score_only": args.score_only,
            "mode_max_tokens": args.mode_max_tokens}))
        claim_out(args.out, settings)
        args.cache = args.cache or os.path.join(args.out, "cache.sqlite")  # so the methods always share calls
        rc, jc = judges.clients_from_args(args)
    except (ValueError, OSError) as e:
        print(f"evaluate.py: error: {e}", file=sys.stderr)
        return 2
    skipped = [s for _, _, sk in loaded for s in sk]
    for s in skipped:
        print(f"evaluate.py: skipping {s.data} row {s.row}: {s.reason}", file=sys.stderr)
    names, items, seeds = [n for n, _, _ in loaded], {n: its[:args.limit] for n, its, _ in loaded}, list(range(args.seeds))
    results = os.path.join(args.out, "results.jsonl")
    done, dropped = load_rows(results)
    if dropped:
        print(f"evaluate.py: {results}: {dropped} unfinished or failed row(s) will run again", file=sys.stderr)
    opts = {"config": config, "max_calls": args.max_calls, "max_tokens": args.max_tokens, "concurrency": args.concurrency,
            "judge_kw": {k: v for k, v in (("max_tokens", args.judge_max_tokens), ("score_only", args.score_only)) if v},
            "mode_kw": {"max_tokens": args.mode_max_tokens} if args.mode_max_tokens else {}}
    plan = [it for n in names for it in items[n]]
    keys = [(it.data, it.id, s, m) for it in plan for s in seeds for m in methods]
    todo = [(it, [(s, m) for s in seeds for m in methods if (it.data, it.id, s, m) not in done]) for it in plan]
    fatal = _run([t for t in todo if t[1]], rc, jc, opts, results, done, keys, len(plan))
    if fatal:
        print(f"evaluate.py: error: the endpoint cannot be used: {fatal}", file=sys.stderr)
        return 2
    summary = summarize([done[k] for k in keys if k in done], names, methods, seeds)
    summary.update(settings=settings, items={n: len(items[n]) for n in names},
                   skipped=[vars(s) for s in skipped], rows=sum(k in done for k in keys))
    md = render(summary)
    for name, text in (("summary.json", json.dumps(summary, indent=1, allow_nan=False)), ("summary.md", md)):
        with open(os.path.join(args.out, name), "w", encoding="utf-8") as fh:
            fh.write(text)
    print(md, end="")
    return 0


def _run(todo, rc, jc, opts, results, done, keys, total) -> str | None:
    """Run the tasks on --concurrency threads, appending each row as it finishes. Returns the error if,
    before any reply came, the endpoint could not be reached or refused us (401, 403, 404): fail fast."""
    lock, reached, stop, fatal = threading.Lock(), threading.Event(), threading.Event(), []
    score = {"base": [0, 0], "verdict": [0, 0]}  # method -> [correct, rows], for the progress line

    def tally(row):
        if row["method"] in score:
            score[row["method"]][0] += row["correct"]
            score[row["method"]][1] += 1
    for k in keys:
        if k in done:
            tally(done[k])
    t0, finished, tty = time.perf_counter(), [total - len(todo)], sys.stderr.isatty()

    def progress():
        ran = finished[0] - (total - len(todo))
        eta = (time.perf_counter() - t0) / ran * (total - finished[0]) if ran else None
        line = f"{finished[0]}/{total} items"
        line += "".join(f"  acc {m} {100 * c / n:.1f}%" for m, (c, n) in score.items() if n)
        line += f"  ETA {int(eta // 60)}m{int(eta % 60):02d}s" if eta is not None else ""
        print("\r" + line + "\033[K" if tty else line, end="" if tty else "\n", file=sys.stderr, flush=True)

    def task(item, chains, fh):
        meter = {"spent": 0, "budget": None}
        trc = _fork(rc, meter, reached)
        tjc = trc if jc is rc else _fork(jc, meter, reached)
        for seed, m in chains:
            if stop.is_set():
                return
            row, error = run_chain(item, seed, m, trc, tjc, opts)
            if isinstance(error, judges.EndpointError) and error.status in (None, 401, 403, 404) and not reached.is_set():
                fatal.append(str(error))
                return stop.set()
            with lock:
                fh.write(json.dumps(row, allow_nan=False) + "\n")
                fh.flush()
                done[row_key(row)] = row
                tally(row)
        with lock:
            finished[0] += 1
            progress()
        for c in {trc, tjc}:
            c.session.close()

    with open(results, "a", encoding="utf-8") as fh:
        pool = ThreadPoolExecutor(max_workers=opts["concurrency"])
        try:
            for f in [pool.submit(task, it, chains, fh) for it, chains in todo]:
                f.result()  # a bug in a task surfaces here, with its traceback
        finally:  # also on Ctrl-C: no new chain starts; the chains in flight finish and are kept
            stop.set()
            pool.shutdown(cancel_futures=True)
            if tty:  # end the progress line
                print(file=sys.stderr)
    return fatal[0] if fatal else None


if __name__ == "__main__":
    sys.exit(main())
