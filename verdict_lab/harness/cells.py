"""TSV cells as VLMEvalKit reads them: pandas.read_csv(f, sep='\\t') with its defaults, without
pandas.

Sinha et al., "VERDICT: Training-Free Step-Wise Verification of Multimodal Reasoning via
Disagreement-Aware Consensus", ECCV 2026, scores its benchmarks with VLMEvalKit, which reads a TSV
with pandas' defaults (vlmeval/smp/file.py at e8e78f05). docs/parity.md writes the rules down; here
they are:

- a cell in NA_VALUES (exactly, not stripped) is a missing value: no option, no hint, "nan" when
  printed;
- a column whose other cells all parse as integers is int64 ("01" prints "1"), and float64 if it
  also holds a missing value ("1" prints "1.0"); all numbers with one float among them: float64;
  every cell missing: float64; all True/TRUE/true/False/FALSE/false: bool ("true" prints "True"),
  object if one is missing;
- a number may have spaces around it; any other cell is kept as written, never stripped.
"""

from __future__ import annotations

import re

NA_VALUES = frozenset(
    (
        "|#N/A|#N/A N/A|#NA|-1.#IND|-1.#QNAN|-NaN|-nan|1.#IND|1.#QNAN|<NA>|N/A|NA|NULL|NaN|None"
        "|n/a|nan|null"
    ).split("|")
)
_INT = re.compile(r"\s*[+-]?\d+\s*")
_FLOAT = re.compile(r"\s*[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf|infinity)\s*", re.I)
TRUE, FALSE = ("True", "TRUE", "true"), ("False", "FALSE", "false")
INT64 = 2**63


class Column:
    """What a column's cells make of it: feed every cell (note), then read dtype."""

    def __init__(self):
        self.na = self.n = 0
        self.ints = self.floats = self.bools = True
        self.big = (
            False  # an integer outside int64 (pandas keeps it as text, or uint64 up to 2**64 - 1)
        )

    def note(self, cell: str) -> None:
        self.n += 1
        if cell in NA_VALUES:
            self.na += 1
            return
        is_int = bool(_INT.fullmatch(cell))
        if is_int and not -INT64 <= int(cell) < 2 * INT64:
            self.big = True
        self.ints = self.ints and is_int
        self.floats = self.floats and (is_int or bool(_FLOAT.fullmatch(cell)))
        self.bools = self.bools and cell in TRUE + FALSE

    @property
    def dtype(self) -> str:
        """ "int", "float", "bool" or "object" (text; a bool column with a missing value is object
        too)."""
        if self.na == self.n:
            return "float"
        if self.ints and not self.big:
            return "float" if self.na else "int"
        if self.floats and not self.ints:
            return "float"
        if self.bools:
            return "object-bool" if self.na else "bool"
        return "object"


def value(cell: str, dtype: str):
    """The value pandas holds for a cell of a column of `dtype`: None (missing), int, float, bool or
    str."""
    if cell in NA_VALUES:
        return None
    if dtype == "int":
        return int(cell)
    if dtype == "float":
        return float(cell)
    if dtype in ("bool", "object-bool"):
        return cell in TRUE
    return cell


def shown(cell: str, dtype: str) -> str | None:
    """The cell as VLMEvalKit prints it (str() of pandas' value: "1.0", "True"); None when
    missing."""
    v = value(cell, dtype)
    return None if v is None else str(v)


def mangle(names: list) -> list:
    """pandas' names for a header with repeats: the second "A" is "A.1" (or "A.2" if "A.1" is
    taken)."""
    out, seen = [], set(names)
    for n in names:
        if n in out:
            k = 1
            while f"{n}.{k}" in seen or f"{n}.{k}" in out:
                k += 1
            n = f"{n}.{k}"
        out.append(n)
    return out
