"""Shared fixtures: the loopback server, a small PNG, the `live` marker; Hypothesis's profiles.

Tests marked @pytest.mark.live (all in tests/test_live.py) talk to a real OpenAI-compatible server
at $VERDICT_LIVE_URL and are skipped when it is unset. They are written for the server serve_tiny.sh
starts (SmolLM2-135M-Instruct on llama.cpp's llama-server, with a random-weight vision projector):
every one sends real images, through the `live` fixture, a loopback proxy that keeps each exchange;
the terminal summary counts the requests that reached the live server and those that carried images.
"""

import os
import threading
from typing import NamedTuple

import pytest
import requests
from PIL import Image

from verdict_lab.loopback import LoopbackServer

LIVE_EXCHANGES = pytest.StashKey[list]()  # every exchange of every live test of the session

try:  # Hypothesis is for tests only (tests/test_claims.py, which skips without it)
    from hypothesis import settings
except ImportError:
    pass
else:
    # "ci": the same examples on every run (derandomised, no example database) and no deadline, so
    # that a slow machine fails nothing and a failure reproduces; CI runs with CI=true. "dev":
    # random, with the database in .hypothesis/ replaying earlier failures first.
    settings.register_profile("ci", derandomize=True, deadline=None, database=None, print_blob=True)
    settings.register_profile("dev", deadline=None)
    settings.load_profile("ci" if os.environ.get("CI") else "dev")


def pytest_collection_modifyitems(config, items):
    if os.environ.get("VERDICT_LIVE_URL"):
        return
    skip = pytest.mark.skip(
        reason="live test: set VERDICT_LIVE_URL to a running OpenAI-compatible server"
    )
    for item in items:
        if "live" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def loopback():
    """start(handler, **kwargs) -> a running LoopbackServer, stopped when the test ends."""
    servers = []

    def start(handler, **kwargs):
        srv = LoopbackServer(handler, **kwargs).__enter__()
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.close()


class Exchange(NamedTuple):
    """One request the proxy forwarded to the live server, and its answer."""

    path: str
    body: dict
    status: int
    reply: dict | str  # the parsed JSON, or the text of a body that is not JSON

    @property
    def images(self) -> int:
        """The image parts of the request's messages."""
        parts = [
            p
            for m in self.body.get("messages", [])
            if isinstance(m.get("content"), list)
            for p in m["content"]
        ]
        return sum(p.get("type") == "image_url" for p in parts)


class LiveProxy:
    """A loopback server forwarding every POST to the live server at `target` (".../v1"), keeping
    each exchange (in `mine`, and in the session's `exchanges`). rewrite, when set: rewrite(body,
    reply) -> the reply passed on for each 200 of the live server (what the live server sent stays
    recorded as sent)."""

    def __init__(self, target: str, exchanges: list):
        self.target, self.exchanges, self.rewrite = target.rstrip("/"), exchanges, None
        self.mine, self._lock = [], threading.Lock()
        self.server = LoopbackServer(self.forward).__enter__()
        self.url = self.server.url

    def forward(self, body, path):
        r = requests.post(self.target + path.removeprefix("/v1"), json=body, timeout=900)
        try:
            reply = r.json()
        except ValueError:
            reply = r.text
        with self._lock:
            ex = Exchange(path, body, r.status_code, reply)
            self.mine.append(ex)
            self.exchanges.append(ex)
        if self.rewrite is not None and r.status_code == 200:
            reply = self.rewrite(body, reply)
        return r.status_code, reply

    def ok(self) -> list:
        """The exchanges the live server answered with 200."""
        return [e for e in self.mine if e.status == 200]


@pytest.fixture
def live(request):
    """A LiveProxy to $VERDICT_LIVE_URL (skipped when unset), closed when the test ends."""
    url = os.environ.get("VERDICT_LIVE_URL")
    if not url:
        pytest.skip("set VERDICT_LIVE_URL")
    proxy = LiveProxy(url, request.config.stash.setdefault(LIVE_EXCHANGES, []))
    yield proxy
    proxy.server.close()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    exchanges = config.stash.get(LIVE_EXCHANGES, [])
    if exchanges:
        with_images = [e for e in exchanges if e.images]
        terminalreporter.write_line(
            f"live server: {len(exchanges)} requests, {len(with_images)} with images "
            f"({sum(e.images for e in with_images)} images in all), "
            f"{sum(e.status == 200 for e in exchanges)} answered 200"
        )


@pytest.fixture
def png(tmp_path):
    """A 64×48 green PNG file."""
    path = tmp_path / "scene.png"
    Image.new("RGB", (64, 48), (10, 200, 30)).save(path)
    return path
