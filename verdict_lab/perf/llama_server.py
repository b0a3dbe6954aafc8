"""Sections 2b and 2c of bench.py: VERDICT's step overhead on real llama.cpp llama-servers.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026 (the 3.80× sequential wall-clock overhead of the
limitations).

- live_section (2b): perf/overhead.py's modes on a running OpenAI-compatible server, each question
  with its own image when the server accepts images (GET /props: serve_tiny.sh's default), with what
  the server says of itself (server_props), and per layout what each role's requests computed and
  reused (roles_lines);
- flags_section (2b and 2c): servers that serve_tiny.sh starts (start_server) with each of
  SERVER_FLAGS, measured and stopped (stop_server) in turn.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import statistics
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from dataclasses import replace

from PIL import Image

from judges import EndpointError
from verdict_lab.client import Client
from verdict_lab.formats import reported_cache, reported_usage
from verdict_lab.layouts import DEFAULT_LAYOUT, ROLES, role_of
from verdict_lab.perf import speculation
from verdict_lab.perf.overhead import (
    ADAPTIVE,
    CONC_SCORE,
    ORDER,
    chain_computed,
    SEQ_SCORE,
    adaptive_lines,
    in_layouts,
    overhead,
    run_chains,
    time_table,
    token_figures,
    token_table,
    tokenizer,
)

FLOOR = (
    "The floor: what the base step computes plus the tokens of the step's n·m judge tasks "
    "(candidate and reply line), as this server's POST /tokenize counts them; defined in section "
    "2a. Computed vs floor is the share a perfect prefix cache would not need."
)
SERVE_TINY = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "serve_tiny.sh"
)

LIVE_QUESTIONS = (
    "Tom has 3 apples and buys 2 more. How many apples does he have? Options: A. 4 B. 5 C. 6",
    "A shelf holds 4 red books and 3 blue books. How many books are on it? Options: A. 6 B. 7 C. 8",
)
# 2b: the paper's sequential setting, the default and adaptive judging (scalar judges, the default;
# judges with reasons are in 2a), in every layout
LIVE_MODES = in_layouts((SEQ_SCORE, CONC_SCORE, ADAPTIVE))
FLAG_MODES = in_layouts((CONC_SCORE,))  # 2c: the mode with the fewest tokens to decode
# max_tokens of a step; the judges' own (json: a reason of at most 200 characters)
LIVE_LIMITS = (48, None, None)
# The llama-server flags tried in 2c, each appended to serve_tiny.sh's own (-c 8192 -np 4 -t 2),
# with what it does.
SERVER_FLAGS = (
    (
        "",
        "serve_tiny.sh's own: 4 slots, each its own KV cache; a prompt cache in RAM (--cache-ram, "
        "8,192 MiB)",
    ),
    ("-kvu", "one KV buffer shared by the slots (unified KV)"),
    (
        "--cache-reuse 32",
        "reuse cached chunks of 32 tokens or more after the common prefix, by shifting their KV "
        "(llama-server turns it off, with a warning in its log only, when it serves images: "
        "serve_tiny.sh's default)",
    ),
    ("--cache-ram 0", "no prompt cache in RAM: a slot keeps only its last prompt"),
    ("-np 2", "2 slots (n = 3 candidates need 3: llama-server serves n choices in n slots)"),
    ("-np 8 -c 16384", "8 slots (the same 2,048 tokens each)"),
)


def server_props(url: str) -> dict:
    """llama-server's GET /props (slots, context, model file), or {} when the server has none."""
    try:
        with urllib.request.urlopen(re.sub(r"/v1/?$", "", url) + "/props", timeout=10) as r:
            return json.load(r)
    except (OSError, ValueError):
        return {}


