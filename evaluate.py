"""VERDICT evaluation harness: the paper's results table for any served model and benchmark file.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026. This module implements the experiments section:

- the results table: accuracy per benchmark, mean ± std over seeds, the unweighted Avg and the gain
  over the base model, for the base model, the aggregation baselines and VERDICT. "Same agents,
  different aggregation": every rule runs verdict.run with the same reasoner and judges, and only
  verdict.select's rule differs;
- the method section's fallback rate ("roughly 15% of steps"), beside the abstention, unanswered
  and stopped rates and the cost per item (model calls, tokens, seconds);
- the judge modes of the related papers (grounding.JudgeMode: SGV's prior, EVPV's fact sheet and gate)
  as further rows of the same table.

    python evaluate.py --data MMStar.tsv --data mine.jsonl --base-url URL --model NAME --seeds 3 --out runs/x

Inputs are VLMEvalKit TSVs and JSONL files (benchmarks.py says how rows become items).

Methods. `base` is the reasoner alone: one sampled chain per seed (verdict.run with n = 1 and no judges,
the reasoner at the paper's T and top-p, its seed = the seed index). Rule r runs verdict.run with the
reasoner of the same seed and Config(rule=r). All chains of one item run one after another in one
thread against one response cache (--cache, default OUT/cache.sqlite), so wherever chains coincide
they get the same candidates and scores, from the cache, with no new request.

Judge modes. --judge-modes lists modes (plain, prior, premises, prior+premises, premises+gate, ...);
every judged rule runs in each, as a row named rule+mode: verdict, verdict+prior, verdict+premises,
verdict+prior+premises. The reasoner's requests do not depend on the mode, so the cache gives a mode
row the plain row's candidates wherever their chains coincide, and the rows differ only by the judges.
Each row records the mode's extra calls and tokens (prior, fact sheet, premise checks; cached replies
counted) and whether its fact sheet degraded; its trace's meta holds the prior and the fact sheet.

Answers are read from the final step: the text after "Final answer:" (trace.answer), or, for a chain
stopped by --max-steps or --max-calls (stopped = "budget"), its last chosen step, as VLMEvalKit reads a
truncated response; benchmarks.extract turns it into a letter. Each row records how.

Output in OUT: results.jsonl (one "verdict-eval-row/1" per (item, seed, method), appended and
flushed as each finishes, with its full trace), summary.md and summary.json ("verdict-eval/1").
A re-run with the same OUT keeps finished rows, runs again rows that ended in an error, and drops
a truncated last line; OUT/run.json holds the settings, and a re-run with other ones is refused.
--concurrency K runs K items at once; within an item every call (its seeds, its methods, the n×m
judge calls of a step) runs one after another, so at most K requests are in flight (set K to the
server's parallel slots), and no two threads ever send the same request. If the endpoint cannot be
reached (or answers 401, 403, 404) before its first reply, the run stops with exit 2; any later
EndpointError becomes that row's error (wrong).
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace

import benchmarks
import client
import grounding
import judges
import verdict
from benchmarks import Item

ROW_FORMAT, SUMMARY_FORMAT, RUN_FORMAT = "verdict-eval-row/1", "verdict-eval/1", "verdict-eval-run/1"
METHODS = ("base",) + verdict.RULES


# ----------------------------------------------------------------------------- one chain

class CallBudget:
    """At most `limit` model calls per chain (--max-calls; None: no limit), shared by the chain's reasoner
    and judge clients, whose on_chat hook is `spend`. Past the limit, verdict.Stop("budget") ends the chain."""

    def __init__(self, limit: int | None):
        self.limit, self.spent = limit, 0

    def spend(self) -> None:
        if self.limit is not None and self.spent >= self.limit:
            raise verdict.Stop("budget")
        self.spent += 1


@dataclass(frozen=True)
class Settings:
    """What every chain of a run shares, from the flags."""
    config: verdict.Config
    max_calls: int | None      # per chain
    max_tokens: int            # per reasoner step
    judge_kw: dict             # Judge's max_tokens, score_only, and the run's one JudgeFormat
    mode_kw: dict              # Grounding's max_tokens


@dataclass
class ChainClients:
    """One item's clients, used by one thread: the reasoner's and the judges' (the same object when they
    share an endpoint and model), forks of the run's clients that share its cache and one call budget."""
    reasoner: client.Client
    judges: client.Client
    budget: CallBudget

    @classmethod
    def fork(cls, reasoner: client.Client, judge: client.Client, limit: int | None) -> "ChainClients":
        budget = CallBudget(limit)
        forked = reasoner.fork(on_chat=budget.spend)
        return cls(forked, forked if judge is reasoner else judge.fork(on_chat=budget.spend), budget)

    def usage(self) -> dict:
        """The clients' usage counters, summed."""
        both = [self.reasoner] if self.judges is self.reasoner else [self.reasoner, self.judges]
        return {k: sum(c.usage[k] for c in both) for k in both[0].usage}

    def close(self) -> None:
        for c in {self.reasoner, self.judges}:
            c.close()


