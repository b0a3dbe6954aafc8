"""VERDICT demo: watch the consensus decide, step by step (Sinha et al., ECCV 2026).

    python demo.py                 # offline: a scripted proposer and scripted judges, no network
    python demo.py --base-url URL --model NAME --question Q [--image PATH] [--choices "A. x|B. y"]
    python demo.py --html          # also the case viewer of the trace, one HTML file (verdict_lab)

Offline, a deterministic run on a drawn scene shows every decision VERDICT makes: acceptance by
consensus, a rejection by dispersion (Proposition 1), the fallback, and a step where the raw mean
would choose otherwise. Live, the proposer and the three judges of judges.py ask the endpoint.
Every run prints a table per step and writes the trace (--trace, JSON) and the decision plane
(--plot, PNG). Every other setting is evaluate's: python -m verdict_lab.evaluate --help.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import re
import sys
import urllib.parse
from dataclasses import asdict, replace
from typing import Callable
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

import judges
import verdict

TRACE_FORMAT = "verdict-trace/5"
QUESTION = (
    "From the viewer's perspective, is the blue ball to the left or to the right of the red cube?\n"
    "A. left\nB. right"
)
ANSWER = "B"  # The scene's answer: the blue ball is to the right of the red cube.

# Each step's candidates and their raw scores (ŝ_V, ŝ_L, ŝ_C), which the scripted judges look up.
SCRIPT = [
    {  # Proposition 1: equal raw means 2/3, opposite decisions (Δ* 0.0181 accepted, 0.1268 not).
        "The red cube stands on the left half of the image.": (0.7, 0.6, 0.7),
        "The cube is red and large, so it must be in front of the ball.": (0.9, 0.2, 0.9),
        "Scenes like this usually put the ball on the left.": (0.3, 0.4, 0.2),
    },
    {  # Nothing passes both tests: the fallback takes the highest s̄* − Δ*.
        "The ball is further right, but it may be partly hidden.": (0.55, 0.6, 0.5),
        "The ball looks smaller, so it is probably far behind the cube.": (0.8, 0.2, 0.5),
        "Balls roll, so its position can change.": (0.4, 0.3, 0.1),
    },
    {  # The raw mean prefers the fluent wrong answer; the stubborn visual judge sinks it.
        "Final answer: A": (0.3, 0.95, 0.95),
        "Final answer: B": (0.75, 0.68, 0.7),
        "Final answer: B, since the ball is at the far left.": (0.2, 0.5, 0.6),
    },
]


def draw_scene(path: str) -> None:
    """A 320×200 scene: a red cube on the left, a blue ball on the right, a green cone behind."""
    img = Image.new("RGB", (320, 200), (235, 235, 228))
    d = ImageDraw.Draw(img)
    d.rectangle([0, 130, 320, 200], fill=(200, 196, 180))  # The floor.
    d.polygon([(200, 120), (215, 80), (230, 120)], fill=(60, 150, 70))  # A small cone, far.
    d.rectangle([50, 100, 120, 170], fill=(200, 40, 40), outline=(120, 20, 20))  # The red cube.
    d.polygon([(50, 100), (70, 85), (140, 85), (120, 100)], fill=(225, 80, 80))
    d.ellipse([220, 125, 270, 175], fill=(40, 80, 210), outline=(20, 40, 120))  # The blue ball.
    img.save(path)


def clean(text, width: int | None = None) -> str:
    """text on one line, its control characters (a terminal's escape sequences) dropped, and cut to
    `width` characters with "…"."""
    text = " ".join("".join(c for c in str(text) if c.isprintable() or c.isspace()).split())
    return text if width is None or len(text) <= width else text[: width - 1] + "…"


def step_printer(c: verdict.Config, out=sys.stdout) -> Callable[[verdict.StepRecord], None]:
    """verdict.run's on_step: each step's table as soon as it is decided (every candidate's ŝ, s̄*
    and Δ*, whether it passed the dual test, the choice, and the raw mean's choice when it
    differs)."""
    t = itertools.count(1)

    def print_step(rec: verdict.StepRecord) -> None:
        sel = rec.selection
        how = "fallback: none accepted, highest s̄*−Δ*" if sel.fallback else "accepted, highest s̄*"
        print(f"\nstep {next(t)}  (chosen #{sel.index}, {how})", file=out)
        print(f"  #  {'candidate':<46}   ŝ_V    ŝ_L    ŝ_C     s̄*     Δ*   ok", file=out)
        for k, candidate in enumerate(rec.candidates):
            values = (*rec.s_hat[k], sel.s_bar_star[k], sel.delta_star[k])
            numbers = "  ".join("  -  " if math.isnan(x) else f"{x:.3f}" for x in values)
            end = "yes" if sel.accepted[k] else " no"
            if k == sel.index:
                end += " ◀ chosen" + (" (fallback)" if sel.fallback else "")
            print(f"  {k}  {clean(candidate, 46):<46}  {numbers}  {end}", file=out)
        raw = verdict.select(rec.s_hat, c.lam, c.tau, c.eps, rule="mean").index
        if raw != sel.index:
            print(f"  the raw mean would have chosen #{raw} instead", file=out)
        out.flush()  # a live step's table shows at once, even when stdout is a pipe

    return print_step


def print_totals(trace: verdict.Trace, out=sys.stdout) -> None:
    """The final answer and the totals."""
    answer = "(none: stopped at max_steps)" if trace.answer is None else clean(trace.answer)
    tot = trace.totals()
    n = lambda key, word: f"{tot[key]} {word}{'' if tot[key] == 1 else 's'}"
    print(f"\nfinal answer: {answer}", file=out)
    print(
        f"totals: {n('steps', 'step')}, {n('fallbacks', 'fallback')} ({tot['fallback_rate']:.0%}), "
        f"{n('abstentions', 'abstention')}, {n('judge_calls', 'judge call')}",
        file=out,
    )


def nulls(x) -> list:
    """An array as nested lists, NaN as None (JSON's null)."""
    return np.where(np.isnan(x), None, x).tolist()


def step_dict(rec: verdict.StepRecord) -> dict:
    sel = rec.selection
    return {
        "candidates": list(rec.candidates),
        "s_hat": nulls(rec.s_hat),
        "s_star": nulls(sel.s_star),
        "s_bar_star": nulls(sel.s_bar_star),
        "delta_star": nulls(sel.delta_star),
        "accepted": [bool(a) for a in sel.accepted],
        "index": sel.index,
        "fallback": sel.fallback,
        "verified": sel.verified,
        "abstentions": rec.abstentions,
    }


def trace_dict(trace: verdict.Trace) -> dict:
    """The trace as JSON-ready data, in the layout of TRACE_FORMAT."""
    return {
        "format": TRACE_FORMAT,
        "question": trace.question,
        "config": {**asdict(trace.config), "lam": list(trace.config.lam)},
        "steps": [step_dict(rec) for rec in trace.steps],
        "chain": trace.chain,
        "answer": trace.answer,
        "stopped": trace.stopped,
        "totals": trace.totals(),
        "meta": trace.meta,
    }


INK, GREY, GRID = (40, 40, 40), (150, 150, 150), (228, 228, 228)
GREEN, ORANGE, SHADE = (30, 140, 60), (235, 130, 20), (214, 240, 220)
LEGEND = {"accepted": "chosen, accepted", "fallback": "chosen by fallback", "other": "not chosen"}


def marker(d: ImageDraw.ImageDraw, x: float, y: float, kind: str) -> None:
    """A green disc (chosen, accepted), an orange square (chosen by fallback), or a grey ring."""
    box = [x - 6, y - 6, x + 6, y + 6]
    if kind == "accepted":
        d.ellipse(box, fill=GREEN, outline=INK)
    elif kind == "fallback":
        d.rectangle(box, fill=ORANGE, outline=INK)
    else:
        d.ellipse(box, outline=GREY, width=2)


def plot(trace: verdict.Trace, path: str, size=(640, 480)) -> None:
    """The decision plane: every candidate at (Δ*, s̄*), the lines τ and ε, the acceptance region
    (Δ* < ε, s̄* > τ) shaded, each point labelled "step.candidate", and a legend."""
    (W, H), tau, eps = size, trace.config.tau, trace.config.eps
    pts = []  # Each point is (Δ*, s̄*, its label, its kind); a candidate no judge scored has none.
    for t, r in enumerate(trace.steps, 1):
        for k, (dx, y) in enumerate(zip(r.selection.delta_star, r.selection.s_bar_star)):
            kind = "other" if k != r.selection.index else "fallback" if r.fallback else "accepted"
            if not (math.isnan(dx) or math.isnan(y)):
                pts.append((dx, y, f"{t}.{k}", kind))
    x_max = max([0.3, min(2.5 * eps, 0.5)] + [1.1 * p[0] for p in pts])  # Δ* is at most 1/2.
    X = lambda x: 70 + x / x_max * (W - 150)  # The margins are 70 and 80 pixels.
    Y = lambda y: H - 60 - y * (H - 90)  # The margins are 30 and 60 pixels.
    img = Image.new("RGB", size, "white")
    d, font, e = ImageDraw.Draw(img), ImageFont.load_default(size=13), min(eps, x_max)
    d.rectangle([X(0), Y(1), X(e), Y(tau)], fill=SHADE)
    for i in range(6):  # Draw the grid and label the ticks.
        d.line([X(0), Y(i / 5), X(x_max), Y(i / 5)], fill=GRID)
        d.text((X(0) - 8, Y(i / 5)), f"{i / 5:.1f}", INK, font, "rm")
        d.text((X(x_max * i / 5), Y(0) + 8), f"{x_max * i / 5:.2f}", INK, font, "mt")
    d.line([X(0), Y(tau), X(x_max), Y(tau)], fill=GREEN, width=2)
    d.line([X(e), Y(0), X(e), Y(1)], fill=GREEN, width=2)
    d.rectangle([X(0), Y(1), X(x_max), Y(0)], outline=INK)
    d.text((X(x_max / 2), H - 8), "consensus dispersion  Delta*", INK, font, "md")
    d.text((X(0), 8), "mean consensus  s-bar*", INK, font, "la")
    d.text((X(x_max) + 6, Y(tau)), f"tau = {tau:g}", GREEN, font, "lm")  # τ's is in the margin.
    eps_label = f"eps = {eps:g}"  # It goes right of ε's line, or left of it at the frame's edge.
    w = d.textlength(eps_label, font) + 4
    d.text((X(e) + 4 if X(e) + w < X(x_max) else X(e) - w, Y(1) + 4), eps_label, GREEN, font, "la")
    at = X(0) + d.textlength("mean consensus  s-bar*", font) + 40
    for kind, text in LEGEND.items():  # The legend runs along the top.
        marker(d, at, 15, kind)
        d.text((at + 10, 15), text, INK, font, "lm")
        at += d.textlength(text, font) + 34
    taken = []
    for x, y, _, kind in pts:
        marker(d, X(x), Y(y), kind)
        taken.append((X(x) - 7, Y(y) - 7, X(x) + 7, Y(y) + 7))
    for x, y, label, _ in pts:  # A label moves up or down rather than cover another.
        for dy in (0, -12, 12, -24, 24):
            a = d.textbbox((X(x) + 9, Y(y) + dy), label, font, "lm")
            if not any(a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3] for b in taken):
                d.text((X(x) + 9, Y(y) + dy), label, INK, font, "lm")
                taken.append(a)
                break
    img.save(path)


EPILOG = "Every other setting is evaluate's: python -m verdict_lab.evaluate --help."


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="demo.py", allow_abbrev=False, epilog=EPILOG)
    p.error = lambda message: p.exit(2, f"demo.py: error: {message}\n")  # Errors are one line.
    p.add_argument("--base-url", metavar="URL", help="live: the endpoint, http://HOST:PORT/v1")
    p.add_argument("--model", metavar="NAME", default="default", help="live: the model (default)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", help="live: the API key's variable")
    p.add_argument("--question", metavar="TEXT", help="live: the question")
    p.add_argument("--image", metavar="PATH", action="append", default=[], help="live, repeatable")
    p.add_argument("--choices", metavar='"A. x|B. y"', help="live: the options of the question")
    p.add_argument("--max-steps", metavar="N", type=int, default=8, help="at most N steps (8)")
    p.add_argument("--trace", metavar="PATH", default="verdict_trace.json", help="the trace, JSON")
    p.add_argument("--plot", metavar="PATH", default="verdict_decisions.png", help="the plane, PNG")
    p.add_argument(
        "--html",
        metavar="PATH",
        nargs="?",
        const="verdict_cases.html",
        help="also the case viewer, one HTML file (verdict_cases.html; needs verdict_lab)",
    )
    return p.parse_args(argv)


