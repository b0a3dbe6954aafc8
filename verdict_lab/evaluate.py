"""VERDICT evaluation harness: the paper's results table for any served model and benchmark file.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026. This module implements the experiments section:

- the results table: accuracy per benchmark, mean ± std over seeds, the unweighted Avg and the gain
  over the base model, for the base model, the aggregation baselines and VERDICT. "Same agents,
  different aggregation": every rule runs verdict.run with the same reasoner and judges, and only
  verdict.select's rule differs;
- the method section's fallback rate ("roughly 15% of steps"), beside the abstention, unanswered
  and stopped rates and the cost per item (model calls, tokens, seconds);
- the judge modes of the related papers (JudgeMode: SGV's prior, EVPV's fact sheet and gate,
  ReVISE's look again) as further rows of the same table.

    python evaluate.py --data MMStar.tsv --data mine.jsonl --base-url URL --model NAME \\
        --seeds 3 --out runs/x

Inputs are VLMEvalKit TSVs and JSONL files (harness/benchmarks.py says how rows become items). The
chains run in harness/chains.py; this module checks the flags, reads the files and writes the
tables.

Methods. `base` is the reasoner alone: one sampled chain per seed (verdict.run with n = 1 and no
judges, the reasoner at the paper's T and top-p, its seed = the seed index). Rule r runs verdict.run
with the reasoner of the same seed and Config(rule=r). All chains of one item run one after another
in one thread against one response cache (--cache, default OUT/cache.sqlite), so wherever chains
coincide they get the same candidates and scores, from the cache, with no new request.

Searches (harness/rows.py names them, docs/search.md): --rules also takes bonN+AGG+SCORE
(best-of-N), wbonN+AGG+SCORE (weighted best-of-N), majN (majority vote, no judge) and
beamWxE+AGG+SCORE[+filter] (beam search), AGG one of last, min, prod and SCORE one of
search.STEP_SCORES: "bon8+last+key", "maj8", "beam2x3+last+key+filter". Each runs once (plain
judges, no --revise), the rows after the rules'. Chain i of seed s is sampled at reasoner seed
s + 1000·i (chain 0 is base's), so a sweep over N (bon1,bon2,bon4,...) sends each chain and judge
call once, through the cache. Each row records its compute (reasoner calls and tokens, judge calls,
requests sent), and with a search the summary adds accuracy against compute (summary.md's table,
compute.png).

Judge modes. --judge-mode lists modes, comma-separated (plain, prior, premises, prior+premises,
zoom, ...); every judged rule runs in each, as a row named rule+mode: verdict, verdict+prior,
verdict+premises, verdict+prior+premises. The reasoner's requests do not depend on the mode, so the
cache gives a mode row the plain row's candidates wherever their chains coincide, and the rows
differ only by the judges. Each row records the mode's extra calls and tokens (prior, fact sheet,
premise checks, region requests; cached replies counted), its fact sheet's status (ok, retried or
degraded), its premise checks (gate_checks), its region requests and how many of them sent close-ups
(zoom_requests, zoomed); its trace's meta holds the prior, the fact sheet, every check and every
region named. The mode's JSON requests share the judges' --judge-format: json sends their schemas in
response_format.

Revise on reject. --revise adds, for every judged row, a twin named row+revise (verdict+revise,
verdict+zoom+revise, ...): when no candidate of a step passes, the reasoner's model revises the best
one from the judges' reasons (revise.Reviser) and the same judges score the revision, which is taken
if it passes (verdict.step). Each row records its revisions, those taken, and their calls and tokens
(revise_calls, revise_tokens: the reviser's call and the revision's judgements).

Answers are read from the final step: the text after "Final answer:" (trace.answer), or, for a chain
stopped by --max-steps or --max-calls (stopped = "budget"), its last chosen step, as VLMEvalKit
reads a truncated response; answers.score turns it into a letter (VLMEvalKit's can_infer) or a
value. With --extract-model, a model on any OpenAI-compatible endpoint reads what the rules cannot
(off by default; VLMEvalKit uses gpt-4o-mini whenever a key is set); its calls are counted apart.

Output in OUT (harness/rundir.py, harness/tables.py, cases.py): results.jsonl (one
"verdict-eval-row/3" per (item, seed, method), appended whole and flushed as each finishes, with its
input columns, the digest of its item's input (question, options, answer, columns, image bytes) and
full trace),
summary.md, summary.json ("verdict-eval/4": also each file's sha256 and its items' digests),
summary.png, cases.html (the case viewer: every chain, step by step; docs/cases.md), and
VLMEvalKit's prediction and accuracy files in OUT/<model>-<method>/seed<k>/
(docs/benchmarks.md). A re-run with the same OUT keeps finished rows, runs again rows that ended in
an error and the rows of an item whose input changed (or is unknown: rows of format /2), says how
many items changed, and drops a truncated last line; with nothing left to run, it says so and
prints the table. OUT/run.json holds the settings, written once the inputs are read: once a row is
finished, a re-run with another model or setting is refused, while the endpoint may change (said
once); a second run on an OUT in use stops at once. --concurrency K runs K items at once; within an
item every call runs one after another, so at most K requests are in flight (set K to the server's
parallel slots).
--shard i/k runs the items whose id hashes to i of k; `python evaluate.py merge OUT1 ... --out OUT`
merges the shards: of one run, read from the same files (sha256), into an OUT that holds no run
yet.

Sweeps. --sweep tau=0.01,0.1,0.6 (eps, lam_V, lam_L, lam_C alike), --judge-model A,B or --model A,B
with one --judge-model: each setting a run in OUT/<setting>/ against one response cache, then the
sweep's tables and picture in OUT (harness/sweep.py; docs/sweeps.md).

Exit status: 0; 2 when nothing could run or the run could not go on (a bad flag or file, a file with
no item, an OUT in use or damaged, an endpoint that never answered or refused us with 401, 403 or
404 or redirected us (3xx), a response cache that cannot be used, a full disk: the rows already
written are kept, whole; OUT/cases.html not written, said after the tables);
3 when more than --max-error-rate of the chains ended in an error (an EndpointError after the first
reply, which is that row's error and counts wrong), or when the judges of a judged method never
gave a score (every judge call abstained: its rows are the reasoner's alone); 130 on Ctrl-C (said at
once; every finished row is kept, and the chains in flight get a few seconds to finish, none after a
second Ctrl-C). Each error is one line on stderr.
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import replace

from judges import shown_url
from verdict_lab import cases, cli, flags
from verdict_lab.text import one_line
from verdict_lab.cache import CacheError
from verdict_lab.flags import add_verifier_args, modes_of, settings_of
from verdict_lab.harness import benchmarks, rundir, sweep, tables, vlmeval_files
from verdict_lab.harness.chains import Harness, Progress, check_method, file_sha256, input_digest
from verdict_lab.harness.items import Inputs
from verdict_lab.harness.rows import SPELLINGS, Method
from verdict_lab.verifier import RULES as METHODS, Settings


# ----------------------------------------------------------------------------- command line


def parse_args(argv):
    p = cli.Parser(
        prog="verdict_lab.evaluate",
        description="The paper's results table for a served model on benchmark files.",
    )
    _add_run_args(p)
    p.add_argument(
        "--extract-model", help="a model that reads the final answers the rules cannot (off)"
    )
    p.add_argument(
        "--extract-base-url", help="its endpoint (default: --judge-base-url, else --base-url)"
    )
    p.add_argument(
        "--shard",
        help="run shard i of k (1 <= i <= k): the items whose file and id hash to i; see merge",
    )
    p.add_argument(
        "--max-error-rate",
        type=float,
        default=0.05,
        help="exit 3, with a warning above the table, when a larger share of the chains ended in "
        "an error (0.05)",
    )
    _add_input_args(p)
    p.add_argument(
        "--sweep",
        help="NAME=V1,V2,... for NAME in tau, eps, lam_V, lam_L, lam_C: a run per value, in "
        "OUT/NAME=V, on the same items, seeds and judges, sharing every identical request; "
        "--judge-model A,B and --model A,B (with one --judge-model) compare models so "
        "(harness/sweep.py)",
    )
    # The verifier's flags: --n, --tau, --eps, --lam, --max-steps, --max-tokens, --judge-*, ...
    add_verifier_args(p)
    # The endpoint's flags: --base-url, --model, --judge-*, --timeout, --concurrency, --cache, ...
    flags.add_endpoint_args(p)
    return p.parse_args(argv)


def _add_run_args(p) -> None:
    """The flags of what runs: the benchmark files, the methods, the seeds and items, OUT and the
    call budget."""
    p.add_argument(
        "--data",
        action="append",
        required=True,
        help="a VLMEvalKit .tsv or a .jsonl; repeat for several",
    )
    p.add_argument(
        "--rules",
        default=",".join(METHODS),
        help=f"methods to run, comma-separated ({','.join(METHODS)}), and searches: {SPELLINGS} "
        "(docs/search.md)",
    )
    p.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 for the reasoner (3)")
    p.add_argument("--limit", type=int, help="the first N valid items of each file")
    p.add_argument("--out", default="runs/eval", help="output directory (runs/eval)")
    p.add_argument(
        "--max-calls",
        type=int,
        help="most model calls per chain; past it the chain stops as 'budget'",
    )


def _add_input_args(p) -> None:
    """The flags of how an item's images and prompt are read and sent."""
    p.add_argument(
        "--allow-any-path",
        action="store_true",
        help="read image paths outside the data file's directory",
    )
    p.add_argument(
        "--original-images",
        action="store_true",
        help="send a TSV's own image bytes, not VLMEvalKit's dump_image re-save of them "
        "(docs/parity.md)",
    )
    p.add_argument(
        "--stripped-prompts",
        action="store_true",
        help="end each prompt without the whitespace VLMEvalKit's build_prompt leaves "
        "('above. \\n')",
    )


