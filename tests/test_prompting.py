"""Tests for prompting.py: the prompt files, the two layouts of a role's request, and which role a request is.

The shared layout's promise is checked on the bytes the client sends: every request of a step (the reasoner,
the three judges, the judge modes' calls) is identical up to the role's instructions. The per-role layout's is
that it still sends the requests this project sent before the shared layout existed, written out below."""

import json
import re

import pytest

import prompting
import verdict
from client import Client
from modes import JudgeMode
from modes.calls import ModeCalls
from judges import Judge, Reasoner, make_judges
from prompting import LAYOUTS, ROLES, load_prompt, role_messages
from perf.loopback import chat_response, role_of

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
    """The bytes of a request before its role's instructions (as the client's JSON encoder escapes them)."""
    return raw[: raw.index(json.dumps(load_prompt(role)["instructions"]).encode()[1:-1])]


@pytest.mark.parametrize("with_image", [False, True])
def test_every_request_of_a_step_is_byte_identical_up_to_its_role(loopback, png, with_image):
    srv = loopback(by_role)
    client = Client(srv.url, "m")
    g = ModeCalls(client, JudgeMode(prior=True, premises=True, gate=True, zoom=True), layout="shared")
    question = "Which is nearer, the lamp or the chair?\nA. lamp\nB. chair"
    verdict.run(
        question,
        Reasoner(client, layout="shared"),
        make_judges(client, grounding=g, fmt="json", layout="shared"),
        verdict.Config(n=2, max_steps=2),
        image=png if with_image else None,
    )
    steps = {}  # the steps a request shows -> {role: [the bytes before its instructions]}
    for r in srv.requests:
        if r.method == "POST":
            role = role_of(r.body["messages"])
            shown = r.body["messages"][1]["content"]
            shown = shown if isinstance(shown, str) else shown[-1]["text"]
            steps.setdefault(shown[shown.index("Previous steps:") :].split("\n\n")[0], {}).setdefault(
                role, []
            ).append(head(r.raw, role))
    first, second = "Previous steps:\n(none yet)", "Previous steps:\nStep 1: The chair is nearer (0)."
    assert sorted(steps) == [first, second]
    roles = (
        set(ROLES) - {"reviser"} - (set() if with_image else {"zoom"})
    )  # no region to name without an image;
    # every step has an accepted candidate (7/9 from every judge), so nothing to revise
    assert sorted(steps[first]) == sorted(roles) and sorted(steps[second]) == sorted(
        roles - {"prior", "premises"}
    )
    for shown, step in steps.items():
        # the premise check is text only (the step against the fact sheet alone): with an image, its prefix is
        # another (the text-only requests'); without one it is everyone's
        shared = [h for role, hs in step.items() for h in hs if not (with_image and role == "premise_check")]
        assert len(shared) >= 7 and len(set(shared)) == 1  # the reasoner, 6 judge calls, and more
        assert shared[0].startswith(b'{"model": "m", "messages": [{"role": "system", "content": ')
        assert shared[0].endswith(
            json.dumps(shown + "\n\n").encode()[1:-1]
        )  # the question and steps are in it
        assert (b'"image_url"' in shared[0]) == with_image  # and so is the image


def test_role_first_keeps_each_roles_prefix_from_step_to_step(loopback):
    # role-first: every request of a step is the same up to the role (system message and question), and a
    # role's request of one step begins with all of its request of the step before, up to the steps it shows.
    srv = loopback(by_role)
    client = Client(srv.url, "m")
    g = ModeCalls(client, JudgeMode(prior=True), layout="role-first")
    verdict.run(
        "Which is nearer?\nA. lamp\nB. chair",
        Reasoner(client, layout="role-first"),
        make_judges(client, grounding=g, fmt="json", layout="role-first"),
        verdict.Config(n=2, max_steps=2),
    )
    posts = [r for r in srv.requests if r.method == "POST"]
    assert len({head(r.raw, role_of(r.body["messages"])) for r in posts}) == 1
    for role in ("reasoner",) + verdict.JUDGES:
        raws = [r.raw for r in posts if role_of(r.body["messages"]) == role]
        cut = [raw[: raw.index(b"Previous steps:")] for raw in raws]
        assert len(set(cut)) == 1 and b"(none yet)" in raws[0] and b"Step 1:" in raws[-1]  # steps 1 and 2


def fields() -> dict:
    """Every field a role's task may name, each easy to find."""
    return dict(step="CANDIDATE", reply="REPLY FORMAT", k="3", reasons="REASONS")


STATE = verdict.State("How many?\nA. 1\nB. 2", (), ("There are apples.",))


