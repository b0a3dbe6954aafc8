"""The run directory of VERDICT's harness: one run at a time, the same settings on every resume, the
results file, and shard directories merged into one.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026: its table is mean ± std over seeds of several methods on six
benchmarks, a long run that is resumed after a kill and split over machines. A run directory OUT holds:

- .lock: held (flock) by the run using OUT, released when its process ends, even by SIGKILL; a second run
  on the same OUT stops at once;
- run.json ("verdict-eval-run/2"): the settings a resumed run must share, the endpoints included (answers
  from another server are never mixed into a table), and the shard "i/k" if any;
- results.jsonl: one row (rows.Row) per (item, seed, method), appended as each finishes (evaluate.py);
- the tables (tables.py).

merge: shard directories of one run (same settings, shards 1/k..k/k, each finished) become one directory
whose tables equal those of the same run unsharded. Shards may differ in their endpoints only.
"""

from __future__ import annotations

import json
import os

from harness import tables
from harness.rows import ROW_FORMAT, Row  # noqa: F401 (rundir.ROW_FORMAT beside RUN_FORMAT, as before)

RUN_FORMAT = "verdict-eval-run/2"
ENDPOINTS = ("base_url", "judge_base_url", "extract_base_url")  # may differ between shards of one run

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None
    import msvcrt


def lock(out: str):
    """Create OUT and hold its lock (the open file; closing it releases the lock). ValueError if another
    process holds it."""
    os.makedirs(out, exist_ok=True)
    fh = open(os.path.join(out, ".lock"), "a+")
    try:
        if fcntl is not None:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        else:
            msvcrt.locking(fh.fileno(), msvcrt.LK_NBLCK, 1)
    except OSError:
        fh.seek(0)
        holder = fh.read().strip()
        fh.close()
        raise ValueError(
            f"another run is using {out} (process {holder or 'unknown'}); wait for it or use another --out"
        ) from None
    fh.seek(0)
    fh.truncate()
    fh.write(str(os.getpid()))
    fh.flush()
    return fh