def parse_shard(text: str | None) -> tuple | None:
    """ "i/k" -> (i, k) with 1 <= i <= k; None -> None."""
    if text is None:
        return None
    i, _, k = text.partition("/")
    if not (i.isdigit() and k.isdigit() and 1 <= int(i) <= int(k)):
        raise ValueError(f"--shard must be i/k with 1 <= i <= k, like 2/4, got {text!r}")
    return int(i), int(k)


def shard_of(data: str, id: str, k: int) -> int:
    """The shard (1..k) of an item: a hash of its file name and id, the same on every machine."""
    return int(hashlib.sha256(f"{data}\t{id}".encode()).hexdigest()[:16], 16) % k + 1


def check_error_rate(rate: float) -> None:
    if not 0 <= rate <= 1:  # NaN fails too
        raise ValueError(f"--max-error-rate must be in [0, 1], got {rate}")


def check_args(args) -> tuple:
    """(methods (rows.Method), the run's verifier.Settings) from the flags; ValueError names the
    first bad flag, before any call is made (Settings checks the verifier's: τ in [0, 1],
    ε in (0, 1], ...)."""
    rules = [m.strip() for m in args.rules.split(",") if m.strip()]
    # A bad name raises ValueError.
    searches = [search_method(r, args.rules) for r in rules if r not in METHODS]
    if not rules or len(set(rules)) != len(rules):
        raise ValueError(
            f"--rules must list distinct methods from {','.join(METHODS)}, got {args.rules!r}"
        )
    settings, modes = (
        settings_of(args, judge_mode="plain", max_calls=args.max_calls),
        modes_of(args),
    )
    methods = []
    # A judged rule runs once per mode: verdict, verdict+prior, ...
    for r in (r for r in rules if r in METHODS):
        methods += [Method(r)] if r == "base" else [Method(r, m) for m in modes]
    methods += [replace(m, revise=True) for m in methods if m.judged] if args.revise else []
    for m in searches:  # a search runs once, plain (check_method: what its seed scheme can run)
        check_method(m, settings, args.seeds)
    methods += searches
    for flag, v in (
        ("--seeds", args.seeds),
        ("--limit", args.limit),
        ("--concurrency", args.concurrency),
    ):
        if v is not None and v < 1:
            raise ValueError(f"{flag} must be >= 1, got {v}")
    check_error_rate(args.max_error_rate)
    if not args.base_url:
        raise ValueError("--base-url is required (evaluate runs a real model)")
    parse_shard(args.shard)
    return methods, replace(settings, revise=False)


