"""The docs run as written: every command block in README.md and docs/ (Python, shell, and the plain blocks that
show a command) is run here against a real guard, in the test's own HOME with the installed entry points, or
is listed in NOT_RUN_HERE with the reason; a new block must be one or the other. Transcripts (`$ command` and
what it prints) are run and their output compared. Beside them, the facts the docs state that the code can
check: the kinds of deny they list, the help of `cbconsole`, and the README's count of real-harness tests."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

import pytest

from breaker.paths import default_socket_path
from breaker.vocab import Kind
from tests.conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
DATA = {"json", "yaml", "toml", "text"}  # what a file holds or a program prints: shown, not run
BIN = str(Path(sys.executable).parent)  # this installation's cbconsole, cbreplay, cbhook


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository
    line: int  # of the opening fence
    lang: str
    text: str

    @property
    def first(self) -> str:
        return self.text.splitlines()[0].strip() if self.text.strip() else ""

    def reason(self) -> str | None:
        """Why it is not run here: NOT_RUN_HERE's entry for its page and the start of its first line."""
        return next((why for (page, start), why in NOT_RUN_HERE.items() if self.named(page, start)), None)

    def named(self, page: str, start: str) -> bool:
        return page == self.page and self.first.startswith(start)

    @property
    def transcript(self) -> bool:
        return self.text.startswith("$ ")

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def blocks() -> list[Block]:
    out = []
    for page in PAGES:
        text = page.read_text()
        for m in FENCE.finditer(text):
            out.append(Block(str(page.relative_to(ROOT)), text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2)))
    return out


# Each block not run here, by (page, the start of its first line), with the reason. A block neither run nor listed
# fails test_every_command_block_is_run_here_or_listed_with_the_reason; so does an entry that names no block.
INTEGRATION = (
    "a framework's agent, run by tests/integrations/test_frameworks.py with the real framework (frameworks tier)"
)
NOT_RUN_HERE: dict[tuple[str, str], str] = {
    ("README.md", "python3 -m venv .venv && .venv/bin/pip install -e '.[test]'"): (
        "makes a venv from the package index and opens the console (a full-screen app, until you quit): "
        "tests/test_install.py installs the package into a fresh venv and runs the demo (registry tier)"
    ),
    ("README.md", ".venv/bin/pytest"): "the test suite itself",
    ("README.md", "python3 -m venv .venv && .venv/bin/pip install -e .  "): (
        "installs from the package index into a new venv: tests/test_install.py does (registry tier); the "
        "`cbconsole --version` it ends with is run by test_cbconsole_version_is_the_packages"
    ),
    ("docs/architecture.md", "harness processes"): "a diagram",
    ("docs/configuration.md", "python -m breaker.config --write-docs"): (
        "rewrites docs/configuration.md in the clone: tests/test_schema.py runs it on a copy and checks the page "
        "is what it writes"
    ),
    ("docs/console.md", "cbconsole      "): (
        "each line opens the console, a full-screen app that runs until you quit it: tests/test_console_tmux.py "
        "runs it in a real terminal, tests/test_console_*.py drive it with Pilot"
    ),
    ("docs/console.md", "host=build-1"): (
        "needs an ssh destination: tests/test_console_ssh.py runs these lines against a real sshd, and "
        "test_the_ssh_lines_attach_this_machines_guard_with_or_without_xdg_runtime_dir runs the `here` lines"
    ),
    ("docs/guard.md", "cbconsole --headless [--socket PATH]"): "a synopsis",
    ("docs/harnesses.md", "cbconsole setup HARNESS [--project DIR]"): "a synopsis",
    ("docs/harnesses.md", "cbhook [--socket PATH]"): "a synopsis",
    ("docs/metrics.md", "cbconsole --headless --metrics 9464"): (
        "starts a guard that runs until stopped, on fixed ports: tests/test_metrics.py and tests/test_prometheus.py "
        "run it on free ports"
    ),
    ("docs/metrics.md", ".venv/bin/pip install -e '.[otel]'"): (
        "installs from the package index and starts a guard that runs until stopped: tests/test_otel.py runs "
        "--otel against a real OTLP receiver"
    ),
    ("docs/performance.md", ".venv/bin/python tests/bench/bench_engine.py"): (
        "benchmarks of minutes each: tests/test_bench_smoke.py runs each with --quick"
    ),
    ("docs/performance.md", ".venv/bin/python tests/bench/bench_console_scale.py"): (
        "a benchmark of minutes: tests/test_bench_smoke.py runs it with --quick"
    ),
    ("docs/replay.md", "cbreplay ~/.dsh/sessions"): (
        "examples over your own sessions (`session-1a2b…`, `calls.jsonl`): placeholders"
    ),
    ("docs/replay.md", "cbreplay --compare preset=seed --compare preset=recommended \\"): (
        "a form with a placeholder (CORPUS_DIR_OR_FILES…); docs/corpus.md's run of it on the corpus is run here"
    ),
    ("docs/testing.md", ".venv/bin/pytest "): "the test suite itself",
    ("docs/testing.md", ".venv/bin/python -m tests.e2e.harnesses install"): (
        "downloads about 4 GB of harnesses and frameworks into .cache/ (bash .ci/run does)"
    ),
    ("docs/integrations/crewai.md", "from breaker.integrations.crewai import install"): INTEGRATION,
    ("docs/integrations/langgraph.md", "from breaker.integrations.langgraph import "): INTEGRATION,
    ("docs/integrations/openai-agents.md", "from agents import Agent"): INTEGRATION,
    ("docs/integrations/pydantic-ai.md", "from breaker.integrations.pydantic_ai import"): INTEGRATION,
    ("docs/integrations/smolagents.md", "from breaker.integrations.smolagents import"): INTEGRATION,
}

