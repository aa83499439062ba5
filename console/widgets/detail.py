"""The selected agent in full: id, parent, harness, its worst repeated call, why it is stopped."""

from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text
from textual.widgets import Static

from console.state import Agent
from console.widgets.cells import plain

__all__ = ["AgentDetail"]


class AgentDetail(Static):
    """Two lines under the agents table for the selected agent (the table clips ids; this does not)."""

    DEFAULT_CSS = """
    AgentDetail { height: 2; padding: 0 1; background: $boost; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def show(self, agent: Agent | None, marked: int, colors: Mapping[str, str]) -> None:
        if agent is None:
            self.update(Text("no agent selected — agents appear here when a harness asks the guard", style="dim"))
            return
        d = agent.data
        top = Text(no_wrap=True, overflow="ellipsis")
        top.append_text(plain(agent.id, style="bold"))
        if d.parent:
            top.append("  child of ", style=colors["muted"])
            top.append_text(plain(d.parent))
        if d.harness:
            top.append("  via ", style=colors["muted"])
            top.append_text(plain(d.harness))
        if d.denies:  # every denied call of this agent, by kind
            top.append("  denies ", style=colors["muted"])
            top.append_text(plain(", ".join(f"{k} {v:,}" for k, v in sorted(d.denies.items())), style=colors["trip"]))
        if marked:
            top.append(f"  ({marked} marked)", style=colors["warn"])
        bottom = Text(no_wrap=True, overflow="ellipsis")
        if d.interrupt_reason is not None:
            bottom.append("interrupted: ", style=colors["interrupted"])
            bottom.append_text(plain(d.interrupt_reason or "by the operator"))
            bottom.append("   ")
        if d.worst_preview:
            bottom.append(f"worst repeat {d.worst_count}×: ", style=colors["muted"])
            bottom.append_text(plain(d.worst_preview))
        else:
            bottom.append("no repeated call in its window", style="dim")
        text = Text("\n").join([top, bottom])
        text.no_wrap, text.overflow = True, "ellipsis"
        self.update(text)
