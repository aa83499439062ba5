"""The guard engine: per-agent windows of call keys, the agents' lifetimes, and the rules run in order.
Pure: no I/O, no clock."""

from __future__ import annotations

import itertools
from array import array
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from heapq import heapify, heappop, heappush, heapreplace
from typing import Any, NamedTuple

import orjson

from breaker import rules as steps
from breaker.config import AGENT_LIMITS, Config
from breaker.keys import Judged, call_digest, preview, tool_class_name
from breaker.normalise import COMMANDS, REWORDED, SPELLED, may_write, paced, reworded_of, wait_tool
from breaker.records import AgentRow, KeyRow
from breaker.rules import DENY_KINDS, Hit, Kind, Outcome, StepInput, ToolRules, Verdict, fill

__all__ = [
    "DENY_KINDS",
    "AgentState",
    "Guard",
    "GuardView",
    "Kind",
    "Outcome",
    "Pending",
    "Verdict",
]

_SORT = orjson.OPT_SORT_KEYS
_dumps = orjson.dumps
_TOOL_CACHE_MAX = 4096  # tool names seen are few; the cap only guards against a flood of junk names
_PENDING_MAX = 64  # call ids remembered per agent while their results are awaited
_REASON_CACHE_MAX = 4096
# Which agents a flood of new ids may push out first. Tier 0: no deny yet and fewer than _NEW_CALLS
# calls (what a flood of fresh ids is made of); tier 1: no deny yet; tier 2: denied at least once (a
# trip, a cap). The least recently active agent of the lowest tier that holds one goes first.
_NEW_CALLS = 10
INTERRUPTED_TEXT = "Circuit breaker (interrupted): the operator stopped this agent; do not call any more tools."
_NO_RESULT = -1  # a slot whose key has no result yet (CPython's hash() never returns -1)
_ALIKE = 0xFFFF  # the unchanged rule's mark of a slot: (writes counted at its last result) << 16 | results alike
# Bound once (the hot path): CPython 3.11 compiles a method call on a name imported with `from … import` as an
# attribute load and a call, which builds a bound method object each time; a bound method kept here is a call.
_commands_apart = COMMANDS.isdisjoint
_spelled_apart = SPELLED.isdisjoint
_reworded = REWORDED.get
# An agent's last judged call, as (outcome, rule): one shared pair per rule, so recording it allocates nothing.
_DENIED: dict[str, tuple[Outcome, Kind]] = {kind: ("deny", kind) for kind in DENY_KINDS}
_WARNED: dict[str, tuple[Outcome, Kind]] = {kind: ("warn", kind) for kind in DENY_KINDS}


class Pending(NamedTuple):
    """A call remembered until its result comes: what the result needs of it."""

    key: int | None  # its digest (None: args it could not key)
    warning: str  # the warning its check gave ("" if none), for harnesses that show it with the result
    rules: ToolRules  # its tool's rules (`progress`, `unchanged_limit`)
    tool: str
    writes: bool = False  # it may write (the unchanged rule counts it once it ran: its result came)


def _warning(texts: dict[tuple[Hit, str, str], str], message: str, tool: str, hit: Hit, agent: str) -> str:
    """A warning's text for the model, kept in `texts`: filled once per (hit, tool, agent), as a deny's reason is."""
    cache_key = (hit, tool, agent)
    text = texts.get(cache_key)
    if text is None:
        if len(texts) >= _REASON_CACHE_MAX:
            texts.clear()
        text = texts[cache_key] = fill(message, tool, hit.tally, hit.limit, hit.rule, agent, hit.how)
    return text


def _writes(rules: ToolRules | None, key: int | None, tool: str | None, args: Any) -> bool:
    """A call named by its tool and args, whose check is not remembered, may write (the unchanged rule's count)."""
    return rules is not None and (rules.writes or (rules.runs and may_write(key, tool, args)))  # type: ignore[arg-type]


_NOT_JUDGED = Verdict(True)


def _without(args: dict[str, Any], ignore: frozenset[str]) -> dict[str, Any]:
    """The args but the ignored ones (a function of its own: a comprehension in `Guard.check` would make `ignore` a
    cell built on every check)."""
    return {k: v for k, v in args.items() if k not in ignore}


def _given(judged: Judged | None, unjudgeable: bool) -> int | None:
    """The key of a call the guard does not key itself: none for unjudgeable args, else the judge's (`judged`)."""
    return None if unjudgeable or judged is None else judged.key


_new_verdict = tuple.__new__  # a Verdict from all its fields at once: half the cost of Verdict(...) on the hot path


def _last(calls: list[int | None] | None, period: int) -> list[int | None]:
    """The cycle rule's last `period` calls tried, exactly that many: None (a call that matches none) stands for
    those before the first, so that a call adds one and drops one without asking how many there are."""
    last = list(calls or ())[-period:]
    return [None] * (period - len(last)) + last


def _allowed(seen: int, limit: int, key: int | None) -> Verdict:
    """The verdict of an allowed call no rule warned of, for an agent with its own limits or a count past those
    its tool's rules hold a shared verdict for (`ToolRules.allowed`)."""
    return _new_verdict(Verdict, (True, None, "", seen + 1, limit, False, True, key, "", None))


