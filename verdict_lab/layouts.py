"""How a role's request is laid out, so that a server's prefix cache can share the expensive part of a
step's requests: the layouts beside judges.role_first, MMMU's image placement and the zoom mode's close-ups.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026. At every step the base reasoner and the three agents all read the
question, its images and the steps so far, then each does its own task (n candidates; n×m judgements). The
paper leaves the requests to an implementation. A layout is a function (name, state, note="", images=None,
max_pixels=..., **fields) -> messages, as judges.role_first is:

- "role-first" (judges.role_first, the default, by measurement: docs/results.md): shared.txt's system
  message, the images and the question, then the role's instructions before the previous steps, so every
  role of an item shares its image and question, and a role's own prefix holds from one step to the next;
- "shared": the same system message, images, question and previous steps, byte for byte, for every role
  of a step, then the role's instructions and its task, so a prefix cache reuses all of that across the
  requests of a step;
- "per-role": the role's instructions as its own system message; prompts then differ from the first token,
  and each role's own prefix holds from one step to the next.

placed(layout) puts each image where the question names it as <image k> (MMMU); with_looks adds close-ups
just before a judge's task; role_of tells which role a request comes from (for scripted servers).
"""

from __future__ import annotations

import re
from functools import partial
from typing import Callable, Sequence

import verdict
from judges import MAX_PIXELS, encode_image, chat_messages, load_prompt, role_first, steps_text

PLACEHOLDER = re.compile(r"<image (\d+)>")  # a question's k-th image, where the question names it (MMMU)
# the prompts a layout lays out: the reasoner, the judges, the judge modes' calls and the reviser
ROLES = ("reasoner",) + verdict.JUDGES + ("prior", "premises", "premise_check", "zoom", "reviser")
DEFAULT_LAYOUT = "role-first"


def shared(name: str, state: verdict.State, note: str = "", images=None, max_pixels=MAX_PIXELS, **fields):
    """shared.txt's system message and one user message: the images, then shared.txt's question and steps
    (the same text for every role of a step), the role's instructions, and `note` followed by its task."""
    role, common = load_prompt(name), load_prompt("shared")
    parts = [
        common.render("question", question=state.question),
        common.render("steps", steps=steps_text(state.steps)),
        role["instructions"],
        note + role.render("task", **fields),
    ]
    images = state.images if images is None else images
    return chat_messages(common["system"], images, "\n\n".join(parts), max_pixels)


def per_role(name: str, state: verdict.State, note: str = "", images=None, max_pixels=MAX_PIXELS, **fields):
    """The role's instructions as the system message, and one user message: the images, then the role's own
    context (with `note` where it says {note}) and its task, joined by a blank line."""
    role = load_prompt(name)
    if note and "{note}" not in role["context"]:  # the note would be lost without a word
        raise ValueError(f"{role.path} has no {{note}} placeholder, so it cannot show the role its note")
    context = role.render("context", question=state.question, steps=steps_text(state.steps), note=note)
    images = state.images if images is None else images
    return chat_messages(
        role["instructions"], images, context + "\n\n" + role.render("task", **fields), max_pixels
    )


LAYOUTS = {"role-first": role_first, "shared": shared, "per-role": per_role}


def check_layout(name: str) -> str:
    """name, if it is one of LAYOUTS; else ValueError naming it."""
    if name not in LAYOUTS:
        raise ValueError(f"unknown layout {name!r}; expected one of {', '.join(LAYOUTS)}")
    return name


def layout(name: str = DEFAULT_LAYOUT, max_pixels: int = MAX_PIXELS) -> Callable:
    """The layout `name` at the pixel budget max_pixels, its images placed where the question names them."""
    return placed(partial(LAYOUTS[check_layout(name)], max_pixels=max_pixels))


def placed(lay_out: Callable) -> Callable:
    """lay_out, with MMMU's placement (VLMEvalKit's split_MMMU): when the question names images as <image k>,
    its first occurrence in the user text is cut at each marker and the k-th image goes there; an image the
    question never names is left out, one named twice is sent twice. ValueError when it names an image that
    is not there, or when the text does not hold the question."""

    def laid_out(name: str, state: verdict.State, note: str = "", **kw) -> list:
        msgs = lay_out(name, state, note, **kw)
        content = msgs[1]["content"]
        if isinstance(content, str) or not PLACEHOLDER.search(state.question):
            return msgs
        urls = [p for p in content[:-1] if p["type"] == "image_url"]  # without the labels between them
        text = content[-1]["text"]
        before, found, after = text.partition(state.question)
        if not found:  # a layout's bug: the question is not in its text
            raise ValueError(f"the text does not hold the question {state.question[:60]!r}")
        pieces = PLACEHOLDER.split(state.question)  # text, k, text, k, ..., text
        named = [int(k) for k in pieces[1::2]]
        if not all(1 <= k <= len(urls) for k in named):
            raise ValueError(f"the question names <image {max(named)}> but there are {len(urls)} image(s)")
        parts = [before + pieces[0]]
        for k, piece in zip(named, pieces[2::2]):
            parts += [urls[k - 1], piece]
        parts[-1] += after
        content = [p if isinstance(p, dict) else {"type": "text", "text": p} for p in parts if p != ""]
        return [msgs[0], {"role": "user", "content": content}]

    return laid_out


def with_looks(msgs: list, looks: Sequence, task: str, max_pixels: int = MAX_PIXELS) -> list:
    """msgs with the images `looks` (close-ups) in the user message just before its closing `task` (the
    last part of the text in every layout), so that everything before them is the request without them.
    From the second on, each close-up follows its label "Close-up k:": no two images are adjacent (on
    llama-server, a cached prompt [A][B][text] makes a later [A][text] fail with HTTP 500 "Chunk not
    found")."""
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
    """Which role of ROLES a request's messages come from, in any layout (its instructions are the system
    message, or are in the user message); None for any other request."""
    content = [m.get("content") for m in msgs[:2]]
    text = "\n".join(c if isinstance(c, str) else "".join(p.get("text", "") for p in c) for c in content if c)
    return next((name for name in ROLES if load_prompt(name)["instructions"] in text), None)
