"""The guard engine: per-agent windows of call keys and the deny rules. Pure: no I/O, no clock."""

from __future__ import annotations

import re
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from breaker.config import AGENT_LIMITS, Config
from breaker.keys import Judged, call_digest, preview, tool_class_name
from breaker.records import AgentRow, KeyRow

__all__ = ["AgentState", "Guard", "GuardView", "Verdict"]

_SORT = orjson.OPT_SORT_KEYS
_dumps = orjson.dumps
_TOOL_CACHE_MAX = 4096  # tool names seen are few; the cap only guards against a flood of junk names
_PENDING_MAX = 64  # call ids remembered per agent while their results are awaited
_REASON_CACHE_MAX = 4096
# Which agents a flood of new ids may push out first. Tier 0: no deny yet and fewer than _NEW_CALLS
# calls (what a flood of fresh ids is made of); tier 1: no deny yet; tier 2: denied at least once (a
# trip, a cap). The least recently active agent of the lowest tier that holds one goes first.
_NEW_CALLS = 10
_PLACEHOLDER = re.compile(r"\{(tool|count|limit|kind|agent|rule|how)\}")
INTERRUPTED_TEXT = "Circuit breaker (interrupted): the operator stopped this agent; do not call any more tools."

DENY_KINDS = ("duplicate", "repeat", "cycle", "stall", "cap", "interrupted")
# {how}: what a rule's count counts, as the messages say it
_HOW = {
    "duplicate": "identical calls among its recent ones",
    "repeat": "identical calls in a row",
    "cycle": "rounds of the same cycle of calls",
    "cap": "tool calls in all",
    "tool cap": "calls of this tool",
    "stall": "calls of this tool in a row getting the same result",
}


class _Rules:
    """The limits one tool's calls are judged by: the config's, with the tool's overrides on top."""

    __slots__ = (
        "dup_limit",
        "dup_warn",
        "judged",
        "name",
        "progress",
        "rep_limit",
        "rep_warn",
        "stall_limit",
        "stall_warn",
        "tool_cap",
        "tool_warn",
    )

    def __init__(self, config: Config, name: str, judged: bool, overrides: dict[str, Any]) -> None:
        self.judged = judged
        self.name = name  # the tool's class name (case, `_` and `-` ignored), as exempt compares
        self.dup_limit = overrides.get("duplicateLimit", config.duplicate_limit)
        self.dup_warn = overrides.get("duplicateWarn", config.duplicate_warn)
        self.rep_limit = overrides.get("repeatLimit", config.repeat_limit)
        self.rep_warn = min(overrides.get("repeatWarn", config.repeat_warn), self.rep_limit)  # 0 while it is off
        self.stall_limit = overrides.get("stallLimit", config.stall_limit)
        self.stall_warn = min(overrides.get("stallWarn", config.stall_warn), self.stall_limit)
        self.tool_cap = overrides.get("maxCalls", 0)
        self.tool_warn = min(overrides.get("maxCallsWarn", 0), self.tool_cap)
        self.progress = overrides.get("progress", config.progress)


class Verdict:
    """The answer for one call.

    allowed: the call may run. kind: None, or the rule that denied: "duplicate", "repeat", "cycle",
    "cap" or "interrupted". reason: the deny text for the model ("" when allowed).
    count/limit: the tally of the rule that denied or warned, and its limit — for a duplicate the
    key's occurrences in the window and duplicateLimit; for a repeat the calls in a row; for a cycle
    its rounds; for a cap the calls made (of the tool, for a per-tool cap) and the cap. For an
    allowed judged call without a warning, the key's occurrences including this call and
    duplicateLimit; 0/0 for calls the guard does not judge (disabled, paused, exempt, outside `only`).
    warning/rule: an allowed call near a limit carries the text for the model and the rule ("" and
    None otherwise); a deny's rule is its kind.
    first: this is the agent's first deny of this kind (the one the incident log records).
    counted: the call was recorded (took a window slot and counts toward the cap).
    key: the call's digest as the window compares it, for tools that tally calls the same way
    (None when it was not computed: not judged, capped, interrupted, or unserializable args).
    """

    __slots__ = ("allowed", "count", "counted", "first", "key", "kind", "limit", "reason", "rule", "warning")

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
        warning: str = "",
        rule: str | None = None,
    ) -> None:
        self.allowed = allowed
        self.key = key
        self.warning = warning  # an allowed call near a limit: the text the model is shown ("" = none)
        self.rule = rule  # the rule that warned (allowed) or denied (= kind)
        self.kind = kind
        self.reason = reason
        self.count = count
        self.limit = limit
        self.first = first
        self.counted = counted

    def __repr__(self) -> str:
        if self.allowed:
            warned = f", warned by {self.rule}" if self.warning else ""
            return f"Verdict(allow, count={self.count}, limit={self.limit}, counted={self.counted}{warned})"
        return f"Verdict(deny {self.kind}, count={self.count}, limit={self.limit}, first={self.first})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Verdict):
            return NotImplemented
        return all(getattr(self, s) == getattr(other, s) for s in self.__slots__)

    __hash__ = None  # type: ignore[assignment]


