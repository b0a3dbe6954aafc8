"""VERDICT demo: watch the consensus decide, step by step.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026 (method: consensus, dual acceptance, fallback).

    python demo.py                          # offline: scripted proposer and judges, no network
    python demo.py --base-url URL --model NAME [--image PATH] --question TEXT [--choices "A. x|B. y"]
    python demo.py --base-url URL ... --judge-mode prior+premises[+gate]    # the SGV / EVPV judge modes
    python demo.py --base-url URL ... --judge-mode zoom --revise    # ReVISE: look again, revise on reject

Offline, the run is deterministic. It draws a small scene (verdict_scene.png), asks a question about
it, and scripts the candidates and the judges' raw scores so that one run shows: a step accepted by
consensus, a step whose judges conflict (the paper's Proposition 1 vectors) so it is rejected by
dispersion, a step where the fallback ranking fires, and a step where the raw mean would choose
differently from VERDICT. Live, the proposer and the three judges are real model calls (judges.py),
optionally in the judge modes of the related papers (JudgeMode): SGV's self-grounded prior and
EVPV's fact sheet, with its reliability gate, and ReVISE's look again (zoom); the trace's meta then holds the
prior, the fact sheet (or "degraded"), the gate's checks and the regions named, and one line sums up their
extra calls and tokens.

Every run prints a table per step, writes the trace (--trace, JSON, verdict.TRACE_FORMAT) and draws the
decision plane (--plot, PNG): each candidate at (Δ*, s̄*), the acceptance region Δ* < ε, s̄* > τ shaded.
Bad flags stop the run before any call (exit 2): a setting verdict.Config refuses (τ outside [0, 1], ε
outside (0, 1], ...), a blank --question, --choices that are not two or more "A. text" options, an unusable
URL, a --trace or --plot that cannot be written, an API key that no HTTP header can carry. Live, when the
API key's variable is unset although a key is expected (--api-key-env was given, or an endpoint is not on
this machine), one warning goes to stderr; the key itself is never printed. The trace and the plot are
each written whole or not at all (a temporary file beside them, renamed into place).
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import tempfile
from dataclasses import replace

from PIL import Image, ImageDraw

import verdict
from judges import EndpointError, api_key, one_line, shown_url
from verdict_lab import charts, client, flags, speculate, verifier
from verdict_lab.cache import CacheError
from verdict_lab.flags import add_verifier_args, modes_of, settings_of

QUESTION = (
    "From the viewer's perspective, is the blue ball to the left or to the right of the red cube?\n"
    "A. left\nB. right"
)

# step -> {candidate: (ŝ_V, ŝ_L, ŝ_C)}; the scripted judges look the raw scores up here.
SCRIPT = [
    {  # Proposition 1: equal raw means 2/3, opposite decisions (Δ* 0.0181 accepted, 0.1268 rejected).
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
    d.rectangle([0, 130, 320, 200], fill=(200, 196, 180))  # floor
    d.polygon([(200, 120), (215, 80), (230, 120)], fill=(60, 150, 70))  # far, small cone
    d.rectangle([50, 100, 120, 170], fill=(200, 40, 40), outline=(120, 20, 20))  # red cube
    d.polygon([(50, 100), (70, 85), (140, 85), (120, 100)], fill=(225, 80, 80))
    d.ellipse([220, 125, 270, 175], fill=(40, 80, 210), outline=(20, 40, 120))  # blue ball
    img.save(path)


def scripted_agents():
    """A proposer and three judges that replay SCRIPT: plain functions, as verdict.run accepts."""

    def propose(state, n):
        return list(SCRIPT[len(state.steps)])[:n]

    def judge(i):
        return lambda state, step: SCRIPT[len(state.steps)][step][i]

    return propose, [judge(i) for i in range(len(verdict.JUDGES))]


# ----------------------------------------------------------------------------- output


def fmt(x: float) -> str:
    return "  -  " if math.isnan(x) else f"{x:.3f}"


def row(k, text: str, values: tuple, end: str) -> str:
    """One line of a step's table: the candidate's label, its text on one line (control characters such as a
    terminal's escape sequences dropped, cut to 46 characters with "…"), its ŝ, s̄* and Δ*, and the end."""
    text = one_line(text, len(text))
    text = text if len(text) <= 46 else text[:45] + "…"
    return f"  {k}  {text:<46}  {'  '.join(fmt(x) for x in values)}  {end}"


# what each rule does: (a candidate passed its filter, none did), or one phrase for a rule with no filter
HOW = {
    "verdict": ("accepted, highest s̄*", "fallback: none accepted, highest s̄*−Δ*"),
    "raw-dual": (
        "accepted on raw scores, highest raw mean",
        "fallback: none accepted on raw scores, highest mean−Δ",
    ),
    "no-rank": ("the first accepted, in sampling order", "fallback: none accepted, the first candidate"),
    "variance": ("raw std below ε, highest raw mean", "none with raw std below ε, highest raw mean"),
    "mean": "no filter, highest raw mean",
    "min": "no filter, highest minimum score",
    "max": "no filter, highest maximum score",
    "majority": "no filter, most judges above τ, then highest raw mean",
    "no-filter": "no filter, highest s̄*",
}


def decision(rule: str, sel: verdict.Selection) -> str:
    """How `rule` chose, in words. A rule with no filter passes every candidate that 2 or more judges
    scored."""
    how = HOW[rule]
    if isinstance(how, tuple):
        return how[sel.fallback]
    return how + ("; no candidate has 2 judge scores" if sel.fallback else "")


def _counted(k: int, word: str) -> str:
    """ "1 step", "3 steps"."""
    return f"{k} {word}{'' if k == 1 else 's'}"


def print_trace(trace: verdict.Trace, out=sys.stdout) -> None:
    """Print each step's table, the final answer and one line of totals. The "ok" column is the rule's
    filter (yes/no), or "-" for a rule with no filter."""
    rule = trace.config.rule
    filtered = isinstance(HOW[rule], tuple)
    for t, rec in enumerate(trace.steps, 1):
        sel = rec.selection
        raw = verdict.select(
            rec.s_hat, trace.config.lam, trace.config.tau, trace.config.eps, rule="mean"
        ).index
        print(f"\nstep {t}  (chosen #{sel.index}, {decision(rule, sel)})", file=out)
        print(f"  #  {'candidate':<46}   ŝ_V    ŝ_L    ŝ_C     s̄*     Δ*   ok", file=out)
        for k, cand in enumerate(rec.candidates):
            ok = ("yes" if sel.accepted[k] else " no") if filtered else "  -"
            chosen = k == sel.index and not rec.revised
            mark = " ◀ chosen" + (" (fallback)" if rec.fallback and filtered else "") if chosen else ""
            print(row(k, cand, (*rec.s_hat[k], sel.s_bar_star[k], sel.delta_star[k]), ok + mark), file=out)
        if (v := rec.revision) is not None:  # the revised step, written when no candidate passed
            mark = "yes ◀ chosen (revised)" if v.taken else " no"
            values = (*v.s_hat, v.selection.s_bar_star[0], v.selection.delta_star[0])
            print(row("R", v.candidate, values, mark), file=out)
        if raw != sel.index:
            print(f"  the raw mean would have chosen #{raw} instead", file=out)
    tot = trace.totals()
    answer = "(none: stopped at max_steps)" if trace.answer is None else one_line(trace.answer)
    print(f"\nfinal answer: {answer}", file=out)
    k = tot["revisions"]
    revised = f", {_counted(k, 'revision')} ({tot['revised']} taken)" if k else ""
    print(
        f"totals: {_counted(tot['steps'], 'step')}, {_counted(tot['fallbacks'], 'fallback')} "
        f"({tot['fallback_rate']:.0%}), {_counted(tot['abstentions'], 'abstention')}, "
        f"{_counted(tot['judge_calls'], 'judge call')}{revised}",
        file=out,
    )


def mode_line(rec: dict) -> str:
    """One line for a judge mode's record (ModeChain.record): what it made and what it cost."""
    parts = [f"judge mode {rec['judge_mode']}"]
    if "prior" in rec:
        parts.append(f"prior of {len(rec['prior'])} characters")
    if "fact_sheet_status" in rec:
        facts = sum(map(len, rec["fact_sheet"].values())) if rec["fact_sheet"] else 0
        parts.append(f"fact sheet {rec['fact_sheet_status']}" + (f" ({facts} facts)" if facts else ""))
    if "gate" in rec:
        rs = ", ".join("-" if e["r"] is None else f"{e['r']:.2f}" for e in rec["gate"])
        parts.append(f"{len(rec['gate'])} premise checks (r = {rs})")
    if "zoom" in rec:
        paths = [e["path"] if e["why"] is None else f"{e['path']} ({e['why']})" for e in rec["zoom"]]
        parts.append(f"{len(rec['zoom'])} region requests ({', '.join(paths)})")
    return "; ".join(parts + [f"{rec['extra_calls']} extra calls, {rec['extra_tokens']} extra tokens"])


def plot(trace: verdict.Trace, path: str, size=(640, 480)) -> None:
    """The decision plane: every candidate at (Δ*, s̄*), τ and ε drawn, the acceptance region shaded,
    chosen candidates as filled circles (green: accepted, orange square: fallback)."""
    W, H = size
    left, right, top, bottom = 70, 20, 30, 60
    pts = [
        (float(r.selection.delta_star[k]), float(r.selection.s_bar_star[k]), t, k, r.selection)
        for t, r in enumerate(trace.steps, 1)
        for k in range(len(r.candidates))
    ]
    pts = [p for p in pts if not (math.isnan(p[0]) or math.isnan(p[1]))]
    tau, eps = trace.config.tau, trace.config.eps
    x_max = max([2.5 * eps, 0.3] + [1.1 * p[0] for p in pts])
    X = lambda x: left + x / x_max * (W - left - right)
    Y = lambda y: H - bottom - y * (H - top - bottom)
    c = charts.Canvas(size)
    d, green = c.draw, charts.GREEN
    d.rectangle([X(0), Y(1), X(min(eps, x_max)), Y(tau)], fill=charts.tint(green, 0.8))  # accept: Δ*<ε, s̄*>τ
    for i in range(6):  # grid
        d.line([X(0), Y(i / 5), X(x_max), Y(i / 5)], fill=charts.GRID)
    d.line([X(0), Y(tau), X(x_max), Y(tau)], fill=green, width=2)
    d.line([X(eps), Y(0), X(eps), Y(1)], fill=green, width=2)
    d.rectangle([X(0), Y(1), X(x_max), Y(0)], outline=charts.INK)
    for x, y, t, k, sel in pts:
        marker(d, X(x), Y(y), 6, k != sel.index, sel.fallback)
        c.avoid((X(x) - 6, Y(y) - 6, X(x) + 6, Y(y) + 6))
    items = [
        ("chosen, accepted", lambda d, b: marker(d, b[0] + 5, b[1] + 5, 5, False, False)),
        ("chosen by fallback", lambda d, b: marker(d, b[0] + 5, b[1] + 5, 5, False, True)),
        ("not chosen (label step.cand)", lambda d, b: marker(d, b[0] + 5, b[1] + 5, 5, True, False)),
    ]
    charts.legend(c, (X(x_max) - 190, Y(0.42 if tau > 0.5 else 0.95)), items, width=178, frame=True)
    # the texts, the most important first: a later one moves aside or is left out rather than overlap
    c.text(((X(0) + X(x_max)) / 2, H - 22), "consensus dispersion  Delta*", 14, anchor="mm")  # no Greek
    c.text((X(0), 6), "mean consensus  s-bar*", 14)
    c.text((X(x_max) - 4, Y(tau) - 4), f"tau = {tau:g}", 14, green, "rb", moves=((0, 0), (0, 24)))
    c.text((X(eps) + 4, Y(0) - 4), f"eps = {eps:g}", 14, green, "lb", moves=((0, 0), (0, -24)))
    for i in range(6):  # tick labels
        c.text((X(0) - 8, Y(i / 5)), f"{i / 5:.1f}", anchor="rm")
        c.text((X(x_max * i / 5), Y(0) + 10), f"{x_max * i / 5:.2f}", anchor="mt")
    for x, y, t, k, sel in pts:
        c.text(
            (X(x) + 8, Y(y)),
            f"{t}.{k}",
            fill=charts.tint(charts.INK, 0.25),
            anchor="lm",
            moves=((0, 0), (0, -12), (0, 12), (0, -24), (0, 24)),
        )
    c.save(path)


def marker(d, cx: float, cy: float, r: float, other: bool, fallback: bool) -> None:
    """A candidate on the decision plane: a grey ring when not chosen, an orange square when chosen by the
    fallback, else a green disc."""
    if other:
        d.ellipse([cx - r, cy - r, cx + r, cy + r], outline=charts.tint(charts.INK, 0.55), width=2)
    elif fallback:
        d.rectangle([cx - r, cy - r, cx + r, cy + r], fill=charts.ORANGE, outline=charts.INK)
    else:
        d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=charts.GREEN, outline=charts.INK)