class _Agent:
    """One agent's state: its window and its lifetime tallies.

    The window is a ring of keys (oldest first) and a count per key. Each key in the window holds a
    slot: `index` maps the key to it, `tally[slot]` is its count and `results[slot]` a hash of its
    last result's digest — numbers in flat lists and arrays rather than a dict per fact, so that a
    remembered call costs its ring entry, one dict entry and a few machine words."""

    __slots__ = (
        "alike",
        "at_top",
        "before",
        "calls",
        "clean",
        "cycles",
        "cycling",
        "denies",
        "free",
        "index",
        "last",
        "last_key",
        "last_seen",
        "last_tool",
        "limits",
        "pending",
        "period",
        "placed",
        "polling",
        "polls",
        "previews",
        "recent",
        "results",
        "reword_first",
        "reword_key",
        "reword_mixed",
        "reword_run",
        "ring",
        "run",
        "seq",
        "stall_digest",
        "stall_n",
        "stall_tool",
        "taint",
        "tally",
        "tier",
        "tool_calls",
        "top",
        "warns",
        "wrote",
    )

    def __init__(self) -> None:
        self.ring: deque[int | None] = deque()  # None = a call the guard could not judge
        self.index: dict[int, int] = {}  # key -> its slot
        self.tally: list[int] = []  # slot -> the key's occurrences in the window (0: a free slot)
        self.free: list[int] = []  # slots no key holds
        self.results: array[int] | None = None  # progress: slot -> a hash of its key's last result (_NO_RESULT)
        self.previews: dict[int, tuple[str, str]] = {}  # only keys seen at least twice
        self.top = 0  # its highest count (>= 2), 0 if no key repeats (_TopKeys keeps the agents by it)
        self.at_top = 0  # how many of its keys are at it
        self.calls = 0  # allowed, counted calls over the agent's life
        self.denies: dict[str, int] = {}  # deny kind -> how many of its calls were denied
        self.warns: dict[str, int] = {}  # rule -> how many of its calls were allowed with a warning
        self.last: tuple[Outcome, Kind] | None = None  # how its last judged call went, if warned or denied
        self.last_tool = ""
        self.last_seen: float | None = None
        # the repeat rule: the key of its last allowed call, and how many times in a row it came
        self.last_key: int | None = None
        self.run = 0
        # the cycle rule, for each period p: how many calls in a row repeated the call p back
        self.cycles: list[int] | None = None
        # some entry of cycles is not 0, or the rule's lists are not made yet: its next call takes the rule's whole
        # step (_Agent.cycle), not the check's inline one (so does a call after a cyclePeriod change: `period`)
        self.cycling = True
        self.recent: list[int | None] | None = None  # the last `period` calls it tried, for the cycle rule
        # every key of `recent` was kept in the window as itself when it was tried, and (the window being at least
        # cyclePeriod long) is there still: a key new to the window is none of them, with no list to search. A call
        # tried and not kept as itself (a deny, a poll) spoils that for the next `taint` new keys (_Agent.recheck).
        self.clean = False
        self.taint = 0
        self.period = 0  # the cyclePeriod `recent` and `cycles` were made for
        # progress: per key, its occurrences from before its result last changed
        self.before: dict[int, int] | None = None
        # the unchanged rule: how many calls that may write ran (their results came), and per slot a mark of its
        # key's last result (_ALIKE): the count then, and how many of its results in a row were alike with
        # nothing written between them (-1: no result yet)
        self.wrote = 0
        self.alike: array[int] | None = None
        self.pending: OrderedDict[Any, Pending] | None = None  # call id (or an anonymous one) -> the call
        self.tool_calls: dict[str, int] | None = None  # per-tool caps: calls per tool
        # the stall rule: the tool of its last calls in a row, the result they got, and how many got it
        self.stall_tool: str | None = None
        self.stall_digest: str | None = None
        self.stall_n = 0
        self.limits: dict[str, int] | None = None  # the operator's override (Guard._limits holds it)
        self.polling = False  # the cycle its calls go round has a wait in it: a poll, not a loop
        self.polls = 0  # polls in a row since a result last changed (breaker/normalise.py: paced)
        # the reworded rule: the key in other words of its last tried calls, how many in a row had it, the first
        # one's exact key, and whether another wording came since
        self.reword_key: int | None = None
        self.reword_run = 0
        self.reword_first: int | None = None
        self.reword_mixed = False
        self.tier = 0  # its eviction tier (_NEW_CALLS)
        self.seq = 0  # when it was last active (_Recency's ticks): larger is more recent
        self.placed = 0  # the `seq` of its entry in its tier's heap (_Recency)

    def count(self, key: int) -> int:
        """The key's occurrences in the window."""
        slot = self.index.get(key)
        return 0 if slot is None else self.tally[slot]

    def take_slot(self, key: int) -> int:
        """A slot for a key new to the window, counted once."""
        free = self.free
        if free:
            slot = free.pop()
            self.tally[slot] = 1
        else:
            slot = len(self.tally)
            self.tally.append(1)
        self.index[key] = slot
        return slot

    def leave(self, key: int, slot: int) -> None:
        """The key's last occurrence left the window: its slot and what progress kept of it go."""
        del self.index[key]
        self.tally[slot] = 0
        self.free.append(slot)
        results = self.results
        if results is not None and slot < len(results):
            results[slot] = _NO_RESULT
            alike = self.alike
            if alike is not None and slot < len(alike):
                alike[slot] = -1
        if self.before:
            self.before.pop(key, None)

    def result_of(self, slot: int, seen: int) -> int:
        """Record a hash of the slot's newest result; the one it had before (_NO_RESULT: none)."""
        results = self.results
        if results is None:
            results = self.results = array("q")
        if len(results) <= slot:
            results.frombytes(b"\xff" * 8 * (len(self.tally) - len(results)))  # _NO_RESULT, in two's complement
        previous = results[slot]
        results[slot] = seen
        return previous

    def unchanged(self, slot: int, same: bool, writes: bool) -> None:
        """The unchanged rule: a result of the slot's key came, `same` as its last one or not, of a call that
        `writes` or not. Its results in a row are alike while each is the same as the one before and no call
        that may write ran between them; a call that may write has none (it may change its own next answer)."""
        alike = self.alike
        if writes:  # no mark (-1), and no array for an agent that only writes: its memory is a word per slot less
            self.wrote += 1
            if alike is not None and slot < len(alike):
                alike[slot] = -1
            return
        if alike is None:
            alike = self.alike = array("q")
        if len(alike) <= slot:
            alike.frombytes(b"\xff" * 8 * (len(self.tally) - len(alike)))  # -1: no result yet
        mark = alike[slot]
        run = (mark & _ALIKE) + 1 if same and mark >= 0 and mark >> 16 == self.wrote else 1
        alike[slot] = self.wrote << 16 | min(run, _ALIKE)

    def stall_result(self, tool: str | None, digest: str, writes: bool) -> bool:
        """The stall rule, for a result of a call of `tool`: one more call of it in a row with this result? False if it
        is not the tool of the run. A call that `writes` answers with what it did (often nothing): a new start."""
        if tool is None or tool != self.stall_tool:
            return False
        if writes:
            self.stall_digest, self.stall_n = None, 0
        elif digest == self.stall_digest:
            self.stall_n += 1
        else:
            self.stall_digest, self.stall_n = digest, 1
        return True

    def polled(self, key: int) -> None:
        """The unchanged rule does not count polls: the key's results alike so far count no more."""
        alike = self.alike
        if alike is not None and (slot := self.index[key]) < len(alike):
            alike[slot] = -1

    def unchanged_run(self, slot: int | None) -> int:
        """The slot key's last results in a row that were alike, if nothing that may write ran since (else 0)."""
        alike = self.alike
        if alike is None or slot is None or slot >= len(alike):
            return 0
        mark = alike[slot]
        return mark & _ALIKE if mark >= 0 and mark >> 16 == self.wrote else 0

    def reword(self, key: int, norm: int | None) -> int:
        """The reworded rule, for a call whose key in other words is `norm`: one more tried call (polls aside) in a
        row that says the same in other words? Once two wordings came, how many came before this one (else 0); the
        same words only, again and again, are the repeat rule's."""
        if norm is None or norm != self.reword_key:  # a first wording (four stores: no tuple built)
            self.reword_key = norm
            self.reword_run = 1
            self.reword_first = key
            self.reword_mixed = False
            return 0
        if key != self.reword_first:
            self.reword_mixed = True
        run = self.reword_run
        self.reword_run = run + 1
        return run if self.reword_mixed else 0

    def grow(self) -> int:
        """A new slot at the end (its tally 0, for the caller to set)."""
        tally = self.tally
        tally.append(0)
        return len(tally) - 1

    def cycled(
        self,
        rules: ToolRules,
        key: int | None,
        period: int,
        no_cycles: list[int],
        tool: str,
        args: Any,
        now: float | None,
    ) -> tuple[int, int]:
        """The cycle rule's step for a call it has just tried (or one of a new cyclePeriod): the cycle it continues,
        (0, 0) for none or for a cycle through a wait (check, sleep 30, check…: a poll, not a loop)."""
        cycle_len, cycle_p = self.cycle(key, period, no_cycles)
        if not cycle_p:
            self.polling = False
        elif rules.poll_limit and (self.polling or paced(rules.poll_gap, tool, args, now, self.last_seen, key)):  # type: ignore[arg-type]
            self.polling = True
            return 0, 0
        return cycle_len, cycle_p

    def recheck(self, narrow: bool) -> bool:
        """`clean` again? Not while the window is `narrow` (shorter than cyclePeriod: a key kept can leave it while
        still among the last calls), nor for the first `taint` new keys after a call not kept as itself: that many
        calls tried (at least) take it out of the last ones."""
        if narrow:
            return False
        if self.taint:
            self.taint -= 1
            return False
        self.clean = True
        return True

    def spoil(self, period: int) -> None:
        """A call was tried and not kept in the window as itself (a deny, a poll): `clean` no longer holds until it
        is out of the last `period` calls tried."""
        self.clean = False
        self.taint = period

    def cycle(self, key: int | None, period: int, no_cycles: list[int]) -> tuple[int, int]:
        """Move the cycle rule on by one tried call: the longest cycle this call continues, as
        (how many calls in a row follow it including this one, its period), or (0, 0).

        `self.recent` holds the last cyclePeriod calls tried; `self.cycles[p]` how many calls in a row
        repeated the call p before them. A block of one call repeated (A-A-A) is the repeat rule's,
        not a cycle of any period."""
        top = period
        recent = self.recent
        if recent is None or self.period != top:
            recent = self.recent = _last(recent, top)
            self.period = top
        cycles = self.cycles
        if cycles is None or len(cycles) != top + 1:
            cycles = self.cycles = [0] * (top + 1)
        best_len = best_p = 0
        self.cycling = False
        if key is None or key not in recent:
            cycles[:] = no_cycles
        else:
            size = len(recent)
            same = 0  # how many of the last calls are this one
            while same < size and recent[-1 - same] == key:
                same += 1
            for p in range(2, top + 1):
                if p <= size and recent[-p] == key:
                    run = cycles[p] = cycles[p] + 1
                    self.cycling = True
                    # the cycle with the most rounds (length / period; the shorter period on a tie)
                    if same < p - 1 and (not best_p or (run + p) * best_p > best_len * p):
                        best_len, best_p = run + p, p
                else:
                    cycles[p] = 0
        recent.append(key)
        if len(recent) > top:
            del recent[0]
        return best_len, best_p

    def came(self, key: int | None, slot: int | None, digest: str, rules: ToolRules | None, writes: bool) -> None:
        """A result of the key in `slot` came (None: a call it could not judge, or gone from the window), of a call
        of a tool with `rules` that `writes` or not (the unchanged rule counts it)."""
        if slot is None or key is None:
            self.wrote += writes
        elif rules is not None and (rules.progress or rules.unchanged_limit):
            self.progressed(key, slot, digest, rules.progress, rules.unchanged_limit > 0, writes)
        else:
            self.wrote += writes

    def progressed(
        self, key: int, slot: int, digest: str, progress: bool = True, unchanged: bool = False, writes: bool = False
    ) -> None:
        """A result of the key came (of a call that `writes` or not). Under `progress`, when it differs from the
        key's last one, the call made progress: it and the identical calls before it count no more. Under the
        unchanged rule, it is one more result alike in a row, or the first."""
        seen = hash(digest)  # a hash is all a comparison needs, in a machine word
        previous = self.result_of(slot, seen)
        if unchanged:
            self.unchanged(slot, previous == seen, writes)
        elif writes:
            self.wrote += 1
        if progress and previous != _NO_RESULT and previous != seen:
            before = self.before if self.before is not None else {}
            self.before = before
            before[key] = self.tally[slot]
            self.polls = 0  # the polls' answer moved: they have their limit again
            if self.last_key == key:
                self.run = 0
            if self.reword_key is not None:  # a new result: the wordings before it count no more
                self.reword_run = 0
            self.cycles = None  # a cycle through a call whose result changed is making progress
            self.cycling = self.recent is None  # (no lists yet: the rule was off until now)

    def evict(self, agent: str, old: int | None, top_keys: _TopKeys) -> None:
        """A key leaves the window: one fewer occurrence (and maybe a lower highest count for the top keys)."""
        if old is None:
            return
        slot = self.index[old]
        n = self.tally[slot] - 1
        if not n:
            self.leave(old, slot)
            return
        self.tally[slot] = n
        before = self.before
        if before and old in before:  # the oldest occurrences go first: those from before a change
            if before[old] > 1:
                before[old] -= 1
            else:
                del before[old]
        if n == 1:
            del self.previews[old]
        if n + 1 == self.top:  # it was at the agent's highest count
            self.at_top -= 1
            if not self.at_top:
                top_keys.recount(agent, self)

    def repeated(
        self, agent: str, tool: str, args: Any, judged: Judged | None, key: int, slot: int, n: int, top_keys: _TopKeys
    ) -> None:
        """An allowed call of a key already in the window (`n` times, in `slot`): one more."""
        self.tally[slot] = n1 = n + 1
        if n == 1:
            self.previews[key] = (tool, preview(tool, args) if judged is None else judged.preview)
        if n1 >= self.top:  # at or above the agent's highest count: the top keys' bookkeeping
            if n1 > self.top:
                top_keys.set(agent, self, n1, 1)
            else:
                self.at_top += 1

    def count_tool(self, name: str) -> None:
        """One more call of the tool of class `name`, for a per-tool cap."""
        if self.tool_calls is None:
            self.tool_calls = {}
        self.tool_calls[name] = self.tool_calls.get(name, 0) + 1

    def remember(self, call_id: str | int | None, call: Pending, anon: Iterator[int]) -> None:
        """Keep a call until its result comes (the last _PENDING_MAX such calls): the result finds the call by
        its id, and a harness that can show text only with the result gets the warning."""
        pending = self.pending
        if pending is None:
            pending = self.pending = OrderedDict()
        cid: Any = (None, next(anon)) if call_id is None else call_id
        pending[cid] = call
        if len(pending) > _PENDING_MAX:
            pending.popitem(last=False)

    def export(self, agent: str) -> AgentState:
        """Its state as plain values (the limits are the guard's to add)."""
        index, results = self.index, self.results
        wording = self.reword_key is not None
        return AgentState(
            agent=agent,
            calls=self.calls,
            denies=dict(self.denies),
            ring=list(self.ring),
            previews=dict(self.previews),
            last_tool=self.last_tool,
            last_seen=self.last_seen,
            warns=dict(self.warns),
            last=self.last,
            last_key=self.last_key,
            run=self.run if self.last_key is not None else 0,  # (a run of calls it could not key counts for nothing)
            cycles=list(self.cycles) if self.cycles is not None else None,
            recent=list(self.recent) if self.recent is not None else None,
            before=dict(self.before) if self.before is not None else None,
            results=(
                {k: results[s] for k, s in index.items() if s < len(results) and results[s] != _NO_RESULT}
                if results is not None
                else None
            ),
            wrote=self.wrote,
            alike=(  # None when no key holds a mark (as the state file gives it back)
                {k: alike[s] for k, s in index.items() if s < len(alike) and alike[s] >= 0} or None
                if (alike := self.alike) is not None
                else None
            ),
            tool_calls=dict(self.tool_calls) if self.tool_calls is not None else None,
            stall=(self.stall_tool, self.stall_digest, self.stall_n) if self.stall_tool is not None else None,
            polls=self.polls,
            polling=self.polling,
            # the reworded rule's run, only while its last call had a key in other words: otherwise the next call
            # starts a run whatever it is, and what else it holds counts for nothing
            reword_key=self.reword_key,
            reword_run=self.reword_run if wording else 0,
            reword_first=self.reword_first if wording else None,
            reword_mixed=self.reword_mixed and wording,
            limits=dict(self.limits) if self.limits else None,
        )

    @staticmethod
    def restored(state: AgentState) -> _Agent:
        """An agent with the tallies of `state`, without its window (restore_window adds it)."""
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
        return st

    def restore_window(self, state: AgentState, period: int) -> None:
        """Take the window and the rules' tallies from `state` (digests this process's hash key made)."""
        self.last_key, self.run = state.last_key, state.run
        self.cycles = list(state.cycles) if state.cycles is not None else None
        self.recent = _last(state.recent, period) if state.recent is not None else None
        self.spoil(period)  # (what its last calls were kept as is not saved)
        self.cycling = any(self.cycles or ()) or self.recent is None
        self.period = period
        self.before = dict(state.before) if state.before is not None else None
        # polls and wordings in a row: keyed by digests too, so they come back with the window or not at all
        self.polls, self.polling = state.polls, state.polling
        self.reword_key, self.reword_run = state.reword_key, state.reword_run
        self.reword_first, self.reword_mixed = state.reword_first, state.reword_mixed
        self.ring = deque(state.ring)
        index, tally = self.index, self.tally
        for key in state.ring:
            if key is not None:
                slot = index.get(key)
                if slot is None:
                    self.take_slot(key)
                else:
                    tally[slot] += 1
        if state.results is not None:
            self.results = array("q")
            for key, seen in state.results.items():
                if key in index:
                    self.result_of(index[key], seen)
        self.wrote = state.wrote
        if state.alike is not None:
            alike = self.alike = array("q")
            for key, mark in state.alike.items():
                if key in index:
                    slot = index[key]
                    if len(alike) <= slot:
                        alike.frombytes(b"\xff" * 8 * (len(tally) - len(alike)))
                    alike[slot] = mark
        for key, slot in index.items():
            if tally[slot] >= 2:
                self.previews[key] = state.previews.get(key, ("", ""))


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

    def export(self, agent: str, limits: dict[str, int] | None) -> AgentState:
        return AgentState(
            agent=agent,
            calls=self.calls,
            denies=dict(self.denies),
            ring=[],
            previews={},
            last_tool=self.last_tool,
            last_seen=self.last_seen,
            warns=dict(self.warns),
            tool_calls=dict(self.tool_calls) if self.tool_calls is not None else None,
            limits=dict(limits) if limits is not None else None,
            retired=True,
        )


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