def start_server(flags: str, port: int | None = None) -> tuple:
    """(url, pid) of a llama-server serving SmolLM2-135M-Instruct that serve_tiny.sh starts with
    `flags` added, on `port` (None: a free one)."""
    env = {**os.environ, "VERDICT_TINY_FLAGS": flags, "VERDICT_TINY_MODEL": "smollm2"}
    env.update({"VERDICT_TINY_PORT": str(port)} if port else {})
    run = subprocess.run([SERVE_TINY], env=env, capture_output=True, text=True, timeout=1800)
    found = [
        re.search(rf"(?m)^{k}=(\S+)$", run.stdout)
        for k in ("VERDICT_LIVE_URL", "VERDICT_SERVER_PID")
    ]
    if run.returncode != 0 or not all(found):
        raise RuntimeError(
            f"serve_tiny.sh with {flags!r} failed (exit code {run.returncode}): "
            f"{' '.join(run.stderr.split())[-300:]}"
        )
    return found[0].group(1), int(found[1].group(1))


def stop_server(pid: int, wait: float = 30.0) -> None:
    """Stop the server with this PID: SIGTERM, then SIGKILL if it is still running after `wait`
    seconds."""
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if (
                    fh.read().rsplit(")", 1)[1].split()[0] == "Z"
                ):  # exited; its parent has not reaped it yet
                    return
        except OSError:  # gone
            return
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)


def live_section(
    url: str,
    model: str,
    reps: int,
    steps: int,
    modes: tuple,
    questions: int = 2,
    restart=None,
    speculate: bool = False,
) -> tuple:
    """Section 2b against a real OpenAI-compatible server, on the first `questions` of
    LIVE_QUESTIONS, each with its own image (speculation.images) when the server says it accepts
    images: (markdown lines, {mode: Result}). restart: starts the server again on the same URL
    before each mode's chains, so that nothing is cached from an earlier mode or repetition (None: a
    server this process does not own, whose caches stay warm). speculate: also measure `--speculate`
    there (perf/speculation.py's ratios, the default layout) and each role's tokens per layout
    (roles_lines)."""
    props, load, t0 = server_props(url), os.getloadavg(), time.perf_counter()
    qs, reset = LIVE_QUESTIONS[:questions], restart or (lambda: None)
    images = speculation.images(len(qs)) if props.get("modalities", {}).get("vision") else None
    result = overhead(
        Client(url, model, timeout=900.0),
        modes,
        qs,
        steps,
        reps,
        LIVE_LIMITS,
        images,
        reset=reset,
        count=tokenizer(url),
    )
    lines = _server_lines(url, props) + _workload_lines(
        len(qs), steps, reps, bool(restart), load, t0, images
    )
    lines += (
        time_table(result)
        + [
            "",
            "Prompt tokens per step after each chain's first step, as the server reports "
            "them (usage.prompt_tokens_details.cached_tokens):",
            "",
        ]
        + token_table(result)
        + ["", FLOOR]
    )
    lines += [""] + adaptive_lines(result)
    if speculate:
        lines += _live_speculation(
            Client(url, model, timeout=900.0), reps, steps, qs, images, reset
        )
        lines += [""] + roles_lines(
            role_runs(url, model, reps, steps, qs, images, reset), reps, steps, bool(restart)
        )
    return lines, result


class RoleCounts:
    """A client that passes every call to `client` and tallies, by the role that made it
    (layouts.role_of), the replies and the prompt tokens they report, and those of them the server's
    cache served."""

    def __init__(self, client: Client):
        self.client, self.counts, self._lock = client, {}, threading.Lock()

    @property
    def usage(self) -> dict:
        return self.client.usage

    def chat(self, messages: list, **params) -> dict:
        response = self.client.chat(messages, **params)
        tokens, cached = reported_usage(response), reported_cache(response)["cached_tokens"]
        with self._lock:
            self.counts.setdefault(role_of(messages), Counter()).update(
                replies=1,
                prompt=tokens["prompt_tokens"],
                cached=cached or 0,
                reported=cached is not None,
            )
        return response