def search_method(name: str, rules: str) -> Method:
    """A search named in --rules (rows.Method: bon8+last+key, wbon8+min+mean, maj8,
    beam2x3+last+key+filter); ValueError naming what is wrong with a search's name, or the methods
    --rules takes for another name."""
    try:
        method = Method.parse(name)
    except ValueError as e:
        if name.startswith(("bon", "wbon", "maj", "beam")):
            raise ValueError(f"--rules: {e}") from None
        method = None
    if method is None or not method.search:
        raise ValueError(
            f"--rules must list distinct methods from {','.join(METHODS)} or searches "
            f"({SPELLINGS}), got {rules!r}"
        )
    return method


def load_data(args, methods: int = 1) -> tuple:
    """([every --data file, read (this shard's items)], {its name: the sha256 of its bytes});
    ValueError for a file that cannot run: unreadable, no item at all, or a name another --data file
    has, or one whose VLMEvalKit files would overwrite another's (X and X_local are both
    VLMEvalKit's dataset X); or for a run of more than MAX_CHAINS chains (items × seeds ×
    `methods`)."""
    shard = parse_shard(args.shard)
    loaded, shas = [], {}
    for path in args.data:
        name = os.path.splitext(os.path.basename(path))[0]
        keep = (
            None
            if shard is None
            else (lambda id, name=name: shard_of(name, id, shard[1]) == shard[0])
        )
        f = benchmarks.load(path, args.limit, keep, args.allow_any_path, Inputs.of_args(args))
        if not f.total:
            first = f"; first: line {f.skipped[0].row}: {f.skipped[0].reason}" if f.skipped else ""
            raise ValueError(
                f"{f.file}: no item to run: {f.read} rows read, {len(f.skipped)} skipped, "
                f"{f.dropped} without an image{first}"
            )
        loaded.append(f)
        shas[f.name] = file_sha256(path)
    names = [f.name for f in loaded]
    if len(set(names)) != len(names):
        raise ValueError(
            f"two --data files have the same name {next(n for n in names if names.count(n) > 1)!r}"
        )
    outputs = [vlmeval_files.dataset_name(n) for n in names]
    if len(set(outputs)) != len(outputs):
        same = [n for n, o in zip(names, outputs) if outputs.count(o) > 1]
        raise ValueError(
            f"--data {' and '.join(same)} are both VLMEvalKit's dataset "
            f"{outputs[names.index(same[0])]!r}: their prediction and accuracy files would "
            "overwrite each other; run them with different --out"
        )
    chains = sum(f.total for f in loaded) * args.seeds * methods
    if chains > MAX_CHAINS:  # the plan alone would not fit in memory
        raise ValueError(
            f"{chains:,} chains (items × --seeds × methods), more than {MAX_CHAINS:,}: run fewer"
        )
    return loaded, shas