class _TopKeys:
    """The repeated keys of every agent, by count (>= 2).

    Each agent keeps its highest count (`_Agent.top`) and how many of its keys are at it (`_Agent.at_top`),
    kept as calls happen at the cost of a comparison; this keeps the agents by their highest count, touched
    only when an agent's highest count moves. The top keys are read from the highest count down, over the
    agents whose highest count is at least that high, each agent's keys counted once when it is reached: the
    cost is the keys of the agents reached, never the number of agents."""

    __slots__ = ("by_top", "top")

    def __init__(self) -> None:
        self.by_top: dict[int, dict[str, _Agent]] = {}  # an agent's highest count -> the agents at it
        self.top = 0  # no count above this holds an agent

    def set(self, agent: str, st: _Agent, top: int, at_top: int) -> None:
        """The agent's highest count is now `top` (0: no key of it repeats), with `at_top` keys at it."""
        by_top = self.by_top
        if st.top:
            del by_top[st.top][agent]
        st.top, st.at_top = top, at_top
        if top:
            bucket = by_top.get(top)
            if bucket is None:
                bucket = by_top[top] = {}
            bucket[agent] = st
            if top > self.top:
                self.top = top

    def recount(self, agent: str, st: _Agent) -> None:
        """Count the agent's highest count again from its window (its keys at the old one all left it)."""
        best = at = 0
        count = st.count
        for key in st.previews:
            n = count(key)
            if n > best:
                best, at = n, 1
            elif n == best:
                at += 1
        if best < 2:
            best = at = 0
        self.set(agent, st, best, at)

    def drop(self, agent: str, st: _Agent) -> None:
        """The agent's window goes: its keys leave the top keys."""
        if st.top:
            self.set(agent, st, 0, 0)

    def read(self, top: int) -> list[tuple[str, int, int]]:
        """(agent, key, count) of the `top` most repeated keys, most first. Within a count: the agents with the
        higher highest counts first, then as they reached their highest count; an agent's keys as they were
        first repeated."""
        out: list[tuple[str, int, int]] = []
        by_top = self.by_top
        reached: list[tuple[str, dict[int, list[int]]]] = []  # agents whose highest count is above n: by count
        n = self.top
        while n >= 2:
            for agent, keys in reached:
                for key in keys.get(n, ()):
                    out.append((agent, key, n))
                    if len(out) >= top:
                        return out
            joined = by_top.get(n)
            if joined:
                for agent, st in joined.items():
                    keys = {}
                    count = st.count
                    for key in st.previews:
                        keys.setdefault(count(key), []).append(key)
                    reached.append((agent, keys))
                    for key in keys[n]:
                        out.append((agent, key, n))
                        if len(out) >= top:
                            return out
            elif n == self.top:
                by_top.pop(n, None)
                self.top = n - 1  # nothing this high any more
            n -= 1
        return out


