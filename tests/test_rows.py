"""Tests for harness/rows.py: a Row survives JSON both ways, a malformed row is a ValueError that
names the field, and a method name has one spelling that parse and str agree on."""

import json
import math
import re
from dataclasses import fields

import pytest

import verdict
from verdict_lab import loop
from verdict_lab.harness.rows import ROW_FORMAT, Method, Row
from verdict_lab.modes import JudgeMode


def full_row() -> dict:
    """A row as results.jsonl holds it, every field set away from its default."""
    return {
        "format": ROW_FORMAT,
        "data": "MMStar",
        "id": "17",
        "row": 19,
        "seed": 2,
        "method": "verdict+premises+gate+revise",
        "answer": "B",
        "pred": "B",
        "extracted": "letter",
        "correct": True,
        "prediction": "Final answer: B",
        "stopped": "final",
        "error": None,
        "calls": 40,
        "sent": 31,
        "cached": 9,
        "replies": 31,
        "tokens": 5120,
        "seconds": 2.5,
        "extra_calls": 4,
        "extra_tokens": 800,
        "fact_sheet_status": "retried",
        "gate_checks": 3,
        "zoom_requests": 0,
        "revisions": 2,
        "revised": 1,
        "revise_calls": 7,
        "revise_tokens": 900,
        "zoomed": 0,
        "extract_calls": 1,
        "extract_tokens": 30,
        "reasoner_calls": 6,
        "reasoner_tokens": 1400,
        "judge_calls": 27,
        "input_digest": "0123456789abcdef0123456789abcdef",
        "input": {"index": "17", "category": "math"},
        "trace": {
            "format": loop.TRACE_FORMAT,
            "steps": [],
            "totals": {"steps": 2, "fallbacks": 1, "abstentions": 0, "judge_calls": 18},
        },
    }


def test_round_trip_keeps_every_key_in_the_files_order():
    d = full_row()
    row = Row.from_json(json.loads(json.dumps(d)))
    assert row.correct is True and row.method == Method(
        "verdict", JudgeMode(premises=True, gate=True), True
    )
    assert row.key == ("MMStar", "17", 2, "verdict+premises+gate+revise")
    assert row.to_json() == d and list(row.to_json()) == list(d)  # the same keys, in the same order
    assert json.dumps(row.to_json()) == json.dumps(
        d
    )  # so results.jsonl is byte for byte what it was
    assert Row.from_json(row.to_json()) == row
    assert list(d)[1:] == [
        f.name for f in fields(Row)
    ]  # every field is a key, and every key a field


def test_a_row_written_before_the_later_fields_reads_their_defaults():
    later = (
        "extra_calls",
        "extra_tokens",
        "fact_sheet_status",
        "gate_checks",
        "zoom_requests",
        "revisions",
        "revised",
        "revise_calls",
        "revise_tokens",
        "zoomed",
        "extract_calls",
        "extract_tokens",
        "reasoner_calls",
        "reasoner_tokens",
        "judge_calls",
    )
    old = {k: v for k, v in full_row().items() if k not in later}
    row = Row.from_json(old)
    assert (row.extra_calls, row.revisions, row.fact_sheet_status, row.extract_tokens) == (
        0,
        0,
        None,
        0,
    )
    assert (row.reasoner_calls, row.reasoner_tokens, row.judge_calls) == (0, 0, 0)


@pytest.mark.parametrize(
    "field, value, said",
    [
        ("correct", "yes", "must be a bool, got 'yes'"),
        ("correct", 1, "must be a bool, got 1"),
        ("id", 17, "must be a str, got 17"),
        ("row", "19", "must be an int, got '19'"),
        ("seed", -1, "must be >= 0, got -1"),
        ("calls", True, "must be an int, got True"),  # a bool is not a count
        ("seconds", math.nan, "must be a finite number >= 0"),
        ("seconds", "2.5", "must be a number, got '2.5'"),
        ("pred", 3, "must be a str or null, got 3"),
        ("input", None, "must be a dict, got None"),
        ("trace", [], "must be a dict or null, got []"),
        ("extracted", "guessed", "must be one of letter, text"),
        ("fact_sheet_status", "fine", "must be one of ok, retried, degraded or null"),
        ("method", "base+zoom", "base runs no judges"),
        ("method", "verdict+zoom+prior", "is spelled 'verdict+prior+zoom'"),
        ("method", None, "a method name is a string"),
    ],
)
def test_a_malformed_field_is_a_value_error_naming_it(field, value, said):
    with pytest.raises(ValueError, match=f"row field '{field}'") as e:
        Row.from_json({**full_row(), field: value})
    assert said in str(e.value)


