"""Scripted replies for the loopback server (verdict_lab/loopback.py): a handler that answers in
order, and a choice's logprobs from token probabilities."""

import math
import threading
from typing import Callable

from verdict_lab.loopback import chat_response


def token_logprobs(tokens) -> dict:
    """A choice's logprobs object from [(token, {alternative: probability, ...}), ...].

    The token's own logprob is its probability among the alternatives (1.0 if absent).
    """
    log = lambda p: math.log(p) if p > 0 else -1e9
    return {
        "content": [
            {
                "token": tok,
                "logprob": log(alts.get(tok, 1.0)),
                "top_logprobs": [{"token": a, "logprob": log(p)} for a, p in alts.items()],
            }
            for tok, alts in tokens
        ]
    }


def _as_reply(reply, body, path) -> tuple:
    """A scripted reply as (status, payload, headers): str or list of str -> a 200 chat completion,
    dict -> 200 with that JSON, tuple -> as given, callable -> called with (body, path) first."""
    if callable(reply):
        reply = reply(body, path)
    if isinstance(reply, (str, list)):
        return 200, chat_response(reply), {}
    if isinstance(reply, tuple):
        return (reply + ({},))[:3]
    return 200, reply, {}


def scripted(*replies, then=None) -> Callable:
    """A handler answering with `replies` in order, then with `then` for every later request (a 500
    "loopback script exhausted" if then is None). Thread-safe. See _as_reply for the forms."""
    queue, lock = list(replies), threading.Lock()

    def handler(body, path):
        with lock:
            reply = queue.pop(0) if queue else then
        if reply is None:
            return (
                500,
                {"error": {"message": "loopback script exhausted", "type": "server_error"}},
                {},
            )
        return _as_reply(reply, body, path)

    return handler
