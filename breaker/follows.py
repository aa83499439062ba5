"""Follows: the calls of an agent a console follows, kept while someone follows it and pushed to them each tick."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from breaker.channel import Channel
from breaker.engine import Guard
from breaker.keys import Judged, preview
from breaker.protocol import CallRow, CallsEvent, Check, Done, ErrorReply, Follow, Unfollow
from breaker.vocab import Outcome

__all__ = ["FOLLOW_KEYS", "HISTORY", "MAX_FOLLOWED", "Followed", "Follows"]

HISTORY = 200  # calls kept per followed agent (only agents a console follows have a history)
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

    def __init__(self, guard: Guard, woken: set[Channel]) -> None:
        self.guard = guard
        self.woken = woken
        self.agents: dict[str, Followed] = {}

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
        if followed is None:
            followed = self.agents[agent] = Followed()
        followed.channels.add(ch)
        ch.following = agent
        ch.follow_seq = -1  # the next tick sends its history and keys
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
        decision: Outcome
        if not v.allowed:
            decision = "deny"
        elif v.warning:
            decision = "warn"
        else:
            decision = "allow" if v.counted else "pass"
        if req.args_unserializable or (judged is not None and judged.key is None):
            text = "(args that could not be serialized)"
        else:
            text = judged.preview if judged is not None else preview(req.tool, req.args)
        followed.calls.append(
            CallRow(
                time=now,
                tool=req.tool,
                preview=text,
                decision=decision,
                count=v.count,
                limit=v.limit,
                rule=v.rule or "",
            )
        )
        followed.seq += 1

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
                event = CallsEvent(agent=agent, calls=calls, keys=rows, distinct=keys[1], dropped=dropped)
                ch.urgent.append(event.encode())
                ch.follow_seq = followed.seq
                self.woken.add(ch)
