"""The tools around the VERDICT reference (verdict.py, judges.py, prompts/), which they wrap from
outside: the loop with each call's record, each step's cost, revise on reject and adaptive
verification (loop.py, revise.py, adaptive.py), the robust client and image loading (client.py,
images.py), the harness, the judge modes, the studies, the VLMEvalKit and lmms-eval models, the
step-level scoring against human labels, the case viewer and the tiny server. Its commands run as
modules: `python -m verdict_lab.evaluate`, `python -m verdict_lab.process`,
`python -m verdict_lab.cases`, `python -m verdict_lab.bench`, `python -m verdict_lab.simulate`."""
