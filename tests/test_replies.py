"""Tests for reading a judge's reply (judges.py's JSON reply, verdict_lab/formats.py's text and
digit replies) in each format (golden replies, with the reason for each expectation beside it), what
the judge quotes of the candidate, the probability-weighted score, and a run's format with its
fallback; the JSON object, the lone surrogates, the usage and timings any reply carries, and a
reasoner's step."""

import math
import re
import string
import warnings

import json
import pytest

from judges import JSON, EndpointError, digit_probs, fence, json_score, logprob_score, one_step
from scripted import token_logprobs
from verdict_lab.formats import (
    DIGIT,
    MAX_REPORTED,
    REPLIES,
    TEXT,
    JudgeFormat,
    _score_line_digit,
    json_object,
    parse_score,
    reason_of,
    reported_cache,
    reported_usage,
    unquote,
    whole_text,
)

nan = math.nan


# ----------------------------------------------------------------------------- score parsing

CANDIDATE_WITH_SCORE = "The ball is left.\nScore: 1.0"


@pytest.mark.parametrize(
    "reply, score",
    [
        ("Score: 0.8", 0.8),
        ("The step names the cup, which is visible.\nScore: 0.85", 0.85),
        ("Score: .85", 0.85),
        ("Score: 1", 1.0),
        ("Score: 0", 0.0),
        ("score: 0.3", 0.3),
        ("SCORE: 0.3", 0.3),
        ("**Score:** 0.8", 0.8),
        ("**Score: 0.8**", 0.8),
        ("- **Score**: 0.7", 0.7),
        ("### Score: 0.6", 0.6),
        ("Score: `0.6`", 0.6),
        ("Score = 0.7", 0.7),
        ("Final score: 0.9", 0.9),
        ("Score: 0.8.", 0.8),
        ("Score: 0.75 (mostly grounded)", 0.75),
        ("Score: 0.8\n", 0.8),
        ("Score: 85%", 0.85),  # percent: read as a fraction
        ("Score: 8/10", 0.8),
        ("Score: 0.9 / 1", 0.9),
        ("Score: 8 / 10", 0.8),  # spaces around the slash: still one value
        ("Score: 0.2\nOn reflection the cup is visible.\nScore: 0.9", 0.9),  # the last line wins
        ("Score: 0.9\nScore: 1.2", nan),  # ... even when it is invalid
        ("Score: 1.2", nan),  # out of range: never clamped
        ("Score: -0.1", nan),
        ("Score: 85", nan),
        ("Score: 150%", nan),
        ("Score: 9/0", nan),
        ("Score: 0,8", nan),  # not "0"
        ("Score: 1e-1", nan),
        ("Score: nan", nan),
        ("Score: high", nan),  # words only
        ("The step is good; I give it 0.9 overall.", nan),  # never the first number in prose
        ("The step earns a score: 0.9 from me.", nan),  # a score line starts the line
        ("I'm sorry, but I can't evaluate this step.", nan),  # refusal
        ("", nan),  # empty
        ("The step is plausible. Score:", nan),  # truncated
        ("Score:", nan),
        ("Score:\n0.8", nan),  # the value belongs on the score line
        ("The reasoning is sound and well grounded, so I would rate it", nan),
        (
            f"The step says:\n<step>\n{CANDIDATE_WITH_SCORE}\n</step>\nIt is unsupported.",
            nan,
        ),  # the candidate's own text
        (f"<step>\n{CANDIDATE_WITH_SCORE}\n</step>\nScore: 0.2", 0.2),
        (
            f"Score: 0.2\nQuoting it: <step>{CANDIDATE_WITH_SCORE}",
            0.2,
        ),  # an unclosed quote runs to the end
    ],
)
def test_parse_score(reply, score):
    got = parse_score(reply)
    assert (math.isnan(got) and math.isnan(score)) or got == pytest.approx(score)


@pytest.mark.parametrize(
    "reply, score",
    [
        ("Score: 7", 7 / 9),
        ("Score: 0", 0.0),
        ("**Score:** 9", 1.0),
        ("Score: 0.7", nan),
        ("Score: 10", nan),
        ("Score: 70%", nan),
    ],
)
def test_parse_score_digit_scale(reply, score):
    got = parse_score(reply, "digit")
    assert (math.isnan(got) and math.isnan(score)) or got == pytest.approx(score)


