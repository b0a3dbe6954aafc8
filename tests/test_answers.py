"""Tests for harness/answers.py: VLMEvalKit's can_infer on 73 replies traced by hand (the version at
commit e8e78f05, 2026-08-18), what each outcome is called, free-form values (MathVista) with their
precision and unit, and the extraction model against a loopback server."""

import json
import os

import pytest

from verdict_lab.harness import answers
from verdict_lab.harness.answers import Value
from verdict_lab.harness.benchmarks import Item
from verdict_lab.layouts import lab_prompt
from verdict_lab.loopback import chat_response, user_text

C4 = {"A": "cat", "B": "dog", "C": "teddy bear", "D": "rabbit"}
C5 = {**C4, "E": "fox"}
C3 = {"A": "cat", "B": "dog", "C": "fox"}
C2 = {"A": "cat", "B": "dog"}
YN = {"A": "Yes", "B": "No"}
NUM = {"A": "1", "B": "2", "C": "3", "D": "4"}
OPEN = {"A": "42", "B": "Other Answers"}  # an MMMU open question, as VLMEvalKit scores it

# tests/can_infer.jsonl holds one row per line: its number, the reply, the options (a name above)
# and what VLMEvalKit's can_infer returns (null for False). Worked by its rules: tokens split at
# whitespace and . ( ) [ ] , : ; ! * # { }; one distinct option letter, first seen among the last
# four tokens; else a lone Z; else "answer is X" (X in A-D); else exactly one option text inside a
# reply at most twice as long as all option texts together. For example row 6: "B" is token 4 of 21,
# too early, so the regex finds "answer is **B"; row 17 is 73 characters, more than 2 · 22, so no
# option text is tried; row 28's regex reads the "c" of "clearly"; row 72 takes the article "A" as
# option A.
OPTION_SETS = {"C4": C4, "C5": C5, "C3": C3, "C2": C2, "YN": YN, "NUM": NUM, "OPEN": OPEN}
with open(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "can_infer.jsonl"), encoding="utf-8"
) as fh:
    CAN_INFER = [
        (r["row"], r["reply"], OPTION_SETS[r["options"]], r["can_infer"])
        for r in map(json.loads, fh)
    ]


@pytest.mark.parametrize(
    "row, reply, choices, expected", CAN_INFER, ids=[str(r[0]) for r in CAN_INFER]
)
def test_can_infer_matches_vlmevalkit(row, reply, choices, expected):
    assert (answers.can_infer(reply, dict(choices)) or None) == expected


def test_option_texts_match_a_reply_at_most_twice_their_length():
    # C2's texts "cat" and "dog" are 6 characters together: a reply of 12 may name one, a reply of
    # 13 may not.
    assert answers.can_infer("it's a dog!!", C2) == "B"
    assert answers.can_infer("it's a dog!!!", C2) is False


OPTIONS = (("A", "12"), ("B", "30"), ("C", "red apple"), ("D", "1"))


@pytest.mark.parametrize(
    "text, expected",
    [
        ("B", ("B", "letter")),
        ("B. 30", ("B", "letter")),
        ("The answer is D", ("D", "letter")),  # "D" is the 4th token from the end: near enough
        (
            "D is right, since one is less than twelve",
            (None, "unanswered"),
        ),  # far from the end, and too long for text
        (
            "The answer is based on the thirty",
            ("B", "letter"),
        ),  # "answer is b": VLMEvalKit's last resort
        ("A or B", (None, "unanswered")),  # two letters, and no option text either
        ("30", ("B", "text")),
        ("a RED APPLE", ("C", "text")),  # option text, case-insensitive
        ("12", (None, "unanswered")),  # both "12" and "1" are substrings: not unique
        ("E", (None, "unanswered")),  # not an option letter
        (
            "Cannot determine the answer",
            (None, "declined"),
        ),  # VLMEvalKit's Z: an answer, always wrong
        ("", (None, "unanswered")),
        (None, (None, "unanswered")),  # the chain gave no final answer
    ],
)
def test_extract_names_how(text, expected):
    assert answers.extract(text, OPTIONS) == expected