ALL = blocks()
COMMANDS = [b for b in ALL if b.lang not in DATA]
RUN = [b for b in COMMANDS if b.reason() is None]


def test_every_command_block_is_run_here_or_listed_with_the_reason():
    runnable = [b for b in RUN if b.lang in ("python", "sh") or b.transcript]
    assert [str(b) for b in RUN if b not in runnable] == [], "neither run here nor in NOT_RUN_HERE (with why)"
    stale = [k for k in NOT_RUN_HERE if not any(b.named(*k) for b in COMMANDS)]
    assert stale == [], "NOT_RUN_HERE names a block the docs no longer have"
    assert len(RUN) >= 15  # the extraction works: the docs' own commands are run


@pytest.fixture
def here(tmp_path: Path, guard) -> tuple[Path, dict[str, str]]:
    """A working directory (the repository's fixtures reachable as tests/fixtures) and the environment: the test's
    own HOME, this installation's entry points first on PATH, and a running guard at the default socket."""
    work = tmp_path / "work"
    (work / "tests").mkdir(parents=True)
    (work / "tests" / "fixtures").symlink_to(ROOT / "tests" / "fixtures")
    env = {**os.environ, "PATH": f"{BIN}:/usr/bin:/bin", "CBCONSOLE_SOCKET": str(guard.socket)}
    env.pop("CBCONSOLE_OPERATOR_SOCKET", None)
    return work, env


def _run(argv: list[str], work: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=work, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )


@pytest.mark.parametrize("block", [b for b in RUN if b.lang == "python"], ids=str)
def test_a_python_block_runs_as_written(block, here):
    work, env = here
    done = _run([sys.executable, "-c", block.text], work, env)
    assert done.returncode == 0, f"{block}:\n{done.stderr[-3000:]}"
    assert "guard unavailable" not in done.stderr  # judged by the guard, not let through by the failure mode


@pytest.mark.parametrize("block", [b for b in RUN if b.lang == "sh"], ids=str)
def test_a_shell_block_runs_as_written(block, here):
    work, env = here
    done = _run(["bash", "-e", "-u", "-o", "pipefail", "-c", block.text], work, env)
    assert done.returncode == 0, f"{block}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"


