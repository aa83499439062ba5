"""What every framework scenario shares (it runs in the framework's venv, with the checkout on PYTHONPATH).

A scenario is one agent run of a real framework with its own test model, scripted to call the probe
tool `--calls` times with the same args, then answer "done". It writes one JSON object to `--out`:
the tool's runs, the tool results the model was sent at each of its requests, how the run ended.

`--pause-at K`: the probe's K-th run writes `--ready` (with the agent's id, if known) and waits for
`--go`, so the test can look at the guard and interrupt the agent while the run is in progress.

`--again`: once the run ended, write `<ready>-again` and wait for `<go>-again`, then run the same agent
once more (the scenario's `again`, given how the first run ended); its outcome is the output's `again`.
"""

from __future__ import annotations

import argparse
import json
import re
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.waits import eventually

ROOT = Path(__file__).resolve().parents[3]
PROBE_ARGS = {"query": "cbprobe"}  # every call the same: the 7th is denied under the defaults
FINAL = "done"


@dataclass
class Options:
    mode: str  # sync | async | nested | bench (guarded and unguarded runs in turn, distinct calls, a 1 ms tool)
    calls: int
    out: Path
    results: str  # same ("ok") | counter ("ok 1", "ok 2"…)
    pause_at: int
    ready: Path | None
    go: Path | None
    fail_closed: bool
    socket: str | None
    rounds: int = 0
    unguarded: bool = False  # bench: this run without the guard (the baseline)
    again: bool = False


def options() -> Options:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["sync", "async", "nested", "bench"])
    p.add_argument("--calls", type=int, default=9)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--results", choices=["same", "counter"], default="same")
    p.add_argument("--pause-at", type=int, default=0)
    p.add_argument("--ready", type=Path)
    p.add_argument("--go", type=Path)
    p.add_argument("--fail-closed", action="store_true", help="build the guard by hand with fail_closed=True")
    p.add_argument("--socket", help="the guard's socket, when building by hand (else $CBCONSOLE_SOCKET)")
    p.add_argument("--rounds", type=int, default=3, help="bench: pairs of runs (guarded, unguarded)")
    p.add_argument("--again", action="store_true", help="run the same agent once more after the test says go")
    a = p.parse_args()
    return Options(
        a.mode, a.calls, a.out, a.results, a.pause_at, a.ready, a.go, a.fail_closed, a.socket, a.rounds, again=a.again
    )


def args_for(opts: Options, made: int) -> dict[str, Any]:
    """The probe's args for the model's call number `made` + 1: always the same, but new each call in bench."""
    return {"query": f"cbprobe {made + 1}"} if opts.mode == "bench" else dict(PROBE_ARGS)


@dataclass
class Probe:
    """The tool's body: counts its runs, can pause for the test, answers the same or a new text each time."""

    opts: Options
    runs: int = 0
    agent: Callable[[], str] | None = None  # tells the test which agent is paused, where the scenario knows

    def __call__(self, query: str) -> str:
        self.runs += 1
        if self.opts.mode == "bench":
            time.sleep(0.001)  # the tool's own work, the same in both arms of the benchmark: not a wait
        if self.runs == self.opts.pause_at and self.opts.ready and self.opts.go:
            self.opts.ready.write_text(json.dumps({"runs": self.runs}))
            eventually(self.opts.go.exists, timeout=120, what=f"the test to say go ({self.opts.go})")
        return "ok" if self.opts.results == "same" else f"ok {self.runs}"


@dataclass
class Record:
    """What the scripted model was sent: the tool results of its conversation at each request."""

    requests: list[list[str]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)  # perf_counter at each request

    def saw(self, results: list[str]) -> None:
        self.times.append(time.perf_counter())
        self.requests.append([str(r) for r in results])


def snippet(framework: str, block: str = "setup") -> str:
    """A setup block of the framework's docs page: the python block after `<!-- setup -->` (`<!-- setup: NAME -->`)."""
    page = ROOT / "docs" / "integrations" / f"{framework}.md"
    found = re.search(rf"<!-- {re.escape(block)} -->\s*```python\n(.*?)```", page.read_text(), re.S)
    if found is None:
        raise SystemExit(f"{page}: no ```python block after <!-- {block} -->")
    return found.group(1)


def run_doc(framework: str, block: str = "setup", **names: Any) -> dict[str, Any]:
    """Execute a setup block of the docs with `names` defined (model, tools…); returns what it defined."""
    scope: dict[str, Any] = dict(names)
    exec(compile(snippet(framework, block), f"docs/integrations/{framework}.md", "exec"), scope)
    return scope


def steps(record: Record, run: Callable[[], str]) -> list[float]:
    """One run's steps: the seconds between the model's requests (a tool call and the framework around it)."""
    record.times.clear()
    run()
    return [b - a for a, b in zip(record.times, record.times[1:], strict=False)]


def outcome(run: Callable[[], str]) -> tuple[dict[str, Any], BaseException | None]:
    """How one run ended: its final answer, or its error."""
    out: dict[str, Any] = {"final": None, "error": None, "error_text": None}
    try:
        out["final"] = run()
    except BaseException as e:
        out["error"] = type(e).__name__
        out["error_text"] = str(e)[:2000]
        out["traceback"] = traceback.format_exc()[-4000:]
        return out, e
    return out, None


def finish(
    opts: Options,
    probe: Probe,
    record: Record,
    run: Callable[[], str],
    again: Callable[[BaseException | None], str] | None = None,
    **extra: Any,
) -> None:
    """Run the agent, write what happened (with `--again`, run it once more when the test says go)."""
    if opts.mode == "bench":
        guarded: list[float] = []
        baseline: list[float] = []
        for _ in range(opts.rounds):  # interleaved, so the machine's noise falls on both alike
            for unguarded in (False, True):
                opts.unguarded = unguarded
                (baseline if unguarded else guarded).extend(steps(record, run))
        opts.out.write_text(json.dumps({"guarded": guarded, "baseline": baseline, "runs": probe.runs}))
        return
    out, error = outcome(run)
    out.update(runs=probe.runs, requests=record.requests, **extra)
    if opts.again and again is not None and opts.ready and opts.go:
        opts.ready.with_name(opts.ready.name + "-again").write_text(json.dumps({"runs": probe.runs}))
        go_again = opts.go.with_name(opts.go.name + "-again")
        eventually(go_again.exists, timeout=120, what=f"the test to say go again ({go_again})")
        before = probe.runs
        out["again"], _ = outcome(lambda: again(error))
        out["again"]["runs"] = probe.runs - before
    opts.out.write_text(json.dumps(out, default=str))
