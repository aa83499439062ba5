"""The console's view of the guard, as plain Python state: state frames in, rows out. No Textual here.

Frames arrive at ~10 Hz; the screen reads this state at its own pace. Counting happens in dicts
and bounded deques, never as widget calls per event.
"""

from __future__ import annotations

import time
from bisect import insort
from collections import deque
from collections.abc import Callable, Collection, Iterable, Set
from dataclasses import dataclass, field, replace
from typing import Any, Literal, NamedTuple

from breaker.config import KEYS, Config, ConfigError
from breaker.protocol import AgentRow, ConfigFrame, GuardStats, KeyRow, StateFrame, TripRow
from breaker.vocab import Status

RATE_SLOTS = 12  # sparkline history: one slot per RATE_PERIOD seconds
RATE_PERIOD = 1.0
MAX_TRIPS = 1000
ACTIVITY_SECONDS = 300  # the activity chart's span: one slot per second
# Most dangerous first: a loop caught (any rule, and a deny kind this console does not know: a newer
# guard's), a budget spent, the operator's stop, a warning; then ok.
_STATUS_RANK: dict[Status, int] = {
    "duplicate": 0,
    "repeat": 0,
    "cycle": 0,
    "stall": 0,
    "reworded": 0,
    "cap": 1,
    "interrupted": 2,
    "warned": 3,
    "ok": 4,
}
GuardStatus = Literal["starting", "running", "restarting", "attached", "unreachable", "stopped"]
"""A guard's status in the console: being started or reached, running (the console's own child), restarting, attached
(one it did not start), unreachable (the link is lost; reconnecting), stopped (it kept dying)."""
TREE_DEPTH = 3  # indent levels the tree shows; a deeper subagent is drawn at this level, its connector `…`


@dataclass
class ConsoleAgent:
    """One agent as the console knows it: the guard's row plus console-side history.

    `version` bumps whenever a new row arrives: the table's change token (a frame may carry an equal
    row again; comparing the token is cheap and cannot be fooled by a reused object id)."""

    id: str  # the agent's own id, as its guard and harness know it
    data: AgentRow
    rate: deque[int] = field(default_factory=lambda: deque([0] * RATE_SLOTS, maxlen=RATE_SLOTS))
    sampled_calls: int = 0
    version: int = 0
    guard: int = 0  # which of the console's guards knows it (`ConsoleState.guards`)
    key: str = ""  # its key in `ConsoleState.agents`: the id, or with several guards the guard's number and the id

    def __post_init__(self) -> None:
        if not self.key:
            self.key = self.id

    @property
    def danger(self) -> tuple[int, float, float, int, str]:
        """Sort key, most dangerous first: status duplicate, repeat or cycle, then cap, interrupted, warned;
        then closest to a limit."""
        d = self.data
        worst = d.worst_count / max(d.duplicate_limit, 1)
        cap_use = d.calls / d.cap if d.cap else 0.0
        return (_STATUS_RANK.get(d.status, 0), -worst, -cap_use, -sum(self.rate), self.key)

    @property
    def parent_key(self) -> str | None:
        """Its parent's key in the console: a parent id names an agent of the same guard."""
        parent = self.data.parent
        if parent is None or self.key == self.id:
            return parent
        return agent_key(self.guard, parent, fleet=True)


def agent_key(guard: int, agent: str, *, fleet: bool) -> str:
    """An agent's key in the console: its id, or, over several guards, the guard's number and its id (a `\\x1f`
    between: an id is a client's string, but the number before the first `\\x1f` is ours, so no id of one guard can
    take the key of another's agent)."""
    return f"{guard}\x1f{agent}" if fleet else agent


class ShownAgent(NamedTuple):
    """One row of the agents table: the agent; its tree glyphs (`│ ├─`; empty when flat, and for a root); and
    whether it is shown only as an ancestor of agents that match the filter (`context`). A NamedTuple: 10,000
    are made per change in tree mode, five times faster than a frozen dataclass."""

    agent: ConsoleAgent
    glyphs: str = ""
    context: bool = False


