"""Sweeps of VERDICT's harness: the paper's analyses (τ, ε and λ sensitivity, judges of another size
or family) for a served model, at the price of the requests that differ.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026, analyses: stubbornness sensitivity (one λ at a time), the
τ regimes (ε = 0.1), the ε plateau (τ = 0.6), and judge quality (7B against 2B judges, VERDICT's
margin over Mean). This module runs one such axis as settings, each a run of evaluate.py of its own:

- `--sweep NAME=V1,V2,...` for NAME in tau, eps, lam_V, lam_L, lam_C, and adaptive_threshold (θ of
  the --adaptive signal, adaptive.py; the point θ = 1, full VERDICT, is added when not listed);
  `--judge-model A,B` (judges
  compared on one reasoner); `--model A,B` with one `--judge-model` (reasoners compared under one
  judge model);
- every setting runs the same items, seeds and methods in OUT/<setting>/ (its own summary.md, tables
  and results.jsonl) against one response cache, OUT/cache.sqlite. No request depends on τ, ε or λ
  (they only select), so two settings send byte-identical requests until their first differing
  decision, and every request a setting shares with an earlier one is answered by the cache: a sweep
  asks for each distinct request once. Resumed, it makes no call twice (finished rows are kept, the
  rest come from the cache);
- Tally: the cache as one setting sees it, recording every distinct request (key and tokens) that
  setting asks for in OUT/<setting>/requests.tsv, so that the summary compares what the sweep needs
  (the distinct requests of all settings) with what separate runs would make (each setting's
  distinct requests, summed);
- OUT/summary.md and summary.json ("verdict-sweep/1"): the paper's form (base, Mean, VERDICT,
  VERDICT − Mean, per setting), each setting's table, the cost; OUT/sweep_acc.csv, a column per
  setting; OUT/summary.png (picture): Avg accuracy against the swept value, a line per method, ± the
  std over seeds.

simulate.py draws the same curves from its noise model with `picture` and the same summary format.
This module makes no request: evaluate.py hands it the run of one setting (`run_one`).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import math
import os
import re
import sys
import threading
from dataclasses import dataclass

from verdict_lab import charts
from verdict_lab.formats import reported_usage
import verdict
from verdict_lab.harness import rundir

SWEEP_FORMAT = "verdict-sweep/1"
# What --sweep varies: lam_X is λ of judge X; adaptive_threshold is θ of adaptive verification.
KNOBS = ("tau", "eps", "lam_V", "lam_L", "lam_C", "adaptive_threshold")
SYMBOLS = {"tau": "τ", "eps": "ε", "lam_V": "λ_V", "lam_L": "λ_L", "lam_C": "λ_C"}
SYMBOLS["adaptive_threshold"] = "θ (adaptive)"
ASCII = {"tau": "tau", "eps": "eps", "lam_V": "lambda_V", "lam_L": "lambda_L", "lam_C": "lambda_C"}
ASCII["adaptive_threshold"] = "theta (adaptive)"
AXES = KNOBS + ("model", "judge_model")


@dataclass(frozen=True)
class Setting:
    """One point of a sweep: `axis` (a knob of KNOBS, "model" or "judge_model") set to `value`."""

    axis: str
    value: float | str

    @property
    def label(self) -> str:
        """ "tau=0.1", "judge=Qwen/Qwen2-VL-2B-Instruct", "model=..." """
        name = {"judge_model": "judge"}.get(self.axis, self.axis)
        return f"{name}={self.value:g}" if isinstance(self.value, float) else f"{name}={self.value}"

    @property
    def folder(self) -> str:
        """Its directory's name in OUT: the label with anything but letters, digits, . _ = -
        as _."""
        return re.sub(r"[^A-Za-z0-9._=-]", "_", self.label)

    @property
    def tick(self) -> str:
        """The value as the picture's x axis shows it."""
        return f"{self.value:g}" if isinstance(self.value, float) else str(self.value)


