"""The chains of VERDICT's harness: one (item, seed, method) run into a row, every item run across
threads, and the progress line.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026: "same agents, different aggregation". Every method runs
verdict.run with the same reasoner and judges and only verdict.select's rule differs; `base` is one
sampled chain (n = 1, no judges). The searches (search.py: best-of-N, weighted best-of-N, majority
vote, beam search) run the same reasoner and plain judges. evaluate.py checks the flags, reads the
files and writes the tables; this module runs the chains between:

- input_digest: what a row records of the item it ran (question, options, answer, columns, image
  bytes);
- run_chain: one chain (verifier.build and verifier.run), or one search (run_search), its answer
  read (answers.score, then the extraction model if any), as a rows.Row with its cost (calls,
  tokens, seconds; the reasoner's calls and tokens, the judges' calls), its judge mode's record and
  its revisions;
- the seed scheme of the searches (chain_seed, check_method): chain i of seed s is sampled by the
  reasoner of seed s + CHAIN_SEEDS·i, one candidate a step, so chain 0 is the base chain of seed s
  and chains 0..N−1 of every N are the same chains: through the response cache, a larger N pays only
  for the chains a smaller one did not sample, and every method for the judge calls another already
  made;
- ChainClients: one item's clients, forks of the run's that share its response cache, and the
  --max-calls budget their calls spend (verifier.CallBudget);
- Harness: each item's chains one after another in one thread, --concurrency items at once, every
  row appended to results.jsonl as it finishes; it stops every thread when the endpoint refuses us
  before any reply, or the response cache cannot be used;
- Progress: one line on stderr: items finished, chains failed, every method's running accuracy and
  an ETA.

It makes requests (through verifier): the harness readers never import it.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, replace

import verdict
from judges import SEED_STRIDE, EndpointError
from verdict_lab import client, search, verifier
from verdict_lab.cache import CacheError
from verdict_lab.formats import JudgeFormat
from verdict_lab.harness import answers, rundir
from verdict_lab.harness.benchmarks import Item
from verdict_lab.harness.rows import Method, Row
from verdict_lab.verifier import CallBudget, Settings

# ----------------------------------------------------------------------------- one chain


@dataclass
class ChainClients:
    """One item's clients, used by one thread: the reasoner's and the judges' (two forks even when
    they share an endpoint and model, so that each counts its own calls), forks of the run's clients
    that share its cache, its requests in flight and one call budget, and the extraction model's (no
    budget), if any."""

    reasoner: client.Client
    judges: client.Client
    budget: CallBudget
    extractor: client.Client | None = None

    @classmethod
    def fork(
        cls,
        reasoner: client.Client,
        judge: client.Client,
        limit: int | None,
        extractor: client.Client | None = None,
    ) -> "ChainClients":
        budget = CallBudget(limit)
        return cls(
            reasoner.fork(on_chat=budget.spend),
            judge.fork(on_chat=budget.spend),
            budget,
            extractor.fork() if extractor else None,
        )

    def usage(self) -> dict:
        """The reasoner's and judges' usage counters, summed."""
        return client.total_usage((self.reasoner, self.judges))

    def close(self) -> None:
        for c in {self.reasoner, self.judges, self.extractor} - {None}:
            c.close()


def final_text(trace) -> str | None:
    """The text an answer is read from: after "Final answer:" if the chain ended there, else its
    last chosen step (a chain stopped by a budget); None without a step."""
    if trace is None or not trace.steps:
        return None
    return trace.answer if trace.stopped == "final" else trace.chain[-1]


def read_answer(item: Item, text: str | None, extractor: client.Client | None) -> tuple:
    """(prediction, how, correct, extraction calls, extraction tokens): answers.score, then the
    extraction model when the rules found nothing in a final answer."""
    pred, how, correct = answers.score(item, text)
    if how != "unanswered" or not text or extractor is None:
        return pred, how, correct, 0, 0
    before = extractor.usage
    pred, how, correct = answers.ask_model(extractor.chat, item, text)
    used = client.usage_change(before, extractor.usage)
    return pred, how, correct, used["calls"], used["call_tokens"]


def input_digest(item: Item) -> str:
    """The digest of everything a chain of `item` reads or is scored against: its question, options,
    answer, how a value is compared, its input columns and the bytes of its images (a path's file is
    read). Two items with the same digest run the same chains; a row records it (Row.input_digest).
    OSError if an image file cannot be read."""
    h = hashlib.sha256()
    text = [
        item.question,
        item.options,
        item.answer,
        asdict(item.value) if item.value else None,
        item.fields,
    ]
    h.update(json.dumps(text).encode("ascii") + b"\n")  # ensure_ascii: a lone surrogate is escaped
    for image in item.images:
        if isinstance(image, (bytes, bytearray)):
            h.update(hashlib.sha256(image).digest())
        else:
            h.update(bytes.fromhex(file_sha256(image)))
    return h.hexdigest()[:32]


def file_sha256(path: str) -> str:
    """The sha256 of a file's bytes (hex), read in chunks; OSError if it cannot be read."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def chain_settings(settings: Settings, method: Method) -> Settings:
    """The settings of one method's chains: its rule, judge mode and revising (base: none of them,
    and no speculation and no adaptive verification)."""
    speculate = settings.speculate and method.judged
    gated = {} if method.judged else dict(adaptive="off", adaptive_threshold=None)
    return replace(
        settings,
        rule=method.rule,
        judge_mode=method.mode.name,
        revise=method.revise,
        speculate=speculate,
        **gated,
    )


