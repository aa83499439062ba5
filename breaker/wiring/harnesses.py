"""What each harness needs from us, in one table: its settings files, the hooks that call cbhook, the
versions the end-to-end tests prove, and where its program is found.

This is the one source for those facts: `cbconsole setup` writes these hooks, `cbconsole doctor`
checks them, docs/harnesses.md shows them (a test compares the page with `settings_snippet`), and
tests/e2e/harnesses.py installs exactly the PROVEN versions.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import sysconfig
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CHECK_EVENT",
    "EXTRA_SETTINGS",
    "FAST_FLAGS",
    "HOOKS",
    "HOOK_FILE",
    "NAMES",
    "NPM_PACKAGES",
    "PROVEN",
    "Hook",
    "Places",
    "cbhook_command",
    "cbhook_of",
    "claude_managed_dir",
    "entry",
    "find_cbhook",
    "find_program",
    "hook_file",
    "is_cbhook",
    "resolve_name",
    "settings_snippet",
]

# The names `cbconsole setup`/`doctor` take, with what they are called in the docs.
NAMES = {
    "claude-code": "Claude Code",
    "codex": "Codex CLI",
    "gemini": "Gemini CLI",
    "dsh": "dsh",
    "cursor": "Cursor",
}
_ALIASES = {"claude": "claude-code", "gemini-cli": "gemini", "deepseek": "dsh"}

# The versions tests/e2e runs for real (and installs: tests/e2e/harnesses.py reads these).
PROVEN = {
    "dsh": ("0.1.0-rc.8",),
    "claude-code": ("2.1.332",),
    "codex": ("0.171.0",),
    "gemini": ("0.61.0",),
    "cursor": (),  # not on npm: its hook payloads are tested in their documented shape only
}
NPM_PACKAGES = {
    "dsh": "@deepseek-ai/dsh",
    "claude-code": "@anthropic-ai/claude-code",
    "codex": "@openai/codex",
    "gemini": "@google/gemini-cli",
}
PROGRAMS = {
    "dsh": ("dsh",),
    "claude-code": ("claude",),
    "codex": ("codex",),
    "gemini": ("gemini",),
    "cursor": ("cursor-agent", "cursor"),
}


@dataclass(frozen=True)
class Hook:
    """One hook cbhook answers: the event, its matcher (None: the event takes none), its timeout in the
    harness's own unit (None: the harness's default)."""

    event: str
    matcher: str | None = None
    timeout: int | None = None


HOOKS: dict[str, tuple[Hook, ...]] = {
    "claude-code": (
        Hook("PreToolUse", "*", 10),
        Hook("PostToolUse", "*", 10),
        Hook("PostToolUseFailure", "*", 10),
        Hook("SubagentStop", None, 10),
        Hook("SessionEnd", None, 10),
    ),
    "codex": (Hook("PreToolUse", "*", 10), Hook("PostToolUse", "*", 10)),
    "gemini": (  # Gemini CLI's timeouts are in milliseconds
        Hook("BeforeTool", ".*", 10000),
        Hook("AfterTool", ".*", 10000),
        Hook("SessionEnd", None, 10000),
    ),
    "cursor": (Hook("beforeShellExecution"), Hook("beforeMCPExecution"), Hook("sessionEnd")),
}
# Settings setup writes besides the hooks (`--keep-loop-detector` leaves Gemini CLI's out): Gemini CLI's own
# loop detector ends a run at the 5th identical call in a row, before the guard's duplicateLimit (6).
EXTRA_SETTINGS: dict[str, dict[tuple[str, ...], Any]] = {"gemini": {("model", "disableLoopDetection"): True}}
# The event that asks the guard before a call: without it the harness's agents are not guarded at all.
CHECK_EVENT = {
    "claude-code": "PreToolUse",
    "codex": "PreToolUse",
    "gemini": "BeforeTool",
    "cursor": "beforeShellExecution",
}


def resolve_name(name: str) -> str | None:
    """The harness a user's name means (`claude` is `claude-code`), or None."""
    low = name.lower()
    return low if low in NAMES else _ALIASES.get(low)