def final_text(trace) -> str | None:
    """The text an answer is read from: after "Final answer:" if the chain ended there, else its last
    chosen step (a chain stopped by a budget); None without a step."""
    if trace is None or not trace.steps:
        return None
    return trace.answer if trace.stopped == "final" else trace.chain[-1]


def run_chain(item: Item, seed: int, method: str, clients: ChainClients, settings: Settings) -> tuple:
    """(row of results.jsonl, None), or (error row, the exception) on EndpointError or ValueError."""
    rule, _, mode = method.partition("+")  # "verdict+prior+premises" -> rule verdict, mode prior+premises
    config = replace(settings.config, n=1) if method == "base" else replace(settings.config, rule=rule)
    evidence = grounding.Grounding(clients.judges, grounding.JudgeMode.parse(mode), **settings.mode_kw)
    before, clients.budget.spent = clients.usage(), 0
    t0, trace, error = time.perf_counter(), None, None
    try:
        reasoner = judges.Reasoner(clients.reasoner, max_tokens=settings.max_tokens, seed=seed)
        judge_fns = () if method == "base" else judges.make_judges(clients.judges, grounding=evidence, **settings.judge_kw)
        trace = verdict.run(item.question, reasoner, judge_fns, config, item.images or None)
    except (client.EndpointError, ValueError) as e:
        error = e
    pred, how = benchmarks.extract(final_text(trace), item.options)
    record = evidence.record(item.question, item.images)
    meta = {"method": method, "seed": seed, **({"grounding": record} if evidence.mode.active else {}),
            **(judges.record(trace, judge_fns) if trace else {})}
    used = {k: v - before[k] for k, v in clients.usage().items()}
    return {"format": ROW_FORMAT, "data": item.data, "id": item.id, "row": item.row, "seed": seed,
            "method": method, "answer": item.answer, "pred": pred, "extracted": how, "correct": pred == item.answer,
            "stopped": trace.stopped if trace else None, "error": f"{type(error).__name__}: {error}" if error else None,
            "calls": used["calls"], "sent": used["requests"], "cached": used["cache_hits"], "replies": used["replies"],
            "tokens": used["call_tokens"], "seconds": round(time.perf_counter() - t0, 3),
            "extra_calls": record["extra_calls"], "extra_tokens": record["extra_tokens"],
            "fact_sheet_status": record.get("fact_sheet_status"),
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


# ----------------------------------------------------------------------------- running the items

class Progress:
    """One line on stderr: items finished, the running accuracy of base and verdict, an ETA. Not thread-safe:
    the Harness calls it under its lock."""

    def __init__(self, total: int, todo: int, rows):
        self.total, self.todo, self.finished = total, todo, total - todo
        self.score = {"base": [0, 0], "verdict": [0, 0]}  # method -> [correct, rows]
        self.t0, self.tty = time.perf_counter(), sys.stderr.isatty()
        for row in rows:
            self.count(row)

    def count(self, row: dict) -> None:
        if row["method"] in self.score:
            self.score[row["method"]][0] += row["correct"]
            self.score[row["method"]][1] += 1

    def item_done(self) -> None:
        self.finished += 1
        ran = self.finished - (self.total - self.todo)
        eta = (time.perf_counter() - self.t0) / ran * (self.total - self.finished)
        line = f"{self.finished}/{self.total} items"
        line += "".join(f"  acc {m} {100 * c / n:.1f}%" for m, (c, n) in self.score.items() if n)
        line += f"  ETA {int(eta // 60)}m{int(eta % 60):02d}s"
        print("\r" + line + "\033[K" if self.tty else line, end="" if self.tty else "\n", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.tty:  # end the progress line
            print(file=sys.stderr)


class Harness:
    """Runs each item's chains in one thread, --concurrency items at once, appending every row to
    results.jsonl (and to `done`) as it finishes. Fail fast: if, before any reply came, the endpoint could
    not be reached or refused us (401, 403, 404), every thread stops and run() returns the error."""

    def __init__(self, reasoner: client.Client, judge: client.Client, settings: Settings, results: str, done: dict,
                 progress: Progress):
        self.reasoner, self.judge, self.settings, self.results, self.done = reasoner, judge, settings, results, done
        self.progress = progress
        self.lock, self.stop, self.reached = threading.Lock(), threading.Event(), threading.Event()
        self.fatal: str | None = None

    def run(self, todo: list, concurrency: int) -> str | None:
        with open(self.results, "a", encoding="utf-8") as self.fh:
            pool = ThreadPoolExecutor(max_workers=concurrency)
            try:
                for f in [pool.submit(self.item, it, chains) for it, chains in todo]:
                    f.result()  # a bug in a task surfaces here, with its traceback
            finally:  # also on Ctrl-C: no new chain starts; the chains in flight finish and are kept
                self.stop.set()
                pool.shutdown(cancel_futures=True)
                self.progress.close()
        return self.fatal

    def item(self, item: Item, chains: list) -> None:
        clients = ChainClients.fork(self.reasoner, self.judge, self.settings.max_calls)
        try:
            for seed, method in chains:
                if self.stop.is_set():
                    return
                row, error = run_chain(item, seed, method, clients, self.settings)
                if row["replies"]:
                    self.reached.set()
                if self.refused(error):
                    self.fatal = str(error)
                    self.stop.set()
                    return
                self.write(row)
            with self.lock:
                self.progress.item_done()
        finally:
            clients.close()

    def refused(self, error) -> bool:
        """The endpoint never answered and this error says it will not: unreachable, or 401, 403, 404."""
        return (isinstance(error, client.EndpointError) and error.status in (None, 401, 403, 404)
                and not self.reached.is_set())

    def write(self, row: dict) -> None:
        with self.lock:
            self.fh.write(json.dumps(row, allow_nan=False) + "\n")
            self.fh.flush()
            self.done[row_key(row)] = row
            self.progress.count(row)


# ----------------------------------------------------------------------------- command line

def parse_args(argv):
    p = client.Parser(prog="evaluate.py", description="The paper's results table for a served model on benchmark files.")
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
    p.add_argument("--score-only", action="store_true", help="judges reply with the score alone")
    judges.add_format_arg(p)
    p.add_argument("--judge-modes", default="plain", help="judge modes, comma-separated, each a row per judged rule: "
                   "plain, prior (SGV), premises (EVPV), premises+gate, prior+premises, ... (plain)")
    p.add_argument("--mode-max-tokens", type=int, help="tokens per prior, fact-sheet, premise-check reply (512)")
    client.add_endpoint_args(p)  # --base-url, --model, --judge-*, --timeout, --retries, --concurrency, --cache
    return p.parse_args(argv)


def check_args(args) -> tuple:
    """(methods, config, loaded files) from the flags; ValueError names the first bad flag or file."""
    rules = [m.strip() for m in args.rules.split(",") if m.strip()]
    if not rules or len(set(rules)) != len(rules) or not set(rules) <= set(METHODS):
        raise ValueError(f"--rules must list distinct methods from {','.join(METHODS)}, got {args.rules!r}")
    modes = [grounding.JudgeMode.parse(m) for m in args.judge_modes.split(",")]
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
    loaded = [benchmarks.load(path) for path in args.data]
    names = [name for name, _, _ in loaded]
    if len(set(names)) != len(names):
        raise ValueError(f"two --data files have the same name {next(n for n in names if names.count(n) > 1)!r}")
    return methods, config, loaded


def settings_of(args, config: verdict.Config) -> Settings:
    judge_kw = {k: v for k, v in (("max_tokens", args.judge_max_tokens), ("score_only", args.score_only)) if v}
    judge_kw["fmt"] = judges.JudgeFormat(args.judge_format)  # one for the run: a fallback to text holds for every chain
    return Settings(config, args.max_calls, args.max_tokens, judge_kw,
                    {"max_tokens": args.mode_max_tokens} if args.mode_max_tokens else {})


def run_record(args, config: verdict.Config) -> dict:
    """The settings a resumed run must share (not --concurrency, --timeout, ...), as stored in OUT/run.json."""
    return json.loads(json.dumps({
        "model": args.model, "judge_model": args.judge_model or args.model,
        "config": {**asdict(config), "rule": None}, "max_calls": args.max_calls, "max_tokens": args.max_tokens,
        "judge_max_tokens": args.judge_max_tokens, "score_only": args.score_only, "judge_format": args.judge_format,
        "mode_max_tokens": args.mode_max_tokens}))


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


def write_summary(out: str, summary: dict) -> str:
    """summary.json and summary.md in OUT; returns the markdown."""
    md = render(summary)
    for name, text in (("summary.json", json.dumps(summary, indent=1, allow_nan=False)), ("summary.md", md)):
        with open(os.path.join(out, name), "w", encoding="utf-8") as fh:
            fh.write(text)
    return md


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        methods, config, loaded = check_args(args)
        record = run_record(args, config)
        claim_out(args.out, record)
        args.cache = args.cache or os.path.join(args.out, "cache.sqlite")  # so the methods always share calls
        reasoner, judge = client.clients_from_args(args)
    except (ValueError, OSError, client.CacheError) as e:
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
    plan = [it for n in names for it in items[n]]
    keys = [(it.data, it.id, s, m) for it in plan for s in seeds for m in methods]
    todo = [(it, [(s, m) for s in seeds for m in methods if (it.data, it.id, s, m) not in done]) for it in plan]
    todo = [t for t in todo if t[1]]
    progress = Progress(len(plan), len(todo), [done[k] for k in keys if k in done])
    fatal = Harness(reasoner, judge, settings_of(args, config), results, done, progress).run(todo, args.concurrency)
    if fatal:
        print(f"evaluate.py: error: the endpoint cannot be used: {fatal}", file=sys.stderr)
        return 2
    summary = summarize([done[k] for k in keys if k in done], names, methods, seeds)
    summary.update(settings=record, items={n: len(items[n]) for n in names},
                   skipped=[vars(s) for s in skipped], rows=sum(k in done for k in keys))
    print(write_summary(args.out, summary), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
