"""The agents table: one row per agent, most dangerous first, reconciled by row key."""

from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text
from textual.message import Message
from textual.widgets import DataTable

from console.state import Agent
from console.widgets.cells import age, clip, gauge, plain, ratio_color, sparkline, status_text
from console.widgets.rows import KeyedTable, keyed

__all__ = ["AGENT_WIDTH", "STATUS_WIDTH", "TOOL_WIDTH", "AgentsTable"]

AGENT_WIDTH = 24
TOOL_WIDTH = 13
STATUS_WIDTH = 18  # "warned · duplicate"


class AgentsTable(KeyedTable):
    """Agents with live counts, keyed by agent id. The cursor follows the selected agent, not a row index."""

    DEFAULT_CSS = """
    AgentsTable { height: 1fr; }
    AgentsTable > .datatable--cursor { text-style: bold; }
    """
    # What matters most first: at 80 columns the operator sees who, its status and how close it is to each
    # limit; the harness and parent (also in the detail line under the table) come last.
    COLUMNS = (
        ("mark", " ", 1),
        ("agent", "agent", AGENT_WIDTH),
        ("status", "status", STATUS_WIDTH),  # the status word itself, and for `warned` the rule that warned
        ("calls", "calls", 5),
        ("worst", "worst repeat", 12),
        ("cap", "cap", 8),
        ("window", "window", 8),
        ("tool", "last tool", TOOL_WIDTH),
        ("age", "age", 5),
        ("rate", "calls/s", 12),
        ("harness", "harness", 10),
        ("parent", "parent", 10),
    )
    KEY_COLUMN = "agent"

    def render_row(self, agent: Agent, now: float, marked: bool, colors: Mapping[str, str]) -> tuple[Text, ...]:
        d = agent.data
        cap = d.cap
        calls = d.calls
        if cap:
            cap_cell = Text(f"{calls}/{cap}", style=ratio_color(calls / cap, colors) if calls / cap >= 0.5 else "")
        else:
            cap_cell = Text(f"{calls}/∞", style="dim")
        last_seen = d.last_seen
        rate_color = colors["ok"] if d.status == "ok" else colors["warn"] if d.status == "warned" else colors["trip"]
        return (
            Text("●" if marked else " ", style=colors["warn"]),
            keyed(plain(clip(agent.id, AGENT_WIDTH)), agent.id),
            status_text(d.status, d.rule, colors),
            Text(str(calls), justify="right"),
            gauge(d.worst_count, d.duplicate_limit or 1, colors, width=4),
            cap_cell,
            Text(f"{d.window_fill}/{d.window}", style="dim" if not d.window_fill else ""),
            plain(clip(d.last_tool, TOOL_WIDTH)),
            age(now - last_seen if last_seen else None),
            sparkline(agent.rate, rate_color),
            plain(clip(d.harness, 10)),
            plain(clip(d.parent or "", 10), style=colors["muted"]),
        )

    def reconcile(self, agents: list[Agent], now: float, marked: set[str], colors: Mapping[str, str]) -> None:
        """Make the table show `agents` in this order, touching only what changed."""
        by_id = {a.id: a for a in agents}
        palette = tuple(colors.values())
        rows = [
            (
                a.id,
                (
                    a.version,
                    a.id in marked,
                    int(now - a.data.last_seen) if a.data.last_seen else None,  # ages show whole seconds
                    tuple(a.rate),
                    palette,
                ),
            )
            for a in agents
        ]
        self.show_rows(rows, lambda key: self.render_row(by_id[key], now, key in marked, colors))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        # KeyedTable's handler (which Textual calls too) keeps `selected`.
        self.post_message(self.Selected(event.row_key.value))

    class Selected(Message):
        """The operator moved to another agent (the detail line follows at once, not at the next tick)."""

        def __init__(self, agent: str | None) -> None:
            super().__init__()
            self.agent = agent
