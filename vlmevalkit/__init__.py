"""VERDICT inside VLMEvalKit: verdict_model.VerdictVLM, a model class with VLMEvalKit's interface
(docs/vlmevalkit.md)."""
