"""The cbconsole screen: agents, repeated keys and trips, live; the operator's actions on one screen."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import termios
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Input, Static

from breaker.paths import default_operator_socket_path
from breaker.protocol import ConfigFrame
from console.link import GuardLink, LinkError
from console.screens.config import ConfigScreen
from console.screens.confirm import Choice, ConfirmScreen
from console.screens.help import HelpScreen
from console.state import ConsoleState
from console.supervisor import GuardSupervisor, default_log_path, live_guard, stop_process
from console.themes import THEME_VARIABLES, load_themes
from console.widgets.agents import AgentsTable
from console.widgets.cells import plain
from console.widgets.detail import AgentDetail
from console.widgets.header import GuardHeader
from console.widgets.keys import KeysTable
from console.widgets.trips import TripsTable

__all__ = ["CBConsole"]

FLUSH_HZ = 10
MUTATING = {"interrupt", "uninterrupt", "reset", "pause_guard", "edit_config", "exempt"}
OWN_ACTIONS = MUTATING | {"mark", "freeze", "filter", "help", "clear_filter"}
INTERRUPT_REASON = "interrupted by the operator from cbconsole"
# The terminal closed (SIGHUP: tmux kill-session, a dropped SSH session) or the console was told to end:
# the quit policy applies without asking, as there may be no one left to ask.
ENDING_SIGNALS = (signal.SIGHUP, signal.SIGTERM)

DEMO_PATCH = """\
# The demo's own patch layer (a temporary file): edit it from the console, or by hand.
- id: circuit-breaker
  config:
    duplicateLimit: 6
    window: 200
    maxCallsPerAgent: 150
