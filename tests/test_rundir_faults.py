"""Tests for a run directory under faults: rows tied to their input (a changed item runs again, the
summary says how many, merge refuses shards of different inputs), merge never replacing a finished
run, judges that never score, a full disk, a first run that fails before it starts, damaged run
directories, Ctrl-C and a shard resumed with a smaller --limit. Each error a user can cause is one
line on stderr and a non-zero exit."""

import errno
import json
import os
import signal
import subprocess
import sys
import threading

import pytest

from verdict_lab import evaluate
from verdict_lab.loopback import chat_response, user_text
from verdict_lab.layouts import role_of
from verdict_lab.harness.rundir import RUN_FORMAT
from verdict_lab.harness.chains import STOP_GRACE
from test_demo import script_env, start_script
from test_evaluate import rows_of, run, script, write_jsonl

BASE = ["--seeds", "1", "--rules", "base,verdict", "--max-steps", "3", "--judge-format", "text"]


def summary_of(out) -> dict:
    return json.loads((out / "summary.json").read_text())


def rewrite(path, n=4, **changes):
    """The JSONL file of write_jsonl with some items changed: {index: {field: value}}."""
    write_jsonl(path, n=n)
    items = [json.loads(line) for line in path.read_text().splitlines()]
    for i, change in changes.items():
        items[int(i[1:])].update(change)
    path.write_text("".join(json.dumps(it) + "\n" for it in items))


def one_line_error(p, exit=2) -> str:
    assert p.returncode == exit and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, (
        p.stderr
    )
    return p.stderr


# ------------------------------------------------------------------------- rows tied to their input


def test_changed_items_run_again_and_the_summary_says_how_many(tmp_path, loopback, capsys):
    srv, data, out = loopback(script), tmp_path / "q.jsonl", tmp_path / "out"
    write_jsonl(data, n=4)
    args = ["--data", str(data), "--base-url", srv.url, "--out", str(out), *BASE]
    assert evaluate.main(args) == 0
    first = {r["id"]: r for r in rows_of(out)}
    assert all(len(r["input_digest"]) == 32 for r in first.values())
    rewrite(
        data, q1={"answer": "A"}, q2={"question": "Which is larger, 7 or 8?"}
    )  # a key fixed, a question
    capsys.readouterr()
    assert evaluate.main(args) == 0
    assert "2 item(s) changed since their rows were written; their 4 row(s) will run again" in (
        capsys.readouterr().err
    )
    rows = rows_of(out)
    assert (
        len(rows) == len({(r["id"], r["method"]) for r in rows}) == 8
    )  # one row per key, none stale
    assert {r["answer"] for r in rows if r["id"] == "q1"} == {"A"}
    assert any("7 or 8" in user_text(c) for c in srv.chats)
    assert {r["input_digest"] for r in rows if r["id"] in ("q1", "q2")}.isdisjoint(
        {first["q1"]["input_digest"], first["q2"]["input_digest"]}
    )
    s = summary_of(out)
    assert s["reading"]["q"]["changed"] == 2 and set(s["reading"]["q"]["inputs"]) == {
        "q0",
        "q1",
        "q2",
        "q3",
    }
    assert "| 4 (2 changed) |" in (out / "summary.md").read_text()
    n = len(srv.chats)
    assert evaluate.main(args) == 0 and len(srv.chats) == n  # nothing changed: nothing runs
    assert summary_of(out)["reading"]["q"]["changed"] == 0


def test_rows_of_unknown_input_or_another_format_run_again(tmp_path, loopback, capsys):
    srv, data, out = loopback(script), write_jsonl(tmp_path / "q.jsonl", n=2), tmp_path / "out"
    args = ["--data", data, "--base-url", srv.url, "--out", str(out), *BASE]
    assert evaluate.main(args) == 0
    first, second = rows_of(out)[:2], rows_of(out)[2:]
    unknown = [{**r, "input_digest": None} for r in first]  # null: rows whose input is unknown
    other = [{**r, "format": "verdict-eval-row/2"} for r in second]  # unreadable
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in unknown + other))
    capsys.readouterr()
    assert evaluate.main(args) == 0
    err = capsys.readouterr().err
    assert "2 unfinished or failed row(s) will run again" in err  # the unreadable ones
    assert (
        "item(s) changed since their rows were written" in err
        and "; their 2 row(s) will run again" in err
    )
    assert [r["format"] for r in rows_of(out)] == ["verdict-eval-row/3"] * 4
    assert all(r["input_digest"] for r in rows_of(out))


