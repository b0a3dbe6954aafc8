"""The flags of evaluate and the studies, defined once: the endpoint (client.Client's URL, model,
key, timeout, retries, cache, image budget) and the verifier (one flag per field of
verifier.Settings), each checked before any model call: a bad value is one line and exit 2.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026: τ, ε, λ and n are the paper's knobs (verdict.Config checks
their ranges); the judge modes are the related papers' (modes.JudgeMode).
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import urllib.parse
from dataclasses import fields

from judges import DEFAULT_KEY_ENV, MAX_PIXELS
from verdict_lab.adaptive import OFF, SIGNALS, THRESHOLDS
from verdict_lab.cache import Cache
from verdict_lab.client import Client
from verdict_lab.formats import FORMATS
from verdict_lab.layouts import LAYOUTS
from verdict_lab.modes import JudgeMode
from verdict_lab.modes.evpv import GATE_TARGET, GATE_TARGETS
from verdict_lab.verifier import Settings


def floats(text: str) -> tuple:
    """ "1.5,1.0,0.8" -> (1.5, 1.0, 0.8), for --lam; argparse reports a bad one."""
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected numbers separated by commas, got {text!r}"
        ) from None


# ----------------------------------------------------------------------------- the endpoint


def add_endpoint_args(parser) -> None:
    """The flags of a live run."""
    g = parser.add_argument_group("endpoint (live mode)")
    g.add_argument("--base-url", help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1")
    g.add_argument("--model", default="default", help="the reasoner's model name")
    g.add_argument("--judge-model", help="the judges' model name (default: --model)")
    g.add_argument("--judge-base-url", help="the judges' endpoint (default: --base-url)")
    g.add_argument(
        "--api-key-env",
        help=f"environment variable holding the API key ({DEFAULT_KEY_ENV}); when it is unset, no "
        "key is sent, with a warning if this flag was given or an endpoint is not loopback",
    )
    g.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        help="seconds per request, from sending it to the reply's last byte, however slow the "
        "server (120)",
    )
    g.add_argument(
        "--retries",
        type=int,
        default=4,
        help="retries on connection errors, timeouts, 429, 5xx (4)",
    )
    g.add_argument(
        "--concurrency",
        type=int,
        default=4,
        help="items evaluated at once, each item's chains in one thread (4)",
    )
    g.add_argument(
        "--dp-replicas",
        type=int,
        default=1,
        help="data-parallel replicas behind the endpoint (vLLM --data-parallel-size K): pin each "
        "chain to one, by a hash of its item and seed, in the X-data-parallel-rank header (1: "
        "no header)",
    )
    g.add_argument(
        "--cache", help="sqlite response cache file, shared by the run's methods (OUT/cache.sqlite)"
    )
    g.add_argument(
        "--max-pixels",
        type=int,
        default=MAX_PIXELS,
        help=f"most pixels an image is sent at, downscaled keeping its aspect ratio ({MAX_PIXELS} "
        "= 16384·28·28, VLMEvalKit's max_pixels for Qwen2.5-VL-7B; serve vLLM with the "
        "matching --mm-processor-kwargs, docs/serving.md)",
    )


def endpoint_client(args, url: str, model: str, cache: Cache | None = None) -> Client:
    """A Client for url and model with add_endpoint_args' key variable, timeout and retries."""
    return Client(
        url, model, args.api_key_env or DEFAULT_KEY_ENV, args.timeout, args.retries, cache
    )


def clients_from_args(args) -> tuple:
    """(reasoner client, judge client) from add_endpoint_args' flags; the same object when they
    agree. ValueError for an unusable URL or replica count, CacheError for an unusable cache
    file."""
    if not args.dp_replicas >= 1:
        raise ValueError(f"--dp-replicas must be >= 1, got {args.dp_replicas}")
    cache = Cache(args.cache) if args.cache else None
    reasoner = endpoint_client(args, args.base_url, args.model, cache)
    judge_url, judge_model = args.judge_base_url or args.base_url, args.judge_model or args.model
    same = (judge_url, judge_model) == (args.base_url, args.model)
    judge = reasoner if same else endpoint_client(args, judge_url, judge_model, cache)
    reasoner.replicas = judge.replicas = args.dp_replicas
    return reasoner, judge