def parse_sweep(text: str) -> list:
    """ "tau=0.01,0.1,0.6" -> [Setting("tau", 0.01), ...]; ValueError names an unknown knob, a
    value that is not a finite number, a repeated value, or fewer than two values. Config checks the
    ranges later. An adaptive_threshold sweep ends with θ = 1 (every step judged: full VERDICT on
    the same requests) when its values leave it out."""
    name, eq, values = (text or "").partition("=")
    name = name.strip()
    if name not in KNOBS or not eq:
        raise ValueError(
            f"--sweep must be NAME=V1,V2,... with NAME one of {', '.join(KNOBS)}, got {text!r}"
        )
    try:
        xs = [float(v) for v in values.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--sweep {name}: every value must be a number, got {values!r}") from None
    if (
        len(xs) < 2 or len(set(xs)) != len(xs) or not all(map(math.isfinite, xs))
    ):  # one point is no curve
        raise ValueError(f"--sweep {name}: give two or more distinct finite values, got {values!r}")
    if name == "adaptive_threshold" and 1.0 not in xs:
        xs.append(1.0)
    return [Setting(name, x) for x in xs]


def _names(flag: str, text: str | None) -> list:
    """A comma-separated list of model names, checked: no empty and no repeated name."""
    names = [v.strip() for v in (text or "").split(",")]
    if not all(names) or len(set(names)) != len(names):
        raise ValueError(f"{flag} must list distinct model names, comma-separated, got {text!r}")
    return names


def wanted(args) -> bool:
    """Whether the flags ask for a sweep: --sweep, or a comma in --model or --judge-model."""
    return bool(args.sweep) or "," in f"{args.model or ''}{args.judge_model or ''}"


def settings_of(args) -> list:
    """The settings of the flags: --sweep, or several --judge-model, or several --model; [] for none
    (a plain run). ValueError for two axes at once (one at a time, as the paper varies them) or a
    model list with no single judge model."""
    models = _names("--model", args.model)
    if len(models) > 1 and not args.judge_model:  # else each reasoner would judge itself
        raise ValueError(
            "several --model reasoners are compared under one judge model: give --judge-model"
        )
    judges = _names("--judge-model", args.judge_model or args.model)
    axes = [a for a, on in (("--sweep", args.sweep), ("--judge-model", len(judges) > 1)) if on]
    axes += ["--model"] if len(models) > 1 else []
    if len(axes) > 1:
        raise ValueError(f"sweep one thing at a time: got {' and '.join(axes)}")
    if args.sweep:
        return parse_sweep(args.sweep)
    if len(judges) > 1:
        return [Setting("judge_model", j) for j in judges]
    return [Setting("model", m) for m in models] if len(models) > 1 else []


def floats(text: str) -> tuple:
    """ "1.5,1.0,0.8" -> (1.5, 1.0, 0.8), for --lam; argparse reports a bad one."""
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected numbers separated by commas, got {text!r}"
        ) from None


def args_for(args, s: Setting) -> argparse.Namespace:
    """The flags of one setting's run: OUT/<setting>, the sweep's one cache, the axis set to its
    value."""
    a = argparse.Namespace(**vars(args))
    a.sweep, a.out = None, os.path.join(args.out, s.folder)
    a.cache = args.cache or os.path.join(
        args.out, "cache.sqlite"
    )  # one cache: the settings share calls
    if s.axis.startswith("lam_"):  # one λ at a time, the others as given
        lam = list(args.lam or verdict.STUBBORNNESS)
        lam[
            verdict.JUDGES.index({"V": "visual", "L": "logical", "C": "contextual"}[s.axis[-1]])
        ] = s.value
        a.lam = tuple(lam)
    else:
        setattr(a, s.axis, s.value)
    return a


# ----------------------------------------------------------------------------- counting requests


def _tokens(response: dict) -> int:
    """prompt + completion tokens a response reports, each bounded as formats.reported_usage reads
    it."""
    return sum(reported_usage(response).values())


def read_tally(path: str) -> dict:
    """OUT/<setting>/requests.tsv -> {cache key: tokens}; {} when absent. A torn last line is left
    out."""
    if not os.path.exists(path):
        return {}
    out = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            key, _, tokens = line.rstrip("\n").partition("\t")
            if tokens.isdigit():
                out[key] = int(tokens)
    return out


