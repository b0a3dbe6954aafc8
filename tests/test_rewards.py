"""Tests for modes/rewards.py: ReVISE's GRPO rewards, golden values with their derivation and seeded
properties, and docs/rewards.md's snippet run as TRL's GRPOTrainer would run it."""

import inspect
import json
import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from verdict_lab.modes.rewards import (
    accuracy_reward,
    format_reward,
    grounding_reward,
    is_correct,
    make_accuracy_reward,
    make_format_reward,
    make_self_correction_reward,
    matched_iou,
    self_correction_reward,
    turns,
)
from verdict_lab.modes.zoom import iou

# ----------------------------------------------------------------------------- rewards: completions


def test_turns_reads_both_completion_formats():
    assert turns("<think>a</think>") == ["<think>a</think>"]
    conv = [
        {"role": "assistant", "content": "first"},
        {"role": "tool", "content": "[0, 0, 5, 5] re-examine"},  # the tool's words, not the model's
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "sec"},
                {"type": "image"},
                {"type": "text", "text": "ond"},
            ],
        },
        {"content": "no role"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "type": "function",
                    "function": {"name": "zoom_in", "arguments": '{"bbox": [1, 2, 3, 4]}'},
                }
            ],
        },
    ]
    assert turns(conv) == [
        "first",
        "second",
        "no role",
        '<tool_call>{"name": "zoom_in", "arguments": {"bbox": [1, 2, 3, 4]}}</tool_call>',
    ]
    for bad in (3, None, [["not a message"]]):
        with pytest.raises(ValueError, match="completion must be|message must be"):
            turns(bad)


def test_format_reward_golden():
    ok = "<think>the cup is left</think>\n<answer>A</answer>\n"
    call = '<think>look closer</think><tool_call>{"name": "zoom_in"}</tool_call>'
    completions = [
        ok,  # +1: think, then answer
        "<answer>A</answer>",  # −1: no think
        "<think>x</think><answer>A</answer> trailing words",  # −1: text outside the tags
        "<think>x</think>",  # −1: no action after the thought
        [
            {"role": "assistant", "content": call},
            {"role": "tool", "content": "crop"},
            {"role": "assistant", "content": ok},
        ],  # +1: a tool call, the tool's reply, an answer
        [
            {"role": "assistant", "content": call},
            {"role": "assistant", "content": "A"},
        ],  # −1: a bare turn
        [{"role": "user", "content": ok}],  # −1: no assistant turn at all
    ]
    assert format_reward(completions) == [1.0, -1.0, -1.0, -1.0, 1.0, -1.0, -1.0]
    assert make_format_reward(r"<answer>.*</answer>")(["<answer>A</answer>"]) == [1.0]


def test_accuracy_reward_golden():
    completions = [
        "<think>t</think><answer>\\boxed{3}</answer>",  # boxed 3 = 3.0
        "<think>t</think><answer>(B)</answer>",  # (B) = b
        "<think>t</think><answer>4</answer>",  # wrong
        "<think>t</think> 3",  # no answer tag: no answer
        "<answer>2</answer> then <answer>3</answer>",  # the last answer counts
        "<answer>3</answer>",
    ]
    solution = ["3.0", "b", "3", "3", "3", None]  # None: not applicable
    assert accuracy_reward(completions, solution) == [1.0, 1.0, 0.0, 0.0, 1.0, None]
    with pytest.raises(ValueError, match=r"solution must give one value per completion \(2\)"):
        accuracy_reward(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="solution must give one value per completion"):
        self_correction_reward(
            ["a"], "3"
        )  # a bare string is not a column, even of the right length


def test_is_correct_normalisation():
    assert is_correct(" Left. ", "left") and is_correct("$12$", "12.0")
    assert is_correct("'cat'", "CAT") and not is_correct("12", "13")
    assert not is_correct(None, "12") and not is_correct("1e400", "12")


def test_self_correction_reward_golden():
    wrong = "<think>Let me re-examine the crop.</think><answer>4</answer>"
    right = "<think>Let me re-examine the crop.</think><answer>3</answer>"
    plain_wrong = "<think>done</think><answer>4</answer>"
    variants = "<think>Re-examining: no. Reexamined.</think><answer>5</answer>"
    tool_says_it = [
        {"role": "assistant", "content": plain_wrong},
        {"role": "tool", "content": "please re-examine"},
    ]
    completions = [wrong, right, plain_wrong, variants, tool_says_it, wrong]
    # −1 only for re-examine AND wrong; the tool's message is not the model's; None where there
    # is no solution.
    assert self_correction_reward(completions, ["3", "3", "3", "3", "3", None]) == [
        -1.0,
        0.0,
        0.0,
        -1.0,
        0.0,
        None,
    ]