def check_output(path: str, flag: str, image: bool = False) -> None:
    """ValueError naming the flag unless a file can be written at `path` (and, if `image`, it has an
    extension PIL can save)."""
    if not path:
        raise ValueError(f"{flag}: the path is empty")
    image_format = Image.registered_extensions().get(os.path.splitext(path)[1].lower())
    if image and image_format not in Image.SAVE:
        raise ValueError(f"{flag}: {path!r} has no image file extension PIL can write, like .png")
    if os.path.isdir(path):
        raise ValueError(f"{flag}: {path!r} is a directory")
    if not os.access(os.path.dirname(path) or ".", os.W_OK):  # A missing folder is not writable.
        raise ValueError(f"{flag}: cannot write {path!r}: its folder is missing or read-only")


def check_args(args) -> verdict.Config:
    """The run's Config; ValueError naming the first bad flag, before a file is written or a call
    made."""
    config = verdict.Config(max_steps=args.max_steps)
    check_output(args.trace, "--trace")
    check_output(args.plot, "--plot", image=True)
    if args.html is not None:
        check_output(args.html, "--html")
    if args.question is not None and not args.question.strip():
        raise ValueError("--question is blank")
    options = [o.strip() for o in (args.choices or "").split("|")]
    letters = {o[0].upper() for o in options if re.fullmatch(r"[A-Za-z]\s*[.):]\s*\S.*", o)}
    if args.choices is not None and (len(options) < 2 or len(letters) < len(options)):
        raise ValueError(
            '--choices must be two or more options "A. text|B. text", each a letter, a dot and its '
            f"text, with distinct letters; got {args.choices!r}"
        )
    given = [f"--{f}" for f in ("question", "image", "choices") if getattr(args, f)]
    if args.base_url is None and given:  # The offline demo runs its own scene and question.
        verb = "needs" if len(given) == 1 else "need"
        raise ValueError(f"{' and '.join(given)} {verb} a live model (--base-url)")
    if args.base_url is None:
        return config
    try:
        u = urllib.parse.urlsplit(args.base_url)
        ok = u.scheme in ("http", "https") and bool(u.hostname) and u.port != 0
    except ValueError:  # Reading .port raises this for a port that is no port number.
        ok = False
    if not ok or any(c.isspace() for c in args.base_url):
        raise ValueError(f"--base-url must be http(s)://host[:port][/path], got {args.base_url!r}")
    if not args.question:
        raise ValueError("live mode needs --question")
    for path in args.image:
        if not os.path.isfile(path):
            raise ValueError(f"--image: {path!r} is not a file")
    return config


