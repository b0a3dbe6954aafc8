"""The run directory of VERDICT's harness: one run at a time, the same settings on every resume, the
results file, and shard directories merged into one.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026: its table is mean ± std over seeds of several methods on
six benchmarks, a long run that is resumed after a kill and split over machines. A run directory OUT
holds:

- .lock: held (flock) by the run using OUT, released when its process ends, even by SIGKILL; a
  second run on the same OUT stops at once;
- run.json ("verdict-eval-run/3"): the settings a resumed run must share (the model and every
  setting that changes an answer) and the shard "i/k" if any; the endpoints too, which alone may
  change between runs (the same model back on another port: said once, and the earlier ones kept in
  "endpoints_before"). A run that left no finished row binds nothing. Written whole (a temporary
  file of its own, created exclusively, renamed), once the run's inputs are read; a damaged one is a
  ValueError, never a traceback;
- results.jsonl: one row (rows.Row) per (item, seed, method), appended whole as each finishes
  (append: a full disk leaves the rows before, and no partial line); a row records its item's input
  digest, and load_rows drops the rows of an item whose input changed, so that they run again;
- the tables (tables.py).

merge: shard directories of one run (same settings, same files by sha256, shards 1/k..k/k, each
finished) become one directory whose tables equal those of the same run unsharded; of each shard,
the rows of the items its last run ran (its summary's inputs). Shards may differ in their endpoints
only. The merged directory must hold no run: a finished run's rows are never replaced.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from dataclasses import replace

from verdict_lab.harness import tables
from verdict_lab.harness.rows import Row

RUN_FORMAT = (
    "verdict-eval-run/3"  # the verifier's settings are one dict, verifier.Settings.record()
)
ENDPOINTS = (
    "base_url",
    "judge_base_url",
    "extract_base_url",
)  # may differ between shards of one run

# Settings of the verifier added after runs were recorded and entries named, with the value those
# had: a run recorded before them resumes under the same settings, and an entry's settings digest
# (vlmevalkit.settings_digest) leaves them out at these values.
ADDED = {"adaptive": "off", "adaptive_threshold": None}

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None
    import msvcrt


def lock(out: str):
    """Create OUT and hold its lock (the open file; closing it releases the lock). ValueError if
    another process holds it."""
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
            f"another run is using {out} (process {holder or 'unknown'}); wait for it or use "
            "another --out"
        ) from None
    fh.seek(0)
    fh.truncate()
    fh.write(str(os.getpid()))
    fh.flush()
    return fh


def _json(path: str):
    """The JSON value of a file; ValueError naming the file if it is not UTF-8 JSON."""
    with open(path, encoding="utf-8") as fh:
        try:
            return json.load(fh)
        except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
            raise ValueError(f"{path} is damaged (not UTF-8 JSON: {e})") from None


def read_run(out: str) -> dict | None:
    """OUT/run.json, or None if OUT holds no run; ValueError if it is of another format or damaged
    (not a JSON object of this format with its settings)."""
    path = os.path.join(out, "run.json")
    if not os.path.exists(path):
        return None
    run = _json(path)
    if not isinstance(run, dict) or run.get("format") != RUN_FORMAT:
        form = run.get("format") if isinstance(run, dict) else f"a JSON {type(run).__name__}"
        raise ValueError(f"{path} is of format {form!r}, not {RUN_FORMAT!r}; use another --out")
    if not isinstance(run.get("settings"), dict):
        raise ValueError(f"{path} is damaged (its settings are missing); use another --out")
    return run


def holds_rows(out: str) -> bool:
    """Whether OUT/results.jsonl holds a finished row (one that did not end in an error): only such
    a row is kept by a resumed run, so only then do its settings bind. Read up to the first one."""
    path = os.path.join(out, "results.jsonl")
    if not os.path.exists(path):
        return False
    try:
        with open(path, "rb") as fh:
            for line in fh:
                with contextlib.suppress(ValueError):  # a line read_rows leaves out
                    if Row.from_json(json.loads(line.decode("utf-8"))).error is None:
                        return True
    except OSError:  # unreadable (a directory): load_rows says so, naming the file
        return True
    return False


def check(out: str, settings: dict) -> list:
    """The notes to say once (an endpoint that changed), or ValueError if OUT holds a run with other
    settings (or a damaged run.json): two runs never share a table. The endpoints (ENDPOINTS) may
    change where the model and every other setting are the same (a server back on another port),
    and a run whose results.jsonl holds no finished row binds nothing."""
    old = read_run(out)
    if old is None or not holds_rows(out):
        return []
    then, now = dict(old["settings"]), settings.get("verifier")
    if isinstance(then.get("verifier"), dict) and isinstance(now, dict):
        # A run recorded before a setting was added ran with its ADDED value.
        then["verifier"] = {**{k: v for k, v in ADDED.items() if k in now}, **then["verifier"]}
    diff = [k for k in settings if then.get(k) != settings[k]]
    shown = lambda k: f"{k}: {then.get(k)!r} there, {settings[k]!r} now"
    if other := [k for k in diff if k not in ENDPOINTS]:
        named = ", ".join(shown(k) if k == "shard" else k for k in other)
        raise ValueError(f"{out} holds a run with other settings ({named}); use another --out")
    if not diff:
        return []
    return [
        f"{out} was run against another endpoint ({'; '.join(shown(k) for k in diff)}); the model "
        "and settings are the same, so this run's rows join its table"
    ]


def claim(out: str, settings: dict) -> list:
    """check, then record the settings in OUT/run.json (atomically: a full disk leaves the old one),
    with the endpoints of the earlier runs whose rows are kept (endpoints_before); returns check's
    notes."""
    notes, old = check(out, settings), read_run(out)
    kept = old is not None and holds_rows(out)
    before = old.get("endpoints_before") if kept else []
    before = before if isinstance(before, list) else []
    then = {k: old["settings"][k] for k in ENDPOINTS if old["settings"].get(k)} if notes else None
    before += [then] if then and then not in before else []
    run = {"format": RUN_FORMAT, "settings": settings}
    _write_atomic(
        os.path.join(out, "run.json"),
        json.dumps(run | ({"endpoints_before": before} if before else {}), indent=1),
    )
    return notes


def _write_atomic(path: str, text: str) -> None:
    """Write a file whole or not at all: a temporary file of its own (created exclusively, so that
    nothing planted under its name is followed), then renamed over it; the temporary file is removed
    if writing it fails (OSError raised)."""
    tmp = f"{path}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with open(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:  # a full disk, or Ctrl-C mid-write: no temporary file stays behind
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def append(fh, line: str) -> None:
    """Append a line to results.jsonl, open unbuffered ("ab", buffering=0), whole or not at all: if
    writing fails (OSError: a full disk), the file is cut back to where it ended, and the error
    raised."""
    data = memoryview(line.encode("utf-8"))
    end = fh.seek(0, os.SEEK_END)
    try:
        while data:
            data = data[os.write(fh.fileno(), data) :]
    except OSError:
        fh.truncate(end)
        raise


def read_rows(path: str) -> tuple:
    """(the rows of results.jsonl in file order, the file's bytes). A truncated or unreadable line
    (a run killed mid-write, a byte that is not UTF-8), a row of an unknown format and a malformed
    one (Row.from_json) are left out. OSError if the file cannot be read (a directory)."""
    if not os.path.exists(path):
        return [], b""
    with open(path, "rb") as fh:
        raw = fh.read()
    rows = []
    for line in raw.splitlines():
        try:
            rows.append(Row.from_json(json.loads(line.decode("utf-8"))))
        except ValueError:  # json's errors and UnicodeDecodeError too
            pass
    return rows, raw


def load_rows(path: str, inputs: dict | None = None, lines: dict | None = None) -> tuple:
    """({key: row} of finished rows, how many lines were dropped, [the rows dropped as made from
    another input]), for a resumed run. Besides what read_rows leaves out, a repeated key, a row
    that ended in an error, and, with inputs ({(data, id): chains.input_digest of the item this run
    reads}), a row of one of those items whose digest differs are dropped, and the file is rewritten
    without them (atomically), so they run again. Rows of items not in inputs are kept. With lines
    ({(data, id): the item's line in the file this run reads}), a kept row takes its item's line now
    (the file's rows may have moved), and the file is rewritten with it."""
    found, raw = read_rows(path)
    rows: dict = {}
    stale, moved = [], 0
    for row in found:
        digest = (inputs or {}).get((row.data, row.id), row.input_digest)
        if row.key in rows or row.error:
            continue
        if digest != row.input_digest:
            stale.append(row)
            continue
        line = (lines or {}).get((row.data, row.id), row.row)
        moved += line != row.row
        rows[row.key] = row if line == row.row else replace(row, row=line)
    dropped = sum(bool(line.strip()) for line in raw.splitlines()) - len(rows)
    if dropped or moved or (raw and not raw.endswith(b"\n")):
        _write_atomic(
            path, "".join(json.dumps(r.to_json(), allow_nan=False) + "\n" for r in rows.values())
        )
    return rows, dropped, stale


# ----------------------------------------------------------------------------- merging shards


def _summary_shaped(s: dict) -> bool:
    """A summary has what merge reads: its context (tables.CONTEXT), files and methods as names,
    seeds as ints, and per file its reading with the items it ran (inputs: {id: digest}) and their
    counts."""
    names = lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)
    if not (all(k in s for k in tables.CONTEXT) and names(s["files"]) and names(s["methods"])):
        return False
    if not (isinstance(s["seeds"], list) and all(type(x) is int for x in s["seeds"])):
        return False
    per_file = lambda r: isinstance(r, dict) and isinstance(r.get("inputs"), dict)
    counts = lambda r: type(r.get("items")) is int and type(r.get("changed")) is int
    return isinstance(s["reading"], dict) and all(
        per_file(s["reading"].get(f)) and counts(s["reading"][f]) for f in s["files"]
    )


def read_summary(d: str) -> dict:
    """The summary.json of a finished run in `d`; ValueError if it has none (its run has not
    finished), or one of another format or shape."""
    path = os.path.join(d, "summary.json")
    if not os.path.exists(path):
        raise ValueError(f"{d} has no summary.json: its run has not finished")
    s = _json(path)
    form = s.get("format") if isinstance(s, dict) else f"a JSON {type(s).__name__}"
    if form != tables.SUMMARY_FORMAT:
        raise ValueError(
            f"{path} is of format {form!r}, not {tables.SUMMARY_FORMAT!r}; run that shard again to "
            "write it"
        )
    if not _summary_shaped(s):
        raise ValueError(
            f"{path} is damaged (a field is missing or malformed); run that shard again to write it"
        )
    return s


def _shard(d: str) -> tuple:
    """(settings, summary, rows) of a finished shard directory: the rows of the items its last run
    ran, made from the input it read (a row of an item beyond a smaller --limit of a later resume is
    left out); ValueError says why it is not one."""
    run = read_run(d)
    if run is None:
        raise ValueError(f"{d} holds no run (no run.json)")
    if not run["settings"].get("shard"):
        raise ValueError(f"{d} is not a shard (it ran without --shard)")
    summary = read_summary(d)
    inputs = {
        (f, id): digest
        for f in summary["files"]
        for id, digest in summary["reading"][f]["inputs"].items()
    }
    methods, seeds = set(summary["methods"]), set(summary["seeds"])
    rows = {}
    for r in read_rows(os.path.join(d, "results.jsonl"))[0]:  # a later row replaces an earlier
        if (
            inputs.get((r.data, r.id)) == r.input_digest
            and str(r.method) in methods
            and r.seed in seeds
        ):
            rows[r.key] = r
    missing = len(inputs) * len(methods) * len(seeds) - len(rows)
    if missing:
        raise ValueError(
            f"{d}/results.jsonl lacks {missing} row(s) of the items its summary.json ran (its "
            "input or its rows changed since); run that shard again, with the command of its last "
            "run, to finish it"
        )
    return run["settings"], summary, list(rows.values())


PER_SHARD = ("items", "inputs", "changed")  # what the reading of one file differs in between shards


def merge(dirs: list, out: str, max_error_rate: float) -> tuple:
    """(summary, rows) of the shards in `dirs` merged into `out` (written there). ValueError if
    `out` holds a run already (its rows are never replaced), or if they are not the shards 1/k..k/k
    of one run: other settings, other files or other contents of them (sha256), read otherwise,
    missing or repeated shards."""
    if read_run(out) is not None:
        raise ValueError(f"{out} holds a run already (run.json); merge into a new --out")
    shards = [_shard(d) for d in dirs]
    ref, ref_summary, _ = shards[0]
    k = ref["shard"].split("/")[1]
    for d, (settings, summary, _) in zip(dirs, shards):
        _check_same_run(d, (settings, summary), dirs[0], (ref, ref_summary), k)
    have = sorted(int(s["shard"].split("/")[0]) for s, _, _ in shards)
    if have != list(range(1, int(k) + 1)):
        raise ValueError(
            f"the shards given are {', '.join(f'{i}/{k}' for i in have)}; "
            f"merge needs each of 1/{k} to {k}/{k} once"
        )
    rows = [r for _, _, rs in shards for r in rs]
    urls = {key: sorted({s.get(key) for s, _, _ in shards if s.get(key)}) for key in ENDPOINTS}
    settings = {
        **ref,
        **{key: v[0] if len(v) == 1 else v for key, v in urls.items() if v},
        "shard": None,
    }
    ctx = {
        **{key: ref_summary[key] for key in tables.CONTEXT},
        "settings": settings,
        "reading": _merged_reading(shards, ref_summary),
        "max_error_rate": max_error_rate,
    }
    text = "".join(json.dumps(r.to_json(), allow_nan=False) + "\n" for r in rows)
    _write_atomic(os.path.join(out, "results.jsonl"), text)
    claim(
        out, settings
    )  # last: a merge that failed before leaves no run in `out`, and may be run again
    return tables.summarize(rows, ctx), rows


def _check_same_run(d: str, shard: tuple, first: str, ref: tuple, k: str) -> None:
    """ValueError unless the shard in d, (settings, summary), is of the run of ref, the one in
    first."""
    (settings, summary), (ref_settings, ref_summary) = shard, ref
    same = lambda s: {key: v for key, v in s.items() if key not in ENDPOINTS + ("shard",)}
    diff = sorted(
        key
        for key in same(ref_settings).keys() | same(settings).keys()
        if same(ref_settings).get(key) != same(settings).get(key)
    )
    if diff or settings["shard"].split("/")[1] != k:
        raise ValueError(
            f"{d} was run with other settings than {first} ({', '.join(diff) or 'shard count'}); "
            "only shards of one run merge"
        )
    for key in ("files", "methods", "seeds"):
        if summary[key] != ref_summary[key]:
            raise ValueError(
                f"{d} ran other {key} than {first}: {summary[key]} against {ref_summary[key]}"
            )
    for f in summary["files"]:
        a, b = (
            {x: v for x, v in r["reading"][f].items() if x not in PER_SHARD}
            for r in (summary, ref_summary)
        )
        if a.get("sha256") != b.get("sha256"):
            raise ValueError(
                f"{d} read another content of {f} than {first} (sha256 {a.get('sha256')} against "
                f"{b.get('sha256')}): shards made from different inputs do not merge; "
                "run them again on one"
            )
        if a != b:
            raise ValueError(
                f"{d} read {f} otherwise than {first} (rows read, items, skipped); "
                "were the shards given the same file and --limit? Run them again with the same"
            )


def _merged_reading(shards: list, ref_summary: dict) -> dict:
    """Per file, the first shard's reading with the items, inputs and changed counts of all
    shards."""
    return {
        f: {
            **ref_summary["reading"][f],
            "items": sum(s["reading"][f]["items"] for _, s, _ in shards),
            "inputs": {id: v for _, s, _ in shards for id, v in s["reading"][f]["inputs"].items()},
            "changed": sum(s["reading"][f]["changed"] for _, s, _ in shards),
        }
        for f in ref_summary["files"]
    }