# ----------------------------------------------------------------------------- rewards: grounding


def test_iou_golden_and_degenerate():
    # [0,0,10,10] vs [0,0,10,20]: ∩ = 100, ∪ = 100 + 200 − 100 = 200 -> 0.5; vs [5,5,15,15]: ∩ = 25,
    # ∪ = 175 -> 1/7; disjoint -> 0; a zero-area box -> 0 (even against itself: empty union).
    m = iou([[0, 0, 10, 10]], [[0, 0, 10, 20], [5, 5, 15, 15], [20, 20, 30, 30], [0, 0, 0, 10]])
    np.testing.assert_allclose(m, [[0.5, 1 / 7, 0.0, 0.0]])
    assert iou([[3, 3, 3, 3]], [[3, 3, 3, 3]]).tolist() == [[0.0]]


@pytest.mark.parametrize("seed", range(3))
def test_iou_matches_a_pixel_count(seed):
    rng = np.random.default_rng(seed)
    for _ in range(50):
        a, b = (
            np.sort(rng.integers(0, 30, size=(2, 2)), axis=1).T.ravel()[[0, 2, 1, 3]]
            for _ in range(2)
        )
        grid = np.zeros((2, 30, 30), dtype=bool)  # [2, y, x]
        for k, (x1, y1, x2, y2) in enumerate((a, b)):
            grid[k, y1:y2, x1:x2] = True
        union = (grid[0] | grid[1]).sum()
        expected = (grid[0] & grid[1]).sum() / union if union else 0.0
        assert iou([a], [b])[0, 0] == pytest.approx(expected)


def test_matched_iou_golden():
    # pred A = [0,0,10,10], B = [0,0,10,5]; ref R1 = [0,0,10,10], R2 = [0,0,10,6]. IoU: A–R1 = 1,
    # A–R2 = 60/100, B–R1 = 50/100, B–R2 = 50/60. Greedy: A–R1 (1), then B–R2 (5/6):
    # (1 + 5/6) / 2 = 11/12.
    A, B, R1, R2 = [0, 0, 10, 10], [0, 0, 10, 5], [0, 0, 10, 10], [0, 0, 10, 6]
    assert matched_iou([A, B], [R1, R2]) == pytest.approx(11 / 12)
    assert matched_iou([A], [R1, [20, 20, 30, 30]]) == pytest.approx(
        0.5
    )  # a missed reference counts 0
    assert matched_iou([A, A, A], [R1]) == pytest.approx(1 / 3)  # spraying copies does not pay


def test_grounding_reward_golden():
    ref = [[0, 0, 10, 10]]
    half, exact = "[0, 0, 10, 20]", "[0, 0, 10, 10]"  # IoU 0.5 and 1 with the reference

    def conv(*contents):
        return [{"role": "assistant", "content": c} for c in contents]

    completions = [
        conv(f"zoom {half}", "no box here", f"fixed: {exact}"),  # 1 + max(0, 1 − 0.5) = 1.5
        conv(f"zoom {exact}", f"then {half}"),  # got worse: 0.5 + 0 = 0.5
        f"<answer>{half} ... {exact}</answer>",  # one turn, matched: max-IoU pair 1, spare 0 -> 0.5
        conv("no boxes at all"),  # 0
        conv(exact),  # one turn, never updated: 1 + 0
        [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"function": {"name": "zoom_in", "arguments": {"bbox": [0, 0, 10, 20]}}}
                ],
            },
            {
                "role": "tool",
                "content": "[0, 0, 10, 10]",
            },  # a box in the tool's reply is not produced
            {"role": "assistant", "content": "<answer>[0, 0, 10, 10]</answer>"},
        ],  # 1 + (1 − 0.5) = 1.5
        conv(exact),
    ]
    refs = [ref, ref, ref, ref, ref, ref, None]  # None: no grounding for this sample
    assert grounding_reward(completions, refs) == pytest.approx(
        [1.5, 0.5, 0.5, 0.0, 1.0, 1.5, None]
    )
    assert grounding_reward([conv(exact)], [[0, 0, 10, 10]]) == [
        1.0
    ]  # one reference box given flat
    with pytest.raises(ValueError, match=r"ref_boxes\[0\]\[0\]=\[5, 5, 5, 9\] is degenerate"):
        grounding_reward(["x"], [[[5, 5, 5, 9]]])