def test_a_missing_or_unknown_field_another_format_or_no_object_is_named():
    d = full_row()
    with pytest.raises(ValueError, match="row field 'correct' is missing"):
        Row.from_json({k: v for k, v in d.items() if k != "correct"})
    with pytest.raises(ValueError, match="row field 'colour' is not a field of verdict-eval-row/3"):
        Row.from_json({**d, "colour": "red"})
    with pytest.raises(ValueError, match="row field 'input_digest' is missing"):
        Row.from_json({k: v for k, v in d.items() if k != "input_digest"})
    with pytest.raises(
        ValueError, match="a row of format 'verdict-eval-row/1', not 'verdict-eval-row/3'"
    ):
        Row.from_json({**d, "format": "verdict-eval-row/1"})
    with pytest.raises(ValueError, match="a row is a JSON object, got list"):
        Row.from_json([d])


def test_a_row_of_another_format_is_refused_and_one_without_a_digest_reads_as_of_unknown_input():
    old = {k: v for k, v in full_row().items() if k != "input_digest"}
    with pytest.raises(
        ValueError, match="a row of format 'verdict-eval-row/2', not 'verdict-eval-row/3'"
    ):
        Row.from_json({**old, "format": "verdict-eval-row/2"})
    row = Row.from_json({**full_row(), "input_digest": None})  # null: a row whose input is unknown
    assert row.input_digest is None and row.key == (
        "MMStar",
        "17",
        2,
        "verdict+premises+gate+revise",
    )
    assert Row.from_json(row.to_json()) == row


def test_a_row_built_in_code_is_checked_too():
    row = Row.from_json(full_row())
    with pytest.raises(ValueError, match="row field 'method' must be a Method, got 'verdict'"):
        Row(**{f.name: getattr(row, f.name) for f in fields(Row)} | {"method": "verdict"})


MODES = [
    JudgeMode(),
    JudgeMode(prior=True),
    JudgeMode(premises=True),
    JudgeMode(premises=True, gate=True),
    JudgeMode(premises=True, gate=True, gate_target="visual"),
    JudgeMode(zoom=True),
    JudgeMode(prior=True, premises=True, zoom=True),
]


@pytest.mark.parametrize("rule", ("base",) + verdict.RULES)
def test_method_parse_and_str_round_trip(rule):
    judged = [(mode, revise) for mode in MODES for revise in (False, True)]
    methods = (
        [Method(rule)]
        if rule == "base"
        else [Method(rule, mode, revise) for mode, revise in judged]
    )
    for m in methods:
        assert Method.parse(str(m)) == m and str(Method.parse(str(m))) == str(m)
        assert m.judged == (rule != "base") and m.plain == (m.mode == JudgeMode() and not m.revise)
    assert str(Method("verdict", JudgeMode(zoom=True), True)) == "verdict+zoom+revise"
    visual_gate = JudgeMode(premises=True, gate=True, gate_target="visual")
    assert str(Method("mean", visual_gate)) == "mean+premises+gate-visual"
    assert Method.parse("verdict+revise") == Method("verdict", JudgeMode(), True)


@pytest.mark.parametrize(
    "name, said",
    [
        ("", "unknown rule ''"),
        ("verdictt", "unknown rule 'verdictt'"),
        ("revise", "unknown rule 'revise'"),
        ("verdict+zap", "judge mode 'zap'"),
        ("verdict+revise+zoom", "judge mode 'revise+zoom'"),  # +revise comes last
        ("verdict+gate", "the gate needs the premises mode"),
        ("base+prior", "base runs no judges"),
        ("base+revise", "base runs no judges"),
        ("verdict+plain", "is spelled 'verdict'"),  # one name per method: one row key
        ("verdict+premises,prior", "is spelled 'verdict+prior+premises'"),
        ("verdict+revise+revise", "judge mode 'revise'"),
        ("bon0+last+key", "N must be an integer >= 1, got N=0"),
        ("wbon-1+last+key", "N must be an integer >= 1, got N=-1"),
        ("maj0", "N must be an integer >= 1, got N=0"),
        ("beam0x3+last+key", "W must be an integer >= 1, got W=0"),
        ("beam2x0+last+key", "E must be an integer >= 1, got E=0"),
        ("bon8+median+key", "unknown aggregate 'median'; expected one of last, min, prod"),
        ("bon8+last+prm", "unknown step_score 'prm'; expected one of key, mean, margin"),
        ("beam2x3+last+nope+filter", "unknown step_score 'nope'"),
        ("bon8+prod+key", "aggregate 'prod' needs a step score in [0, 1]"),
        ("bon8+last", "a bon method is spelled like bon8+last+key"),
        ("bon8", "a bon method is spelled like bon8+last+key"),
        ("maj8+last+key", "a maj method is spelled like maj8"),
        ("beam2x3+last+key+filter+filter", "a beam method is spelled like beam2x3+last+key"),
        ("bon8+filter+last+key", "a bon method is spelled like"),
        ("bon08+last+key", "is spelled 'bon8+last+key'"),
        ("maj8+revise", "a maj method is spelled like maj8"),
        ("bon", "a bon method is spelled like bon8+last+key"),
        ("beam+last+key", "a beam method is spelled like beam2x3+last+key"),
        ("bonus", "unknown rule 'bonus'"),
    ],
)
def test_method_parse_rejects_unknown_parts(name, said):
    with pytest.raises(ValueError, match=re.escape(f"method {name!r}")) as e:
        Method.parse(name)
    assert said in str(e.value)


