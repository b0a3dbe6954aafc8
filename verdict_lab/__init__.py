"""The tools around the VERDICT reference (verdict.py, judges.py, prompts/), which they wrap from
outside: the loop with each call's record, each step's cost and revise on reject (loop.py,
revise.py), the robust client and image loading (client.py, images.py), the harness, the judge
modes, the studies, the VLMEvalKit model and the tiny server. Its commands run as modules:
`python -m verdict_lab.evaluate`, `python -m verdict_lab.bench`,
`python -m verdict_lab.simulate`."""