def write_whole(path: str, save) -> None:
    """save(a temporary path beside `path`, with its extension), then rename it onto `path`: a
    failure leaves `path` as it was, and the temporary file removed."""
    stem, ext = os.path.splitext(os.path.basename(path))
    tmp = os.path.join(os.path.dirname(path), f".{stem}.{os.getpid()}.tmp{ext}")
    try:
        save(tmp)
        os.replace(tmp, path)
    finally:  # The temporary file is removed after a failure (after a rename it is gone).
        if os.path.exists(tmp):
            os.remove(tmp)


def page_writer():
    """The case viewer's writer, verdict_lab.cases.write_trace_page, imported only for --html: the
    demo needs verdict and judges alone, and the page is the lab's. ValueError if it is missing."""
    try:
        from verdict_lab.cases import write_trace_page
    except ImportError as e:
        raise ValueError(
            f"--html needs verdict_lab (run from a checkout, or pip install it): {e}"
        ) from None
    return write_trace_page


def run_offline(config: verdict.Config) -> verdict.Trace:
    """The scripted run: the scene, the question, SCRIPT's candidates and scores."""
    print(
        "offline demo: scripted proposer and scripted judges (plain functions), "
        "no model, no network"
    )
    write_whole("verdict_scene.png", draw_scene)
    print(f"scene: verdict_scene.png\nquestion: {QUESTION}")
    # The proposer and the judges are plain functions that replay SCRIPT.
    propose = lambda state, n: list(SCRIPT[len(state.steps)])[:n]
    judge_fns = [lambda state, step, i=i: SCRIPT[len(state.steps)][step][i] for i in range(3)]
    trace = verdict.run(
        QUESTION, propose, judge_fns, config, "verdict_scene.png", on_step=step_printer(config)
    )
    return replace(trace, meta={"mode": "offline", "scene": "verdict_scene.png"})