def test_merge_refuses_shards_made_from_different_inputs(tmp_path, loopback):
    srv, data = loopback(script), tmp_path / "q.jsonl"
    common = ["--data", str(data), "--base-url", srv.url, *BASE]
    write_jsonl(data, n=6)
    assert evaluate.main(common + ["--out", str(tmp_path / "s1"), "--shard", "1/2"]) == 0
    rewrite(data, n=6, q5={"answer": "A"})
    assert evaluate.main(common + ["--out", str(tmp_path / "s2"), "--shard", "2/2"]) == 0
    p = run(["merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "m")])
    assert "read another content of q" in one_line_error(p) and "different inputs" in p.stderr
    assert not (tmp_path / "m" / "run.json").exists()


# ----------------------------------------------------------------------------- merge


def test_merge_never_replaces_a_finished_run(tmp_path, loopback):
    srv, data = loopback(script), write_jsonl(tmp_path / "q.jsonl", n=4)
    common = ["--data", data, "--base-url", srv.url, *BASE]
    for out, shard in (("s1", ["--shard", "1/2"]), ("s2", ["--shard", "2/2"]), ("whole", [])):
        assert evaluate.main(common + ["--out", str(tmp_path / out), *shard]) == 0
    before = (tmp_path / "whole" / "results.jsonl").read_text()
    for target in ("whole", "s1"):
        p = run(
            ["merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / target)]
        )
        assert "holds a run already" in one_line_error(p)
    assert (tmp_path / "whole" / "results.jsonl").read_text() == before
    assert (
        run(
            ["merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "m")]
        ).returncode
        == 0
    )


def test_a_shard_resumed_with_a_smaller_limit_merges(tmp_path, loopback):
    srv, data = loopback(script), write_jsonl(tmp_path / "q.jsonl", n=8)
    common = ["--data", data, "--base-url", srv.url, *BASE]
    shard = lambda i, limit: evaluate.main(
        common + ["--out", str(tmp_path / f"s{i}"), "--shard", f"{i}/2", "--limit", str(limit)]
    )
    merge = lambda: run(
        ["merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "m")]
    )
    assert shard(1, 6) == 0 and shard(2, 6) == 0 and shard(1, 3) == 0
    assert "the same file and --limit? Run them again with the same" in one_line_error(merge())
    assert shard(2, 3) == 0
    p = merge()
    assert p.returncode == 0, p.stderr
    assert evaluate.main(common + ["--out", str(tmp_path / "all"), "--limit", "3"]) == 0
    got, want = summary_of(tmp_path / "m"), summary_of(tmp_path / "all")
    assert (
        got["accuracy"] == want["accuracy"]
        and got["reading"]["q"]["inputs"] == want["reading"]["q"]["inputs"]
    )
    assert len(rows_of(tmp_path / "m")) == 3 * 2


# -------------------------------------------------------------------------- judges that never score


def test_judges_that_never_score_exit_3_with_one_line(tmp_path, loopback, capsys):
    def abstaining(body, path):
        if role_of(body["messages"]) != "reasoner":
            return 200, chat_response(["I would rather not say."])
        return script(body, path)

    srv, out = loopback(abstaining), tmp_path / "out"
    args = [
        "--data",
        write_jsonl(tmp_path / "q.jsonl", n=2),
        "--base-url",
        srv.url,
        "--out",
        str(out),
        *BASE,
    ]
    assert evaluate.main(args) == 3
    err = [line for line in capsys.readouterr().err.splitlines() if "judges" in line]
    assert err == [
        "verdict_lab.evaluate: the judges never gave a score in verdict "
        "(every judge call abstained); check the judge model and --judge-format: "
        "their rows equal the reasoner's alone"
    ]
    assert summary_of(out)["silent_judges"] == ["verdict"]
    assert "**the judges never gave a score in verdict" in (out / "summary.md").read_text()


# ----------------------------------------------------------------------------- a full disk


def test_a_full_disk_is_one_line_exit_2_and_leaves_whole_rows(
    tmp_path, loopback, monkeypatch, capsys
):
    srv, out = loopback(script), tmp_path / "out"
    args = [
        "--data",
        write_jsonl(tmp_path / "q.jsonl", n=4),
        "--base-url",
        srv.url,
        "--out",
        str(out),
        *BASE,
    ]
    args += ["--concurrency", "1"]
    real, results, writes = os.write, out / "results.jsonl", []

    def full_disk(fd, data):  # the third row: half of it is written, then the disk is full
        if not (results.exists() and os.path.samestat(os.fstat(fd), os.stat(results))):
            return real(fd, data)
        writes.append(len(data))
        if len(writes) < 3:
            return real(fd, data)
        if len(writes) == 3:
            return real(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full_disk)
    capsys.readouterr()
    assert evaluate.main(args) == 2
    err = capsys.readouterr().err.splitlines()
    assert [line for line in err if "verdict_lab.evaluate" in line] == [
        f"verdict_lab.evaluate: error: cannot write {results}: No space left on device; "
        "the rows before are kept"
    ]
    assert results.read_text().endswith("\n") and len(rows_of(out)) == 2  # whole rows only
    monkeypatch.setattr(os, "write", real)
    assert evaluate.main(args) == 0 and len(rows_of(out)) == 4 * 2


def test_tables_on_a_full_disk_are_one_line_and_the_rows_kept(
    tmp_path, loopback, monkeypatch, capsys
):
    srv, out = loopback(script), tmp_path / "out"
    args = [
        "--data",
        write_jsonl(tmp_path / "q.jsonl", n=2),
        "--base-url",
        srv.url,
        "--out",
        str(out),
        *BASE,
    ]

    def full(*a, **kw):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(evaluate.tables, "write", full)
    capsys.readouterr()
    assert evaluate.main(args) == 2
    assert "cannot write the tables in" in capsys.readouterr().err and len(rows_of(out)) == 4


# -------------------------------------------------------------------------- a run that cannot start


def test_a_run_that_fails_on_its_data_pins_no_settings(tmp_path, loopback):
    srv, data, out = loopback(script), write_jsonl(tmp_path / "q.jsonl", n=2), tmp_path / "out"
    typo = [
        "--data",
        data.replace("q.jsonl", "qq.jsonl"),
        "--base-url",
        srv.url,
        "--out",
        str(out),
        *BASE,
    ]
    assert "no such file" in one_line_error(run(typo))
    assert not (out / "run.json").exists()
    assert (
        evaluate.main(["--data", data, "--base-url", srv.url, "--out", str(out), *BASE, "--n", "2"])
        == 0
    )


# -------------------------------------------------------------------------- damaged run directories


def _damage_run_list(d):
    (d / "run.json").write_text("[]")


def _damage_no_settings(d):
    (d / "run.json").write_text(json.dumps({"format": RUN_FORMAT}))


def _damage_run_not_json(d):
    (d / "run.json").write_bytes(b'{"format": "verdict\xff')


def _damage_results_dir(d):
    os.remove(d / "results.jsonl")
    os.mkdir(d / "results.jsonl")


@pytest.mark.parametrize(
    "damage, said",
    [
        (_damage_run_list, "is of format 'a JSON list', not 'verdict-eval-run/3'"),
        (_damage_no_settings, "is damaged (its settings are missing)"),
        (_damage_run_not_json, "is damaged (not UTF-8 JSON"),
        (_damage_results_dir, "Is a directory"),
    ],
)
def test_a_damaged_run_directory_is_one_line(tmp_path, loopback, damage, said):
    srv, out = loopback(script), tmp_path / "out"
    args = [
        "--data",
        write_jsonl(tmp_path / "q.jsonl", n=2),
        "--base-url",
        srv.url,
        "--out",
        str(out),
        *BASE,
    ]
    assert evaluate.main(args) == 0
    damage(out)
    assert said in one_line_error(run(args))


def test_rows_not_utf8_or_malformed_run_again(tmp_path, loopback):
    srv, out = loopback(script), tmp_path / "out"
    args = [
        "--data",
        write_jsonl(tmp_path / "q.jsonl", n=2),
        "--base-url",
        srv.url,
        "--out",
        str(out),
        *BASE,
    ]
    assert evaluate.main(args) == 0
    lines = (out / "results.jsonl").read_bytes().splitlines(keepends=True)
    lines[0] = lines[0].replace(b'"q"', b'"\xff"')
    lines[1] = json.dumps({**json.loads(lines[1]), "correct": "yes"}).encode() + b"\n"
    (out / "results.jsonl").write_bytes(b"".join(lines))
    p = run(args)
    assert p.returncode == 0 and "Traceback" not in p.stderr
    assert "2 unfinished or failed row(s) will run again" in p.stderr and len(rows_of(out)) == 4


@pytest.mark.parametrize(
    "damage, said",
    [
        (lambda d: (d / "summary.json").write_text("{}"), "summary.json is of format None"),
        (lambda d: (d / "summary.json").write_text("[1]"), "is of format 'a JSON list'"),
        (
            lambda d: (d / "summary.json").write_text(
                json.dumps({**json.loads((d / "summary.json").read_text()), "files": [{}]})
            ),
            "summary.json is damaged (a field is missing or malformed)",
        ),
        (
            lambda d: (d / "results.jsonl").write_text(
                "".join(json.dumps({**r, "correct": "yes"}) + "\n" for r in rows_of(d))
            ),
            "results.jsonl lacks 2 row(s) of the items its summary.json ran",
        ),
    ],
)
def test_a_damaged_shard_is_one_line(tmp_path, loopback, damage, said):
    srv, data = loopback(script), write_jsonl(tmp_path / "q.jsonl", n=2)
    common = ["--data", data, "--base-url", srv.url, *BASE, "--rules", "base"]
    for i in (1, 2):
        assert evaluate.main(common + ["--out", str(tmp_path / f"s{i}"), "--shard", f"{i}/2"]) == 0
    shard = next(tmp_path / f"s{i}" for i in (1, 2) if rows_of(tmp_path / f"s{i}"))
    damage(shard)
    p = run(["merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "m")])
    assert said in one_line_error(p)


# ----------------------------------------------------------------------------- Ctrl-C


def held_third_item(gate: threading.Event, reached: threading.Event):
    """The script, but every request of the third item ("2 or 3") waits for `gate`: a chain in
    flight that does not end by itself."""

    def handler(body, path):
        if "2 or 3" in user_text(body) and not gate.is_set():
            reached.set()
            gate.wait(600)
        return script(body, path)

    return handler


def interrupt(proc, times: int) -> str:
    """Send SIGINT, read stderr up to the line saying the run is stopping, then send SIGINT
    `times` - 1 more times; all of stderr."""
    proc.send_signal(signal.SIGINT)
    lines = []
    while not lines or "stopping" not in lines[-1]:
        line = proc.stderr.readline()
        assert line, f"stderr ended before the run said it was stopping: {lines}"
        lines.append(line)
    for _ in range(times - 1):
        proc.send_signal(signal.SIGINT)
    return "".join(lines) + proc.communicate(timeout=120)[1]


def test_ctrl_c_says_at_once_what_is_kept_and_does_not_wait_for_a_chain_in_flight(
    tmp_path, loopback
):
    # The third item's request never ends (until the test does): the run stops without it.
    gate, reached = threading.Event(), threading.Event()
    srv, out = loopback(held_third_item(gate, reached)), tmp_path / "out"
    args = ["--data", write_jsonl(tmp_path / "q.jsonl", n=4), "--base-url", srv.url]
    args += ["--out", str(out), *BASE, "--timeout", "900", "--concurrency", "1"]
    proc = start_script("verdict_lab.evaluate", args)
    try:
        assert reached.wait(120), "the run never reached the third item"
        err = interrupt(proc, 1)
    finally:
        proc.kill() if proc.poll() is None else None
        gate.set()
    said = [line for line in err.splitlines() if "items" not in line]
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert said[0] == (
        f"verdict_lab.evaluate: stopping (Ctrl-C): the 4 finished rows in {out / 'results.jsonl'} "
        f"are kept; waiting at most {STOP_GRACE:g} s for the 1 chain in flight (Ctrl-C again stops "
        "at once)"
    )
    assert said[1:] == [
        "verdict_lab.evaluate: interrupted; the rows finished are kept: the same command resumes"
    ]
    kept = rows_of(out)
    assert {(r["id"], r["method"]) for r in kept} == {
        (q, m) for q in ("q0", "q1") for m in ("base", "verdict")
    }
    assert evaluate.main(args) == 0 and rows_of(out)[: len(kept)] == kept  # resumed


def test_a_second_ctrl_c_stops_at_once(tmp_path, loopback):
    # The grace for chains in flight made long: only the second Ctrl-C can end the run.
    gate, reached = threading.Event(), threading.Event()
    srv, out = loopback(held_third_item(gate, reached)), tmp_path / "out"
    args = ["--data", write_jsonl(tmp_path / "q.jsonl", n=4), "--base-url", srv.url]
    args += ["--out", str(out), *BASE, "--timeout", "900", "--concurrency", "1"]
    code = (
        "import sys; from verdict_lab.harness import chains; chains.STOP_GRACE = 900.0; "
        "import runpy; sys.argv[0] = 'evaluate'; "
        "runpy.run_module('verdict_lab.evaluate', run_name='__main__')"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env=script_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert reached.wait(120), "the run never reached the third item"
        err = interrupt(proc, 2)
    finally:
        proc.kill() if proc.poll() is None else None
        gate.set()
    said = [line for line in err.splitlines() if "items" not in line]
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert "waiting at most 900 s for the 1 chain in flight" in said[0]
    assert said[1:] == [
        "verdict_lab.evaluate: stopped at once (a second Ctrl-C): the 1 chain in flight is dropped",
        "verdict_lab.evaluate: interrupted; the rows finished are kept: the same command resumes",
    ]
    assert len(rows_of(out)) == 4