def role_runs(url: str, model: str, reps: int, steps: int, qs: tuple, images, reset) -> dict:
    """{layout: [(RoleCounts.counts, run_chains' Chains) per repetition]}: CONC_SCORE's chains (the
    default mode) in every layout of ORDER, `reset` before each, the layouts' order alternating."""
    runs = {lay: [] for lay in ORDER}
    for r in range(reps):
        for lay in ORDER if r % 2 == 0 else ORDER[::-1]:
            reset()
            counted = RoleCounts(Client(url, model, timeout=900.0))
            chains = run_chains(
                counted, replace(CONC_SCORE, layout=lay), qs, steps, LIVE_LIMITS, images
            )
            runs[lay].append((counted.counts, chains))
    return runs


def _spread(xs: list) -> str:
    """ "median (min–max)" of xs, whole tokens; "—" when a figure is unknown."""
    if not xs or None in xs:
        return "—"
    return f"{statistics.median(xs):,.0f} ({min(xs):,.0f}–{max(xs):,.0f})"


def roles_lines(runs: dict, reps: int, steps: int, cold: bool) -> list:
    """Markdown from role_runs: per layout, the prompt tokens the server computed per whole chain
    and per step after a chain's first (median over the repetitions, min–max), then per layout and
    role, every repetition pooled, the prompt tokens per reply and the share its cache served."""

    lines = [
        f"Per layout, the default mode ({CONC_SCORE.name}): {reps} repetition(s) "
        "of the same chains, "
        + ("the server started again before each (cold)" if cold else "the server's caches warm")
        + ", the layouts' order alternating; prompt tokens the server computed (prompt_tokens − "
        "cached_tokens), median (min–max) over the repetitions:",
        "",
        "| layout | computed per whole chain | computed per step after the first |",
        "|---|---:|---:|",
    ]
    for (
        lay,
        got,
    ) in runs.items():  # per repetition: its chains' whole-chain and later-step computed tokens
        whole = [chain_computed([c]) for _, c in got]
        later = [token_figures([c.usage], steps)[1] for _, c in got]
        lines.append(f"| {lay} | {_spread(whole)} | {_spread(later)} |")
    lines += [
        "",
        "Per role and layout, every repetition pooled: replies per chain, prompt tokens per reply, "
        "and the share of them the server's prefix cache served "
        "(usage.prompt_tokens_details.cached_tokens):",
        "",
        "| layout | role | replies per chain | prompt tokens per reply | served from the cache |",
        "|---|---|---:|---:|---:|",
    ]
    for lay, got in runs.items():
        chains = sum(len(c.chains) for _, c in got)
        for role in (r for r in ROLES + (None,) if any(r in counts for counts, _ in got)):
            t = sum((counts.get(role, Counter()) for counts, _ in got), Counter())
            served = (
                f"{t['cached'] / t['prompt']:.0%}"
                if t["reported"] == t["replies"] and t["prompt"]
                else "—"
            )
            per_reply = t["prompt"] / t["replies"]
            lines.append(
                f"| {lay} | {role or 'other'} | {t['replies'] / chains:.1f} | {per_reply:,.0f} | "
                f"{served} |"
            )
    return lines


def _server_lines(url: str, props: dict) -> list:
    """The server measured, as its GET /props (server_props) describes it, and the machine's
    cores."""
    n_ctx = props.get("default_generation_settings", {}).get("n_ctx", "?")
    model_file = os.path.basename(str(props.get("model_path", "?")))
    return [
        f"A real server at {url}: llama.cpp's llama-server reporting "
        f"{props.get('total_slots', '?')} parallel slots of {n_ctx} tokens and the model "
        f"{model_file}, on a machine with {os.cpu_count()} cores.",
        "",
    ]


