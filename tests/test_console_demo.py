"""The demo's simulated agents, run far past the point where its healthy agent used to trip: healthy sessions stay
healthy for as long as the demo runs, while the looping agents keep tripping (the demo's feed through the real engine
on the demo's own config, on the feed's own clock: ten minutes in a moment)."""

from __future__ import annotations

from collections import Counter, defaultdict

import yaml

from breaker.config import Config
from breaker.engine import Guard
from console.demo import DemoCall, End, timeline
from console.session import DEMO_PATCH

DEMO_SECONDS = 600.0  # the healthy agent tripped `duplicate` at ~40 s and its cap at ~42 s


def demo_guard() -> Guard:
    [row] = yaml.safe_load(DEMO_PATCH)
    return Guard(Config.from_mapping(row["config"]))


def run_demo(seconds: float) -> tuple[dict[str, Counter[str]], dict[str, int], list[str], list[tuple[str, str]]]:
    """Per agent: its denies by kind and its warned calls; the agents whose sessions ended; every trip (agent, kind)."""
    guard = demo_guard()
    denies: dict[str, Counter[str]] = defaultdict(Counter)
    warned: dict[str, int] = defaultdict(int)
    ended: list[str] = []
    trips: list[tuple[str, str]] = []
    for at, _script, step in timeline(seconds):
        if isinstance(step, End):
            assert guard.end_agent(step.agent)
            ended.append(step.agent)
            continue
        assert isinstance(step, DemoCall)
        verdict = guard.check(step.agent, step.tool, step.args, now=at)
        denies[step.agent]  # every agent seen has an entry
        if not verdict.allowed:
            denies[step.agent][verdict.kind or "?"] += 1
            if verdict.first:
                trips.append((step.agent, verdict.kind or "?"))
        elif verdict.warning:
            warned[step.agent] += 1
    return denies, warned, ended, trips


def test_the_demo_healthy_sessions_stay_ok_for_ten_minutes_while_the_looping_agents_keep_tripping():
    denies, warned, ended, trips = run_demo(DEMO_SECONDS)
    healthy = [agent for agent in denies if agent.startswith("session-demo-healthy")]
    assert len(healthy) >= 10  # task after task for the whole ten minutes, each a session of its own
    assert healthy[0] == "session-demo-healthy"
    for agent in healthy:
        assert not denies[agent], f"{agent} was denied: {dict(denies[agent])}"
        assert not warned[agent]
    assert set(healthy[:-1]) <= set(ended)  # every finished task's session ended (its row leaves the list)
    # The loopers trip as the demo shows them, and go on being denied to the end.
    assert set(denies["session-demo-searcher"]) == {"duplicate"}
    assert set(denies["session-demo-prober"]) == {"duplicate"}
    assert set(denies["session-demo-pager"]) == {"cap"}
    assert denies["session-demo-searcher"]["duplicate"] > 5_000  # twelve a second, denied for ten minutes
    subagents = [agent for agent in denies if agent.endswith("-demo-subagent")]
    assert subagents[0] == "3f2a9c1e-demo-subagent"
    assert len(subagents) == len(healthy)  # a looping subagent for each task
    assert all(set(denies[agent]) == {"duplicate"} for agent in subagents)
    # New trips keep coming: each task's subagent trips, up to the last minute of the demo.
    late = [agent for agent, kind in trips if kind == "duplicate" and agent in subagents[-3:]]
    assert late
