"""The guard engine: per-agent windows of call keys and the deny rules. Pure: no I/O, no clock."""

from __future__ import annotations

import re
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from breaker.config import Config
from breaker.keys import call_digest, preview, tool_class_name

__all__ = ["AgentState", "AgentView", "Guard", "GuardView", "KeyView", "Verdict"]

_SORT = orjson.OPT_SORT_KEYS
_dumps = orjson.dumps
_TOOL_CACHE_MAX = 4096  # tool names seen are few; the cap only guards against a flood of junk names
_REASON_CACHE_MAX = 4096
_PLACEHOLDER = re.compile(r"\{(tool|count|limit|kind|agent)\}")
INTERRUPTED_TEXT = "Circuit breaker (interrupted): the operator stopped this agent; do not call any more tools."

# How a tool name is treated under the config in force.
_JUDGED, _PASS = 0, 1


class Verdict:
    """The answer for one call.

    allowed: the call may run. kind: None, "duplicate", "cap" or "interrupted".
    reason: the deny text for the model ("" when allowed). count/limit: for a duplicate deny the
    key's occurrences in the window and duplicateLimit; for a cap deny the calls made and the cap;
    for an allowed judged call the key's occurrences including this call and duplicateLimit;
    0/0 for calls the guard does not judge (disabled, paused, exempt, outside `only`).
    first: this is the agent's first deny of this kind (the one the incident log records).
    counted: the call was recorded (took a window slot and counts toward the cap).
    key: the call's digest as the window compares it, for tools that tally calls the same way
    (None when it was not computed: not judged, capped, interrupted, or unserializable args).
    """

    __slots__ = ("allowed", "count", "counted", "first", "key", "kind", "limit", "reason")

    def __init__(
        self,
        allowed: bool,
        kind: str | None = None,
        reason: str = "",
        count: int = 0,
        limit: int = 0,
        first: bool = False,
        counted: bool = False,
        key: int | None = None,
    ) -> None:
        self.allowed = allowed
        self.key = key
        self.kind = kind
        self.reason = reason
        self.count = count
        self.limit = limit
        self.first = first
        self.counted = counted

    def __repr__(self) -> str:
        if self.allowed:
            return f"Verdict(allow, count={self.count}, limit={self.limit}, counted={self.counted})"
        return f"Verdict(deny {self.kind}, count={self.count}, limit={self.limit}, first={self.first})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Verdict):
            return NotImplemented
        return all(getattr(self, s) == getattr(other, s) for s in self.__slots__)

    __hash__ = None  # type: ignore[assignment]


_NOT_JUDGED = Verdict(True)


class _Agent:
    """One agent's state: its window (ring of keys + count per key) and its lifetime tallies."""

    __slots__ = ("calls", "counts", "denies", "last_seen", "last_tool", "previews", "ring")

    def __init__(self) -> None:
        self.ring: deque[int | None] = deque()  # None = a call the guard could not judge
        self.counts: dict[int, int] = {}
        self.previews: dict[int, tuple[str, str]] = {}  # only keys seen at least twice
        self.calls = 0  # allowed, counted calls over the agent's life
        self.denies: dict[str, int] = {}  # deny kind -> how many of its calls were denied
        self.last_tool = ""
        self.last_seen: float | None = None


class _Interrupt:
    """An operator's interrupt: kept apart from the agents, so evicting an idle agent never lifts it."""

    __slots__ = ("denies", "reason")

    def __init__(self, reason: str, denies: int = 0) -> None:
        self.reason = reason
        self.denies = denies


@dataclass(frozen=True, slots=True)
class AgentView:
    """A read-only picture of one agent, for displays."""

    agent: str
    calls: int
    window_fill: int
    window: int
    cap: int
    worst_count: int
    worst_tool: str
    worst_preview: str
    duplicate_limit: int
    denies: dict[str, int]  # deny kind -> how many of its calls were denied (its trip is the first)
    status: str  # what its next call meets: "ok", or the kind that would deny it: "duplicate", "cap", "interrupted"
    last_tool: str
    last_seen: float | None
    interrupt_reason: str | None


@dataclass(frozen=True, slots=True)
class KeyView:
    """One repeated key: which agent, which call, how many times it is in that agent's window."""

    agent: str
    tool: str
    preview: str
    count: int


@dataclass(frozen=True, slots=True)
class GuardView:
    """A read-only picture of the guard: the agents asked for and the most repeated keys."""

    agents: list[AgentView]
    top_keys: list[KeyView]


@dataclass(slots=True)
class AgentState:
    """Everything the engine holds for one agent, as plain values: what the state store saves and
    restores. `ring` holds the window's digests oldest first (None = a call it could not judge)."""

    agent: str
    calls: int
    denies: dict[str, int]
    ring: list[int | None]
    previews: dict[int, tuple[str, str]]
    last_tool: str
    last_seen: float | None


