"""Each agent framework for real, from PyPI, in its own venv, against a real guard process: the framework's own
test model (or a scripted server on 127.0.0.1, for CrewAI) repeats one tool call; the 7th identical call
is denied and the model reads the deny text; the guard shows the agent under the framework's harness
name (and a sub-agent under its parent); an operator interrupt stops the run the framework's way; sync
and async; fail open and fail closed with the guard down; results reported for the rules with progress.

The setup in each run is the docs page's own block (`docs/integrations/<framework>.md`), executed.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from breaker import Config, Guard
from tests.conftest import GuardProcess, request
from tests.waits import eventually

from . import frameworks

pytestmark = pytest.mark.frameworks

AGENTS = Path(__file__).parent / "agents"
DENY = "Circuit breaker (duplicate)"
UNAVAILABLE = "Circuit breaker unavailable"


@dataclass(frozen=True)
class Flavour:
    """One entry point of one framework: how to run its scenario and how its runs stop."""

    name: str
    extra: str
    harness: str
    script: str
    argv: tuple[str, ...] = ()
    modes: tuple[str, ...] = ("sync", "async")
    stop_error: str = ""  # the exception an interrupted run ends with
    stop_text: str = ""  # in its text
    nested: bool = True  # has sub-agents: the child is shown under its parent
    results: str = "same"  # CrewAI stops a run itself at the 5th identical call with the same result
    parent_asks: bool = True  # the parent's call that starts the child is a tool call the guard sees


FLAVOURS = [
    Flavour(
        "langgraph",
        "langgraph",
        "langgraph",
        "langgraph_agent.py",
        ("agent",),
        stop_error="AgentInterrupted",
        stop_text="interrupted by the operator",
    ),
    Flavour(
        "langgraph-graph",
        "langgraph",
        "langgraph",
        "langgraph_agent.py",
        ("graph",),
        stop_error="AgentInterrupted",
        stop_text="interrupted by the operator",
        nested=False,
    ),
    Flavour(
        "openai-agents",
        "openai-agents",
        "openai-agents",
        "openai_agents_agent.py",
        stop_error="ToolInputGuardrailTripwireTriggered",
    ),
    Flavour("pydantic-ai", "pydantic-ai", "pydantic-ai", "pydantic_ai_agent.py", stop_error="RunCancelled"),
    Flavour(
        "smolagents",
        "smolagents",
        "smolagents",
        "smolagents_agent.py",
        modes=("sync",),  # smolagents has no async run
        parent_asks=False,  # a managed agent is called outside the agent's tools
        stop_error="AgentError",
        stop_text="interrupted",
    ),
    Flavour(
        "crewai",
        "crewai",
        "crewai",
        "crewai_agent.py",
        stop_error="HookAborted",
        stop_text="the operator interrupted",
        nested=False,
        results="counter",
    ),
]
BY_NAME = {f.name: f for f in FLAVOURS}
PAIRS = [(f.name, mode) for f in FLAVOURS for mode in f.modes]


@pytest.fixture(scope="session")
def installed() -> dict[str, frameworks.Framework]:
    """Every framework's venv, as `python -m tests.integrations.frameworks install` left it (the `frameworks`
    marker has checked they are there)."""
    return {extra: frameworks.ensure(extra, install=False) for extra in frameworks.FRAMEWORKS}


@dataclass
class Outcome:
    final: str | None
    error: str | None
    error_text: str
    runs: int
    requests: list[list[str]]  # the tool results the model was sent, at each of its requests
    raw: dict[str, Any]

    @property
    def last_seen(self) -> list[str]:
        return self.requests[-1] if self.requests else []


class Scenario:
    """One scenario process of one flavour, against one guard socket."""

    def __init__(self, fw: frameworks.Framework, flavour: Flavour, tmp: Path, socket: Path, *args: str) -> None:
        self.tmp = tmp
        tmp.mkdir(parents=True, exist_ok=True)
        self.out, self.ready, self.go = tmp / "out.json", tmp / "ready", tmp / "go"
        cmd = [str(fw.python), str(AGENTS / flavour.script), *flavour.argv, *args, "--out", str(self.out)]
        cmd += ["--ready", str(self.ready), "--go", str(self.go), "--results", flavour.results]
        self.log = tmp / "scenario.log"
        self.proc = subprocess.Popen(
            cmd,
            env=fw.env({"CBCONSOLE_SOCKET": str(socket)}),
            cwd=tmp,
            stdin=subprocess.DEVNULL,
            stdout=open(self.log, "w"),
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout: float = 120) -> None:
        self._until_written(self.ready, "the scenario to pause", timeout)

    def resume(self) -> None:
        self.go.write_text("go")

    def wait_again(self, timeout: float = 120) -> None:
        """Until the first run ended and the scenario waits to run the agent again (`--again`)."""
        self._until_written(self.ready.with_name(self.ready.name + "-again"), "the first run to end", timeout)

    def _until_written(self, marker: Path, what: str, timeout: float) -> None:
        """Until the scenario writes `marker`; fails with the scenario's log if it ends first or never does."""

        def written() -> bool:
            if marker.exists():
                return True
            if self.proc.poll() is not None:
                raise AssertionError(f"the scenario ended before {what}")
            return False

        try:
            eventually(written, timeout=timeout, what=what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}:\n{self.log.read_text()[-4000:]}") from None

    def run_again(self) -> None:
        self.go.with_name(self.go.name + "-again").write_text("go")

    def result(self, timeout: float = 240) -> Outcome:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"the scenario did not finish:\n{self.log.read_text()[-4000:]}") from None
        assert self.out.exists(), f"exit {self.proc.returncode}, no result:\n{self.log.read_text()[-4000:]}"
        raw = json.loads(self.out.read_text())
        return Outcome(raw["final"], raw["error"], raw["error_text"] or "", raw["runs"], raw["requests"], raw)