@pytest.mark.parametrize("seed", range(3))
def test_grounding_reward_is_the_same_in_pixels_and_in_norm1000(seed):
    # ReVISE de-normalises both boxes to pixels; IoU is unchanged by a per-axis
    # rescaling, so the reward is too.
    rng = np.random.default_rng(seed)
    W, H = 1920, 1080
    for _ in range(20):
        boxes = [
            np.sort(rng.uniform(0, 1000, (2, 2)), axis=0).T.ravel()[[0, 2, 1, 3]] for _ in range(4)
        ]
        px = [b * [W / 1000, H / 1000, W / 1000, H / 1000] for b in boxes]
        fmt = lambda b: "[" + ", ".join(f"{v:.6f}" for v in b) + "]"
        norm = [
            {"role": "assistant", "content": fmt(boxes[0])},
            {"role": "assistant", "content": fmt(boxes[1])},
        ]
        pixels = [
            {"role": "assistant", "content": fmt(px[0])},
            {"role": "assistant", "content": fmt(px[1])},
        ]
        a = grounding_reward([norm], [[list(boxes[2]), list(boxes[3])]])[0]
        b = grounding_reward([pixels], [[list(px[2]), list(px[3])]])[0]
        assert a == pytest.approx(b, abs=1e-6) and 0.0 <= a <= 2.0


def test_rewards_take_the_keyword_arguments_grpo_trainer_passes():
    # GRPOTrainer calls reward(prompts=..., completions=..., completion_ids=..., trainer_state=...,
    # **columns) and logs each under its __name__; columns the reward does not use (here "answer",
    # "image") are ignored.
    completions = [
        [
            {
                "role": "assistant",
                "content": "<think>re-examine [0, 0, 10, 10]</think><answer>4</answer>",
            }
        ]
    ]
    kwargs = dict(
        prompts=[[{"role": "user", "content": "How many?"}]],
        completions=completions,
        completion_ids=[[1, 2]],
        trainer_state=object(),
        solution=["3"],
        ref_boxes=[[[0, 0, 10, 10]]],
        answer=["3"],
        image=[None],
    )
    funcs = (accuracy_reward, format_reward, self_correction_reward, grounding_reward)
    assert [f(**kwargs) for f in funcs] == [[0.0], [1.0], [-1.0], [1.0]]
    assert len({f.__name__ for f in funcs}) == 4


REWARDS = (accuracy_reward, format_reward, self_correction_reward, grounding_reward)


def test_rewards_name_only_completions_and_their_column():
    # TRL passes every dataset column as a keyword: any other named parameter could be taken
    # from one.
    for f in REWARDS:
        params = inspect.signature(f).parameters.values()
        named = {p.name for p in params if p.kind is not p.VAR_KEYWORD}
        assert named <= {"completions", "solution", "ref_boxes"} and params, f.__name__
        assert any(p.kind is p.VAR_KEYWORD for p in params), f.__name__


def test_a_column_named_like_a_former_parameter_is_ignored():
    # Each former parameter as a dataset column (one value per completion, as TRL passes it), with a
    # value that would change every reward if it were taken: "(.*)" reads the whole text as the
    # answer, ".*" passes any format, "done" would count as a re-examination.
    completions = [
        "<think>Let me re-examine.</think><answer>4</answer>",
        "<think>done</think><answer>3</answer>",
    ]
    hostile = dict(
        format_pattern=[".*"] * 2, answer_pattern=["(.*)"] * 2, reexamine_pattern=["done"] * 2
    )
    trl = dict(prompts=["How many?"] * 2, completion_ids=[[1, 2], [3]], trainer_state=object())
    columns = dict(solution=["3", "3"], ref_boxes=[None, None])
    expected = [[0.0, 1.0], [1.0, 1.0], [-1.0, 0.0], [None, None]]
    assert [f(completions=completions, **trl, **columns) for f in REWARDS] == expected
    assert [f(completions=completions, **trl, **columns, **hostile) for f in REWARDS] == expected
    assert [
        f(completions, **columns, **hostile) for f in REWARDS
    ] == expected  # positional completions too


