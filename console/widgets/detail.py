"""The selected agent in full: who it is, its denies and warnings, why it is stopped, its worst repeated call."""

from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text
from textual.widgets import Static

from console.state import Agent
from console.widgets.cells import by_kind, plain

__all__ = ["AgentDetail", "counts_text"]


def counts_text(label: str, counts: Mapping[str, int], color: str, colors: Mapping[str, str]) -> Text:
    """`denies duplicate 55 · interrupted 12`: the non-zero counts of a kind → count mapping, or nothing."""
    text = Text(no_wrap=True)
    shown = by_kind(counts)
    if not shown:
        return text
    text.append(f"{label} ", style=colors["muted"])
    for i, (kind, n) in enumerate(shown):
        if i:
            text.append(" · ", style=colors["muted"])
        text.append_text(plain(kind, style=color))
        text.append(f" {n:,}", style=color)
    return text


class AgentDetail(Static):
    """Two lines under the agents table for the selected agent (the table clips ids; this does not).

    The first says who it is; the second what the guard did to it — denies by kind, warnings by rule, an
    interrupt's reason — and the call it repeats most, so the counts stay in view at 80 columns."""

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
        if marked:
            top.append(f"  ({marked} marked)", style=colors["warn"])
        bottom = Text(no_wrap=True, overflow="ellipsis")
        # Every denied call of this agent by kind, and every call allowed with a warning by the rule that warned.
        for part in (
            counts_text("denies", d.denies, colors["trip"], colors),
            counts_text("warns", d.warns, colors["warn"], colors),
        ):
            if part:
                bottom.append_text(part)
                bottom.append("   ")
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
