"""The suite's tiers: which tests need something from outside the checkout, whether this run asked for them,
and the one line a test whose requirement is missing skips with (fails with, under `CI=true`).

Plain `pytest` is the fast tier. A test marked with one of `ASKED_FOR` runs only when asked for (`-m`,
`--all`, its file or directory named on the command line, or `CI=true`); a test marked `needs(tool, ...)`
runs whenever its Debian tools are on PATH. docs/testing.md says it for people.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn, TypeVar

import pytest

from tests.e2e import harnesses
from tests.e2e.harnesses import InstallError, NotInstalled

T = TypeVar("T")
TESTS = Path(__file__).resolve().parent

HOW_HARNESSES = ".venv/bin/python -m tests.e2e.harnesses install (about 2 GB into .cache/), or bash .ci/run"
HOW_FRAMEWORKS = ".venv/bin/python -m tests.integrations.frameworks install (1.7 GB into .cache/), or bash .ci/run"


@dataclass(frozen=True)
class Tier:
    """A marker whose tests run only when asked for, and what they do that the fast tier does not."""

    marker: str
    does: str


ASKED_FOR = (
    Tier("e2e", "run the real harnesses, installed from npm into .cache/"),
    Tier("frameworks", "run the agent frameworks, installed from PyPI into .cache/"),
    Tier("registry", "download from PyPI while they run"),
    Tier("slow", "run a benchmark for 5 s or more each"),
)

# The tools a `needs` marker may name, and the Debian package that brings each.
PACKAGES = {
    "tmux": "tmux",
    "bwrap": "bubblewrap",
    "socat": "socat",
    "prometheus": "prometheus",
    "promtool": "prometheus",
    "sshd": "openssh-server",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
}


def in_ci() -> bool:
    """`CI=true` (as CI services set it): every tier is asked for, and a missing requirement fails."""
    return os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


def missing(what: str) -> NoReturn:
    """Skip the running test saying what is missing and how to get it; under `CI=true`, fail it."""
    if in_ci():
        pytest.fail(f"{what} [CI=true: a missing requirement fails]", pytrace=False)
    pytest.skip(what)


def need_tools(tools: Iterable[str]) -> None:
    """Go on only if every tool is on PATH."""
    absent = [tool for tool in tools if shutil.which(tool) is None]
    if absent:
        packages = " ".join(sorted({PACKAGES[tool] for tool in absent}))
        missing(f"needs {' and '.join(absent)} on PATH: apt-get install {packages} (root), or bash .ci/run as root")


def installed(ensure: Callable[..., T]) -> T:
    """What `ensure` finds installed in the cache (Node 22, a harness, pnpm): a test never installs."""
    try:
        return ensure(install=False)
    except NotInstalled as e:
        why = f"needs {e}: {HOW_HARNESSES}"
    except InstallError as e:  # a machine the pinned installs are not for
        why = str(e)
    missing(why)  # outside the `except`: the line alone, not a chained traceback


# The fixtures of tests/e2e that hand a test an install, and what finds each.
INSTALLS: dict[str, Callable[..., object]] = {
    "node": harnesses.ensure_node22,
    "dsh": harnesses.ensure_dsh,
    "claude": harnesses.ensure_claude,
    "codex": harnesses.ensure_codex,
    "gemini": harnesses.ensure_gemini,
    "pnpm": harnesses.ensure_pnpm,
}


def need_installs(item: pytest.Item) -> None:
    """Go on only if every install the test needs is there: named by a fixture it uses, by a parameter naming
    the harness a fixture asks for, or by its marker (`e2e("node")`, for a test that runs one in a child).
    Checked before the fixtures run, so that the tests skipped for one reason are one line of the summary (a
    skip from a fixture is a line each)."""
    callspec = getattr(item, "callspec", None)
    params = [v for v in callspec.params.values() if isinstance(v, str)] if callspec else []
    marked = [name for mark in item.iter_markers("e2e") for name in mark.args]
    for name in dict.fromkeys([*getattr(item, "fixturenames", ()), *params, *marked]):
        if name in INSTALLS:
            installed(INSTALLS[name])


def need_frameworks() -> None:
    """Go on only if every agent framework's venv is installed in the cache."""
    from tests.integrations import frameworks

    try:
        for extra in frameworks.FRAMEWORKS:
            frameworks.ensure(extra, install=False)
        return
    except NotInstalled as e:
        why = f"needs {e}: {HOW_FRAMEWORKS}"
    missing(why)


def tier_of(item: pytest.Item) -> Tier | None:
    """The first asked-for tier the test is marked with, or None: it is in the fast tier."""
    return next((tier for tier in ASKED_FOR if item.get_closest_marker(tier.marker)), None)


def everything_asked(config: pytest.Config) -> bool:
    """This run selects by marker itself (`-m`), or asked for every tier (`--all`, `CI=true`)."""
    return bool(config.getoption("markexpr")) or bool(config.getoption("all_tiers")) or in_ci()


def named(config: pytest.Config) -> list[Path]:
    """The test files and the directories below tests/ named on the command line (`pytest tests/e2e`,
    `pytest tests/test_x.py::test_y`): naming one asks for the tests in it, whatever their tier."""
    base = config.invocation_params.dir
    paths = []
    for arg in config.invocation_params.args:
        path = (base / str(arg).split("::", 1)[0]).resolve()
        below_tests = path.is_dir() and path.is_relative_to(TESTS) and path != TESTS
        if below_tests or (path.suffix == ".py" and path.is_file()):
            paths.append(path)
    return paths


def not_asked(config: pytest.Config, items: list[pytest.Item]) -> tuple[list[pytest.Item], dict[str, int]]:
    """The items this run leaves out, and how many per tier."""
    if everything_asked(config):
        return [], {}
    asked = named(config)
    left: list[pytest.Item] = []
    counts: dict[str, int] = {}
    for item in items:
        tier = tier_of(item)
        if tier is not None and not any(item.path.resolve().is_relative_to(path) for path in asked):
            left.append(item)
            counts[tier.marker] = counts.get(tier.marker, 0) + 1
    return left, counts


def summary(counts: dict[str, int]) -> list[str]:
    """The lines that say which tiers this run left out and how to ask for each."""
    if not counts:
        return []
    lines = [
        f"{counts[tier.marker]:4} {tier.marker} tests ({tier.does}): pytest -m {tier.marker}"
        for tier in ASKED_FOR
        if tier.marker in counts
    ]
    return [*lines, "every tier: pytest --all (what bash .ci/run does, with CI=true); docs/testing.md"]
