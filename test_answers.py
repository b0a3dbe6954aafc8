"""Tests for answers.py: VLMEvalKit's can_infer on 73 replies traced by hand (the version at commit e8e78f05,
2026-08-18), what each outcome is called, free-form values (MathVista) with their precision and unit, and
the extraction model against a loopback server."""
import pytest

import answers
from answers import Value
from benchmarks import Item
from loopback import chat_response, user_text

C4 = {"A": "cat", "B": "dog", "C": "teddy bear", "D": "rabbit"}
C5 = {**C4, "E": "fox"}
C3 = {"A": "cat", "B": "dog", "C": "fox"}
C2 = {"A": "cat", "B": "dog"}
YN = {"A": "Yes", "B": "No"}
NUM = {"A": "1", "B": "2", "C": "3", "D": "4"}
OPEN = {"A": "42", "B": "Other Answers"}  # an MMMU open question, as VLMEvalKit scores it

# (row, reply, options, what VLMEvalKit's can_infer returns; None for False). Worked by its rules: tokens split
# at whitespace and . ( ) [ ] , : ; ! * # { }; one distinct option letter, first seen among the last four
# tokens; else a lone Z; else "answer is X" (X in A-D); else exactly one option text inside a reply at most
# twice as long as all option texts together. For example row 6: "B" is token 4 of 21, too early, so the
# regex finds "answer is **B"; row 17 is 73 characters, more than 2 · 22, so no option text is tried; row
# 28's regex reads the "c" of "clearly"; row 72 takes the article "A" as option A.
CAN_INFER = [
    (1, 'A', C4, 'A'),
    (2, 'B.', C4, 'B'),
    (3, '(C)', C4, 'C'),
    (4, 'b', C4, None),
    (5, 'The answer is b', C4, 'B'),
    (6, "The correct answer is **B**. Here's why: the picture shows a brown dog sitting on green grass next to a fence.", C4, 'B'),
    (7, '**B**', C4, 'B'),
    (8, 'B) dog', C4, 'B'),
    (9, 'Answer: C', C4, 'C'),
    (10, "I think it's A or B", C4, None),
    (11, 'dog', C4, 'B'),
    (12, 'It is a dog', C4, 'B'),
    (13, 'A dog', C4, 'A'),
    (14, 'Answer: A dog', C4, 'A'),
    (15, 'The cat and the dog', C4, None),
    (16, 'teddy bear', C4, 'C'),
    (17, 'The image shows a small brown dog lying on a wooden floor next to a sofa.', C4, None),
    (18, '', C4, None),
    (19, 'Z', C4, 'Z'),
    (20, 'Cannot determine the answer', C4, 'Z'),
    (21, 'Failed to obtain answer via API', C4, None),
    (22, 'C. teddy bear', C4, 'C'),
    (23, 'The answer is (D).', C4, 'D'),
    (24, 'D is wrong, the answer is A', C4, 'A'),
    (25, 'A, B', C4, None),
    (26, 'Option B', C4, 'B'),
    (27, 'B\n\nExplanation: the object in the image is clearly a small brown dog sitting on the grass', C4, None),
    (28, 'The answer is clearly not visible', C4, 'C'),
    (29, 'Answer is a', C4, 'A'),
    (30, 'My answer is E', C4, None),
    (31, 'My answer is E', C5, 'E'),
    (32, 'answer: b', C4, None),
    (33, 'No', YN, 'B'),
    (34, 'Yes, I know', YN, None),
    (35, 'Yes', YN, 'A'),
    (36, 'yes', YN, 'A'),
    (37, '3', NUM, 'C'),
    (38, '12', NUM, None),
    (39, 'C', C2, None),
    (40, 'The answer is A. A cat is visible.', C4, 'A'),
    (41, '[B]', C4, 'B'),
    (42, '{C}', C4, 'C'),
    (43, '#D', C4, 'D'),
    (44, 'B!', C4, 'B'),
    (45, "B's", C4, None),
    (46, 'Option-B', C4, None),
    (47, 'B/C', C4, None),
    (48, '(B)(C)', C4, None),
    (49, "I'm sorry, but without the image provided, I can't answer", C4, 'Z'),
    (50, 'Z. None of the above', C4, 'Z'),
    (51, '**Answer:** A', C4, 'A'),
    (52, 'A\nB\nC', C4, None),
    (53, 'Based on the image, I would choose A', C4, 'A'),
    (54, 'A is the answer because the dog is on the left side of the picture', C4, None),
    (55, 'The correct answer is (b) dog', C4, 'B'),
    (56, 'The correct answer is (b)', C4, None),
    (57, 'The answer is D', C3, None),
    (58, 'The answer is based on the dog', C4, 'B'),
    (59, 'A. cat B. dog', C4, None),
    (60, 'Final answer: B', C4, 'B'),
    (61, 'B B B', C4, 'B'),
    (62, 'The first option A seems right but on reflection it is B', C4, None),
    (63, '<answer>B</answer>', C4, None),
    (64, '\\boxed{B}', C4, 'B'),
    (65, 'rabbit', C4, 'D'),
    (66, 'a rabbit and a cat', C4, None),
    (67, 'CAT', C4, 'A'),
    (68, '(A) cat', C4, 'A'),
    (69, 'Answer: (A)\nReason: looks like it', C4, None),
    (70, '42', OPEN, 'A'),
    (71, 'The answer is 42.', OPEN, 'A'),
    (72, 'A total of 17', OPEN, 'A'),
    (73, 'Other answers', OPEN, 'B'),
]