def tree_order(
    agents: Collection[ConsoleAgent], context: Set[str] = frozenset(), ranked: Iterable[ConsoleAgent] | None = None
) -> list[ShownAgent]:
    """`agents` as a forest: each root (no parent, or a parent not among `agents`) followed by its subagents,
    recursively. Siblings, roots too, go most dangerous first by the worst agent of their subtree (a root
    with a looping subagent ranks as that subagent), then by their own danger. Parent links come from
    clients: a cycle of them is broken at its most dangerous agent, shown as a root, so every agent is
    shown exactly once. O(n log n), without recursion (a chain may be 10,000 deep). `ranked`: `agents` (or
    more) already most dangerous first, if the caller keeps that order (`ConsoleState.ranked`)."""
    by_id = {a.key: a for a in agents}
    # Danger as a place in the flat order: ranks compare as ints, not as tuples (10k agents: 4x faster).
    flat = sorted(by_id.values(), key=lambda a: a.danger) if ranked is None else [a for a in ranked if a.key in by_id]
    danger = {a.key: n for n, a in enumerate(flat)}
    up: dict[str, str] = {}  # each non-root's parent in the tree
    kids: dict[str, list[str]] = {}
    roots: list[str] = []
    for a in by_id.values():
        parent = a.parent_key
        if parent is None or parent == a.key or parent not in by_id:
            roots.append(a.key)
        else:
            up[a.key] = parent
            kids.setdefault(parent, []).append(a.key)
    order = _preorder(roots, kids)
    if len(order) < len(by_id):  # the rest hang from cycles of parent links: one per unreached component
        reached = set(order)
        for start in sorted((i for i in by_id if i not in reached), key=danger.__getitem__):
            if start in reached:
                continue
            seen: set[str] = set()
            at = start
            while at not in seen:  # up to the cycle (every parent here is known and unreached)
                seen.add(at)
                at = up[at]
            cycle = [at]
            while (at := up[at]) != cycle[0]:
                cycle.append(at)
            root = min(cycle, key=danger.__getitem__)
            kids[up.pop(root)].remove(root)
            roots.append(root)
            more = _preorder([root], kids)
            reached.update(more)
            order.extend(more)
    worst = dict(danger)  # the most dangerous of each subtree
    for i in reversed(order):
        parent = up.get(i)
        if parent is not None and worst[i] < worst[parent]:
            worst[parent] = worst[i]

    size = len(by_id)

    def rank(i: str) -> int:
        return worst[i] * size + danger[i]

    rows: list[ShownAgent] = []
    stack = [(i, 0, "", False) for i in reversed(sorted(roots, key=rank))]
    while stack:
        i, depth, lead, last = stack.pop()
        glyphs = ""
        if depth:
            glyphs = lead + ("└" if last else "├") + ("─" if depth <= TREE_DEPTH else "…")
        rows.append(ShownAgent(by_id[i], glyphs, i in context))
        children = kids.get(i)
        if not children:
            continue
        children.sort(key=rank, reverse=True)  # popped from the stack: the most dangerous first
        if 0 < depth < TREE_DEPTH:
            lead += "  " if last else "│ "
        stack.append((children[0], depth + 1, lead, True))
        stack.extend((c, depth + 1, lead, False) for c in children[1:])
    return rows


def _preorder(roots: list[str], kids: dict[str, list[str]]) -> list[str]:
    """Every agent under `roots` (and they), parents before their subagents."""
    out: list[str] = []
    stack = list(roots)
    while stack:
        i = stack.pop()
        out.append(i)
        stack.extend(kids.get(i, ()))
    return out