def test_parse_score_rejects_unknown_scale_and_non_text():
    with pytest.raises(ValueError, match="unknown scale 'percent'; expected one of unit, digit$"):
        parse_score("Score: 0.5", "percent")
    assert math.isnan(parse_score(None))


@pytest.mark.parametrize(
    "reply, scale, score",
    [
        (
            "Score: <0.8>",
            "unit",
            0.8,
        ),  # the prompt shows "Score: <...>", and a model may keep the brackets
        ("**Score:** <0.85>", "unit", 0.85),
        ("Score: <7>", "digit", 7 / 9),
        ("Score: <7>.", "digit", 7 / 9),
        ("Score: <1.2>", "unit", nan),  # brackets change nothing else: out of range is still NaN
        ("Score: <high>", "unit", nan),
        ("Score: <10>", "digit", nan),
    ],
)
def test_parse_score_reads_the_prompts_own_brackets(reply, scale, score):
    got = parse_score(reply, scale)
    assert (math.isnan(got) and math.isnan(score)) or got == pytest.approx(score)


def test_a_letter_glued_to_the_value_makes_it_no_number():
    # "x0.5" or "0.5x" is a word, not a score: only the markdown decorations * _ ` ( < before the
    # value and . , ; : ! ) * _ ` > after it are taken off, never a letter.
    for c in string.ascii_letters:
        for reply, scale in [
            (f"Score: {c}0.5", "unit"),
            (f"Score: 0.5{c}", "unit"),
            (f"Score: {c}7", "digit"),
            (f"Score: 7{c}", "digit"),
        ]:
            assert math.isnan(parse_score(reply, scale)), reply


def test_fence_defuses_step_tags_of_any_case():
    assert fence("a <step>b</STEP> <Step> c") == "a [step]b[/step] [step] c"
    assert fence("<steps> and <step/> are no step tags") == "<steps> and <step/> are no step tags"


STRAY = "The claim in the <step> block is visible in the image.\nScore: 0.8"


def test_a_stray_open_step_tag_does_not_hide_the_rest_of_the_reply():
    assert parse_score(STRAY, step="The ball is left.") == 0.8
    # An open <step> before the candidate's own text quotes it: the quote is hidden, the rest read.
    quoted = f"Quoting it: <step>\n{CANDIDATE_WITH_SCORE}\nIt is unsupported.\nScore: 0.2"
    assert parse_score(quoted, step=CANDIDATE_WITH_SCORE) == 0.2
    assert (
        parse_score(
            "<step> The ball  is left.\n  Score: 1.0\nScore: 0.3", step=CANDIDATE_WITH_SCORE
        )
        == 0.3
    )
    assert math.isnan(
        parse_score(f"Quoting it: <step>\n{CANDIDATE_WITH_SCORE}", step=CANDIDATE_WITH_SCORE)
    )
    # Without the candidate, an open <step> still runs to the end.
    assert math.isnan(parse_score(STRAY))


def test_a_candidate_with_a_score_line_echoed_untagged_is_no_score_of_the_judge():
    echo = "The cube is left.\nScore: 1"
    assert math.isnan(parse_score(echo, "unit", echo))
    assert math.isnan(parse_score(f"Restating:\n{echo}", "unit", "The cube  is left. Score: 1"))
    assert parse_score(f"{echo}\nIt is not left.\nScore: 0.2", "unit", echo) == 0.2
    assert math.isnan(parse_score("Score: 7\n\nScore: 7", "digit", "Score: 7"))
    assert _score_line_digit("Score: 7", "Score: 7") is None
    # A candidate with no score line is hidden only inside tags: "1" is this judge's own value.
    assert parse_score("Score: 1", "unit", "1") == 1.0
    assert parse_score("It is left.\nScore: 0.9", "unit", "It is left.") == 0.9
    # A candidate that says "score" is hidden wherever it is echoed; the judge's own line is read.
    said = "The score on the board is 3."
    assert parse_score(f"{said}\nScore: 0.7", "unit", said) == 0.7
    # Every position and line kept.
    assert unquote("a\nScore: 1\nb", step="Score: 1") == "a\n" + " " * 8 + "\nb"


def test_a_json_reply_that_only_repeats_the_candidate_is_an_echo():
    candidate = '{"score": 9}'
    with pytest.raises(ValueError, match="^the reply only repeats the candidate step$"):
        json_score(' {"score":\n 9} ', step=candidate)
    assert json_score(candidate, step="The cube is left.") == (1.0, "")
    assert json_score(candidate) == (1.0, "")  # no candidate given: read


