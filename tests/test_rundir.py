"""Tests for verdict_lab/harness/rundir.py: the lock, the settings check, the results file, and
shards: two shards run against two servers and merged give the same tables as one unsharded run;
shards of other runs are refused."""

import json
import os

import pytest

from verdict_lab import evaluate
from verdict_lab.harness import rundir
from test_evaluate import argv, rows_of, run, script, write_jsonl
from test_tables import fake_row, three_dsr_rows


def test_lock_is_held_until_released(tmp_path):
    held = rundir.lock(str(tmp_path / "o"))
    with pytest.raises(
        ValueError, match=f"another run is using {tmp_path / 'o'} \\(process {os.getpid()}\\)"
    ):
        rundir.lock(str(tmp_path / "o"))
    held.close()
    rundir.lock(str(tmp_path / "o")).close()  # free again


def finished_row(out) -> None:
    """One finished row in OUT/results.jsonl: a run that wrote a row pins its settings."""
    row = fake_row("d", 0, "base", True, id="q0")
    (out / "results.jsonl").write_text(json.dumps(row.to_json()) + "\n")


def test_claim_names_what_differs(tmp_path):
    settings = {"model": "m", "base_url": "http://a/v1", "verifier": {"n": 3}, "shard": None}
    rundir.claim(str(tmp_path), settings)
    finished_row(tmp_path)
    rundir.claim(str(tmp_path), settings)  # the same settings: a resume
    with pytest.raises(ValueError, match=r"other settings \(verifier\); use another --out"):
        rundir.claim(str(tmp_path), {**settings, "base_url": "http://b/v1", "verifier": {"n": 2}})
    (tmp_path / "run.json").write_text(
        json.dumps({"format": "verdict-eval-run/1", "settings": settings})
    )
    with pytest.raises(ValueError, match="is of format 'verdict-eval-run/1'"):
        rundir.claim(str(tmp_path), settings)


def test_a_run_recorded_before_adaptive_existed_resumes_under_adaptive_off(tmp_path):
    verifier = {"n": 3, "adaptive": "off", "adaptive_threshold": None}
    settings = {"model": "m", "base_url": "http://a/v1", "verifier": verifier, "shard": None}
    older = {**settings, "verifier": {"n": 3}}  # its run.json has no adaptive setting
    (tmp_path / "run.json").write_text(json.dumps({"format": rundir.RUN_FORMAT, "settings": older}))
    finished_row(tmp_path)
    assert rundir.claim(str(tmp_path), settings) == []
    (tmp_path / "run.json").write_text(json.dumps({"format": rundir.RUN_FORMAT, "settings": older}))
    with pytest.raises(ValueError, match=r"other settings \(verifier\)"):
        rundir.claim(str(tmp_path), {**settings, "verifier": {**verifier, "adaptive": "agree"}})


def test_the_endpoint_may_change_under_the_same_settings_and_is_said_once(tmp_path):
    settings = {"model": "m", "base_url": "http://a/v1", "judge_base_url": "http://a/v1"}
    assert rundir.claim(str(tmp_path), settings) == []
    finished_row(tmp_path)
    moved = {**settings, "base_url": "http://b/v1", "judge_base_url": "http://b/v1"}
    (note,) = rundir.claim(str(tmp_path), moved)
    assert note == (
        f"{tmp_path} was run against another endpoint (base_url: 'http://a/v1' there, "
        "'http://b/v1' now; judge_base_url: 'http://a/v1' there, 'http://b/v1' now); the model and "
        "settings are the same, so this run's rows join its table"
    )
    assert rundir.claim(str(tmp_path), moved) == []  # said once
    run = rundir.read_run(str(tmp_path))
    assert run["settings"] == moved
    assert run["endpoints_before"] == [{"base_url": "http://a/v1", "judge_base_url": "http://a/v1"}]


def test_a_run_directory_with_no_finished_row_pins_nothing(tmp_path):
    settings = {"model": "m", "base_url": "http://127.0.0.1:9/v1", "verifier": {"n": 3}}
    rundir.claim(str(tmp_path), settings)
    failed = fake_row("d", 0, "base", False, id="q0", error="EndpointError: HTTP 500")
    (tmp_path / "results.jsonl").write_text(json.dumps(failed.to_json()) + "\n")  # runs again
    other = {"model": "n", "base_url": "http://127.0.0.1:8080/v1", "verifier": {"n": 2}}
    assert rundir.claim(str(tmp_path), other) == []  # nothing to say: nothing was kept
    assert rundir.read_run(str(tmp_path)) == {"format": rundir.RUN_FORMAT, "settings": other}