class ConsoleGuard:
    """One guard as the console knows it: its counters, its config, how the console reaches it, what it repeats."""

    def __init__(self, number: int = 0, name: str = "") -> None:
        self.number = number  # its place in `ConsoleState.guards`
        self.name = name  # the operator's name for it (`--attach NAME=PATH`); "" names it by its host
        self.stats: GuardStats | None = None  # None until the guard's first frame
        self.config = ConfigFrame(values={})  # the config in force, as the guard sent it
        self.settings: Config | None = None  # its values, decoded; None until the guard sent them
        self.settings_error = ""  # why the guard's values do not decode here (a guard of another version)
        self.checks_per_s = 0.0
        self.status: GuardStatus = "starting"
        self.note = ""
        self.top_keys: list[KeyRow] = []  # with several guards: each `agent` is the agent's key
        self.activity = Activity()  # checks and denies per second, for the activity chart
        self.full: set[str] | None = None  # keys of a full picture that is still arriving in parts
        self.sample_checks: int | None = None
        self.clash = False  # another guard of the console has the same base label

    @property
    def label(self) -> str:
        """What the console calls it: the operator's name, else its host, else its number until it says; with
        its number after it if another guard of the console has the same name (two guards on one host)."""
        base = self.base_label
        return f"{base} #{self.number + 1}" if self.clash else base

    @property
    def base_label(self) -> str:
        if self.name:
            return self.name
        if self.stats is not None and self.stats.host:
            return self.stats.host
        return f"guard {self.number + 1}"

    @property
    def reachable(self) -> bool:
        return self.status in ("running", "attached")

    def set_config(self, config: ConfigFrame) -> None:
        """The config in force (from a state frame, or the reply to an edit), its values decoded once."""
        self.config = config
        self.settings, self.settings_error = None, ""
        if config.values:
            try:
                # A key this console does not know is a newer guard's: left out, the rest still shown.
                self.settings = Config.from_mapping({k: v for k, v in config.values.items() if k in KEYS})
            except ConfigError as exc:
                self.settings_error = str(exc)

    @property
    def values(self) -> dict[str, Any]:
        """The config in force as the patch layer spells it (camelCase keys, every one): what the config form
        edits. Built from the decoded settings; empty until the guard sent values this console can read."""
        return self.settings.to_mapping() if self.settings is not None else {}

    @property
    def exempt(self) -> tuple[str, ...]:
        return self.settings.exempt if self.settings is not None else ()

    @property
    def paused(self) -> bool:
        return self.stats is not None and self.stats.paused

    @property
    def harnesses(self) -> dict[str, int]:
        return dict(self.stats.harnesses) if self.stats is not None else {}