class _Recency:
    """The agents the guard holds by eviction tier (see _NEW_CALLS), to find the least recently active of the
    lowest tier — kept lazily, so that a check only stamps its agent (`_Agent.seq`, one tick).

    Each tier is a heap of (stamp, agent). An entry is the agent's own if the agent is still held, in that
    tier, and the stamp is its `placed`; any other entry is stale and is dropped when it comes up. The agent
    whose entry comes up is the least recently active of its tier unless it was active since it was placed
    (its `seq` is newer): it is then placed again at its `seq`, and the next entry comes up — so the order
    found is exact, and each check pays nothing for it."""

    __slots__ = ("agents", "heaps", "ticks")

    def __init__(self, agents: dict[str, _Agent]) -> None:
        self.agents = agents
        self.heaps: tuple[list[tuple[int, str]], ...] = ([], [], [])
        self.ticks = itertools.count(1)

    def place(self, agent: str, st: _Agent, tier: int) -> None:
        """The agent is in `tier` now, as the most recently active."""
        st.tier = tier
        st.seq = st.placed = seq = next(self.ticks)
        heap = self.heaps[tier]
        heappush(heap, (seq, agent))
        if len(heap) > 2 * len(self.agents) + 64:  # stale entries of agents gone or moved: drop them
            heap[:] = [(o.placed, a) for a, o in self.agents.items() if o.tier == tier]
            heapify(heap)

    def victim(self) -> str:
        """The agent to let go first: the least recently active of the lowest tier that holds any."""
        agents = self.agents
        for tier, heap in enumerate(self.heaps):
            while heap:
                placed, agent = heap[0]
                st = agents.get(agent)
                if st is None or st.tier != tier or st.placed != placed:
                    heappop(heap)
                elif st.seq != placed:  # active since: its place is further on
                    st.placed = st.seq
                    heapreplace(heap, (st.seq, agent))
                else:
                    return agent
        raise KeyError("no agent to let go")

    def order(self) -> list[str]:
        """The agents, least recently active first."""
        agents = self.agents
        return sorted(agents, key=lambda agent: agents[agent].seq)