@dataclass
class Ran:
    """What a method's chain (or search) leaves for its row, filled as it runs: its trace as a dict,
    the text its answer is read from, how it stopped, its judge mode's record and its revisions."""

    trace: dict | None = None
    text: str | None = None
    stopped: str | None = None
    record: dict = field(default_factory=lambda: {"extra_calls": 0, "extra_tokens": 0})
    revisions: dict = field(default_factory=lambda: revisions(None))


def run_chain(
    item: Item,
    seed: int,
    method: Method,
    clients: ChainClients,
    settings: Settings,
    fmt: JudgeFormat,
    digest: str | None = None,
) -> tuple:
    """(row of results.jsonl, None), or (error row, the exception) on EndpointError or ValueError:
    the chain of `method` (verifier.build; a search: run_search) in the run's reply format `fmt`.
    The row records `digest`, input_digest(item) when it is None, and its compute from the clients'
    usage counters: all calls, requests and tokens, and apart the reasoner's calls and tokens and
    the judges' calls."""
    digest = digest or input_digest(item)
    before, clients.budget.spent = clients.usage(), 0
    split = (clients.reasoner.usage, clients.judges.usage)
    t0, ran, error = time.perf_counter(), Ran(), None
    pred, how, correct, ex_calls, ex_tokens = None, "unanswered", False, 0, 0
    try:
        (run_search if method.search else run_verdict)(
            item, seed, method, clients, settings, fmt, ran
        )
        pred, how, correct, ex_calls, ex_tokens = read_answer(item, ran.text, clients.extractor)
    except (EndpointError, ValueError) as e:
        error = e
    used = client.usage_change(before, clients.usage())
    reasoner = client.usage_change(split[0], clients.reasoner.usage)
    judged = client.usage_change(split[1], clients.judges.usage)
    fields = _row(item, seed, method, digest, ran, error, used, time.perf_counter() - t0)
    fields |= {"pred": pred, "extracted": how, "correct": correct}
    fields |= {"extract_calls": ex_calls, "extract_tokens": ex_tokens}
    fields |= {"reasoner_calls": reasoner["calls"], "reasoner_tokens": reasoner["call_tokens"]}
    return Row(**fields, judge_calls=judged["calls"]), error