def run(installed, flavour: Flavour, tmp: Path, socket: Path, *args: str) -> Outcome:
    return Scenario(installed[flavour.extra], flavour, tmp, socket, *args).result()


def agents_of(guard: GuardProcess) -> list[dict[str, Any]]:
    """The agent rows of the guard's snapshot, as the console gets them on the operator socket."""
    return request(guard.operator, {"op": "snapshot", "id": 1})["state"]["agents"]


def stopped_the_framework_way(flavour: Flavour, out: Outcome) -> None:
    assert out.error == flavour.stop_error, (out.error, out.error_text, out.raw.get("traceback"))
    assert flavour.stop_text.lower() in out.error_text.lower(), out.error_text


@pytest.mark.parametrize(("name", "mode"), PAIRS)
def test_the_seventh_identical_call_is_denied_and_the_model_reads_why(installed, guard, tmp_path, name, mode):
    flavour = BY_NAME[name]
    out = run(installed, flavour, tmp_path, guard.socket, mode, "--calls", "9")
    assert out.error is None, out.raw.get("traceback")
    assert out.final == "done"  # three denies in a row, and the run still ended as the model chose
    assert out.runs == 6
    seen = out.last_seen
    assert len(seen) == 9, seen
    assert all(DENY not in r for r in seen[:6]), seen
    assert all(DENY in r for r in seen[6:]), seen
    # the model was asked right after the first deny, and that request carried the deny text
    first_after = next(r for r in out.requests if len(r) == 7)
    assert DENY in first_after[-1]
    stats = request(guard.operator, {"op": "stats", "id": 1})[
        "stats"
    ]  # over the guard's life (a run may end its agent)
    assert stats["checks"] == 9 and stats["denies"].get("duplicate") == 3, stats


@pytest.mark.parametrize(("name", "mode"), PAIRS)
def test_an_operator_interrupt_stops_the_run(installed, guard, tmp_path, name, mode):
    flavour = BY_NAME[name]
    scenario = Scenario(
        installed[flavour.extra], flavour, tmp_path, guard.socket, mode, "--calls", "9", "--pause-at", "3"
    )
    scenario.wait_ready()
    rows = agents_of(guard)  # mid-run: what the console shows
    assert len(rows) == 1, rows
    row = rows[0]
    assert row["harness"] == flavour.harness
    assert row["calls"] == 3 and row["status"] == "ok", row
    reply = request(guard.operator, {"op": "interrupt", "id": 2, "agent": row["agent"], "reason": "looping"})
    assert reply.get("ok") is True, reply
    scenario.resume()
    out = scenario.result()
    stopped_the_framework_way(flavour, out)
    assert out.runs == 3  # nothing ran after the interrupt
    assert len(out.requests) <= 4, out.requests  # at most the one model turn already under way


# The frameworks whose integration remembers an interrupt to stop a run (the others stop at the deny).
REMEMBERING = [(name, mode) for name, mode in PAIRS if name in ("pydantic-ai", "smolagents", "crewai")]