def is_loopback(url: str) -> bool:
    """Whether url's host is this machine (localhost, 127.0.0.0/8, ::1)."""
    try:
        host = urllib.parse.urlsplit(url).hostname or ""
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name, not an address (or no URL at all)
        return False


def key_warning(args) -> str | None:
    """One line to print when no API key will be sent and one is probably expected, else None: the
    variable named by --api-key-env is unset or empty, and either --api-key-env was given or an
    endpoint is not on loopback (a local server usually needs no key). It names the variable, never
    a key."""
    name = args.api_key_env or DEFAULT_KEY_ENV
    urls = [u for u in (args.base_url, args.judge_base_url) if u]
    if os.environ.get(name, "").strip() or (
        args.api_key_env is None and all(map(is_loopback, urls))
    ):
        return None
    return f"warning: ${name} is not set, so no API key is sent to {' and '.join(urls)}"


# ----------------------------------------------------------------------------- the verifier


def add_verifier_args(parser) -> None:
    """One flag per field of verifier.Settings (--max-calls, --judge-mode and the rule are the
    commands' own), with Settings' defaults; settings_of checks them."""
    d, g = Settings(), parser.add_argument_group("verifier")
    _add_consensus_args(g, d)
    _add_reply_args(g, d)
    _add_mode_args(g, d)
    _add_chain_args(g, d)


def _add_consensus_args(g, d: Settings) -> None:
    """The paper's knobs (n, τ, ε, λ) and the chain's length: steps and tokens per step."""
    g.add_argument("--n", type=int, default=d.n, help=f"candidates per step ({d.n})")
    g.add_argument(
        "--tau", type=float, default=d.tau, help=f"τ in [0, 1]: pass only if s̄* > τ ({d.tau})"
    )
    g.add_argument(
        "--eps", type=float, default=d.eps, help=f"ε in (0, 1]: pass only if Δ* < ε ({d.eps})"
    )
    g.add_argument(
        "--lam", type=floats, default=d.lam, help="stubbornness λ_V,λ_L,λ_C (1.5,1.0,0.8)"
    )
    g.add_argument(
        "--max-steps", type=int, default=d.max_steps, help=f"longest chain ({d.max_steps})"
    )
    g.add_argument(
        "--max-tokens", type=int, default=d.max_tokens, help=f"tokens per step ({d.max_tokens})"
    )


def _add_reply_args(g, d: Settings) -> None:
    """How the judges reply: their tokens, the reply format, the sampled or the weighted score."""
    g.add_argument(
        "--judge-max-tokens", type=int, help="tokens per judge reply (the reply format's own)"
    )
    g.add_argument(
        "--judge-format",
        choices=FORMATS,
        default=d.judge_format,
        help="the judges' replies: json (a JSON schema in response_format, score 0-9; falls back "
        "to text, once and said aloud, if the server refuses it), text (a 'Score:' line, 0 to "
        "1), digit (a 'Score:' digit, 0 to 9) (json)",
    )
    g.add_argument(
        "--weighted",
        action="store_true",
        help="ŝ is the probability-weighted score Σ p(d)·d/9 read from top_logprobs at the score "
        "digit, where the server sends logprobs (json or digit replies); by default the "
        "sampled score",
    )


