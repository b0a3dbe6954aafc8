"""How the judges' reply formats fare on a real server: parse rate, follow-ups and tokens per judge
call.

A measurement of the reply formats (formats.FORMATS) with verifier.judges_of, not of the quality of
the judgements; docs/results.md gives its figures on SmolLM2:

    python -m verdict_lab.perf.reply_formats URL [URL ...]   # one markdown table
"""

from __future__ import annotations

import math
import os
import sys

import numpy as np

import verdict
from judges import EndpointError
from verdict_lab.client import Client, usage_change
from verdict_lab.cli import Parser
from verdict_lab.formats import FORMATS, JudgeFormat
from verdict_lab.verifier import Settings, judges_of, thread_map


def survey(
    client: Client, fmt: str, k: int = 10, concurrency: int = 4, reasons: bool = False
) -> dict:
    """The three judges in format fmt on k arithmetic questions, each with a right and a wrong step
    (6k calls): the share of calls that gave a score ("scored", after the follow-up) and that needed
    no follow-up ("first"), judge tokens per call (prompt + completion; completion alone), the mean
    ŝ of right and of wrong steps, how many calls have a probability-weighted score ("weighted") and
    the lowest share of the score token's top_logprobs that the digits held in those ("mass"), and
    the format's record. It measures the reply format on a real server, not the quality of the
    judgements."""
    items = []  # (question, step, is the step right?)
    for i in range(k):
        a, b, d = 12 + 7 * i, 5 + 3 * i, 1 + i % 3
        q = f"What is {a} + {b}?\nA. {a + b}\nB. {a + b + d}"
        items += [
            (q, f"{a} + {b} = {a + b}, so the answer is A.", True),
            (q, f"{a} + {b} = {a + b + d}, so the answer is B.", False),
        ]
    run_format = JudgeFormat(fmt)
    js = judges_of(Settings(judge_format=fmt, reasons=reasons), client, run_format)
    calls = [(j, q, c, right) for j in js for q, c, right in items]
    before = client.usage
    judged = thread_map(concurrency)(lambda x: x[0](verdict.State(x[1]), x[2]), calls)  # [6k]
    used = usage_change(before, client.usage)
    s, right = np.array([float(j) for j in judged]), np.array([x[3] for x in calls])  # [6k], [6k]
    mass = np.array(
        [j.record["digit_share"] for j in judged], dtype=float
    )  # [6k], NaN (None): none
    mean = lambda v: float(v[~np.isnan(v)].mean()) if (~np.isnan(v)).any() else math.nan
    retries = sum(j.record["replies"] - 1 for j in judged)  # the follow-ups asked
    return {
        "calls": len(calls),
        "scored": float((~np.isnan(s)).mean()),
        "first": 1 - retries / len(calls),
        "tokens": (used["prompt_tokens"] + used["completion_tokens"]) / len(calls),
        "completion": used["completion_tokens"] / len(calls),
        "right": mean(s[right]),
        "wrong": mean(s[~right]),
        "weighted": int((~np.isnan(mass)).sum()),
        "mass": float(np.nanmin(mass)) if (~np.isnan(mass)).any() else math.nan,
        **run_format.record(),
    }


def _model_name(client: Client) -> str:
    """The served model's name from GET /models (its file name, for llama-server), else the one we
    send."""
    try:
        return os.path.basename(
            client.endpoint.session.get(client.base_url + "/models", timeout=30).json()["data"][0][
                "id"
            ]
        )
    except (OSError, ValueError, LookupError, TypeError):  # requests' errors are OSErrors
        return client.model


def main(argv=None) -> int:
    """python -m verdict_lab.perf.reply_formats URL [URL ...]: survey() of every format at each
    server, as one markdown table."""
    p = Parser(
        prog="verdict_lab.perf.reply_formats",
        description="Parse rate and tokens per judge call of each reply format.",
    )
    p.add_argument(
        "url", nargs="+", help="OpenAI-compatible endpoints, e.g. http://127.0.0.1:8080/v1"
    )
    p.add_argument(
        "--formats", default=",".join(FORMATS), help=f"formats to measure ({','.join(FORMATS)})"
    )
    p.add_argument(
        "--k", type=int, default=10, help="questions, each with a right and a wrong step (10)"
    )
    p.add_argument(
        "--model", default="default", help="the model name sent (llama-server serves its one model)"
    )
    args = p.parse_args(argv)
    formats = args.formats.split(",")
    if not set(formats) <= set(FORMATS) or args.k < 1:
        p.error(
            f"need --formats from {','.join(FORMATS)} and --k >= 1, got {args.formats!r} and "
            f"{args.k}"
        )
    num = lambda x, f: "—" if math.isnan(x) else format(x, f)
    print(
        "| model | format | judge calls | scored | scored at the first reply | tokens/call "
        "| completion tokens/call | mean ŝ, right / wrong steps | calls with a weighted score "
        "| digits' least share of its token's top_logprobs |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---|---:|---:|")
    for url in args.url:
        client = Client(url, args.model, timeout=600.0)
        for fmt in formats:
            try:
                r = survey(client, fmt, args.k)
            except EndpointError as e:
                print(f"verdict_lab.perf.reply_formats: error: {e}", file=sys.stderr)
                return 2
            used = (
                fmt
                if r["fallback"] is None
                else f"{fmt} (fell back to text at call {r['fallback']['at_call']})"
            )
            print(
                f"| {_model_name(client)} | {used} | {r['calls']} | {r['scored']:.1%} | "
                f"{r['first']:.1%} | {r['tokens']:.0f} | {r['completion']:.1f} | "
                f"{num(r['right'], '.2f')} / {num(r['wrong'], '.2f')} | {r['weighted']} | "
                f"{num(r['mass'], '.2f')} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
