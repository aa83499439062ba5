"""The operator's actions on agents, shared by the main screen and the drill-down: each asks before it
changes what is not undone by a key (interrupt, exempt), then sends the op and says what happened."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from rich.text import Text
from textual.screen import Screen

from console.inert import inert
from console.link import GuardLink, LinkError
from console.screens.confirm import Choice, ConfirmScreen
from console.screens.override import OverrideScreen
from console.session import GuardSession
from console.state import ConsoleState
from console.widgets.cells import plain

__all__ = ["INTERRUPT_REASON", "Actions", "names"]

T = TypeVar("T")

INTERRUPT_REASON = "interrupted by the operator from cbconsole"


def names(agents: Iterable[str]) -> Text:
    """A bulleted list of agent ids, as plain text."""
    text = Text()
    for i, agent in enumerate(agents):
        text.append("\n  • " if i else "  • ")
        text.append_text(plain(agent))
    return text


class Actions:
    """The actions, for one screen: its notices and dialogs, the session's link, the console's state."""

    def __init__(self, screen: Screen[Any], session: GuardSession, state: ConsoleState) -> None:
        self.screen, self.session, self.state = screen, session, state

    def notify(self, message: str, *, title: str = "", severity: str = "information") -> None:
        self.screen.notify(message, title=title, severity=severity, markup=False)  # type: ignore[arg-type]

    async def ask(self, what: str, op: Callable[[GuardLink], Awaitable[T]], guard: int = 0) -> T | None:
        """Run an operator op on guard number `guard`; None (and the operator told why) if it is not reached or
        the op failed."""
        link = self.session.link_for(guard)
        if link is None:
            self.notify("Not connected to a guard yet.", severity="warning")
            return None
        try:
            return await op(link)
        except LinkError as exc:
            where = f" on {inert(self.state.guards[guard].label)}" if self.state.fleet else ""
            self.notify(str(exc), title=f"{what}{where} failed", severity="error")
            return None

    def target(self, key: str) -> tuple[str, int]:
        """Agent `key`'s own id and the number of the guard that knows it: where an op on it goes."""
        agent = self.state.agents.get(key)
        return (agent.id, agent.guard) if agent is not None else (key, 0)

    def names(self, agents: Iterable[str]) -> Text:
        return names(self.state.name_of(a) for a in agents)

    def interrupt(self, agents: list[str], done: Callable[[], Any] | None = None) -> None:
        """Confirm, then interrupt `agents`; `done()` after they all were."""
        if not agents:
            self.notify("Select an agent first (or mark some with space).", severity="warning")
            return
        body = Text(f"Stop {len(agents)} agent{'s' if len(agents) > 1 else ''}:\n")
        body.append_text(self.names(agents))
        body.append(
            "\n\nTheir harness is told to stop them where it can (dsh cancels, Claude Code "
            "stops its loop), and every later tool call of theirs is denied."
        )

        async def chosen(choice: str | None) -> None:
            if choice != "yes":
                return
            told = 0
            for key in agents:
                agent, guard = self.target(key)
                notified = await self.ask(
                    "interrupt", lambda link, a=agent: link.interrupt(a, INTERRUPT_REASON), guard=guard
                )
                if notified is None:
                    return
                told += notified
            if done is not None:
                done()
            self.notify(f"Interrupted {len(agents)} agent(s); {told} harness connection(s) told.")

        self.screen.app.push_screen(
            ConfirmScreen(
                "Interrupt agents?",
                body,
                [Choice("no", "Cancel", key="n"), Choice("yes", "Interrupt", "error", key="y")],
            ),
            chosen,
        )

    async def uninterrupt(self, agents: list[str]) -> None:
        for key in agents:
            agent, guard = self.target(key)
            await self.ask("uninterrupt", lambda link, a=agent: link.uninterrupt(a), guard=guard)

    async def reset(self, agents: list[str]) -> None:
        for key in agents:
            agent, guard = self.target(key)
            if await self.ask("reset", lambda link, a=agent: link.reset(a), guard=guard) is None:
                return
        if agents:
            self.notify(f"Reset the counts (and any override) of {len(agents)} agent(s).")

    def exempt(self, tool: str | None, guard: int = 0) -> None:
        """Confirm, then exempt `tool` for every agent of guard number `guard` (or take its exemption off)."""
        if not tool:
            self.notify("Select an agent or a call first.", severity="warning")
            return
        view = self.state.guards[guard]
        exempt = list(view.exempt)
        removing = tool in exempt
        new = [t for t in exempt if t != tool] if removing else [*exempt, tool]
        body = Text()
        body.append("Un-exempt " if removing else "Exempt ")
        body.append_text(plain(tool, style="bold"))
        body.append(
            ": the guard will judge it again for every agent."
            if removing
            else ": the guard will stop judging it for every agent (never denied, never counted)."
        )
        if self.state.fleet:
            body.append("\n\nOn the guard ")
            body.append_text(plain(view.label, style="bold"))
            body.append(" only.")
        target = view.config.target
        if target:
            body.append("\n\nWritten to ")
            body.append_text(plain(target))
            body.append(".")

        async def chosen(choice: str | None) -> None:
            if choice != "yes":
                return
            saved = await self.ask("config_set", lambda link: link.config_set({"exempt": new}), guard=guard)
            if saved is None:
                return
            if saved.config is not None:
                self.state.set_config(saved.config, guard)
            self.notify(("Un-exempted " if removing else "Exempted ") + inert(tool))

        self.screen.app.push_screen(
            ConfirmScreen(
                "Change exempt tools?",
                body,
                [
                    Choice("no", "Cancel", key="n"),
                    Choice("yes", "Un-exempt" if removing else "Exempt", "warning", key="y"),
                ],
            ),
            chosen,
        )

    def override(self, agent: str | None) -> None:
        """The form for `agent`'s own cap and duplicate limit; sent when applied."""
        shown = self.state.agents.get(agent or "")
        if shown is None or agent is None:
            self.notify("Select an agent first.", severity="warning")
            return
        values = self.state.guards[shown.guard].values
        agent_id, guard, name = shown.id, shown.guard, inert(self.state.name_of(agent))

        async def chosen(limits: dict[str, int | None] | None) -> None:
            if not limits:
                return
            own = await self.ask("override", lambda link: link.override(agent_id, limits), guard=guard)
            if own is None:
                if self.session.link_for(guard) is not None:
                    self.notify(f"The guard no longer tracks {name}; nothing was changed.", severity="warning")
                return
            said = ", ".join(f"{k} {v}" for k, v in sorted(own.items())) or "the config's limits again"
            self.notify(f"{name}: {said}.")

        self.screen.app.push_screen(
            OverrideScreen(
                name,
                shown.data.override,
                {k: values.get(k) for k in ("maxCallsPerAgent", "duplicateLimit")},
                shown.data.calls,
            ),
            chosen,
        )