@pytest.mark.parametrize("row, reply, choices, expected", CAN_INFER, ids=[str(r[0]) for r in CAN_INFER])
def test_can_infer_matches_vlmevalkit(row, reply, choices, expected):
    assert (answers.can_infer(reply, dict(choices)) or None) == expected


OPTIONS = (("A", "12"), ("B", "30"), ("C", "red apple"), ("D", "1"))


@pytest.mark.parametrize("text, expected", [
    ("B", ("B", "letter")),
    ("B. 30", ("B", "letter")),
    ("The answer is D", ("D", "letter")),             # "D" is the 4th token from the end: near enough
    ("D is right, since one is less than twelve", (None, "unanswered")),  # far from the end, and too long for text
    ("The answer is based on the thirty", ("B", "letter")),  # "answer is b": VLMEvalKit's last resort
    ("A or B", (None, "unanswered")),                 # two letters, and no option text either
    ("30", ("B", "text")),
    ("a RED APPLE", ("C", "text")),                   # option text, case-insensitive
    ("12", (None, "unanswered")),                     # both "12" and "1" are substrings: not unique
    ("E", (None, "unanswered")),                      # not an option letter
    ("Cannot determine the answer", (None, "declined")),  # VLMEvalKit's Z: an answer, always wrong
    ("", (None, "unanswered")),
    (None, (None, "unanswered")),                     # the chain gave no final answer
])
def test_extract_names_how(text, expected):
    assert answers.extract(text, OPTIONS) == expected


@pytest.mark.parametrize("text, answer, value, correct", [
    ("14", "14", Value("integer"), True),
    ("14.0", "14", Value("integer"), True),            # VLMEvalKit's int("14.0") fails; the number is 14
    ("14.5", "14", Value("integer"), False),
    ("There are 14 birds.", "14", Value("integer"), True),  # the one number in the answer
    ("3 + 11 = 14", "14", Value("integer"), None),     # three numbers: unanswered
    ("1,000", "1000", Value("integer"), True),         # thousands comma
    ("1.45", "1.45", Value("float", 2), True),
    ("1.449", "1.45", Value("float", 2), True),        # 1.449 rounds to 1.45 at the row's precision
    ("1.449", "1.45", Value("float", 3), False),       # ... but not at 3 decimals (1.449 vs 1.450)
    ("1.5", "1.50", Value("float"), True),             # no precision: the answer's own 2 decimals
    ("7.1 cm", "7.1", Value("float", 1, "cm"), True),  # the unit goes
    ("\\boxed{7.1}", "7.1", Value("float", 1), True),
    ("45°", "45", Value("integer", None, "°"), True),
    ("Yes.", "yes", Value("text"), True),               # VLMEvalKit counts every text answer wrong
    ("blue  sky", "Blue sky", Value("text"), True),
    ("[2007, 2008]", "[2007, 2008]", Value("list"), True),
    ("[2008, 2007]", "[2007, 2008]", Value("list"), False),
    ("none", "14", Value("integer"), None),
])
def test_free_form_values(text, answer, value, correct):
    item = Item("MathVista_MINI", "1", 2, "q", (), answer, value=value)
    pred, how, ok = answers.score(item, text)
    assert (how, ok) == (("unanswered", False) if correct is None else ("value", correct)), pred


def mcq_item(answer="B"):
    return Item("MMStar", "7", 8, "Question: Which pet?\nOptions:\nA. cat\nB. dog", (("A", "cat"), ("B", "dog")), answer)


def test_extraction_model_tries_hotter_until_it_can_read_a_letter(loopback):
    replies = iter(["I would say the second one is meant", "Letter: B"])
    srv = loopback(lambda body, path: chat_response([next(replies)]))
    from client import Client
    got = answers.ask_model(Client(srv.url, "extractor").chat, mcq_item(), "the furry animal that barks")
    assert got == ("B", "judge", True)
    assert [c["temperature"] for c in srv.chats] == [0.0, 0.5]
    text = user_text(srv.chats[0])
    assert "Options:\nA. cat\nB. dog\nReply: the furry animal that barks\nLetter:" in text
    assert isinstance(srv.chats[0]["messages"][1]["content"], str)  # text only


def test_extraction_model_z_declines_and_three_failures_leave_it_unanswered(loopback):
    from client import Client
    srv = loopback(lambda body, path: chat_response(["Z"]))
    assert answers.ask_model(Client(srv.url, "x").chat, mcq_item(), "a spider") == (None, "declined", False)
    srv = loopback(lambda body, path: chat_response(["no idea"]))
    assert answers.ask_model(Client(srv.url, "x").chat, mcq_item(), "???") == (None, "unanswered", False)
    assert [c["temperature"] for c in srv.chats] == [0.0, 0.5, 1.0]
    srv = loopback(lambda body, path: chat_response(["Value: 7.1"]))
    item = Item("MathVista_MINI", "1", 2, "How long?", (), "7.1", value=Value("float", 1, "cm"))
    assert answers.ask_model(Client(srv.url, "x").chat, item, "roughly seven point one") == ("7.1", "judge", True)