def test_logprob_score_ignores_the_quoted_candidate():
    lp = token_logprobs(
        [
            ("Score", {}),
            (":", {}),
            (" 3", {" 3": 0.6, " 4": 0.4}),
            ("\n", {}),
            ("<step>", {}),
            ("\n", {}),
            ("Score", {}),
            (":", {}),
            (" 9", {" 9": 1.0}),
            ("\n", {}),
            ("</step>", {}),
        ]
    )
    # The judge's own line says 3 (p = 0.6) or 4 (p = 0.4): (3·0.6 + 4·0.4) / 9; "Score: 9"
    # is the quoted candidate's.
    assert logprob_score(lp, DIGIT) == pytest.approx((3 * 0.6 + 4 * 0.4) / 9)
    assert parse_score("Score: 3\n<step>\nScore: 9\n</step>", "digit") == pytest.approx(3 / 9)


def test_digit_probs_are_the_servers_own_probabilities_at_the_score_digit():
    # " 7" and "7" are two tokens for the same digit: their probabilities add up; "x" is no digit.
    lp = token_logprobs([("Score:", {}), (" 7", {" 7": 0.4, "7": 0.1, " 2": 0.3, "x": 0.2})])
    assert digit_probs(lp, DIGIT).tolist() == pytest.approx([0, 0, 0.3, 0, 0, 0, 0, 0.5, 0, 0])
    assert logprob_score(lp, DIGIT) == pytest.approx((2 * 0.3 + 7 * 0.5) / 0.8 / 9)
    # A token holding more than the digit ('":7') counts for its digit when its alternatives share
    # the prefix: '"=5' spells another text before its digit, so its 5 is not a score.
    lp = token_logprobs(
        [('{"score', {}), ('":7', {'":7': 0.6, '":3': 0.2, '"x': 0.1, '"=5': 0.1}), ("}", {})]
    )
    assert digit_probs(lp, JSON).tolist() == pytest.approx([0, 0, 0, 0.2, 0, 0, 0, 0.6, 0, 0])
    assert digit_probs(None, DIGIT).tolist() == [0.0] * 10
    assert digit_probs(None, JSON).tolist() == [0.0] * 10


def json_tokens(reason: str, digit: str, alternatives: dict) -> dict:
    """The logprobs of a json reply as llama-server sends them: in a ```json fence the
    content no longer has."""
    return token_logprobs(
        [
            ("```", {}),
            ("json", {}),
            ("\n", {}),
            ("{", {}),
            ('"', {}),
            ("reason", {}),
            ('": "', {}),
            (reason, {}),
            ('", "', {}),
            ("score", {}),
            ('": ', {}),
            (digit, alternatives),
            ("}", {}),
            ("\n", {}),
            ("```", {}),
        ]
    )


def test_digit_probs_when_the_digit_is_a_token_of_its_own():
    # The value starts where the token "Score: " ends, so the next token, "7", is the
    # digit's (7: 0.6, 3: 0.2).
    lp = token_logprobs([("Score: ", {}), ("7", {"7": 0.6, "3": 0.2, "x": 0.2})])
    assert digit_probs(lp, DIGIT).tolist() == pytest.approx([0, 0, 0, 0.2, 0, 0, 0, 0.6, 0, 0])
    assert logprob_score(lp, DIGIT) == pytest.approx((3 * 0.2 + 7 * 0.6) / 0.8 / 9)
    # The same in a json reply, where '": ' ends at the digit; '"' (p 0.4) is no digit.
    lp = json_tokens("ok", "5", {"5": 0.3, "2": 0.25, '"': 0.4})
    assert digit_probs(lp, JSON).tolist() == pytest.approx([0, 0, 0.25, 0, 0, 0.3, 0, 0, 0, 0])
    assert logprob_score(lp, JSON) == pytest.approx((2 * 0.25 + 5 * 0.3) / 0.55 / 9)


def test_logprob_score_skips_the_candidate_quoted_after_an_open_step():
    # The open <step> quotes the candidate (its "Score: 1.0" is not the judge's); the judge's own
    # line says 3 (p 0.6) or 4 (p 0.4). Without the candidate, an open <step> would hide the rest of
    # the reply.
    lp = token_logprobs(
        [
            ("Quoting it: <step>", {}),
            ("\n", {}),
            (CANDIDATE_WITH_SCORE, {}),
            ("\n", {}),
            ("Score:", {}),
            (" 3", {" 3": 0.6, " 4": 0.4}),
        ]
    )
    assert logprob_score(lp, DIGIT, step=CANDIDATE_WITH_SCORE) == pytest.approx(
        (3 * 0.6 + 4 * 0.4) / 9
    )
    assert math.isnan(logprob_score(lp, DIGIT))


