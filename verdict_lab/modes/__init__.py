"""The judge modes of the related papers, by name (JudgeMode).

A judge mode changes what VERDICT's judges see, never the consensus: SGV's prior ("prior"), EVPV's
fact sheet ("premises") and reliability gate ("gate", "gate-visual"), ReVISE's look again ("zoom").
JudgeMode names a combination; modes/judge.py makes its calls for a chain (ModeChain) and wraps each
judge in it (ModeJudge); modes/evpv.py and modes/zoom.py hold its pure parts, modes/rewards.py
ReVISE's training rewards. Nothing here makes a request.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from verdict_lab.modes.evpv import GATE_TARGET, GATE_TARGETS

MODES = ("prior", "premises", "gate", "zoom")
MODE_MAX_TOKENS = 512  # tokens per prior, fact-sheet, premise-check and region-request reply


@dataclass(frozen=True)
class JudgeMode:
    """Which modes are on. JudgeMode() is plain VERDICT. `name` is "plain", "prior",
    "premises+gate", ...; the gate's word is "gate" for the default target (GATE_TARGET), else
    "gate-<target>"."""

    prior: bool = False
    premises: bool = False
    gate: bool = False
    gate_target: str = GATE_TARGET
    zoom: bool = False

    def __post_init__(self):
        if self.gate and not self.premises:  # the gate checks steps against the fact sheet
            raise ValueError(
                "the gate needs the premises mode (its fact sheet), got gate=True, premises=False"
            )
        if self.gate_target not in GATE_TARGETS:
            raise ValueError(
                f"gate_target must be one of {', '.join(GATE_TARGETS)}, "
                f"got gate_target={self.gate_target!r}"
            )
        # A target without its gate would give the mode a name that lies.
        if self.gate_target != GATE_TARGET and not self.gate:
            raise ValueError(f"gate_target={self.gate_target!r} needs the gate, got gate=False")

    @property
    def active(self) -> bool:
        return self.prior or self.premises or self.zoom

    def gates(self, judge: str) -> bool:
        """Whether the gate acts on this judge's scores."""
        return self.gate and (self.gate_target == "step" or judge == "visual")

    @property
    def name(self) -> str:
        gate = "gate" if self.gate_target == GATE_TARGET else f"gate-{self.gate_target}"
        return "+".join(gate if k == "gate" else k for k in MODES if getattr(self, k)) or "plain"

    @classmethod
    def parse(cls, text: str) -> "JudgeMode":
        """ "prior,premises,gate", "premises+gate-visual" (any order); "" or "plain" is plain
        VERDICT. parse(mode.name) == mode for every mode."""
        vocabulary = MODES + tuple(f"gate-{t}" for t in GATE_TARGETS)
        words = [w.strip() for w in re.split(r"[,+]", text or "") if w.strip() not in ("", "plain")]
        gates = [w for w in words if w.startswith("gate")]
        if (
            any(w not in vocabulary for w in words)
            or len(set(words)) != len(words)
            or len(gates) > 1
        ):
            raise ValueError(
                f"judge mode {text!r}: expected distinct words from {', '.join(vocabulary)}, "
                "one gate word at most"
            )
        kw = {w: True for w in words if w not in gates}
        if gates:
            kw.update(gate=True, gate_target=gates[0].partition("-")[2] or GATE_TARGET)
        return cls(**kw)