def read_run(out: str) -> dict | None:
    """OUT/run.json, or None if OUT holds no run; ValueError if it is of another format."""
    path = os.path.join(out, "run.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as fh:
        run = json.load(fh)
    if run.get("format") != RUN_FORMAT:
        raise ValueError(f"{path} is of format {run.get('format')!r}, not {RUN_FORMAT!r}; use another --out")
    return run


def claim(out: str, settings: dict) -> None:
    """Check that the run OUT holds has these settings (or that it holds none), then record them: two
    runs never share a table."""
    old = read_run(out)
    diff = [k for k in settings if old is not None and old["settings"].get(k) != settings[k]]
    if diff:
        shown = ", ".join(
            f"{k}: {old['settings'].get(k)!r} there, {settings[k]!r} now"
            if k in ENDPOINTS + ("shard",)
            else k
            for k in diff
        )
        raise ValueError(f"{out} holds a run with other settings ({shown}); use another --out")
    with open(os.path.join(out, "run.json"), "w", encoding="utf-8") as fh:
        json.dump({"format": RUN_FORMAT, "settings": settings}, fh, indent=1)


def read_rows(path: str) -> tuple:
    """(the rows of results.jsonl in file order, the file's text). A truncated or unreadable line (a run
    killed mid-write), a row of another format and a malformed one (Row.from_json) are left out."""
    if not os.path.exists(path):
        return [], ""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    rows = []
    for line in text.splitlines():
        try:
            rows.append(Row.from_json(json.loads(line)))
        except ValueError:  # json's errors too
            pass
    return rows, text


def load_rows(path: str) -> tuple:
    """({key: row} of finished rows, how many lines were dropped), for a resumed run. Besides what
    read_rows leaves out, a repeated key and a row that ended in an error are dropped, and the file is
    rewritten without them (atomically), so they run again."""
    found, text = read_rows(path)
    rows: dict = {}
    for row in found:
        if row.key not in rows and not row.error:
            rows[row.key] = row
    dropped = sum(bool(line.strip()) for line in text.splitlines()) - len(rows)
    if dropped or (text and not text.endswith("\n")):
        with open(path + ".tmp", "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(r.to_json(), allow_nan=False) + "\n" for r in rows.values())
        os.replace(path + ".tmp", path)
    return rows, dropped


# ----------------------------------------------------------------------------- merging shards


def _shard(d: str) -> tuple:
    """(settings, summary, rows) of a finished shard directory; ValueError says why it is not one."""
    run = read_run(d)
    if run is None:
        raise ValueError(f"{d} holds no run (no run.json)")
    if not run["settings"].get("shard"):
        raise ValueError(f"{d} is not a shard (it ran without --shard)")
    if not os.path.exists(os.path.join(d, "summary.json")):
        raise ValueError(f"{d} has no summary.json: its run has not finished")
    with open(os.path.join(d, "summary.json"), encoding="utf-8") as fh:
        summary = json.load(fh)
    found = read_rows(os.path.join(d, "results.jsonl"))[0]
    rows = {r.key: r for r in found}  # a later row replaces an earlier
    plan = set(summary["files"]), set(summary["methods"]), set(summary["seeds"])
    rows = [r for r in rows.values() if r.data in plan[0] and str(r.method) in plan[1] and r.seed in plan[2]]
    for f in summary["files"]:
        n = len({r.id for r in rows if r.data == f})
        if n != summary["reading"][f]["items"]:
            raise ValueError(
                f"{d}/results.jsonl holds finished rows of {n} items of {f}, its summary ran "
                f"{summary['reading'][f]['items']}; run that shard again to finish it"
            )
    return run["settings"], summary, rows


def merge(dirs: list, out: str, max_error_rate: float) -> tuple:
    """(summary, rows) of the shards in `dirs` merged into `out` (written there). ValueError if they are not
    the shards 1/k..k/k of one run: other settings, other files read otherwise, missing or repeated shards."""
    shards = [_shard(d) for d in dirs]
    ref, ref_summary, _ = shards[0]
    same = lambda s: {k: v for k, v in s.items() if k not in ENDPOINTS + ("shard",)}
    k = ref["shard"].split("/")[1]
    for d, (settings, summary, _) in zip(dirs, shards):
        diff = sorted(
            key
            for key in same(ref).keys() | same(settings).keys()
            if same(ref).get(key) != same(settings).get(key)
        )
        if diff or settings["shard"].split("/")[1] != k:
            raise ValueError(
                f"{d} was run with other settings than {dirs[0]} ({', '.join(diff) or 'shard count'}); "
                "only shards of one run merge"
            )
        for key in ("files", "methods", "seeds"):
            if summary[key] != ref_summary[key]:
                raise ValueError(
                    f"{d} ran other {key} than {dirs[0]}: {summary[key]} against {ref_summary[key]}"
                )
        for f in summary["files"]:
            a, b = (
                {x: v for x, v in r["reading"][f].items() if x != "items"} for r in (summary, ref_summary)
            )
            if a != b:
                raise ValueError(
                    f"{d} read {f} otherwise than {dirs[0]} (rows read, items, skipped); "
                    "were the shards given the same file and --limit?"
                )
    have = sorted(int(s["shard"].split("/")[0]) for s, _, _ in shards)
    if have != list(range(1, int(k) + 1)):
        raise ValueError(
            f"the shards given are {', '.join(f'{i}/{k}' for i in have)}; "
            f"merge needs each of 1/{k} to {k}/{k} once"
        )
    rows = [r for _, _, rs in shards for r in rs]
    reading = {
        f: {**ref_summary["reading"][f], "items": sum(s["reading"][f]["items"] for _, s, _ in shards)}
        for f in ref_summary["files"]
    }
    urls = {key: sorted({s.get(key) for s, _, _ in shards if s.get(key)}) for key in ENDPOINTS}
    settings = {**ref, **{key: v[0] if len(v) == 1 else v for key, v in urls.items() if v}, "shard": None}
    ctx = {
        **{key: ref_summary[key] for key in tables.CONTEXT},
        "settings": settings,
        "reading": reading,
        "max_error_rate": max_error_rate,
    }
    claim(out, settings)
    with open(os.path.join(out, "results.jsonl"), "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r.to_json(), allow_nan=False) + "\n" for r in rows)
    return tables.summarize(rows, ctx), rows
