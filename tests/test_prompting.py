"""Tests for the prompt files (judges.load_prompt), the layouts of a role's request
(judges.role_first, verdict_lab/layouts.py's shared and per_role), and which role a request is
(layouts.role_of).

The shared layout's promise is checked on the bytes the client sends: every request of a step (the
reasoner, the three judges, the judge modes' calls) is identical up to the role's instructions. The
per-role layout's is that it still sends the requests this project sent before the shared layout
existed, written out below."""

import json
import re

import pytest

import judges
from verdict_lab.layouts import prompt_of, lab_prompt
import verdict
from judges import load_prompt, role_first
from verdict_lab import cli, flags, layouts, verifier
from verdict_lab.client import Client
from verdict_lab.layouts import DEFAULT_LAYOUT, LAYOUTS, ROLES, check_layout, role_of
from verdict_lab.loopback import chat_response

SHEET = {
    "objects": [{"fact": "a lamp"}],
    "numbers": [],
    "relations": [{"fact": "the chair is nearer"}],
    "structure": [],
}
REPLIES = {
    "reasoner": None,
    "prior": "- Find which object is nearer.",
    "premises": json.dumps(SHEET),
    "premise_check": '{"claims": [{"claim": "the chair is nearer", "label": "supported"}]}',
    "zoom": '{"boxes": []}',
}


def by_role(body, path):
    """Each role's reply: n candidates for the reasoner, a json-format score from a judge,
    the judge modes' JSON."""
    role = role_of(body["messages"])
    if role == "reasoner":
        return chat_response([f"The chair is nearer ({i})." for i in range(body["n"])])
    return chat_response(REPLIES.get(role) or '{"reason": "fine", "score": 7}')


def head(raw: bytes, role: str) -> bytes:
    """The bytes of a request before its role's instructions (as the client's JSON encoder escapes
    them)."""
    return raw[: raw.index(json.dumps(prompt_of(role)["instructions"]).encode()[1:-1])]


@pytest.mark.parametrize("with_image", [False, True])
def test_every_request_of_a_step_is_byte_identical_up_to_its_role(loopback, png, with_image):
    srv = loopback(by_role)
    client = Client(srv.url, "m")
    settings = verifier.Settings(
        n=2, max_steps=2, judge_mode="prior+premises+gate+zoom", layout="shared"
    )
    question = "Which is nearer, the lamp or the chair?\nA. lamp\nB. chair"
    verifier.run(verifier.build(settings, client), question, png if with_image else None)
    steps = {}  # the steps a request shows -> {role: [the bytes before its instructions]}
    for r in srv.requests:
        if r.method == "POST":
            role = role_of(r.body["messages"])
            shown = r.body["messages"][1]["content"]
            shown = shown if isinstance(shown, str) else shown[-1]["text"]
            steps.setdefault(
                shown[shown.index("Previous steps:") :].split("\n\n")[0], {}
            ).setdefault(role, []).append(head(r.raw, role))
    first, second = (
        "Previous steps:\n(none yet)",
        "Previous steps:\nStep 1: The chair is nearer (0).",
    )
    assert sorted(steps) == [first, second]
    # no region to name without an image;
    roles = set(ROLES) - {"reviser"} - (set() if with_image else {"zoom"})
    # every step has an accepted candidate (7/9 from every judge), so nothing to revise
    assert sorted(steps[first]) == sorted(roles) and sorted(steps[second]) == sorted(
        roles - {"prior", "premises"}
    )
    for shown, step in steps.items():
        # the premise check is text only (the step against the fact sheet alone): with an image, its
        # prefix is another (the text-only requests'); without one it is everyone's
        shared = [
            h
            for role, hs in step.items()
            for h in hs
            if not (with_image and role == "premise_check")
        ]
        assert len(shared) >= 7 and len(set(shared)) == 1  # the reasoner, 6 judge calls, and more
        assert shared[0].startswith(b'{"model": "m", "messages": [{"role": "system", "content": ')
        # the question and steps are in it
        assert shared[0].endswith(json.dumps(shown + "\n\n").encode()[1:-1])
        assert (b'"image_url"' in shared[0]) == with_image  # and so is the image


def test_role_first_keeps_each_roles_prefix_from_step_to_step(loopback):
    # role-first: every request of a step is the same up to the role (system message and question),
    # and a role's request of one step begins with all of its request of the step before, up to the
    # steps it shows.
    srv = loopback(by_role)
    client = Client(srv.url, "m")
    settings = verifier.Settings(n=2, max_steps=2, judge_mode="prior", layout="role-first")
    verifier.run(verifier.build(settings, client), "Which is nearer?\nA. lamp\nB. chair")
    posts = [r for r in srv.requests if r.method == "POST"]
    assert len({head(r.raw, role_of(r.body["messages"])) for r in posts}) == 1
    for role in ("reasoner",) + verdict.JUDGES:
        raws = [r.raw for r in posts if role_of(r.body["messages"]) == role]
        cut = [raw[: raw.index(b"Previous steps:")] for raw in raws]
        # steps 1 and 2
        assert len(set(cut)) == 1 and b"(none yet)" in raws[0] and b"Step 1:" in raws[-1]