class Tally:
    """A response cache (cache.Cache) as one setting sees it: every get and put passes through, and
    each distinct request it is asked for (its key and its reply's tokens) is appended to `path`
    once. `sent` and `sent_tokens` count the replies put, i.e. the requests this setting sent in
    this process."""

    def __init__(self, cache, path: str):
        self.cache, self.path, self.lock = cache, path, threading.Lock()
        self.seen, self.sent, self.sent_tokens = read_tally(path), 0, 0

    def get(self, key: str):
        hit = self.cache.get(key)
        if hit is not None:
            self._note(key, hit)
        return hit

    def put(self, key: str, response: dict) -> None:
        self.cache.put(key, response)
        with self.lock:
            self.sent, self.sent_tokens = self.sent + 1, self.sent_tokens + _tokens(response)
        self._note(key, response)

    def _note(self, key: str, response: dict) -> None:
        with self.lock:
            if key not in self.seen:
                self.seen[key] = _tokens(response)
                with open(self.path, "a", encoding="utf-8") as fh:
                    fh.write(f"{key}\t{self.seen[key]}\n")

    def __getattr__(self, name):  # anything else a cache does (close, ...)
        return getattr(self.cache, name)


def cost(tallies: dict, sent: tuple, uncached: tuple) -> dict:
    """What the sweep needs against separate runs. tallies: setting -> {key: tokens}. needed: the
    distinct requests of all settings (what the sweep sends from an empty cache); separate: each
    setting's distinct requests, summed (separate runs, each with its own cache); sent: what this
    process sent; uncached: the chains' calls with no cache at all."""
    union = {k: t for seen in tallies.values() for k, t in seen.items()}
    return {
        "needed": {"calls": len(union), "tokens": sum(union.values())},
        "separate": {
            "calls": sum(len(s) for s in tallies.values()),
            "tokens": sum(sum(s.values()) for s in tallies.values()),
        },
        "sent": {"calls": sent[0], "tokens": sent[1]},
        "uncached": {"calls": uncached[0], "tokens": uncached[1]},
        "per_setting": {
            k: {"calls": len(s), "tokens": sum(s.values())} for k, s in tallies.items()
        },
    }


# ----------------------------------------------------------------------------- running


def main(args, run_one, check) -> int:
    """evaluate.py's sweep: every setting's flags checked by check(flags) (evaluate.check_args)
    before any call, then each setting run by run_one(flags, tap) (evaluate.one_run: its status 0, 2
    or 3), one after another, then the sweep's tables and picture. Status: 2 as soon as a setting
    cannot run, else 3 if any setting's error rate was too high, else 0."""
    try:
        settings = settings_of(args)
        if len({s.folder for s in settings}) != len(settings):
            raise ValueError(f"two settings share a directory name: {[s.label for s in settings]}")
        for s in settings:
            check(args_for(args, s))
        held = rundir.lock(args.out)
    except (ValueError, OSError) as e:
        print(f"verdict_lab.evaluate: error: {e}", file=sys.stderr)
        return 2
    try:
        status, tallies = 0, {}
        for i, s in enumerate(settings):
            a = args_for(args, s)
            os.makedirs(a.out, exist_ok=True)
            tallies[s.label] = Tally(None, os.path.join(a.out, "requests.tsv"))

            def tap(
                reasoner, judge, t=tallies[s.label]
            ):  # the setting's clients: their one cache, counted
                t.cache = reasoner.cache
                reasoner.cache = judge.cache = t

            print(
                f"verdict_lab.evaluate: setting {s.label} ({i + 1}/{len(settings)}) in {a.out}",
                file=sys.stderr,
            )
            with contextlib.redirect_stdout(
                io.StringIO()
            ):  # each setting's table is in its summary.md
                code = run_one(a, tap)
            if code == 2:
                return 2
            status = max(status, code)
        summary = summarize(args, settings, tallies)
        print(write(args.out, summary), end="")
        return status
    finally:
        held.close()