_NOT_JUDGED = Verdict(True)


class _Agent:
    """One agent's state: its window (ring of keys + count per key) and its lifetime tallies."""

    __slots__ = (
        "before",
        "calls",
        "counts",
        "cycles",
        "cycling",
        "denies",
        "last",
        "last_key",
        "last_seen",
        "last_tool",
        "limits",
        "pending",
        "previews",
        "recent",
        "results",
        "ring",
        "run",
        "stall_digest",
        "stall_n",
        "stall_tool",
        "tier",
        "tool_calls",
        "warns",
    )

    def __init__(self) -> None:
        self.ring: deque[int | None] = deque()  # None = a call the guard could not judge
        self.counts: dict[int, int] = {}
        self.previews: dict[int, tuple[str, str]] = {}  # only keys seen at least twice
        self.calls = 0  # allowed, counted calls over the agent's life
        self.denies: dict[str, int] = {}  # deny kind -> how many of its calls were denied
        self.warns: dict[str, int] = {}  # rule -> how many of its calls were allowed with a warning
        self.last = ""  # how its last judged call went: "", "warn:<rule>" or "deny:<kind>"
        self.last_tool = ""
        self.last_seen: float | None = None
        # the repeat rule: the key of its last allowed call, and how many times in a row it came
        self.last_key: int | None = None
        self.run = 0
        # the cycle rule, for each period p: how many calls in a row repeated the call p back
        self.cycles: list[int] | None = None
        self.cycling = False  # some entry of cycles is not 0
        self.recent: deque[int | None] | None = None  # the last calls it tried, for the cycle rule
        # progress: per key, its calls since its result last changed, and its last result's digest
        self.before: dict[int, int] | None = None
        self.results: dict[int, int] | None = None  # per key, a hash of its last result's digest
        # call id (or an anonymous one) -> (key, warning) of its calls awaiting their result
        self.pending: OrderedDict[Any, tuple[int | None, str, bool, str]] | None = None
        self.tool_calls: dict[str, int] | None = None  # per-tool caps: calls per tool
        # the stall rule: the tool of its last calls in a row, the result they got, and how many got it
        self.stall_tool: str | None = None
        self.stall_digest: str | None = None
        self.stall_n = 0
        self.limits: dict[str, int] | None = None  # the operator's override (Guard._limits holds it)
        self.tier = 0  # its eviction tier (_NEW_CALLS)


class _Ledger:
    """What the guard keeps of an agent whose state went away (the harness ended it, or it was evicted):
    the counts that must not start again if the same id comes back — its calls toward the cap and its
    denies — without its window."""

    __slots__ = ("calls", "denies", "last_seen", "last_tool", "tier", "tool_calls", "warns")

    def __init__(self, st: _Agent) -> None:
        self.calls = st.calls
        self.denies = st.denies
        self.warns = st.warns
        self.tool_calls = st.tool_calls
        self.last_tool = st.last_tool
        self.last_seen = st.last_seen
        self.tier = st.tier

    def revive(self) -> _Agent:
        st = _Agent()
        st.calls, st.denies, st.warns, st.tool_calls = self.calls, self.denies, self.warns, self.tool_calls
        st.last_tool, st.last_seen, st.tier = self.last_tool, self.last_seen, self.tier
        return st


class _Tiers:
    """Keys in eviction tiers (see _NEW_CALLS), each least recently active first."""

    __slots__ = ("lru",)

    def __init__(self) -> None:
        self.lru: tuple[OrderedDict[str, None], ...] = (OrderedDict(), OrderedDict(), OrderedDict())

    def add(self, key: str, tier: int) -> None:
        self.lru[tier][key] = None

    def move(self, key: str, old: int, new: int) -> None:
        del self.lru[old][key]
        self.lru[new][key] = None

    def remove(self, key: str, tier: int) -> None:
        del self.lru[tier][key]

    def victim(self) -> str:
        """The key to let go first: the least recently active of the lowest tier that holds any."""
        for lru in self.lru:
            if lru:
                return next(iter(lru))
        raise KeyError("no key to let go")

    def clear(self) -> None:
        for lru in self.lru:
            lru.clear()


class _Interrupt:
    """An operator's interrupt: kept apart from the agents, so evicting an idle agent never lifts it."""

    __slots__ = ("denies", "reason")

    def __init__(self, reason: str, denies: int = 0) -> None:
        self.reason = reason
        self.denies = denies


@dataclass(frozen=True, slots=True)
class GuardView:
    """A read-only picture of the guard: the agents asked for and the most repeated keys."""

    agents: list[AgentRow]
    top_keys: list[KeyRow]