class Guard:
    """The circuit breaker. `check()` decides; nothing here reads a clock or touches a file.

    `on_remove(agent)` (optional) is told when an agent's state goes away by itself — least
    recently active past `maxAgents` — or by `end_agent`, so that whoever mirrors the agents
    (subscribers, the state store) can forget it too.
    """

    def __init__(self, config: Config | None = None, on_remove: Callable[[str], Any] | None = None) -> None:
        self._agents: OrderedDict[str, _Agent] = OrderedDict()  # least recently active first
        self._interrupted: OrderedDict[str, _Interrupt] = OrderedDict()
        self._tools: dict[str, int] = {}
        # The repeated keys of every agent, by count (>= 2), kept as calls happen: the top keys are
        # read from the highest buckets down instead of scanning every agent's window.
        self._buckets: dict[int, dict[tuple[str, int], None]] = {}
        self._top = 0  # no bucket above this holds anything
        self.on_remove = on_remove
        self.paused = False
        self.checks = 0
        self.denies: dict[str, int] = {"duplicate": 0, "cap": 0, "interrupted": 0}
        self.config = config if config is not None else Config()

    # -- configuration ------------------------------------------------------------------------

    @property
    def config(self) -> Config:
        return self._config

    @config.setter
    def config(self, config: Config) -> None:
        """Swap the config live: counts are kept; windows shrink lazily on each agent's next call."""
        self._config = config
        self._ignore = frozenset(config.ignore_args)
        self._exempt = frozenset(map(tool_class_name, config.exempt))
        self._only = frozenset(map(tool_class_name, config.only))
        self._tools.clear()
        self._reasons: dict[tuple[str, str, int, int, str], str] = {}
        while len(self._agents) > config.max_agents:
            self._drop(next(iter(self._agents)))
        while len(self._interrupted) > config.max_agents:
            self._interrupted.popitem(last=False)

    def _classify(self, tool: str) -> int:
        name = tool_class_name(tool)
        if self._only:
            kind = _JUDGED if name in self._only else _PASS
        else:
            kind = _PASS if name in self._exempt else _JUDGED
        if len(self._tools) >= _TOOL_CACHE_MAX:
            self._tools.clear()
        self._tools[tool] = kind
        return kind

    # -- the decision -------------------------------------------------------------------------

    def check(
        self, agent: str, tool: str, args: Any, now: float | None = None, *, unjudgeable: bool = False
    ) -> Verdict:
        """Decide one call of `tool` with `args` by `agent`; allowed calls are recorded.

        `now` (seconds, any clock) is only stored for displays ("age of the last call").
        `unjudgeable`: the harness could not serialize the args; the call is judged as args that
        cannot be keyed (allowed and counted, matching nothing).
        """
        self.checks += 1
        if self._interrupted and agent in self._interrupted:
            return self._deny_interrupted(agent, tool, now)
        config = self._config
        if not config.enabled or self.paused:
            return _NOT_JUDGED
        kind = self._tools.get(tool)
        if kind is None:
            kind = self._classify(tool)
        if kind:
            return _NOT_JUDGED

        agents = self._agents
        st = agents.get(agent)
        if st is None:
            st = agents[agent] = _Agent()
            if len(agents) > config.max_agents:
                self._drop(next(iter(agents)))
        else:
            agents.move_to_end(agent)
        st.last_tool = tool
        st.last_seen = now

        cap = config.max_calls_per_agent
        if cap and st.calls >= cap:
            return self._deny(st, agent, tool, "cap", st.calls, cap)

        ring = st.ring
        window = config.window
        if len(ring) > window:  # the window was made smaller since this agent's last call
            while len(ring) > window:
                self._evict(agent, st, ring.popleft())

        ignore = self._ignore
        if ignore and isinstance(args, dict) and not ignore.isdisjoint(args):
            args = {k: v for k, v in args.items() if k not in ignore}  # previews leave them out too
        if unjudgeable:
            key = None
        else:
            try:
                key = hash(_dumps((tool, args), option=_SORT))  # call_digest's fast path, inlined: the hot path
            except Exception:
                key = call_digest(tool, args)
        limit = config.duplicate_limit
        if key is None:
            n = 0
        else:
            counts = st.counts
            n = counts.get(key, 0)
            if n >= limit:
                verdict = self._deny(st, agent, tool, "duplicate", n, limit)
                verdict.key = key
                return verdict
            counts[key] = n + 1
            if n:  # a repeat: it moves up one bucket of the top keys
                buckets = self._buckets
                pair = (agent, key)
                if n == 1:
                    st.previews[key] = (tool, preview(tool, args))
                else:
                    del buckets[n][pair]
                bucket = buckets.get(n + 1)
                if bucket is None:
                    bucket = buckets[n + 1] = {}
                bucket[pair] = None
                if n + 1 > self._top:
                    self._top = n + 1
        ring.append(key)
        st.calls += 1
        if len(ring) > window:
            old = ring.popleft()
            if old is not None:
                m = st.counts[old]
                if m == 1:
                    del st.counts[old]
                else:
                    self._evict(agent, st, old)
        return Verdict(True, None, "", n + 1, limit, False, True, key)

    def _evict(self, agent: str, st: _Agent, old: int | None) -> None:
        """A key leaves the window: one fewer occurrence (and one bucket down in the top keys)."""
        if old is None:
            return
        n = st.counts[old] - 1
        if not n:
            del st.counts[old]
            return
        st.counts[old] = n
        pair = (agent, old)
        buckets = self._buckets
        del buckets[n + 1][pair]
        if n == 1:
            del st.previews[old]
        else:
            bucket = buckets.get(n)
            if bucket is None:
                bucket = buckets[n] = {}
            bucket[pair] = None

    def _deny(self, st: _Agent, agent: str, tool: str, kind: str, count: int, limit: int) -> Verdict:
        before = st.denies.get(kind, 0)
        st.denies[kind] = before + 1
        self.denies[kind] += 1
        cache_key = (kind, tool, count, limit, agent)
        reason = self._reasons.get(cache_key)
        if reason is None:  # a looping agent gets the same text every time: fill it once
            if len(self._reasons) >= _REASON_CACHE_MAX:
                self._reasons.clear()
            reason = self._reasons[cache_key] = self._fill(self._config.deny_message, tool, count, limit, kind, agent)
        return Verdict(False, kind, reason, count, limit, before == 0, False)

    def _deny_interrupted(self, agent: str, tool: str, now: float | None) -> Verdict:
        entry = self._interrupted[agent]
        self._interrupted.move_to_end(agent)
        first = entry.denies == 0
        entry.denies += 1
        self.denies["interrupted"] += 1
        st = self._agents.get(agent)
        calls = 0
        if st is not None:
            self._agents.move_to_end(agent)
            st.denies["interrupted"] = st.denies.get("interrupted", 0) + 1
            st.last_tool = tool
            st.last_seen = now
            calls = st.calls
        text = INTERRUPTED_TEXT + (f" Reason: {entry.reason}" if entry.reason else "")
        return Verdict(False, "interrupted", text, calls, 0, first, False)

    @staticmethod
    def _fill(message: str, tool: str, count: int, limit: int, kind: str, agent: str) -> str:
        # One pass, so a tool name like "{count}" is never substituted into.
        values = {"tool": tool, "count": str(count), "limit": str(limit), "kind": kind, "agent": agent}
        return _PLACEHOLDER.sub(lambda m: values[m.group(1)], message)

    # -- operator actions ---------------------------------------------------------------------

    def interrupt(self, agent: str, reason: str = "") -> None:
        """Deny every later call of `agent` (kind "interrupted") until `uninterrupt`."""
        entry = self._interrupted.get(agent)
        if entry is not None:
            entry.reason = reason
            return
        self._interrupted[agent] = _Interrupt(reason)
        while len(self._interrupted) > self._config.max_agents:
            self._interrupted.popitem(last=False)

    def uninterrupt(self, agent: str) -> bool:
        """Lift an operator interrupt; True if the agent was interrupted."""
        return self._interrupted.pop(agent, None) is not None

    def interrupted(self, agent: str) -> bool:
        return agent in self._interrupted

    def reset(self, agent: str) -> bool:
        """Clear an agent's window, call count and denies (not an interrupt); True if it was tracked."""
        st = self._agents.get(agent)
        if st is None:
            return False
        self._unbucket(agent, st)
        self._agents[agent] = _Agent()
        return True

    def end_agent(self, agent: str) -> bool:
        """The harness says the agent is gone: free its state. An operator interrupt outlives it
        (only `uninterrupt` lifts one). True if the agent was tracked."""
        if agent not in self._agents:
            return False
        self._drop(agent)
        return True

    def pause(self) -> None:
        """Allow every call without recording it (interrupts still apply)."""
        self.paused = True

    def resume(self) -> None:
        self.paused = False

    def _drop(self, agent: str) -> None:
        st = self._agents.pop(agent)
        self._unbucket(agent, st)
        if self.on_remove is not None:
            self.on_remove(agent)

    def _unbucket(self, agent: str, st: _Agent) -> None:
        buckets = self._buckets
        for key in st.previews:
            del buckets[st.counts[key]][(agent, key)]

    # -- state in and out (the state store) ----------------------------------------------------

    def export_agent(self, agent: str) -> AgentState | None:
        """A copy of one agent's state (None if it is not tracked)."""
        st = self._agents.get(agent)
        if st is None:
            return None
        return AgentState(
            agent, st.calls, dict(st.denies), list(st.ring), dict(st.previews), st.last_tool, st.last_seen
        )

    def restore_agent(self, state: AgentState, *, windows: bool = True) -> None:
        """Put an agent back as exported, as the most recently active. `windows=False` keeps its
        tallies but not its window (digests from another process's hash key match nothing)."""
        if state.agent in self._agents:
            self._drop(state.agent)
        st = _Agent()
        st.calls = state.calls
        st.denies = dict(state.denies)
        st.last_tool = state.last_tool
        st.last_seen = state.last_seen
        if windows:
            st.ring = deque(state.ring)
            counts = st.counts
            for key in state.ring:
                if key is not None:
                    counts[key] = counts.get(key, 0) + 1
            for key, n in counts.items():
                if n >= 2:
                    st.previews[key] = state.previews.get(key, ("", ""))
                    self._buckets.setdefault(n, {})[(state.agent, key)] = None
                    self._top = max(self._top, n)
        self._agents[state.agent] = st
        while len(self._agents) > self._config.max_agents:
            self._drop(next(iter(self._agents)))

    def interrupts(self) -> list[tuple[str, str, int]]:
        """Every operator interrupt: (agent, reason, denies so far), oldest first."""
        return [(agent, e.reason, e.denies) for agent, e in self._interrupted.items()]

    def restore_interrupt(self, agent: str, reason: str, denies: int) -> None:
        self._interrupted[agent] = _Interrupt(reason, denies)
        self._interrupted.move_to_end(agent)
        while len(self._interrupted) > self._config.max_agents:
            self._interrupted.popitem(last=False)

    # -- read-only views ----------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._agents)

    def __contains__(self, agent: object) -> bool:
        return agent in self._agents

    def agents(self) -> list[str]:
        """Tracked agent ids, least recently active first."""
        return list(self._agents)

    def known(self, agent: str) -> bool:
        """Tracked, or under an interrupt (both are shown to an operator)."""
        return agent in self._agents or agent in self._interrupted

    def agent_view(self, agent: str) -> AgentView | None:
        st = self._agents.get(agent)
        if st is None:
            if agent not in self._interrupted:
                return None
            st = _Agent()
        return self._view(agent, st)

    def _view(self, agent: str, st: _Agent) -> AgentView:
        config = self._config
        worst_count, worst_tool, worst_preview = (1 if st.counts else 0), "", ""
        if st.previews:
            key = max(st.previews, key=st.counts.__getitem__)
            worst_count = st.counts[key]
            worst_tool, worst_preview = st.previews[key]
        elif st.ring:
            worst_tool = st.last_tool
        interrupt = self._interrupted.get(agent)
        cap = config.max_calls_per_agent
        if interrupt is not None:
            status = "interrupted"
        elif cap and st.calls >= cap:
            status = "cap"
        elif worst_count >= config.duplicate_limit:
            status = "duplicate"
        else:
            status = "ok"
        return AgentView(
            agent=agent,
            calls=st.calls,
            window_fill=len(st.ring),
            window=config.window,
            cap=cap,
            worst_count=worst_count,
            worst_tool=worst_tool,
            worst_preview=worst_preview,
            duplicate_limit=config.duplicate_limit,
            denies=dict(st.denies),
            status=status,
            last_tool=st.last_tool,
            last_seen=st.last_seen,
            interrupt_reason=interrupt.reason if interrupt is not None else None,
        )

    def interrupted_agents(self) -> list[str]:
        """Agents under an operator interrupt (tracked or not), least recently active first."""
        return list(self._interrupted)

    def top_keys(self, top: int = 10) -> list[KeyView]:
        """The `top` most repeated keys across all agents' windows (keys seen at least twice).

        Read from the count buckets kept as calls happen: the cost is the number of keys returned
        plus the empty buckets skipped, never the number of agents."""
        out: list[KeyView] = []
        buckets = self._buckets
        n = self._top
        while n >= 2 and len(out) < top:
            bucket = buckets.get(n)
            if not bucket:
                if n == self._top:
                    buckets.pop(n, None)
                    self._top = n - 1  # nothing this high any more
                n -= 1
                continue
            for agent, key in bucket:
                tool, text = self._agents[agent].previews[key]
                out.append(KeyView(agent, tool, text, n))
                if len(out) >= top:
                    break
            n -= 1
        return out

    def snapshot(self, top: int = 10, agents: Iterable[str] | None = None) -> GuardView:
        """Views of `agents` (default: every tracked or interrupted agent, most recently active
        first) and the `top` most repeated keys."""
        if agents is None:
            seen = set(self._agents)
            ids = [*reversed(self._agents), *(a for a in reversed(self._interrupted) if a not in seen)]
        else:
            ids = list(agents)
        views = [v for v in map(self.agent_view, ids) if v is not None]
        return GuardView(agents=views, top_keys=self.top_keys(top))