# ----------------------------------------------------------------------------- command line


def parse_args(argv):
    p = flags.Parser(
        prog="demo.py", description="VERDICT step by step: offline by default, live with --base-url."
    )
    p.add_argument("--question", help="the question (live mode)")
    p.add_argument("--image", action="append", default=[], help="image path; repeat for several (live mode)")
    p.add_argument("--choices", help='options as "A. left|B. right"; appended to the question')
    p.add_argument("--rule", default="verdict", choices=verdict.RULES, help="selection rule (verdict)")
    p.add_argument("--trace", default="verdict_trace.json", help="where to write the trace JSON")
    p.add_argument("--plot", default="verdict_decisions.png", help="where to draw the decision plane")
    add_verifier_args(p)  # --n, --tau, --eps, --lam, --max-steps, --judge-format, --judge-mode, --revise, ...
    flags.add_endpoint_args(p)
    return p.parse_args(argv)


CHOICE = re.compile(r"([A-Za-z])\s*[.):]\s*(\S.*)")  # "A. left", "b) right", "C: both"


def parse_choices(text: str) -> list:
    """The options of --choices "A. left|B. right": two or more, each a letter, a dot (or ")" or ":") and
    its text, the letters distinct. ValueError names the flag and its value otherwise."""
    options = [o.strip() for o in text.split("|")]
    found = [CHOICE.fullmatch(o) for o in options]
    letters = [m[1].upper() for m in found if m]
    if len(options) < 2 or not all(found) or len(set(letters)) != len(letters):
        raise ValueError(
            f'--choices must be two or more options "A. text|B. text", each a letter, a dot and its '
            f"text, with distinct letters; got {text!r}"
        )
    return options


