"""Shared pytest fixtures: the loopback server, a small PNG, and the `live` marker; Hypothesis's profiles.

Tests marked @pytest.mark.live talk to a real OpenAI-compatible server at $VERDICT_LIVE_URL and are
skipped when it is unset. They are written for the server serve_tiny.sh starts (SmolLM2-135M-Instruct on
llama.cpp's llama-server): they expect json judges to score at least 95% of their calls there, and check
only structure and counts for the text format, whose replies such a small model rarely gets right.
"""

import os

import pytest
from PIL import Image

from verdict_lab.loopback import LoopbackServer

try:  # Hypothesis is for tests only (tests/test_claims.py, which skips without it)
    from hypothesis import settings
except ImportError:
    pass
else:
    # "ci": the same examples on every run (derandomised, no example database) and no deadline, so that a
    # slow machine fails nothing and a failure reproduces; CI runs with CI=true. "dev": random, with the
    # database in .hypothesis/ replaying earlier failures first.
    settings.register_profile("ci", derandomize=True, deadline=None, database=None, print_blob=True)
    settings.register_profile("dev", deadline=None)
    settings.load_profile("ci" if os.environ.get("CI") else "dev")


def pytest_collection_modifyitems(config, items):
    if os.environ.get("VERDICT_LIVE_URL"):
        return
    skip = pytest.mark.skip(reason="live test: set VERDICT_LIVE_URL to a running OpenAI-compatible server")
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


@pytest.fixture
def live_url():
    """The base URL of the live server ($VERDICT_LIVE_URL)."""
    url = os.environ.get("VERDICT_LIVE_URL")
    if not url:
        pytest.skip("set VERDICT_LIVE_URL")
    return url


@pytest.fixture
def png(tmp_path):
    """A 64×48 green PNG file."""
    path = tmp_path / "scene.png"
    Image.new("RGB", (64, 48), (10, 200, 30)).save(path)
    return path