class _Roster:
    """The agents the guard holds, least recently active first, and the ledgers of those that went: each bounded
    by maxAgents, letting go of the least valuable first (_NEW_CALLS)."""

    __slots__ = ("agents", "limits", "max_agents", "recency", "removed", "retired", "retired_tiers", "top_keys")

    def __init__(self, top_keys: _TopKeys, limits: dict[str, dict[str, int]], removed: Callable[[str], Any]) -> None:
        self.agents: dict[str, _Agent] = {}  # as they came (their order of activity: `recency`)
        self.recency = _Recency(self.agents)  # the same agents, by eviction tier and activity
        self.retired: OrderedDict[str, _Ledger] = OrderedDict()  # ended or evicted agents' counts
        self.retired_tiers = _Tiers()
        self.top_keys = top_keys
        self.limits = limits  # the guard's: the operator's per-agent limits
        self.max_agents = 0
        self.removed = removed  # told the id of an agent whose state, or then its ledger, went away

    def admit(self, agent: str) -> _Agent:
        """A new (or returning) agent's state: its ledger's counts if it had one; past maxAgents one goes."""
        led = self.retired.pop(agent, None) if self.retired else None
        if led is None:
            st = _Agent()
        else:
            self.retired_tiers.remove(agent, led.tier)
            st = led.revive()
        if self.limits:
            st.limits = self.limits.get(agent)
        if len(self.agents) >= self.max_agents:  # room first: the newcomer itself is never the one to go
            self.retire(self.recency.victim())
        self.agents[agent] = st
        self.recency.place(agent, st, st.tier)
        return st

    def reset(self, agent: str) -> bool:
        """The agent starts again as a new one (its ledger too); True if it was tracked."""
        led = self.retired.pop(agent, None)
        if led is not None:
            self.retired_tiers.remove(agent, led.tier)
        st = self.agents.get(agent)
        if st is None:
            return led is not None
        self.top_keys.drop(agent, st)
        self.agents[agent] = fresh = _Agent()
        self.recency.place(agent, fresh, 0)  # the operator just acted on it: the most recent
        return True

    def restore(self, state: AgentState, period: int) -> None:
        """Put an agent back as exported, as the most recently active; its window too unless `period` is 0
        (the cycle period its rule's tallies are for)."""
        agent = state.agent
        if agent in self.agents:
            self.retire(agent)
        if agent in self.retired:
            self.forget(agent)
        st = _Agent.restored(state)
        if state.retired:
            self.retired[agent] = _Ledger(st)
            self.retired_tiers.add(agent, st.tier)
            self.bound()
            return
        st.limits = self.limits.get(agent)
        if period:  # what follows is keyed by digests
            st.restore_window(state, period)
            if st.previews:
                self.top_keys.recount(agent, st)
        self.agents[agent] = st
        self.recency.place(agent, st, st.tier)
        self.bound()

    def promote(self, agent: str, st: _Agent) -> None:
        """A new agent made _NEW_CALLS calls without a deny: tier 1."""
        self.recency.place(agent, st, 1)

    def interrupted_call(self, agent: str, st: _Agent, tool: str, now: float | None) -> int:
        """The agent called under an operator interrupt (denied): the most recent, and tier 2; its calls so far."""
        self.recency.place(agent, st, 2)
        st.denies["interrupted"] = st.denies.get("interrupted", 0) + 1
        st.last_tool = tool
        st.last_seen = now
        return st.calls

    def bound(self) -> None:
        """Keep the agents and the ledgers within maxAgents (after a config change or a restore)."""
        while len(self.agents) > self.max_agents:
            self.retire(self.recency.victim())
        while len(self.retired) > self.max_agents:
            self.forget(self.retired_tiers.victim())

    def retire(self, agent: str) -> None:
        """Let an agent's window go; keep its counts in the ledger (the least valuable ledger goes past maxAgents)."""
        st = self.agents.pop(agent)  # its heap entry is stale from now on
        self.top_keys.drop(agent, st)
        self.retired[agent] = _Ledger(st)
        self.retired_tiers.add(agent, st.tier)
        self.removed(agent)
        if len(self.retired) > self.max_agents:
            self.forget(self.retired_tiers.victim())

    def forget(self, agent: str) -> None:
        led = self.retired.pop(agent)
        self.retired_tiers.remove(agent, led.tier)
        self.removed(agent)


class _Interrupt:
    """An operator's interrupt: kept apart from the agents, so evicting an idle agent never lifts it."""

    __slots__ = ("denies", "reason")

    def __init__(self, reason: str, denies: int = 0) -> None:
        self.reason = reason
        self.denies = denies


class _Operator:
    """What only the operator sets: interrupts and per-agent limits. Kept apart from the agents, so that an
    agent's end or eviction never lifts them; each bounded by maxAgents, the oldest going first."""

    __slots__ = ("interrupted", "limits", "max_agents")

    def __init__(self) -> None:
        self.interrupted: OrderedDict[str, _Interrupt] = OrderedDict()
        self.limits: dict[str, dict[str, int]] = {}  # agent -> its own limits (AGENT_LIMITS keys), oldest first
        self.max_agents = 0

    def bound(self) -> None:
        while len(self.interrupted) > self.max_agents:
            self.interrupted.popitem(last=False)

    def interrupt(self, agent: str, reason: str) -> None:
        entry = self.interrupted.get(agent)
        if entry is not None:
            entry.reason = reason
            return
        self.interrupted[agent] = _Interrupt(reason)
        self.bound()

    def denied(self, agent: str) -> _Interrupt:
        """The interrupted agent called (denied): the most recent interrupt now, with one more deny."""
        entry = self.interrupted[agent]
        self.interrupted.move_to_end(agent)
        entry.denies += 1
        return entry

    def restore_interrupt(self, agent: str, reason: str, denies: int) -> None:
        self.interrupted[agent] = _Interrupt(reason, denies)
        self.interrupted.move_to_end(agent)
        self.bound()

    def set_limits(self, agent: str, own: dict[str, int]) -> None:
        """`agent`'s own limits are `own` now (none, if empty), as the most recent."""
        self.limits.pop(agent, None)
        if own:
            self.limits[agent] = own  # the most recent last: past maxAgents, the oldest goes
            while len(self.limits) > self.max_agents:
                self.limits.pop(next(iter(self.limits)))

    def override(self, agent: str, changes: dict[str, int | None]) -> dict[str, int]:
        """Apply `changes` (a value None takes that limit off) to `agent`'s own limits: what they are now."""
        own: dict[str, int] = self.limits.pop(agent, {})
        for key, value in changes.items():
            if key not in AGENT_LIMITS:
                raise ValueError(f"{key!r} is not a limit an agent may have of its own")
            if value is None:
                own.pop(key, None)
            else:
                own[key] = value
        self.set_limits(agent, own)
        return own


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
    last: tuple[Outcome, Kind] | None = None  # how its last judged call went, if warned or denied
    last_key: int | None = None  # the repeat rule: its last allowed call, and how many times in a row
    run: int = 0
    cycles: list[int] | None = None  # the cycle rule's runs, per period
    recent: list[int | None] | None = None  # the cycle rule: the last calls tried, oldest first
    before: dict[int, int] | None = None  # progress: per key, its occurrences from before its result changed
    results: dict[int, int] | None = None  # progress: per key, a hash of its last result's digest
    wrote: int = 0  # the unchanged rule: calls that may write that ran
    alike: dict[int, int] | None = None  # the unchanged rule: per key, its mark (_Agent.alike)
    tool_calls: dict[str, int] | None = None  # per-tool caps: calls per tool (by class name)
    stall: tuple[str, str | None, int] | None = None  # the stall rule: tool, result digest, calls that got it
    polls: int = 0  # polls in a row since a result last changed (pollLimit)
    polling: bool = False  # the cycle its calls go round has a wait in it (the cycle rule lets it go round)
    reword_key: int | None = None  # the reworded rule: the key in other words of its last tried calls,
    reword_run: int = 0  # how many in a row had it,
    reword_first: int | None = None  # the first one's exact key,
    reword_mixed: bool = False  # and whether another wording came since
    limits: dict[str, int] | None = None  # the operator's override of its cap / duplicate limit
    retired: bool = False  # only its counts are kept (it ended, or was evicted): no window, not shown


class _Views:
    """What the guard shows (the read side, for the session and the console): rows of its agents and of their
    repeated keys. Reads the state `Guard` keeps; changes nothing."""

    # slots, here and in Guard: a guard's 31 fields are past the 30 an instance dict shares its keys for, and a
    # field read on the hot path is then a dict lookup with a hint instead of a slot's load
    __slots__ = ("_agents", "_config", "_interrupted", "_limits", "_recency", "_top_keys")

    _agents: dict[str, _Agent]
    _interrupted: dict[str, _Interrupt]
    _limits: dict[str, dict[str, int]]
    _recency: _Recency
    _top_keys: _TopKeys
    _config: Config

    def __len__(self) -> int:
        return len(self._agents)

    def __contains__(self, agent: object) -> bool:
        return agent in self._agents

    def agents(self) -> list[str]:
        """Tracked agent ids, least recently active first."""
        return self._recency.order()

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
        worst_count, worst_tool, worst_preview = (1 if st.index else 0), "", ""
        if st.previews:
            key = max(st.previews, key=st.count)
            worst_count = st.count(key)
            worst_tool, worst_preview = st.previews[key]
        elif st.ring:
            worst_tool = st.last_tool
        interrupt = self._interrupted.get(agent)
        cap, limit = config.max_calls_per_agent, config.duplicate_limit
        own = st.limits
        if own is not None:
            cap, limit = own.get("maxCallsPerAgent", cap), own.get("duplicateLimit", limit)
        outcome, last = st.last or ("allow", "")
        if interrupt is not None:
            status = rule = "interrupted"
        elif cap and st.calls >= cap:
            status = rule = "cap"
        elif outcome == "deny":
            status = rule = last
        elif worst_count >= limit:
            status = rule = "duplicate"
        elif outcome == "warn":
            status, rule = "warned", last
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
        count, previews = st.count, st.previews
        rows = [KeyRow(agent=agent, tool=previews[k][0], preview=previews[k][1], count=count(k)) for k in previews]
        return sorted(rows, key=lambda row: row.count, reverse=True)[:top], len(st.index)

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
        if top <= 0:
            return out
        for agent, key, n in self._top_keys.read(top):
            tool, text = self._agents[agent].previews[key]
            out.append(KeyRow(agent=agent, tool=tool, preview=text, count=n))
        return out

    def snapshot(self, top: int = 10, agents: Iterable[str] | None = None) -> GuardView:
        """Views of `agents` (default: every tracked or interrupted agent, most recently active
        first) and the `top` most repeated keys."""
        if agents is None:
            ids = self._recency.order()
            ids.reverse()
            ids.extend(a for a in reversed(self._interrupted) if a not in self._agents)
        else:
            ids = list(agents)
        views = [v for v in map(self.agent_view, ids) if v is not None]
        return GuardView(agents=views, top_keys=self.top_keys(top))


