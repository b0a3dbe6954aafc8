"""The modules that only read or compute import no HTTP: score parsing, answer extraction, benchmark reading,
the tables, the zoom geometry, EVPV's functions and the Monte-Carlo study (with its report) load neither the
project's client nor `requests`. verdict.py imports nothing of the project. Each import runs in a fresh
interpreter, so what another test imported cannot hide what a module pulls in."""

import ast
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEAVES = (
    "replies",
    "harness.answers",
    "harness.benchmarks",
    "harness.tables",
    "harness.rundir",
    "harness.sweep",
    "modes.zoom",
    "modes.evpv",
    "modes.rewards",
    "simulate",
    "perf.simulation_report",
    "verdict",
)
PROJECT = {
    "client",
    "cache",
    "judges",
    "replies",
    "prompting",
    "images",
    "demo",
    "evaluate",
    "bench",
    "simulate",
    "harness",
    "modes",
    "perf",
    "vlmevalkit",
}


@pytest.mark.parametrize("module", LEAVES)
def test_a_leaf_module_imports_no_http(module):
    probe = (
        f"import sys; import {module}; "
        "print(sorted(m for m in ('requests', 'client', 'urllib3') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", f"{module} pulls in {out.stdout.strip()}"


def test_verdict_imports_nothing_of_the_project():
    with open(os.path.join(ROOT, "verdict.py"), encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not names & PROJECT, sorted(names & PROJECT)


def test_no_production_module_imports_the_tests():
    for folder in (".", "harness", "modes", "perf", "vlmevalkit"):
        for name in sorted(os.listdir(os.path.join(ROOT, folder))):
            if name.endswith(".py") and not name.startswith("test_"):
                with open(os.path.join(ROOT, folder, name), encoding="utf-8") as fh:
                    tree = ast.parse(fh.read())
                mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
                mods |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
                assert not any(m == "tests" or m.startswith(("tests.", "test_", "conftest")) for m in mods), (
                    name
                )
