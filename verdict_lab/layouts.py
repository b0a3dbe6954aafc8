"""How a role's request is laid out, so that a server's prefix cache can share the expensive part of
a step's requests: the layouts beside judges.role_first, MMMU's image placement and the zoom mode's
close-ups.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026. At every step the base reasoner and the three agents all
read the question, its images and the steps so far, then each does its own task (n candidates; n×m
judgements). The paper leaves the requests to an implementation. A layout is a function (name,
state, note="", images=None, max_pixels=..., **fields) -> messages, as judges.role_first is:

- "role-first" (judges.role_first, the default, by measurement: docs/results.md): the prompts'
  common system message, the images and the question, then the role's instructions before the
  previous steps, so every role of an item shares its image and question, and a role's own prefix
  holds from one step to the next;
- "shared": the same system message, images, question and previous steps, byte for byte, for every
  role of a step, then the role's instructions and its task, so a prefix cache reuses all of that
  across the requests of a step;
- "per-role": the role's instructions as its own system message; prompts then differ from the
  first token, and each role's own prefix holds from one step to the next.

The reasoner's and the judges' prompts are judges.py's (prompts/); the judge modes', the reviser's
and the answer extraction's are this folder's (verdict_lab/prompts/, prompt_of). Every layout sends
its images as verdict_lab.images encodes them. placed(layout) puts each image where the question
names it as <image k> (MMMU); with_looks adds close-ups just before a judge's task; role_of tells
which role a request comes from (for scripted servers).
"""

from __future__ import annotations

import re
from functools import lru_cache, partial
from pathlib import Path
from typing import Callable, Sequence

import verdict
from judges import (
    MAX_PIXELS,
    ROLE,
    Prompt,
    chat_messages,
    load_prompt,
    read_prompt,
    role_first,
    steps_text,
)
from verdict_lab.images import encode as encode_image

# A question's k-th image, where the question names it (MMMU).
PLACEHOLDER = re.compile(r"<image (\d+)>")
LAB_PROMPTS = Path(__file__).resolve().parent / "prompts"
# The roles a layout lays out: the reasoner, the judges, the judge modes' calls and the reviser.
LAB_ROLES = ("prior", "premises", "premise_check", "zoom", "reviser")
ROLES = ("reasoner",) + verdict.JUDGES + LAB_ROLES
DEFAULT_LAYOUT = "role-first"


# The folder's prompt files, each read once (keyed by its path, so a test may move LAB_PROMPTS).
_read = lru_cache(maxsize=None)(read_prompt)


def prompt_of(name: str) -> Prompt:
    """The prompt of role `name`: judges.py's for the reasoner and the judges; for this folder's
    roles, their [instructions] and [task] (verdict_lab/prompts/{name}.txt), with the [system],
    [question] and [steps] every role shares (those of prompts/reasoner.txt)."""
    if name not in LAB_ROLES:
        return load_prompt(name)
    own = _read(LAB_PROMPTS / f"{name}.txt", (("instructions", "context", "task"),))
    common = load_prompt("reasoner")
    sections = {k: common[k] for k in ("system", "question", "steps")}
    sections.update(instructions=own["instructions"], task=own["task"])
    return Prompt(tuple((k, sections[k]) for k in ROLE), own.path)


def lab_prompt(name: str) -> Prompt:
    """verdict_lab/prompts/{name}.txt: a plain prompt of a [system] and a [user] section."""
    return _read(LAB_PROMPTS / f"{name}.txt", (("system", "user"),))


def per_role_context(name: str) -> tuple:
    """(the context the per-role layout shows role `name`, with {question}, {note} and {steps};
    the file that holds it): a lab role's own [context], or the section `name` of per_role.txt."""
    if name in LAB_ROLES:
        own = _read(LAB_PROMPTS / f"{name}.txt", (("instructions", "context", "task"),))
        return own["context"], own.path
    contexts = _read(LAB_PROMPTS / "per_role.txt", (("reasoner",) + verdict.JUDGES,))
    if name not in dict(contexts.sections):
        raise ValueError(f"{contexts.path} has no context for the role {name!r}")
    return contexts[name], contexts.path


def _ending(role: Prompt, reply: str | None, fields: dict) -> str:
    """The role's task with its fields, and for a judge the reply it asks for."""
    task = role.render("task", **fields)
    if "reply" not in dict(role.sections):  # not a judge
        return task
    return task + "\n\n" + (role["reply"] if reply is None else reply)


def role_first_of(
    name: str, state: verdict.State, note: str = "", images=None, max_pixels=MAX_PIXELS, **fields
):
    """judges.role_first, for this folder's roles too (prompt_of)."""
    urls = encoded(state, images, max_pixels)
    return role_first(prompt_of(name), state, note, urls, max_pixels, **fields)


def shared(
    name: str,
    state: verdict.State,
    note: str = "",
    images=None,
    max_pixels=MAX_PIXELS,
    reply: str | None = None,
    **fields,
):
    """The common system message and one user message: the images, then the question and the
    previous steps (the same text for every role of a step), the role's instructions, and `note`
    followed by its task."""
    role = prompt_of(name)
    parts = [
        role.render("question", question=state.question),
        role.render("steps", steps=steps_text(state.steps)),
        role["instructions"],
        note + _ending(role, reply, fields),
    ]
    urls = encoded(state, images, max_pixels)
    return chat_messages(role["system"], urls, "\n\n".join(parts), max_pixels)


