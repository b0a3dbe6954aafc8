"""Mutation testing with mutmut 3: run it in a scratch copy of this checkout, then compare the
mutants that survived with the equivalent ones listed in docs/mutants.md.

    python .ci/mutation.py                # verdict.py against test_verdict.py
                                          # ([tool.mutmut], pyproject.toml)
    python .ci/mutation.py parsing        # reading replies (judges.py, formats.py),
                                          # harness/answers.py
    python .ci/mutation.py items          # .ci/mutmut-items.toml: the reading of benchmark files
                                          # into items
    python .ci/mutation.py tables         # .ci/mutmut-tables.toml: the numbers a summary shows
    python .ci/mutation.py --requirement mutmut  # a requirement (mutmut, ruff) of pyproject's
                                                 # test extras

A mutant is named by its function and its mutated code (comments and runs of spaces dropped), which
do not change when mutmut renumbers its mutants. Exit status 1 when a survivor is not listed, a
listed mutant of a function that was mutated no longer survives, or fewer than MIN_KILLED percent
are killed (a config's [run] min_killed when it sets one).
"""

import fnmatch
import io
import json
import re
import shutil
import subprocess
import sys
import tempfile
import tokenize
from collections import Counter
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10: mutmut depends on toml there
    import toml as tomllib

ROOT = Path(__file__).resolve().parent.parent
LISTED = ROOT / "docs" / "mutants.md"
KILLED = {"killed", "timeout", "segfault", "caught by type check"}  # the tests noticed the change
MIN_KILLED = 98.0
# An entry of docs/mutants.md reads: - `module.function`: ``mutated code`` — reason
ENTRY = re.compile(r"^- `([^`]+)`: ``(.+?)`` — \S")


def mutmut(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mutmut", *args], cwd=cwd, capture_output=True, text=True
    )


def function_of(mutant: str) -> str:
    """'verdict.xǁConfigǁ__post_init____mutmut_7' -> 'verdict.Config.__post_init__';
    'verdict_lab.harness.answers.x_score__mutmut_3' -> 'verdict_lab.harness.answers.score'."""
    module, _, name = mutant.rpartition("__mutmut_")[0].rpartition(".")
    return module + "." + (".".join(name.split("ǁ")[1:]) if name.startswith("xǁ") else name[2:])


def code_of(diff: str) -> str:
    """The added lines of a unified diff, without comments, spaces collapsed, joined by ' ⏎ '."""
    out = []
    for line in (
        d[1:].strip() for d in diff.splitlines() if d.startswith("+") and not d.startswith("+++")
    ):
        try:
            comments = [
                t
                for t in tokenize.generate_tokens(io.StringIO(line).readline)
                if t.type == tokenize.COMMENT
            ]
        except (tokenize.TokenError, SyntaxError):  # a line of a longer statement: keep it whole
            comments = []
        out.append(" ".join(line[: comments[0].start[1] if comments else None].split()))
    return " ⏎ ".join(out)


def scratch_copy(which: str) -> tuple:
    """(a scratch copy of the checkout configured for `which`, the mutant-name globs to run, the
    least percentage killed that passes)."""
    work = Path(tempfile.mkdtemp(prefix=f"mutmut-{which}-"))
    shutil.copytree(
        ROOT,
        work,
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns(
            ".git", "mutants", "__pycache__", ".pytest_cache", "runs", ".cache", "*.sqlite"
        ),
    )
    if which == "verdict":
        return work, [], MIN_KILLED
    # A config that does not exist raises FileNotFoundError.
    extra = tomllib.loads((ROOT / ".ci" / f"mutmut-{which}.toml").read_text())
    table = "[tool.mutmut]\n" + "".join(
        f"{k} = {json.dumps(v)}\n" for k, v in extra["tool"]["mutmut"].items()
    )
    pyproject = work / "pyproject.toml"
    pyproject.write_text(
        re.sub(
            r"(?ms)^\[tool\.mutmut\]$.*?(?=^\[|\Z)", lambda _: table + "\n", pyproject.read_text()
        )
    )
    return work, extra["run"]["mutants"], extra["run"].get("min_killed", MIN_KILLED)


def main(argv: list) -> int:
    if argv[:1] == ["--requirement"]:  # --requirement NAME: NAME's pinned line in the test extras
        tests = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
            "optional-dependencies"
        ]["test"]
        print(next(r for r in tests if r.startswith(argv[1] if len(argv) > 1 else "mutmut")))
        return 0
    which = argv[0] if argv else "verdict"
    work, globs, min_killed = scratch_copy(which)
    run = mutmut(work, "run", *globs)
    (work / "mutmut-run.log").write_text(run.stdout + run.stderr)
    print(
        run.stdout.replace("\r", "\n").strip().splitlines()[-1]
        if run.stdout.strip()
        else "(mutmut printed nothing)"
    )
    if run.returncode:
        print(
            run.stderr[-3000:],
            f"\nmutation: mutmut run failed (exit {run.returncode}); log in {work}",
        )
        return 1
    status = dict(
        re.findall(r"^\s+(\S+): (.+)$", mutmut(work, "results", "--all", "true").stdout, re.M)
    )
    status = {
        k: v for k, v in status.items() if not globs or any(fnmatch.fnmatch(k, g) for g in globs)
    }
    survivors = {
        k: (function_of(k), code_of(mutmut(work, "show", k).stdout))
        for k, v in status.items()
        if v not in KILLED
    }
    listed = {m.groups() for m in map(ENTRY.match, LISTED.read_text().splitlines()) if m}
    mutated = {function_of(k) for k in status}
    unlisted = [k for k, key in survivors.items() if key not in listed]
    stale = sorted(key for key in listed if key[0] in mutated and key not in survivors.values())
    for k in unlisted:
        print(
            f"NOT LISTED ({status[k]}): {k}\n{mutmut(work, 'show', k).stdout}"
            f"  kill it, or if it is equivalent add to {LISTED.relative_to(ROOT)}:\n"
            f"- `{survivors[k][0]}`: ``{survivors[k][1]}`` — <why it changes no behaviour>\n"
        )
    for f, code in stale:
        print(
            f"LISTED BUT KILLED OR GONE: `{f}`: ``{code}`` "
            f"(remove it from {LISTED.relative_to(ROOT)})"
        )
    killed = 100.0 * (len(status) - len(survivors)) / max(len(status), 1)
    counts = ", ".join(f"{n} {s}" for s, n in sorted(Counter(status.values()).items()))
    print(
        f"mutation ({which}): {len(status)} mutants ({counts}): "
        f"{len(status) - len(survivors)} killed ({killed:.1f}%), "
        f"{len(survivors) - len(unlisted)} listed as equivalent, "
        f"{len(unlisted)} not listed, {len(stale)} stale"
    )
    ok = status and not unlisted and not stale and killed >= min_killed
    if ok:
        shutil.rmtree(work)
    else:
        low = f"below {min_killed}% killed; " if killed < min_killed else ""
        print(f"mutation: FAILED ({low}kept {work})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
