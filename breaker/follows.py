"""Follows: every agent's last few calls, and the calls of an agent a console follows, pushed to it each tick.

Every agent keeps its last RECENT calls (in its `AgentMeta`), so a console that opens it sees what it was doing; an
agent a console follows keeps its last HISTORY while followed, and they are pushed to its followers as they come."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from sys import intern
from typing import Any

from breaker.channel import AgentMeta, Channel
from breaker.engine import Guard
from breaker.keys import Judged, preview
from breaker.protocol import CallRow, CallsEvent, Check, Done, ErrorReply, Follow, Unfollow
from breaker.vocab import Outcome

__all__ = ["FOLLOW_KEYS", "HISTORY", "MAX_FOLLOWED", "RECENT", "Followed", "Follows", "call_row"]

RECENT = 20  # calls kept of every agent, followed or not: what a console that opens it sees at once
HISTORY = 200  # calls kept per followed agent (only agents a console follows have a history this long)
MAX_FOLLOWED = 64  # agents followed at once, across every connection: history memory is at most 64 x 200 calls
FOLLOW_KEYS = 20  # repeated keys of its window sent with a followed agent's calls


@dataclass(slots=True)
class Followed:
    """A followed agent's last HISTORY calls and the connections following it."""

    calls: deque[CallRow] = field(default_factory=lambda: deque(maxlen=HISTORY))
    seq: int = 0  # calls recorded since the follow began (the number of the last one)
    channels: set[Channel] = field(default_factory=set)


class Follows:
    """Every followed agent (`agents`, by id) and the `follow`/`unfollow` ops. Events go to the
    connections' urgent output; `woken` is the session's set of connections with output to write."""

    def __init__(self, guard: Guard, woken: set[Channel], meta: dict[str, AgentMeta]) -> None:
        self.guard = guard
        self.woken = woken
        self.meta = meta
        self.agents: dict[str, Followed] = {}
        self.fresh: set[str] = set()  # agents whose recent calls the check put in since the last `settle`

    def follow(self, ch: Channel, req: Follow) -> bytes:
        agent = req.agent
        followed = self.agents.get(agent)
        if followed is None:
            mine = self.agents.get(ch.following) if ch.following is not None else None
            freed = mine is not None and mine.channels == {ch}  # replacing its own follow frees one
            if len(self.agents) - freed >= MAX_FOLLOWED:
                return ErrorReply("limit", f"{MAX_FOLLOWED} agents are followed already; unfollow one first").encode(
                    req.id
                )
        self.stop(ch)
        followed = self.agents.get(agent)  # (following the agent it followed alone: stop() let it go)
        if followed is None:  # its history starts with its recent calls: the follower sees what it was doing
            followed = self.agents[agent] = Followed()
            followed.calls.extend(self.recent(agent))
            followed.seq = len(followed.calls)
        followed.channels.add(ch)
        ch.following = agent
        ch.follow_seq = -1  # the next tick sends its history and keys
        ch.follow_base = followed.seq
        return Done(known=self.guard.known(agent), history=HISTORY).encode(req.id)

    def unfollow(self, ch: Channel, req: Unfollow) -> bytes:
        self.stop(ch)
        return Done().encode(req.id)

    def stop(self, ch: Channel) -> None:
        """`ch` follows nobody any more (it unfollowed, followed another agent, or is gone)."""
        agent, ch.following = ch.following, None
        if agent is None:
            return
        followed = self.agents.get(agent)
        if followed is not None:
            followed.channels.discard(ch)
            if not followed.channels:
                del self.agents[agent]  # nobody follows it: its history goes

    @staticmethod
    def record(followed: Followed, req: Check, v: Any, now: float, judged: Judged | None = None) -> None:
        """One call of a followed agent (`v`: the engine's verdict), into its history."""
        followed.calls.append(call_row(now, req, v, judged))
        followed.seq += 1

    # -- every agent's recent calls ---------------------------------------------------------------

    def settle(self) -> None:
        """A tick: look at the calls the check put into agents' rings since the last tick (at most RECENT an
        agent, however fast it called). A call with a few short args is kept as it is (its row is made when a
        console opens the agent: no preview is built for calls nobody looks at); any other is made a row now, so
        that no agent's ring holds large args."""
        fresh, meta = self.fresh, self.meta
        for agent in fresh:
            m = meta.get(agent)
            if m is not None:
                _settle(m)
        fresh.clear()

    def recent(self, agent: str) -> list[CallRow]:
        """`agent`'s last RECENT calls (fewer if it made fewer), oldest first, as call rows (kept as rows from now)."""
        m = self.meta.get(agent)
        if m is None or not m.made:
            return []
        _settle(m)
        ring, at = m.recent, m.made % RECENT
        ordered = ring[at:] + ring[:at] if len(ring) == RECENT else ring[:]
        rows: list[CallRow] = []
        twin: tuple[Kept, CallRow] | None = None  # the call kept as it was just before, and its row
        for e in ordered:
            if type(e) is CallRow:
                rows.append(e)
                twin = None
                continue
            now, tool, args, decision, count, limit, rule = e
            if twin is not None and tool == twin[0][1] and args == twin[0][2]:
                text = twin[1].preview  # the same call again (a loop): the same string (its args are a few values)
            else:
                text = preview(tool, args)
            row = CallRow(time=now, tool=tool, preview=text, decision=decision, count=count, limit=limit, rule=rule)
            rows.append(row)
            twin = (e, row)
        ring[:] = rows[RECENT - at :] + rows[: RECENT - at] if len(ring) == RECENT else rows
        return rows

    def push(self, changed: set[str]) -> None:
        """A tick: each following connection gets its agent's calls since the last push (and its window's
        repeated keys when they may have changed). One that reads nothing is skipped; later it gets the
        last HISTORY calls and how many it missed."""
        guard = self.guard
        for agent, followed in self.agents.items():
            keys: tuple[list[Any], int] | None = None
            for ch in followed.channels:
                if ch.backlog_high or ch.closing:
                    continue
                fresh = ch.follow_seq < 0
                new = followed.seq - max(ch.follow_seq, 0) if not fresh else len(followed.calls)
                if not new and agent not in changed and not fresh:
                    continue
                kept = len(followed.calls)
                calls = list(followed.calls)[kept - min(new, kept) :] if new else []
                if keys is None:
                    keys = guard.window_keys(agent, FOLLOW_KEYS)
                rows = keys[0]
                dropped = 0 if fresh else max(0, new - kept)
                earlier = max(0, len(calls) - (followed.seq - ch.follow_base)) if fresh else 0
                event = CallsEvent(
                    agent=agent, calls=calls, keys=rows, distinct=keys[1], dropped=dropped, earlier=earlier
                )
                ch.urgent.append(event.encode())
                ch.follow_seq = followed.seq
                self.woken.add(ch)


