"""The operator's actions on agents, shared by the main screen and the drill-down: each asks before it
changes what is not undone by a key (interrupt, exempt), then sends the op and says what happened."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from rich.text import Text
from textual.screen import Screen

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

    async def ask(self, what: str, op: Callable[[GuardLink], Awaitable[T]]) -> T | None:
        """Run an operator op; None (and the operator told why) if there is no guard or it failed."""
        link = self.session.link
        if link is None:
            self.notify("Not connected to a guard yet.", severity="warning")
            return None
        try:
            return await op(link)
        except LinkError as exc:
            self.notify(str(exc), title=f"{what} failed", severity="error")
            return None

    def interrupt(self, agents: list[str], done: Callable[[], Any] | None = None) -> None:
        """Confirm, then interrupt `agents`; `done()` after they all were."""
        if not agents:
            self.notify("Select an agent first (or mark some with space).", severity="warning")
            return
        body = Text(f"Stop {len(agents)} agent{'s' if len(agents) > 1 else ''}:\n")
        body.append_text(names(agents))
        body.append(
            "\n\nTheir harness is told to stop them where it can (dsh cancels, Claude Code "
            "stops its loop), and every later tool call of theirs is denied."
        )

        async def chosen(choice: str | None) -> None:
            if choice != "yes":
                return
            told = 0
            for agent in agents:
                notified = await self.ask("interrupt", lambda link, a=agent: link.interrupt(a, INTERRUPT_REASON))
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
        for agent in agents:
            await self.ask("uninterrupt", lambda link, a=agent: link.uninterrupt(a))

    async def reset(self, agents: list[str]) -> None:
        for agent in agents:
            if await self.ask("reset", lambda link, a=agent: link.reset(a)) is None:
                return
        if agents:
            self.notify(f"Reset the counts (and any override) of {len(agents)} agent(s).")

    def exempt(self, tool: str | None) -> None:
        """Confirm, then exempt `tool` for every agent (or take its exemption off)."""
        if not tool:
            self.notify("Select an agent or a call first.", severity="warning")
            return
        exempt = list(self.state.exempt)
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
        target = self.state.config.target
        body.append(f"\n\nWritten to {target}." if target else "")

        async def chosen(choice: str | None) -> None:
            if choice != "yes":
                return
            saved = await self.ask("config_set", lambda link: link.config_set({"exempt": new}))
            if saved is None:
                return
            if saved.config is not None:
                self.state.set_config(saved.config)
            self.notify(("Un-exempted " if removing else "Exempted ") + tool)

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
        values = self.state.values

        async def chosen(limits: dict[str, int | None] | None) -> None:
            if not limits:
                return
            own = await self.ask("override", lambda link: link.override(agent, limits))
            if own is None:
                if self.session.link is not None:
                    self.notify(f"The guard no longer tracks {agent}; nothing was changed.", severity="warning")
                return
            said = ", ".join(f"{k} {v}" for k, v in sorted(own.items())) or "the config's limits again"
            self.notify(f"{agent}: {said}.")

        self.screen.app.push_screen(
            OverrideScreen(
                agent,
                shown.data.override,
                {k: values.get(k) for k in ("maxCallsPerAgent", "duplicateLimit")},
                shown.data.calls,
            ),
            chosen,
        )