@pytest.mark.parametrize("role", ROLES)
def test_each_role_reads_its_own_instructions_and_task_in_either_layout(role):
    p, shared = load_prompt(role), load_prompt("shared")
    task = p.render("task", **fields())
    msgs = role_messages(role, STATE, "shared", "EVIDENCE\n\n", **fields())
    assert msgs[0] == {"role": "system", "content": shared.system}
    assert msgs[1]["content"] == (
        "Question:\nHow many?\nA. 1\nB. 2\n\nPrevious steps:\nStep 1: There are apples.\n\n"
        + p["instructions"]
        + "\n\nEVIDENCE\n\n"
        + task
    )
    old = role_messages(role, STATE, "per-role", "EVIDENCE\n\n", **fields())
    assert (
        old[0] == {"role": "system", "content": p["instructions"]}
        and p["instructions"] not in old[1]["content"]
    )
    assert old[1]["content"].endswith("\n\n" + task)
    first = role_messages(role, STATE, "role-first", "EVIDENCE\n\n", **fields())
    assert first[0] == msgs[0] and first[1]["content"] == (
        "Question:\nHow many?\nA. 1\nB. 2\n\n"
        + p["instructions"]
        + "\n\nEVIDENCE\n\nPrevious steps:\nStep 1: There are "
        "apples.\n\n" + task
    )
    assert role_of(msgs) == role_of(old) == role_of(first) == role


# The user message of each role as this project sent it before the shared layout, written out (the premise
# check's fact sheet is its evidence; the prior's and the fact sheet's tasks are long,
# and are each file's [task]).
TODAY = {
    "reasoner": "Question:\n{question}\n\nSteps so far:\n{steps}\n\nWrite the next step only.",
    "visual": "Question:\n{question}\n\n{evidence}Previous steps:\n{steps}\n\n"
    "Step to check:\n<step>\n{step}\n</step>\n\n{reply}",
    "prior": "Question:\n{question}\n\n" + load_prompt("prior")["task"],
    "premises": "Question (it tells you what to look at; do not answer it):\n{question}\n\n"
    + load_prompt("premises")["task"],
    "premise_check": "Fact sheet:\n{facts}\n\nQuestion:\n{question}\n\nPrevious steps:\n{steps}\n\n"
    "Step to check:\n<step>\n"
    '{step}\n</step>\n\nReply with the JSON object only, in this form: {"claims": [{"claim": "<the '
    'claim, in a few words>", "label": "supported" or "contradicted" or "uncertain"}]}',
}
TODAY["zoom"] = "Question:\n{question}\n\nPrevious steps:\n{steps}\n\n" + load_prompt("zoom")["task"]
TODAY["reviser"] = "Question:\n{question}\n\nSteps so far:\n{steps}\n\n" + load_prompt("reviser")["task"]
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
        "Fact sheet:\n- objects: an apple\n\n" if role == "premise_check" else "Reference:\n- count them\n\n"
    )
    msgs = role_messages(
        role, STATE, "per-role", evidence if role in verdict.JUDGES + ("premise_check",) else "", **fields()
    )
    values = dict(
        question=STATE.question,
        steps="Step 1: There are apples.",
        evidence=evidence,
        facts="- objects: an apple",
        **fields(),
    )
    today = re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], TODAY[role])  # {"fact": ...} is no placeholder
    assert msgs == [{"role": "system", "content": msgs[0]["content"]}, {"role": "user", "content": today}]
    assert msgs[0]["content"].startswith(FIRST_WORDS[role])


def test_the_layouts_are_checked_and_role_of_knows_only_the_roles(png):
    client = Client("http://127.0.0.1:9/v1", "m")
    for make in (
        lambda: Reasoner(client, layout="flat"),
        lambda: Judge(client, "visual", layout="flat"),
        lambda: ModeCalls(client, layout="flat"),
        lambda: role_messages("visual", STATE, "flat"),
    ):
        with pytest.raises(
            ValueError, match="unknown layout 'flat'; expected one of shared, per-role, role-first"
        ):
            make()
    assert LAYOUTS == ("shared", "per-role", "role-first")
    extract = load_prompt("extract_choice")
    assert (
        role_of([{"role": "system", "content": extract.system}, {"role": "user", "content": "Letter:"}])
        is None
    )
    with_image = role_messages("logical", verdict.State("q", (png,)), step="x", reply="y")
    assert [p["type"] for p in with_image[1]["content"]] == ["image_url", "text"] and role_of(
        with_image
    ) == "logical"


def test_a_prompt_file_must_hold_known_sections_in_order(monkeypatch, tmp_path):
    monkeypatch.setattr(prompting, "PROMPTS", tmp_path)
    (tmp_path / "swapped.txt").write_text("[task]\nDo it.\n[instructions]\nYou do.\n[context]\n{question}\n")
    with pytest.raises(
        ValueError,
        match=r"swapped\.txt must hold the sections \[system\]\[user\] or "
        r"\[instructions\]\[context\]\[task\] or \[system\]\[question\]\[steps\], in "
        r"this order; it holds \[task\]\[instructions\]\[context\]",
    ):
        load_prompt("swapped")
    (tmp_path / "loose.txt").write_text("Some text first.\n[system]\nS.\n[user]\nU.\n")
    with pytest.raises(ValueError, match="it holds \\[system\\]\\[user\\]"):  # text before the first section
        load_prompt("loose")
    (tmp_path / "unknown.txt").write_text("[instructions]\nI.\n[context]\n{question}\n[task]\nT {nothing}.\n")
    with pytest.raises(ValueError, match=r"unknown\.txt: unknown placeholder \{nothing\}"):
        role_messages("unknown", STATE)