def _row(
    item: Item, seed: int, method: Method, digest: str, ran: Ran, error, used: dict, seconds: float
):
    """A Row's fields but its answer and the compute run_chain adds, as a dict (run_chain builds the
    Row)."""
    record = ran.record
    return dict(
        data=item.data,
        id=item.id,
        row=item.row,
        seed=seed,
        method=method,
        answer=item.answer,
        prediction=ran.text,
        stopped=ran.stopped,
        error=f"{type(error).__name__}: {error}" if error else None,
        calls=used["calls"],
        sent=used["requests"],
        cached=used["cache_hits"],
        replies=used["replies"],
        tokens=used["call_tokens"],
        seconds=round(seconds, 3),
        extra_calls=record["extra_calls"],
        extra_tokens=record["extra_tokens"],
        fact_sheet_status=record.get("fact_sheet_status"),
        gate_checks=len(record.get("gate", [])),
        zoom_requests=len(record.get("zoom", [])),
        **ran.revisions,
        zoomed=sum(e["path"] == "zoom" for e in record.get("zoom", [])),
        input_digest=digest,
        input=dict(item.fields),
        trace=ran.trace,
    )


def run_verdict(
    item: Item, seed: int, method: Method, clients, settings: Settings, fmt, ran: Ran
) -> None:
    """One chain of a rule (base, verdict.RULES) in its judge mode, into `ran`: verifier.build and
    run."""
    v = verifier.build(
        chain_settings(settings, method), clients.reasoner, clients.judges, seed, fmt
    )
    try:
        trace = verifier.run(v, item.question, item.images or None, meter=clients.usage)
    finally:  # the judge mode's record, also of a chain that ended in an error
        ran.record = v.chain.record() if v.chain else ran.record
    ran.revisions = revisions(trace)
    ran.trace = replace(trace, meta={"method": str(method), "seed": seed, **trace.meta}).to_dict()
    ran.text, ran.stopped = final_text(trace), trace.stopped


# ----------------------------------------------------------------------------- one search

CHAIN_SEEDS = (
    1000  # chain i of seed s: the reasoner of seed s + CHAIN_SEEDS·i (so at most 1000 seeds)
)
MAX_CHAINS = (
    1000  # N at most: every sampling seed, (s + CHAIN_SEEDS·i)·SEED_STRIDE + j, stays below 2^31
)


def chain_seed(seed: int, i: int) -> int:
    """The reasoner seed of chain i of a search at row seed `seed`: seed + CHAIN_SEEDS·i. Chain 0 is
    the base chain of that seed (the same requests), and no two (seed, i) with seed < CHAIN_SEEDS
    share a seed, nor any sampling seed (judges.Reasoner keeps each reasoner seed's within its own
    block)."""
    return seed + CHAIN_SEEDS * i


def check_method(method: Method, settings: Settings, seeds: int) -> None:
    """ValueError, before any call, for a search the seed scheme cannot run: N over MAX_CHAINS, more
    than CHAIN_SEEDS seeds, or a beam whose first step, W·E candidates and their top-ups, needs more
    sampling seeds than a reasoner seed has ((1 + W·E)·W·E over judges.SEED_STRIDE)."""
    if not method.search:
        return
    if method.n is not None and method.n > MAX_CHAINS:
        raise ValueError(f"{method}: N must be at most {MAX_CHAINS}, got N={method.n}")
    if seeds > CHAIN_SEEDS:
        raise ValueError(f"{method}: a search runs at most {CHAIN_SEEDS} --seeds, got {seeds}")
    k = (method.width or 0) * (method.expand or 0)
    if (1 + k) * k > SEED_STRIDE:
        most = max(j for j in range(1, SEED_STRIDE) if (1 + j) * j <= SEED_STRIDE)
        raise ValueError(
            f"{method}: W·E must be at most {most} ((1 + W·E)·W·E sampling seeds), got {k}"
        )