def fields() -> dict:
    """Every field a role's task may name, each easy to find."""
    return dict(step="CANDIDATE", reply="REPLY FORMAT", k="3", checks="CHECKS")


STATE = verdict.State("How many?\nA. 1\nB. 2", (), ("There are apples.",))


@pytest.mark.parametrize("role", ROLES)
def test_each_role_reads_its_own_instructions_and_task_in_either_layout(role):
    p, common = prompt_of(role), load_prompt("reasoner")
    # A judge's request ends with the reply it asks for, after its task.
    task = p.render("task", **fields())
    task += "\n\n" + fields()["reply"] if role in verdict.JUDGES else ""
    msgs = layouts.shared(role, STATE, "EVIDENCE\n\n", **fields())
    assert msgs[0] == {"role": "system", "content": common["system"]}
    assert msgs[1]["content"] == (
        "Question:\nHow many?\nA. 1\nB. 2\n\nPrevious steps:\nStep 1: There are apples.\n\n"
        + p["instructions"]
        + "\n\nEVIDENCE\n\n"
        + task
    )
    # Per-role shows the note where it says {note}
    if "{note}" in layouts.per_role_context(role)[0]:
        old = layouts.per_role(role, STATE, "EVIDENCE\n\n", **fields())
        assert "EVIDENCE\n\n" in old[1]["content"]
    else:  # a role with nowhere to show it refuses a note rather than lose it without a word
        path = layouts.per_role_context(role)[1]
        with pytest.raises(ValueError, match=re.escape(f"{path} has no {{note}} placeholder")):
            layouts.per_role(role, STATE, "EVIDENCE\n\n", **fields())
        old = layouts.per_role(role, STATE, **fields())
    assert (
        old[0] == {"role": "system", "content": p["instructions"]}
        and p["instructions"] not in old[1]["content"]
    )
    assert old[1]["content"].endswith("\n\n" + task)
    first = layouts.role_first_of(role, STATE, "EVIDENCE\n\n", **fields())
    assert first[0] == msgs[0] and first[1]["content"] == (
        "Question:\nHow many?\nA. 1\nB. 2\n\n"
        + p["instructions"]
        + "\n\nEVIDENCE\n\nPrevious steps:\nStep 1: There are "
        "apples.\n\n" + task
    )
    assert role_of(msgs) == role_of(old) == role_of(first) == role


# The user message of each role as this project sent it before the shared layout, written out (the
# premise check's fact sheet is its evidence; the prior's and the fact sheet's tasks are long, and
# are each file's [task]).
TODAY = {
    "reasoner": "Question:\n{question}\n\nSteps so far:\n{steps}\n\nWrite the next step only.",
    "visual": "Question:\n{question}\n\n{note}Previous steps:\n{steps}\n\n"
    "Step to check:\n<step>\n{step}\n</step>\n\n{reply}",
    "prior": "Question:\n{question}\n\n" + prompt_of("prior")["task"],
    "premises": "Question (it tells you what to look at; do not answer it):\n{question}\n\n"
    + prompt_of("premises")["task"],
    "premise_check": "Fact sheet:\n{facts}\n\nQuestion:\n{question}\n\nPrevious steps:\n{steps}\n\n"
    "Step to check:\n<step>\n"
    '{step}\n</step>\n\nReply with the JSON object only, in this form: {"claims": [{"claim": "<the '
    'claim, in a few words>", "label": "supported" or "contradicted" or "uncertain"}]}',
}
TODAY["zoom"] = "Question:\n{question}\n\nPrevious steps:\n{steps}\n\n" + prompt_of("zoom")["task"]
TODAY["reviser"] = (
    "Question:\n{question}\n\nSteps so far:\n{steps}\n\n" + prompt_of("reviser")["task"]
)
TODAY["logical"] = TODAY["contextual"] = TODAY["visual"]
FIRST_WORDS = {
    "reasoner": "You answer questions about images",
    "visual": "You are the Visual Verification Agent.",
    "logical": "You are the Logical Verification Agent.",
    "contextual": "You are the Contextual Agent.",
    "prior": "You prepare to check other people's reasoning",
    "premises": "You extract a fact sheet",
    "premise_check": "You check the visual premises of one step",
    "zoom": "You choose where to look again",
    "reviser": "You revise one step of the reasoning",
}


