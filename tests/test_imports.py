"""The shape of the project: the root holds the design card's files and one folder; imports flow one
way, with no circle (verdict.py imports nothing of the project, judges.py only verdict, demo.py only
those two, and nothing at the root imports verdict_lab); the modules and commands that make no HTTP
call import no HTTP library; no function is over 60 lines; and the card's files copied alone work:
verdict.py with test_verdict.py (numpy and pytest), and verdict.py, judges.py and prompts/ as live
judges against a server (numpy, requests and pillow). Each import and each vendored copy runs in a
fresh interpreter, so what another test imported cannot hide what a module pulls in."""

import ast
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CARD = {"verdict.py", "test_verdict.py", "judges.py", "prompts", "demo.py", "README.md"}
AROUND = {"pyproject.toml", "requirements.txt", ".ci", ".gitignore", "tests", "docs", "verdict_lab"}
LEAVES = (  # modules that only read or compute, and the commands that make no HTTP call
    "verdict",
    "verdict_lab.loop",
    "verdict_lab.images",
    "verdict_lab.simulate",
    "verdict_lab.formats",
    "verdict_lab.layouts",
    "verdict_lab.harness.answers",
    "verdict_lab.harness.benchmarks",
    "verdict_lab.harness.tables",
    "verdict_lab.harness.rundir",
    "verdict_lab.harness.sweep",
    "verdict_lab.cases",
    "verdict_lab.modes.zoom",
    "verdict_lab.modes.evpv",
    "verdict_lab.modes.rewards",
    "verdict_lab.perf.simulation",
    "verdict_lab.perf.simulation_report",
    "verdict_lab.process_metrics",
    "verdict_lab.process_report",
)
COMMANDS = {
    "demo",
    "verdict_lab.evaluate",
    "verdict_lab.bench",
    "verdict_lab.simulate",
    "verdict_lab.process",
}
MAX_FUNCTION_LINES = 60


