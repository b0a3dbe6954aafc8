"""Revise on reject, after ReVISE (which VERDICT does not have): when every candidate of a step
fails the rule's filter, one more request rewrites the best rejected candidate from the judges'
reasons.

verdict_lab.loop.step calls the Reviser; the same judges score its step, which is taken only if it
passes the filter.
"""

from __future__ import annotations

import re
from typing import Sequence

import verdict
from judges import STOP, fence, one_step, text_of
from verdict_lab.layouts import role_first_of
from verdict_lab.text import one_line


class Reviser:
    """revise(state, step) -> one revised step, or None: the reviser prompt over the best rejected
    candidate and what each judge said about it."""

    def __init__(self, client, judges: Sequence, max_tokens=256, seed=0, layout=role_first_of):
        self.client = client
        self.judges = judges
        self.layout = layout
        self.max_tokens = max_tokens
        self.seed = seed

    def checks(self, step) -> str:
        """One line per judge: its name, its raw score of the chosen candidate and that call's
        reason. `step` is a verdict_lab.loop.Step."""
        s_hat = step.s_hat[step.selection.index]  # [m]
        calls = step.calls[step.selection.index] if step.calls else (None,) * len(s_hat)  # [m]
        lines = []
        for k, (judge, s, call) in enumerate(zip(self.judges, s_hat, calls)):
            default = verdict.JUDGES[k] if len(s_hat) == len(verdict.JUDGES) else f"judge {k + 1}"
            name = getattr(judge, "name", None) or default
            why = one_line((call or {}).get("reason") or "(no reason given)", 400)
            score = "no score (abstained)" if s != s else f"score {s:.2f}"
            lines.append(f"- {name} checker, {score}: {why}")
        return "\n".join(lines)

    def __call__(self, state: verdict.State, step) -> str | None:
        msgs = self.layout(
            "reviser", state, step=fence(step.chosen), checks=fence(self.checks(step))
        )
        r = self.client.chat(
            msgs, temperature=0.0, seed=self.seed, stop=STOP, max_tokens=self.max_tokens
        )
        # The reviser may echo the fence around its step; the tags are no part of the step.
        return one_step(re.sub(r"(?i)</?step>", "", text_of(r))) or None
