"""Tests for verdict_lab/perf/reply_formats.py: survey() and its command against a scripted loopback
server."""

import math

import pytest

from verdict_lab.client import Client
from verdict_lab.loopback import chat_response, user_text
from verdict_lab.perf.reply_formats import main, survey
from test_replies import json_tokens


def test_survey_measures_each_format_on_a_server(loopback, capsys):
    # json: right steps get 8, wrong ones 2, and the digits hold 0.9 of the score token's list;
    # text: never a score.
    def handler(body, path):
        if "response_format" not in body:
            return chat_response("I cannot say.", prompt_tokens=100, completion_tokens=4)
        d = 8 if "so the answer is A." in user_text(body) else 2
        lp = json_tokens("ok", str(d), {str(d): 0.6, str(d - 1): 0.3, '"': 0.1})
        return chat_response(
            '{"reason": "ok", "score": %d}' % d,
            prompt_tokens=100,
            completion_tokens=10,
            logprobs=[lp],
        )

    srv = loopback(handler)
    r = survey(Client(srv.url, "m"), "json", k=2)  # 2 questions × 2 steps × 3 judges
    assert (r["calls"], r["scored"], r["first"], r["tokens"], r["completion"]) == (
        12,
        1.0,
        1.0,
        110,
        10,
    )
    assert (r["right"], r["wrong"]) == (pytest.approx(8 / 9), pytest.approx(2 / 9))
    assert r["weighted"] == 12 and r["mass"] == pytest.approx(0.9) and r["fallback"] is None
    t = survey(Client(srv.url, "m"), "text", k=2)
    # Every call is asked twice and abstains: (100 + 4) · 2 tokens per call.
    assert (t["scored"], t["first"], t["tokens"], t["weighted"]) == (0, 0, 208, 0) and math.isnan(
        t["right"]
    )
    assert main([srv.url, "--k", "1", "--formats", "json,text"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[2:] == [
        "| loopback | json | 6 | 100.0% | 100.0% | 110 | 10.0 | 0.89 / 0.22 | 6 | 0.90 |",
        "| loopback | text | 6 | 0.0% | 0.0% | 208 | 8.0 | — / — | 0 | — |",
    ]
    for bad in (["--formats", "json,yaml"], ["--k", "0"]):
        with pytest.raises(SystemExit) as stop:
            main([srv.url, *bad])
        assert (
            stop.value.code == 2
            and "need --formats from json,text,digit and --k >= 1" in capsys.readouterr().err
        )