class ConsoleState:
    """Everything the screen shows, updated from the guards' state frames.

    One guard (`guards[0]`), or several (`fleet`): then each agent's key holds its guard's number (`agent_key`),
    and each guard has a view of its own (`guards`): counters, config, status. The properties for one guard here
    (`stats`, `config`, `guard_status`, …) are the first guard's."""

    def __init__(self, clock: Callable[[], float] = time.time, guards: list[str] | None = None) -> None:
        self.clock = clock
        self.fleet = guards is not None and len(guards) > 1
        self.guards = [ConsoleGuard(n, name) for n, name in enumerate(guards or [""])]
        self.agents: dict[str, ConsoleAgent] = {}
        self.trips: deque[TripRow] = deque(maxlen=MAX_TRIPS)  # with several guards: each `agent` is a key
        # The trips in `trips`, as (time, agent key, kind): a guard sends its recent trips to each new subscription
        # (this console's first, and again after a reconnect or a restart of the guard); one already here is not new.
        self._trip_keys: set[tuple[float, str, str]] = set()
        self.trips_seen = 0
        self.new_trips = 0  # trips since the screen last took them (for the log)
        self.version = 0  # see changed()
        self.frames = 0
        self.marked: set[str] = set()
        self.filter = ""
        self.tree = False  # agents shown under their parent session (see `shown`)
        self._sample_at = 0.0
        # The flat order, kept between frames (see `ranked_ids`): each agent's danger as last computed, the agents
        # whose row, rate or presence changed since, and the ids most dangerous first.
        self._danger: dict[str, tuple[int, float, float, int, str]] = {}
        self._dirty: set[str] = set()
        # Agents whose rate may move at the next sample: a new row since, or calls still in the sparkline. An idle
        # agent's rate is all zeros and stays so: at 10,000 mostly idle agents, `sample` visits the busy ones only.
        self._rating: set[str] = set()
        self._ranked_ids: list[str] = []
        self._ranked: list[ConsoleAgent] | None = None  # `_ranked_ids` as agents; None: to be rebuilt

    # -- input ----------------------------------------------------------------------------------

    def apply(self, frame: StateFrame, guard: int = 0) -> None:
        """Take one state frame of guard number `guard` (a full picture's part, or the changes since the last)."""
        self.frames += 1
        view = self.guards[guard]
        fleet = self.fleet
        if frame.full:
            view.full = set()
        dirty = self._dirty
        rating = self._rating
        for row in frame.agents:
            key = agent_key(guard, row.agent, fleet=fleet)
            dirty.add(key)
            rating.add(key)
            agent = self.agents.get(key)
            if agent is None:
                agent = self.agents[key] = ConsoleAgent(row.agent, row, sampled_calls=row.calls, guard=guard, key=key)
            else:
                agent.data = row
                agent.version += 1
            if view.full is not None:
                view.full.add(key)
        if view.full is not None and frame.last:
            full = view.full
            for gone in [k for k, a in self.agents.items() if a.guard == guard and k not in full]:
                self._drop(gone)  # the full picture is complete: whoever is not in it is gone
            view.full = None
        for gone in frame.gone:
            self._drop(agent_key(guard, gone, fleet=fleet))
        if frame.top_keys is not None:
            keys = list(frame.top_keys)
            view.top_keys = [replace(k, agent=agent_key(guard, k.agent, fleet=True)) for k in keys] if fleet else keys
        trips, seen = self.trips, self._trip_keys
        for trip in frame.trips:
            if fleet:
                trip = replace(trip, agent=agent_key(guard, trip.agent, fleet=True))
            key = (trip.time, trip.agent, trip.kind)
            if key in seen:
                continue
            if len(trips) == trips.maxlen:
                old = trips[0]
                seen.discard((old.time, old.agent, old.kind))
            seen.add(key)
            trips.append(trip)
            self.trips_seen += 1
            self.new_trips += 1
        if frame.stats is not None:
            named = view.base_label
            view.stats = frame.stats
            if view.base_label != named:
                self._relabel()
            view.activity.record(self.clock(), frame.stats.checks, sum(frame.stats.denies.values()))
        if frame.config is not None:
            view.set_config(frame.config)
        self.sample()
        self.changed()

    def _relabel(self) -> None:
        """Number the guards whose labels clash (the same host, no name of the operator's)."""
        labels = [view.base_label for view in self.guards]
        for view in self.guards:
            view.clash = labels.count(view.base_label) > 1

    def changed(self) -> None:
        """Something the screen shows moved: the screen redraws at its next tick only if this was called.
        Every method of this class that changes what is shown calls it; nothing else bumps `version`."""
        self.version += 1

    def _drop(self, agent: str) -> None:
        self._dirty.add(agent)
        self.agents.pop(agent, None)
        self.marked.discard(agent)

    def sample(self) -> None:
        """Close a rate period if one has passed: calls per agent and checks per second."""
        now = self.clock()
        if now - self._sample_at < RATE_PERIOD:
            return
        elapsed = now - self._sample_at if self._sample_at else RATE_PERIOD
        self._sample_at = now
        moved, agents, rating = self._dirty, self.agents, self._rating
        for agent_id in list(rating):
            agent = agents.get(agent_id)
            if agent is None:
                rating.discard(agent_id)
                continue
            calls = agent.data.calls
            rate, now_rate = agent.rate, max(0, calls - agent.sampled_calls)
            leaving = rate[0] if len(rate) == rate.maxlen else 0  # the slot that falls out
            rate.append(now_rate)
            agent.sampled_calls = calls
            if now_rate != leaving:
                moved.add(agent_id)  # its calls/s, part of its danger, changed
            elif not now_rate and not any(rate):
                rating.discard(agent_id)  # idle for the whole sparkline: nothing to move until it calls again
        for view in self.guards:
            if view.stats is not None:
                checks = view.stats.checks
                if view.sample_checks is not None:
                    view.checks_per_s = max(0, checks - view.sample_checks) / max(elapsed, 1e-6)
                view.sample_checks = checks

    def set_guard_status(self, status: GuardStatus, note: str = "", guard: int = 0) -> None:
        view = self.guards[guard]
        if (status, note) != (view.status, view.note):
            view.status, view.note = status, note
            self.changed()

    def set_config(self, config: ConfigFrame, guard: int = 0) -> None:
        """Guard `guard`'s config in force (from a state frame, or the reply to an edit), its values decoded once."""
        self.guards[guard].set_config(config)
        self.changed()

    def set_paused(self, paused: bool, guard: int = 0) -> None:
        """The guard said it is paused (or not), before its next frame does."""
        stats = self.guards[guard].stats
        if stats is not None:
            stats.paused = paused
        self.changed()

    def guard_of(self, agent: str | None) -> ConsoleGuard:
        """The guard that knows agent `agent` (a key); the first if there is no such agent."""
        found = self.agents.get(agent or "")
        return self.guards[found.guard if found is not None else 0]

    def split_key(self, agent: str) -> tuple[int, str]:
        """Agent key `agent` as (its guard's number, its own id), whether the console knows the agent or not."""
        if not self.fleet:
            return 0, agent
        number, _, agent_id = agent.partition("\x1f")
        return (int(number), agent_id) if number.isdigit() and int(number) < len(self.guards) else (0, agent)

    def name_of(self, agent: str) -> str:
        """How the screen names agent `agent` (a key): its id, and over several guards its guard's label."""
        if not self.fleet:
            return agent
        guard, agent_id = self.split_key(agent)
        return f"{agent_id}@{self.guards[guard].label}"

    def set_filter(self, text: str) -> None:
        if text != self.filter:
            self.filter = text
            self.changed()

    def set_tree(self, tree: bool) -> None:
        if tree != self.tree:
            self.tree = tree
            self.changed()

    # -- output ---------------------------------------------------------------------------------

    def ranked_ids(self) -> list[str]:
        """Every agent's id, most dangerous first (`ConsoleAgent.danger` order). Kept between calls: only the agents
        whose row, rate or presence changed since (`apply`, `sample`) get their danger again and are put back in place;
        at 10,000 agents a sort on every flush was most of the console's time. The list is shared until the order
        changes (a new list then): read it, do not change it."""
        agents, cache, dirty = self.agents, self._danger, self._dirty
        changed: list[str] = []
        gone: list[str] = []
        for i in dirty:
            agent = agents.get(i)
            if agent is None:
                if cache.pop(i, None) is not None:
                    gone.append(i)
                continue
            key = agent.danger
            if cache.get(i) != key:
                cache[i] = key
                changed.append(i)
        if dirty:
            self._ranked = None  # an agent may be a new object under the same id (gone and back)
            dirty.clear()
        if len(cache) != len(agents):  # agents put in or taken out of `agents` by hand: find them
            for i, a in agents.items():
                if i not in cache:
                    cache[i] = a.danger
                    changed.append(i)
            for i in [i for i in cache if i not in agents]:
                del cache[i]
                gone.append(i)
        if changed or gone:
            out = set(changed).union(gone)
            order = [i for i in self._ranked_ids if i not in out] if out else list(self._ranked_ids)
            if len(changed) * 8 > len(order):
                order.extend(changed)
                order.sort(key=cache.__getitem__)  # mostly in order already: few runs to merge
            else:
                for i in changed:
                    insort(order, i, key=cache.__getitem__)
            self._ranked_ids = order
            self._ranked = None
        return self._ranked_ids

    def ranked(self) -> list[ConsoleAgent]:
        """Every agent, most dangerous first: `ranked_ids` as agents (the same list until the order changes)."""
        ids = self.ranked_ids()
        if self._ranked is None:
            agents = self.agents
            self._ranked = [agents[i] for i in ids]
        return self._ranked

    def visible_agents(self) -> list[ConsoleAgent]:
        """Agents passing the filter, most dangerous first."""
        return list(self._matching(self.ranked()))

    def shown(self) -> list[ShownAgent]:
        """The agents table's rows: flat, the agents passing the filter most dangerous first; or, with `tree`,
        each root followed by its subagents (`tree_order`). In the tree the filter keeps the agents that match
        and, as context, their ancestors, so each still sits under its own parent."""
        if not self.tree:
            return [ShownAgent(a) for a in self.visible_agents()]
        if not self.filter:
            return tree_order(self.agents.values(), ranked=self.ranked())
        matched = {a.key for a in self._matching(self.agents.values())}
        keep = set(matched)
        for agent in matched:
            parent = self.agents[agent].parent_key
            while parent is not None and parent in self.agents and parent not in keep:  # stops on a cycle too
                keep.add(parent)
                parent = self.agents[parent].parent_key
        return tree_order([self.agents[a] for a in keep], context=keep - matched, ranked=self.ranked())

    def table_rows(self) -> tuple[list[str], dict[str, tuple[str, bool]]]:
        """`shown` as the agents table takes it: the ids in order, and each tree row's glyphs and context flag.
        Flat and unfiltered, the order is `ranked_ids` itself: no object per agent per frame."""
        if not self.tree and not self.filter:
            return self.ranked_ids(), {}
        shown = self.shown()
        tree = {s.agent.key: (s.glyphs, s.context) for s in shown if s.glyphs or s.context}
        return [s.agent.key for s in shown], tree

    def _matching(self, agents: Iterable[ConsoleAgent]) -> Iterable[ConsoleAgent]:
        needle = self.filter.casefold()
        if needle:
            agents = [
                a
                for a in agents
                if needle in a.id.casefold()
                or (self.fleet and needle in self.guards[a.guard].label.casefold())
                or needle in a.data.harness.casefold()
                or needle in a.data.last_tool.casefold()
                or needle in a.data.worst_tool.casefold()
                or needle in (a.data.parent or "").casefold()
            ]
        return agents

    def take_new_trips(self) -> list[TripRow]:
        n, self.new_trips = self.new_trips, 0
        if n <= 0:
            return []
        return list(self.trips)[-min(n, len(self.trips)) :]

    # -- the first guard's (the only one's, unless `fleet`) --------------------------------------------

    @property
    def stats(self) -> GuardStats | None:
        return self.guards[0].stats

    @stats.setter
    def stats(self, stats: GuardStats | None) -> None:
        self.guards[0].stats = stats

    @property
    def config(self) -> ConfigFrame:
        return self.guards[0].config

    @property
    def settings(self) -> Config | None:
        return self.guards[0].settings

    @property
    def settings_error(self) -> str:
        return self.guards[0].settings_error

    @property
    def guard_status(self) -> GuardStatus:
        return self.guards[0].status

    @property
    def guard_note(self) -> str:
        return self.guards[0].note

    @property
    def activity(self) -> Activity:
        """The first guard's; `activity_of_all` adds up every guard's."""
        return self.guards[0].activity

    @property
    def values(self) -> dict[str, Any]:
        return self.guards[0].values

    @property
    def exempt(self) -> tuple[str, ...]:
        return self.guards[0].exempt

    @property
    def paused(self) -> bool:
        return self.guards[0].paused

    # -- every guard's --------------------------------------------------------------------------------

    @property
    def checks_per_s(self) -> float:
        return sum(view.checks_per_s for view in self.guards)

    def activity_of_all(self) -> Activity:
        """Checks and denies per second of every guard together."""
        return self.guards[0].activity if not self.fleet else Activity.summed([v.activity for v in self.guards])

    @property
    def top_keys(self) -> list[KeyRow]:
        """The calls repeated most, of every guard, most repeated first (with several: each `agent` is a key)."""
        if not self.fleet:
            return self.guards[0].top_keys
        return sorted((k for view in self.guards for k in view.top_keys), key=lambda k: -k.count)

    @property
    def harnesses(self) -> dict[str, int]:
        """The harness connections of every guard, by harness."""
        out: dict[str, int] = {}
        for view in self.guards:
            for name, count in view.harnesses.items():
                out[name] = out.get(name, 0) + count
        return out

    def toggle_mark(self, agent: str) -> bool:
        """Mark or unmark `agent`; whether it is marked now."""
        if agent in self.marked:
            self.marked.discard(agent)
        elif agent in self.agents:
            self.marked.add(agent)
        self.changed()
        return agent in self.marked

    def clear_marks(self) -> None:
        if self.marked:
            self.marked.clear()
            self.changed()