def run_live(args, config: verdict.Config) -> verdict.Trace:
    """The reasoner and the three judges of judges.py, at --base-url."""
    question = args.question.strip()
    if args.choices:
        question += "\n" + "\n".join(o.strip() for o in args.choices.split("|"))
    client = judges.Endpoint(args.base_url, args.model, api_key_env=args.api_key_env, timeout=600.0)
    url = judges.shown_url(args.base_url)  # Its secrets are shown as ***.
    print(f"live demo: reasoner {args.model} at {url}")
    reasoner, judge_fns = judges.Reasoner(client), judges.make_judges(client)
    trace = verdict.run(
        question, reasoner, judge_fns, config, args.image or None, on_step=step_printer(config)
    )
    return replace(trace, meta={"mode": "live", "model": args.model, "base_url": url})


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        config = check_args(args)
        write_page = page_writer() if args.html is not None else None
        trace = run_offline(config) if args.base_url is None else run_live(args, config)
    except (judges.EndpointError, ValueError, OSError) as e:
        print(f"demo.py: error: {clean(e)}", file=sys.stderr)
        return 2
    print_totals(trace)
    try:  # The JSON is made before any file is touched: a trace it cannot hold writes nothing.
        text = json.dumps(trace_dict(trace), indent=1, allow_nan=False)
        write_whole(args.trace, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
        write_whole(args.plot, lambda tmp: plot(trace, tmp))
    except (OSError, ValueError) as e:  # A file not written is left as it was.
        print(f"demo.py: error: cannot write the trace or the plot: {clean(e)}", file=sys.stderr)
        return 2
    print(f"wrote {args.trace} and {args.plot}")
    if write_page is None:
        return 0
    images, answer = (
        (["verdict_scene.png"], ANSWER) if args.base_url is None else (args.image, None)
    )
    try:  # The trace and the plot are written already; a page not written leaves them.
        write_page(args.html, trace_dict(trace), images, answer)
    except (OSError, ValueError) as e:
        print(f"demo.py: error: cannot write the page: {clean(e)}", file=sys.stderr)
        return 2
    print(f"wrote {args.html}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