@pytest.mark.parametrize(
    "reply, expected",
    [
        ('{"reason": "ok", "score": 7}', 7 / 9),
        ('{"reason": "ok", "score": 0}', 0.0),
        ('{"reason": "ok", "score": 9}', 1.0),
        (
            '```json\n{"reason": "ok", "score": 4}\n```',
            4 / 9,
        ),  # llama-server's grammar allows a fence
        ('{"score": 5, "reason": "ok"}', 5 / 9),
        ('{"reason": "ok", "score": 12}', "an integer from 0 to 9, got 12"),
        (
            '{"reason": "ok", "score": 10}',
            "got 10",
        ),  # the first integer past 9  # out of range: never clamped
        ('{"reason": "ok", "score": -1}', "got -1"),
        ('{"reason": "ok", "score": 0.8}', "got 0.8"),  # the unit scale is not this format's
        ('{"reason": "ok", "score": 7.0}', "got 7.0"),
        ('{"reason": "ok", "score": "7"}', 'got "7"'),
        ('{"reason": "ok", "score": true}', "got true"),
        ('{"reason": "ok", "score": null}', "got null"),
        ('{"reason": "ok"}', 'a JSON object with a "score"'),
        ('{"score": 7}', '"reason" must be a string'),
        ('{"reason": 3, "score": 7}', '"reason" must be a string'),
        ("[7]", 'a JSON object with a "score"'),
        ("Score: 0.8", "not valid JSON"),
        ('{"reason": "ok", "score": 7', "not valid JSON"),  # cut off by max_tokens
        ("", "not valid JSON"),
    ],
)
def test_json_score(reply, expected):
    if isinstance(expected, str):
        # The follow-up quotes the message whole.
        with pytest.raises(ValueError, match=re.escape(expected) + "$"):
            json_score(reply, reasons=True)
    else:
        score, reason = json_score(reply, reasons=True)
        # The reason comes with the score.
        assert score == pytest.approx(expected) and reason == "ok"


def test_json_score_only_needs_no_reason():
    assert json_score('{"score": 7}', reasons=False) == (pytest.approx(7 / 9), "")
    assert json_score('{"score": 7}') == (pytest.approx(7 / 9), "")  # score alone is the default


def test_json_score_names_a_long_score_in_forty_characters():
    with pytest.raises(
        ValueError, match=re.escape('an integer from 0 to 9, got "' + "x" * 39 + "...") + "$"
    ):
        json_score('{"score": "' + "x" * 60 + '"}')


def test_json_score_reads_a_lone_surrogate_in_the_reason_as_the_replacement_character():
    assert json_score('{"reason": " ok \\ud800 ", "score": 7}', reasons=True) == (
        pytest.approx(7 / 9),
        "ok \ufffd",
    )


def test_only_the_json_format_falls_back():
    refusal = EndpointError(
        "http://127.0.0.1:9/v1/chat/completions", 400, "response_format is not supported"
    )
    assert not JudgeFormat("text").fall_back(1, refusal) and not JudgeFormat("digit").fall_back(
        1, refusal
    )
    # This is not an HTTP refusal.
    assert not JudgeFormat("json").fall_back(1, ValueError("response_format"))


@pytest.mark.parametrize(
    "logprobs, fmt",
    [
        (None, "digit"),
        ({}, "digit"),
        ({"content": None}, "digit"),
        ({"content": []}, "digit"),
        ({"content": [{"token": "Score: 7"}]}, "digit"),  # no top_logprobs
        (token_logprobs([("Score: ", {}), ("7", {"a": 1.0})]), "digit"),  # no digit among them
        (
            {"content": [{"token": "Score: "}, {"logprob": -0.1}]},
            "digit",
        ),  # a token without its text
        (token_logprobs([("The step holds", {}), (" 7", {" 7": 0.5})]), "digit"),  # no score line
        (
            token_logprobs([("Score:", {}), (" high", {" high": 0.5, " 7": 0.3})]),
            "digit",
        ),  # the value is no digit
        (
            token_logprobs([('{"reason": "', {}), ("7", {"7": 1.0}), ('"}', {})]),
            "json",
        ),  # no "score" key
    ],
)
def test_logprob_score_without_usable_logprobs_is_nan(logprobs, fmt):
    with warnings.catch_warnings():
        # Quietly: a run over many replies prints no numpy warning for each.
        warnings.simplefilter("error")
        assert math.isnan(logprob_score(logprobs, REPLIES[fmt]))
        assert digit_probs(logprobs, REPLIES[fmt]).tolist() == [0.0] * 10