MAX_CHAINS = 10**7  # a run's chains at most: its plan is held in memory
# The settings a run's methods vary, or that decide nothing.
PER_METHOD = ("rule", "judge_mode", "revise", "speculate")


def run_record(args, settings: Settings) -> dict:
    """The settings a resumed run must share (not --concurrency, --timeout, ...), as stored in
    OUT/run.json: the endpoints too, so that no table mixes the answers of two servers, each as it
    may be shown (its user information, query values and the API key's value, wherever it stands,
    replaced by ***)."""
    key = os.environ.get(args.api_key_env or flags.DEFAULT_KEY_ENV, "").strip()
    url = lambda u: (
        shown_url(u.rstrip("/").replace(key, "***") if key else u.rstrip("/")) if u else u
    )
    verifier = {k: v for k, v in settings.record().items() if k not in PER_METHOD}
    extract_url = (
        url(args.extract_base_url or args.judge_base_url or args.base_url)
        if args.extract_model
        else None
    )
    return {
        "model": args.model,
        "judge_model": args.judge_model or args.model,
        "base_url": url(args.base_url),
        "judge_base_url": url(args.judge_base_url or args.base_url),
        "verifier": verifier,
        "extract_model": args.extract_model,
        "extract_base_url": extract_url,
        "shard": args.shard,
        # What reached the model: VLMEvalKit's inputs, or the files' own.
        "inputs": Inputs.of_args(args).record(),
    }


def fail(e) -> int:
    print(f"verdict_lab.evaluate: error: {e}", file=sys.stderr)
    return 2


def finish(summary: dict) -> int:
    """The exit status of a finished table: 3, with a line on stderr for each reason, if the judges
    of a judged method never gave a score or too many of its chains ended in an error; else 0."""
    status = 0
    if summary["silent_judges"]:
        print(
            f"verdict_lab.evaluate: {tables.silent_judges(summary)}: their rows equal the "
            "reasoner's alone",
            file=sys.stderr,
        )
        status = 3
    e = summary["errors"]
    for c in e["causes"]:  # why chains failed, said where the user looks
        print(f"verdict_lab.evaluate: {c['rows']} chain(s) ended in: {c['error']}", file=sys.stderr)
    if e["over"]:
        print(
            f"verdict_lab.evaluate: {e['rows']} of {summary['rows']} chains ({e['rate']:.1%}) "
            f"ended in an error, above --max-error-rate {summary['max_error_rate']}; run the same "
            "command again to retry them",
            file=sys.stderr,
        )
        status = 3
    return status