def test_the_factories_bind_their_patterns_and_check_them():
    final = r"(?s)<final>(.*?)</final>"
    completions = [
        "<think>re-examine</think><final>3</final>",
        "<think>re-examine</think><final>4</final>",
    ]
    assert make_accuracy_reward(final)(completions, ["3", "3"]) == [1.0, 0.0]
    assert accuracy_reward(completions, ["3", "3"]) == [0.0, 0.0]  # the default reads <answer>
    assert make_self_correction_reward(answer_pattern=final)(completions, ["3", "3"]) == [0.0, -1.0]
    assert make_self_correction_reward(r"nothing said", final)(completions, ["3", "3"]) == [
        0.0,
        0.0,
    ]
    assert make_format_reward(re.compile(r"<think>.*</think><final>.*</final>"))(completions) == [
        1.0,
        1.0,
    ]
    made = (make_accuracy_reward(), make_format_reward(), make_self_correction_reward())
    assert [f.__name__ for f in made] == [
        "accuracy_reward",
        "format_reward",
        "self_correction_reward",
    ]
    with pytest.raises(ValueError, match=r"format_pattern='<think>\(' is not a regular expression"):
        make_format_reward("<think>(")
    with pytest.raises(ValueError, match=r"answer_pattern must be a regular expression .*=\['x'\]"):
        make_accuracy_reward(["x"])
    with pytest.raises(ValueError, match="reexamine_pattern must be a regular expression"):
        make_self_correction_reward(None)
    with pytest.raises(ValueError, match=r"per completion \(1\), got ref_boxes=None"):
        grounding_reward(["x"], solution=["3"])  # the column it reads is missing


class _GRPOTrainer:
    """A stand-in for trl.GRPOTrainer that calls its reward_funcs as TRL's _calculate_rewards does:
    every column of the batch but "prompt", "completion" and "completion_ids" as a keyword argument,
    one value per completion, with trainer_state; None becomes NaN, then each is weighted (1 by
    default) and summed."""

    completions: list = []  # what "the model" writes, one completion per row
    last = None

    def __init__(self, model, reward_funcs, args=None, train_dataset=None, **kwargs):
        self.model, self.reward_funcs, self.args, self.dataset = (
            model,
            reward_funcs,
            args,
            train_dataset,
        )
        type(self).last = self

    def train(self):
        rows = list(self.dataset)
        keys = [k for k in rows[0] if k not in ("prompt", "completion", "completion_ids")]
        kwargs = {k: [r[k] for r in rows] for k in keys}
        kwargs["trainer_state"] = object()
        ids = [[0] * len(str(c)) for c in self.completions]  # token ids: unused by these rewards
        self.rewards = {
            f.__name__: [
                np.nan if v is None else v
                for v in f(
                    prompts=[r["prompt"] for r in rows],
                    completions=self.completions,
                    completion_ids=ids,
                    **kwargs,
                )
            ]
            for f in self.reward_funcs
        }
        self.total = np.nansum(list(self.rewards.values()), axis=0)  # [funcs, rows] -> [rows]


