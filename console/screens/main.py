"""The main screen: agents, repeated calls and trips, drawn live from the console's state; the operator's actions."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime
from typing import Any, TypeVar

from rich.text import Text
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Input, Static

from console.actions import Actions
from console.inert import inert
from console.link import GuardLink
from console.report import report_json, reports_dir, save_report
from console.screens.agent import AgentScreen
from console.screens.config import ConfigScreen
from console.screens.confirm import Choice, ConfirmScreen
from console.screens.help import HelpScreen, keys_in_force
from console.session import GuardSession
from console.state import ConsoleGuard, ConsoleState
from console.themes import THEME_VARIABLES
from console.widgets.activity import ActivityChart
from console.widgets.agents import AgentsTable
from console.widgets.cells import plain
from console.widgets.detail import AgentDetail
from console.widgets.footer import KeysFooter
from console.widgets.header import GuardHeader
from console.widgets.keys import KeysTable
from console.widgets.line import Line
from console.widgets.trips import TripsTable

__all__ = ["MainScreen"]

T = TypeVar("T")

FLUSH_HZ = 10
MUTATING = frozenset({"interrupt", "uninterrupt", "reset", "pause_guard", "edit_config", "exempt", "override"})
SHORT = 20  # rows from which the top repeated calls and the trips show, a few rows each
TALL = 32  # rows from which they get their full height
# The top repeated calls redraw on a change a few times in a row, then at most twice a second while they go on
# changing (the agents table: every frame). A DataTable redraws every row it shows on any change, and those
# counts change on every frame while agents loop: redrawn ten times a second under 5,000 checks/s they were
# most of the console's event-loop stalls (bench_console: lag max 132-184 ms with them, 55-82 ms without them,
# 73-93 ms at twice a second).
KEYS_PER_S = 2.0
KEYS_BURST = 3.0


class MainScreen(Screen[None]):
    """One screen over the console's state. State frames land in `ConsoleState` as they come; this
    screen draws from it at FLUSH_HZ, only when it changed, never while frozen or under a dialog."""

    # The screen's height class (console.tcss): short terminals give the agents table the room the top
    # repeated calls and the trips take on a tall one. The width is the agents table's own (`fit`).
    VERTICAL_BREAKPOINTS = [(0, "-tiny"), (SHORT, "-short"), (TALL, "-tall")]

    BINDINGS = [
        Binding(
            "i",
            "interrupt",
            "Interrupt",
            id="main.interrupt",
            tooltip="Stop the selected (or marked) agents, after confirming",
        ),
        Binding(
            "e",
            "edit_config",
            "Config",
            id="main.edit_config",
            tooltip="Edit every setting; saved to the patch layer, applied live",
        ),
        Binding("x", "exempt", "Exempt", id="main.exempt", tooltip="Exempt (or un-exempt) the selected key's tool"),
        Binding(
            "o",
            "override",
            "Override",
            id="main.override",
            tooltip="Give the selected agent its own cap or duplicate limit",
        ),
        Binding(
            "p",
            "pause_guard",
            "Pause guard",
            id="main.pause_guard",
            tooltip="Pause or resume the guard (paused: every call allowed)",
        ),
        Binding("slash", "filter", "Filter", id="main.filter", tooltip="Filter agents by id, harness or tool"),
        Binding("question_mark", "help", "Help", id="main.help", tooltip="What the screen shows, and every key"),
        # On this screen only: a dialog's own keys come first, and `q` there never opens a second dialog.
        Binding(
            "q", "app.quit", "Quit", id="main.quit", tooltip="Quit (asks before stopping a guard that harnesses use)"
        ),
        Binding(
            "enter",
            "open_agent",
            "Open",
            id="main.open",
            show=False,
            tooltip="Open the selected agent: its live calls, window, trips, family and actions",
        ),
        Binding(
            "r",
            "reset",
            "Reset",
            id="main.reset",
            show=False,
            tooltip="Clear the selected (or marked) agents' counts and overrides",
        ),
        Binding("u", "uninterrupt", "Uninterrupt", id="main.uninterrupt", show=False, tooltip="Lift an interrupt"),
        Binding(
            "space",
            "mark",
            "Mark",
            id="main.mark",
            show=False,
            tooltip="Mark or unmark the selected agent (act on several)",
        ),
        Binding(
            "t",
            "tree",
            "Tree",
            id="main.tree",
            show=False,
            tooltip="Show subagents under their parent session, or flat",
        ),
        Binding("z", "freeze", "Freeze", id="main.freeze", show=False, tooltip="Pause or resume screen updates"),
        Binding("c", "copy_id", "Copy id", id="main.copy_id", show=False, tooltip="Copy the selected agent's id"),
        Binding(
            "C",
            "copy_call",
            "Copy call",
            id="main.copy_call",
            show=False,
            tooltip="Copy the selected agent's worst repeated call, as one line",
        ),
        Binding(
            "S",
            "save_report",
            "Save report",
            id="main.save_report",
            show=False,
            tooltip="Save the state (JSON) and a screenshot (SVG) for an incident report",
        ),
        Binding(
            "escape", "clear_filter", "Clear filter", id="main.clear_filter", show=False, tooltip="Clear the filter"
        ),
    ]

    def __init__(
        self,
        state: ConsoleState,
        session: GuardSession,
        *,
        readonly: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__()
        self.state = state
        self.session = session
        self.readonly = readonly
        self.clock = clock
        self.frozen = False
        self._drawn = -1  # the state version last drawn
        self._drawn_at = 0.0
        self._keys_drawn: tuple[int, tuple[str, ...]] = (-1, ())  # the state version and the palette they show
        self.monotonic = time.monotonic  # the redraw budget's clock (`clock` is the one shown: frozen in snapshots)
        self._keys_budget = (KEYS_BURST, self.monotonic())  # redraws the top repeated calls may make now, and when
        self.actions = Actions(self, session, state)

    # -- layout -------------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        # Held directly: flush runs ten times a second, and nested containers mount their children after this
        # screen's own Mount.
        self.header = GuardHeader(id="header")
        self.activity = ActivityChart(id="activity")
        self.filter_box = Input(placeholder="filter agents: id, harness or tool (escape clears)", id="filter")
        self.agents_title = Line(Text("Agents — most dangerous first"), id="agents-title")
        self.agents_table = AgentsTable(id="agents", fleet=self.state.fleet)
        self.detail = AgentDetail(id="detail")
        self.keys_table = KeysTable(id="keys")
        self.trips_title = Line(Text("Trips"), id="trips-title")
        self.trips_table = TripsTable(id="trips")
        yield self.header
        yield self.activity
        yield self.filter_box
        yield self.agents_title
        yield self.agents_table
        yield self.detail
        with Horizontal(id="bottom"):
            with Vertical(id="keys-box"):
                yield Static(Text("Top repeated calls"), id="keys-title")
                yield self.keys_table
            with Vertical(id="trips-box"):
                yield self.trips_title
                yield self.trips_table
        yield KeysFooter()

    def on_mount(self) -> None:
        self.agents_table.focus()
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self.force_redraw())
        self.set_interval(1 / FLUSH_HZ, self.flush, name="flush")

    # -- drawing ------------------------------------------------------------------------------------

    def force_redraw(self) -> None:
        """Draw at the next tick even if the state did not change (a new theme, unfrozen)."""
        self._drawn = -1

    def roles(self) -> dict[str, str]:
        """The console's colour roles (trip, cap, interrupted, ok, warn, exempt, muted) in the theme in force."""
        variables = self.app.theme_variables
        return {k: variables.get(k, v) for k, v in THEME_VARIABLES.items()}

    def flush(self) -> None:
        """Draw the state (~10 Hz): only if it changed (or ages need a tick), never while frozen or under a dialog."""
        if self.session.ending or not self.app.screen_stack:
            return  # ending (the terminal may be gone), or the app is closing and its screens are gone
        state = self.state
        state.sample()
        if self.frozen or self.app.screen is not self:
            return
        now = self.clock()
        colors = self.roles()
        palette = tuple(colors.values())
        keys_due = self._keys_due(palette)
        if state.version == self._drawn and now - self._drawn_at < 1.0 and not keys_due:
            return
        self._drawn, self._drawn_at = state.version, now
        order, tree = state.table_rows()  # flat, or as a tree (`t`)
        table = self.agents_table
        guards = [(view.label, view.reachable) for view in state.guards] if state.fleet else ()
        with self.app.batch_update():
            self.header.show(state, colors, self.readonly, self.frozen, state.guard_of(table.selected))
            self.activity.show(state.activity_of_all(), now, colors)
            table.reconcile(order, state.agents, now, state.marked, colors, tree, guards)
            self.show_detail(table.selected, colors, now)
            if keys_due:
                self._keys_drawn = (state.version, palette)
                self._keys_budget = (self._keys_budget[0] - 1, self._keys_budget[1])
                keys = state.top_keys
                limit_of = {k.agent: a.data.duplicate_limit for k in keys if (a := state.agents.get(k.agent))}
                exempt_of = {k.agent: state.guards[state.split_key(k.agent)[0]].exempt for k in keys}
                self.keys_table.show(keys, limit_of, exempt_of, colors, state.name_of)
            trips = self.trips_table
            trips.add_trips(state.take_new_trips(), colors, state.name_of)
            title = f"Trips ({state.trips_seen})"
            if trips.unseen:
                title += f"  — {trips.unseen} new ↓"
            self.trips_title.show(Text(title))
            how = "subagents under their parent, most dangerous first" if state.tree else "most dangerous first"
            shown = f"Agents — {how} ({len(order) - sum(context for _glyphs, context in tree.values())}"
            shown += f" of {len(state.agents)} match the filter)" if state.filter else ")"
            self.agents_title.show(Text(shown))

    def _keys_due(self, palette: tuple[str, ...]) -> bool:
        """Whether this flush redraws the top repeated calls: at once for a new theme; for a new state, while the
        budget (KEYS_BURST redraws, refilled at KEYS_PER_S) lasts."""
        version, drawn_palette = self._keys_drawn
        if palette != drawn_palette:
            return True
        if version == self.state.version:
            return False
        budget, then = self._keys_budget
        at = self.monotonic()
        budget = min(KEYS_BURST, budget + max(0.0, at - then) * KEYS_PER_S)
        self._keys_budget = (budget, at)
        return budget >= 1

    def show_detail(self, agent: str | None, colors: dict[str, str], now: float) -> None:
        """The detail line for `agent`, with the values of the columns the agents table hides."""
        hidden = self.agents_table.hidden
        shown = self.state.agents.get(agent or "")
        guard = self.state.guards[shown.guard].label if shown is not None and self.state.fleet else ""
        self.detail.show(shown, len(self.state.marked), colors, hidden=hidden, now=now, guard=guard)

    # -- the guard's ops ----------------------------------------------------------------------------

    async def ask_guard(self, what: str, op: Callable[[GuardLink], Awaitable[T]], guard: int = 0) -> T | None:
        """Run an operator op on guard number `guard`; None (and the operator told why) if it failed."""
        return await self.actions.ask(what, op, guard)

    def selected_guard(self) -> ConsoleGuard:
        """The guard of the selected agent: the one the config, exempt and pause keys act on."""
        return self.state.guard_of(self.agents_table.selected)

    # -- actions ------------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if self.readonly and action in MUTATING:
            return None  # shown greyed out: a read-only console cannot change the guard
        return True

    def targets(self) -> list[str]:
        """The marked agents, else the selected one."""
        if self.state.marked:
            return sorted(self.state.marked)
        selected = self.agents_table.selected
        return [selected] if selected and selected in self.state.agents else []

    def action_interrupt(self) -> None:
        self.actions.interrupt(self.targets(), done=self.state.clear_marks)

    async def action_uninterrupt(self) -> None:
        await self.actions.uninterrupt(self.targets())

    async def action_reset(self) -> None:
        await self.actions.reset(self.targets())

    def action_override(self) -> None:
        self.actions.override(self.agents_table.selected)

    def action_open_agent(self) -> None:
        agent = self.agents_table.selected
        if not agent or agent not in self.state.agents:
            self.notify("Select an agent first.", severity="warning", markup=False)
            return
        self.app.push_screen(AgentScreen(agent, self.state, self.session, readonly=self.readonly, clock=self.clock))

    def action_pause_guard(self) -> None:
        view = self.selected_guard()
        if view.paused:
            self.run_worker(self._set_paused(False, view.number))
            return

        async def done(choice: str | None) -> None:
            if choice == "yes" and await self._set_paused(True, view.number):
                self.notify(
                    "Guard paused: every call is allowed and not counted until you resume (p).",
                    severity="warning",
                    markup=False,
                )

        body = Text("While paused, every tool call is allowed and nothing is counted. Interrupts still apply.")
        if self.state.fleet:
            body.append("\n\nThe guard paused: ")
            body.append_text(plain(view.label, style="bold"))
            body.append(" (the selected agent's). The others go on judging.")
        self.app.push_screen(
            ConfirmScreen(
                "Pause the guard?", body, [Choice("no", "Cancel", key="n"), Choice("yes", "Pause", "warning", key="y")]
            ),
            done,
        )

    async def _set_paused(self, paused: bool, guard: int = 0) -> bool:
        now = await self.ask_guard("pause" if paused else "resume", lambda link: link.set_paused(paused), guard)
        if now is None:
            return False
        self.state.set_paused(now, guard)
        if not paused:
            self.notify("Guard resumed: calls are judged again.", markup=False)
        return True

    def action_edit_config(self) -> None:
        view = self.selected_guard()

        async def done(changes: dict[str, Any] | None) -> None:
            if not changes:
                return
            saved = await self.ask_guard("config_set", lambda link: link.config_set(changes), view.number)
            if saved is None:
                return
            if saved.config is not None:
                self.state.set_config(saved.config, view.number)
            where = inert(saved.written or "memory only")
            on = f" on {inert(view.label)}" if self.state.fleet else ""
            self.notify(f"Saved and applied{on}: {', '.join(sorted(changes))} (written to {where}).", markup=False)

        title = f"the config of {view.label}" if self.state.fleet else None
        self.app.push_screen(ConfigScreen(view.values, view.config.target, self.readonly, title=title), done)

    def selected_tool(self) -> str | None:
        """The tool of the repeated call under the cursor (if that table has focus), else the selected
        agent's worst (or last) tool."""
        if self.keys_table.has_focus and (key := self.keys_table.current()):
            return key.tool
        agent = self.state.agents.get(self.agents_table.selected or "")
        if agent is None:
            return None
        return agent.data.worst_tool or agent.data.last_tool or None

    def action_exempt(self) -> None:
        if self.keys_table.has_focus and (key := self.keys_table.current()):
            guard = self.state.split_key(key.agent)[0]  # the guard of the agent that repeats the call
        else:
            guard = self.selected_guard().number
        self.actions.exempt(self.selected_tool(), guard)

    def action_mark(self) -> None:
        table = self.agents_table
        if table.selected:
            self.state.toggle_mark(table.selected)
        if table.cursor_row < table.row_count - 1:
            table.move_cursor(row=table.cursor_row + 1)

    def action_tree(self) -> None:
        self.state.set_tree(not self.state.tree)
        self.flush()  # at once: the cursor stays on its agent (the table re-anchors it)

    def action_copy_id(self) -> None:
        agent = self.agents_table.selected
        if not agent or agent not in self.state.agents:
            self.notify("Select an agent first.", severity="warning", markup=False)
            return
        # OSC 52: the terminal puts it on the system clipboard. What is drawn is what is copied: escaped, as a
        # control character pasted into a shell could end a bracketed paste and run what follows.
        agent_id = inert(self.state.agents[agent].id)
        self.app.copy_to_clipboard(agent_id)
        self.notify(f"Copied the agent id: {agent_id}", markup=False)

    def action_copy_call(self) -> None:
        """The repeated call under the cursor (if that table has focus), else the selected agent's worst one."""
        if self.keys_table.has_focus and (key := self.keys_table.current()):
            agent, preview, count = key.agent, key.preview, key.count
        elif selected := self.state.agents.get(self.agents_table.selected or ""):
            agent, preview, count = selected.id, selected.data.worst_preview, selected.data.worst_count
        else:
            self.notify("Select an agent or a repeated call first.", severity="warning", markup=False)
            return
        name = inert(self.state.name_of(agent))
        if not preview:
            self.notify(f"{name} has no repeated call to copy.", severity="warning", markup=False)
            return
        preview = inert(preview)  # one line already (the guard's preview of the call), escaped as drawn
        self.app.copy_to_clipboard(preview)
        self.notify(f"Copied the call {name} repeated {count} times: {preview}", markup=False)

    async def action_save_report(self) -> None:
        saved_at = datetime.fromtimestamp(self.clock()).astimezone()
        report = report_json(self.state, saved_at, self.agents_table.selected)
        svg = self.app.export_screenshot()
        directory = reports_dir()
        try:
            saved = await asyncio.to_thread(save_report, directory, report, svg, saved_at)
        except OSError as exc:
            self.notify(
                f"{directory}: {exc.strerror or exc}", title="Saving the report failed", severity="error", markup=False
            )
            return
        self.notify(f"State: {saved.json}\nScreen: {saved.svg}", title="Report saved", markup=False)

    def action_freeze(self) -> None:
        self.frozen = not self.frozen
        self.header.show(self.state, self.roles(), self.readonly, self.frozen, self.selected_guard())
        self.force_redraw()

    def action_filter(self) -> None:
        self.filter_box.add_class("visible")
        self.filter_box.focus()

    def action_clear_filter(self) -> None:
        box = self.filter_box
        if box.value or box.has_class("visible"):
            box.value = ""
            box.remove_class("visible")
            self.state.set_filter("")
            self.agents_table.focus()

    def on_agents_table_opened(self, event: AgentsTable.Opened) -> None:
        """A click on the selected agent: its drill-down (`enter` is this screen's own key)."""
        if not self.session.ending:
            event.stop()
            self.action_open_agent()

    def on_agents_table_selected(self, event: AgentsTable.Selected) -> None:
        if self.session.ending:
            return
        self.show_detail(event.agent, self.roles(), self.clock())

    def on_agents_table_columns_changed(self, _event: AgentsTable.ColumnsChanged) -> None:
        if self.session.ending or not self.is_mounted:
            return
        self.show_detail(self.agents_table.selected, self.roles(), self.clock())  # the hidden columns' values

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.state.set_filter(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            if not event.value:
                event.input.remove_class("visible")
            self.agents_table.focus()

    def key_bindings(self) -> list[Binding]:
        """This screen's keys, then the app's (what help lists)."""
        return [b for b in (*self.BINDINGS, *self.app.BINDINGS) if isinstance(b, Binding)]

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen(self.keys_in_force()))

    def keys_in_force(self) -> list[tuple[str, str, str]]:
        """Each binding help lists, with the keys that run it now (the user's keymap applied)."""
        return keys_in_force(self, self.BINDINGS)

    def commands(self) -> Iterator[SystemCommand]:
        """Every action of this screen, for the command palette."""
        for binding in self.BINDINGS:
            if isinstance(binding, Binding) and binding.action not in ("app.quit", "clear_filter"):
                yield SystemCommand(binding.description, binding.tooltip, self._runner(binding.action))

    def _runner(self, action: str) -> Callable[[], Awaitable[bool]]:
        return lambda: self.app.run_action(action, self)