@pytest.mark.parametrize(
    "text, answer, value, correct",
    [
        ("14", "14", Value("integer"), True),
        ("14.0", "14", Value("integer"), True),  # VLMEvalKit's int("14.0") fails; the number is 14
        ("14.5", "14", Value("integer"), False),
        ("There are 14 birds.", "14", Value("integer"), True),  # the one number in the answer
        ("3 + 11 = 14", "14", Value("integer"), None),  # three numbers: unanswered
        ("1,000", "1000", Value("integer"), True),  # thousands comma
        ("1.45", "1.45", Value("float", 2), True),
        ("1.449", "1.45", Value("float", 2), True),  # 1.449 rounds to 1.45 at the row's precision
        ("1.449", "1.45", Value("float", 3), False),  # ... but not at 3 decimals (1.449 vs 1.450)
        ("1.5", "1.50", Value("float"), True),  # no precision: the answer's own 2 decimals
        ("7.1 cm", "7.1", Value("float", 1, "cm"), True),  # the unit goes
        ("\\boxed{7.1}", "7.1", Value("float", 1), True),
        ("45°", "45", Value("integer", None, "°"), True),
        ("Yes.", "yes", Value("text"), True),  # VLMEvalKit counts every text answer wrong
        ("blue  sky", "Blue sky", Value("text"), True),
        ("[2007, 2008]", "[2007, 2008]", Value("list"), True),
        ("[2008, 2007]", "[2007, 2008]", Value("list"), False),
        ("none", "14", Value("integer"), None),
        ("15", "14", Value("integer"), False),
        ("14", "fourteen", Value("integer"), False),  # an answer that is no number matches nothing
        ("1.4", "1.45", Value("float"), False),  # 1.40 against 1.45 at the answer's 2 decimals
        (
            "1e999",
            "1e999",
            Value("float"),
            False,
        ),  # overflows to inf: an infinite value matches nothing
        (
            "7.1 m^2",
            "7.1",
            Value("float", 1, "m^2"),
            True,
        ),  # the unit goes first, so its 2 is no second number
        ("7.1 M^2.", "7.1", Value("float", 1, "m^2"), True),  # ... in any case, before a full stop
        ("$yes$", "yes", Value("text"), True),
        ("**Yes**", "yes", Value("text"), True),
        ("\\boxed{yes}", "yes", Value("text"), True),
        (
            "[red,blue]",
            "[red, blue]",
            Value("list"),
            True,
        ),  # not Python literals: split at the commas
        ("[x, y, z]", "X, Y, Z", Value("list"), True),  # point names, the answer without brackets
        ("[1.50, 2]", "[1.5, 2]", Value("list"), True),  # literal numbers compare as numbers
        ("2007", "[2007]", Value("list"), False),  # one number is not a list
        ("2008", "2007", Value("list"), False),  # two values that are no lists never match
        ("the $x$-axis", "the x-axis", Value("text"), True),  # $ and ** go inside the text too
        ("the **red** one", "the red one", Value("text"), True),
    ],
)
def test_free_form_values(text, answer, value, correct):
    # The corrected reading (read_value, value_matches), which the summary reports beside
    # VLMEvalKit's rule; answers.score follows the rule (test_mathvista_rule_path).
    pred = answers.read_value(text, value)
    ok = pred is not None and answers.value_matches(pred, answer, value)
    assert ok == bool(correct) and (pred is None) == (correct is None), pred


@pytest.mark.parametrize(
    "text, answer, value, expected",
    [
        ("14", "14", Value("integer", dtype="int"), ("14", "value", True)),
        (" 14 ", "14", Value("integer"), ("14", "value", True)),  # int() strips spaces
        ("14.0", "14", Value("integer"), (None, "unanswered", False)),  # int("14.0") fails
        (
            "14",
            "14.0",
            Value("integer", dtype="float"),
            ("14", "value", True),
        ),  # int(14.0) of a float column
        ("12", "14", Value("integer"), ("12", "value", False)),
        (
            "14",
            "14.0",
            Value("integer"),
            ("14", "value", False),
        ),  # a text cell "14.0": int() of it fails
        (None, "14", Value("integer"), (None, "unanswered", False)),  # no final answer
        ("0", "0", Value("integer"), ("0", "unanswered", False)),  # prefetch drops the falsy 0
        ("1.449", "1.45", Value("float", 2), ("1.449", "value", False)),  # exact float comparison
        ("1.45", "1.45", Value("float", 2), ("1.45", "value", True)),
        ("There are 14 birds.", "14", Value("integer"), (None, "unanswered", False)),
        ("yes", "yes", Value("text"), (None, "unanswered", False)),  # str(None) == answer: never
        ("[1, 2]", "[1, 2]", Value("list"), (None, "unanswered", False)),
    ],
)
def test_mathvista_rule_path(text, answer, value, expected):
    """VLMEvalKit's post_check (utils/mathvista.py at e8e78f05) under exact matching, row by row."""
    item = Item("MathVista_MINI", "1", 2, "q", (), answer, value=value)
    assert answers.score(item, text) == expected


def test_multiple_choice_z_answer_hits_when_nothing_is_read():
    # extract_answer_from_item returns "Z" when can_infer fails; an answer cell "Z" then matches it.
    item = Item("X", "1", 2, "q", (("A", "a"), ("B", "b")), "Z")
    assert answers.score(item, "no idea")[2] and not answers.score(item, "A")[2]


