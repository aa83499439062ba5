"""The agents table's columns: their keys, labels and widths, which of them fit a width, and an agent's cells."""

from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text

from console.state import ConsoleAgent
from console.widgets.cells import age, clip, gauge, plain, ratio_color, sparkline, status_text

__all__ = [
    "AGENT_MIN_WIDTH",
    "AGENT_WIDTH",
    "ALWAYS",
    "COLUMNS",
    "FLEET_ROOM_ORDER",
    "GUARD_WIDTH",
    "PADDING",
    "ROOM_ORDER",
    "STATUS_WIDTH",
    "TOOL_WIDTH",
    "agent_cell",
    "agent_cells",
    "fit_columns",
]

AGENT_WIDTH = 24
AGENT_MIN_WIDTH = 16  # an id cut to 16 still shows both ends (clip keeps them); narrower, ids blur together
TOOL_WIDTH = 13
STATUS_WIDTH = 18  # "warned · duplicate"
PADDING = 1  # blank cells each side of a column, as DataTable has

# Who, its status and how close its worst repeat is to the limit: shown at any width.
ALWAYS = ("mark", "agent", "status", "worst")
# What gets room next, in this order; on a narrowing terminal the last goes first. `cap` (calls against
# maxCallsPerAgent, which also says the calls) is the other limit; then the id in full ("agent"); `calls`
# alone; the last tool (what it is doing); the age of its last call (whether it still runs); the window's
# fill; the calls/s sparkline; harness and parent, which the detail line shows anyway.
ROOM_ORDER = ("cap", "agent", "calls", "tool", "age", "window", "rate", "harness", "parent")
# Over several guards, which guard an agent is on comes right after its limits: the same id may run on two.
FLEET_ROOM_ORDER = ("cap", "guard", *ROOM_ORDER[1:])
GUARD_WIDTH = 12


def fit_columns(width: int, padding: int = PADDING, fleet: bool = False) -> tuple[frozenset[str], int]:
    """The columns that fit in `width` cells without scrolling sideways, and the agent column's width.

    ALWAYS are shown (below ~55 cells they scroll); the others are given room in ROOM_ORDER (FLEET_ROOM_ORDER over
    several guards), stopping at the first that does not fit, so a narrower terminal drops the lowest first and
    never skips one."""
    widths = {key: w for key, _label, w in COLUMNS}
    pad = 2 * padding
    agent = AGENT_MIN_WIDTH
    room = width - sum(widths[key] + pad for key in ALWAYS if key != "agent") - (agent + pad)
    shown = set(ALWAYS)
    for key in FLEET_ROOM_ORDER if fleet else ROOM_ORDER:
        if key == "agent":
            grow = max(0, min(AGENT_WIDTH - agent, room))
            agent += grow
            room -= grow
            if agent < AGENT_WIDTH:
                break
            continue
        if widths[key] + pad > room:
            break
        shown.add(key)
        room -= widths[key] + pad
    return frozenset(shown), agent


# (key, header label, width): the table's columns in order
COLUMNS = (
    ("mark", " ", 1),
    ("agent", "agent", AGENT_WIDTH),
    ("status", "status", STATUS_WIDTH),  # the status word itself, and for `warned` the rule that warned
    ("calls", "calls", 5),
    ("worst", "worst repeat", 12),
    ("cap", "cap", 8),
    ("guard", "guard", GUARD_WIDTH),  # over several guards only: the guard's label
    ("window", "window", 8),
    ("tool", "last tool", TOOL_WIDTH),
    ("age", "age", 5),
    ("rate", "calls/s", 12),
    ("harness", "harness", 10),
    ("parent", "parent", 10),
)


def agent_cell(key: str, width: int, glyphs: str = "", context: bool = False) -> Text:
    """The id cut to `width` (the agent column's) less the tree glyphs; dim when shown only as context."""
    cell = plain(clip(key, width - len(glyphs)), style="dim" if context else "")
    if glyphs:
        cell = Text.assemble((glyphs, "dim"), cell, no_wrap=True, overflow="ellipsis")
    return cell


def agent_cells(
    agent: ConsoleAgent,
    now: float,
    marked: bool,
    colors: Mapping[str, str],
    agent_width: int = AGENT_WIDTH,
    glyphs: str = "",
    context: bool = False,
    guard: tuple[str, bool] = ("", True),
) -> tuple[Text, ...]:
    """An agent's cells, one per column in COLUMNS order, its id cut to `agent_width`; `guard`: its guard's label
    and whether it answers."""
    d = agent.data
    cap = d.cap
    calls = d.calls
    if cap:
        cap_cell = Text(f"{calls}/{cap}", style=ratio_color(calls / cap, colors) if calls / cap >= 0.5 else "")
    else:
        cap_cell = Text(f"{calls}/∞", style="dim")
    worst = gauge(d.worst_count, d.duplicate_limit or 1, colors, width=4)
    if d.override:  # the operator gave it limits of its own: the cell of each says so with a `*`
        if "maxCallsPerAgent" in d.override:
            cap_cell.append("*", style=f"bold {colors['warn']}")
        if "duplicateLimit" in d.override:
            worst.append("*", style=f"bold {colors['warn']}")
    last_seen = d.last_seen
    rate_color = colors["ok"] if d.status == "ok" else colors["warn"] if d.status == "warned" else colors["trip"]
    return (
        Text("●" if marked else " ", style=colors["warn"]),
        agent_cell(agent.id, agent_width, glyphs, context),
        status_text(d.status, d.rule, colors),
        Text(str(calls), justify="right"),
        worst,
        cap_cell,
        plain(clip(guard[0], GUARD_WIDTH), style="" if guard[1] else f"strike {colors['muted']}"),
        Text(f"{d.window_fill}/{d.window}", style="dim" if not d.window_fill else ""),
        plain(clip(d.last_tool, TOOL_WIDTH)),
        age(now - last_seen if last_seen else None),
        sparkline(agent.rate, rate_color),
        plain(clip(d.harness, 10)),
        plain(clip(d.parent or "", 10), style=colors["muted"]),
    )