def _add_mode_args(g, d: Settings) -> None:
    """The judge modes (what the judges see) and the tokens of a mode's own replies."""
    on = {"step": "every judge's score", "visual": "ŝ_V only"}  # GATE_TARGETS' meanings
    other = "; ".join(f"gate-{t}: on {on[t]}" for t in GATE_TARGETS if t != GATE_TARGET)
    g.add_argument(
        "--judge-mode",
        default="plain",
        help=(
            "what the judges see, as words joined by +: prior (SGV's prior, +1 call per question), "
            "premises (EVPV's fact sheet, +1 call per question), gate (with premises: EVPV's "
            f"reliability gate, +1 call per candidate, on {on[GATE_TARGET]}; {other}), zoom "
            "(ReVISE's look again: the visual judge names regions and scores with their close-ups, "
            "+1 call per candidate). A comma-separated list runs each mode, as rows named "
            "rule+mode (plain)"
        ),
    )
    g.add_argument(
        "--mode-max-tokens",
        type=int,
        default=d.mode_max_tokens,
        help=f"tokens per judge-mode reply ({d.mode_max_tokens})",
    )


def _add_chain_args(g, d: Settings) -> None:
    """What else shapes a chain: revising on reject, the judges' reasons, speculation, the request
    layout."""
    g.add_argument(
        "--revise",
        action="store_true",
        help="revise on reject: when no candidate passes, the reasoner's model revises the best "
        "one from the judges' reasons, and the same judges score the revision (+1 call, +m "
        "judge calls); evaluate adds it as rows named row+revise",
    )
    g.add_argument(
        "--reasons",
        action="store_true",
        help="judges write a reason (at most two sentences) before their score; by default they "
        "reply with the score alone, as the paper's agents do ('every agent returns a single "
        "scalar in [0, 1]'). --revise shows the reviser these reasons (without them, only each "
        "judge's score)",
    )
    g.add_argument(
        "--speculate",
        action="store_true",
        help="propose step t+1 after each candidate while the judges score step t (speculate.py): "
        "the chosen candidate's proposal gives the next candidates, the others are dropped; "
        "the same decisions, more reasoner tokens, faster only on a server with spare parallel "
        "capacity",
    )
    g.add_argument(
        "--adaptive",
        choices=(OFF,) + SIGNALS,
        default=d.adaptive,
        help="adaptive verification: judge a step only when its signal is not above "
        "--adaptive-threshold, else take the reasoner's most likely candidate, unverified "
        "(docs/adaptive.md): agree (the share of the n candidates that agree, by text or final "
        "answer), mean-prob (the geometric-mean token probability of the most likely candidate), "
        f"min-prob (its least likely token's probability) ({d.adaptive})",
    )
    g.add_argument(
        "--adaptive-threshold",
        type=float,
        help="θ in [0, 1]: a step whose signal is above θ is not judged; 1 judges every step "
        f"({', '.join(f'{k} {v}' for k, v in THRESHOLDS.items())})",
    )
    g.add_argument(
        "--layout",
        choices=tuple(LAYOUTS),
        default=d.layout,
        help=f"how each request is laid out for the server's prefix cache (layouts.py; {d.layout})",
    )


FLAG_OF = {f.name: "--" + f.name.replace("_", "-") for f in fields(Settings)}  # a setting's flag


def settings_of(args, **fields_) -> Settings:
    """Settings from add_verifier_args' flags (and add_endpoint_args' --max-pixels), then `fields_`;
    ValueError names the flag of a bad value ("--tau must be in [0, 1] ..., got tau=5.0")."""
    given = {name: getattr(args, name) for name in FLAG_OF if hasattr(args, name)}
    try:
        return Settings(**{**given, **fields_})
    except ValueError as e:  # Settings' and Config's messages start with the field's name
        name, _, rest = str(e).partition(" ")
        raise ValueError(f"{FLAG_OF[name]} {rest}" if name in given else str(e)) from None


def modes_of(args) -> list:
    """The JudgeModes of --judge-mode, a comma-separated list, in order; ValueError names a bad
    one."""
    modes = [JudgeMode.parse(m) for m in args.judge_mode.split(",")]
    if len(set(modes)) != len(modes):
        raise ValueError(f"--judge-mode lists a mode twice: {args.judge_mode!r}")
    return modes