def test_the_docs_snippet_runs_as_grpo_trainer_calls_it(monkeypatch):
    page = (Path(__file__).resolve().parents[1] / "docs" / "rewards.md").read_text()
    (snippet,) = [b for b in re.findall(r"```python\n(.*?)```", page, re.S) if "GRPOTrainer(" in b]
    trl = types.ModuleType("trl")
    trl.GRPOTrainer, trl.GRPOConfig = _GRPOTrainer, lambda **kwargs: kwargs
    monkeypatch.setitem(sys.modules, "trl", trl)
    user = lambda text: [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}
    ]
    dataset = [  # the page's columns: prompt, image, solution, ref_boxes; a math row has no boxes
        dict(prompt=user("How many cups?"), image=None, solution="3", ref_boxes=[[0, 0, 10, 10]]),
        dict(prompt=user("2 + 2?"), image=None, solution="4", ref_boxes=None),
    ]
    _GRPOTrainer.completions = [
        [
            {
                "role": "assistant",
                "content": "<think>zoom</think><tool_call>[0, 0, 10, 20]</tool_call>",
            },
            {"role": "tool", "content": "a crop"},
            {
                "role": "assistant",
                "content": "<think>re-examine: [0, 0, 10, 10]</think><answer>3</answer>",
            },
        ],
        [{"role": "assistant", "content": "<think>re-examine</think><answer>5</answer>"}],
    ]
    exec(snippet, {"dataset": dataset})
    t = _GRPOTrainer.last
    # row 1: right (1), tidy (1), re-examined but right (0), grounding 1 + (1 − 0.5) = 1.5: 3.5 in
    # all; row 2: wrong (0), tidy (1), re-examined and wrong (−1), no grounding (NaN, left out): 0
    # in all
    assert t.rewards["accuracy_reward"] == [1.0, 0.0] and t.rewards["format_reward"] == [1.0, 1.0]
    assert t.rewards["self_correction_reward"] == [0.0, -1.0]
    grounding = t.rewards["grounding_reward"]
    assert grounding[0] == pytest.approx(1.5) and np.isnan(grounding[1])
    assert t.total.tolist() == pytest.approx([3.5, 0.0])
    assert t.model and t.args == {"output_dir": "revise-grpo"}
    (other,) = [
        b for b in re.findall(r"```python\n(.*?)```", page, re.S) if "make_format_reward(" in b
    ]
    made = {}
    exec(other, made)  # the page's other patterns: a think-then-final format, read by all three
    final = [
        "<think>\nre-examine\n</think>\n<final>3</final>",
        "<think>ok</think><answer>3</answer>",
    ]
    assert made["format_reward"](final) == [1.0, -1.0]
    assert made["accuracy_reward"](final, [3, 3]) == [1.0, 0.0]
    assert made["self_correction_reward"](final, [4, 4]) == [-1.0, 0.0]


# ------------------------------------------------------------------- TRL's parsed completions

# TRL (trl@f2cd5771) parses each completion with the tokenizer's response schema before the rewards
# see it, when transformers >= 5 has a response template, and whenever GRPOTrainer has tools. For
# Qwen2.5, Qwen3 and Qwen3-VL templates that is qwen3_schema (chat_template_utils.py), copied here:
# <think>…</think> goes to "reasoning_content" (its first and last newline dropped), tool calls to
# "tool_calls" as {"type": "function", "function": {...}}, the rest to "content" (parse_response
# makes a missing content "").
QWEN3_X_REGEX = (
    r"^(?:<think>\n?(?:(?P<reasoning_content>.*?\S.*?)\n?|[\s]*)</think>\s*)?"
    r"(?P<content>(?:(?!<tool_call>)[\s\S])*?)(?:\n(?=<tool_call>))?"
    r"(?=(?:<tool_call>|<\|im_end\|>|$))"
    r"(?P<tool_calls>(?:<tool_call>(?:(?!</tool_call>)[\s\S])+</tool_call>\s*)+)?"
    r"\s*(?:<\|im_end\|>|$)"
)


def trl_parsed(text: str, thinking_key: str = "reasoning_content") -> dict:
    """An assistant turn as TRL's parse_response leaves it under qwen3_schema."""
    found = re.search(QWEN3_X_REGEX, text, re.S).groupdict()
    parsed = {"role": "assistant", "content": found["content"] or ""}
    if found["reasoning_content"] is not None:
        parsed[thinking_key] = found["reasoning_content"]
    if found["tool_calls"] is not None:
        calls = re.findall(r"<tool_call>\s*(.+?)\s*</tool_call>", found["tool_calls"], re.S)
        parsed["tool_calls"] = [{"type": "function", "function": json.loads(c)} for c in calls]
    return parsed


def as_trl_parses(completion: list, thinking_key: str = "reasoning_content") -> list:
    return [
        trl_parsed(m["content"], thinking_key) if m["role"] == "assistant" else m
        for m in completion
    ]


