"""End-to-end fixtures: the real harnesses (installed on first use, cached), and the `e2e` marker."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from . import harnesses
from .harnesses import Harness, InstallError

_STARTED = time.monotonic()
RUNS: list[tuple[str, str, float]] = []  # (test, harness, seconds) of each real harness run


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "e2e: runs a real harness (dsh, Claude Code, Codex, Gemini CLI) against the fake model"
    )


def _installed(ensure: Callable[[], Harness]) -> Harness:
    try:
        return ensure()
    except InstallError as e:  # loud: a registry that cannot be reached fails the run, never skips it
        pytest.fail(f"could not install the harness: {e}", pytrace=False)


@pytest.fixture(scope="session")
def dsh() -> Harness:
    return _installed(harnesses.ensure_dsh)


@pytest.fixture(scope="session")
def claude() -> Harness:
    return _installed(harnesses.ensure_claude)


@pytest.fixture(scope="session")
def codex() -> Harness:
    return _installed(harnesses.ensure_codex)


@pytest.fixture(scope="session")
def gemini() -> Harness:
    return _installed(harnesses.ensure_gemini)


@pytest.fixture
def timed(request: pytest.FixtureRequest) -> Callable:
    """Wrap a run: `run = timed(run_dsh(...))` records its time for the summary at the end."""

    def record(run):  # type: ignore[no-untyped-def]
        RUNS.append((request.node.name, run.harness, run.seconds))
        return run

    return record


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # type: ignore[no-untyped-def]
    if not RUNS:
        return
    tr = terminalreporter
    tr.section("e2e harness runs")
    for test, harness, seconds in RUNS:
        tr.write_line(f"{seconds:6.1f} s  {harness:7} {test}")
    by_harness: dict[str, float] = {}
    for _, harness, seconds in RUNS:
        by_harness[harness] = by_harness.get(harness, 0.0) + seconds
    tr.write_line(
        f"{len(RUNS)} runs, {sum(by_harness.values()):.1f} s in harnesses "
        f"({', '.join(f'{h} {s:.1f} s' for h, s in by_harness.items())}); "
        f"{time.monotonic() - _STARTED:.1f} s since the e2e conftest loaded"
    )