def call_row(now: float, req: Check, v: Any, judged: Judged | None) -> CallRow:
    """A call as the guard decided it (`v`: the engine's verdict; `judged`: its args as the judge read them)."""
    if req.args_unserializable or (judged is not None and judged.key is None):
        text = "(args that could not be serialized)"
    else:
        text = judged.preview if judged is not None else preview(req.tool, req.args)
    return CallRow(
        time=now,
        tool=intern(req.tool),
        preview=text,
        decision=_decision(v),
        count=v.count,
        limit=v.limit,
        rule=v.rule or "",
    )


def _decision(v: Any) -> Outcome:
    """How the engine's verdict `v` went, in a call row's words."""
    if not v.allowed:
        return "deny"
    if v.warning:
        return "warn"
    return "allow" if v.counted else "pass"


# A call kept as it was until someone looks: time, tool, args, decision, count, limit, rule.
Kept = tuple[float, str, Any, Outcome, int, int, str]


def _settle(m: AgentMeta) -> None:
    """`m`'s calls put in since its last settle (the newest, at most RECENT): each kept as it was (`Kept`: no
    request, no verdict, the tool's name shared) when its args are a few short values (`_small`), else made a
    call row. Either costs a few hundred bytes."""
    made, ring = m.made, m.recent
    for n in range(max(m.settled, made - RECENT), made):
        at = n % RECENT
        now, req, v, judged = ring[at]
        args = req.args
        if judged is None and not req.args_unserializable and (args is None or _small(args)):
            allowed, _, _, count, limit, _, counted, _, warning, rule = v  # a Verdict, unpacked in one step
            decision: Outcome = ("warn" if warning else "allow" if counted else "pass") if allowed else "deny"
            kept: Kept = (now, intern(req.tool), args, decision, count, limit, rule or "")
            ring[at] = kept
        else:
            ring[at] = call_row(now, req, v, judged)
    m.settled = made


def _small(args: Any) -> bool:
    """Args (not None) that cost about what their preview would to keep: at most 4 values, each a string of at most
    200 characters or a number, a boolean or null (a client's integer may be of any size: at most 64 bits here)."""
    if type(args) is not dict or len(args) > 4:
        return False
    for x in args.values():
        t = type(x)
        if t is str:
            if len(x) > 200:
                return False
        elif t is int:
            if x.bit_length() > 64:
                return False
        elif t is not float and t is not bool and x is not None:
            return False
    return True
