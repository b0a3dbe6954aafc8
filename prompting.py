"""The prompts of VERDICT's roles and how each role's request is laid out, so that a server's prefix cache can
share the expensive part of a step's requests.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026. At every step the base reasoner and the three agents all read the
question, its images and the steps so far, then each does its own task (n candidates; n×m judgements). The
paper leaves the requests to an implementation; this module holds:

- prompt files (prompts/*.txt): named sections of text with {placeholders} (load_prompt);
- role_messages: a role's chat messages in one of three layouts (DEFAULT_LAYOUT: "role-first", by
  measurement). "shared": one system message for every role, then the images, the question and the previous
  steps, byte for byte the same for the reasoner, every judge and the judge modes' calls (modes/calls.py),
  then the role's own instructions and its task, the candidate last; a prefix cache (vLLM's automatic prefix
  caching, llama-server's slots) can then reuse everything up to the role across all the requests of a step.
  "per-role": the role's instructions as its own system message; prompts then differ from the first token,
  and each role's own prefix holds from one step to the next. "role-first" (the default): the shared system
  message, images and question, then the role's instructions before the previous steps, so that every role
  of an item shares its image and question, and a role's own prefix also holds from one step to the next
  (the instructions are not computed again each step).
Which role a request comes from is perf/loopback.py's role_of, for scripted servers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import verdict
from images import encode_image, messages

PROMPTS = Path(__file__).resolve().with_name("prompts")
SECTIONS = (  # the sections a prompt file may hold, in this order
    ("system", "user"),  # a plain prompt: a system message and a user message (harness/answers.py)
    (
        "instructions",
        "context",
        "task",
    ),  # a role of the step (reasoner, judges, judge modes); see role_messages
    ("system", "question", "steps"),  # shared.txt: what every role of a step reads in the shared layouts
)
LAYOUTS = ("shared", "per-role", "role-first")  # how a role's request is laid out; see role_messages
# every role's, demo.py's and evaluate.py's: whole chains with an image per item are fastest and compute the
# fewest tokens on the simulator, as each item's image is computed once, not once per role (per-role); on
# the text-only llama-server per-role computes fewer (docs/results.md, "Step overhead")
DEFAULT_LAYOUT = "role-first"
# the prompts role_messages lays out: the reasoner, the judges, the judge modes' calls and the reviser
ROLES = ("reasoner",) + verdict.JUDGES + ("prior", "premises", "premise_check", "zoom", "reviser")


@dataclass(frozen=True)
class Prompt:
    """A prompt file: named sections of text (SECTIONS), the templates with {placeholders}."""

    sections: tuple  # ((name, text), ...)
    path: str

    def __getitem__(self, name: str) -> str:
        return dict(self.sections)[name]

    @property
    def system(self) -> str:
        return self["system"]

    def render(self, section: str = "user", **fields: str) -> str:
        """The section's template with its {placeholders} filled from fields (fields it does not name are
        ignored; a placeholder with no field is a ValueError); other braces in the file are left alone."""

        def fill(m):
            if m.group(1) not in fields:
                raise ValueError(
                    f"{self.path}: unknown placeholder {{{m.group(1)}}}; known: {sorted(fields)}"
                )
            return fields[m.group(1)]

        return re.sub(r"\{(\w+)\}", fill, self[section])


@lru_cache(maxsize=None)
def load_prompt(name: str) -> Prompt:
    """prompts/{name}.txt; ValueError when it cannot be read or its sections are not one of SECTIONS."""
    path = PROMPTS / f"{name}.txt"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ValueError(f"no prompt {name!r}: cannot read {path} ({e.strerror})") from None
    parts = re.split(r"(?m)^\[(\w+)\][ \t]*\n", text)
    names = tuple(parts[1::2])
    if parts[0].strip() or names not in SECTIONS:
        expected = " or ".join("".join(f"[{n}]" for n in names) for names in SECTIONS)
        raise ValueError(
            f"{path} must hold the sections {expected}, in this order; it holds "
            f"{''.join(f'[{n}]' for n in names) or 'none'}"
        )
    return Prompt(tuple(zip(names, (p.strip() for p in parts[2::2]))), str(path))


def check_layout(layout: str) -> str:
    """layout, if it is one of LAYOUTS; else ValueError naming it."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; expected one of {', '.join(LAYOUTS)}")
    return layout


def steps_text(steps: Sequence[str]) -> str:
    """The previous steps as the prompts show them: "Step 1: ..." lines, or "(none yet)"."""
    return "\n".join(f"Step {i}: {s}" for i, s in enumerate(steps, 1)) or "(none yet)"


def role_messages(
    name: str,
    state: verdict.State,
    layout: str = DEFAULT_LAYOUT,
    evidence: str = "",
    images: Sequence | None = None,
    looks: Sequence = (),
    **fields: str,
) -> list:
    """The chat messages of role `name` (a prompt with [instructions], [context] and [task]) about `state`:
    its question, images (or `images`) and previous steps, then its task's `fields` (the candidate, the reply
    format, ...) and `evidence` (what this role reads of a judge mode: the prior, the fact sheet; "" for
    none).

    shared     : [shared.txt's system message, the same for every role] and one user message: the images,
                 then, joined by blank lines, shared.txt's question and steps (the same text for every role of
                 a step), the role's instructions, and the evidence followed by the role's task.
    per-role   : [the role's instructions] and one user message: the images, then the role's own context (with
                 the evidence where it says {evidence}) and its task, joined by a blank line.
    role-first : as shared, with the role's instructions and the evidence before the steps: the question, the
                 instructions, the evidence followed by the steps, the task.
    Each role reads the same instructions and task in each. The images go where images.messages puts them
    (first, or at the question's <image k>). `looks` (close-ups, grounding's zoom mode) go just before the
    task, after the evidence, so that everything before them is the request it would be without them.
    """
    check_layout(layout)
    role, shared, steps = load_prompt(name), load_prompt("shared"), steps_text(state.steps)
    task = role.render("task", **fields)
    if layout == "per-role":
        system = role["instructions"]
        parts = [role.render("context", question=state.question, steps=steps, evidence=evidence), task]
    else:
        system = shared.system
        question, previous = (
            shared.render("question", question=state.question),
            shared.render("steps", steps=steps),
        )
        parts = (
            [question, previous, role["instructions"], evidence + task]
            if layout == "shared"
            else [question, role["instructions"], evidence + previous, task]
        )
    msgs = messages(
        system, state.images if images is None else images, "\n\n".join(parts), question=state.question
    )
    return with_looks(msgs, looks, task) if looks else msgs


def with_looks(msgs: list, looks: Sequence, task: str) -> list:
    """msgs with the images `looks` inserted in the user message just before its closing `task`."""
    content = msgs[1]["content"]
    content = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    head = content[-1]["text"][: -len(task)]  # the task is the user text's last part in every layout
    urls = [{"type": "image_url", "image_url": {"url": encode_image(im)}} for im in looks]
    return [
        msgs[0],
        {
            "role": "user",
            "content": content[:-1]
            + [{"type": "text", "text": head}]
            + urls
            + [{"type": "text", "text": task}],
        },
    ]