ZOOM = '<tool_call>\n{"name": "zoom_in", "arguments": {"bbox": [0, 0, 10, 20]}}\n</tool_call>'
# Raw completions as the model writes them (each a conversation), covering every reward: right and
# wrong answers, good and bad formats, "re-examine" said only in the thinking, boxes in the
# thinking and in a tool call, and a tool's turn between two of the model's.
RAW = [
    [
        {
            "role": "assistant",
            "content": "<think>\nI re-examine the cups.\n</think>\n\n<answer>4</answer>",
        }
    ],
    [{"role": "assistant", "content": "<think>\nCounting: 3.\n</think>\n\n<answer>3</answer>"}],
    [{"role": "assistant", "content": "<answer>3</answer>"}],
    [
        {
            "role": "assistant",
            "content": "<think>\nsee [0, 0, 10, 10]\n</think>\n\n<answer>3</answer> extra",
        }
    ],
    [
        {"role": "assistant", "content": "<think>\nLook closer.\n</think>\n\n" + ZOOM},
        {"role": "tool", "content": "a crop"},
        {
            "role": "assistant",
            "content": "<think>\nRe-examining [0, 0, 10, 10]\n</think>\n\n<answer>5</answer>",
        },
    ],
]
SOLUTION = ["3"] * len(RAW)
REF = [[[0, 0, 10, 10]]] * len(RAW)
REWARD_FUNCS = (accuracy_reward, format_reward, self_correction_reward, grounding_reward)


def rewards_of(completions) -> list:
    return [f(completions=completions, solution=SOLUTION, ref_boxes=REF) for f in REWARD_FUNCS]


def test_trl_parsed_completions_are_shaped_as_trl_leaves_them():
    first, fifth = as_trl_parses(RAW[0]), as_trl_parses(RAW[4])
    assert first == [
        {
            "role": "assistant",
            "content": "<answer>4</answer>",
            "reasoning_content": "I re-examine the cups.",
        }
    ]
    assert fifth[0]["content"] == "" and fifth[0]["tool_calls"] == [
        {"type": "function", "function": {"name": "zoom_in", "arguments": {"bbox": [0, 0, 10, 20]}}}
    ]
    assert "<think>" not in json.dumps([as_trl_parses(c) for c in RAW])


@pytest.mark.parametrize("key", ["reasoning_content", "thinking"])
def test_rewards_on_trl_parsed_completions_equal_those_on_the_raw_text(key):
    raw, parsed = rewards_of(RAW), rewards_of([as_trl_parses(c, key) for c in RAW])
    # Completions 0..4: 0 is wrong with "re-examine" in the thinking; 1 right and tidy; 2 has no
    # thinking; 3 has text after the answer and a box [0, 0, 10, 10] (IoU 1) in the thinking; 4
    # calls a tool with [0, 0, 10, 20] (IoU 0.5), then says "Re-examining" with the right box and
    # answers wrong: grounding 1 + (1 − 0.5).
    assert raw == [
        [0.0, 1.0, 1.0, 1.0, 0.0],  # accuracy
        [1.0, 1.0, -1.0, -1.0, 1.0],  # format
        [-1.0, 0.0, 0.0, 0.0, -1.0],  # self-correction
        [0.0, 0.0, 0.0, 1.0, 1.5],  # grounding
    ]
    assert parsed == raw


def test_before_reading_the_thinking_trl_parsed_rewards_were_wrong():
    # What the rewards gave when turns() read only content and tool_calls: the thinking lost, the
    # tidy completions got format −1 and a "re-examine" said while thinking went unseen.
    no_thinking = [
        [{k: v for k, v in m.items() if k != "reasoning_content"} for m in as_trl_parses(c)]
        for c in RAW
    ]
    blind = rewards_of(no_thinking)
    assert blind[1] == [-1.0, -1.0, -1.0, -1.0, -1.0]  # format: every completion refused
    assert blind[2] == [0.0, 0.0, 0.0, 0.0, 0.0]  # "re-examine" in 0's and 4's thinking unseen
    assert blind[3] == [0.0, 0.0, 0.0, 0.0, 0.5]  # only the tool call's box is seen


def test_rewards_take_every_keyword_trl_passes():
    # _calculate_rewards: prompts, completions, completion_ids, trainer_state, log_extra,
    # log_metric, environments (with environments) and every column.
    logged = []
    kwargs = dict(
        prompts=[[{"role": "user", "content": "How many?"}]] * len(RAW),
        completions=[as_trl_parses(c) for c in RAW],
        completion_ids=[[1]] * len(RAW),
        trainer_state=object(),
        log_extra=lambda *a, **k: logged.append(a),
        log_metric=lambda *a, **k: logged.append(a),
        environments=[object()] * len(RAW),
        solution=SOLUTION,
        ref_boxes=REF,
    )
    assert [f(**kwargs) for f in REWARD_FUNCS] == rewards_of(RAW) and logged == []