@dataclass(slots=True)
class AgentState:
    """Everything the engine holds for one agent, as plain values: what the state store saves and
    restores. `ring` holds the window's digests oldest first (None = a call it could not judge).
    The fields after `last_seen` belong to the rules beyond the seed's (empty when they are off);
    calls still awaiting their result are not kept (their results, if they come, match nothing)."""

    agent: str
    calls: int
    denies: dict[str, int]
    ring: list[int | None]
    previews: dict[int, tuple[str, str]]
    last_tool: str
    last_seen: float | None
    warns: dict[str, int] = field(default_factory=dict)
    last: str = ""  # how its last judged call went: "", "warn:<rule>" or "deny:<kind>"
    last_key: int | None = None  # the repeat rule: its last allowed call, and how many times in a row
    run: int = 0
    cycles: list[int] | None = None  # the cycle rule's runs, per period
    recent: list[int | None] | None = None  # the cycle rule: the last calls tried, oldest first
    before: dict[int, int] | None = None  # progress: per key, its occurrences from before its result changed
    results: dict[int, int] | None = None  # progress: per key, a hash of its last result's digest
    tool_calls: dict[str, int] | None = None  # per-tool caps: calls per tool (by class name)
    stall: tuple[str, str | None, int] | None = None  # the stall rule: tool, result digest, calls that got it
    limits: dict[str, int] | None = None  # the operator's override of its cap / duplicate limit
    retired: bool = False  # only its counts are kept (it ended, or was evicted): no window, not shown