def summarize(args, settings: list, tallies: dict) -> dict:
    """The sweep's summary from each setting's summary.json and results.jsonl, and the tallies."""
    subs, uncached = {}, [0, 0]
    for s in settings:
        folder = os.path.join(args.out, s.folder)
        with open(os.path.join(folder, "summary.json"), encoding="utf-8") as fh:
            subs[s.label] = json.load(fh)
        rows = rundir.load_rows(os.path.join(folder, "results.jsonl"))[0]
        uncached[0] += sum(r.calls for r in rows.values())
        uncached[1] += sum(r.tokens for r in rows.values())
    first = subs[settings[0].label]
    acc = {k: {m: v["accuracy"][m] for m in first["methods"]} for k, v in subs.items()}
    sent = tuple(sum(getattr(t, k) for t in tallies.values()) for k in ("sent", "sent_tokens"))
    return head(
        settings,
        first["methods"],
        first["columns"] + ["Avg"],
        first["seeds"],
        "evaluate.py " + " ".join(f"--data {d}" for d in args.data),
        accuracy=acc,
        margin=margins(acc),
        fallback_rate={
            k: v["stats"].get("verdict", {}).get("fallback_rate") for k, v in subs.items()
        },
        judge_calls={
            k: {m: v["stats"].get(m, {}).get("judge_calls_per_item") for m in first["methods"]}
            for k, v in subs.items()
        },
        cost=cost({k: t.seen for k, t in tallies.items()}, sent, tuple(uncached)),
    )


def head(settings: list, methods: list, columns: list, seeds: list, source: str, **rest) -> dict:
    """A sweep summary (SWEEP_FORMAT), evaluate's or simulate.py's: the axis, its settings, the
    methods, columns and seeds, what produced it, then `rest` (accuracy, margin, ...)."""
    return {
        "format": SWEEP_FORMAT,
        "axis": settings[0].axis,
        "settings": [s.label for s in settings],
        "values": [s.value for s in settings],
        "ticks": [s.tick for s in settings],
        "methods": methods,
        "columns": columns,
        "seeds": seeds,
        "source": source,
        **rest,
    }


def margins(acc: dict) -> dict:
    """VERDICT − Mean per setting and column (points, of the means); None where either is
    missing."""
    out = {}
    for k, table in acc.items():
        if "verdict" in table and "mean" in table:
            v, m = table["verdict"], table["mean"]
            out[k] = {
                c: None if None in (v[c]["mean"], m[c]["mean"]) else v[c]["mean"] - m[c]["mean"]
                for c in v
            }
    return out


# ----------------------------------------------------------------------------- tables and picture


def _pct(c: dict | None) -> str:
    if not c or c.get("mean") is None:
        return "—"
    return f"{c['mean']:.2f}" + (f" ±{c['std']:.2f}" if c.get("std") is not None else "")


def _signed(x) -> str:
    return "—" if x is None else f"{x:+.2f}"


def axis_name(axis: str) -> str:
    return {"model": "reasoner model", "judge_model": "judge model"}.get(
        axis, SYMBOLS.get(axis, axis)
    )


def _paper_table(s: dict, paper: list, head) -> list:
    """summary.md's first table: each setting's accuracy of base, Mean and VERDICT, VERDICT − Mean,
    the fallback rate and, in a sweep of θ, VERDICT's judge calls per item."""
    out = []
    margin = ["VERDICT − Mean"] if s["margin"] else []  # with both methods run
    # A sweep of θ trades judge calls for accuracy: VERDICT's judge calls per item beside it.
    calls = ["VERDICT judge calls / item"] if s["axis"] == "adaptive_threshold" else []
    out += head(axis_name(s["axis"]), paper + margin + ["fallback"] + calls)
    for k, t in zip(s["settings"], s["ticks"]):
        fb = s["fallback_rate"].get(k)
        cells = [_pct(s["accuracy"][k][m]["Avg"]) for m in paper]
        cells += [_signed(s["margin"][k]["Avg"])] if margin else []
        cells += ["—" if fb is None else f"{fb:.1%}"]
        per = s.get("judge_calls", {}).get(k, {}).get("verdict")
        cells += [("—" if per is None else f"{per:.1f}")] if calls else []
        out.append(f"| {t} | " + " | ".join(cells) + " |")
    if calls:
        out += [
            "",
            "θ = 1 judges every step: full VERDICT. compute.png draws VERDICT's accuracy against "
            "its judge calls per item, a point per θ, beside base (no judge call).",
        ]
    return out