"""


class CBConsole(App[int]):
    """Modes: "own" (start the guard as a child, or attach to one already running), "attach",
    "demo" (a private guard driven by simulated agents), "replay" (a transcript played into the
    guard), "static" (no guard: frames are injected, for snapshot tests)."""

    CSS_PATH = "console.tcss"
    TITLE = "cbconsole"
    ENABLE_COMMAND_PALETTE = True
    BINDINGS = [
        Binding(
            "i",
            "interrupt",
            "Interrupt",
            id="interrupt",
            tooltip="Stop the selected (or marked) agents, after confirming",
        ),
        Binding(
            "e",
            "edit_config",
            "Config",
            id="edit_config",
            tooltip="Edit every setting; saved to the patch layer, applied live",
        ),
        Binding("x", "exempt", "Exempt", id="exempt", tooltip="Exempt (or un-exempt) the selected key's tool"),
        Binding(
            "p",
            "pause_guard",
            "Pause guard",
            id="pause_guard",
            tooltip="Pause or resume the guard (paused: every call allowed)",
        ),
        Binding("slash", "filter", "Filter", id="filter", tooltip="Filter agents by id, harness or tool"),
        Binding("question_mark", "help", "Help", id="help", tooltip="What the screen shows, and every key"),
        Binding("q", "quit", "Quit", id="quit", tooltip="Quit (asks before stopping a guard that harnesses use)"),
        Binding("ctrl+q", "quit", "Quit", id="quit2", show=False, tooltip="Quit"),
        Binding("r", "reset", "Reset", id="reset", show=False, tooltip="Clear the selected (or marked) agents' counts"),
        Binding("u", "uninterrupt", "Uninterrupt", id="uninterrupt", show=False, tooltip="Lift an interrupt"),
        Binding(
            "space", "mark", "Mark", id="mark", show=False, tooltip="Mark or unmark the selected agent (act on several)"
        ),
        Binding("z", "freeze", "Freeze", id="freeze", show=False, tooltip="Pause or resume screen updates"),
        Binding("escape", "clear_filter", "Clear filter", id="clear_filter", show=False, tooltip="Clear the filter"),
    ]

    def __init__(
        self,
        *,
        socket_path: Path,
        operator_socket: Path | None = None,
        state_path: str | None = None,
        mode: str = "own",
        patches: list[str] | None = None,
        profile: str | None = None,
        theme: str | None = None,
        readonly: bool = False,
        leave_running: bool = False,
        replay: list[str] | None = None,
        speed: float = 1.0,
        clock: Callable[[], float] = time.time,
        log_path: Path | None = None,
    ) -> None:
        super().__init__()
        self.socket_path = socket_path
        self.operator_socket = operator_socket or default_operator_socket_path(socket_path)
        self.state_path = state_path
        self.mode = mode
        self.patches = list(patches or [])
        self.profile = profile
        self.requested_theme = theme
        self.readonly = readonly
        self.leave_running = leave_running
        self.replay_paths = list(replay or [])
        self.speed = speed
        self.clock = clock
        self.log_path = log_path or default_log_path()
        self.state = ConsoleState(clock=clock)
        self.link: GuardLink | None = None
        self.supervisor: GuardSupervisor | None = None
        self.driver: asyncio.subprocess.Process | None = None
        self.frozen = False
        self.owns_guard = False
        self.theme_errors: list[str] = []
        self._drawn = -1
        self._drawn_at = 0.0
        self._tmp: str | None = None
        self.quitting = False
        self._settled = asyncio.Event()  # connect() is done: every child it starts is started (or never will be)
        self._spawning = asyncio.Lock()  # held while the driver is being started
        self._winding_down: asyncio.Future[bool] | None = None
        self._ending: asyncio.Task[None] | None = None

    # -- layout ---------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield GuardHeader(id="header")
        yield Input(placeholder="filter agents: id, harness or tool (escape clears)", id="filter")
        yield Static(Text("Agents — most dangerous first"), id="agents-title")
        yield AgentsTable(id="agents")
        yield AgentDetail(id="detail")
        with Horizontal(id="bottom"):
            with Vertical(id="keys-box"):
                yield Static(Text("Top repeated calls"), id="keys-title")
                yield KeysTable(id="keys")
            with Vertical(id="trips-box"):
                yield Static(Text("Trips"), id="trips-title")
                yield TripsTable(id="trips")
        yield Footer()

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(THEME_VARIABLES)

    async def on_mount(self) -> None:
        loaded = load_themes()
        for theme in loaded.themes.values():
            self.register_theme(theme)
        self.theme_errors = loaded.errors
        if loaded.errors:
            self.notify(
                "\n".join(loaded.errors),
                title="Some themes could not be loaded",
                severity="warning",
                markup=False,
                timeout=15,
            )
        self.set_theme_by_name(self.requested_theme or "dark")
        self.theme_changed_signal.subscribe(self, lambda _theme: self._force_redraw())
        # The main screen's widgets, held directly: `query_one` looks at the top screen, a modal when one is open.
        self.agents_table = self.query_one(AgentsTable)
        self.keys_table = self.query_one(KeysTable)
        self.trips_table = self.query_one(TripsTable)
        self.header = self.query_one(GuardHeader)
        self.detail = self.query_one(AgentDetail)
        self.filter_box = self.query_one("#filter", Input)
        self.agents_title = self.query_one("#agents-title", Static)
        self.trips_title = self.query_one("#trips-title", Static)
        self.agents_table.focus()
        self.set_interval(1 / FLUSH_HZ, self.flush, name="flush")
        if self.mode == "static":
            self._settled.set()
            return
        loop = asyncio.get_running_loop()
        for sig in ENDING_SIGNALS:
            loop.add_signal_handler(sig, self._on_ending_signal, sig)
        try:
            await self.connect()
        finally:
            self._settled.set()

    def on_unmount(self) -> None:
        if self.mode != "static":
            for sig in ENDING_SIGNALS:
                asyncio.get_running_loop().remove_signal_handler(sig)

    def set_theme_by_name(self, name: str) -> bool:
        for candidate in (name, f"cbconsole-{name}"):
            if candidate in self.available_themes:
                self.theme = candidate
                return True
        self.notify(
            f"no theme {name!r}; available: {', '.join(sorted(self.available_themes))}",
            severity="warning",
            markup=False,
        )
        if self.theme not in self.available_themes or not self.theme.startswith("cbconsole-"):
            self.theme = "cbconsole-dark" if "cbconsole-dark" in self.available_themes else self.theme
        return False

    # -- the guard ------------------------------------------------------------------------------

    async def connect(self) -> None:
        socket_path = self.socket_path
        if self.mode == "demo":
            # Everything of the demo's guard in one private temporary directory: both sockets, its
            # patch layer, its state file. Removing that directory leaves nothing behind.
            self._tmp = tempfile.mkdtemp(prefix="cbconsole-demo-")
            socket_path = self.socket_path = Path(self._tmp) / "h" / "guard.sock"  # short: a long $TMPDIR fits
            self.operator_socket = Path(self._tmp) / "o" / "operator.sock"
            self.state_path = str(Path(self._tmp) / "state.cbstate")
            patch = Path(self._tmp) / "cordis.patch.yml"
            patch.write_text(DEMO_PATCH)
            self.patches = [str(patch)]
        if self.mode != "attach":
            hello = await asyncio.to_thread(live_guard, socket_path) if self.mode != "demo" else None
            if self.quitting:
                return  # ended while looking for a guard: start nothing
            if hello is not None:
                self.state.set_guard_status("attached", f"already running (pid {hello.get('pid')})")
                self.notify(
                    f"Attached to the guard already running on {socket_path} (pid {hello.get('pid')}).", markup=False
                )
            else:
                env = dict(os.environ)
                if self.mode == "demo":
                    env["DSH_HOME"] = str(Path(self._tmp or ".") / "dsh")
                self.supervisor = GuardSupervisor(
                    socket_path,
                    operator_socket=self.operator_socket,
                    state=self.state_path,
                    patches=self.patches,
                    profile=self.profile,
                    log_path=self.log_path,
                    on_status=self._supervisor_status,
                    env=env,
                )
                await self.supervisor.start()
                self.owns_guard = True
        if self.quitting:
            return  # ended while the guard was starting: the quit policy stops it
        self.link = GuardLink(self.operator_socket, on_frame=self.state.apply, on_status=self._link_status)
        self.link.start()
        if self.mode in ("demo", "replay"):
            self.start_driver()

    @work(exclusive=True, group="driver")
    async def start_driver(self) -> None:
        """The demo's simulated agents, or the replay feeder: a child process driving the real guard."""
        for _ in range(100):
            if self.link is not None and self.link.connected:
                break
            await asyncio.sleep(0.1)
        if self.mode == "demo":
            cmd = [sys.executable, "-m", "console.demo", "--socket", str(self.socket_path)]
        else:
            cmd = [
                sys.executable,
                "-m",
                "breaker.replay",
                *self.replay_paths,
                "--feed",
                "--socket",
                str(self.socket_path),
                "--speed",
                str(self.speed),
            ]
        async with self._spawning:  # so that quitting sees either no driver or a started one, never half of one
            if self.quitting:
                return
            self.driver = await asyncio.create_subprocess_exec(
                *cmd,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                cwd=str(Path(__file__).resolve().parents[1]),
            )
        _out, err = await self.driver.communicate()
        if self.mode == "replay" and not self.quitting:
            message = err.decode(errors="replace").strip().splitlines()[-3:] if err else []
            ok = self.driver.returncode == 0
            self.notify(
                "Replay finished." if ok else "Replay failed: " + " | ".join(message),
                severity="information" if ok else "error",
                markup=False,
                timeout=10,
            )

    def _supervisor_status(self, status: str, note: str) -> None:
        self.state.set_guard_status(status, note)
        if status in ("restarting", "stopped"):
            self.notify(
                note, title="Guard", severity="warning" if status == "restarting" else "error", markup=False, timeout=10
            )

    def _link_status(self, status: str, note: str) -> None:
        if status == "connected":
            self.state.set_guard_status(
                "running" if self.owns_guard else "attached", "" if self.owns_guard else self.state.guard_note
            )
        elif not (self.supervisor and self.state.guard_status in ("restarting", "stopped")):
            self.state.set_guard_status(status, note)

    async def op(self, op: str, **fields: Any) -> dict[str, Any] | None:
        if self.link is None:
            self.notify("No guard: this console shows recorded state only.", severity="warning")
            return None
        try:
            return await self.link.request(op, **fields)
        except LinkError as exc:
            self.notify(str(exc), title=f"{op} failed", severity="error", markup=False)
            return None

    # -- drawing --------------------------------------------------------------------------------

    def _force_redraw(self) -> None:
        self._drawn = -1

    def colors(self) -> dict[str, str]:
        variables = self.theme_variables
        return {k: variables.get(k, v) for k, v in THEME_VARIABLES.items()}

    def flush(self) -> None:
        """Draw the state (~10 Hz): only if it changed (or ages need a tick), never while frozen or in a modal."""
        if self.quitting or not self.screen_stack:
            return  # quitting (the terminal may be gone), or the app is closing and its screens are gone
        state = self.state
        state.sample()
        if self.frozen or isinstance(self.screen, ModalScreen):
            return
        now = self.clock()
        if state.version == self._drawn and now - self._drawn_at < 1.0:
            return
        self._drawn, self._drawn_at = state.version, now
        colors = self.colors()
        agents = state.visible_agents()
        table = self.agents_table
        with self.batch_update():
            self.header.show(state, colors, self.readonly, self.frozen)
            table.reconcile(agents, now, state.marked, colors)
            selected = state.agents.get(table.selected or "")
            self.detail.show(selected, len(state.marked), colors)
            limit_of = {a.id: a.data.duplicate_limit for a in state.agents.values()}
            exempt = set(state.values.get("exempt") or [])
            self.keys_table.show(state.top_keys, limit_of, exempt, colors)
            trips = self.trips_table
            trips.add_trips(state.take_new_trips(), colors)
            title = f"Trips ({state.trips_seen})"
            if trips.unseen:
                title += f"  — {trips.unseen} new ↓"
            self.trips_title.update(Text(title))
            shown = f"Agents — most dangerous first ({len(agents)}"
            shown += f" of {len(state.agents)} match the filter)" if state.filter else ")"
            self.agents_title.update(Text(shown))

    # -- actions --------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if self.readonly and action in MUTATING:
            return None  # shown greyed out: a read-only console cannot change the guard
        if action in OWN_ACTIONS and isinstance(self.screen, ModalScreen):
            return False  # a modal is open: its own keys only (no second dialog on top of the first)
        return True

    def targets(self) -> list[str]:
        """The marked agents, else the selected one."""
        if self.state.marked:
            return sorted(self.state.marked)
        selected = self.agents_table.selected
        return [selected] if selected and selected in self.state.agents else []

    @staticmethod
    def _names(agents: Iterable[str]) -> Text:
        text = Text()
        for i, agent in enumerate(agents):
            text.append("\n  • " if i else "  • ")
            text.append_text(plain(agent))
        return text

    def action_interrupt(self) -> None:
        agents = self.targets()
        if not agents:
            self.notify("Select an agent first (or mark some with space).", severity="warning")
            return
        body = Text(f"Stop {len(agents)} agent{'s' if len(agents) > 1 else ''}:\n")
        body.append_text(self._names(agents))
        body.append(
            "\n\nTheir harness is told to stop them where it can (dsh cancels, Claude Code "
            "stops its loop), and every later tool call of theirs is denied."
        )

        async def done(choice: str | None) -> None:
            if choice != "yes":
                return
            told = 0
            for agent in agents:
                reply = await self.op("interrupt", agent=agent, reason=INTERRUPT_REASON)
                if reply is None:
                    return
                told += reply.get("notified", 0)
            self.state.marked.clear()
            self.notify(f"Interrupted {len(agents)} agent(s); {told} harness connection(s) told.", markup=False)

        self.push_screen(
            ConfirmScreen(
                "Interrupt agents?",
                body,
                [Choice("no", "Cancel", key="n"), Choice("yes", "Interrupt", "error", key="y")],
            ),
            done,
        )

    async def action_uninterrupt(self) -> None:
        for agent in self.targets():
            await self.op("uninterrupt", agent=agent)

    async def action_reset(self) -> None:
        agents = self.targets()
        for agent in agents:
            if await self.op("reset", agent=agent) is None:
                return
        if agents:
            self.notify(f"Reset the counts of {len(agents)} agent(s).", markup=False)

    def action_pause_guard(self) -> None:
        if self.state.paused:
            self.run_worker(self._set_paused("resume"))
            return

        async def done(choice: str | None) -> None:
            if choice == "yes" and await self._set_paused("pause"):
                self.notify(
                    "Guard paused: every call is allowed and not counted until you resume (p).", severity="warning"
                )

        body = Text("While paused, every tool call is allowed and nothing is counted. Interrupts still apply.")
        self.push_screen(
            ConfirmScreen(
                "Pause the guard?", body, [Choice("no", "Cancel", key="n"), Choice("yes", "Pause", "warning", key="y")]
            ),
            done,
        )

    async def _set_paused(self, op: str) -> bool:
        reply = await self.op(op)
        if reply is None:
            return False
        if self.state.stats is not None:
            self.state.stats.paused = reply.get("paused", op == "pause")
        self.state.version += 1
        if op == "resume":
            self.notify("Guard resumed: calls are judged again.")
        return True

    def action_edit_config(self) -> None:
        async def done(changes: dict[str, Any] | None) -> None:
            if not changes:
                return
            reply = await self.op("config_set", changes=changes)
            if reply is not None:
                if isinstance(reply.get("config"), dict):
                    self.state.config = ConfigFrame.from_json(reply["config"])
                    self.state.version += 1
                where = reply.get("written") or "memory only"
                self.notify(f"Saved and applied: {', '.join(sorted(changes))} (written to {where}).", markup=False)

        self.push_screen(ConfigScreen(self.state.values, self.state.config.target, self.readonly), done)

    def selected_tool(self) -> str | None:
        if self.keys_table.has_focus and (key := self.keys_table.current()):
            return key.tool
        agent = self.state.agents.get(self.agents_table.selected or "")
        if agent is None:
            return None
        return agent.data.worst_tool or agent.data.last_tool or None

    def action_exempt(self) -> None:
        tool = self.selected_tool()
        if not tool:
            self.notify("Select an agent or a repeated call first.", severity="warning")
            return
        exempt = list(self.state.values.get("exempt") or [])
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

        async def done(choice: str | None) -> None:
            if choice == "yes":
                reply = await self.op("config_set", changes={"exempt": new})
                if reply is not None:
                    if isinstance(reply.get("config"), dict):
                        self.state.config = ConfigFrame.from_json(reply["config"])
                    self.state.version += 1
                    self.notify(("Un-exempted " if removing else "Exempted ") + tool, markup=False)

        self.push_screen(
            ConfirmScreen(
                "Change exempt tools?",
                body,
                [
                    Choice("no", "Cancel", key="n"),
                    Choice("yes", "Un-exempt" if removing else "Exempt", "warning", key="y"),
                ],
            ),
            done,
        )

    def action_mark(self) -> None:
        table = self.agents_table
        if table.selected:
            self.state.toggle_mark(table.selected)
        self.state.version += 1
        if table.cursor_row < table.row_count - 1:
            table.move_cursor(row=table.cursor_row + 1)

    def action_freeze(self) -> None:
        self.frozen = not self.frozen
        self.header.show(self.state, self.colors(), self.readonly, self.frozen)
        self._force_redraw()

    def action_filter(self) -> None:
        box = self.filter_box
        box.add_class("visible")
        box.focus()

    def action_clear_filter(self) -> None:
        box = self.filter_box
        if box.value or box.has_class("visible"):
            box.value = ""
            box.remove_class("visible")
            self.state.filter = ""
            self.state.version += 1
            self.agents_table.focus()

    def on_agents_table_selected(self, event: AgentsTable.Selected) -> None:
        if self.quitting:
            return
        self.detail.show(self.state.agents.get(event.agent or ""), len(self.state.marked), self.colors())

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.state.filter = event.value
            self.state.version += 1

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            if not event.value:
                event.input.remove_class("visible")
            self.agents_table.focus()

    def action_help(self) -> None:
        keys = [(b.key_display or b.key, b.description, b.tooltip) for b in self.BINDINGS if isinstance(b, Binding)]
        self.push_screen(HelpScreen(keys))

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for binding in self.BINDINGS:
            if isinstance(binding, Binding) and binding.action not in ("quit", "clear_filter"):
                yield SystemCommand(binding.description, binding.tooltip, self._runner(binding.action))
        for name in sorted(self.available_themes):
            if name.startswith("cbconsole-"):
                short = name.removeprefix("cbconsole-")
                yield SystemCommand(f"Theme: {short}", f"Switch to the {short} theme", self._theme_setter(name))

    def _runner(self, action: str) -> Callable[[], Any]:
        return lambda: self.run_action(action)

    def _theme_setter(self, name: str) -> Callable[[], None]:
        def set_theme() -> None:
            self.theme = name

        return set_theme

    async def action_quit(self) -> None:
        harnesses = self.state.harnesses
        if self.owns_guard and self.mode == "own" and not self.leave_running and harnesses:
            names = ", ".join(f"{n} ({c})" for n, c in sorted(harnesses.items()))
            body = Text(
                f"Harnesses are connected to this guard: {names}.\n"
                "Stopping it makes them fail open (their tool calls are no longer checked)."
            )

            async def done(choice: str | None) -> None:
                if choice in ("stop", "leave"):
                    await self.shutdown(leave_running=choice == "leave")

            self.push_screen(
                ConfirmScreen(
                    "Quit cbconsole",
                    body,
                    [
                        Choice("cancel", "Cancel", key="n"),
                        Choice("leave", "Leave the guard running", key="l"),
                        Choice("stop", "Stop the guard", "error", key="s"),
                    ],
                ),
                done,
            )
            return
        await self.shutdown(leave_running=self.leave_running and self.mode == "own")

    async def shutdown(self, leave_running: bool = False) -> None:
        self.quitting = True
        await self._wind_down(leave_running)
        self.exit(0)

    async def _wind_down(self, leave_running: bool) -> bool:
        """Stop the driver, close the link, stop (or leave) the guard, remove the demo's files: once, whoever
        asks first (a quit and a signal may both ask). Returns whether the guard was left running."""
        if self._winding_down is None:
            self._winding_down = asyncio.ensure_future(self._stop_children(leave_running))
        return await asyncio.shield(self._winding_down)

    async def _stop_children(self, leave_running: bool) -> bool:
        async with self._spawning:
            driver = self.driver
        if driver is not None:
            await stop_process(driver)
        if self.link is not None:
            await self.link.close()
        left = False
        if self.supervisor is not None:
            left = leave_running and self.supervisor.pid is not None
            if leave_running:
                self.supervisor.detach()
            else:
                await self.supervisor.stop()
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
        return left

    # -- ending on a signal ---------------------------------------------------------------------

    def _on_ending_signal(self, signum: int) -> None:
        if self._ending is not None:
            return  # already ending
        self.quitting = True  # from here on nothing is drawn and no child is started
        gone = signum == signal.SIGHUP or not _terminal_alive()
        if gone:
            _leave_the_terminal()
        self._ending = asyncio.create_task(self._end_on_signal(signal.Signals(signum), gone), name="ending")

    async def _end_on_signal(self, sig: signal.Signals, gone: bool) -> None:
        """The quit policy, without asking: the demo's and the replay's children always stop; a guard this
        console started stops unless harnesses use it (or --leave-running); an attached guard is not ours."""
        try:
            with self.batch_update():  # no repaint: the terminal may be gone, and writing to it may block
                await self._settled.wait()
                harnesses = await self._harnesses_now() if self.owns_guard and self.mode == "own" else {}
                pid = self.supervisor.pid if self.supervisor is not None else None
                leave = self.mode == "own" and (self.leave_running or bool(harnesses))
                left = await self._wind_down(leave_running=leave)
                if self.owns_guard and self.supervisor is not None and pid is not None:
                    self.supervisor.note(_ending_note(sig.name, pid, left, harnesses))
        finally:
            if gone:
                # Textual's teardown writes to the terminal to restore it: with the terminal gone its writer
                # thread dies on EIO and the next writes block on its full queue. Nothing is left to restore.
                os._exit(128 + sig)
            self.exit(128 + sig)

    async def _harnesses_now(self) -> dict[str, int]:
        """Who uses the guard at this moment (the guard's own count); the last state frame's if it cannot say."""
        if self.link is not None and self.link.connected:
            with contextlib.suppress(LinkError, TimeoutError):
                reply = await asyncio.wait_for(self.link.request("stats"), 1.0)
                return dict(reply["stats"]["harnesses"])
        return self.state.harnesses


def _ending_note(signal_name: str, pid: int, left: bool, harnesses: dict[str, int]) -> str:
    """The line the guard's log gets when the console ends on a signal."""
    if not left:
        return f"cbconsole exited on {signal_name}; it stopped the guard it started (pid {pid})"
    if harnesses:
        names = ", ".join(f"{name} {count}" for name, count in sorted(harnesses.items()))
        serving = f"{sum(harnesses.values())} harness connection(s) ({names})"
    else:
        serving = "(--leave-running)"
    return f"cbconsole exited on {signal_name}; the guard keeps serving {serving}; stop it with kill {pid}"


def _terminal_alive() -> bool:
    """Whether the terminal Textual draws on still answers (a hung-up terminal fails every ioctl with EIO)."""
    try:
        termios.tcgetattr(sys.__stderr__.fileno())
    except (termios.error, OSError, AttributeError, ValueError):
        return False
    return True


def _leave_the_terminal() -> None:
    """Point stdin, stdout and stderr at /dev/null: reads and writes on a hung-up terminal fail with EIO."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        with contextlib.suppress(OSError):
            os.dup2(devnull, fd)
    os.close(devnull)
