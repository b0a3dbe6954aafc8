"""Makes the small labelled step files of verdict_lab.process, with their images, in both layouts:

    python tests/make_process_data.py [DIR]        (DIR: tests/data/process)

- DIR/generic.jsonl: the generic layout (question, images, steps, labels in {1, 0, -1}, id,
  source), 12 samples, images in DIR/images/;
- DIR/visualprocessbench/test.jsonl: VisualProcessBench's own layout (image, question, answer,
  response.steps, response.process_correctness, policy_model, data_source), 12 samples, images in
  DIR/visualprocessbench/images/<source>/, as its images.zip unpacks beside test.jsonl.

Each image holds k squares of one colour on white; each chain reads the image, counts, and answers.
The labels are true of the pictures: a step that names the wrong colour or count is labelled -1, a
step that says nothing checkable 0. Everything is written from the tables below (no random stream),
so the files are the same on every machine.
"""

import json
import os
import sys

from PIL import Image

COLOURS = {"red": (220, 40, 40), "blue": (40, 70, 220), "green": (40, 160, 60)}
# (colour, count, the count a wrong chain states, or None for a right chain, with a neutral step)
CASES = (
    ("red", 1, None, False),
    ("blue", 2, None, True),
    ("green", 3, 2, False),
    ("red", 2, 3, True),
    ("blue", 1, None, False),
    ("green", 2, 1, False),
    ("red", 3, None, True),
    ("blue", 3, 4, False),
    ("green", 1, None, False),
    ("red", 1, 2, True),
    ("blue", 2, None, False),
    ("green", 3, None, True),
)


def picture(path: str, colour: str, count: int) -> None:
    """A 128×96 white image with `count` squares of `colour` in a row."""
    img = Image.new("RGB", (128, 96), (250, 250, 250))
    for i in range(count):
        x = 8 + i * 40
        img.paste(COLOURS[colour], (x, 32, x + 28, 60))
    img.save(path, format="PNG")


def chain(colour: str, count: int, stated, neutral: bool) -> tuple:
    """(steps, labels) of one case: a right chain, or one that miscounts from its second step."""
    n = count if stated is None else stated
    steps = [f"The image shows squares of one colour, {colour}, on a white background."]
    labels = [1]
    if neutral:
        steps.append("Squares like these are common in counting puzzles.")
        labels.append(0)
    steps += [f"There are {n} {colour} squares in a row.", f"Final answer: {n}"]
    labels += [1, 1] if stated is None else [-1, -1]
    return steps, labels


def make(out: str) -> None:
    os.makedirs(os.path.join(out, "images"), exist_ok=True)
    generic, vpb = [], []
    for i, (colour, count, stated, neutral) in enumerate(CASES):
        source = "count" if i % 2 else "colour"
        question = f"How many {colour} squares are in the image? Answer with a number."
        steps, labels = chain(colour, count, stated, neutral)
        name = f"{i:02d}_{colour}_{count}.png"
        picture(os.path.join(out, "images", name), colour, count)
        generic.append(
            {
                "id": f"g{i:02d}",
                "source": source,
                "question": question,
                "images": [f"images/{name}"],
                "steps": steps,
                "labels": labels,
            }
        )
        folder = os.path.join(out, "visualprocessbench", "images", source)
        os.makedirs(folder, exist_ok=True)
        picture(os.path.join(folder, name), colour, count)
        vpb.append(
            {
                "image": [f"images/{source}/{name}"],
                "question": question,
                "answer": str(count),
                "response": {"steps": steps, "process_correctness": labels},
                "policy_model": "scripted",
                "data_source": source,
            }
        )
    write(os.path.join(out, "generic.jsonl"), generic)
    write(os.path.join(out, "visualprocessbench", "test.jsonl"), vpb)


def write(path: str, rows: list) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    make(sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "data", "process"))
