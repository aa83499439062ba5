"""`cbconsole doctor`: check, in plain words, each thing that can leave agents unguarded without a word,
and say the command that fixes it. Exit 1 when a check fails (`--strict`: or warns); `--json` for scripts.

It checks the guard (running, its socket yours) and every harness installed here (its program on
PATH or where its installer puts it): that its hooks call this installation's cbhook (dsh: that a
patch layer loads the plugin), Codex's trust in them (asked of Codex itself), Gemini CLI's own loop
detector and hook switches, dsh's patch layers and `hmr` row, and whether the harness's version is
one the end-to-end tests prove. It reads; it changes nothing (Codex's app-server may create its own
state files in $CODEX_HOME, as any codex run does).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from breaker.patch import PatchError
from breaker.paths import FileProblem, check_socket, default_socket_path, read_regular
from breaker.vocab import FindingStatus
from breaker.wiring import codex, dsh
from breaker.wiring.files import MAX_BYTES, SetupError, decode, read
from breaker.wiring.harnesses import (
    CHECK_EVENT,
    HOOKS,
    NAMES,
    NPM_PACKAGES,
    PROVEN,
    Places,
    cbhook_command,
    cbhook_of,
    find_cbhook,
    find_program,
    hook_file,
    is_cbhook,
)
from breaker.wiring.jsontext import Document, JsonTextError
from breaker.wiring.setup import Found, cbhook_entries

__all__ = ["Finding", "main", "run_checks"]

VERSION_TIMEOUT = 20.0  # seconds for `HARNESS --version` (Node start-up on a busy machine)
APP_SERVER_TIMEOUT = 30.0  # seconds for Codex's app-server to answer hooks/list
_VERSION = re.compile(r"\d+\.\d+\.\d+(?:-[0-9A-Za-z.]+)?")


@dataclass(frozen=True)
class Finding:
    """One finding: `status` is ok, warn, fail or skip (not installed); `fix` the command that fixes it."""

    check: str
    harness: str | None
    status: FindingStatus
    message: str
    fix: str = ""


def _setup(harness: str, places: Places, project: Path | None = None) -> str:
    words = ["cbconsole", "setup", harness]
    if project is not None:
        words += ["--project", str(project)]
    if places.home != Path(os.path.abspath(Path(places.environ.get("HOME") or Path.home()))):
        words += ["--home", str(places.home)]
    return " ".join(words)


# -- the guard ------------------------------------------------------------------------------------


def check_guard(path: Path) -> Finding:
    from breaker.client import GuardClient, GuardError
    from breaker.protocol import Ping
    from breaker.wire import GuardUnavailable

    start = "start it: `cbconsole` (the console, with the guard as its child) or `cbconsole --headless`"
    unsafe = check_socket(path)
    if unsafe is not None:
        return Finding(
            check="guard",
            harness=None,
            status="fail",
            message=f"{unsafe}. Every hook treats that as the guard being away (fail open: calls run unchecked)",
            fix=f"remove what is at {path.parent} if it is not yours, or give the guard and the hooks another --socket",
        )
    if not path.exists():
        return Finding(
            check="guard",
            harness=None,
            status="fail",
            message=f"the guard is not running (no socket at {path}): every tool call runs unchecked",
            fix=start,
        )
    client = GuardClient(path, timeout=3.0, hello=False)
    try:
        client.request(Ping())
    except (GuardUnavailable, OSError) as exc:
        return Finding(
            check="guard",
            harness=None,
            status="fail",
            message=f"the guard at {path} does not answer ({exc}): tool calls run unchecked",
            fix=start,
        )
    except GuardError as exc:
        if exc.code == "bad_reply":  # an answer, but not an error and not a pong
            message = f"the socket at {path} does not answer as the guard does ({exc.message:.200})"
            return Finding(check="guard", harness=None, status="fail", message=message, fix=start)
        return Finding(
            check="guard",
            harness=None,
            status="fail",
            message=f"the socket at {path} answered ping with an error ({exc!s:.200}), not as the guard does: tool "
            "calls may run unchecked",
            fix=start,
        )
    finally:
        client.close()
    return Finding(check="guard", harness=None, status="ok", message=f"the guard answers at {path}")


# -- a harness's program and version ----------------------------------------------------------------


def _npm_version(program: Path, package: str | None) -> str | None:
    """The version in the package.json of the npm package the program belongs to (no process: Gemini
    CLI takes seconds to print `--version`)."""
    if package is None:
        return None
    here = Path(os.path.realpath(program)).parent
    for directory in (here, *here.parents):
        manifest = directory / "package.json"
        if manifest.is_file():
            data = _json_object(manifest)
            if data is not None and data.get("name") == package and isinstance(data.get("version"), str):
                return str(data["version"])
            if directory.name == "node_modules":
                return None
    return None


def _json_object(path: Path) -> dict[str, Any] | None:
    """A small JSON file's top-level object, or None if it cannot be read as one."""
    try:
        data = read_regular(path, MAX_BYTES)
        return Document(data.decode("utf-8")).value if data is not None else None
    except (FileProblem, UnicodeDecodeError, JsonTextError):
        return None