def render(s: dict) -> str:
    """summary.md of a sweep: the paper's form, the cost, then each setting's table."""
    head = lambda first, cs: [f"| {first} | " + " | ".join(cs) + " |", "|---" * (len(cs) + 1) + "|"]
    paper = [m for m in ("base", "mean", "verdict") if m in s["methods"]]
    out = [
        f"# Sweep of {axis_name(s['axis'])}: {', '.join(s['ticks'])}",
        "",
        f"Format: `{s['format']}`. Every setting ran the same items, seeds ({len(s['seeds'])}) and "
        "methods, each in its own directory (its summary.md, tables and results.jsonl), against "
        f"one response cache. From `{s['source']}`.",
        "",
        "Avg accuracy (%), mean ± sample std over seeds, in the paper's form: VERDICT − Mean is "
        "the margin of VERDICT over the Mean baseline (points); fallback is VERDICT's share of "
        "steps where no candidate passed.",
        "",
    ]
    out += _paper_table(s, paper, head)
    c = s["cost"]
    ratio = lambda a, b: f"{a / b:.2f}" if b else "—"
    out += [
        "",
        "Cost. Needed: the distinct requests of all settings, what this sweep sends from an empty "
        "cache. Separate runs: each setting's distinct requests, summed (a run of each setting "
        "alone, with its own cache). Sent: what this invocation sent (a resumed sweep sends only "
        "what it lacks). No cache: every chain's calls.",
        "",
    ]
    out += head("", ["calls", "tokens", "calls / separate runs"])
    for name, key in (
        ("needed", "needed"),
        ("separate runs", "separate"),
        ("sent", "sent"),
        ("no cache", "uncached"),
    ):
        share = ratio(c[key]["calls"], c["separate"]["calls"])
        out.append(f"| {name} | {c[key]['calls']} | {c[key]['tokens']} | {share} |")
    for k, t in zip(s["settings"], s["ticks"]):
        table = s["accuracy"][k]
        out += ["", f"Setting {k} (%, mean ± std over seeds; `{k}/summary.md` has the rest):", ""]
        out += head("Method", s["columns"])
        out += [
            f"| {m} | " + " | ".join(_pct(table[m].get(col)) for col in s["columns"]) + " |"
            for m in s["methods"]
        ]
    return "\n".join(out) + "\n"