@pytest.mark.parametrize(
    "text, value, pred",
    [
        ("Yes.", Value("text"), "yes"),  # the prediction a results row records
        ("  Blue   Sky! ", Value("text"), "blue sky"),
        ("**14** birds", Value("integer"), "14"),
        ("1,000", Value("integer"), "1000"),
        ("\\boxed{7.1} cm", Value("float", 1, "cm"), "7.1"),
        ("12 cm", Value("text", None, "cm"), "12"),  # the unit goes, whatever the answer's type
    ],
)
def test_read_value_gives_the_value_as_text(text, value, pred):
    assert answers.read_value(text, value) == pred


def mcq_item(answer="B"):
    return Item(
        "MMStar",
        "7",
        8,
        "Question: Which pet?\nOptions:\nA. cat\nB. dog",
        (("A", "cat"), ("B", "dog")),
        answer,
    )


def test_a_multiple_choice_item_is_scored_by_its_letter():
    assert answers.score(mcq_item(), "B. dog") == ("B", "letter", True)
    assert answers.score(mcq_item(), "the cat") == ("A", "text", False)
    assert answers.score(mcq_item(), "Cannot determine the answer") == (None, "declined", False)


def test_extraction_model_tries_hotter_until_it_can_read_a_letter(loopback):
    replies = iter(["I would say the second one is meant", "Letter: B"])
    srv = loopback(lambda body, path: chat_response([next(replies)]))
    from verdict_lab.client import Client

    got = answers.ask_model(
        Client(srv.url, "extractor").chat, mcq_item(), "the furry animal that barks"
    )
    assert got == ("B", "judge", True)
    assert [c["temperature"] for c in srv.chats] == [0.0, 0.5]
    assert srv.chats[0]["max_tokens"] == 32  # a letter or a value: a short reply
    text = user_text(srv.chats[0])
    assert "Options:\nA. cat\nB. dog\nReply: the furry animal that barks\nLetter:" in text
    assert isinstance(srv.chats[0]["messages"][1]["content"], str)  # text only
    assert mcq_item().question in text
    assert srv.chats[0]["messages"][0] == {
        "role": "system",
        "content": lab_prompt("extract_choice")["system"],
    }


def test_extraction_model_z_declines_and_three_failures_leave_it_unanswered(loopback):
    from verdict_lab.client import Client

    srv = loopback(lambda body, path: chat_response(["Z"]))
    assert answers.ask_model(Client(srv.url, "x").chat, mcq_item(), "a spider") == (
        None,
        "declined",
        False,
    )
    srv = loopback(lambda body, path: chat_response(["no idea"]))
    assert answers.ask_model(Client(srv.url, "x").chat, mcq_item(), "???") == (
        None,
        "unanswered",
        False,
    )
    assert [c["temperature"] for c in srv.chats] == [0.0, 0.5, 1.0]
    srv = loopback(lambda body, path: chat_response(["Value: 7.1"]))
    item = Item("MathVista_MINI", "1", 2, "How long?", (), "7.1", value=Value("float", 1, "cm"))
    assert answers.ask_model(Client(srv.url, "x").chat, item, "roughly seven point one") == (
        "7.1",
        "judge",
        True,
    )


def test_extraction_model_text_values_are_never_right_by_the_rule(loopback):
    from verdict_lab.client import Client

    # VLMEvalKit's post_check compares str(None) with a text answer: the extracted "red" is read,
    # not right.
    srv = loopback(lambda body, path: chat_response(["red"]))
    item = Item("MathVista_MINI", "1", 2, "Which color?", (), "red", value=Value("text"))
    assert answers.ask_model(Client(srv.url, "x").chat, item, "it is red") == (
        "red",
        "judge",
        False,
    )


def test_extraction_model_none_is_no_value(loopback):
    from verdict_lab.client import Client

    # extract_value.txt asks for None when the reply gives no value: never the text answer "none".
    srv = loopback(lambda body, path: chat_response(["None"]))
    item = Item("MathVista_MINI", "1", 2, "Which color?", (), "red", value=Value("text"))
    assert answers.ask_model(Client(srv.url, "x").chat, item, "hard to say") == (
        None,
        "unanswered",
        False,
    )
    assert len(srv.chats) == 3
    # A reply without a number is no value of a float answer: the next, hotter try reads one.
    replies = iter(["about seven", "7.1"])
    srv = loopback(lambda body, path: chat_response([next(replies)]))
    item = Item("MathVista_MINI", "1", 2, "How long?", (), "7.1", value=Value("float", 1))
    assert answers.ask_model(Client(srv.url, "x").chat, item, "roughly seven") == (
        "7.1",
        "judge",
        True,
    )
    assert "Question: How long?\nReply: roughly seven\nValue:" in user_text(srv.chats[0])
    assert srv.chats[0]["messages"][0]["content"] == lab_prompt("extract_value")["system"]