def version_of(program: Path, places: Places, harness: str | None = None) -> str | None:
    """The harness's version: from its npm package.json, else from `PROGRAM --version`."""
    known = _npm_version(program, NPM_PACKAGES.get(harness or ""))
    if known is not None:
        return known
    env = {**places.environ, "HOME": str(places.home)}
    try:
        out = subprocess.run(
            [str(program), "--version"],
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=places.home if places.home.is_dir() else None,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = _VERSION.search(out.stdout + " " + out.stderr)
    return found.group() if found else None


def check_version(harness: str, program: Path, version: str | None) -> Finding:
    name = NAMES[harness]
    proven = PROVEN[harness]
    if harness == "cursor":
        return Finding(
            check=f"{harness}.version",
            harness=harness,
            status="warn",
            message=f"{name} ({program}) is not tested end to end here (it is not on npm): cbhook answers its "
            "hooks in the shape Cursor's docs give, unproven with the real program",
        )
    if version is None:
        return Finding(
            check=f"{harness}.version",
            harness=harness,
            status="warn",
            message=f"cannot read {name}'s version (`{program} --version`)",
        )
    if version in proven:
        return Finding(
            check=f"{harness}.version",
            harness=harness,
            status="ok",
            message=f"{name} {version} ({program}) is a version the tests prove",
        )
    pin = f"npm install -g {NPM_PACKAGES[harness]}@{proven[-1]}"
    return Finding(
        check=f"{harness}.version",
        harness=harness,
        status="warn",
        message=f"{name} {version} ({program}) is not a version the end-to-end tests prove "
        f"({', '.join(proven)}): its hooks may behave differently (a new version may skip or ignore them)",
        fix=f"{pin}, or check that a repeated call is denied in a run of your own",
    )


# -- hooks in JSON settings -------------------------------------------------------------------------


@dataclass
class _Settings:
    path: Path
    value: dict[str, Any]


def _read_settings(harness: str, path: Path, checks: list[Finding]) -> _Settings | None:
    try:
        text = decode(path, read(path))
    except SetupError as exc:
        checks.append(
            Finding(
                check=f"{harness}.settings",
                harness=harness,
                status="fail",
                message=f"{exc}",
                fix="fix the file by hand",
            )
        )
        return None
    if text is None:
        return None
    try:
        doc = Document(text, comments=harness == "gemini")
    except JsonTextError as exc:
        checks.append(
            Finding(
                check=f"{harness}.settings",
                harness=harness,
                status="fail",
                message=f"{path}: line {exc.line} column {exc.column}: not valid JSON ({exc.message}): "
                f"{NAMES[harness]} cannot read its hooks from it",
                fix="fix the file by hand, then run `cbconsole doctor` again",
            )
        )
        return None
    return _Settings(path, doc.value)


def check_hooks(
    harness: str, files: list[_Settings], cbhook: Path | None, places: Places, project: Path | None
) -> list[Finding]:
    """Whether the hooks in `files` (user, then project settings) call this installation's cbhook."""
    name = NAMES[harness]
    fix = _setup(harness, places)
    found: list[tuple[_Settings, Found]] = [(s, f) for s in files for f in cbhook_entries(harness, s.value)]
    check_event = CHECK_EVENT[harness]
    before = [(s, f) for s, f in found if f.event == check_event]
    where = " or ".join(str(s.path) for s in files) or str(places.settings_file(harness))
    if not before:
        return [
            Finding(
                check=f"{harness}.hook",
                harness=harness,
                status="fail",
                message=f"{name} is installed, but no {check_event} hook in {where} calls cbhook: its tool "
                "calls are not checked by the guard",
                fix=fix,
            )
        ]
    out: list[Finding] = []
    mine = hook_file()
    for settings, f in before:
        out += _check_command(harness, settings.path, f, cbhook, mine, fix)
    for settings in files:
        events = [f.event for s, f in found if s is settings]
        doubled = sorted({e for e in events if events.count(e) > 1})
        if doubled:
            out.append(
                Finding(
                    check=f"{harness}.hook",
                    harness=harness,
                    status="fail",
                    message=f"{settings.path}: cbhook is there twice for {', '.join(doubled)}: every call "
                    "would count twice",
                    fix=fix,
                )
            )
    missing = [h.event for h in HOOKS[harness] if not any(f.event == h.event for _s, f in found)]
    if missing:
        out.append(
            Finding(
                check=f"{harness}.hook",
                harness=harness,
                status="warn",
                message=f"{name}: no cbhook hook for {', '.join(missing)} (results are not reported, or ended "
                "agents are not forgotten)",
                fix=fix,
            )
        )
    if not any(c.status == "fail" for c in out):
        paths = sorted({str(s.path) for s, _f in before})
        called = sorted({cbhook_of(f.command)[0] for _s, f in before})
        out.insert(
            0,
            Finding(
                check=f"{harness}.hook",
                harness=harness,
                status="ok",
                message=f"{name}'s hooks call {', '.join(called)} ({', '.join(paths)})",
            ),
        )
    return out


def _check_command(harness: str, where: Path, f: Found, cbhook: Path | None, mine: Path, fix: str) -> list[Finding]:
    """Whether one hook command runs this installation's cbhook, and in the fast form setup writes."""
    program, python = cbhook_of(f.command)
    runner = python if python is not None else program

    def problem(status: FindingStatus, what: str) -> list[Finding]:
        return [
            Finding(
                check=f"{harness}.hook",
                harness=harness,
                status=status,
                message=f"{where}: the {f.event} hook {what}",
                fix=fix,
            )
        ]

    if not os.path.isabs(runner):
        return problem(
            "fail",
            f"runs `{runner}` by name: {NAMES[harness]} runs hooks with its own PATH, which may not hold your venv "
            "(then every call runs unchecked)",
        )
    missing = next(
        (p for p in (runner, program) if not (os.path.isfile(p) and (p != runner or os.access(p, os.X_OK)))), None
    )
    if missing is not None:
        return problem(
            "fail",
            f"runs {missing}, which does not exist (a removed venv?): the hook fails and every call runs unchecked",
        )
    ours = mine if python is not None else cbhook
    if ours is not None and os.path.realpath(program) != os.path.realpath(ours):
        return problem("fail", f"runs {program}, another installation's cbhook, not this one's ({ours})")
    if python is None:  # it works: the form setup wrote before the fast one
        return problem(
            "warn",
            f"runs the cbhook program, whose wrapper costs each tool call about twice what cbhook itself does; setup "
            f"now writes `{cbhook_command(mine)}` instead",
        )
    return []


def _socket_of(command: str, default: Path) -> Path:
    """The socket a cbhook command asks: its --socket, else the default."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    for i, word in enumerate(words):
        if word == "--socket" and i + 1 < len(words):
            return Path(os.path.expanduser(words[i + 1]))
        if word.startswith("--socket="):
            return Path(os.path.expanduser(word.split("=", 1)[1]))
    return default


def _deciding(files: list[_Settings], key: str) -> _Settings | None:
    """The file whose `key` Claude Code goes by: the last of `files` (lowest precedence first) that sets it."""
    return next((s for s in reversed(files) if key in s.value), None)


def check_claude(files: list[_Settings], managed: list[_Settings]) -> list[Finding]:
    """Claude Code's switches that turn our hooks off, each where it applies (the file of highest precedence
    that sets it decides): `disableAllHooks` in managed settings (no hook runs) or in any other settings file
    (only the managed settings' hooks run), and the managed `allowManagedHooksOnly` (the same)."""
    guarded_by_policy = any(
        f.event == CHECK_EVENT["claude-code"] for s in managed for f in cbhook_entries("claude-code", s.value)
    )
    policy = _deciding(managed, "disableAllHooks")
    if policy is not None and policy.value["disableAllHooks"] is True:
        return [
            Finding(
                check="claude-code.hooks-off",
                harness="claude-code",
                status="fail",
                message=f"{policy.path} (managed settings) sets disableAllHooks: true: Claude Code runs no hook at "
                "all, and no other settings file can turn them back on",
                fix=f"ask whoever manages {policy.path} to take disableAllHooks out",
            )
        ]
    only = _deciding(managed, "allowManagedHooksOnly")
    if only is not None and only.value["allowManagedHooksOnly"] is True and not guarded_by_policy:
        return [
            Finding(
                check="claude-code.hooks-off",
                harness="claude-code",
                status="fail",
                message=f"{only.path} (managed settings) sets allowManagedHooksOnly: true: Claude Code runs only the "
                "managed settings' hooks, and none of them calls cbhook before a tool call",
                fix=f"ask whoever manages {only.path} to add the cbhook hooks (`cbconsole setup claude-code "
                "--dry-run` shows them) or to take allowManagedHooksOnly out",
            )
        ]
    mine = _deciding(files, "disableAllHooks")
    if mine is not None and mine.value["disableAllHooks"] is True and not guarded_by_policy:
        overridden = [s.path for s in files if s.value.get("disableAllHooks") is True and s is not mine]
        also = f" (so does {', '.join(map(str, overridden))})" if overridden else ""
        return [
            Finding(
                check="claude-code.hooks-off",
                harness="claude-code",
                status="fail",
                message=f"{mine.path} sets disableAllHooks: true{also}: Claude Code runs none of the hooks in your "
                "settings or the project's, only managed ones",
                fix=f"remove disableAllHooks from {mine.path}",
            )
        ]
    return []


def check_gemini(settings: list[_Settings], command: str | None, places: Places) -> list[Finding]:
    out = []
    loop_off = False
    for s in settings:
        hooks_config = s.value.get("hooksConfig")
        if isinstance(hooks_config, dict):
            if hooks_config.get("enabled") is False:
                out.append(
                    Finding(
                        check="gemini.hooks-off",
                        harness="gemini",
                        status="fail",
                        message=f"{s.path} sets hooksConfig.enabled: false: Gemini CLI runs no hook at all",
                        fix=f"remove hooksConfig.enabled from {s.path}",
                    )
                )
            disabled = hooks_config.get("disabled")
            if command and isinstance(disabled, list) and command in disabled:
                out.append(
                    Finding(
                        check="gemini.hooks-off",
                        harness="gemini",
                        status="fail",
                        message=f"{s.path} lists the cbhook command in hooksConfig.disabled: Gemini CLI skips it",
                        fix=f"take it out of hooksConfig.disabled in {s.path}",
                    )
                )
        model = s.value.get("model")
        if isinstance(model, dict) and "disableLoopDetection" in model:
            loop_off = model["disableLoopDetection"] is True
    if not loop_off:
        out.append(
            Finding(
                check="gemini.loop-detector",
                harness="gemini",
                status="warn",
                message="Gemini CLI's own loop detector is on: it ends a run at the 5th identical call in a "
                "row (before the guard's default duplicateLimit of 6), so the guard sees only near-repeats "
                "trip and the console shows none of those loops. model.disableLoopDetection: true lets the "
                "guard decide",
                fix=f"{_setup('gemini', places)} (it sets model.disableLoopDetection: true)",
            )
        )
    return out


# -- Codex's trust ----------------------------------------------------------------------------------


def codex_hooks_list(program: Path, places: Places, cwd: Path) -> list[dict[str, Any]] | str:
    """What Codex itself says of the hooks it would run in `cwd` (`codex app-server`, `hooks/list`), or why
    it could not be asked."""
    env = {**places.environ, "HOME": str(places.home), "CODEX_HOME": str(places.codex_home())}
    try:
        proc = subprocess.Popen(
            [str(program), "app-server"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=cwd if cwd.is_dir() else None,
        )
    except OSError as exc:
        return f"cannot run `{program} app-server`: {exc.strerror or exc}"
    lines: queue.Queue[bytes] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(b"")

    threading.Thread(target=pump, daemon=True).start()
    client = {"clientInfo": {"name": "cbconsole-doctor", "version": "1"}}
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": client},
        {"jsonrpc": "2.0", "method": "initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "hooks/list", "params": {"cwds": [str(cwd)]}},
    ]
    try:
        assert proc.stdin is not None
        proc.stdin.write(b"".join(json.dumps(r).encode() + b"\n" for r in requests))
        proc.stdin.flush()
        deadline = time.monotonic() + APP_SERVER_TIMEOUT
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return f"`codex app-server` did not answer hooks/list within {APP_SERVER_TIMEOUT:g} s"
            if not line:
                return "`codex app-server` exited without answering hooks/list"
            try:
                msg = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if isinstance(msg, dict) and msg.get("id") == 2:
                if "error" in msg:
                    return f"`codex app-server` refused hooks/list: {msg['error']}"
                data = msg.get("result", {}).get("data", [])
                return [h for entry in data for h in entry.get("hooks", []) if isinstance(h, dict)]
    except (OSError, ValueError, AttributeError) as exc:
        return f"`codex app-server` failed: {exc}"
    finally:
        try:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()


def _event(name: Any) -> str:
    """Codex's app-server says `preToolUse` for the hooks.json event `PreToolUse`."""
    return name[:1].upper() + name[1:] if isinstance(name, str) else "?"


def check_codex_trust(
    program: Path, places: Places, project: Path | None, files: list[_Settings], cbhook: Path | None
) -> list[Finding]:
    fix = _setup("codex", places, None)
    listed = codex_hooks_list(program, places, project or places.home)
    ours = [(s, f) for s in files for f in cbhook_entries("codex", s.value)]
    if not ours:
        return []
    if isinstance(listed, str):  # Codex could not be asked: compare the records with our own hash
        config = places.codex_home() / "config.toml"
        try:
            records = codex.trusted(config, decode(config, read(config)))
        except SetupError as exc:
            return [
                Finding(
                    check="codex.trust", harness="codex", status="fail", message=f"{exc}", fix="fix config.toml by hand"
                )
            ]
        untrusted = []
        for settings, f in ours:
            group, handler = (
                settings.value["hooks"][f.event][f.group],
                settings.value["hooks"][f.event][f.group]["hooks"][f.handler or 0],
            )
            key = codex.hook_key(Path(os.path.abspath(settings.path)), f.event, f.group, f.handler or 0)
            if records.get(key) != codex.trust_hash(f.event, group, handler):
                untrusted.append(f.event)
        if untrusted:
            return [
                Finding(
                    check="codex.trust",
                    harness="codex",
                    status="fail",
                    message=f"Codex has no trust recorded for the cbhook hook on {', '.join(untrusted)} "
                    f"({listed}; read {config} instead): it skips an untrusted hook without a word, and "
                    "`codex exec` then runs every call unchecked",
                    fix=f"{fix}, or review the hooks in codex's /hooks",
                )
            ]
        return [
            Finding(
                check="codex.trust",
                harness="codex",
                status="ok",
                message=f"the cbhook hooks' trust is recorded in {config} ({listed})",
            )
        ]
    mine = [h for h in listed if is_cbhook(h.get("command"))]
    if not mine:
        return [
            Finding(
                check="codex.trust",
                harness="codex",
                status="fail",
                message="Codex does not load the cbhook hooks at all (asked with `codex app-server`): a "
                "project's .codex/ is read only in a trusted project",
                fix=f"{fix}, or trust the project in codex",
            )
        ]
    bad = [h for h in mine if h.get("trustStatus") not in ("trusted", "managed") or h.get("enabled") is False]
    if bad:
        what = ", ".join(
            f"{_event(h.get('eventName'))} ({'disabled' if h.get('enabled') is False else h.get('trustStatus')})"
            for h in bad
        )
        return [
            Finding(
                check="codex.trust",
                harness="codex",
                status="fail",
                message=f"Codex does not run the cbhook hooks on {what}: it skips an untrusted (or modified) "
                "hook without a word, and headless `codex exec` then runs every call unchecked (unless given "
                "--dangerously-bypass-hook-trust)",
                fix=f"{fix} (it records the trust), or review the hooks in codex's /hooks",
            )
        ]
    return [
        Finding(
            check="codex.trust",
            harness="codex",
            status="ok",
            message=f"Codex trusts the cbhook hooks ({len(mine)}, asked with `codex app-server`)",
        )
    ]


# -- dsh -----------------------------------------------------------------------------------------


def check_dsh(places: Places, sockets: set[Path], default: Path) -> list[Finding]:
    from breaker.hook import plugin_dir

    home = places.dsh_home()
    fix = _setup("dsh", places)
    layers: dict[str, dsh.ParsedLayer] = {}
    out: list[Finding] = []
    candidates = {"": places.dsh_layer()}
    profiles = dsh.read_profiles(home)
    bundles = profiles.bundles
    for profile, why in profiles.problems.items():
        out.append(
            Finding(
                check="dsh.profile",
                harness="dsh",
                status="warn",
                message=f"{why}: doctor cannot tell whether dsh profile {profile} loads the plugin",
                fix="fix the file by hand",
            )
        )
    for profile in [*bundles, *profiles.problems]:
        candidates[profile] = places.dsh_layer(profile)
    for profile, path in candidates.items():
        try:
            text = decode(path, read(path))
        except SetupError as exc:
            out.append(
                Finding(check="dsh.layer", harness="dsh", status="fail", message=f"{exc}", fix="fix the file by hand")
            )
            continue
        if text is None:
            continue
        try:
            layer = dsh.read_layer_file(path, text)
        except PatchError as exc:
            out.append(
                Finding(
                    check="dsh.layer",
                    harness="dsh",
                    status="fail",
                    message=f"{exc}: dsh refuses to start{' profile ' + profile if profile else ''} with it "
                    "(and the guard runs with the built-in defaults)",
                    fix="fix the file by hand (a file that holds `[]` takes no rows after it: replace the `[]`)",
                )
            )
            continue
        if layer.root is None:
            out.append(
                Finding(
                    check="dsh.layer",
                    harness="dsh",
                    status="fail",
                    message=f"{path}: holds no list (an empty file, or only comments): dsh refuses to start"
                    f"{' profile ' + profile if profile else ''} with it (a patch layer must be a YAML list)",
                    fix="write `[]` in it, or delete it",
                )
            )
            continue
        layers[profile] = layer
    plugin = os.path.join(plugin_dir(), "index.mjs")
    rows = [(p, layer, row) for p, layer in layers.items() for _i, _j, row in layer.plugin_rows()]
    for _p, layer, row in rows:
        name = row.get("name")
        config = row.get("config")
        guard_socket = config.get("guardSocket") if isinstance(config, dict) else None
        sockets.add(
            Path(os.path.expanduser(guard_socket)) if isinstance(guard_socket, str) and guard_socket else default
        )
        if name == dsh.BUNDLE:
            continue
        if not isinstance(name, str) or not os.path.exists(name):
            out.append(
                Finding(
                    check="dsh.plugin",
                    harness="dsh",
                    status="fail",
                    message=f"{layer.path}: the circuit-breaker row loads {name!r}, which does not exist",
                    fix=fix,
                )
            )
        elif os.path.realpath(name) not in (os.path.realpath(plugin), os.path.realpath(plugin_dir())):
            out.append(
                Finding(
                    check="dsh.plugin",
                    harness="dsh",
                    status="fail",
                    message=f"{layer.path}: the circuit-breaker row loads {name}, another installation's "
                    f"plugin, not {plugin}",
                    fix=fix,
                )
            )
    bundled = {p for p, b in bundles.items() if dsh.BUNDLE in b}
    covered = {p for p, _layer, _row in rows}
    if not rows and not bundled:
        out.append(
            Finding(
                check="dsh.plugin",
                harness="dsh",
                status="fail",
                message=f"dsh is installed, but no patch layer ({places.dsh_layer()} or a profile's) loads "
                "the circuit-breaker plugin: its tool calls are not checked by the guard",
                fix=fix,
            )
        )
    elif "" not in covered:
        bare = sorted(p for p in bundles if p not in covered and p not in bundled)
        if bare:
            out.append(
                Finding(
                    check="dsh.plugin",
                    harness="dsh",
                    status="warn",
                    message=f"dsh profiles {', '.join(bare)} do not load the plugin "
                    f"(only {', '.join(sorted(covered | bundled))} do)",
                    fix=fix,
                )
            )
    if not any(c.check == "dsh.plugin" and c.status == "fail" for c in out) and (rows or bundled):
        out.insert(
            0,
            Finding(
                check="dsh.plugin", harness="dsh", status="ok", message="a patch layer loads the circuit-breaker plugin"
            ),
        )
    home_layer = layers.get("")
    if home_layer is None or not home_layer.hmr_enabled():
        lacking = sorted(p for p in bundles if p not in layers or not layers[p].hmr_enabled())
        if lacking or not bundles:
            where = f"profiles {', '.join(lacking)}" if lacking else "any profile"
            out.append(
                Finding(
                    check="dsh.hmr",
                    harness="dsh",
                    status="fail",
                    message=f"no patch layer enables the `hmr` row for {where}: dsh 0.1.0-rc.8 then refuses "
                    'to start ("user patch-layer watching requires the Cordis HMR service")',
                    fix=fix,
                )
            )
    return out


# -- all of it ------------------------------------------------------------------------------------


def cursor_used(directory: Path) -> bool:
    """Whether `directory` (`~/.cursor`) shows Cursor in use: it holds something besides what `cbconsole setup`
    writes there (hooks.json and its `.cbconsole-*` notes), or a hooks.json with a hook that is not a cbhook.
    A directory setup left behind, or an empty one, is not Cursor."""
    try:
        names = os.listdir(directory)
    except OSError:
        return False
    if any(n != "hooks.json" and not n.startswith("hooks.json.cbconsole-") for n in names):
        return True
    value = _json_object(directory / "hooks.json") if "hooks.json" in names else None
    hooks = value.get("hooks") if isinstance(value, dict) else None
    lists = [h for h in hooks.values() if isinstance(h, list)] if isinstance(hooks, dict) else []
    return any(isinstance(h, dict) and not is_cbhook(h.get("command")) for hs in lists for h in hs)


def run_checks(places: Places, socket: Path | None = None) -> list[Finding]:
    """Every check, in order: the guard's socket(s), then each harness."""
    from concurrent.futures import ThreadPoolExecutor

    cbhook = find_cbhook()
    project = places.project
    default = default_socket_path(places.environ)
    sockets: set[Path] = set()  # the sockets the hooks and plugin rows name (theirs, or the default)
    programs = {h: find_program(h, places) for h in NAMES}
    if programs["cursor"] is None and cursor_used(places.home / ".cursor"):
        programs["cursor"] = places.home / ".cursor"  # the editor, installed where no PATH reaches
    with ThreadPoolExecutor(max_workers=4) as pool:  # each `--version` starts a Node program: ~1-2 s
        versions = {
            h: pool.submit(version_of, p, places, h) for h, p in programs.items() if p is not None and h != "cursor"
        }
        found_versions = {h: f.result() for h, f in versions.items()}
    harness_checks: list[Finding] = []
    for harness in NAMES:
        program = programs[harness]
        if program is None:
            harness_checks.append(
                Finding(
                    check=harness, harness=harness, status="skip", message=f"{NAMES[harness]} is not installed here"
                )
            )
            continue
        harness_checks.append(check_version(harness, program, found_versions.get(harness)))
        if harness == "dsh":
            harness_checks += check_dsh(places, sockets, default)
            continue
        checks: list[Finding] = []
        if harness == "claude-code":
            paths = places.claude_files(project)
            managed = [s for s in (_read_settings(harness, p, checks) for p in places.claude_managed_files()) if s]
        else:
            paths = [places.settings_file(harness)] + ([places.settings_file(harness, project)] if project else [])
            managed = []
        files = [s for s in (_read_settings(harness, p, checks) for p in paths) if s is not None]
        if harness == "claude-code":
            checks += check_claude(files, managed)
            files += managed  # their hooks run too
        if not any(c.status == "fail" and c.check == f"{harness}.settings" for c in checks):
            checks += check_hooks(harness, files, cbhook, places, project)
        commands = [f.command for s in files for f in cbhook_entries(harness, s.value)]
        sockets |= {_socket_of(c, default) for c in commands}
        if harness == "gemini":
            checks += check_gemini(files, commands[0] if commands else None, places)
        elif harness == "codex" and any(c.status == "ok" for c in checks):
            checks += check_codex_trust(program, places, project, files, cbhook)
        harness_checks += checks
    checked = {socket} if socket is not None else (sockets or {default})
    return [check_guard(s) for s in sorted(checked)] + harness_checks


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cbconsole doctor",
        description="Check that the guard runs and every harness installed here asks it; say how to fix what "
        "does not. Exit status 1 when a check fails.",
    )
    p.add_argument("--json", action="store_true", help="print the checks as a JSON list")
    p.add_argument("--strict", action="store_true", help="a warning fails too (exit status 1)")
    p.add_argument("--home", metavar="DIR", help="the home to check (default: $HOME)")
    p.add_argument("--project", metavar="DIR", help="also the project settings in DIR")
    p.add_argument("--socket", metavar="PATH", help="the guard's socket (default: the one the hooks use)")
    return p


_MARK = {"ok": "ok  ", "warn": "warn", "fail": "FAIL", "skip": "-   "}


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    places = Places.of(args.home, args.project)
    socket = Path(os.path.abspath(os.path.expanduser(args.socket))) if args.socket else None
    checks = run_checks(places, socket)
    failed = [c for c in checks if c.status == "fail" or (args.strict and c.status == "warn")]
    if args.json:
        print(json.dumps([asdict(c) for c in checks], indent=1))
    else:
        for c in checks:
            print(f"{_MARK[c.status]}  {c.check:<22} {c.message}")
            if c.fix and c.status in ("fail", "warn"):
                print(f"{'':28}fix: {c.fix}")
        warned = sum(c.status == "warn" for c in checks)
        if failed:
            print(f"\n{len(failed)} check(s) failed: agents may run unguarded. Fix them with the commands above.")
        else:
            print(f"\nNothing failed{f' ({warned} warning(s))' if warned else ''}.")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