def per_role(
    name: str,
    state: verdict.State,
    note: str = "",
    images=None,
    max_pixels=MAX_PIXELS,
    reply: str | None = None,
    **fields,
):
    """The role's instructions as the system message, and one user message: the images, then the
    role's own context (with `note` where it says {note}) and its task, joined by a blank line."""
    role = prompt_of(name)
    context, path = per_role_context(name)
    if note and "{note}" not in context:  # the note would be lost without a word
        raise ValueError(
            f"{path} has no {{note}} placeholder for {name}, so it cannot show the role its note"
        )
    fill = dict(question=state.question, steps=steps_text(state.steps), note=note)
    context = re.sub(r"\{(\w+)\}", lambda m: fill[m.group(1)], context)
    text = context + "\n\n" + _ending(role, reply, fields)
    return chat_messages(role["instructions"], encoded(state, images, max_pixels), text, max_pixels)


def encoded(state: verdict.State, images, max_pixels: int) -> list:
    """The data URLs of `images` (state's, when None), as verdict_lab.images encodes them: 16-bit
    and transparent images shown as they look, and each file encoded once."""
    return [encode_image(im, max_pixels) for im in (state.images if images is None else images)]


LAYOUTS = {"role-first": role_first_of, "shared": shared, "per-role": per_role}


def check_layout(name: str) -> str:
    """name, if it is one of LAYOUTS; else ValueError naming it."""
    if name not in LAYOUTS:
        raise ValueError(f"unknown layout {name!r}; expected one of {', '.join(LAYOUTS)}")
    return name


def layout(name: str = DEFAULT_LAYOUT, max_pixels: int = MAX_PIXELS) -> Callable:
    """The layout `name` at the pixel budget max_pixels, with each image placed where the question
    names it."""
    return placed(partial(LAYOUTS[check_layout(name)], max_pixels=max_pixels))


def placed(lay_out: Callable) -> Callable:
    """lay_out, with MMMU's placement (VLMEvalKit's split_MMMU): when the question names images as
    <image k>, its first occurrence in the user text is cut at each marker and the k-th image goes
    there; an image the question never names is left out, one named twice is sent twice. ValueError
    when it names an image that is not there, or when the text does not hold the question."""

    def laid_out(name: str, state: verdict.State, note: str = "", **kw) -> list:
        msgs = lay_out(name, state, note, **kw)
        content = msgs[1]["content"]
        if isinstance(content, str) or not PLACEHOLDER.search(state.question):
            return msgs
        # The images, without the labels between them.
        urls = [p for p in content[:-1] if p["type"] == "image_url"]
        text = content[-1]["text"]
        before, found, after = text.partition(state.question)
        if not found:  # a layout's bug: the question is not in its text
            raise ValueError(f"the text does not hold the question {state.question[:60]!r}")
        pieces = PLACEHOLDER.split(state.question)  # text, k, text, k, ..., text
        named = [int(k) for k in pieces[1::2]]
        if not all(1 <= k <= len(urls) for k in named):
            raise ValueError(
                f"the question names <image {max(named)}> but there are {len(urls)} image(s)"
            )
        parts = [before + pieces[0]]
        for k, piece in zip(named, pieces[2::2]):
            parts += [urls[k - 1], piece]
        parts[-1] += after
        content = [
            p if isinstance(p, dict) else {"type": "text", "text": p} for p in parts if p != ""
        ]
        return [msgs[0], {"role": "user", "content": content}]

    return laid_out


def with_looks(msgs: list, looks: Sequence, task: str, max_pixels: int = MAX_PIXELS) -> list:
    """msgs with the images `looks` (close-ups) in the user message just before its closing `task`
    (the last part of the text in every layout), so that everything before them is the request
    without them. From the second on, each close-up follows its label "Close-up k:": no two images
    are adjacent (on llama-server, a cached prompt [A][B][text] makes a later [A][text] fail with
    HTTP 500 "Chunk not found")."""
    content = msgs[1]["content"]
    content = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    text = lambda t: {"type": "text", "text": t}
    url = lambda im: {"type": "image_url", "image_url": {"url": encode_image(im, max_pixels)}}
    urls = [
        part
        for k, im in enumerate(looks, 1)
        for part in ([text(f"Close-up {k}:")] if k > 1 else []) + [url(im)]
    ]
    head = content[-1]["text"][: -len(task)]
    return [msgs[0], {"role": "user", "content": content[:-1] + [text(head)] + urls + [text(task)]}]


def role_of(msgs: Sequence[dict]) -> str | None:
    """Which role of ROLES a request's messages come from, in any layout (its instructions are the
    system message, or are in the user message); None for any other request."""
    content = [m.get("content") for m in msgs[:2]]
    text = "\n".join(
        c if isinstance(c, str) else "".join(p.get("text", "") for p in c) for c in content if c
    )
    return next((name for name in ROLES if prompt_of(name)["instructions"] in text), None)