def write_csv(path: str, s: dict) -> None:
    """sweep_acc.csv: a row per method and column, a column per setting, mean accuracy as a fraction
    (as VLMEvalKit's _acc.csv), every field quoted, empty for none."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, quoting=csv.QUOTE_ALL)
        w.writerow(["method", "column"] + s["settings"])
        for m in s["methods"]:
            for col in s["columns"]:
                cells = [s["accuracy"][k][m].get(col, {}).get("mean") for k in s["settings"]]
                w.writerow([m, col] + ["" if v is None else v / 100 for v in cells])


def write(out: str, s: dict) -> str:
    """summary.json, summary.md, sweep_acc.csv and summary.png in OUT; returns the markdown."""
    md = render(s)
    with open(os.path.join(out, "summary.json"), "w", encoding="utf-8") as fh:
        fh.write(json.dumps(s, indent=1, allow_nan=False))
    with open(os.path.join(out, "summary.md"), "w", encoding="utf-8") as fh:
        fh.write(md)
    write_csv(os.path.join(out, "sweep_acc.csv"), s)
    picture(s, os.path.join(out, "summary.png"))
    if s["axis"] == "adaptive_threshold":
        compute_picture(s, os.path.join(out, "compute.png"))
    return md


def picture(s: dict, path: str, title: str | None = None, column: str = "Avg") -> list:
    """Accuracy (%) in `column` against the swept value (the settings evenly spaced, in the order
    given): a line per method, base grey, VERDICT red and thick, each point with a whisker of ± its
    std over seeds; under each value, VERDICT − Mean. Returns the points drawn as
    (method, setting, (x, y))."""
    W, H, x0, x1, y0, y1 = 760, 440, 62, 560, 50, 350  # the image; the plot box, pixels
    keys, methods = s["settings"], s["methods"]
    lo, hi, step = _y_range([s["accuracy"][k][m][column] for k in keys for m in methods])
    px = lambda i: x0 + 30 + i * (x1 - x0 - 60) / max(len(keys) - 1, 1)
    py = lambda y: y1 - (y - lo) / ((hi - lo) or 1) * (y1 - y0)
    c = charts.Canvas((W, H))
    c.text(
        (10, 8),
        title
        or (
            f"Accuracy ({column}, %) against {ASCII.get(s['axis'], axis_name(s['axis']))}, "
            "± std over seeds"
        ),
        13,
        width=W - 20,
        lines=2,
    )
    c.draw.rectangle((x0, y0, x1, y1), outline=charts.INK)
    for t in [lo + j * step for j in range(int(round((hi - lo) / step)) + 1)]:
        c.draw.line((x0, py(t), x1, py(t)), fill=charts.GRID)
        c.text((x0 - 6, py(t)), f"{t:g}", 11, anchor="rm")
    for i, (k, tick) in enumerate(zip(keys, s["ticks"])):
        c.draw.line((px(i), y1, px(i), y1 + 4), fill=charts.INK)
        c.text((px(i), y1 + 8), tick, 11, anchor="mt", width=(x1 - x0) / len(keys))
        margin = s.get("margin", {}).get(k, {}).get(column)
        if margin is not None:
            c.text((px(i), y1 + 28), f"{margin:+.2f}", 11, fill=charts.RED, anchor="mt")
    if s.get("margin"):
        c.text((x0, y1 + 46), "red: VERDICT - Mean (points)", 11, fill=charts.RED)
    c.text(
        (x0, H - 22),
        f"x: {s.get('xlabel') or ASCII.get(s['axis'], axis_name(s['axis']))}; "
        f"{s.get('note') or s['source']}",
        11,
        width=W - x0 - 10,
        lines=1,
    )
    colours = _colours(methods)
    points = _draw_methods(c, s, column, colours, (px, py))
    names = {"base": "base (the reasoner alone)", "verdict": "VERDICT"}
    charts.legend(
        c,
        (x1 + 20, y0),
        [(names.get(m, m), colours[m]) for m in methods],
        width=W - x1 - 30,
        line=True,
    )
    c.save(path)
    return points


def compute_picture(s: dict, path: str, method: str = "verdict") -> list:
    """compute.png of a θ sweep: Avg accuracy (%) of `method` against its judge calls per item, a
    point per θ labelled with it and joined in θ's order, ± the std over seeds, and base at 0 judge
    calls (its accuracy averaged over the settings, which all run it alike). Returns the points
    drawn as (label, (x, y))."""
    W, H, x0, x1, y0, y1 = 760, 440, 62, 700, 50, 350  # the image; the plot box, pixels
    keys, calls = s["settings"], s.get("judge_calls", {})
    cells = [(calls.get(k, {}).get(method), s["accuracy"][k][method]["Avg"]) for k in keys]
    base = [s["accuracy"][k]["base"]["Avg"]["mean"] for k in keys if "base" in s["methods"]]
    base = [b for b in base if b is not None]
    ys = [c for x, c in cells if x is not None and c["mean"] is not None]
    if base:
        ys.append({"mean": sum(base) / len(base), "std": None})
    lo, hi, ystep = _y_range(ys)
    x_lo, x_hi, xstep = charts.nice(0, max([x for x, _ in cells if x is not None] or [1]))
    px = lambda v: x0 + (v - x_lo) / ((x_hi - x_lo) or 1) * (x1 - x0)
    py = lambda v: y1 - (v - lo) / ((hi - lo) or 1) * (y1 - y0)
    c = charts.Canvas((W, H))
    c.text((10, 8), f"Avg accuracy (%) against judge calls per item, {method} at each θ", 13)
    c.draw.rectangle((x0, y0, x1, y1), outline=charts.INK)
    for t in [lo + j * ystep for j in range(int(round((hi - lo) / ystep)) + 1)]:
        c.draw.line((x0, py(t), x1, py(t)), fill=charts.GRID)
        c.text((x0 - 6, py(t)), f"{t:g}", 11, anchor="rm")
    for t in [x_lo + j * xstep for j in range(int(round((x_hi - x_lo) / xstep)) + 1)]:
        c.text((px(t), y1 + 8), f"{t:g}", 11, anchor="mt")
    c.text((x0, H - 22), f"x: judge calls per item; {s['source']}", 11, width=W - x0 - 10, lines=1)
    drawn = _draw_thetas(c, s["ticks"], cells, (px, py))
    if base:
        b = (px(0), py(sum(base) / len(base)))
        c.draw.ellipse((b[0] - 4, b[1] - 4, b[0] + 4, b[1] + 4), fill=charts.GREY)
        c.text((b[0] + 6, b[1] + 4), "base", 11, fill=charts.GREY)
        drawn.append(("base", b))
    c.save(path)
    return drawn


def _draw_thetas(c, ticks: list, cells: list, scale: tuple) -> list:
    """compute.png's points, a point per θ with its ± std whisker and label, joined in θ's order;
    the points drawn as (label, (x, y))."""
    (px, py), drawn = scale, []
    for tick, (x, cell) in zip(ticks, cells):
        if x is None or cell["mean"] is None:
            continue
        at = (px(x), py(cell["mean"]))
        if cell["std"]:
            top = py(min(100, cell["mean"] + cell["std"]))
            bottom = py(max(0, cell["mean"] - cell["std"]))
            c.draw.line((at[0], top, at[0], bottom), fill=charts.RED)
        c.text((at[0] + 6, at[1] - 14), f"θ={tick}", 11, fill=charts.RED)
        drawn.append((f"θ={tick}", at))
    if len(drawn) > 1:
        c.draw.line([at for _, at in drawn], fill=charts.RED, width=3)
    for _, (x, y) in drawn:
        c.draw.ellipse((x - 4, y - 4, x + 4, y + 4), fill=charts.RED)
    return drawn


def _y_range(cells: list) -> tuple:
    """(low, high, tick step) of a y axis (%) holding every cell's mean ± std, at most ~7 round
    ticks."""
    spans = [
        (c["mean"] - (c["std"] or 0), c["mean"] + (c["std"] or 0))
        for c in cells
        if c["mean"] is not None
    ]
    lo, hi = (min(a for a, _ in spans), max(b for _, b in spans)) if spans else (0, 100)
    step = next(t for t in (0.5, 1, 2, 5, 10, 20, 25) if (hi - lo) / t <= 6)  # at most ~7 ticks
    lo, hi = max(0, step * math.floor(lo / step)), min(100, step * math.ceil(hi / step + 1e-9))
    return lo, hi, step


def _colours(methods: list) -> dict:
    """{method: its colour}: base grey, VERDICT red, the others the palette's other colours in
    turn."""
    colours, others = (
        {"base": charts.GREY, "verdict": charts.RED},
        [p for p in charts.PALETTE if p not in (charts.GREY, charts.RED)],
    )
    for j, m in enumerate(m for m in methods if m not in colours):
        colours[m] = others[j % len(others)]
    return colours


def _draw_methods(c, s: dict, column: str, colours: dict, scale: tuple) -> list:
    """Each method's line, points and ± std whiskers, base first, VERDICT on top; the points
    drawn."""
    (px, py), keys, methods = scale, s["settings"], s["methods"]
    points = []
    for m in sorted(
        methods, key=lambda m: (m == "verdict", m == "base")
    ):  # base, then VERDICT, on top
        pts = [(i, s["accuracy"][k][m][column]) for i, k in enumerate(keys)]
        xy = [(px(i), py(cell["mean"])) for i, cell in pts if cell["mean"] is not None]
        if len(xy) > 1:
            c.draw.line(xy, fill=colours[m], width=4 if m == "verdict" else 2)
        dx = 4 * (methods.index(m) - (len(methods) - 1) / 2)  # whiskers side by side
        for (i, cell), (x, y) in zip([p for p in pts if p[1]["mean"] is not None], xy):
            if cell["std"]:
                hi_, lo_ = (
                    py(min(100, cell["mean"] + cell["std"])),
                    py(max(0, cell["mean"] - cell["std"])),
                )
                c.draw.line((x + dx, hi_, x + dx, lo_), fill=colours[m])
            c.draw.ellipse((x - 3, y - 3, x + 3, y + 3), fill=colours[m])
            points.append((m, keys[i], (x, y)))
    return points