def test_method_checks_its_parts():
    with pytest.raises(
        ValueError, match="unknown rule 'median'; expected base, one of verdict, mean"
    ):
        Method("median")
    with pytest.raises(ValueError, match="mode must be a JudgeMode, got 'zoom'"):
        Method("verdict", "zoom")
    with pytest.raises(ValueError, match="revise must be a bool, got 1"):
        Method("verdict", JudgeMode(), 1)
    with pytest.raises(ValueError, match="a method name is a string, got 3"):
        Method.parse(3)


@pytest.mark.parametrize(
    "totals, said",
    [
        (
            {"steps": 2, "fallbacks": 1, "abstentions": -11, "judge_calls": 18},
            "'abstentions' must be an integer >= 0",
        ),
        ("2 steps", "totals 'steps' must be an integer >= 0, got '2 steps'"),
        (
            {"steps": 2, "fallbacks": 1, "judge_calls": 18},
            "totals 'abstentions' must be an integer >= 0, got None",
        ),
        (
            {"steps": "2", "fallbacks": 1, "abstentions": 0, "judge_calls": 18},
            "'steps' must be an integer",
        ),
        ({"steps": 2, "fallbacks": 3, "abstentions": 0, "judge_calls": 18}, "totals do not add up"),
        (
            {"steps": 2, "fallbacks": 1, "abstentions": 19, "judge_calls": 18},
            "totals do not add up",
        ),
        (
            {
                "steps": 2,
                "fallbacks": 1,
                "abstentions": 0,
                "judge_calls": 18,
                "usage": {"calls": -3},
            },
            "usage must map counters to numbers >= 0",
        ),
    ],
)
def test_a_rows_trace_is_checked_where_the_tables_read_it(totals, said):
    d = full_row()
    d["trace"] = {**d["trace"], "totals": totals}
    with pytest.raises(ValueError, match=re.escape(said)):
        Row.from_json(d)


# ----------------------------------------------------------------------------- searches

SEARCH_NAMES = [  # (name, the Method it reads as)
    ("bon8+last+key", Method("bon", n=8, aggregate="last", step_score="key")),
    ("wbon8+min+mean", Method("wbon", n=8, aggregate="min", step_score="mean")),
    ("bon1+prod+raw-min", Method("bon", n=1, aggregate="prod", step_score="raw-min")),
    ("maj8", Method("maj", n=8)),
    ("beam2x3+last+key", Method("beam", width=2, expand=3, aggregate="last", step_score="key")),
    (
        "beam2x3+min+margin+filter",
        Method("beam", width=2, expand=3, aggregate="min", step_score="margin", dual_filter=True),
    ),
]


@pytest.mark.parametrize("name, method", SEARCH_NAMES)
def test_a_search_method_has_one_spelling(name, method):
    assert Method.parse(name) == method and str(method) == name
    assert method.search and method.plain and method.judged == (method.rule != "maj")
    assert (
        method.answer
        == {"bon": "best", "wbon": "weighted", "maj": "majority", "beam": "best"}[method.rule]
    )
    assert method.size == (method.width if method.rule == "beam" else method.n)
    assert (
        not Method("verdict").search
        and Method("verdict").answer is None
        and Method("base").size is None
    )


def test_a_search_family_leaves_out_its_count():
    assert [Method.parse(n).family for n, _ in SEARCH_NAMES] == [
        "bonN+last+key",
        "wbonN+min+mean",
        "bonN+prod+raw-min",
        "majN",
        "beamWx3+last+key",
        "beamWx3+min+margin+filter",
    ]
    assert Method.parse("bon2+last+key").family == Method.parse("bon16+last+key").family
    assert Method.parse("verdict+zoom").family == "verdict+zoom"


def test_a_search_takes_its_own_settings_only():
    with pytest.raises(ValueError, match="verdict takes no n setting"):
        Method("verdict", n=3)
    with pytest.raises(ValueError, match="maj takes no aggregate setting"):
        Method("maj", n=3, aggregate="last")
    with pytest.raises(ValueError, match="bon takes no dual_filter setting"):
        Method("bon", n=3, aggregate="last", step_score="key", dual_filter=True)
    with pytest.raises(ValueError, match="a search runs plain judges"):
        Method("bon", JudgeMode(zoom=True), n=3, aggregate="last", step_score="key")
    with pytest.raises(ValueError, match="bon needs an aggregate and a step score"):
        Method("bon", n=3)


def test_a_search_rows_trace_is_a_search_record():
    d = full_row() | {"method": "bon2+last+key"}
    d["trace"] = {
        "format": "verdict-search/1",
        "chain": ["Final answer: B"],
        "totals": {"steps": 4},
    }
    with pytest.raises(ValueError, match="totals 'abstentions' must be an integer >= 0, got None"):
        Row.from_json(d)
    d["trace"]["totals"] |= {"abstentions": 0, "judge_calls": 12}  # no fallbacks: a search has none
    assert Row.from_json(d).method == Method("bon", n=2, aggregate="last", step_score="key")