def _workload_lines(
    questions: int, steps: int, reps: int, cold: bool, load: tuple, t0: float, images=None
) -> list:
    """2b's workload (cold: restarted before each mode; images: one per question, or None), and the
    load and time since (load, t0)."""
    avg = lambda xs: ", ".join(f"{x:.1f}" for x in xs)
    what = (
        f"question(s), each with its own {'×'.join(map(str, _size(images[0])))} image "
        "in every request"
        if images
        else "text question(s)"
    )
    return [
        f"Workload: {questions} {what}, {steps} steps per chain, max_tokens {LIVE_LIMITS[0]} per "
        "step, json judges (a reason of at most 200 characters and a score; short judges the score "
        f"alone); a judge whose reply does not parse asks once more; median of {reps} "
        "repetition(s), the modes interleaved; "
        + (
            "the server is started again (cold: its slots and its prompt cache in RAM empty) "
            "before each mode's chains, as the simulator forgets its cache. "
            if cold
            else "the server's caches stay warm between modes and repetitions. "
        )
        + "Every ratio is to the base step in the per-role layout. Load average (1, 5, 15 min) "
        f"before: {avg(load)}; after: {avg(os.getloadavg())} (other processes may share the "
        f"machine). The section took {time.perf_counter() - t0:.0f} s.",
        "",
    ]


def _live_speculation(client: Client, reps: int, steps: int, qs: tuple, images, reset) -> list:
    """2b's `--speculate` paragraph: speculation.ratios on this server, in the default layout."""
    spec = speculation.ratios(
        client, reps, steps, list(qs), images, DEFAULT_LAYOUT, reset, LIVE_LIMITS[0]
    )
    return [
        "",
        f"`--speculate` on this server (verdict_lab/perf/speculation.py: whole chains of {steps} "
        f"steps, json score-only judges overlapped, the {DEFAULT_LAYOUT} layout, against the base "
        f"reasoner's chains; {reps} repetition(s), interleaved, the same start before each as "
        f"above): {speculation.said(spec)}. The server computes on this machine's {os.cpu_count()} "
        "cores, with no spare parallel capacity: a speculative proposal takes time the judges "
        "would have used.",
    ]


SLOT_EVENT = re.compile(
    r"id +(\d+) \| task (-?\d+) \| (?:selected slot by (LCP similarity|LRU)"
    r"(?:.*?f_keep = ([\d.]+))?"
    r"|processing task, is_child = (\d)|prompt eval time = +[\d.]+ ms / +(\d+) tokens)"
)


def slot_requests(log: str) -> list:
    """llama-server's log (at its default verbosity) as one (slot, chosen by, f_keep, prompt tokens
    computed) per request it served: "LCP similarity" (the idle slot whose last prompt shares the
    longest head with the request; f_keep: the share of that slot's tokens kept) or "LRU" (no idle
    slot similar enough: the least recently used one), or "child" (one of n > 1 choices, which
    shares its parent's prompt)."""
    chosen, task_of, out = {}, {}, {}
    for slot, task, how, keep, child, computed in SLOT_EVENT.findall(log):
        if (
            how
        ):  # logged before the task is known: it names the slot the next launch on that slot takes
            chosen[slot] = (how, float(keep) if keep else None)
        elif child:
            how, keep = ("child", None) if child == "1" else chosen.pop(slot, ("?", None))
            task_of[task] = out[task] = [int(slot), how, keep, None]
        elif task in task_of:
            task_of[task][3] = int(computed)
    return [tuple(r) for r in out.values() if r[3] is not None]


def slot_lines(requests: list) -> list:
    """Markdown rows from slot_requests: per way a slot was chosen, its requests and the tokens
    computed."""
    rows = [
        "| slot chosen by | requests | prompt tokens computed: mean | total | mean f_keep |",
        "|---|---:|---:|---:|---:|",
    ]
    for how in ("LCP similarity", "LRU", "child"):
        got = [r for r in requests if r[1] == how]
        keeps = [r[2] for r in got if r[2] is not None]
        if got:
            total = sum(r[3] for r in got)
            keep = f"{sum(keeps) / len(keeps):.2f}" if keeps else "—"
            rows.append(f"| {how} | {len(got)} | {total / len(got):,.0f} | {total:,} | {keep} |")
    return rows