class _Operated(_Views):
    """The guard's actions that are not a call's: what the operator does to it (interrupts, resets, an agent's own
    limits, a pause), the harness's word that an agent ended, and the state store's way in and out."""

    __slots__ = ("_newest", "_operator", "_paused", "_period", "_retired", "_roster", "_tools")

    _newest: _Agent | None
    _operator: _Operator
    _paused: bool
    _period: int
    _retired: dict[str, _Ledger]
    _roster: _Roster
    _tools: dict[str, ToolRules]

    # -- operator actions ---------------------------------------------------------------------

    def interrupt(self, agent: str, reason: str = "") -> None:
        """Deny every later call of `agent` (kind "interrupted") until `uninterrupt`."""
        self._operator.interrupt(agent, reason)

    def uninterrupt(self, agent: str) -> bool:
        """Lift an operator interrupt; True if the agent was interrupted."""
        return self._interrupted.pop(agent, None) is not None

    def interrupted(self, agent: str) -> bool:
        return agent in self._interrupted

    def reset(self, agent: str) -> bool:
        """Clear an agent's window, call count, denies and override (not an interrupt); True if it was tracked.
        An operator's action: its counts start again, as a new agent's."""
        self._limits.pop(agent, None)
        self._newest = None
        return self._roster.reset(agent)

    def override(self, agent: str, limits: dict[str, int | None]) -> dict[str, int] | None:
        """Give `agent` limits of its own (AGENT_LIMITS keys; a value None takes that one off): its cap, and
        its duplicate limit for every tool. The global config is untouched; a reset clears them. They are
        kept apart from the agent's state: its end or eviction never drops them, only the operator does.
        The agent's limits now, or None if the guard does not know it. Values are the caller's to check
        (the protocol does)."""
        if agent not in self._agents and agent not in self._retired and agent not in self._interrupted:
            return None
        own = self._operator.override(agent, limits)
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
        self._operator.set_limits(agent, dict(limits))
        st = self._agents.get(agent)
        if st is not None:
            st.limits = self._limits.get(agent)

    def end_agent(self, agent: str) -> bool:
        """The harness says the agent is gone: free its window. Its calls toward the cap and its denies are
        kept (a ledger, bounded by maxAgents): a harness cannot give an agent a fresh cap by ending it. An
        operator interrupt and override outlive it too. True if the agent was tracked."""
        if agent not in self._agents:
            return False
        self._roster.retire(agent)
        return True

    @property
    def paused(self) -> bool:
        """The operator paused the guard: every call is allowed unrecorded (interrupts still apply)."""
        return self._paused

    def pause(self) -> None:
        """Allow every call without recording it (interrupts still apply)."""
        self._paused = True
        self._tools.clear()  # each tool's rules say whether it is judged: none is while paused

    def resume(self) -> None:
        self._paused = False
        self._tools.clear()

    # -- state in and out (the state store) ----------------------------------------------------

    def export_agent(self, agent: str) -> AgentState | None:
        """A copy of one agent's state (None if it is not tracked)."""
        st = self._agents.get(agent)
        if st is not None:
            return st.export(agent)
        led = self._retired.get(agent)
        return None if led is None else led.export(agent, self._limits.get(agent))

    def restore_agent(self, state: AgentState, *, windows: bool = True) -> None:
        """Put an agent back as exported, as the most recently active. `windows=False` keeps its
        tallies but not its window (digests from another process's hash key match nothing)."""
        if state.limits:  # a state file from before overrides were kept apart
            self.restore_override(state.agent, state.limits)
        self._newest = None
        self._roster.restore(state, self._period if windows else 0)

    def interrupts(self) -> list[tuple[str, str, int]]:
        """Every operator interrupt: (agent, reason, denies so far), oldest first."""
        return [(agent, e.reason, e.denies) for agent, e in self._interrupted.items()]

    def restore_interrupt(self, agent: str, reason: str, denies: int) -> None:
        self._operator.restore_interrupt(agent, reason, denies)