@pytest.mark.parametrize("file", ["run.json", "results.jsonl"])
def test_a_planted_temporary_file_symlink_is_never_followed(tmp_path, file):
    out, outside = tmp_path / "o", tmp_path / "outside.txt"
    out.mkdir()
    outside.write_text("not yours")
    os.symlink(outside, out / f"{file}.tmp")
    settings = {"model": "m", "base_url": "http://a/v1"}
    if file == "run.json":
        rundir.claim(str(out), settings)
    else:  # a torn last line: load_rows rewrites the file without it
        finished_row(out)
        with open(out / "results.jsonl", "a") as fh:
            fh.write('{"format": "verdict-eval-row/3", "da')
        assert len(rundir.load_rows(str(out / "results.jsonl"))[0]) == 1
        assert (out / "results.jsonl").read_text().count("\n") == 1
    assert outside.read_text() == "not yours" and os.path.islink(out / f"{file}.tmp")
    text = (out / file).read_text()
    assert json.loads(text if file == "run.json" else text.splitlines()[0])  # written, whole
    left = {file, f"{file}.tmp"} | ({"results.jsonl"} if file == "results.jsonl" else set())
    assert sorted(os.listdir(out)) == sorted(left)  # no temporary file of ours stays behind


def test_a_run_of_the_settings_shape_before_the_verifier_dict_is_refused_by_its_format(
    tmp_path, loopback
):
    """run.json of format /2 held the verifier's settings flat ("config", "score_only", ...); a run
    now keeps them in one dict, "verifier" (verifier.Settings.record()), so an OUT of /2 is refused
    by its format."""
    srv, data, out = loopback(script), write_jsonl(tmp_path / "q.jsonl", n=1), tmp_path / "o"
    args = argv(data, srv.url, out, "--seeds 1 --rules base")
    assert evaluate.main(args) == 0
    run_json = json.loads((out / "run.json").read_text())
    assert run_json["format"] == rundir.RUN_FORMAT == "verdict-eval-run/3"
    assert set(run_json["settings"]) == {
        *("model", "judge_model", "base_url", "judge_base_url", "verifier"),
        *("extract_model", "extract_base_url", "shard", "inputs"),
    }
    verifier = run_json["settings"]["verifier"]  # Settings.record() but what a run's methods vary
    assert (
        verifier["n"] == 3 and verifier["judge_format"] == "json" and verifier["max_calls"] is None
    )
    assert not {"rule", "judge_mode", "revise", "speculate"} & set(verifier)
    old = {k: v for k, v in run_json["settings"].items() if k != "verifier"}
    old |= {"config": {"n": 3}, "score_only": True, "judge_format": "json"}
    (out / "run.json").write_text(json.dumps({"format": "verdict-eval-run/2", "settings": old}))
    sent = len(srv.requests)
    p = run(args)
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert (
        "is of format 'verdict-eval-run/2', not 'verdict-eval-run/3'; use another --out" in p.stderr
    )
    assert len(srv.requests) == sent


def test_load_rows_drops_what_must_run_again(tmp_path):
    row = lambda id, **kw: json.dumps(fake_row("d", 0, "base", True, id=id, **kw).to_json())
    path = tmp_path / "results.jsonl"
    lines = [
        row("1"),
        row("2", error="EndpointError: x"),
        row("1"),
        "{not json",
        json.dumps(
            {"format": "verdict-eval-row/1", "data": "d", "id": "3", "seed": 0, "method": "base"}
        ),
        row("4"),
        json.dumps({**json.loads(row("6")), "correct": "yes"}),
    ]
    path.write_bytes(
        "\n".join(lines).encode()
        + b"\n"
        + row("7").encode().replace(b'"d"', b'"\xff"')  # a byte that is not UTF-8
        + b"\n"
        + row("5").encode()[:20]
    )
    rows, dropped, stale = rundir.load_rows(str(path))
    assert [k[1] for k in rows] == [
        "1",
        "4",
    ] and dropped == 7  # "correct": "yes" is malformed: it runs again
    assert stale == []
    assert [json.loads(line)["id"] for line in path.read_text().splitlines()] == [
        "1",
        "4",
    ]  # rewritten
    assert rundir.read_rows(str(path))[0] == list(rows.values())


def test_load_rows_drops_the_rows_of_a_changed_input(tmp_path):
    row = lambda id, digest: fake_row("d", 0, "base", True, id=id, input_digest=digest).to_json()
    unknown = row("3", None)  # a row whose input is unknown (null)
    old = {**row("4", "d1"), "format": "verdict-eval-row/2"}  # another format: unreadable
    path = tmp_path / "results.jsonl"
    rows = (row("1", "a1"), row("2", "b1"), unknown, old, row("9", "z"))
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    inputs = {
        ("d", "1"): "a1",
        ("d", "2"): "b2",
        ("d", "3"): "c1",
        ("d", "4"): "d1",
    }  # 2 changed; 9 unread
    rows, dropped, stale = rundir.load_rows(str(path), inputs)
    assert [k[1] for k in rows] == ["1", "9"] and dropped == 3
    assert [(r.id, r.input_digest) for r in stale] == [
        ("2", "b1"),
        ("3", None),
    ]  # 3: of unknown input
    assert [json.loads(line)["id"] for line in path.read_text().splitlines()] == ["1", "9"]