def run_search(
    item: Item, seed: int, method: Method, clients, settings: Settings, fmt, ran: Ran
) -> None:
    """One search (search.py) into `ran`: the reasoner of verifier.build (as base's), one candidate
    a step for chain i of best-of-N and majority at reasoner seed chain_seed(seed, i), beam search's
    at `seed`; the plain judges of the run's reply format (none for majority); τ, ε, λ and max_steps
    of the settings. Answers are compared as the option or value answers.score reads (an answer it
    cannot read, as its text), never by the extraction model, which reads the picked answer alone.
    The trace is the search's record (search.Search.to_dict) with its meta."""
    plain = dict(
        judge_mode="plain", revise=False, speculate=False, adaptive="off", adaptive_threshold=None
    )
    propose = lambda k: (
        verifier.build(replace(settings, rule="base", **plain), clients.reasoner, seed=k).propose
    )
    judges = ()
    if method.judged:
        judged = replace(settings, rule="verdict", **plain)
        judges = verifier.build(judged, clients.reasoner, clients.judges, seed, fmt).judges
    config = replace(settings.config, rule="verdict")
    canon = lambda a: answers.score(item, a)[0] or a
    images, scored = (
        item.images or None,
        dict(step_score=method.step_score, aggregate=method.aggregate),
    )
    meta = {"method": str(method), "seed": seed}
    if method.rule == "beam":
        w, e = method.width, method.expand
        found = search.beam_search(
            item.question,
            propose(seed),
            judges,
            w,
            e,
            config,
            images,
            **scored,
            dual_filter=method.dual_filter,
            canon=canon,
        )
        meta["reasoner_seeds"] = [seed]
    else:
        chains = lambda i: propose(chain_seed(seed, i))
        traces = search.sample_chains(item.question, chains, judges, method.n, config, images)
        scored = {k: v for k, v in scored.items() if v is not None}  # majority: none
        found = search.best_of_n(traces, **scored, answer=method.answer, canon=canon)
        meta["reasoner_seeds"] = [chain_seed(seed, i) for i in range(method.n)]
    if judges:
        meta["judges"] = {**fmt.record(), "s_hat": "weighted" if settings.weighted else "sampled"}
    ran.trace = {**found.to_dict(), "meta": meta}
    ran.text = (
        found.answer if found.picked is not None else (found.chain[-1] if found.chain else None)
    )
    ran.stopped = found.stopped


def revisions(trace: verdict.Trace | None) -> dict:
    """A row's revisions: how many were written and taken, and what they cost (calls and tokens: the
    reviser's call and the revisions' judgements, with any judge-mode call a judgement made)."""
    vs = [r.revision for r in trace.steps if r.revision is not None] if trace else []
    return {
        "revisions": len(vs),
        "revised": sum(v.taken for v in vs),
        "revise_calls": sum(v.usage.get("calls", 0) for v in vs),
        "revise_tokens": sum(v.usage.get("call_tokens", 0) for v in vs),
    }


# ----------------------------------------------------------------------------- running the items


