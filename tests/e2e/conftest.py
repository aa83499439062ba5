"""End-to-end fixtures: the real harnesses, as `python -m tests.e2e.harnesses install` left them in the cache.

A test never installs one: when it is not there the test skips saying how to install it (fails under
`CI=true`); docs/testing.md. The `e2e` marker is registered in pyproject.toml.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.tiers import installed

from . import harnesses
from .harnesses import Harness


@pytest.fixture(scope="session")
def dsh() -> Harness:
    return installed(harnesses.ensure_dsh)


@pytest.fixture(scope="session")
def claude() -> Harness:
    return installed(harnesses.ensure_claude)


@pytest.fixture(scope="session")
def codex() -> Harness:
    return installed(harnesses.ensure_codex)


@pytest.fixture(scope="session")
def gemini() -> Harness:
    return installed(harnesses.ensure_gemini)


@pytest.fixture(scope="session")
def pnpm() -> Harness:
    """pnpm: dsh's `plugin` command forwards to it."""
    return installed(harnesses.ensure_pnpm)


@pytest.fixture
def timed(request: pytest.FixtureRequest) -> Callable:
    """Wrap a run: `run = timed(run_dsh(...))` records its time for the summary at the end (tests/conftest.py)."""

    def record(run):  # type: ignore[no-untyped-def]
        request.node.user_properties.append(("harness_run", (run.harness, run.seconds)))
        return run

    return record