def test_unquote_blanks_quotes_and_keeps_every_position():
    reply = "Fine <step>Score: 1.0</step>\nScore: 0.4"
    assert unquote(reply) == "Fine " + " " * len("<step>Score: 1.0</step>") + "\nScore: 0.4"
    # Open, with no candidate: blanked to the end.
    assert unquote("a <step>b\nc") == "a " + " " * len("<step>b") + "\n" + " "
    # A stray tag hides itself.
    assert unquote("a <step> b\nc", step="x") == "a " + " " * len("<step>") + " b\nc"
    assert unquote("<step> x\n  y z", step="x y\nz") == " " * len("<step> x") + "\n" + " " * len(
        "  y z"
    )
    # The candidate as fence() showed it.
    assert unquote("<step>[step] x", step="<step> x") == " " * len("<step>[step] x")


def test_judge_format_names_are_checked():
    with pytest.raises(ValueError, match="'yaml'"):
        JudgeFormat("yaml")
    assert JudgeFormat("digit").record() == {
        "format": "digit",
        "format_used": "digit",
        "fallback": None,
    }


def test_digit_probs_read_a_digit_only_where_the_format_has_one():
    lp = token_logprobs([("Score: ", {}), ("7", {"7": 0.6})])
    # The unit scale's value is no one-token digit.
    assert digit_probs(lp, TEXT).tolist() == [0.0] * 10
    assert digit_probs(lp, DIGIT).tolist() == pytest.approx([0, 0, 0, 0, 0, 0, 0, 0.6, 0, 0])


def test_digit_probs_skip_alternatives_of_the_wrong_shape():
    lp = token_logprobs([("Score: ", {}), ("7", {})])
    lp["content"][1]["top_logprobs"] = [
        "7",
        {"token": 7, "logprob": -0.1},
        {"token": "7", "logprob": math.log(0.6)},
    ]
    assert digit_probs(lp, DIGIT).tolist() == pytest.approx([0, 0, 0, 0, 0, 0, 0, 0.6, 0, 0])


def digit_alternatives(logprobs: dict) -> dict:
    """A digit reply "Score: 7" whose digit token has these {alternative: logprob} as sent."""
    lp = token_logprobs([("Score: ", {}), ("7", {})])
    lp["content"][1]["top_logprobs"] = [{"token": t, "logprob": v} for t, v in logprobs.items()]
    return lp


def test_digit_probs_take_every_logprob_from_minus_1e300_to_0_and_nothing_above():
    # 0 is probability 1; -1e300 is 0 (beside another digit); any logprob above 0 spoils the lot.
    assert digit_probs(digit_alternatives({"7": 0.0}), DIGIT).tolist() == [
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        1.0,
        0,
        0,
    ]
    kept = digit_probs(digit_alternatives({"7": math.log(0.6), "3": -1e300}), DIGIT)
    assert kept.tolist() == pytest.approx([0, 0, 0, 0, 0, 0, 0, 0.6, 0, 0])
    for above in (1e-7, 0.5):
        assert digit_probs(digit_alternatives({"7": above}), DIGIT).tolist() == [0.0] * 10


def test_digit_probs_summing_to_at_most_one_plus_1e_6_are_kept():
    # 0.5 and 0.5 + 1e-6 - 0.5 add up to exactly 1 + 1e-6 in floats: the rounding the check allows.
    at_most = digit_alternatives({"7": math.log(0.5), "3": math.log(1 + 1e-6 - 0.5)})
    assert digit_probs(at_most, DIGIT).sum() == 1 + 1e-6
    assert (
        digit_probs(digit_alternatives({"7": math.log(0.6), "3": math.log(0.6)}), DIGIT).tolist()
        == [0.0] * 10
    )


# ------------------------------------------------------------------------ the reason, a JSON object