def modules() -> dict:
    """{module name: its path} of every production module: the root's and the folder's."""
    found = {p.stem: p for p in ROOT.glob("*.py") if not p.name.startswith("test_")}
    for p in (ROOT / "verdict_lab").rglob("*.py"):
        name = ".".join(p.relative_to(ROOT).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = p
    return found


def imports(path: Path, known: set) -> set:
    """The project's modules that `path` imports, at the top or inside a function ("from a import b"
    counts a.b when that is a module)."""
    out = set()
    for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(n, ast.Import):
            out |= {a.name for a in n.names}
        elif isinstance(n, ast.ImportFrom) and n.module:
            out |= {n.module} | {f"{n.module}.{a.name}" for a in n.names}
    return {m for m in out if m in known}


# demo.py --html writes the case viewer with the lab's page writer, imported in one function
# (page_writer) when the flag is given: the demo itself, copied with the core, needs no verdict_lab.
DEMO_LAZY = {"verdict_lab.cases"}


def lazy_imports(path: Path, known: set) -> dict:
    """{function name: the project's modules it imports} of the functions of `path` that import
    any."""
    out = {}
    for f in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found = set()
            for n in ast.walk(f):
                if isinstance(n, ast.Import):
                    found |= {a.name for a in n.names}
                elif isinstance(n, ast.ImportFrom) and n.module:
                    found |= {n.module} | {f"{n.module}.{a.name}" for a in n.names}
            if found & known:
                out[f.name] = found & known
    return out


def test_the_root_holds_the_card_and_one_folder():
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    top = {line.split("/")[0] for line in tracked.stdout.splitlines()} or {
        p.name for p in ROOT.iterdir()
    }
    assert top == CARD | AROUND, sorted(top ^ (CARD | AROUND))


def test_imports_flow_one_way_with_no_circle():
    mods = modules()
    graph = {m: imports(p, set(mods)) - {m} for m, p in mods.items()}
    for m, deps in graph.items():
        if m == "verdict":
            assert not deps, f"verdict.py imports {sorted(deps)}"
        if m == "judges":
            assert deps == {"verdict"}, f"judges.py imports {sorted(deps)}"
        if m == "demo":  # verdict and judges; the lab's page writer only inside --html's function
            assert deps - DEMO_LAZY == {"verdict", "judges"}, f"demo.py imports {sorted(deps)}"
            assert lazy_imports(mods[m], set(mods)) == {"page_writer": DEMO_LAZY}
        if "." not in m:  # the root's modules: the core and the demo
            lab = sorted(
                d
                for d in deps - (DEMO_LAZY if m == "demo" else set())
                if d.startswith("verdict_lab")
            )
            assert not lab, f"{m}.py imports {lab}"
        assert not deps & COMMANDS, f"{m} imports the command {sorted(deps & COMMANDS)}"
        if m.startswith("verdict_lab.harness"):
            assert not any(d.startswith("verdict_lab.perf") for d in deps), (
                f"{m} imports a study: {sorted(deps)}"
            )
    seen, done = [], set()

    def visit(m):  # depth-first: a module met again on the current path closes a circle
        assert m not in seen, "an import circle: " + " -> ".join(seen[seen.index(m) :] + [m])
        if m not in done:
            seen.append(m)
            for d in sorted(graph[m]):
                visit(d)
            seen.pop()
            done.add(m)

    for m in sorted(graph):
        visit(m)


def test_judges_imports_only_verdict_numpy_requests_pillow_and_the_standard_library():
    tree = ast.parse((ROOT / "judges.py").read_text(encoding="utf-8"))
    names = {
        a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    names |= {
        n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
    }
    third = names - set(sys.stdlib_module_names) - {"__future__"}
    assert third == {"verdict", "numpy", "requests", "PIL"}, sorted(third)


@pytest.mark.parametrize("module", LEAVES)
def test_a_leaf_module_imports_no_http(module):
    http = ("requests", "urllib3", "verdict_lab.client")
    probe = f"import sys; import {module}; print(sorted(m for m in {http!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]", f"{module} pulls in {out.stdout.strip()}"


def test_no_production_module_imports_the_tests():
    for name, path in modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        mods |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not any(
            m == "tests" or m.startswith(("tests.", "test_", "conftest", "scripted")) for m in mods
        ), name


def test_no_function_is_over_sixty_lines():
    long = []
    for name, path in modules().items():
        for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                and n.end_lineno - n.lineno >= MAX_FUNCTION_LINES
            ):
                long.append(f"{name}.{n.name}: {n.end_lineno - n.lineno + 1} lines")
    assert not long, long


# ------------------------------------------------------------------- the card's files, copied alone

BLOCK = textwrap.dedent(
    """
    import importlib.abc, sys
    class Block(importlib.abc.MetaPathFinder):  # what the copy must not need
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {blocked!r}:
                raise ImportError(f"{{name}} is not installed here")
    sys.meta_path.insert(0, Block())
    """
)


def run_alone(
    tmp_path: Path, files: list, blocked: set, argv: list, script: str = ""
) -> subprocess.CompletedProcess:
    """argv in tmp_path holding only `files` (copied from the checkout), with the modules `blocked`
    made unimportable (a sitecustomize), and nothing of the checkout on the path."""
    for f in files:
        src, dst = ROOT / f, tmp_path / f
        shutil.copytree(src, dst) if src.is_dir() else shutil.copy(src, dst)
    (tmp_path / "sitecustomize.py").write_text(
        BLOCK.format(blocked=sorted(blocked)), encoding="utf-8"
    )
    if script:
        (tmp_path / "run.py").write_text(script, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VERDICT_LIVE_URL")}
    env["PYTHONPATH"] = str(tmp_path)  # the sitecustomize; the copy is the working directory
    return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


def test_the_vendored_pair_runs_its_tests_with_numpy_and_pytest_alone(tmp_path):
    blocked = {"requests", "PIL", "urllib3", "judges", "verdict_lab", "hypothesis"}
    out = run_alone(
        tmp_path,
        ["verdict.py", "test_verdict.py"],
        blocked,
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_verdict.py"],
    )
    assert out.returncode == 0 and " passed" in out.stdout and "failed" not in out.stdout, (
        out.stdout[-2000:] + out.stderr[-2000:]
    )


LIVE_CHAIN = textwrap.dedent(
    """
    import io, json, threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from PIL import Image
    import judges, verdict

    seen = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(body)
            if "response_format" in body:  # a judge: the score alone, under the schema
                choices = [{"message": {"content": '{"score": 8}'}}]
            else:  # the reasoner: n candidates, a final answer at the second step
                final = "Step 1:" in json.dumps(body["messages"])
                text = "Final answer: A" if final else "The cube is on the left."
                choices = [{"message": {"content": text}}] * body.get("n", 1)
            usage = {"prompt_tokens": 5, "completion_tokens": 2}
            data = json.dumps({"choices": choices, "usage": usage})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data.encode())

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    png = io.BytesIO()
    Image.new("RGB", (40, 30), (200, 30, 30)).save(png, "PNG")
    endpoint = judges.Endpoint(url, "m")
    question = "Is the cube left? A. yes B. no"
    js = judges.make_judges(endpoint)
    judged = []  # each judge call's judges.Judgement, read off verdict.step's map_fn

    def recording(f, items):
        out = list(map(f, items))
        judged.extend(out)
        return out

    trace = verdict.run(
        question, judges.Reasoner(endpoint), js, image=png.getvalue(), map_fn=recording
    )
    server.shutdown()
    images = sum(p.get("type") == "image_url" for b in seen for p in b["messages"][1]["content"])
    formats = sorted({j.record["format"] for j in judged})
    got = {"answer": trace.answer, "steps": len(trace.steps), "requests": len(seen)}
    print(json.dumps({**got, "images": images, "formats": formats}))
    """
)


def test_verdict_judges_and_prompts_copied_alone_run_a_live_chain(tmp_path):
    blocked = {"verdict_lab", "hypothesis", "pytest", "tests", "scripted"}
    out = run_alone(
        tmp_path,
        ["verdict.py", "judges.py", "prompts"],
        blocked,
        [sys.executable, "run.py"],
        LIVE_CHAIN,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = __import__("json").loads(out.stdout.splitlines()[-1])
    # Two steps: 1 reasoner request and 3 × 3 judge calls each; every request carries the image.
    assert got == {"answer": "A", "steps": 2, "requests": 20, "images": 20, "formats": ["json"]}


def test_judges_py_with_its_own_tests_copied_alone_passes(tmp_path):
    # tests/test_judges_alone.py is vendored as test_judges_alone.py beside the files it tests, so
    # it must start its own server and need nothing of the checkout: no conftest, no other test
    # module and no verdict_lab.
    shutil.copy(ROOT / "tests" / "test_judges_alone.py", tmp_path / "test_judges_alone.py")
    blocked = {"verdict_lab", "hypothesis", "tests", "scripted", "test_judges", "test_replies"}
    out = run_alone(
        tmp_path,
        ["verdict.py", "judges.py", "prompts"],
        blocked,
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_judges_alone.py"],
    )
    summary = (out.stdout.strip().splitlines() or [""])[-1]
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert " passed" in summary and "failed" not in summary and "error" not in summary, summary