def main(argv=None) -> int:
    """The command; Ctrl-C ends it with exit 130, the rows finished kept: the chains' harness says
    at once what is kept (chains.Harness), and a line here says that the same command resumes."""
    try:
        return _main(sys.argv[1:] if argv is None else list(argv))
    except KeyboardInterrupt:
        print(
            "verdict_lab.evaluate: interrupted; the rows finished are kept: the same command "
            "resumes",
            file=sys.stderr,
        )
        return 130


def _main(argv: list) -> int:
    if argv[:1] == ["merge"]:
        return merge_main(argv[1:])
    args = parse_args(argv)
    if sweep.wanted(args):  # several settings or models: each a run of its own (harness/sweep.py)
        return sweep.main(args, one_run, check_args)
    return one_run(args)


def one_run(args, tap=None) -> int:
    """One run: the flags checked, OUT locked, the run. tap(reasoner, judge), when given, is shown
    the run's clients before any call (a sweep counts each setting's requests)."""
    try:
        methods, settings = check_args(args)
        record = run_record(args, settings)
        held = rundir.lock(args.out)
    except (ValueError, OSError) as e:
        return fail(e)
    try:
        return run(args, methods, settings, record, tap)
    finally:
        held.close()


def run(args, methods: list, settings: Settings, record: dict, tap=None) -> int:
    """The run itself, in a locked OUT. OUT/run.json records the settings only once the inputs are
    read and the clients made: a run that cannot start pins nothing."""
    results = os.path.join(args.out, "results.jsonl")
    try:
        loaded, shas, digests, (reasoner, judge, extractor) = start(args, record, len(methods), tap)
        lines = {(it.data, it.id): it.row for f in loaded for it in f.items}
        done, dropped, stale = rundir.load_rows(results, digests, lines)
    except (ValueError, OSError, CacheError) as e:
        return fail(e)
    report_reading(args, loaded)
    changed = report_dropped(results, dropped, stale)
    seeds = list(range(args.seeds))
    plan = [it for f in loaded for it in f.items]
    keys = [(it.data, it.id, s, str(m)) for it in plan for s in seeds for m in methods]
    todo = pending(plan, seeds, methods, done)
    if not todo:  # a finished run, run again: its table, and nothing sent
        print(
            f"verdict_lab.evaluate: nothing new ran: the {len(keys)} rows in {results} were "
            "already finished; the table is theirs",
            file=sys.stderr,
        )
    progress = Progress(len(plan), len(todo), [done[k] for k in keys if k in done], methods)
    harness = Harness(reasoner, judge, settings, results, done, progress, extractor, digests)
    try:
        fatal = harness.run(todo, args.concurrency)
    except OSError as e:  # results.jsonl cannot be opened
        return fail(e)
    if fatal:
        return fail(fatal)
    rows = [done[k] for k in keys if k in done]
    ctx = {
        "files": [f.name for f in loaded],
        "methods": [str(m) for m in methods],
        "seeds": seeds,
        "settings": record,
        "reading": reading_of(loaded, shas, digests, changed),
        "max_error_rate": args.max_error_rate,
    }
    summary = tables.summarize(rows, ctx)
    try:
        md = tables.write(args.out, summary, rows)
    except OSError as e:
        return fail(
            f"cannot write the tables in {args.out}: {e}; the rows are kept: the same command "
            "resumes"
        )
    print(md, end="")
    page = write_cases(args.out, rows, plan, summary)
    return finish(summary) or page


def write_cases(out: str, rows: list, items: list, summary: dict) -> int:
    """OUT/cases.html, the case viewer (cases.py): 0, or 2 with one line on stderr when it cannot
    be written (the rows and the tables are kept whole)."""
    try:
        cases.write_run(out, rows, items, summary)
    except Exception as e:  # The page only shows files already written: whatever fails, they stand.
        print(
            f"verdict_lab.evaluate: cannot write {os.path.join(out, 'cases.html')}: {one_line(e)}; "
            f"the rows and tables are kept: python -m verdict_lab.cases {out} --data FILE "
            "writes it",
            file=sys.stderr,
        )
        return 2
    return 0