@pytest.mark.parametrize("role", ROLES)
def test_the_per_role_layout_sends_todays_request(role):
    evidence = (
        "Fact sheet:\n- objects: an apple\n\n"
        if role == "premise_check"
        else "Reference:\n- count them\n\n"
    )
    msgs = layouts.per_role(
        role, STATE, evidence if role in verdict.JUDGES + ("premise_check",) else "", **fields()
    )
    values = dict(
        question=STATE.question,
        steps="Step 1: There are apples.",
        note=evidence,
        facts="- objects: an apple",
        **fields(),
    )
    # {"fact": ...} is no placeholder
    today = re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], TODAY[role])
    assert msgs == [
        {"role": "system", "content": msgs[0]["content"]},
        {"role": "user", "content": today},
    ]
    assert msgs[0]["content"].startswith(FIRST_WORDS[role])


def test_the_layouts_are_checked_and_role_of_knows_only_the_roles(png, capsys):
    # A layout is a function; a layout's name (Settings.layout, --layout) is checked before
    # any call.
    for make in (
        lambda: check_layout("flat"),
        lambda: layouts.layout("flat"),
        lambda: verifier.Settings(layout="flat"),
    ):
        with pytest.raises(
            ValueError, match="unknown layout 'flat'; expected one of role-first, shared, per-role"
        ):
            make()
    p = cli.Parser(prog="evaluate")
    flags.add_verifier_args(p)
    with pytest.raises(SystemExit) as stop:
        p.parse_args(["--layout", "flat"])
    assert stop.value.code == 2 and "--layout: invalid choice: 'flat'" in capsys.readouterr().err
    assert LAYOUTS == {
        "role-first": layouts.role_first_of,
        "shared": layouts.shared,
        "per-role": layouts.per_role,
    }
    assert tuple(LAYOUTS) == ("role-first", "shared", "per-role") and DEFAULT_LAYOUT == "role-first"
    # and every role's own default is role-first:
    assert verifier.Settings().layout == DEFAULT_LAYOUT
    assert judges.Reasoner(None).layout is judges.Judge(None, "visual").layout is role_first
    extract = lab_prompt("extract_choice")
    assert (
        role_of(
            [
                {"role": "system", "content": extract["system"]},
                {"role": "user", "content": "Letter:"},
            ]
        )
        is None
    )
    # The default layout: judges.py's, the folder's, and the folder's with MMMU's placement.
    for lay in (role_first, layouts.role_first_of, layouts.layout()):
        with_image = lay("logical", verdict.State("q", (png,)), step="x", reply="y")
        assert [p["type"] for p in with_image[1]["content"]] == ["image_url", "text"] and role_of(
            with_image
        ) == "logical"


def test_a_prompt_file_must_hold_known_sections_in_order(monkeypatch, tmp_path):
    monkeypatch.setattr(judges, "PROMPTS", tmp_path)
    judges.load_prompt.cache_clear()
    (tmp_path / "swapped.txt").write_text(
        "[task]\nDo it.\n[instructions]\nYou do.\n[context]\n{question}\n"
    )
    role = r"\[system\]\[question\]\[instructions\]\[steps\]\[task\]"
    with pytest.raises(
        ValueError,
        match=rf"swapped\.txt must hold the sections {role} or {role}\[reply\], in this order; "
        r"it holds \[task\]\[instructions\]\[context\]",
    ):
        load_prompt("swapped")
    (tmp_path / "loose.txt").write_text("Some text first.\n[system]\nS.\n[user]\nU.\n")
    # Text before the first section is no section.
    with pytest.raises(ValueError, match="it holds \\[system\\]\\[user\\]"):
        load_prompt("loose")
    (tmp_path / "unknown.txt").write_text(
        "[system]\nS.\n[question]\n{question}\n[instructions]\nI.\n[steps]\n{steps}\n"
        "[task]\nT {nothing}.\n"
    )
    with pytest.raises(ValueError, match=r"unknown\.txt: unknown placeholder \{nothing\}"):
        role_first("unknown", STATE)
    judges.load_prompt.cache_clear()  # no prompt of tmp_path stays cached


def test_the_core_prompts_are_the_paper_roles_and_share_their_common_sections():
    # prompts/ holds the reasoner and the three judges, each with every section it sends. The
    # system message, the question and the steps are the same bytes in all four, so a server's
    # prefix cache shares them; the three judges ask for the same reply.
    names = sorted(p.stem for p in judges.PROMPTS.glob("*.txt"))
    assert names == sorted(("reasoner",) + verdict.JUDGES)
    prompts = {name: load_prompt(name) for name in names}
    for section in ("system", "question", "steps"):
        assert len({p[section] for p in prompts.values()}) == 1
    assert [k for k, _ in prompts["reasoner"].sections] == list(judges.ROLE)
    for name in verdict.JUDGES:
        assert [k for k, _ in prompts[name].sections] == list(judges.JUDGE)
        assert prompts[name]["reply"] == prompts["visual"]["reply"]
    assert prompts["visual"]["reply"].startswith("Reply with one JSON object of this form")
