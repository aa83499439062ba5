"""The rules a call is judged by: each rule a small step, their order in one place (DENY_ORDER, WARN_ORDER).

Pure: the steps read one check's working values (`StepInput`) and return a `Hit` or None; the engine
(breaker/engine.py) keeps the agents' state, runs the steps and turns a hit into a `Verdict`.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, get_args

from breaker.config import Config
from breaker.normalise import runs, searches, writes
from breaker.vocab import Kind, Outcome, Rule  # the words the rules speak (re-exported)

__all__ = [
    "DENY_KINDS",
    "DENY_ORDER",
    "RULES",
    "WARN_ORDER",
    "Hit",
    "Kind",
    "Outcome",
    "Rule",
    "StepInput",
    "ToolRules",
    "Verdict",
    "fill",
]


RULES: tuple[Rule, ...] = get_args(Rule)
# A search whose answer stays the same while its words change: the stall rule's limit for a tool that searches
# (breaker/normalise.py: searches), when the rule is on with a larger one.
SEARCH_STALL = 3
# The cycle rule denies a cycle once this many calls in a row each repeated the call a period before, and not
# before it completes cycleLimit rounds (`cycle_end`).
CYCLE_REPEATS = 3
DENY_KINDS: tuple[Kind, ...] = get_args(Kind)

_PLACEHOLDER = re.compile(r"\{(tool|count|limit|kind|agent|rule|how)\}")
# {how}: what a rule's count counts, as the messages say it
_HOW = {
    "duplicate": "identical calls among its recent ones",
    "repeat": "identical calls in a row",
    "cycle": "rounds of the same cycle of calls",
    "cap": "tool calls in all",
    "tool cap": "calls of this tool",
    "stall": "calls of this tool in a row getting the same result",
    "reworded": "wordings in a row of the same call",
    "poll": "polls in a row getting the same result",
    "unchanged": "identical calls answered alike with nothing written between",
}


def fill(message: str, tool: str, count: int, limit: int, kind: str, agent: str, how: str = "") -> str:
    """`message` with its placeholders filled in one pass, so a tool named "{count}" is never substituted into."""
    values = {"tool": tool, "count": str(count), "limit": str(limit), "kind": kind, "agent": agent}
    values.update(rule=kind, how=_HOW.get(how or kind, "calls"))
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], message)


class Verdict(NamedTuple):
    """The answer for one call.

    allowed: the call may run. kind: None, or why it was denied: a rule ("duplicate", "repeat",
    "cycle", "stall", "cap") or "interrupted". reason: the deny text for the model ("" when allowed).
    count/limit: the tally of the rule that denied or warned, and its limit — for a duplicate the
    key's occurrences in the window and duplicateLimit (denied by the unchanged step: its identical
    answers in a row and unchangedLimit); for a repeat the calls in a row; for a cycle its rounds,
    the one the call completes counted; for a cap the calls made (of the tool, for a per-tool cap) and the cap. For an
    allowed judged call without a warning, the key's occurrences including this call and
    duplicateLimit; 0/0 for calls the guard does not judge (disabled, paused, exempt, outside `only`).
    first: this is the agent's first deny of this kind (the one the incident log records).
    counted: the call was recorded (took a window slot and counts toward the cap).
    key: the call's digest as the window compares it, for tools that tally calls the same way
    (None when it was not computed: not judged, capped, interrupted, or unserializable args; and None on
    a plain allowed call — no warning, the agent's own duplicateLimit unset — whose verdict is one shared by
    every such call of its count, built once: `Guard.checked_key` holds the key of the last call counted).
    warning/rule: an allowed call near a limit carries the text for the model and the rule ("" and
    None otherwise); a deny's rule is its kind.

    Immutable: a named tuple, built in one step on the hot path.
    """

    allowed: bool
    kind: Kind | None = None
    reason: str = ""
    count: int = 0  # type: ignore[assignment]  # a field, not tuple.count: the name is the protocol's
    limit: int = 0
    first: bool = False
    counted: bool = False
    key: int | None = None
    warning: str = ""
    rule: Kind | None = None

    def __repr__(self) -> str:
        if self.allowed:
            warned = f", warned by {self.rule}" if self.warning else ""
            return f"Verdict(allow, count={self.count}, limit={self.limit}, counted={self.counted}{warned})"
        return f"Verdict(deny {self.kind}, count={self.count}, limit={self.limit}, first={self.first})"


class Hit(NamedTuple):
    """A rule that objects to a call (it denies, or warns): its tally (the count a message shows) and limit,
    and what the tally counts ("tool cap" for a per-tool cap; "" = the rule's own words)."""

    rule: Rule
    tally: int
    limit: int
    how: str = ""


_hit = tuple.__new__  # a Hit from all its fields at once, as the steps make them: faster than Hit(...)


class StepInput:
    """One check's working values, filled in as the check goes: what the steps read.

    One per guard, refilled by every check (the engine is single-threaded), so that judging a call
    allocates nothing it does not keep."""

    __slots__ = (
        "calls",
        "cap",
        "cycle_len",
        "cycle_p",
        "in_row",
        "key",
        "limit",
        "polls",
        "reworded",
        "rules",
        "seen",
        "stalled",
        "tool_calls",
        "unchanged",
    )

    rules: ToolRules  # the tool's rules (set by each check before any step runs)

    def __init__(self) -> None:
        self.calls = 0  # the agent's counted calls (after this one, once recorded)
        self.cap = 0  # the agent's cap in force (its own, or the config's)
        self.tool_calls = 0  # its calls of this tool, for a per-tool cap
        self.key: int | None = None  # the call's digest (None: args it could not key)
        self.seen = 0  # the key's occurrences that count toward the duplicate rule
        self.limit = 0  # the duplicate limit in force
        self.in_row = 0  # the same call's allowed calls right before this one
        self.cycle_len = 0  # the longest cycle this call continues: its length in calls and its period
        self.cycle_p = 0
        self.stalled = 0  # this tool's last calls in a row that got the same result
        self.polls = 0  # a poll (a paced repeat of the last call): 1 + the polls in a row before it; else 0
        self.reworded = 0  # a new wording of the last call: the wordings in a row before it; else 0
        self.unchanged = 0  # a call already in the window: its last results in a row alike, nothing written since

    def set(
        self,
        rules: ToolRules,
        key: int | None,
        seen: int,
        limit: int,
        in_row: int,
        cap: int,
        polls: int,
        reworded: int,
        stalled: int,
        cycle_len: int,
        cycle_p: int,
        unchanged: int,
    ) -> StepInput:
        """The values the steps read, once the call is keyed and counted."""
        self.rules, self.key, self.seen, self.limit, self.in_row, self.cap = rules, key, seen, limit, in_row, cap
        self.polls, self.reworded, self.stalled, self.cycle_len, self.cycle_p = (
            polls,
            reworded,
            stalled,
            cycle_len,
            cycle_p,
        )
        self.unchanged = unchanged
        return self


# -- the deny steps: each returns the Hit that denies the call, or None ---------------------------


def cap(c: StepInput) -> Hit | None:
    """The agent's calls in all, then its calls of this tool, reached their cap. Judged before the call is keyed."""
    if c.cap and c.calls >= c.cap:
        return _hit(Hit, ("cap", c.calls, c.cap, ""))
    tool_cap = c.rules.tool_cap
    if tool_cap and c.tool_calls >= tool_cap:
        return _hit(Hit, ("cap", c.tool_calls, tool_cap, ""))
    return None


def duplicate(c: StepInput) -> Hit | None:
    """The identical call is already in the window duplicateLimit times."""
    if c.key is not None and c.seen >= c.limit:
        return _hit(Hit, ("duplicate", c.seen, c.limit, ""))
    return None


def unchanged(c: StepInput) -> Hit | None:
    """The identical call again after unchangedLimit of its calls in a row got the same result with nothing
    written since the first of them (`_Agent.unchanged`): it can only get that result again. Denied as a
    duplicate: it is one, known to be pointless sooner."""
    limit = c.rules.unchanged_limit
    if c.unchanged >= limit:
        return _hit(Hit, ("duplicate", c.unchanged, limit, "unchanged"))
    return None


def repeat(c: StepInput) -> Hit | None:
    """The identical call came repeatLimit times in a row."""
    limit = c.rules.rep_limit
    if c.in_row >= limit:
        return _hit(Hit, ("repeat", c.in_row, limit, ""))
    return None


def poll(c: StepInput) -> Hit | None:
    """A poll (the last call again, paced: see breaker/normalise.py) after pollLimit polls in a row with no new
    result. Denied as a repeat: it is one, only slower."""
    limit = c.rules.poll_limit
    if c.polls > limit:
        return _hit(Hit, ("repeat", c.polls - 1, limit, "poll"))
    return None


def reworded(c: StepInput) -> Hit | None:
    """The same call in other words (breaker/normalise.py), after rewordLimit wordings of it in a row."""
    limit = c.rules.reword_limit
    if c.reworded >= limit:
        return _hit(Hit, ("reworded", c.reworded, limit, ""))
    return None


def cycle_end(limit: int, period: int) -> int:
    """The length, in calls, at which the cycle rule denies a cycle of `period` calls: the call that completes its
    cycleLimit-th round, once at least CYCLE_REPEATS calls in a row have each repeated the call a period before
    (A-B-C-A-B-C: the sixth call; A-B-A-B is two rounds of only two repeats: the fifth)."""
    return max(limit * period, period + CYCLE_REPEATS)


def cycle(c: StepInput) -> Hit | None:
    """A cycle of calls (A-B-A-B…, periods 2 … cyclePeriod, over the calls tried, denied ones too) that completes
    cycleLimit rounds (`cycle_end`)."""
    p = c.cycle_p
    if p and c.cycle_len >= cycle_end(c.rules.cycle_limit, p):
        return _hit(Hit, ("cycle", -(-c.cycle_len // p), c.rules.cycle_limit, ""))
    return None


def stall(c: StepInput) -> Hit | None:
    """This tool's last stallLimit calls in a row all got the same result, whatever their args."""
    limit = c.rules.stall_limit
    if c.stalled and c.stalled >= limit:
        return _hit(Hit, ("stall", c.stalled, limit, ""))
    return None


# -- the warning steps: on a call they allow, each returns the Hit that warns, or None ------------


def repeat_near(c: StepInput) -> Hit | None:
    r = c.rules
    if r.rep_warn and c.in_row >= r.rep_limit - r.rep_warn and c.key is not None:
        return _hit(Hit, ("repeat", c.in_row + 1, r.rep_limit, ""))
    return None


def unchanged_near(c: StepInput) -> Hit | None:
    r = c.rules
    if c.unchanged and c.unchanged >= r.unchanged_limit - r.unchanged_warn:
        return _hit(Hit, ("duplicate", c.unchanged + 1, r.unchanged_limit, "unchanged"))
    return None


def poll_near(c: StepInput) -> Hit | None:
    r = c.rules
    if c.polls > r.poll_limit - r.rep_warn and r.rep_warn:
        return _hit(Hit, ("repeat", c.polls, r.poll_limit, "poll"))
    return None


def reworded_near(c: StepInput) -> Hit | None:
    r = c.rules
    if c.reworded and c.reworded >= r.reword_limit - r.reword_warn:
        return _hit(Hit, ("reworded", c.reworded + 1, r.reword_limit, ""))
    return None


def cycle_near(c: StepInput) -> Hit | None:
    r = c.rules
    p = c.cycle_p
    if p and c.cycle_len >= cycle_end(r.cycle_limit, p) - r.cycle_warn:
        return _hit(Hit, ("cycle", -(-c.cycle_len // p), r.cycle_limit, ""))
    return None


def duplicate_near(c: StepInput) -> Hit | None:
    if c.seen >= c.limit - c.rules.dup_warn and c.key is not None:
        return _hit(Hit, ("duplicate", c.seen + 1, c.limit, ""))
    return None


def stall_near(c: StepInput) -> Hit | None:
    r = c.rules
    if c.stalled and c.stalled >= r.stall_limit - r.stall_warn:
        return _hit(Hit, ("stall", c.stalled + 1, r.stall_limit, ""))
    return None


def tool_cap_near(c: StepInput) -> Hit | None:
    r = c.rules
    if c.tool_calls > r.tool_cap - r.tool_warn:
        return _hit(Hit, ("cap", c.tool_calls, r.tool_cap, "tool cap"))
    return None


def cap_near(c: StepInput) -> Hit | None:
    if c.calls > c.cap - c.rules.cap_warn:
        return _hit(Hit, ("cap", c.calls, c.cap, ""))
    return None


def tracked(config: Config, overrides: Iterable[dict[str, Any]]) -> tuple[bool, bool, bool]:
    """Whether the stall rule counts results; whether every keyed call is tracked (the counting block of
    `Guard.check`): the stall, cycle, reworded or unchanged rule counts every call, or a repeat may be a poll; and
    whether the unchanged rule is on, which counts the calls that may write — each on in the config or a tool's
    overrides."""
    overrides = list(overrides)

    def on(key: str, value: int) -> bool:
        return bool(value) or any(o.get(key) for o in overrides)

    stall = on("stallLimit", config.stall_limit)
    unchanged = on("unchangedLimit", config.unchanged_limit)
    tracking = stall or on("cycleLimit", config.cycle_limit) or on("pollLimit", config.poll_limit)
    return stall, tracking or unchanged or on("rewordLimit", config.reword_limit), unchanged


class Step(NamedTuple):
    """A rule's step: its name, whether it is on for a tool's rules, and the step."""

    name: str
    on: Callable[[ToolRules], Any]
    judge: Callable[[StepInput], Hit | None]


# The order the rules deny in: the first that objects denies the call. The cap is judged before the call is keyed
# (a capped agent's calls cost no hashing); the others once it is, after the cycle and stall rules have counted it.
DENY_ORDER: tuple[Step, ...] = (
    Step("cap", lambda r: True, cap),
    Step("duplicate", lambda r: True, duplicate),
    Step("repeat", lambda r: r.rep_limit, repeat),
    Step("poll", lambda r: r.poll_limit, poll),
    Step("cycle", lambda r: r.cycle_limit, cycle),
    Step("stall", lambda r: r.stall_limit, stall),
    Step("reworded", lambda r: r.reword_limit, reworded),
    Step("unchanged", lambda r: r.unchanged_limit, unchanged),  # last: it denies what no other rule does
)
# The order they warn in, on a call they all allow: the rule whose deny would come first speaks.
WARN_ORDER: tuple[Step, ...] = (
    Step("repeat", lambda r: r.rep_warn, repeat_near),
    Step("poll", lambda r: r.poll_limit and r.rep_warn, poll_near),
    Step("reworded", lambda r: r.reword_warn, reworded_near),
    Step("cycle", lambda r: r.cycle_warn, cycle_near),
    Step("duplicate", lambda r: r.dup_warn, duplicate_near),
    Step("stall", lambda r: r.stall_warn, stall_near),
    Step("unchanged", lambda r: r.unchanged_warn, unchanged_near),
    Step("tool cap", lambda r: r.tool_warn, tool_cap_near),
    Step("cap", lambda r: r.cap_warn, cap_near),
)


class ToolRules:
    """The limits one tool's calls are judged by — the config's, with the tool's overrides on top — and the steps
    that are on for them, in order."""

    allowed: tuple[Verdict, ...]
    shared: int
    cap_warn: int
    counts_tool: bool
    count_writes: bool
    cycle_limit: int
    cycle_warn: int
    dup_limit: int
    dup_warn: int
    rep_limit: int
    rep_near: int
    rep_warn: int
    runs: bool
    poll_gap: int
    poll_limit: int
    reword_limit: int
    reword_warn: int
    searches: bool
    stall_limit: int
    stall_writes: bool
    stall_warn: int
    tallies: bool
    tool_cap: int
    tool_warn: int
    unchanged_limit: int
    unchanged_warn: int
    writes: bool
    progress: bool
    wait_tool: bool

    __slots__ = (
        "allowed",
        "cap_warn",
        "count_writes",
        "counts_tool",
        "cycle_limit",
        "cycle_warn",
        "denies",
        "dup_limit",
        "dup_warn",
        "judged",
        "name",
        "poll_gap",
        "poll_limit",
        "progress",
        "rep_limit",
        "rep_near",
        "rep_warn",
        "reword_limit",
        "reword_warn",
        "runs",
        "searches",
        "shared",
        "stall_limit",
        "stall_warn",
        "stall_writes",
        "tallies",
        "tool_cap",
        "tool_warn",
        "unchanged_limit",
        "unchanged_warn",
        "wait_tool",
        "warns",
        "writes",
    )

    def __init__(
        self, config: Config, name: str, judged: bool, overrides: dict[str, Any], count_writes: bool = False
    ) -> None:
        self.judged = judged
        self.wait_tool = False  # its name as called says it waits (breaker/normalise.py: wait_tool); set by the engine
        self.name = name  # the tool's class name (case, `_` and `-` ignored), as exempt compares
        self.dup_limit = overrides.get("duplicateLimit", config.duplicate_limit)
        self.dup_warn = overrides.get("duplicateWarn", config.duplicate_warn)
        # the verdict of an allowed call no rule warned of, by the identical calls before it (`seen`): one shared,
        # immutable verdict each, so that the allowed path builds none (the call's key is `Guard.checked_key`)
        self.allowed = tuple(
            Verdict(True, None, "", seen + 1, self.dup_limit, False, True) for seen in range(min(self.dup_limit, 64))
        )
        self.shared = len(self.allowed)  # (below it, `allowed[seen]`)
        self.rep_limit = overrides.get("repeatLimit", config.repeat_limit)
        self.rep_warn = min(overrides.get("repeatWarn", config.repeat_warn), self.rep_limit)  # 0 while it is off
        self.rep_near = self.rep_limit - self.rep_warn if self.rep_limit else sys.maxsize  # calls in a row it warns at
        self.poll_gap = overrides.get("pollGap", config.poll_gap)
        self.poll_limit = overrides.get("pollLimit", config.poll_limit) if self.rep_limit else 0  # repeat's, slower
        self.reword_limit = overrides.get("rewordLimit", config.reword_limit)
        self.reword_warn = min(overrides.get("rewordWarn", config.reword_warn), self.reword_limit)
        self.searches = searches(name)  # its string args are words (breaker/normalise.py)
        self.unchanged_limit = overrides.get("unchangedLimit", config.unchanged_limit)
        self.unchanged_warn = min(overrides.get("unchangedWarn", config.unchanged_warn), self.unchanged_limit)
        # the unchanged rule is on for some tool: each call says whether it may write (its name says so, or
        # a command among its args that is not known to only read: breaker/normalise.py)
        self.count_writes = count_writes
        self.writes = count_writes and writes(name)
        self.runs = count_writes and not self.writes and runs(name)  # its args are asked whether they write
        # a tool that writes answers the same acknowledgement whatever it wrote: no stall, unless it says so itself
        stall = 0 if writes(name) else min(config.stall_limit, SEARCH_STALL) if searches(name) else config.stall_limit
        self.stall_limit = overrides.get("stallLimit", stall)
        # a call that may write answers with what it did: the stall rule counts it only when the tool's own
        # stallLimit asks (Guard.result)
        self.stall_writes = "stallLimit" in overrides
        self.stall_warn = min(overrides.get("stallWarn", config.stall_warn), self.stall_limit)
        self.tool_cap = overrides.get("maxCalls", 0)
        self.tool_warn = min(overrides.get("maxCallsWarn", 0), self.tool_cap)
        # the identical write again answering otherwise is the first write's effect (the text it replaced is gone),
        # not progress: a tool that writes has none, unless it says so itself
        self.progress = overrides.get("progress", config.progress and not writes(name))
        self.cycle_limit = config.cycle_limit
        self.cycle_warn = config.cycle_warn if config.cycle_limit else 0  # each rule warns only while it is on
        self.cap_warn = min(config.cap_warn, config.max_calls_per_agent)
        self.counts_tool = bool(self.tool_cap or self.tool_warn)  # its calls are counted, for a per-tool cap
        # what an allowed call leaves to the steps after it is recorded even when it nears no other limit
        self.tallies = bool(self.counts_tool or self.cap_warn)
        # the steps after the cap's, as this tool's limits turn them on
        self.denies = tuple(step.judge for step in DENY_ORDER[1:] if step.on(self))
        self.warns = tuple(step.judge for step in WARN_ORDER if step.on(self))
