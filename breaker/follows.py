"""Follows: every agent's last few calls, and the calls of an agent a console follows, pushed to it each tick.

Every agent keeps its last RECENT calls (in its `AgentMeta`), so a console that opens it sees what it was doing; an
agent a console follows keeps its last HISTORY while followed, and they are pushed to its followers as they come."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
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
        """A tick: turn the calls the check put into agents' rings since the last tick into call rows (at most
        RECENT an agent, however fast it called). An identical call after its twin reuses its strings: a looping
        agent costs no preview."""
        fresh, meta = self.fresh, self.meta
        for agent in fresh:
            m = meta.get(agent)
            if m is not None:
                _settle(m)
        fresh.clear()

    def recent(self, agent: str) -> list[CallRow]:
        """`agent`'s last RECENT calls (fewer if it made fewer), oldest first, as call rows."""
        m = self.meta.get(agent)
        if m is None or not m.made:
            return []
        _settle(m)
        ring, at = m.recent, m.made % RECENT
        return ring[at:] + ring[:at] if len(ring) == RECENT else list(ring)

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
        time=now, tool=req.tool, preview=text, decision=_decision(v), count=v.count, limit=v.limit, rule=v.rule or ""
    )


def call_row_from(same: CallRow, now: float, v: Any) -> CallRow:
    """The row of a call identical to `same`'s (its tool and preview), as `v` decided it."""
    return CallRow(
        time=now,
        tool=same.tool,
        preview=same.preview,
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


def _settle(m: AgentMeta) -> None:
    """Turn `m`'s calls put in since its last settle (the newest, at most RECENT) into call rows."""
    made, ring = m.made, m.recent
    twin: tuple[Check, Any, CallRow] | None = None  # the call before, while it is one of this settle's
    for n in range(max(m.settled, made - RECENT), made):
        now, req, v, judged = ring[n % RECENT]
        if (
            twin is not None
            and v.key is not None
            and v.key == twin[1].key
            and judged is None
            and req.tool == twin[0].tool
            and req.args == twin[0].args
        ):  # the same call again (a loop): its strings are its twin's
            row = call_row_from(twin[2], now, v)
        else:
            row = call_row(now, req, v, judged)
        ring[n % RECENT] = row
        twin = (req, v, row)
    m.settled = made