class Guard(_Operated):
    """The circuit breaker. `check()` decides; nothing here reads a clock or touches a file.

    `on_remove(agent)` (optional) is told when an agent's state goes away by itself — evicted past
    `maxAgents` — or by `end_agent`, so that whoever mirrors the agents (subscribers, the state store)
    can forget it too; and again when its ledger (the counts kept of it) is forgotten in turn.

    What the harness plane can never undo: an agent's calls toward its cap and its denies outlive
    `end_agent` and eviction (kept in a bounded ledger, and restored if the id calls again); a flood
    of new ids pushes out new, never-denied agents first (see _NEW_CALLS); the operator's interrupts
    and per-agent limits live apart from the agents and only operator actions remove them.
    """

    __slots__ = (
        "_anon",
        "_call",
        "_exempt",
        "_ignore",
        "_narrow",
        "_no_cycles",
        "_only",
        "_overrides",
        "_reasons",
        "_retired_tiers",
        "_stall",
        "_ticks",
        "_tracking",
        "_unchanged",
        "_warning_texts",
        "checked_key",
        "checks",
        "denies",
        "on_remove",
        "warnings",
    )

    def __init__(self, config: Config | None = None, on_remove: Callable[[str], Any] | None = None) -> None:
        self._operator = _Operator()  # interrupts and per-agent limits
        self._interrupted, self._limits = self._operator.interrupted, self._operator.limits
        self._top_keys = _TopKeys()
        self._roster = roster = _Roster(self._top_keys, self._limits, self._removed)
        self._agents, self._recency = roster.agents, roster.recency
        self._ticks = roster.recency.ticks
        self._retired, self._retired_tiers = roster.retired, roster.retired_tiers
        self._tools: dict[str, ToolRules] = {}
        self.on_remove = on_remove
        self._newest: _Agent | None = None  # the agent of the last check: the most recently active, in both orders
        self._paused = False
        self.checks = 0
        self.checked_key: int | None = None  # the key of the last call counted (`Verdict.counted`)
        self.denies: dict[str, int] = dict.fromkeys(DENY_KINDS, 0)
        self.warnings = 0  # calls allowed with a warning
        self._anon = itertools.count(1)  # ids for remembered calls that came without one
        self._period = 0
        self._narrow = False
        self.config = config if config is not None else Config()

    def _removed(self, agent: str) -> None:
        if self.on_remove is not None:
            self.on_remove(agent)

    # -- configuration ------------------------------------------------------------------------

    @property
    def config(self) -> Config:
        return self._config

    @config.setter
    def config(self, config: Config) -> None:
        """Swap the config live: counts are kept; windows shrink lazily on each agent's next call."""
        self._config = config
        self._ignore = frozenset(config.ignore_args) or None  # (None: a test cheaper than an empty set's)
        self._exempt = frozenset(map(tool_class_name, config.exempt))
        self._only = frozenset(map(tool_class_name, config.only))
        self._tools.clear()
        self._overrides = {tool_class_name(tool): dict(o) for tool, o in config.tools}
        # _Agent.clean: a window shorter than cyclePeriod, now or until now, and a new period spoil it for all
        narrow, self._narrow = self._narrow, config.window < config.cycle_period
        for st in self._agents.values() if narrow or self._narrow or config.cycle_period != self._period else ():
            st.spoil(config.cycle_period)
        self._period = config.cycle_period
        self._no_cycles = [0] * (config.cycle_period + 1)
        self._stall, self._tracking, self._unchanged = steps.tracked(config, self._overrides.values())
        self._call = StepInput()  # fresh: its tallies of rules now off stay 0
        self._reasons: dict[tuple[str, str, int, int, str], str] = {}
        self._warning_texts: dict[tuple[Hit, str, str], str] = {}
        self._roster.max_agents = self._operator.max_agents = config.max_agents
        self._roster.bound()
        self._operator.bound()

    def _classify(self, tool: str) -> ToolRules:
        name = tool_class_name(tool)
        # judged: not exempt (or in `only`), the guard enabled and not paused (pause and a config clear this cache)
        judged = (name in self._only if self._only else name not in self._exempt) and self._config.enabled
        judged = judged and not self._paused
        rules = ToolRules(self._config, name, judged, self._overrides.get(name, {}), self._unchanged or self._stall)
        rules.wait_tool = wait_tool(tool)
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
        unjudgeable: bool = False,
        call_id: str | int | None = None,
        judged: Judged | None = None,
    ) -> Verdict:
        """Decide one call of `tool` with `args` by `agent`; allowed calls are recorded.

        In order: an operator interrupt denies; a disabled or paused guard, an exempt tool (or one outside
        `only`) pass unjudged; then the cap, and once the call is keyed the steps of `ToolRules.denies`
        (breaker/rules.py): the first that objects denies. An allowed call may carry a warning (`ToolRules.warns`).

        `now` (seconds, any clock) is only stored for displays ("age of the last call").
        `unjudgeable`: the harness could not serialize the args; the call is judged as args that
        cannot be keyed (allowed and counted, matching nothing). `call_id`: the harness's id for the
        call, so that its result (`result()`) finds it. `judged`: the args were keyed elsewhere (the
        judge process, for large frames): its digest and preview stand for them (`args` is ignored). (Not
        keyword-only: CPython 3.11 fills an omitted keyword-only argument from a dict, 45 ns a check.)
        """
        self.checks += 1
        if self._interrupted and agent in self._interrupted:
            return self._deny_interrupted(agent, tool, now)
        rules = self._tools.get(tool) or self._classify(tool)
        if not rules.judged:  # disabled, paused, exempt or outside `only`
            return _NOT_JUDGED
        config = self._config

        st = self._agents.get(agent)
        if st is None:
            st = self._newest = self._roster.admit(agent)
        elif st is not self._newest:  # the agent of the last check is the most recent already
            st.seq = next(self._ticks)  # its place in the order of activity (_Recency): one tick
            self._newest = st
        st.last_tool = tool
        own = st.limits
        cap = config.max_calls_per_agent if own is None else own.get("maxCallsPerAgent", config.max_calls_per_agent)
        ring = st.ring
        window = config.window
        if (cap or rules.tool_cap or len(ring) > window) and (denied := self._capped(st, agent, tool, rules, cap, now)):
            return denied

        ignore = self._ignore  # (previews leave the ignored args out too)
        args = (
            _without(args, ignore)
            if ignore is not None and (type(args) is dict or isinstance(args, dict)) and not ignore.isdisjoint(args)
            else args
        )
        try:  # keyed here (call_digest's fast path, inlined: the hot path), or elsewhere (`judged`), or not at all
            key = (
                hash(_dumps((tool, args), option=_SORT))
                if judged is None and not unjudgeable
                else _given(judged, unjudgeable)
            )
        except Exception:
            key = call_digest(tool, args)
        self.checked_key = key  # (a counted call's: its verdict may be one shared by many calls, without it)
        index = st.index
        slot = None if key is None else index.get(key)
        # The rules that count every call tried, denied or not (inline: the hot path): whether it is a poll, and
        # how many in a row before it were a reworded, stalled or cycling call (0: none).
        polls = reworded = stalled = cycle_len = cycle_p = 0
        if self._tracking:
            stall = self._stall
            if (
                slot is not None  # a repeat of a call in the window may be a poll (paced's cheap part, inline)
                and rules.poll_limit
                and (now is not None or rules.wait_tool or type(args) is not dict or not _commands_apart(args))
                and paced(rules.poll_gap, tool, args, now, st.last_seen, key)  # type: ignore[arg-type]
            ):
                polls = st.polls + 1
                stall, st.stall_tool = False, None  # a poll waits for a new result: the same one again is no stall
                st.spoil(self._period)  # (kept as no key: its key's last occurrence may leave the window before it)
                st.polled(key)  # type: ignore[arg-type]  # the unchanged rule does not count polls either
            if rules.reword_limit and not polls:  # the call's key in other words (breaker/normalise.py)
                if key is not None and (rules.searches or type(args) is not dict or not _spelled_apart(args)):
                    norm = _reworded(key) or reworded_of(key, tool, args)
                    if norm is None or norm != st.reword_key:  # a first wording (_Agent.reword's first step, inline)
                        st.reword_key = norm
                        st.reword_run = 1
                        st.reword_first = key
                        st.reword_mixed = False
                    else:
                        reworded = st.reword(key, norm)
                else:  # only itself: no other call says the same, so it ends any run of wordings and starts none
                    st.reword_key = None
            if stall and tool != st.stall_tool:  # a call of another tool ends the run of calls the stall rule counts
                st.stall_tool, st.stall_digest, st.stall_n = tool, None, 0
            stalled = st.stall_n if stall and rules.stall_limit else 0
            if rules.cycle_limit:  # every call it tries moves the cycle rule on
                recent: list[int | None] = st.recent  # type: ignore[assignment]  # (None only while cycling)
                if (
                    not st.cycling
                    and st.period == self._period
                    and (key is None or (slot is None and (st.clean or st.recheck(self._narrow))) or key not in recent)
                ):
                    # a call it has not just made continues no cycle (inline; a list, not a deque with a maxlen:
                    # a deque's block is 64 slots, 3 bytes more per remembered call)
                    recent.append(key)
                    del recent[0]  # (it holds `period` calls, None for those before the agent's first)
                else:
                    cycle_len, cycle_p = st.cycled(rules, key, self._period, self._no_cycles, tool, args, now)
        st.last_seen = now  # (after the counting: a poll is paced by the agent's call before this one)
        limit = rules.dup_limit if own is None else own.get("duplicateLimit", rules.dup_limit)
        n = 0 if slot is None else st.tally[slot]
        # only the identical calls since its result last changed count
        seen = n - st.before.get(key, 0) if n and st.before and rules.progress else n  # type: ignore[arg-type]
        in_row = st.run if key == st.last_key and key is not None and not polls else 0  # a poll: by pollLimit
        # the unchanged rule: a repeat (n) with results kept, not a poll nor back to back (repeat's), with args left
        unchanged = (
            st.unchanged_run(slot)
            if n and rules.unchanged_limit and st.alike is not None and not (polls or in_row) and args
            else 0
        )
        # No step objects below its warning's threshold (a deny's is at or above it): a call below every one of
        # them, the common case, skips the steps, and so does a call no cap warning is on for.
        near = not (  # (a bool, not the last of the counts: tested three times below)
            in_row < rules.rep_near
            and (seen < limit - rules.dup_warn or key is None)
            and not cycle_p
            and not stalled
            and not reworded
            and not polls
            and not unchanged
        )
        if near and seen >= limit and key is not None:  # the duplicate step (the first), inline: the common deny
            return self._deny(st, agent, tool, "duplicate", seen, limit, key)
        if near and (
            denied := self._denied(
                self._call.set(
                    rules, key, seen, limit, in_row, cap, polls, reworded, stalled, cycle_len, cycle_p, unchanged
                ),
                st,
                agent,
                tool,
            )
        ):
            return denied

        # Allowed: the call takes its place in the window and the tallies (inline: the hot path).
        if slot is not None and not polls:  # a repeat (a poll matches nothing: polls never add up to a duplicate)
            st.repeated(agent, tool, args, judged, key, slot, n, self._top_keys)  # type: ignore[arg-type]
        elif key is not None and not polls:  # a key new to the window: a slot of its own
            tally = st.tally
            if (  # the window is full and its oldest call's key leaves with it (_Agent.leave): that key's slot
                len(ring) >= window
                and (old := ring[0]) is not None
                and tally[(spare := index[old])] == 1
                and st.results is None
                and not st.before
            ):
                ring.popleft()
                del index[old]
            else:
                free = st.free
                spare = free.pop() if free else st.grow()
                tally[spare] = 1
            index[key] = spare
        ring.append(None if polls else key)
        st.polls = polls
        st.calls += 1
        st.run = in_row + 1
        st.last_key = key
        st.last = None
        if not st.tier and st.calls >= _NEW_CALLS:
            self._roster.promote(agent, st)
        if len(ring) > window and (old := ring.popleft()) is not None:
            old_slot = index[old]
            if st.tally[old_slot] == 1 and st.results is None and not st.before:
                del index[old]  # a key seen once leaves: _Agent.leave, inline
                st.tally[old_slot] = 0
                st.free.append(old_slot)
            else:
                st.evict(agent, old, self._top_keys)
        if (near or rules.tallies) and (
            warned := self._warned(near, rules, st, agent, tool, args, call_id, key, seen, limit, in_row, cap)
        ):
            return warned
        if call_id is not None and (rules.progress or self._stall or self._unchanged):
            # whether it may write: the unchanged rule counts it when its result comes (breaker/normalise.py)
            writes = rules.writes or (rules.runs and may_write(key, tool, args))
            st.remember(call_id, Pending(key, "", rules, tool, writes), self._anon)
        # one verdict for every such call, built once (its key: checked_key)
        return rules.allowed[seen] if own is None and seen < rules.shared else _allowed(seen, limit, key)

    def _capped(
        self, st: _Agent, agent: str, tool: str, rules: ToolRules, cap: int, now: float | None
    ) -> Verdict | None:
        """Before the call is keyed: the cap's step (its deny, or None), and a window made smaller since the agent's
        last call shrinks to size."""
        if cap or rules.tool_cap:
            c = self._call
            c.rules, c.cap, c.calls = rules, cap, st.calls
            c.tool_calls = st.tool_calls.get(rules.name, 0) if st.tool_calls else 0
            hit = steps.cap(c)
            if hit is not None:
                st.last_seen = now
                return self._deny(st, agent, tool, hit.rule, hit.tally, hit.limit, None)
        ring = st.ring
        while len(ring) > self._config.window:
            st.evict(agent, ring.popleft(), self._top_keys)
        return None

    def _denied(self, c: StepInput, st: _Agent, agent: str, tool: str) -> Verdict | None:
        """The steps of `ToolRules.denies`, in order: the first that objects denies the call (None: none does)."""
        for judge in c.rules.denies:
            hit = judge(c)
            if hit is not None:
                return self._deny(st, agent, tool, hit.rule, hit.tally, hit.limit, c.key)
        return None

    def _warned(
        self,
        near: Any,
        rules: ToolRules,
        st: _Agent,
        agent: str,
        tool: str,
        args: Any,
        call_id: str | int | None,
        key: int | None,
        seen: int,
        limit: int,
        in_row: int,
        cap: int,
    ) -> Verdict | None:
        """After an allowed call is recorded: its calls of the tool counted for a per-tool cap, and the first rule of
        `ToolRules.warns` that warns (None: none does). Reached for a call near a limit (`near`: the steps' input
        holds its values) and for a tool whose calls are counted or may be warned of a cap."""
        if rules.counts_tool:  # a per-tool cap, or its warning
            st.count_tool(rules.name)
        c = self._call
        if not near:  # only a cap warning may speak (cap_near's test)
            if not (rules.tool_warn or (rules.cap_warn and st.calls > cap - rules.cap_warn)):
                return None
            c.set(rules, key, seen, limit, in_row, cap, 0, 0, 0, 0, 0, 0)
        c.calls = st.calls
        c.tool_calls = st.tool_calls.get(rules.name, 0) if st.tool_calls else 0
        for warn in rules.warns:
            hit = warn(c)
            if hit is not None:
                rule = hit.rule
                st.warns[rule] = st.warns.get(rule, 0) + 1
                st.last = _WARNED[rule]
                self.warnings += 1
                warning = _warning(self._warning_texts, self._config.warn_message, tool, hit, agent)
                # remembered whatever its rules: a harness may show the warning with the result
                writes = rules.writes or (rules.runs and may_write(key, tool, args))  # the unchanged rule's count
                st.remember(call_id, Pending(key, warning, rules, tool, writes), self._anon)
                return Verdict(True, None, "", hit.tally, hit.limit, False, True, key, warning, rule)
        return None

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
        if st is None or (call_id is None and tool is None):
            return False, ""
        pending = st.pending
        found: Pending | None = None
        if call_id is not None:
            if pending and call_id in pending:
                found = pending.pop(call_id)
            key = found.key if found is not None else None
            rules = found.rules if found is not None else None
        else:
            rules = self._tools.get(tool) or self._classify(tool)  # type: ignore[arg-type]
            key = judged.key if judged is not None else call_digest(tool, args, self._ignore or frozenset())  # type: ignore[arg-type]
            if pending and key is not None:
                for cid in reversed(pending):
                    if pending[cid].key == key:
                        found = pending.pop(cid)
                        break
        warning = found.warning if found is not None else ""
        called = found.tool if found is not None else tool
        writes = found.writes if found is not None else _writes(rules, key, tool, args)
        stall = st.stall_result(called, digest, writes and not (rules is not None and rules.stall_writes))
        slot = None if key is None else st.index.get(key)
        st.came(key, slot, digest, rules, writes)
        # found, unless it had args it could not judge, or went from the window (and it is not the stall rule's)
        return (slot is not None or found is not None or stall), warning

    def _deny(self, st: _Agent, agent: str, tool: str, kind: Kind, count: int, limit: int, key: int | None) -> Verdict:
        st.clean, st.taint = False, self._period  # a call tried and not kept (_Agent.spoil, inline: a loop's path)
        if st.tier != 2:
            self._recency.place(agent, st, 2)
        before = st.denies.get(kind, 0)
        st.denies[kind] = before + 1
        st.last = _DENIED[kind]
        self.denies[kind] += 1
        cache_key = (kind, tool, count, limit, agent)
        reason = self._reasons.get(cache_key)
        if reason is None:  # a looping agent gets the same text every time: fill it once
            if len(self._reasons) >= _REASON_CACHE_MAX:
                self._reasons.clear()
            reason = self._reasons[cache_key] = fill(self._config.deny_message, tool, count, limit, kind, agent)
        return _new_verdict(Verdict, (False, kind, reason, count, limit, before == 0, False, key, "", kind))

    def _deny_interrupted(self, agent: str, tool: str, now: float | None) -> Verdict:
        entry = self._operator.denied(agent)
        self.denies["interrupted"] += 1
        st = self._agents.get(agent)
        calls = 0 if st is None else self._roster.interrupted_call(agent, st, tool, now)
        self._newest = None
        text = INTERRUPTED_TEXT + (f" Reason: {entry.reason}" if entry.reason else "")
        return Verdict(False, "interrupted", text, calls, 0, entry.denies == 1, False, rule="interrupted")
