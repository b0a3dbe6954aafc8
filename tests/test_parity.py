"""Parity with VLMEvalKit (commit e8e78f05): tests/parity.jsonl holds (file, its TSV, row, reply, the hit
VLMEvalKit's own code gives), derived by reading each TSV with pandas' defaults and scoring the reply with
VLMEvalKit's can_infer / MMMU_preproc / MathVista post_check (docs/parity.md has the command). The harness's
reading (benchmarks.load) and scoring (answers.score) must give the same hit on every line; the covered
files are the paper's six, MMBench (circular by name), MMMU_DEV_VAL and MathVista_MINI."""

import json
import os

import pytest

from verdict_lab.harness import answers, benchmarks

HERE = os.path.dirname(__file__)
CASES = [json.loads(line) for line in open(os.path.join(HERE, "parity.jsonl"), encoding="utf-8")]


@pytest.mark.parametrize("case", CASES, ids=[f"{c['file']}-{c['row']}-{c['reply']!r}" for c in CASES])
def test_the_hit_vlmevalkit_gives(case, tmp_path):
    path = tmp_path / f"{case['file']}.tsv"
    path.write_text(case["tsv"], encoding="utf-8")
    f = benchmarks.load(str(path))
    assert f.skipped == [], f.skipped
    assert answers.score(f.items[case["row"]], case["reply"])[2] == bool(case["hit"])


def test_every_benchmark_the_readme_names_is_covered():
    names = {"3DSRBench", "CV-Bench-3D", "CV-Bench-2D", "BLINK", "MMStar", "AI2D_TEST", "MathVista_MINI"}
    assert names | {"MMMU_DEV_VAL", "MMBench_DEV_EN"} <= {c["file"] for c in CASES}