@pytest.mark.parametrize(
    "text, reason",
    [
        ("  The cup is red.\nScore: 0.8", "The cup is red."),
        (
            "First look.\nScore: 0.2\nOn reflection it is fine.\nScore: 0.9 ",
            "First look.\nScore: 0.2\nOn reflection it is fine.",
        ),
        ("  no score line at all \n", "no score line at all"),  # the reply whole, stripped
    ],
)
def test_reason_of_is_the_prose_before_the_last_score_line(text, reason):
    assert reason_of(text) == reason


@pytest.mark.parametrize(
    "text, obj",
    [
        ('{"boxes": [1, 2]}', {"boxes": [1, 2]}),  # from the first character
        ('x {"a": 1}y', {"a": 1}),  # to the last "}", nothing after it
        (
            'Here it is:\n```json\n{"a": {"b": 1}}\n```\nDone.',
            {"a": {"b": 1}},
        ),  # first "{" to last "}"
    ],
)
def test_json_object_is_read_from_the_first_brace_to_the_last(text, obj):
    assert json_object(text) == obj


@pytest.mark.parametrize(
    "text, why",
    [
        ("no object here", "no JSON object in the reply"),
        ("a } then a {", "no JSON object in the reply"),  # the last "}" before the first "{"
        (
            "{oops}",
            "invalid JSON: Expecting property name enclosed in double quotes: "
            "line 1 column 2 (char 1)",
        ),
        ('{"a": 1', "no JSON object in the reply"),
    ],
)
def test_json_object_says_why_there_is_none(text, why):
    with pytest.raises(ValueError, match="^" + re.escape(why) + "$"):
        json_object(text)


def test_json_object_nested_too_deep_is_invalid_json_not_a_traceback():
    with pytest.raises(ValueError, match="^invalid JSON: maximum recursion depth exceeded"):
        json_object('{"a":' * 100_000 + "1" + "}" * 100_000)


def test_whole_text_replaces_each_lone_surrogate_in_keys_values_and_lists():
    reply = {"a\ud800": ["b\udfff c", {"d": "\ud83d"}], "n": 3, "none": None}
    assert whole_text(reply) == {"a\ufffd": ["b\ufffd c", {"d": "\ufffd"}], "n": 3, "none": None}
    # A pair is one character, with no surrogate.
    assert whole_text("kept \U0001f600") == "kept \U0001f600"


# ----------------------------------------------------------------------------- what a reply reports


def test_reported_usage_is_zero_for_a_usage_of_the_wrong_shape():
    zero = {"prompt_tokens": 0, "completion_tokens": 0}
    assert reported_usage({}) == zero and reported_usage({"usage": "none"}) == zero
    assert reported_usage({"usage": {"prompt_tokens": 3}}) == {
        "prompt_tokens": 3,
        "completion_tokens": 0,
    }


def test_reported_figures_of_zero_are_reported_not_missing():
    r = {
        "usage": {"prompt_tokens_details": {"cached_tokens": 0}},
        "timings": {"cache_n": 0, "prompt_ms": 0},
    }
    got = reported_cache(r)
    assert got["cached_tokens"] == 0 and got["cache_n"] == 0 and got["prompt_ms"] == 0.0
    r = {"usage": {"prompt_tokens_details": {"cached_tokens": MAX_REPORTED}}}
    assert reported_cache(r)["cached_tokens"] == MAX_REPORTED


def test_a_reasoners_step_drops_its_echo_of_the_template_line():
    echo = "Final answer: <the option letter, or the value>"
    assert one_step(f"The cup is left.\n{echo}") == "The cup is left."
    assert one_step(f"{echo}\nThe cup is left.") == "The cup is left."
    # A real final answer is kept.
    assert one_step("The cup is left.\nFinal answer: A") == "The cup is left.\nFinal answer: A"


def test_a_long_invalid_score_is_shown_cut_at_40_characters():
    # json.dumps of a string of 38 characters is 40 characters with its quotes: shown whole; one
    # character more is cut at 40 and marked with "...".
    said = '"score" must be an integer from 0 to 9, got '
    exact = '"' + "x" * 38 + '"'
    with pytest.raises(ValueError) as e:
        json_score(json.dumps({"score": "x" * 38}))
    assert str(e.value) == said + exact
    with pytest.raises(ValueError) as e:
        json_score(json.dumps({"score": "x" * 39}))
    assert str(e.value) == said + '"' + "x" * 39 + "..."