class Guard:
    """The circuit breaker. `check()` decides; nothing here reads a clock or touches a file.

    `on_remove(agent)` (optional) is told when an agent's state goes away by itself — evicted past
    `maxAgents` — or by `end_agent`, so that whoever mirrors the agents (subscribers, the state store)
    can forget it too; and again when its ledger (the counts kept of it) is forgotten in turn.

    What the harness plane can never undo: an agent's calls toward its cap and its denies outlive
    `end_agent` and eviction (kept in a bounded ledger, and restored if the id calls again); a flood
    of new ids pushes out new, never-denied agents first (see _NEW_CALLS); the operator's interrupts
    and per-agent limits live apart from the agents and only operator actions remove them.
    """

    def __init__(self, config: Config | None = None, on_remove: Callable[[str], Any] | None = None) -> None:
        self._agents: OrderedDict[str, _Agent] = OrderedDict()  # least recently active first
        self._tiers = _Tiers()  # the same agents, by eviction tier
        self._retired: OrderedDict[str, _Ledger] = OrderedDict()  # ended or evicted agents' counts
        self._retired_tiers = _Tiers()
        self._interrupted: OrderedDict[str, _Interrupt] = OrderedDict()
        self._limits: dict[str, dict[str, int]] = {}  # the operator's per-agent limits, oldest first
        self._tools: dict[str, _Rules] = {}
        # The repeated keys of every agent, by count (>= 2), kept as calls happen: the top keys are
        # read from the highest buckets down instead of scanning every agent's window.
        self._buckets: dict[int, dict[tuple[str, int], None]] = {}
        self._top = 0  # no bucket above this holds anything
        self.on_remove = on_remove
        self.paused = False
        self.checks = 0
        self.denies: dict[str, int] = dict.fromkeys(DENY_KINDS, 0)
        self.warnings = 0  # calls allowed with a warning
        self._anon = 0  # ids for remembered calls that came without one
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
        self._overrides = {tool_class_name(tool): dict(o) for tool, o in config.tools}
        self._cycle_limit = config.cycle_limit
        self._period = config.cycle_period
        self._no_cycles = [0] * (config.cycle_period + 1)
        self._progress = config.progress or any(o.get("progress") for o in self._overrides.values())
        # each rule warns only while it is on (its limit set)
        self._cycle_warn = config.cycle_warn if config.cycle_limit else 0
        self._cap_warn = min(config.cap_warn, config.max_calls_per_agent)
        self._stall = config.stall_limit or any(o.get("stallLimit") for o in self._overrides.values())
        tool_keys = ("duplicateWarn", "repeatWarn", "maxCallsWarn", "stallWarn")
        warns = (config.duplicate_warn, config.repeat_warn, self._cycle_warn, self._cap_warn, config.stall_warn)
        self._warns = any(warns) or any(o.get(k) for o in self._overrides.values() for k in tool_keys)
        self._reasons: dict[tuple[str, str, int, int, str], str] = {}
        self._bound()
        while len(self._interrupted) > config.max_agents:
            self._interrupted.popitem(last=False)

    def _classify(self, tool: str) -> _Rules:
        name = tool_class_name(tool)
        judged = name in self._only if self._only else name not in self._exempt
        rules = _Rules(self._config, name, judged, self._overrides.get(name, {}))
        if len(self._tools) >= _TOOL_CACHE_MAX:
            self._tools.clear()
        self._tools[tool] = rules
        return rules

    # -- the decision -------------------------------------------------------------------------

    def check(
        self,
        agent: str,
        tool: str,
        args: Any,
        now: float | None = None,
        *,
        unjudgeable: bool = False,
        call_id: str | int | None = None,
        judged: Judged | None = None,
    ) -> Verdict:
        """Decide one call of `tool` with `args` by `agent`; allowed calls are recorded.

        `now` (seconds, any clock) is only stored for displays ("age of the last call").
        `unjudgeable`: the harness could not serialize the args; the call is judged as args that
        cannot be keyed (allowed and counted, matching nothing). `call_id`: the harness's id for the
        call, so that its result (`result()`) finds it. `judged`: the args were keyed elsewhere (the
        judge process, for large frames): its digest and preview stand for them (`args` is ignored).
        """
        self.checks += 1
        if self._interrupted and agent in self._interrupted:
            return self._deny_interrupted(agent, tool, now)
        config = self._config
        if not config.enabled or self.paused:
            return _NOT_JUDGED
        rules = self._tools.get(tool)
        if rules is None:
            rules = self._classify(tool)
        if not rules.judged:
            return _NOT_JUDGED

        agents = self._agents
        st = agents.get(agent)
        if st is None:
            st = self._admit(agent)
        else:
            agents.move_to_end(agent)
            self._tiers.lru[st.tier].move_to_end(agent)
        st.last_tool = tool
        st.last_seen = now

        cap = config.max_calls_per_agent
        own = st.limits
        if own is not None:
            cap = own.get("maxCallsPerAgent", cap)
        if cap and st.calls >= cap:
            return self._deny(st, agent, tool, "cap", st.calls, cap)
        tool_calls = 0
        if rules.tool_cap:
            tool_calls = st.tool_calls.get(rules.name, 0) if st.tool_calls else 0
            if tool_calls >= rules.tool_cap:
                return self._deny(st, agent, tool, "cap", tool_calls, rules.tool_cap)

        ring = st.ring
        window = config.window
        if len(ring) > window:  # the window was made smaller since this agent's last call
            while len(ring) > window:
                self._evict(agent, st, ring.popleft())

        ignore = self._ignore
        if ignore and isinstance(args, dict) and not ignore.isdisjoint(args):
            args = {k: v for k, v in args.items() if k not in ignore}  # previews leave them out too
        if unjudgeable or judged is not None:
            key = judged.key if judged is not None and not unjudgeable else None
        else:
            try:
                key = hash(_dumps((tool, args), option=_SORT))  # call_digest's fast path, inlined: the hot path
            except Exception:
                key = call_digest(tool, args)
        stalled = 0
        if self._stall:  # a call of another tool ends the run of calls the stall rule counts
            if tool != st.stall_tool:
                st.stall_tool, st.stall_digest, st.stall_n = tool, None, 0
            elif rules.stall_limit:
                stalled = st.stall_n
        cycle_len = cycle_p = 0
        if self._cycle_limit:  # every call it tries moves the cycle rule on
            recent = st.recent
            if recent is not None and (key is None or key not in recent) and recent.maxlen == self._period:
                # the common case, inline: a call it has not just made continues no cycle
                if st.cycling:
                    st.cycles[:] = self._no_cycles  # type: ignore[index]
                    st.cycling = False
                recent.append(key)
            else:
                cycle_len, cycle_p = self._cycle(st, key)
        limit = rules.dup_limit if own is None else own.get("duplicateLimit", rules.dup_limit)
        if key is None:
            n = seen = 0
        else:
            counts = st.counts
            n = seen = counts.get(key, 0)
            if st.before and rules.progress:  # only the identical calls since its result last changed count
                seen = n - st.before.get(key, 0)
            if seen >= limit:
                verdict = self._deny(st, agent, tool, "duplicate", seen, limit)
                verdict.key = key
                return verdict
        # the repeat rule: the same call back to back
        in_row = st.run if key is not None and key == st.last_key else 0
        if rules.rep_limit and in_row >= rules.rep_limit:
            verdict = self._deny(st, agent, tool, "repeat", in_row, rules.rep_limit)
            verdict.key = key
            return verdict
        # the cycle rule: A-B-A-B… (periods 2 … cyclePeriod), over the calls it tried (denied ones too)
        if self._cycle_limit and cycle_p:
            if cycle_len > self._cycle_limit * cycle_p:
                verdict = self._deny(st, agent, tool, "cycle", self._cycle_limit + 1, self._cycle_limit)
                verdict.key = key
                return verdict
        # the stall rule: this tool's last calls in a row all got the same result, whatever their args
        if stalled and stalled >= rules.stall_limit:
            verdict = self._deny(st, agent, tool, "stall", stalled, rules.stall_limit)
            verdict.key = key
            return verdict

        if key is not None:
            counts[key] = n + 1
            if n:  # a repeat: it moves up one bucket of the top keys
                buckets = self._buckets
                pair = (agent, key)
                if n == 1:
                    st.previews[key] = (tool, preview(tool, args) if judged is None else judged.preview)
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
        if not st.tier and st.calls >= _NEW_CALLS:
            self._tiers.move(agent, 0, 1)
            st.tier = 1
        st.run = in_row + 1
        st.last_key = key
        if rules.tool_cap or rules.tool_warn:
            if st.tool_calls is None:
                st.tool_calls = {}
            tool_calls = st.tool_calls[rules.name] = st.tool_calls.get(rules.name, 0) + 1
        if len(ring) > window:
            old = ring.popleft()
            if old is not None:
                m = st.counts[old]
                if m == 1:
                    del st.counts[old]
                    if st.results:
                        st.results.pop(old, None)
                        if st.before:
                            st.before.pop(old, None)
                else:
                    self._evict(agent, st, old)
        verdict = Verdict(True, None, "", seen + 1, limit, False, True, key)
        # A warning, if a rule is near its limit: the rule whose deny comes first.
        # A warning on the last calls a rule allows (each rule's *Warn of them): the rule whose deny
        # comes first speaks.
        if st.last:
            st.last = ""
        if not self._warns:
            pass
        elif rules.rep_warn and in_row >= rules.rep_limit - rules.rep_warn and key is not None:
            self._warn(verdict, st, agent, tool, "repeat", in_row + 1, rules.rep_limit)
        elif cycle_p and self._cycle_warn and cycle_len > self._cycle_limit * cycle_p - self._cycle_warn:
            self._warn(verdict, st, agent, tool, "cycle", -(-cycle_len // cycle_p), self._cycle_limit)
        elif rules.dup_warn and seen >= limit - rules.dup_warn and key is not None:
            self._warn(verdict, st, agent, tool, "duplicate", seen + 1, limit)
        elif stalled and rules.stall_warn and stalled >= rules.stall_limit - rules.stall_warn:
            self._warn(verdict, st, agent, tool, "stall", stalled + 1, rules.stall_limit)
        elif rules.tool_warn and tool_calls > rules.tool_cap - rules.tool_warn:
            self._warn(verdict, st, agent, tool, "cap", tool_calls, rules.tool_cap, "tool cap")
        elif self._cap_warn and st.calls > cap - self._cap_warn:
            self._warn(verdict, st, agent, tool, "cap", st.calls, cap)
        if (call_id is not None and (rules.progress or self._stall)) or verdict.warning:
            # remembered until its result comes (the last _PENDING_MAX such calls): the result finds
            # the call by its id, and a harness that can show text only with the result gets the warning
            pending = st.pending
            if pending is None:
                pending = st.pending = OrderedDict()
            cid: Any = call_id
            if cid is None:
                self._anon += 1
                cid = (None, self._anon)
            pending[cid] = (key, verdict.warning, rules.progress, tool)
            if len(pending) > _PENDING_MAX:
                pending.popitem(last=False)
        return verdict

    def _cycle(self, st: _Agent, key: int | None) -> tuple[int, int]:
        """Move the cycle rule on by one tried call: returns the longest cycle this call continues,
        as (how many calls in a row follow it including this one, its period), or (0, 0).

        `st.recent` holds the last cyclePeriod calls tried; `st.cycles[p]` how many calls in a row
        repeated the call p before them. A block of one call repeated (A-A-A) is the repeat rule's,
        not a cycle of any period."""
        top = self._period
        recent = st.recent
        if recent is None or recent.maxlen != top:
            recent = st.recent = deque(recent or (), maxlen=top)
        cycles = st.cycles
        if cycles is None or len(cycles) != top + 1:
            cycles = st.cycles = [0] * (top + 1)
        best_len = best_p = 0
        st.cycling = False
        if key is None or key not in recent:
            cycles[:] = self._no_cycles
        else:
            size = len(recent)
            same = 0  # how many of the last calls are this one
            while same < size and recent[-1 - same] == key:
                same += 1
            for p in range(2, top + 1):
                if p <= size and recent[-p] == key:
                    run = cycles[p] = cycles[p] + 1
                    st.cycling = True
                    # the cycle with the most rounds (length / period; the shorter period on a tie)
                    if same < p - 1 and (not best_p or (run + p) * best_p > best_len * p):
                        best_len, best_p = run + p, p
                else:
                    cycles[p] = 0
        recent.append(key)
        return best_len, best_p

    def _warn(
        self, verdict: Verdict, st: _Agent, agent: str, tool: str, rule: str, count: int, limit: int, how: str = ""
    ) -> None:
        values = {"tool": tool, "count": str(count), "limit": str(limit), "kind": rule, "agent": agent}
        values.update(rule=rule, how=_HOW[how or rule])
        verdict.warning = _PLACEHOLDER.sub(lambda m: values[m.group(1)], self._config.warn_message)
        verdict.rule = rule
        verdict.count, verdict.limit = count, limit
        st.warns[rule] = st.warns.get(rule, 0) + 1
        st.last = "warn:" + rule
        self.warnings += 1

    def result(
        self,
        agent: str,
        digest: str,
        *,
        call_id: str | int | None = None,
        tool: str | None = None,
        args: Any = None,
        judged: Judged | None = None,
    ) -> tuple[bool, str]:
        """A call's result came back (its digest: the guard never needs the content). Matched by
        `call_id`, else by the call's tool and args (its latest such call). When the digest differs
        from the last result of the identical call, that call made progress: under rules with
        `progress`, its repeats count again from this one.

        Returns (found, warning): whether the call was found, and the warning its check gave ("" if
        none), for harnesses that can only show the model a warning with the result."""
        st = self._agents.get(agent)
        if st is None:
            return False, ""
        pending = st.pending
        found: tuple[int | None, str, bool, str] | None = None
        if call_id is not None:
            if pending and call_id in pending:
                found = pending.pop(call_id)
            key = found[0] if found is not None else None
            progress = found is not None and found[2]
        elif tool is not None:
            rules = self._tools.get(tool) or self._classify(tool)
            progress = rules.progress
            key = judged.key if judged is not None else call_digest(tool, args, self._ignore)
            if pending and key is not None:
                for cid in reversed(pending):
                    if pending[cid][0] == key:
                        found = pending.pop(cid)
                        break
        else:
            return False, ""
        warning = found[1] if found is not None else ""
        called = found[3] if found is not None else tool
        stall = called is not None and called == st.stall_tool
        if stall:  # the stall rule: one more call of this tool in a row with this result?
            if digest == st.stall_digest:
                st.stall_n += 1
            else:
                st.stall_digest, st.stall_n = digest, 1
        if key is None or key not in st.counts:  # args it could not judge, or a call gone from the window
            return found is not None or stall, warning
        if progress:
            results = st.results if st.results is not None else {}
            st.results = results
            previous = results.get(key)
            results[key] = seen = hash(digest)  # a hash is all a comparison needs, in half the memory
            if previous is not None and previous != seen:
                # it made progress: it and the identical calls before it count no more
                before = st.before if st.before is not None else {}
                st.before = before
                before[key] = st.counts[key]
                if st.last_key == key:
                    st.run = 0
                st.cycles = None  # a cycle through a call whose result changed is making progress
                st.cycling = False
        return True, warning

    def _evict(self, agent: str, st: _Agent, old: int | None) -> None:
        """A key leaves the window: one fewer occurrence (and one bucket down in the top keys)."""
        if old is None:
            return
        n = st.counts[old] - 1
        if not n:
            del st.counts[old]
            if st.results:
                st.results.pop(old, None)
                if st.before:
                    st.before.pop(old, None)
            return
        st.counts[old] = n
        before = st.before
        if before and old in before:  # the oldest occurrences go first: those from before a change
            if before[old] > 1:
                before[old] -= 1
            else:
                del before[old]
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
        if st.tier != 2:
            self._tiers.move(agent, st.tier, 2)
            st.tier = 2
        before = st.denies.get(kind, 0)
        st.denies[kind] = before + 1
        st.last = "deny:" + kind
        self.denies[kind] += 1
        cache_key = (kind, tool, count, limit, agent)
        reason = self._reasons.get(cache_key)
        if reason is None:  # a looping agent gets the same text every time: fill it once
            if len(self._reasons) >= _REASON_CACHE_MAX:
                self._reasons.clear()
            reason = self._reasons[cache_key] = self._fill(self._config.deny_message, tool, count, limit, kind, agent)
        return Verdict(False, kind, reason, count, limit, before == 0, False, rule=kind)

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
            if st.tier != 2:
                self._tiers.move(agent, st.tier, 2)
                st.tier = 2
            else:
                self._tiers.lru[2].move_to_end(agent)
            st.denies["interrupted"] = st.denies.get("interrupted", 0) + 1
            st.last_tool = tool
            st.last_seen = now
            calls = st.calls
        text = INTERRUPTED_TEXT + (f" Reason: {entry.reason}" if entry.reason else "")
        return Verdict(False, "interrupted", text, calls, 0, first, False, rule="interrupted")

    @staticmethod
    def _fill(message: str, tool: str, count: int, limit: int, kind: str, agent: str) -> str:
        # One pass, so a tool name like "{count}" is never substituted into.
        values = {"tool": tool, "count": str(count), "limit": str(limit), "kind": kind, "agent": agent}
        values.update(rule=kind, how=_HOW.get(kind, "calls"))
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
        """Clear an agent's window, call count, denies and override (not an interrupt); True if it was tracked.
        An operator's action: its counts start again, as a new agent's."""
        self._limits.pop(agent, None)
        led = self._retired.pop(agent, None)
        if led is not None:
            self._retired_tiers.remove(agent, led.tier)
        st = self._agents.get(agent)
        if st is None:
            return led is not None
        self._unbucket(agent, st)
        self._tiers.move(agent, st.tier, 0)
        self._agents[agent] = _Agent()
        self._agents.move_to_end(agent)  # the operator just acted on it: as recent in both orders
        return True

    def override(self, agent: str, limits: dict[str, int | None]) -> dict[str, int] | None:
        """Give `agent` limits of its own (AGENT_LIMITS keys; a value None takes that one off): its cap, and
        its duplicate limit for every tool. The global config is untouched; a reset clears them. They are
        kept apart from the agent's state: its end or eviction never drops them, only the operator does.
        The agent's limits now, or None if the guard does not know it. Values are the caller's to check
        (the protocol does)."""
        if agent not in self._agents and agent not in self._retired and agent not in self._interrupted:
            return None
        own: dict[str, int] = self._limits.pop(agent, {})
        for key, value in limits.items():
            if key not in AGENT_LIMITS:
                raise ValueError(f"{key!r} is not a limit an agent may have of its own")
            if value is None:
                own.pop(key, None)
            else:
                own[key] = value
        if own:
            self._limits[agent] = own  # the most recent last: past maxAgents, the oldest goes
            while len(self._limits) > self._config.max_agents:
                self._limits.pop(next(iter(self._limits)))
        st = self._agents.get(agent)
        if st is not None:
            st.limits = own or None
        return own

    def overrides(self) -> dict[str, dict[str, int]]:
        """Every agent's own limits (a copy), oldest first: what the state store keeps."""
        return {agent: dict(own) for agent, own in self._limits.items()}

    def restore_override(self, agent: str, limits: dict[str, int]) -> None:
        if not limits:
            return
        self._limits.pop(agent, None)
        self._limits[agent] = dict(limits)
        while len(self._limits) > self._config.max_agents:
            self._limits.pop(next(iter(self._limits)))
        st = self._agents.get(agent)
        if st is not None:
            st.limits = self._limits.get(agent)

    def end_agent(self, agent: str) -> bool:
        """The harness says the agent is gone: free its window. Its calls toward the cap and its denies are
        kept (a ledger, bounded by maxAgents): a harness cannot give an agent a fresh cap by ending it. An
        operator interrupt and override outlive it too. True if the agent was tracked."""
        if agent not in self._agents:
            return False
        self._retire(agent)
        return True

    def pause(self) -> None:
        """Allow every call without recording it (interrupts still apply)."""
        self.paused = True

    def resume(self) -> None:
        self.paused = False

    def _admit(self, agent: str) -> _Agent:
        """A new (or returning) agent's state: its ledger's counts if it had one; past maxAgents one goes."""
        led = self._retired.pop(agent, None) if self._retired else None
        if led is None:
            st = _Agent()
        else:
            self._retired_tiers.remove(agent, led.tier)
            st = led.revive()
        if self._limits:
            st.limits = self._limits.get(agent)
        if len(self._agents) >= self._config.max_agents:  # room first: the newcomer itself is never the one to go
            self._retire(self._tiers.victim())
        self._agents[agent] = st
        self._tiers.add(agent, st.tier)
        return st

    def _bound(self) -> None:
        """Keep the agents and the ledgers within maxAgents (after a config change or a restore)."""
        while len(self._agents) > self._config.max_agents:
            self._retire(self._tiers.victim())
        while len(self._retired) > self._config.max_agents:
            self._forget(self._retired_tiers.victim())

    def _retire(self, agent: str) -> None:
        """Let an agent's window go; keep its counts in the ledger (the least valuable ledger goes past maxAgents)."""
        st = self._agents.pop(agent)
        self._tiers.remove(agent, st.tier)
        self._unbucket(agent, st)
        self._retired[agent] = _Ledger(st)
        self._retired_tiers.add(agent, st.tier)
        if self.on_remove is not None:
            self.on_remove(agent)
        if len(self._retired) > self._config.max_agents:
            self._forget(self._retired_tiers.victim())

    def _forget(self, agent: str) -> None:
        led = self._retired.pop(agent)
        self._retired_tiers.remove(agent, led.tier)
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
            led = self._retired.get(agent)
            if led is None:
                return None
            return AgentState(
                agent,
                led.calls,
                dict(led.denies),
                [],
                {},
                led.last_tool,
                led.last_seen,
                dict(led.warns),
                tool_calls=dict(led.tool_calls) if led.tool_calls is not None else None,
                limits=dict(self._limits[agent]) if agent in self._limits else None,
                retired=True,
            )
        return AgentState(
            agent,
            st.calls,
            dict(st.denies),
            list(st.ring),
            dict(st.previews),
            st.last_tool,
            st.last_seen,
            dict(st.warns),
            st.last,
            st.last_key,
            st.run,
            list(st.cycles) if st.cycles is not None else None,
            list(st.recent) if st.recent is not None else None,
            dict(st.before) if st.before is not None else None,
            dict(st.results) if st.results is not None else None,
            dict(st.tool_calls) if st.tool_calls is not None else None,
            (st.stall_tool, st.stall_digest, st.stall_n) if st.stall_tool is not None else None,
            dict(st.limits) if st.limits else None,
        )

    def restore_agent(self, state: AgentState, *, windows: bool = True) -> None:
        """Put an agent back as exported, as the most recently active. `windows=False` keeps its
        tallies but not its window (digests from another process's hash key match nothing)."""
        agent = state.agent
        if agent in self._agents:
            self._retire(agent)
        if agent in self._retired:
            self._forget(agent)
        st = _Agent()
        st.calls = state.calls
        st.denies = dict(state.denies)
        st.last_tool = state.last_tool
        st.last_seen = state.last_seen
        st.warns = dict(state.warns)
        st.tier = 2 if st.denies else 1 if st.calls >= _NEW_CALLS else 0
        st.last = state.last
        st.tool_calls = dict(state.tool_calls) if state.tool_calls else None
        if state.stall is not None:
            st.stall_tool, st.stall_digest, st.stall_n = state.stall
        if state.limits:  # a state file from before overrides were kept apart
            self.restore_override(agent, state.limits)
        if state.retired:
            self._retired[agent] = _Ledger(st)
            self._retired_tiers.add(agent, st.tier)
            self._bound()
            return
        st.limits = self._limits.get(agent)
        if windows:  # what follows is keyed by digests
            st.last_key, st.run = state.last_key, state.run
            st.cycles = list(state.cycles) if state.cycles is not None else None
            st.cycling = any(st.cycles or ())
            st.recent = deque(state.recent, maxlen=self._period) if state.recent is not None else None
            st.before = dict(state.before) if state.before is not None else None
            st.results = dict(state.results) if state.results is not None else None
            st.ring = deque(state.ring)
            counts = st.counts
            for key in state.ring:
                if key is not None:
                    counts[key] = counts.get(key, 0) + 1
            for key, n in counts.items():
                if n >= 2:
                    st.previews[key] = state.previews.get(key, ("", ""))
                    self._buckets.setdefault(n, {})[(agent, key)] = None
                    self._top = max(self._top, n)
        self._agents[agent] = st
        self._tiers.add(agent, st.tier)
        self._bound()

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

    def agent_view(self, agent: str) -> AgentRow | None:
        """`agent`'s row (a new one each time), None if it is neither tracked nor interrupted. Its `harness`
        and `parent` are left empty: the engine does not know them (the session fills them in)."""
        st = self._agents.get(agent)
        if st is None:
            if agent not in self._interrupted:
                return None
            st = _Agent()
            st.limits = self._limits.get(agent)
        return self._view(agent, st)

    def _view(self, agent: str, st: _Agent) -> AgentRow:
        config = self._config
        worst_count, worst_tool, worst_preview = (1 if st.counts else 0), "", ""
        if st.previews:
            key = max(st.previews, key=st.counts.__getitem__)
            worst_count = st.counts[key]
            worst_tool, worst_preview = st.previews[key]
        elif st.ring:
            worst_tool = st.last_tool
        interrupt = self._interrupted.get(agent)
        cap, limit = config.max_calls_per_agent, config.duplicate_limit
        own = st.limits
        if own is not None:
            cap, limit = own.get("maxCallsPerAgent", cap), own.get("duplicateLimit", limit)
        last = st.last
        if interrupt is not None:
            status = rule = "interrupted"
        elif cap and st.calls >= cap:
            status = rule = "cap"
        elif last.startswith("deny:"):
            status = rule = last[5:]
        elif worst_count >= limit:
            status = rule = "duplicate"
        elif last:
            status, rule = "warned", last[5:]
        else:
            status, rule = "ok", ""
        return AgentRow(
            agent=agent,
            calls=st.calls,
            window_fill=len(st.ring),
            window=config.window,
            cap=cap,
            worst_count=worst_count,
            worst_tool=worst_tool,
            worst_preview=worst_preview,
            duplicate_limit=limit,
            denies=dict(st.denies),
            status=status,
            last_tool=st.last_tool,
            last_seen=st.last_seen,
            interrupt_reason=interrupt.reason if interrupt is not None else None,
            warns=dict(st.warns),
            rule=rule,
            override=dict(own) if own else {},
        )

    def window_keys(self, agent: str, top: int = 20) -> tuple[list[KeyRow], int]:
        """The `top` most repeated keys in `agent`'s window (seen at least twice: only those keep a preview),
        most first, and how many distinct keys its window holds."""
        st = self._agents.get(agent)
        if st is None:
            return [], 0
        counts, previews = st.counts, st.previews
        keys = sorted(previews, key=counts.__getitem__, reverse=True)[:top]
        return [KeyRow(agent=agent, tool=previews[k][0], preview=previews[k][1], count=counts[k]) for k in keys], len(
            counts
        )

    def interrupted_agents(self) -> list[str]:
        """Agents under an operator interrupt (tracked or not), least recently active first."""
        return list(self._interrupted)

    @property
    def interrupted_count(self) -> int:
        """How many agents are under an operator interrupt (tracked or not)."""
        return len(self._interrupted)

    def top_keys(self, top: int = 10) -> list[KeyRow]:
        """The `top` most repeated keys across all agents' windows (keys seen at least twice).

        Read from the count buckets kept as calls happen: the cost is the number of keys returned
        plus the empty buckets skipped, never the number of agents."""
        out: list[KeyRow] = []
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
                out.append(KeyRow(agent=agent, tool=tool, preview=text, count=n))
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