def mixed_data(tmp_path) -> list:
    """A JSONL file of 7 items and a 3DSRBench TSV whose four twin rows may land on different
    shards."""
    from test_benchmarks import tsv

    head = ["index", "qid", "question", "A", "B", "answer", "category"]
    rows = [
        [
            r.id,
            r.input["qid"],
            f"In 3D, which is larger, {i} or {i + 1}?",
            str(i),
            str(i + 1),
            "AB"[i % 2],
            r.input["category"],
        ]
        for i, r in enumerate(three_dsr_rows())
    ]
    return [write_jsonl(tmp_path / "q.jsonl", n=7), tsv(tmp_path / "3DSRBench.tsv", head, rows)]


def comparable(summary: dict) -> dict:
    """The summary without what depends on timing and on which server and shard a run used."""
    out = {k: v for k, v in summary.items() if k != "settings"}
    out["stats"] = {
        m: {k: v for k, v in s.items() if k != "seconds_per_item"}
        for m, s in summary["stats"].items()
    }
    return out


def test_two_shards_merged_equal_one_unsharded_run(tmp_path, loopback):
    data, flags = (
        mixed_data(tmp_path),
        "--seeds 2 --rules base,verdict --max-steps 3 --judge-format text",
    )
    one, node1, node2 = loopback(script), loopback(script), loopback(script)
    assert evaluate.main(argv(data, one.url, tmp_path / "all", flags)) == 0
    for i, node in ((1, node1), (2, node2)):  # one server per node
        assert (
            evaluate.main(argv(data, node.url, tmp_path / f"s{i}", f"{flags} --shard {i}/2")) == 0
        )
    shard_ids = [{r["id"] for r in rows_of(tmp_path / f"s{i}")} for i in (1, 2)]
    assert (
        shard_ids[0] and shard_ids[1] and not shard_ids[0] & shard_ids[1]
    )  # both shards hold items, none twice
    assert len(node1.chats) + len(node2.chats) == len(one.chats)
    merged = run(
        ["merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "m")]
    )
    assert merged.returncode == 0, merged.stderr
    want, got = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("all", "m"))
    assert comparable(got) == comparable(want)
    assert (
        got["settings"]["base_url"] == sorted([node1.url, node2.url])
        and got["settings"]["shard"] is None
    )
    names = [
        f"default-{m}/seed{s}/default-{m}_{f}"
        for m in ("base", "verdict")
        for s in (0, 1)
        for f in ("q.tsv", "q_acc.csv", "3DSRBench.tsv", "3DSRBench_results.tsv")
    ]  # VLMEvalKit's files, one directory per (model, method, seed)
    assert sorted(
        str(p.relative_to(tmp_path / "m")) for p in (tmp_path / "m").glob("*/seed*/*")
    ) == sorted(names)
    for name in names:
        assert (tmp_path / "m" / name).read_text() == (tmp_path / "all" / name).read_text(), name
    assert sorted(map(json.dumps, rows_of(tmp_path / "m"))) == sorted(
        map(json.dumps, rows_of(tmp_path / "s1") + rows_of(tmp_path / "s2"))
    )


def test_merge_refuses_what_is_not_one_run(tmp_path, loopback):
    srv = loopback(script)
    data = write_jsonl(tmp_path / "q.jsonl", n=3)
    base = lambda out, flags="": argv(
        data, srv.url, tmp_path / out, "--seeds 1 --rules base " + flags
    )
    for i in (1, 2):
        assert evaluate.main(base(f"s{i}", f"--shard {i}/2")) == 0
    assert evaluate.main(base("t2", "--shard 2/2 --max-steps 3")) == 0
    assert evaluate.main(base("three", "--shard 1/3")) == 0
    assert evaluate.main(base("whole")) == 0
    d = lambda *names: [str(tmp_path / n) for n in names]
    for dirs, message in (
        (d("s1", "t2"), "was run with other settings than"),
        (d("s1", "three"), "shard count"),
        (d("s1"), "merge needs each of 1/2 to 2/2 once"),
        (d("s1", "s1"), "the shards given are 1/2, 1/2"),
        (d("s1", "whole"), "is not a shard"),
        (d("s1", "nowhere"), "holds no run"),
    ):
        out = run(["merge", *dirs, "--out", str(tmp_path / "m")])
        assert out.returncode == 2 and out.stderr.count("\n") == 1 and message in out.stderr, (
            dirs,
            out.stderr,
        )
    os.remove(tmp_path / "s2" / "summary.json")
    out = run(["merge", *d("s1", "s2"), "--out", str(tmp_path / "m")])
    assert out.returncode == 2 and "has no summary.json: its run has not finished" in out.stderr