def check_output(path: str, flag: str, image: bool = False) -> None:
    """ValueError naming the flag unless `path` can be written (by write_whole): not a directory, in an
    existing directory where a file can be created, with a file extension PIL can save when `image`."""
    if not path:
        raise ValueError(f"{flag}: the path is empty")
    folder = os.path.dirname(path) or "."
    if image and os.path.splitext(path)[1].lower() not in Image.registered_extensions():
        raise ValueError(f"{flag}: {path!r} has no image file extension PIL can write, such as .png")
    if os.path.isdir(path):
        raise ValueError(f"{flag}: {path!r} is a directory")
    try:  # the one sure test (access() says yes to root on a read-only file system): make a file there
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".verdict-probe-"):
            pass
    except OSError as e:
        raise ValueError(f"{flag}: cannot write {path!r} ({e.strerror or e})") from None


def write_whole(path: str, save) -> None:
    """save(a temporary path beside `path`, with its extension), then rename it onto `path`: a failure leaves
    `path` as it was, never half written. OSError on failure, the temporary file removed."""
    stem, ext = os.path.splitext(os.path.basename(path))
    tmp = os.path.join(os.path.dirname(path), f".{stem}.{os.getpid()}.tmp{ext}")  # created by save: umask
    try:
        save(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def check_args(args) -> verifier.Settings:
    """The verifier's settings from the flags; ValueError names the first bad flag, before any call is made
    (verifier.Settings checks the verifier's: τ in [0, 1], ε in (0, 1], ...)."""
    if len(modes_of(args)) != 1:
        raise ValueError(
            f"--judge-mode: demo.py runs one mode, got {args.judge_mode!r}; a mode's words are "
            f"joined by +: {args.judge_mode.replace(',', '+')!r}"
        )
    settings = settings_of(args)
    if settings.mode.active and args.base_url is None:  # the scripted judges have no prompt to ground
        raise ValueError(f"judge mode {settings.mode.name!r} needs a live model (--base-url)")
    if args.revise and args.base_url is None:
        raise ValueError("--revise needs a live model (--base-url)")
    check_output(args.trace, "--trace")
    check_output(args.plot, "--plot", image=True)
    if args.question is not None and not args.question.strip():
        raise ValueError("--question is blank")
    if args.choices is not None:
        parse_choices(args.choices)
    given = [
        f
        for f, v in (("--question", args.question), ("--image", args.image), ("--choices", args.choices))
        if v
    ]
    if given and args.base_url is None:  # the offline demo runs its own scene and question
        raise ValueError(
            f"{' and '.join(given)} need{'s' if len(given) == 1 else ''} a live model (--base-url): "
            "the offline demo runs its own question"
        )
    if args.base_url is not None:
        for url in filter(None, (args.base_url, args.judge_base_url)):
            client.check_base_url(url)
        if not args.question:
            raise ValueError("live mode needs --question")
        api_key(args.api_key_env or flags.DEFAULT_KEY_ENV)  # a key no request can carry
        missing = [p for p in args.image if not os.path.isfile(p)]
        if missing:
            raise ValueError(f"image file not found: {missing[0]}")
    return settings


def run_offline(config: verdict.Config) -> verdict.Trace:
    """The scripted run: the scene, the question, SCRIPT's candidates and scores."""
    print("offline demo: scripted proposer and scripted judges (plain functions), no model, no network")
    draw_scene("verdict_scene.png")
    print(f"scene: verdict_scene.png\nquestion: {QUESTION}")
    propose, judge_fns = scripted_agents()
    trace = verdict.run(QUESTION, propose, judge_fns, config, image="verdict_scene.png")
    return replace(trace, meta={"mode": "offline", "scene": "verdict_scene.png"})


def run_live(args, settings: verifier.Settings) -> verdict.Trace:
    """A real reasoner and real judges at --base-url (verifier.build); EndpointError or ValueError when the
    endpoint fails."""
    question = args.question.strip() + ("\n" + "\n".join(parse_choices(args.choices)) if args.choices else "")
    print(f"live demo: reasoner {args.model} at {shown_url(args.base_url)}")
    reasoner, judge = flags.clients_from_args(args)
    client.pin((reasoner, judge), question, 0)  # --dp-replicas: the chain on one replica
    v = verifier.build(settings, reasoner, judge)
    trace = verifier.run(v, question, args.image or None, map_fn=verifier.thread_map(args.concurrency))
    usage = (
        {"reasoner": reasoner.usage}
        if reasoner is judge
        else {"reasoner": reasoner.usage, "judges": judge.usage}
    )
    meta = {"mode": "live", "model": args.model, "judge_model": judge.model, "usage": usage, **trace.meta}
    return replace(trace, meta=meta)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        settings = check_args(args)
        if args.base_url is not None and (warning := flags.key_warning(args)):
            print(f"demo.py: {warning}", file=sys.stderr)
        trace = run_offline(settings.config) if args.base_url is None else run_live(args, settings)
    except (EndpointError, CacheError, ValueError) as e:
        print(f"demo.py: error: {e}", file=sys.stderr)
        return 2
    print_trace(trace)
    if "speculation" in trace.meta:
        print(speculate.summary(trace.meta["speculation"]))
    if "judge_mode" in trace.meta:
        print(mode_line(trace.meta["judge_mode"]))
    try:
        text = json.dumps(trace.to_dict(), indent=1, allow_nan=False)  # before any file is touched
        write_whole(args.trace, lambda tmp: write_text(tmp, text))
        write_whole(args.plot, lambda tmp: plot(trace, tmp))
    except (OSError, ValueError) as e:  # a full disk, say; a file not written is left as it was
        print(f"demo.py: error: cannot write the trace or the plot: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.trace} and {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