def flags_section(
    reps: int, steps: int, model: str, questions: int = 2, flag_reps: int | None = None
) -> tuple:
    """Sections 2b and 2c on servers this process starts (serve_tiny.sh) and stops: 2b (LIVE_MODES,
    `reps` repetitions) on serve_tiny.sh's own flags, 2c (FLAG_MODES, `flag_reps`, default `reps`)
    with each of SERVER_FLAGS. (2b lines, 2c lines, 2b result)."""
    flag_reps = reps if flag_reps is None else flag_reps
    lines, first = [], None
    rows = [
        "| flags | what they do | mode | layout | seconds per step | overhead vs base "
        "| computed prompt tokens per step |",
        "|---|---|---|---|---:|---:|---:|",
    ]
    for flags, what in SERVER_FLAGS:
        url, pid = start_server(flags)
        port, live = urllib.parse.urlsplit(url).port, [pid]  # live: the running server's PID

        def restart(flags=flags, port=port, live=live):
            stop_server(live.pop())
            live.append(start_server(flags, port)[1])

        try:
            section, result = (
                live_section(
                    url, model, reps, steps, LIVE_MODES, questions, restart, speculate=True
                )
                if first is None
                else live_section(url, model, flag_reps, steps, FLAG_MODES, questions, restart)
            )
        except (
            EndpointError
        ) as e:  # a flag set the workload cannot run on (-np 2 refuses n = 3): said
            if first is None:
                raise
            rows.append(f"| `{flags}` | {what} | the run failed: {e.message} | | | | |")
            continue
        finally:
            if live:
                stop_server(live[0])
        lines, first = (section, result) if first is None else (lines, first)
        rows += [
            f"| `{flags or '(none)'}` | {what} | {m.name} | {m.layout} | {r.seconds:.2f} | "
            f"{r.ratio:.2f}× | {'—' if r.computed is None else f'{r.computed:,.0f}'} |"
            for m, r in result.items()
            if m in FLAG_MODES
        ]
    intro = [
        "Each server: serve_tiny.sh (llama-server, SmolLM2-135M-Instruct, -c 8192 -np 4 -t 2) with "
        "the flags added, started and stopped by this run (started again, cold, before each mode's "
        f"chains); {questions} question(s), {steps} steps per chain, median of {flag_reps} "
        f"repetition(s) ({reps} for the rows without flags, which are 2b's). Computed prompt "
        "tokens: per step after each chain's first. Each ratio is to the base step (per-role "
        "layout) on the same server.",
        "",
    ]
    return lines, intro + rows, first


if __name__ == "__main__":
    # python -m verdict_lab.perf.llama_server [layout]: one chain of the default settings
    # (concurrent, short judges; the default layout unless named) on a fresh serve_tiny.sh server,
    # then, from its log, how each request's slot was chosen and what it computed.
    import sys

    layout = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_LAYOUT
    url, pid = start_server("")
    try:
        run_chains(
            Client(url, "smollm2", timeout=900.0),
            replace(CONC_SCORE, layout=layout),
            LIVE_QUESTIONS[:1],
            2,
            LIVE_LIMITS,
        )
    finally:
        stop_server(pid)
    port = urllib.parse.urlsplit(url).port
    cache = os.environ.get("VERDICT_TINY_CACHE", os.path.expanduser("~/.cache/verdict-tiny"))
    with open(os.path.join(cache, f"server-{port}.log"), encoding="utf-8", errors="replace") as fh:
        print(f"{CONC_SCORE.name}, {layout} layout, 1 question, 2 steps:")
        print("\n".join(slot_lines(slot_requests(fh.read()))))


def _size(image) -> tuple:
    """(width, height) of a PIL image or of an image file's bytes."""
    return (image if isinstance(image, Image.Image) else Image.open(io.BytesIO(image))).size