def entry(harness: str, hook: Hook, command: str) -> dict[str, Any]:
    """One element of an event's list in the harness's settings: a matcher group (Cursor: the hook itself)."""
    if harness == "cursor":
        return {"command": command}
    handler: dict[str, Any] = {"type": "command", "command": command}
    if hook.timeout is not None:
        handler["timeout"] = hook.timeout
    group: dict[str, Any] = {} if hook.matcher is None else {"matcher": hook.matcher}
    group["hooks"] = [handler]
    return group


def settings_snippet(harness: str, command: str = "cbhook") -> dict[str, Any]:
    """The settings a harness needs, as docs/harnesses.md shows them (`command` for the cbhook command)."""
    hooks = {hook.event: [entry(harness, hook, command)] for hook in HOOKS[harness]}
    out: dict[str, Any] = {"version": 1, "hooks": hooks} if harness == "cursor" else {"hooks": hooks}
    for path, value in EXTRA_SETTINGS.get(harness, {}).items():
        here = out
        for key in path[:-1]:
            here = here.setdefault(key, {})
        here[path[-1]] = value
    return out


# -- cbhook ---------------------------------------------------------------------------------------


def _words(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


# The form `cbconsole setup` writes: `<python> -I -S <site-packages>/breaker/cbhook.py [options]`. The console
# script `cbhook` is a wrapper Python starts with `site` and that imports `re`: more than cbhook's own work per
# tool call (tests/bench/bench_hook.py). `-I` keeps the current directory and PYTHON* variables out, `-S` skips
# `site`; breaker/cbhook.py puts back only the directory its package is in.
HOOK_FILE = "cbhook.py"
FAST_FLAGS = ("-I", "-S")


def cbhook_of(command: str) -> tuple[str, str | None]:
    """(the cbhook a hook command runs, the Python that runs it): a console script `…/cbhook` (None), or the
    fast form's `…/breaker/cbhook.py` (its Python); ("", None) for a command that runs no cbhook."""
    words = _words(command)
    if words and os.path.basename(words[0]) == "cbhook":
        return words[0], None
    n = len(FAST_FLAGS)
    if len(words) > n and tuple(words[1 : n + 1]) == FAST_FLAGS and os.path.basename(words[n + 1]) == HOOK_FILE:
        return words[n + 1], words[0]
    return "", None


def is_cbhook(command: Any) -> bool:
    """Whether a hook command runs a cbhook, ours or another installation's, in either form."""
    return isinstance(command, str) and cbhook_of(command)[0] != ""


def hook_file() -> Path:
    """This installation's breaker/cbhook.py: what the hook command `cbconsole setup` writes runs."""
    import breaker

    return Path(os.path.abspath(breaker.__file__)).parent / HOOK_FILE


def find_cbhook() -> Path | None:
    """This installation's `cbhook` console script: beside the Python running us (a venv's bin), else where pip
    put the scripts, else the one on PATH. Absolute: harnesses run hooks without our venv on PATH."""
    candidates = [Path(sys.executable).with_name("cbhook")]
    scripts = sysconfig.get_path("scripts")
    if scripts:
        candidates.append(Path(scripts) / "cbhook")
    found = shutil.which("cbhook")
    if found:
        candidates.append(Path(found))
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return Path(os.path.abspath(path))
    return None


def cbhook_command(
    cbhook: Path, *, socket: str | None = None, fail_closed: bool = False, python: str | None = None
) -> str:
    """The hook command setup writes, quoted for the shell the harness runs it in: for a breaker/cbhook.py,
    `<python> -I -S <it>` (`python`: default the Python running us, absolute); else the absolute cbhook."""
    words = [python or sys.executable, *FAST_FLAGS, str(cbhook)] if cbhook.name == HOOK_FILE else [str(cbhook)]
    if socket:
        words += ["--socket", socket]
    if fail_closed:
        words.append("--fail-closed")
    return shlex.join(words)


# -- where things are -----------------------------------------------------------------------------


def claude_managed_dir() -> Path:
    """Where Claude Code reads its managed settings (`managed-settings.json` and `managed-settings.d/`), as its
    settings docs give it: macOS `/Library/Application Support/ClaudeCode`, Linux and WSL `/etc/claude-code`."""
    return Path("/Library/Application Support/ClaudeCode") if sys.platform == "darwin" else Path("/etc/claude-code")


@dataclass(frozen=True)
class Places:
    """The home (what `~` means), the environment, and an optional project directory to look in."""

    home: Path
    environ: Mapping[str, str]
    project: Path | None = None
    claude_managed: Path = field(default_factory=claude_managed_dir)  # the machine's, whatever the home

    @classmethod
    def of(
        cls, home: str | None = None, project: str | None = None, environ: Mapping[str, str] | None = None
    ) -> Places:
        env = os.environ if environ is None else environ
        base = Path(home).expanduser() if home else Path(env.get("HOME") or Path.home())
        return cls(
            Path(os.path.abspath(base)), env, Path(os.path.abspath(Path(project).expanduser())) if project else None
        )

    def _env_dir(self, name: str, default: Path) -> Path:
        value = self.environ.get(name)
        return Path(os.path.abspath(Path(value).expanduser())) if value else default

    def claude_dir(self) -> Path:
        return self._env_dir("CLAUDE_CONFIG_DIR", self.home / ".claude")

    def codex_home(self) -> Path:
        return self._env_dir("CODEX_HOME", self.home / ".codex")

    def gemini_home(self) -> Path:
        return self._env_dir("GEMINI_CLI_HOME", self.home)

    def dsh_home(self) -> Path:
        return self._env_dir("DSH_HOME", self.home / ".dsh")

    def settings_file(self, harness: str, project: Path | None = None) -> Path:
        """The file setup edits: the user's (project None) or `project`'s own."""
        if harness == "claude-code":
            return project / ".claude" / "settings.json" if project else self.claude_dir() / "settings.json"
        if harness == "codex":
            return project / ".codex" / "hooks.json" if project else self.codex_home() / "hooks.json"
        if harness == "gemini":
            return (
                project / ".gemini" / "settings.json" if project else self.gemini_home() / ".gemini" / "settings.json"
            )
        if harness == "cursor":
            return project / ".cursor" / "hooks.json" if project else self.home / ".cursor" / "hooks.json"
        raise ValueError(f"{harness} has no JSON settings file")

    def claude_files(self, project: Path | None = None) -> list[Path]:
        """Every settings file of Claude Code's that may hold hooks or switch them off, lowest precedence first:
        the user's `settings.json` and `settings.local.json`, then (`project`) the project's two."""
        out = [self.claude_dir() / "settings.json", self.claude_dir() / "settings.local.json"]
        if project is not None:
            out += [project / ".claude" / "settings.json", project / ".claude" / "settings.local.json"]
        return out

    def claude_managed_files(self) -> list[Path]:
        """Claude Code's managed settings files, lowest precedence first: `managed-settings.json`, then the
        drop-ins of `managed-settings.d/` in alphabetical order (each merged over the one before)."""
        drop_ins = self.claude_managed / "managed-settings.d"
        try:
            names = sorted(n for n in os.listdir(drop_ins) if n.endswith(".json") and not n.startswith("."))
        except OSError:
            names = []
        return [self.claude_managed / "managed-settings.json", *(drop_ins / n for n in names)]

    def dsh_layer(self, profile: str | None = None) -> Path:
        home = self.dsh_home()
        return home / "profiles" / profile / "cordis.patch.yml" if profile else home / "cordis.patch.yml"


def find_program(harness: str, places: Places) -> Path | None:
    """The harness's program on PATH or where its installer puts it (~/.local/bin; Claude Code's
    ~/.claude/local), or None: not installed here."""
    path = places.environ.get("PATH", os.defpath)
    for name in PROGRAMS[harness]:
        found = shutil.which(name, path=path)
        if found:
            return Path(found)
        for directory in (places.home / ".local" / "bin", places.home / ".claude" / "local"):
            candidate = directory / name
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return candidate
    return None