class ActivitySecond(NamedTuple):
    """The guard's checks and denies in one second."""

    checks: int
    denies: int


_NONE = ActivitySecond(0, 0)


class Activity:
    """Checks and denies per second over the last `ACTIVITY_SECONDS`, from the guard's cumulative counters.

    A frame's counters minus the last frame's land in the second of the state's clock the frame came in. The
    first frame is a baseline (its counts are the guard's whole life, not a second's); a counter that went
    down is a new guard, counting from zero again; seconds without frames are zeros. Bounded: one `ActivitySecond` a
    second, `ACTIVITY_SECONDS` of them."""

    def __init__(self, seconds: int = ACTIVITY_SECONDS) -> None:
        self.tallies: deque[ActivitySecond] = deque(maxlen=seconds)
        self.second: int | None = None  # the second of the newest tally
        self._counters: ActivitySecond | None = None  # the cumulative counters last seen

    @classmethod
    def summed(cls, parts: list[Activity]) -> Activity:
        """Several guards' activity as one: each second's checks and denies added up."""
        out = cls()
        newest = max((p.second for p in parts if p.second is not None), default=None)
        if newest is None:
            return out
        span = out.tallies.maxlen or ACTIVITY_SECONDS
        totals = [[0, 0] for _ in range(span)]
        for part in parts:
            for tally, total in zip(part.last(newest + 1, span), totals, strict=True):
                total[0] += tally.checks
                total[1] += tally.denies
        out.tallies.extend(ActivitySecond(c, d) for c, d in totals)
        out.second = newest
        return out

    def record(self, now: float, checks: int, denies: int) -> None:
        """A frame's cumulative counters, at `now` (the state's clock)."""
        last, self._counters = self._counters, ActivitySecond(checks, denies)
        if last is None:
            return
        if checks < last.checks or denies < last.denies:  # a new guard: it counted these since it started
            delta = ActivitySecond(checks, denies)
        else:
            delta = ActivitySecond(checks - last.checks, denies - last.denies)
        second = int(now)
        tallies = self.tallies
        if self.second is None or second > self.second:
            gap = 0 if self.second is None else min(second - self.second - 1, tallies.maxlen or 0)
            tallies.extend([_NONE] * gap)
            tallies.append(delta)
            self.second = second
        elif delta != _NONE:  # this second again (or the clock stepped back): add to the newest
            newest = tallies[-1]
            tallies[-1] = ActivitySecond(newest.checks + delta.checks, newest.denies + delta.denies)

    def last(self, now: float, seconds: int = ACTIVITY_SECONDS) -> list[ActivitySecond]:
        """The `seconds` complete seconds before `now`, oldest first (the second `now` is in is still filling)."""
        end = int(now) - 1
        out = [_NONE] * seconds
        if self.second is None:
            return out
        first = self.second - len(self.tallies) + 1  # the second of the oldest tally
        start = end - seconds + 1
        for i, tally in enumerate(self.tallies):
            at = first + i - start
            if 0 <= at < seconds:
                out[at] = tally
        return out