class Progress:
    """One line on stderr: items finished, the chains that ended in an error (shown as they fail,
    with the last error), the running accuracy of every method, and an ETA. On a terminal the line
    is rewritten in place (cut to its width); in a log a line is added per item finished, and at the
    first failure since. Not thread-safe: the Harness calls it under its lock."""

    def __init__(self, total: int, todo: int, rows, methods=()):
        self.total, self.todo, self.finished = total, todo, total - todo
        self.score = {str(m): [0, 0] for m in methods}  # method -> [correct, rows], in run order
        self.ran, self.failed, self.last_error, self.said_failure = 0, 0, "", False
        self.t0, self.tty = time.perf_counter(), sys.stderr.isatty()
        for row in rows:  # an earlier run's finished rows: their accuracy counts
            self.scored(row)

    def scored(self, row: Row) -> None:
        score = self.score.setdefault(str(row.method), [0, 0])
        score[0] += row.correct
        score[1] += 1

    def count(self, row: Row) -> None:
        """A chain of this run finished: its row counts; a failure is shown at once."""
        self.scored(row)
        self.ran += 1
        if row.error:
            self.failed += 1
            # The error without its type and endpoint URL: what the server said.
            self.last_error = re.sub(r"^\w+: (https?://\S+: )?", "", row.error)
            if self.tty or not self.said_failure:
                self.said_failure = True
                self.show()

    def item_done(self) -> None:
        self.finished += 1
        self.said_failure = False
        self.show()

    def line(self) -> str:
        """ "3/6 items  1 of 18 chains failed (last: HTTP 500: ...)  acc: base 50.0%, ...  ETA"."""
        ran = self.finished - (self.total - self.todo)
        line = f"{self.finished}/{self.total} items"
        if self.failed:
            last = self.last_error[:80] + ("..." if len(self.last_error) > 80 else "")
            line += f"  {self.failed} of {self.ran} chains failed (last: {last})"
        acc = [f"{m} {100 * c / n:.1f}%" for m, (c, n) in self.score.items() if n]
        line += ("  acc: " + ", ".join(acc)) if acc else ""
        if ran:
            eta = (time.perf_counter() - self.t0) / ran * (self.total - self.finished)
            line += f"  ETA {int(eta // 60)}m{int(eta % 60):02d}s"
        return line

    def show(self) -> None:
        line = self.line()
        if self.tty:  # one line, rewritten: never wider than the terminal
            line = "\r" + line[: shutil.get_terminal_size().columns - 1] + "\033[K"
        print(line, end="" if self.tty else "\n", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.tty:  # end the progress line
            print(file=sys.stderr)


STOP_GRACE = 5.0  # seconds a Ctrl-C waits for the chains in flight before it drops them


def in_flight(k: int) -> str:
    return f"{k} chain{'' if k == 1 else 's'} in flight"


class Harness:
    """Runs each item's chains in one thread, --concurrency items at once, appending every row to
    results.jsonl (and to `done`) as it finishes, each row recording its item's digest (`digests`).
    Fail fast: every thread stops, and run() returns why, if a row cannot be written (a full disk:
    the file keeps the rows before, whole), if the response cache cannot be used (CacheError, never
    one item's error), or if, before any reply came, the endpoint could not be reached or refused us
    (401, 403, 404, or a redirect: 3xx); the chain that met it leaves no row. Ctrl-C (run): no
    chain starts, the rows finished are kept, the chains in flight get STOP_GRACE seconds to finish
    (a second Ctrl-C: none), and then KeyboardInterrupt goes on up; the item threads are daemons, so
    that a request still in flight holds nothing (its chain's row is never written)."""

    def __init__(
        self,
        reasoner: client.Client,
        judge: client.Client,
        settings: Settings,
        results: str,
        done: dict,
        progress: Progress,
        extractor: client.Client | None = None,
        digests: dict | None = None,
    ):
        self.reasoner, self.judge, self.extractor = reasoner, judge, extractor
        self.settings, self.results, self.done, self.progress = settings, results, done, progress
        # One format for the whole run, so that a fallback to text holds for every chain.
        self.format = JudgeFormat(settings.judge_format)
        self.digests = digests or {}  # {(data, id): input_digest(item)}, computed once per item
        self.lock, self.stop, self.reached = threading.Lock(), threading.Event(), threading.Event()
        self.ended, self.left = threading.Event(), 0  # set when every item thread has ended
        self.fatal: str | None = None
        self.crash: BaseException | None = None  # a bug in a thread, raised again by run()
        self.busy, self.closed = 0, False  # chains in flight; True once no row may be written

    def run(self, todo: list, concurrency: int) -> str | None:
        """Run every (item, [(seed, method)]) of todo; the reason the run stopped early, or None."""
        queue = iter(todo)
        # Unbuffered, so that a row is on disk whole or not at all.
        with open(self.results, "ab", buffering=0) as self.fh:
            self.left = max(1, min(concurrency, len(todo)))  # threads still running
            for k in range(self.left):
                threading.Thread(
                    target=self.work, args=(queue,), daemon=True, name=f"item-{k}"
                ).start()
            try:
                # An Event, not Thread.join: a join that Ctrl-C interrupts marks its thread stopped.
                self.ended.wait()
            except KeyboardInterrupt:
                self.interrupted()
                raise
            finally:
                with self.lock:  # a chain that ends from now on is not written
                    self.closed = True
                self.stop.set()
                self.progress.close()
        if self.crash is not None:  # a bug in a thread surfaces here, with its traceback
            raise self.crash
        return self.fatal

    def work(self, queue) -> None:
        """One thread: the next item of the queue, until none is left or the run stops; the last
        thread to end sets `ended`."""
        try:
            while not self.stop.is_set():
                with self.lock:
                    todo = next(queue, None)
                if todo is None:
                    return
                self.item(*todo)
        except BaseException as e:  # a bug: every thread stops, and run() raises it
            with self.lock:
                self.crash = self.crash or e
            self.stop.set()
        finally:
            with self.lock:
                self.left -= 1
                if not self.left:
                    self.ended.set()

    def interrupted(self) -> None:
        """Ctrl-C: say at once what is kept, give the chains in flight STOP_GRACE seconds, or none
        after a second Ctrl-C."""
        self.stop.set()
        with self.lock:
            kept, busy = len(self.done), self.busy
        waiting = f"; waiting at most {STOP_GRACE:g} s for the {in_flight(busy)}" if busy else ""
        try:  # from the first word on, a second Ctrl-C stops at once
            print(
                f"verdict_lab.evaluate: stopping (Ctrl-C): the {kept} finished rows in "
                f"{self.results} are kept{waiting} (Ctrl-C again stops at once)",
                file=sys.stderr,
                flush=True,
            )
            self.ended.wait(STOP_GRACE)
        except KeyboardInterrupt:
            with self.lock:
                self.closed, busy = True, self.busy
            print(
                f"verdict_lab.evaluate: stopped at once (a second Ctrl-C): the {in_flight(busy)} "
                f"{'is' if busy == 1 else 'are'} dropped",
                file=sys.stderr,
                flush=True,
            )

    def item(self, item: Item, chains: list) -> None:
        clients = ChainClients.fork(
            self.reasoner, self.judge, self.settings.max_calls, self.extractor
        )
        try:
            for seed, method in chains:
                if self.stop.is_set():
                    return
                try:
                    digest = self.digests.get((item.data, item.id))
                    client.pin((clients.reasoner, clients.judges), f"{item.data}/{item.id}", seed)
                    with self.lock:
                        self.busy += 1
                    try:
                        row, error = run_chain(
                            item, seed, method, clients, self.settings, self.format, digest
                        )
                    finally:
                        with self.lock:
                            self.busy -= 1
                except CacheError as e:
                    return self.halt(f"the response cache cannot be used: {e}")
                if row.replies:
                    self.reached.set()
                if self.refused(error):
                    return self.halt(f"the endpoint cannot be used: {error}")
                if not self.write(row):
                    return
            with self.lock:
                if not self.closed:
                    self.progress.item_done()
        finally:
            clients.close()

    def halt(self, why: str) -> None:
        """Stop every thread; the first reason is the one run() returns."""
        with self.lock:
            self.fatal = self.fatal or why
        self.stop.set()

    def refused(self, error) -> bool:
        """The endpoint never answered and this error says it will not: unreachable, 401, 403, 404,
        or a redirect (the endpoint is elsewhere: judges.Endpoint follows none)."""
        return (
            isinstance(error, EndpointError)
            and (error.status in (None, 401, 403, 404) or 300 <= (error.status or 0) < 400)
            and not self.reached.is_set()
        )

    def write(self, row: Row) -> bool:
        """Append the row to results.jsonl, whole (rundir.append); False, with every thread stopped,
        if it cannot be written (a full disk): the file ends with the last row written."""
        with self.lock:
            if self.closed:  # a chain that outlived a Ctrl-C: its row is not written
                return False
            try:
                rundir.append(self.fh, json.dumps(row.to_json(), allow_nan=False) + "\n")
            except OSError as e:
                why = f"cannot write {self.results}: {e.strerror or e}; the rows before are kept"
                self.fatal = self.fatal or why
                self.stop.set()
                return False
            self.done[row.key] = row
            self.progress.count(row)
        return True