@pytest.mark.parametrize(("name", "mode"), REMEMBERING)
def test_an_agent_interrupted_then_uninterrupted_runs_its_next_tool_call(installed, guard, tmp_path, name, mode):
    flavour = BY_NAME[name]
    scenario = Scenario(
        installed[flavour.extra], flavour, tmp_path, guard.socket, mode, "--calls", "6", "--pause-at", "3", "--again"
    )
    scenario.wait_ready()
    (row,) = agents_of(guard)
    reply = request(guard.operator, {"op": "interrupt", "id": 2, "agent": row["agent"], "reason": "looping"})
    assert reply.get("ok") is True, reply
    scenario.resume()
    scenario.wait_again()  # the interrupt stopped the run
    reply = request(guard.operator, {"op": "uninterrupt", "id": 3, "agent": row["agent"]})
    assert reply.get("known") is True, reply
    scenario.run_again()
    out = scenario.result()
    stopped_the_framework_way(flavour, out)
    assert out.runs == 3
    again = out.raw["again"]
    assert again["error"] is None, (again["error_text"], again.get("traceback"))
    assert again["final"] == "done" and again["runs"] >= 1, again  # its next tool call ran: it was not stopped
    (after,) = agents_of(guard)  # the same agent to the guard, its calls counted on
    assert after["agent"] == row["agent"] and after["calls"] == 3 + again["runs"], after


@pytest.mark.parametrize("name", [f.name for f in FLAVOURS if f.nested])
def test_a_sub_agent_is_shown_under_its_parent(installed, guard, tmp_path, name):
    flavour = BY_NAME[name]
    scenario = Scenario(
        installed[flavour.extra], flavour, tmp_path, guard.socket, "nested", "--calls", "4", "--pause-at", "2"
    )
    scenario.wait_ready()
    rows = {r["agent"]: r for r in agents_of(guard)}
    children = [r for r in rows.values() if r["parent"] is not None]
    assert len(children) == 1, rows
    child = children[0]
    assert child["harness"] == flavour.harness and child["calls"] == 2, child
    if flavour.parent_asks:  # the parent asked the guard too: it is an agent of the same harness
        assert child["parent"] in rows, (child, rows)
        assert rows[child["parent"]]["harness"] == flavour.harness
    else:
        assert child["agent"].startswith(child["parent"] + "/"), child
    scenario.resume()
    out = scenario.result()
    assert out.error is None, out.raw.get("traceback")
    assert out.runs == 4


@pytest.mark.parametrize("name", [f.name for f in FLAVOURS])
def test_with_the_guard_down_it_fails_open_by_default(installed, tmp_path, name):
    flavour = BY_NAME[name]
    nowhere = tmp_path / "nowhere" / "guard.sock"
    out = run(installed, flavour, tmp_path / "run", nowhere, "sync", "--calls", "8")
    assert out.error is None, out.raw.get("traceback")
    assert out.final == "done" and out.runs == 8
    assert not any("Circuit breaker" in r for r in out.last_seen), out.last_seen


@pytest.mark.parametrize("name", [f.name for f in FLAVOURS])
def test_with_the_guard_down_fail_closed_denies_every_call_and_the_run_goes_on(installed, tmp_path, name):
    flavour = BY_NAME[name]
    nowhere = tmp_path / "nowhere" / "guard.sock"
    out = run(
        installed, flavour, tmp_path / "run", nowhere, "sync", "--calls", "4", "--fail-closed", "--socket", str(nowhere)
    )
    assert out.error is None, out.raw.get("traceback")
    assert out.final == "done" and out.runs == 0
    assert len(out.last_seen) == 4 and all(UNAVAILABLE in r for r in out.last_seen), out.last_seen


def expected_runs(tool: str, results: str, calls: int) -> int:
    """How many of `calls` identical calls the `recommended` preset allows when each result is reported,
    from the engine itself (so the test follows the preset's tuning)."""
    guard, runs = Guard(Config.with_preset("recommended")), 0
    for n in range(calls):
        if guard.check("a", tool, {"query": "cbprobe"}, call_id=n).allowed:
            runs += 1
            guard.result("a", "ok" if results == "same" else f"ok {runs}", call_id=n)
    return runs


@pytest.mark.parametrize("name", [f.name for f in FLAVOURS])
def test_results_are_reported_so_a_call_whose_result_changes_is_progress(installed, guard_factory, tmp_path, name):
    flavour = BY_NAME[name]
    g = guard_factory(patch_text="- id: circuit-breaker\n  config:\n    preset: recommended\n")
    moving, same = expected_runs("search", "counter", 6), expected_runs("search", "same", 6)
    assert moving == 6 and same < 6  # the preset as the test needs it: progress lets a changing poll go on
    fw = installed[flavour.extra]
    spinning = Scenario(
        fw, Flavour(**{**flavour.__dict__, "results": "same"}), tmp_path / "same", g.socket, "sync", "--calls", "6"
    ).result()
    assert spinning.error is None, spinning.raw.get("traceback")
    assert spinning.runs == same
    polling = Flavour(**{**flavour.__dict__, "results": "counter"})
    mode = flavour.modes[-1]  # the async path where there is one
    progressing = Scenario(fw, polling, tmp_path / "moving", g.socket, mode, "--calls", "6").result()
    assert progressing.error is None, progressing.raw.get("traceback")
    assert progressing.runs == moving