@pytest.mark.parametrize("block", [b for b in RUN if b.transcript], ids=str)
def test_a_transcript_prints_what_the_docs_show(block, here):
    work, env = here
    lines = block.text.splitlines()
    command = ""
    while lines[0].endswith("\\"):  # a command continued on the next line
        command += lines.pop(0)[:-1]
    command += lines.pop(0)
    done = _run(["bash", "-e", "-c", command.removeprefix("$ ")], work, env)
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    if "…" not in lines:
        assert printed == lines
        return
    rest = iter(printed)  # a line `…` stands for lines left out: the others are printed, in this order
    assert [line for line in lines if line != "…" and line not in rest] == []


# -- what the docs say that the code can check --------------------------------------------------------------


def test_the_kinds_of_deny_the_python_api_page_and_the_in_app_help_list_are_every_kind():
    from console.screens.help import ABOUT

    page = (ROOT / "docs" / "python-api.md").read_text()
    listed = page.split("gives a `Decision`", 1)[1].split("when the failure mode decided", 1)[0]
    for kind in get_args(Kind):
        assert f"`{kind}`" in listed, kind
        assert f"kind {kind}" in ABOUT, kind


def test_cbconsole_help_names_the_guards_metrics_and_otel_flags():
    done = subprocess.run([f"{BIN}/cbconsole", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "--metrics" in done.stdout and "--otel" in done.stdout
    assert "cbconsole --headless --help" in done.stdout


def test_cbconsole_version_is_the_packages():
    from breaker import __version__

    done = subprocess.run([f"{BIN}/cbconsole", "--version"], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == f"cbconsole {__version__}"


@pytest.mark.parametrize("xdg", ["set", "unset"])
def test_the_ssh_lines_attach_this_machines_guard_with_or_without_xdg_runtime_dir(tmp_path, xdg):
    page = (ROOT / "docs" / "console.md").read_text()
    block = page.split("<!-- ssh-forward:", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    lines = [line for line in block.splitlines() if line.startswith("here=")]
    attach = next(line for line in block.splitlines() if line.startswith("cbconsole --attach"))
    spec = shlex.split(attach)[-1]
    assert len(lines) >= 1 and spec.startswith("here=")
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "CBCONSOLE_SOCKET", "TMPDIR")}
    if xdg == "set":
        env["XDG_RUNTIME_DIR"] = str(tmp_path)
    script = "set -eu\n" + "\n".join(lines) + '\nprintf "%s\\n" "' + spec.split("=", 1)[1] + '"'
    shown = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, check=True).stdout
    assert Path(shown.strip()) == default_socket_path(env)


# -- the README's count of real-harness and framework tests is the suite's ------------------------------------

COUNTER = textwrap.dedent(
    """
    import pytest

    @pytest.hookimpl(tryfirst=True)  # before the tiers leave out what was not asked for
    def pytest_collection_modifyitems(items):
        for marker in ("e2e", "frameworks"):
            n = sum(1 for item in items if item.get_closest_marker(marker) is not None)
            print(f"COUNT {marker} {n}")
    """
)


@pytest.mark.timeout(300)
def test_the_readmes_counts_of_real_harness_and_framework_tests_are_the_suites(tmp_path):
    (tmp_path / "cbcount.py").write_text(COUNTER)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-p", "cbcount", "-p", "no:cacheprovider",
         "tests"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=280,
    )  # fmt: skip
    counts = dict(re.findall(r"^COUNT (\w+) (\d+)$", done.stdout, re.M))
    assert set(counts) == {"e2e", "frameworks"}, done.stdout[-2000:] + done.stderr[-2000:]
    readme = " ".join((ROOT / "README.md").read_text().split())
    said = re.search(r"The rest — (\d+) tests of the real harnesses, (\d+) of the five agent frameworks", readme)
    assert said is not None
    assert (said.group(1), said.group(2)) == (counts["e2e"], counts["frameworks"])
