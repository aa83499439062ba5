"""The drill-down: one agent in full — its calls as they happen, the calls repeated in its window, its
trips, its parent and subagents — and the actions on it. `escape` goes back to the list."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Static

from breaker.protocol import CallsEvent
from console.actions import Actions
from console.follow import TAIL, FollowState
from console.inert import inert
from console.screens.help import HelpScreen, keys_in_force
from console.session import GuardSession
from console.state import ConsoleState
from console.themes import THEME_VARIABLES
from console.widgets.calls import HEADER, CallTail
from console.widgets.cells import age, clip, gauge, kind_color, own_limits, plain, ratio_color, status_text
from console.widgets.detail import counts_text
from console.widgets.footer import KeysFooter
from console.widgets.line import Line
from console.widgets.rows import update_cells

if TYPE_CHECKING:
    from console.state import ConsoleAgent

__all__ = ["AgentScreen", "family_text", "head_text"]

FLUSH_HZ = 10
MUTATING = frozenset({"interrupt", "uninterrupt", "reset", "exempt", "override"})
KEY_COLUMNS = ("count", "preview")  # the repeated-keys table's columns
FAMILY_SHOWN = 8  # subagents named on the family line; the rest are counted


def head_text(agent: ConsoleAgent | None, agent_id: str, colors: Mapping[str, str], now: float) -> Text:
    """Two lines: who it is and its status; then its counts against the limits in force, its overrides."""
    top = Text(no_wrap=True, overflow="ellipsis")
    top.append_text(plain(agent_id, style="bold"))
    if agent is None:
        top.append("  not tracked by the guard (gone, or no call yet)", style=colors["muted"])
        return top
    d = agent.data
    top.append("  ")
    top.append_text(status_text(d.status, d.rule, colors))
    if d.harness:
        top.append("  via ", style=colors["muted"])
        top.append_text(plain(d.harness))
    top.append("  last call ", style=colors["muted"])
    top.append_text(age(now - d.last_seen if d.last_seen else None))
    top.append(" ago" if d.last_seen else "", style=colors["muted"])
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append("calls ", style=colors["muted"])
    line.append(f"{d.calls:,}/{d.cap:,}" if d.cap else f"{d.calls:,}/∞")
    if d.override:  # the operator's limits for it, next to what they change
        line.append(" (")
        line.append_text(own_limits(d.override, colors))
        line.append(")")
    line.append("   worst repeat ", style=colors["muted"])
    line.append_text(gauge(d.worst_count, d.duplicate_limit or 1, colors, width=6))
    line.append(f"   window {d.window_fill}/{d.window}", style=colors["muted"])
    denies = counts_text("denies", d.denies, colors["trip"], colors)
    for part in (denies, counts_text("warns", d.warns, colors["warn"], colors)):
        if part:
            line.append("   ")
            line.append_text(part)
    if d.interrupt_reason is not None:
        line.append("   interrupted: ", style=colors["interrupted"])
        line.append_text(plain(d.interrupt_reason or "by the operator"))
    return Text("\n").join([top, line])


def family_text(key: str, state: ConsoleState, colors: Mapping[str, str]) -> Text:
    """Its parent and its subagents (agents of its guard), each with its status."""
    agent = state.agents.get(key)
    text = Text(no_wrap=True, overflow="ellipsis")
    parent = agent.data.parent if agent is not None else None
    text.append("parent ", style=colors["muted"])
    if agent is not None and parent:
        text.append_text(plain(clip(parent, 40)))
        shown = state.agents.get(agent.parent_key or "")
        if shown is not None:
            text.append_text(plain(f" ({shown.data.status})", style=kind_color(shown.data.status, colors)))
    else:
        text.append("none (a root session)", style=colors["muted"])
    kids = sorted((a for a in state.agents.values() if a.parent_key == key), key=lambda a: a.id)
    text.append(f"   subagents ({len(kids)}) ", style=colors["muted"])
    for i, kid in enumerate(kids[:FAMILY_SHOWN]):
        text.append(", " if i else "")
        text.append_text(plain(clip(kid.id, 24)))
        text.append_text(plain(f" ({kid.data.status})", style=kind_color(kid.data.status, colors)))
    if len(kids) > FAMILY_SHOWN:
        text.append(f", and {len(kids) - FAMILY_SHOWN} more (t on the list shows them all)", style=colors["muted"])
    if not kids:
        text.append("none", style=colors["muted"])
    return text


class AgentScreen(Screen[None]):
    """One agent: the guard sends its calls while this screen is open (the `follow` op) and stops after."""

    VERTICAL_BREAKPOINTS = [(0, "-tiny"), (20, "-short"), (32, "-tall")]
    BINDINGS = [
        Binding("escape", "back", "Back", id="agent.back", tooltip="Back to the list, on the same agent"),
        Binding("i", "interrupt", "Interrupt", id="agent.interrupt", tooltip="Stop this agent, after confirming"),
        Binding(
            "o", "override", "Override", id="agent.override", tooltip="Give this agent its own cap or duplicate limit"
        ),
        Binding(
            "x",
            "exempt",
            "Exempt tool",
            id="agent.exempt",
            tooltip="Exempt (or un-exempt) the tool of the call or repeated key under the cursor",
        ),
        Binding("r", "reset", "Reset", id="agent.reset", tooltip="Clear this agent's counts and its override"),
        Binding("u", "uninterrupt", "Uninterrupt", id="agent.uninterrupt", show=False, tooltip="Lift its interrupt"),
        Binding("P", "parent", "Parent", id="agent.parent", show=False, tooltip="Open its parent session"),
        Binding("c", "copy_id", "Copy id", id="agent.copy_id", show=False, tooltip="Copy this agent's id"),
        Binding(
            "C",
            "copy_call",
            "Copy call",
            id="agent.copy_call",
            show=False,
            tooltip="Copy the call under the cursor, as one line",
        ),
        Binding("question_mark", "help", "Help", id="agent.help", tooltip="Every key of this screen"),
    ]

    def __init__(
        self,
        agent: str,
        state: ConsoleState,
        session: GuardSession,
        *,
        readonly: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__()
        self.agent = agent  # its key in the console's state
        self.guard, self.agent_id = state.split_key(agent)  # the guard that knows it, and its id there
        self.state = state
        self.session = session
        self.readonly = readonly
        self.clock = clock
        self.follow = FollowState(self.agent_id)
        self.actions = Actions(self, session, state)
        self._drawn: tuple[int, int] = (-1, -1)  # (state version, follow version) last drawn
        self._drawn_at = 0.0
        self._trips_shown = -1
        self._keys_shown: tuple[object, ...] = ()  # what the repeated-keys table shows now (see show_keys)

    def compose(self) -> ComposeResult:
        self.head = Line(id="agent-head")
        self.family = Line(id="agent-family")
        self.calls_title = Line(id="calls-title")
        self.tail = CallTail(self.follow, id="calls")
        self.keys = DataTable(id="agent-keys", cursor_type="row")
        self.keys_title = Line(id="agent-keys-title")
        self.trips = DataTable(id="agent-trips", cursor_type="none")
        yield self.head
        yield self.family
        yield self.calls_title
        yield Static(Text(HEADER), id="calls-header")
        yield self.tail
        with Horizontal(id="agent-bottom"):
            with Vertical(id="agent-keys-box"):
                yield self.keys_title
                yield self.keys
            with Vertical(id="agent-trips-box"):
                yield Static(Text("Its trips"), id="agent-trips-title")
                yield self.trips
        yield KeysFooter()  # help, quit and back stay in view at 80 columns

    async def on_mount(self) -> None:
        self.keys.add_column("n/limit", key="count", width=8)
        self.keys.add_column("call", key="preview")
        self.trips.add_column("time", key="time", width=8)
        self.trips.add_column("kind", key="kind", width=11)
        self.trips.add_column("n/limit", key="count", width=8)
        self.trips.add_column("tool", key="tool")
        self.tail.focus()
        self.set_interval(1 / FLUSH_HZ, self.flush, name="flush")
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self.force_redraw())
        self.flush()
        await self.start_following()

    async def start_following(self) -> None:
        if self.session.link_for(self.guard) is None:
            return
        await self.actions.ask("follow", lambda link: link.follow(self.agent_id, self.on_calls), guard=self.guard)

    def on_calls(self, event: CallsEvent) -> None:
        self.follow.apply(event)

    async def on_unmount(self) -> None:
        link = self.session.link_for(self.guard)
        if link is not None and link.following == self.agent_id:
            try:
                await link.unfollow()
            except Exception:  # the guard went away meanwhile: nothing to stop following
                pass

    def force_redraw(self) -> None:
        self._drawn = (-1, -1)

    def roles(self) -> dict[str, str]:
        variables = self.app.theme_variables
        return {k: variables.get(k, v) for k, v in THEME_VARIABLES.items()}

    # -- drawing ------------------------------------------------------------------------------------

    def flush(self) -> None:
        """Draw (~10 Hz) what changed: the calls as they come, the rest when the state moved."""
        if self.session.ending or not self.app.screen_stack or self.app.screen is not self:
            return
        now = self.clock()
        drawn = (self.state.version, self.follow.version)
        if drawn == self._drawn and now - self._drawn_at < 1.0:
            return
        state_moved = drawn[0] != self._drawn[0] or now - self._drawn_at >= 1.0
        self._drawn, self._drawn_at = drawn, now
        colors = self.roles()
        follow = self.follow
        with self.app.batch_update():
            self.tail.show(colors)
            title = f"Calls — live, newest at the bottom ({follow.since:,} since opened"
            title += f", {follow.earlier:,} from before" if follow.earlier else ""
            title += f"; the last {TAIL} kept" if follow.received > TAIL else ""
            title += f"; {follow.missed:,} missed while behind" if follow.missed else ""
            title += "; end follows the newest)" if self.tail.selected is not None else ")"
            self.calls_title.show(Text(title))
            self.show_keys(colors)
            if state_moved:
                agent = self.state.agents.get(self.agent)
                self.head.show(head_text(agent, self.state.name_of(self.agent), colors, now))
                self.family.show(family_text(self.agent, self.state, colors))
                self.show_trips(colors)

    def show_keys(self, colors: Mapping[str, str]) -> None:
        agent = self.state.agents.get(self.agent)
        limit = agent.data.duplicate_limit if agent is not None else 0
        follow = self.follow
        self.keys_title.show(
            Text(f"Repeated in its window ({follow.distinct:,} distinct call{'s' if follow.distinct != 1 else ''})")
        )
        shown = (tuple((k.count, k.preview) for k in follow.keys), limit, tuple(colors.values()))
        if shown == self._keys_shown:
            return  # the same calls, the same counts: at 1,000 calls/s most pushes change nothing here
        rows = []
        for key in follow.keys:
            ratio = key.count / limit if limit else 0.0
            rows.append((Text(f"{key.count}/{limit}", style=ratio_color(ratio, colors)), plain(key.preview)))
        if len(rows) == self.keys.row_count:  # the same number of rows: rewrite their cells, keep the rows
            cells = [
                (str(i), column, cell)
                for i, row in enumerate(rows)
                for column, cell in zip(KEY_COLUMNS, row, strict=False)
            ]
            update_cells(self.keys, cells)
        else:
            cursor = self.keys.cursor_row
            self.keys.clear()
            for i, (tally, preview) in enumerate(rows):
                self.keys.add_row(tally, preview, key=str(i))
            if rows:
                self.keys.move_cursor(row=min(cursor, len(rows) - 1), animate=False)
        self._keys_shown = shown

    def show_trips(self, colors: Mapping[str, str]) -> None:
        trips = [t for t in self.state.trips if t.agent == self.agent]
        if len(trips) == self._trips_shown:
            return
        self._trips_shown = len(trips)
        self.trips.clear()
        for trip in reversed(trips):
            color = kind_color(trip.kind, colors)
            self.trips.add_row(
                Text(datetime.fromtimestamp(trip.time).strftime("%H:%M:%S"), style=colors["muted"]),
                plain(trip.kind, style=f"bold {color}"),
                Text(f"{trip.count}/{trip.limit}"),
                plain(trip.tool),
            )

    # -- actions ------------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if self.readonly and action in MUTATING:
            return None
        return True

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_interrupt(self) -> None:
        self.actions.interrupt([self.agent])

    async def action_uninterrupt(self) -> None:
        await self.actions.uninterrupt([self.agent])

    async def action_reset(self) -> None:
        await self.actions.reset([self.agent])

    def action_override(self) -> None:
        self.actions.override(self.agent)

    def selected_tool(self) -> str | None:
        """The tool of the repeated key under the cursor (if that table has focus), else of the call under the
        tail's cursor, else the agent's worst (or last) tool."""
        if self.keys.has_focus and self.follow.keys:
            return self.follow.keys[min(self.keys.cursor_row, len(self.follow.keys) - 1)].tool
        if (call := self.tail.current) is not None:
            return call.tool
        agent = self.state.agents.get(self.agent)
        return (agent.data.worst_tool or agent.data.last_tool or None) if agent is not None else None

    def action_exempt(self) -> None:
        self.actions.exempt(self.selected_tool(), self.guard)

    def action_parent(self) -> None:
        agent = self.state.agents.get(self.agent)
        parent = agent.parent_key if agent is not None else None
        if not parent:
            self.notify("This agent has no parent session.", severity="warning", markup=False)
            return
        self.app.switch_screen(AgentScreen(parent, self.state, self.session, readonly=self.readonly, clock=self.clock))

    def action_copy_id(self) -> None:
        shown = inert(self.agent_id)  # what is drawn is what is copied: a pasted id holds no control character
        self.app.copy_to_clipboard(shown)
        self.notify(f"Copied the agent id: {shown}", markup=False)

    def action_copy_call(self) -> None:
        call = self.tail.current
        if self.keys.has_focus and self.follow.keys:
            preview = self.follow.keys[min(self.keys.cursor_row, len(self.follow.keys) - 1)].preview
        elif call is not None:
            preview = call.preview
        else:
            self.notify("No call to copy yet.", severity="warning", markup=False)
            return
        self.app.copy_to_clipboard(inert(preview))
        self.notify(f"Copied the call: {inert(preview)}", markup=False)

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen(keys_in_force(self, self.BINDINGS)))
