"""The selected agent in full: who it is, its denies and warnings, why it is stopped, its worst repeated call,
and what the agents table has no room for."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from rich.text import Text
from textual.widgets import Static

from console.state import ConsoleAgent
from console.widgets.cells import age, by_kind, own_limits, plain, sparkline

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

    The first says who it is (its parent and harness too, the table's last columns); the second what the
    guard did to it — denies by kind, warnings by rule, an interrupt's reason — and the call it repeats
    most, so the counts stay in view at 80 columns. A third, when the table hides columns for want of
    width, shows theirs: `hidden` is their keys."""

    DEFAULT_CSS = """
    AgentDetail {
        height: auto; min-height: 2; padding: 0 1; background: $boost; text-wrap: nowrap; text-overflow: ellipsis;
    }
    """
    _lines = 0  # the lines shown: when their number changes, so does the height

    def show(
        self,
        agent: ConsoleAgent | None,
        marked: int,
        colors: Mapping[str, str],
        *,
        hidden: Collection[str],
        now: float,
        guard: str = "",
    ) -> None:
        """Who the agent is (on `guard`, over several guards), its denies, warnings and worst repeat, and the
        columns the table hides."""
        if agent is None:
            self.update(Text("no agent selected — agents appear here when a harness asks the guard", style="dim"))
            self._lines = 1
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
        if guard:
            top.append("  on ", style=colors["muted"])
            top.append_text(plain(guard, style="bold"))
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
        if d.override:
            bottom.append_text(own_limits(d.override, colors))
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
        lines = [top, bottom]
        if more := self._hidden_columns(agent, hidden, now, colors):
            lines.append(more)
        text = Text("\n").join(lines)
        text.no_wrap, text.overflow = True, "ellipsis"
        self.update(text, layout=len(lines) != self._lines)  # its height is its lines': laid out when they change
        self._lines = len(lines)

    @staticmethod
    def _hidden_columns(agent: ConsoleAgent, hidden: Collection[str], now: float, colors: Mapping[str, str]) -> Text:
        """The hidden columns of the agents table (harness and parent are on the first line), in its words."""
        d = agent.data
        parts: list[tuple[str, Text]] = []
        if "cap" in hidden:  # the cap column says the calls too
            parts.append(("calls", Text(f"{d.calls}/{d.cap or '∞'}")))
        elif "calls" in hidden:
            parts.append(("calls", Text(str(d.calls))))
        if "window" in hidden:
            parts.append(("window", Text(f"{d.window_fill}/{d.window}")))
        if "tool" in hidden:
            parts.append(("last tool", plain(d.last_tool or "-")))
        if "age" in hidden:
            parts.append(("age", age(now - d.last_seen if d.last_seen else None)))
        if "rate" in hidden:
            parts.append(("calls/s", sparkline(agent.rate, colors["muted"])))
        text = Text(no_wrap=True, overflow="ellipsis")
        for i, (label, value) in enumerate(parts):
            text.append("   " if i else "")
            text.append(f"{label} ", style=colors["muted"])
            text.append_text(value)
        return text
