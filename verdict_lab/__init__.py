"""The tools around the VERDICT reference (verdict.py, judges.py, prompts/): the harness, the judge
modes, the robust client, the studies, the VLMEvalKit model and the tiny server. Its commands run as
modules: `python -m verdict_lab.evaluate`, `python -m verdict_lab.bench`,
`python -m verdict_lab.simulate`."""