def start(args, record: dict, methods: int, tap=None) -> tuple:
    """The run's start: OUT checked, the inputs read, the clients made and shown to tap, OUT
    claimed."""
    rundir.check(args.out, record)
    loaded, shas = load_data(args, methods)
    digests = {(it.data, it.id): input_digest(it) for f in loaded for it in f.items}
    # Without --cache the run keeps one in OUT, so that the methods always share calls.
    args.cache = args.cache or os.path.join(args.out, "cache.sqlite")
    reasoner, judge = flags.clients_from_args(args)
    if tap is not None:
        tap(reasoner, judge)
    extractor = (
        flags.endpoint_client(args, record["extract_base_url"], args.extract_model, reasoner.cache)
        if args.extract_model
        else None
    )
    for note in rundir.claim(args.out, record):  # an endpoint that changed, said once
        print(f"verdict_lab.evaluate: {note}", file=sys.stderr)
    return loaded, shas, digests, (reasoner, judge, extractor)


def report_reading(args, loaded: list) -> None:
    """Say on stderr what precedes the first call: an unsent API key, each file's warnings and
    skips."""
    if warning := flags.key_warning(args):
        print(f"verdict_lab.evaluate: {warning}", file=sys.stderr)
    for f in loaded:
        for w in f.warnings:
            print(f"verdict_lab.evaluate: warning: {w}", file=sys.stderr)
        for s in f.skipped:
            print(
                f"verdict_lab.evaluate: skipping {s.file} line {s.row}: {s.reason}", file=sys.stderr
            )


def pending(plan: list, seeds: list, methods: list, done: dict) -> list:
    """[(item, [(seed, method) with no row in done])] of the items of plan with any, in plan's
    order."""
    todo = [
        (it, [(s, m) for s in seeds for m in methods if (it.data, it.id, s, str(m)) not in done])
        for it in plan
    ]
    return [t for t in todo if t[1]]


def reading_of(loaded: list, shas: dict, digests: dict, changed: set) -> dict:
    """{file: its reading, sha256, items changed and each item's input digest}: the summary's
    reading."""
    return {
        f.name: {
            **f.reading(),
            "sha256": shas[f.name],
            "changed": len({id for data, id in changed if data == f.name}),
            "inputs": {it.id: digests[it.data, it.id] for it in f.items},  # what each row ran
        }
        for f in loaded
    }


def report_dropped(results: str, dropped: int, stale: list) -> set:
    """Say on stderr which rows of a resumed run run again; returns the (data, id) of the items that
    run again for an input changed since their rows were written."""
    if dropped > len(stale):
        print(
            f"verdict_lab.evaluate: {results}: {dropped - len(stale)} unfinished or failed row(s) "
            "will run again",
            file=sys.stderr,
        )
    items = {(r.data, r.id) for r in stale}
    if items:
        print(
            f"verdict_lab.evaluate: {len(items)} item(s) changed since their rows were written"
            + f"; their {len(stale)} row(s) will run again",
            file=sys.stderr,
        )
    return items


def merge_main(argv) -> int:
    """python evaluate.py merge OUT1 OUT2 ... --out OUT: the shards of one run, as one table."""
    p = cli.Parser(
        prog="verdict_lab.evaluate merge",
        description="Merge the --shard directories of one run into one table.",
    )
    p.add_argument(
        "dirs", nargs="+", help="the shards' --out directories, every shard 1/k..k/k once"
    )
    p.add_argument("--out", required=True, help="the merged run's directory")
    p.add_argument("--max-error-rate", type=float, default=0.05, help="as for a run (0.05)")
    args = p.parse_args(argv)
    try:
        check_error_rate(args.max_error_rate)
        held = rundir.lock(args.out)
    except (ValueError, OSError) as e:
        return fail(e)
    try:
        summary, rows = rundir.merge(args.dirs, args.out, args.max_error_rate)
        print(tables.write(args.out, summary, rows), end="")
    except (ValueError, OSError) as e:
        return fail(e)
    finally:
        held.close()
    return finish(summary)


if __name__ == "__main__":
    status = main()
    if status == 130:  # Ctrl-C: a request still in flight, in any thread, must not hold the exit
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)
