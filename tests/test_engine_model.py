"""Stateful property test: the engine against a deliberately naive reference model of the rules.

The model keeps whole Python lists, recounts with `list.count`-style scans and uses the standard
library's json for keys; it shares no code with the engine. Hypothesis drives random call
sequences over several agents, with live config changes and operator actions, and compares every
verdict and every agent's tallies.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from breaker import Config, Guard

AGENTS = ["a", "b", "c", "d", "e"]
TOOLS = ["bash", "Bash", "web_search", "todo_write", "TodoWrite", "read", "ask-user-question"]
NAMES = ["bash", "web_search", "todo_write", "read", "ask_user_question"]
IGNORABLE = ["description", "reason", "thought"]

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=5),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.text(alphabet="abcxyz", max_size=3), inner, max_size=3),
    ),
    max_leaves=6,
)
# Small pools so that repeats (the interesting case) are common.
common_args = st.sampled_from(
    [{"q": "loop"}, {"q": "loop", "n": 1}, {"n": 1, "q": "loop"}, {"command": "ls"}, {}, None, "ls", [1, 2], [2, 1]]
)
annotated_args = st.builds(
    lambda base, note, name: {**base, name: note},
    st.sampled_from([{"command": "echo cbprobe4"}, {"q": "loop"}]),
    st.text(max_size=4),
    st.sampled_from(IGNORABLE),
)
unjudgeable_args = st.sampled_from([{"blob": b"bytes"}, {"big": 2**70}, {"set": {1}}])
call_args = st.one_of(common_args, common_args, annotated_args, json_values, unjudgeable_args)

configs = st.builds(
    Config,
    enabled=st.sampled_from([True, True, True, False]),
    duplicate_limit=st.integers(1, 4),
    window=st.integers(1, 8),
    max_calls_per_agent=st.integers(0, 12),
    exempt=st.lists(st.sampled_from(NAMES), max_size=2, unique=True).map(tuple),
    only=st.one_of(st.just(()), st.lists(st.sampled_from(NAMES), min_size=1, max_size=2, unique=True).map(tuple)),
    ignore_args=st.lists(st.sampled_from(IGNORABLE), max_size=3, unique=True).map(tuple),
    max_agents=st.integers(1, 4),
)


class _Unjudgeable:
    """A window entry that equals nothing, not even another unjudgeable call."""


class Model:
    """The rules, written as plainly as possible."""

    def __init__(self, config: Config):
        self.config = config
        self.agents: dict[str, dict[str, Any]] = {}  # insertion order = least recently active first
        # ended or evicted agents: their calls and denies, kept (bounded) so that a harness cannot
        # give an agent a fresh cap by ending it or by flooding the guard with new ids
        self.retired: dict[str, dict[str, Any]] = {}
        self.interrupted: dict[str, dict[str, Any]] = {}
        self.paused = False

    @staticmethod
    def norm(name: str) -> str:
        return name.lower().replace("_", "").replace("-", "")

    def set_config(self, config: Config) -> None:
        self.config = config
        while len(self.agents) > config.max_agents:
            self.retire(self.victim(self.agents))
        while len(self.retired) > config.max_agents:
            del self.retired[self.victim(self.retired)]
        while len(self.interrupted) > config.max_agents:
            del self.interrupted[next(iter(self.interrupted))]

    @staticmethod
    def tier(state: dict[str, Any]) -> int:
        """Who goes first when there is no room: no deny and under 10 calls, then no deny, then the rest."""
        return 2 if state["denied"] else 1 if state["calls"] >= 10 else 0

    def victim(self, table: dict[str, dict[str, Any]]) -> str:
        """The least recently active of the lowest tier."""
        return min(table, key=lambda a: self.tier(table[a]))  # min keeps the first of equals: the oldest

    def retire(self, agent: str) -> None:
        state = self.agents.pop(agent)
        self.retired[agent] = {
            "calls": state["calls"],
            "denied": state["denied"],
            "denied_kinds": state["denied_kinds"],
        }
        if len(self.retired) > self.config.max_agents:
            del self.retired[self.victim(self.retired)]

    @staticmethod
    def fresh() -> dict[str, Any]:
        return {"history": [], "calls": 0, "denied_kinds": set(), "denied": False}

    def touch(self, agent: str) -> dict[str, Any]:
        if agent in self.agents:
            self.agents[agent] = self.agents.pop(agent)
        else:
            state = self.fresh()
            ledger = self.retired.pop(agent, None)
            if ledger is not None:  # a returning id picks up its calls and denies, not its window
                state.update(ledger, history=[])
            if len(self.agents) >= self.config.max_agents:
                self.retire(self.victim(self.agents))
            self.agents[agent] = state
        return self.agents[agent]

    def key(self, tool: str, args: Any) -> Any:
        if isinstance(args, dict):
            args = {k: v for k, v in args.items() if k not in self.config.ignore_args}
        if _has_huge_int(args):  # json takes ints beyond 64 bits; JSON interchange (and the engine) does not
            return _Unjudgeable()
        try:
            return json.dumps([tool, args], sort_keys=True, allow_nan=False)
        except (TypeError, ValueError):
            return _Unjudgeable()

    def check(self, agent: str, tool: str, args: Any) -> tuple:
        c = self.config
        if agent in self.interrupted:
            entry = self.interrupted.pop(agent)
            self.interrupted[agent] = entry
            first = entry["denies"] == 0
            entry["denies"] += 1
            calls = 0
            if agent in self.agents:
                state = self.touch(agent)
                state["denied"] = True
                calls = state["calls"]
            return (False, "interrupted", calls, 0, first, False)
        if not c.enabled or self.paused:
            return (True, None, 0, 0, False, False)
        name = self.norm(tool)
        if c.only:
            if name not in {self.norm(t) for t in c.only}:
                return (True, None, 0, 0, False, False)
        elif name in {self.norm(t) for t in c.exempt}:
            return (True, None, 0, 0, False, False)
        state = self.touch(agent)
        if c.max_calls_per_agent and state["calls"] >= c.max_calls_per_agent:
            return self.deny(state, "cap", state["calls"], c.max_calls_per_agent)
        state["history"] = state["history"][-c.window :]
        key = self.key(tool, args)
        n = sum(1 for k in state["history"] if k == key)
        if n >= c.duplicate_limit:
            return self.deny(state, "duplicate", n, c.duplicate_limit)
        state["history"] = (state["history"] + [key])[-c.window :]
        state["calls"] += 1
        return (True, None, n + 1, c.duplicate_limit, False, True)

    @staticmethod
    def deny(state: dict[str, Any], kind: str, count: int, limit: int) -> tuple:
        first = kind not in state["denied_kinds"]
        state["denied_kinds"].add(kind)
        state["denied"] = True
        return (False, kind, count, limit, first, False)


def _has_huge_int(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return not -(2**63) <= value < 2**64
    if isinstance(value, dict):
        return any(_has_huge_int(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_huge_int(v) for v in value)
    return False


def _repeats(state: Any) -> list[int]:
    """How often each key repeats (twice or more) in an exported window."""
    counts: dict[int, int] = {}
    for key in state.ring:
        if key is not None:
            counts[key] = counts.get(key, 0) + 1
    return [n for n in counts.values() if n >= 2]


class EngineMatchesModel(RuleBasedStateMachine):
    @initialize(config=configs)
    def start(self, config: Config) -> None:
        self.guard = Guard(config)
        self.model = Model(config)

    @rule(agent=st.sampled_from(AGENTS), tool=st.sampled_from(TOOLS), args=call_args)
    def call(self, agent: str, tool: str, args: Any) -> None:
        v = self.guard.check(agent, tool, args)
        got = (v.allowed, v.kind, v.count, v.limit, v.first, v.counted)
        assert got == self.model.check(agent, tool, args)
        assert v.allowed or v.reason

    @rule(agent=st.sampled_from(AGENTS), tool=st.sampled_from(TOOLS), args=call_args, times=st.integers(2, 12))
    def loop(self, agent: str, tool: str, args: Any, times: int) -> None:
        for _ in range(times):
            self.call(agent, tool, args)

    @rule(config=configs)
    def change_config(self, config: Config) -> None:
        self.guard.config = config
        self.model.set_config(config)

    @rule(
        window=st.one_of(st.none(), st.integers(1, 8)),
        limit=st.one_of(st.none(), st.integers(1, 4)),
        cap=st.one_of(st.none(), st.integers(0, 12)),
    )
    def tune(self, window: int | None, limit: int | None, cap: int | None) -> None:
        """An operator nudging one limit while agents run (the common live edit)."""
        changes = {"window": window, "duplicate_limit": limit, "max_calls_per_agent": cap}
        config = self.model.config.replace(**{k: v for k, v in changes.items() if v is not None})
        self.change_config(config)

    @rule(agent=st.sampled_from(AGENTS), reason=st.text(max_size=5))
    def interrupt(self, agent: str, reason: str) -> None:
        self.guard.interrupt(agent, reason)
        if agent in self.model.interrupted:
            return
        self.model.interrupted[agent] = {"denies": 0}
        while len(self.model.interrupted) > self.model.config.max_agents:
            del self.model.interrupted[next(iter(self.model.interrupted))]

    @rule(agent=st.sampled_from(AGENTS))
    def uninterrupt(self, agent: str) -> None:
        assert self.guard.uninterrupt(agent) == (self.model.interrupted.pop(agent, None) is not None)

    @rule(agent=st.sampled_from(AGENTS))
    def reset(self, agent: str) -> None:
        tracked = agent in self.model.agents
        retired = self.model.retired.pop(agent, None) is not None
        assert self.guard.reset(agent) == (tracked or retired)
        if tracked:
            del self.model.agents[agent]
            self.model.agents[agent] = self.model.fresh()  # the operator just acted on it: most recent

    @rule(agent=st.sampled_from(AGENTS))
    def end_agent(self, agent: str) -> None:
        held = agent in self.model.agents  # an interrupt outlives the agent's end, and so do its counts
        if held:
            self.model.retire(agent)
        assert self.guard.end_agent(agent) == held

    @rule(paused=st.booleans())
    def pause(self, paused: bool) -> None:
        self.guard.pause() if paused else self.guard.resume()
        self.model.paused = paused

    @invariant()
    def same_agents_and_tallies(self) -> None:
        if not hasattr(self, "guard"):
            return
        assert self.guard.agents() == list(self.model.agents)
        for agent, state in self.model.agents.items():
            view = self.guard.agent_view(agent)
            assert view is not None
            window = self.model.config.window
            assert view.calls == state["calls"]
            # the engine trims a shrunk window lazily, on the agent's next judged call
            assert min(view.window_fill, window) == len(state["history"][-window:])
        for agent, ledger in self.model.retired.items():
            kept = self.guard.export_agent(agent)
            assert kept is not None and kept.retired and kept.calls == ledger["calls"] and not kept.ring
        for agent in AGENTS:
            if agent not in self.model.agents and agent not in self.model.retired:
                assert self.guard.export_agent(agent) is None

    @invariant()
    def top_keys_are_the_most_repeated_keys_in_the_windows(self) -> None:
        """The engine keeps its top keys incrementally; the model counts every window from scratch."""
        if not hasattr(self, "guard"):
            return
        expected = sorted(
            (
                n
                for agent in self.model.agents
                for n in _repeats(self.guard.export_agent(agent))  # as remembered, before any lazy trim
            ),
            reverse=True,
        )
        got = self.guard.top_keys(top=1000)
        assert [k.count for k in got] == expected
        for k in got:
            state = self.guard.export_agent(k.agent)
            assert state is not None and k.tool


EngineMatchesModel.TestCase.settings = settings(
    max_examples=400, stateful_step_count=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_engine_matches_the_naive_model = EngineMatchesModel.TestCase
