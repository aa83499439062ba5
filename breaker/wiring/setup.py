"""`cbconsole setup HARNESS`: write the hooks that call cbhook (dsh: the plugin's rows) into the harness's
own settings, merged with what is there; `--remove` takes them out again.

Our entry is recognised by the cbhook it runs (any path): a `cbhook` program, or a breaker/cbhook.py run by
`<python> -I -S` (the form setup writes, without the console script's wrapper): running setup again changes nothing,
and a hook that calls another cbhook (an older venv) is updated in place, never added twice. Every
other byte of the file stays. Before the first change a copy of the file is kept beside it
(`<name>.cbconsole-backup`); `--remove` puts those exact bytes back only when the file is byte for byte
what setup writes over them (worked out again from the backup and the hook command in the file), and
otherwise takes out only setup's entries, as text, keeping every other byte (the user's comment, blank
line or key since). `--dry-run` prints the diff and writes nothing. dsh's patch layer: `setup_dsh`.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from breaker.wiring.files import (
    Change,
    Original,
    SetupError,
    apply,
    backup_path,
    check_writable,
    decode,
    diff,
    read,
    read_backup,
    remove_created_dirs,
)
from breaker.wiring.harnesses import (
    EXTRA_SETTINGS,
    HOOK_FILE,
    HOOKS,
    NAMES,
    Hook,
    Places,
    entry,
    hook_file,
    is_cbhook,
    resolve_name,
)
from breaker.wiring.jsontext import Document, JsonTextError, lookup
from breaker.wiring.options import Options, Plan

__all__ = ["Found", "cbhook_entries", "main", "plan"]

_MISSING = object()


# -- the JSON settings of the command-hook harnesses ----------------------------------------------


@dataclass(frozen=True)
class Found:
    """A hook that runs a cbhook: in event `event`, element `group` of its list, handler `handler` of
    that group's hooks (None for Cursor, whose list holds the hooks themselves)."""

    event: str
    group: int
    handler: int | None
    command: str

    @property
    def path(self) -> tuple[str | int, ...]:
        tail: tuple[str | int, ...] = () if self.handler is None else ("hooks", self.handler)
        return ("hooks", self.event, self.group, *tail)


def cbhook_entries(harness: str, value: Any, events: list[str] | None = None) -> Iterator[Found]:
    """Every hook under a settings value's `hooks` that runs a cbhook, in `events` (default: all)."""
    hooks = value.get("hooks") if isinstance(value, dict) else None
    if not isinstance(hooks, dict):
        return
    for event, groups in hooks.items():
        if (events is not None and event not in events) or not isinstance(groups, list):
            continue
        for g, group in enumerate(groups):
            if not isinstance(group, dict):
                continue
            if harness == "cursor":
                if is_cbhook(group.get("command")):
                    yield Found(event, g, None, group["command"])
                continue
            handlers = group.get("hooks")
            for h, handler in enumerate(handlers if isinstance(handlers, list) else []):
                if isinstance(handler, dict) and is_cbhook(handler.get("command")):
                    yield Found(event, g, h, handler["command"])


def _document(path: Path, text: str | None, harness: str) -> Document:
    try:
        doc = Document(text or "", comments=harness == "gemini")
    except JsonTextError as exc:
        what = "JSON with comments" if harness == "gemini" else "JSON"
        raise SetupError(
            path, f"line {exc.line} column {exc.column}: not valid {what}: {exc.message}; nothing was changed"
        ) from None
    hooks = doc.value.get("hooks", {})
    if not isinstance(hooks, dict):
        node = doc.node(("hooks",))
        assert node is not None
        raise SetupError(path, f"line {doc.line_of(node)}: `hooks` is not an object; nothing was changed")
    for event, groups in hooks.items():
        if not isinstance(groups, list):
            node = doc.node(("hooks", event))
            assert node is not None
            raise SetupError(path, f"line {doc.line_of(node)}: hooks.{event} is not a list; nothing was changed")
    return doc


def _without(doc: Document, found: Found, keep: Any) -> str:
    """The text without one cbhook hook, and without the group, list and `hooks` it leaves empty
    (unless the file as it was before setup, `keep`, had them)."""
    group = doc.get(found.path[:3])
    if found.handler is not None and len([h for h in group.get("hooks", [])]) > 1:
        return doc.delete(found.path)
    text = doc.delete(found.path[:3])
    for path in (("hooks", found.event), ("hooks",)):
        after = Document(text, comments=doc.comments)
        if after.get(path) in ([], {}) and _get(keep, path) is _MISSING:
            text = after.delete(path)
    return text


def _get(value: Any, path: tuple[str | int, ...]) -> Any:
    return lookup(value, path, _MISSING)


def _add_hooks(doc: Document, harness: str, hooks: tuple[Hook, ...], command: str) -> str:
    text = doc.bom + doc.text
    if harness == "cursor" and "version" not in Document(text).value:
        text = Document(text).set(("version",), 1)
    for hook in hooks:
        now = Document(text, comments=doc.comments)
        found = list(cbhook_entries(harness, now.value, [hook.event]))
        if not found:
            if now.node(("hooks", hook.event)) is None:
                text = now.set(("hooks", hook.event), [entry(harness, hook, command)])
            else:
                text = now.append(("hooks", hook.event), entry(harness, hook, command))
            continue
        first = found[0]
        if first.command != command:  # another installation's cbhook: this one's, in place
            node = now.node((*first.path, "command"))
            assert node is not None
            text = now.replace(node, command)
        for extra in reversed(found[1:]):  # a second cbhook would count every call twice
            text = _without(Document(text, comments=doc.comments), extra, _MISSING)
    return text


def _json_written(original: Document, harness: str, command: str, keep_loop_detector: bool) -> str:
    """The text setup writes over `original`'s: its hooks calling `command`, and the extra settings."""
    text = _add_hooks(original, harness, HOOKS[harness], command)
    extra = {} if keep_loop_detector else EXTRA_SETTINGS.get(harness, {})
    for setting, value in extra.items():
        after = Document(text, comments=original.comments)
        if after.get(setting, _MISSING) != value:
            text = after.set(setting, value)
    return text


def _json_original(path: Path, harness: str) -> Original:
    return read_backup(path, lambda backup, text: _document(backup, text, harness))


def _json_setup_texts(path: Path, harness: str, value: Any, original: Original) -> list[str]:
    """Every text setup writes over the original to give a file whose cbhook hooks are `value`'s: one for
    each way of running it (Gemini's `--keep-loop-detector` or not). Empty when the original cannot be
    read or `value` holds no one cbhook command (setup writes one)."""
    commands = {f.command for f in cbhook_entries(harness, value)}
    if original.text is None or len(commands) != 1:
        return []
    try:
        before = _document(path, original.text, harness)
    except SetupError:
        return []
    (command,) = commands
    keeps = (False, True) if harness in EXTRA_SETTINGS else (False,)
    return [_json_written(before, harness, command, keep) for keep in keeps]


def _plan_json(options: Options, path: Path) -> Plan:
    harness = options.harness
    old = read(path)
    doc = _document(path, decode(path, old), harness)
    if options.remove:
        return _remove_json(options, path, old, doc)
    plan = Plan()
    new_text = _json_written(doc, harness, options.command, options.keep_loop_detector)
    if (
        harness == "gemini"
        and not options.keep_loop_detector
        and doc.get(("model", "disableLoopDetection")) is not True
    ):
        plan.notes.append(
            "Gemini CLI's own loop detector is now off (model.disableLoopDetection: true): it stops a run "
            "at the 5th identical call in a row, before the guard's duplicateLimit; the guard decides instead "
            "(--keep-loop-detector leaves it on)"
        )
    if harness == "gemini" and options.project is not None:
        plan.notes.append(
            f"Gemini CLI runs a project's hooks only in a trusted folder: trust {options.project} when it asks"
        )
    # The backup is the file as it was before cbconsole first touched it: one that already holds a
    # cbhook hook (setup's, or a hand-made one) is not that.
    pristine = old is not None and not list(cbhook_entries(harness, doc.value))
    plan.changes.append(Change(path, old, new_text.encode("utf-8"), backup=pristine))
    return plan


def _remove_json(options: Options, path: Path, old: bytes | None, doc: Document) -> Plan:
    """Put the original back if the file is exactly what setup wrote over it; else take out only setup's
    entries, as text, and keep every other byte (a comment, a key, spacing the user changed since)."""
    harness = options.harness
    plan = Plan()
    if old is None:
        plan.changes.append(Change(path, None, None))  # no file: nothing to take out
        return plan
    original = _json_original(path, harness)
    if doc.bom + doc.text in _json_setup_texts(path, harness, doc.value, original):
        # No backup: setup created the file, and it goes.
        plan.changes.append(Change(path, old, original.data, drop_backup=original.data is not None))
        return plan
    keep: Any = _MISSING
    if original.data is not None and original.text is not None:
        keep = Document(original.text, comments=doc.comments).value
    new_text = _json_without(doc, harness, keep, backup=original.data is not None)
    change = Change(path, old, new_text.encode("utf-8"))
    if original.data is not None and change.new == original.data:
        change.drop_backup = True  # what is left is the original, to the byte
    elif original.data is None and change.changed and _bare_object(new_text, doc.comments):
        change.new = None  # no backup: setup created it (or it held only a cbhook hook), and nothing else is left
    elif original.data is not None and change.changed:
        plan.notes.append(
            f"{path} has other changes since setup: only cbconsole's entries were taken out; "
            f"{backup_path(path)} is kept"
        )
    plan.changes.append(change)
    return plan


def _json_without(doc: Document, harness: str, keep: Any, *, backup: bool) -> str:
    """The text without setup's entries: its cbhook hooks (and what they leave empty), Gemini's
    `disableLoopDetection` and Cursor's `version` where the original (`keep`) had other values."""
    new_text = doc.bom + doc.text
    for found in reversed(list(cbhook_entries(harness, doc.value))):
        new_text = _without(Document(new_text, comments=doc.comments), found, keep)
    if harness == "gemini":
        after = Document(new_text, comments=True)
        before = _get(keep, ("model", "disableLoopDetection"))
        now = after.get(("model", "disableLoopDetection"), _MISSING)
        if before is _MISSING and now is True:
            new_text = after.delete(("model", "disableLoopDetection"))
            after = Document(new_text, comments=True)
            if after.get(("model",)) == {} and _get(keep, ("model",)) is _MISSING:
                new_text = after.delete(("model",))
        elif before is not _MISSING and now != before:
            new_text = after.set(("model", "disableLoopDetection"), before)
    if harness == "cursor" and _get(keep, ("version",)) is _MISSING:
        after = Document(new_text)  # setup added `version` if the file had none (or setup created it)
        if "version" in after.value and (backup or "hooks" not in after.value):
            new_text = after.delete(("version",))
    return new_text


def _bare_object(text: str, comments: bool) -> bool:
    """Whether `text` is `{}` and spacing: no member, no comment."""
    return Document(text, comments=comments).value == {} and "".join(text.lstrip("\ufeff").split()) == "{}"


def _trust_records(hooks_json: Path, value: Any) -> dict[str, str]:
    """The trust Codex records for each cbhook hook in a hooks.json holding `value`: key -> hash."""
    from breaker.wiring import codex

    key_path = Path(os.path.abspath(hooks_json))
    out = {}
    for found in cbhook_entries("codex", value):
        group = _get(value, found.path[:3])
        handler = _get(value, found.path)
        out[codex.hook_key(key_path, found.event, found.group, found.handler or 0)] = codex.trust_hash(
            found.event, group, handler
        )
    return out


def _plan_codex(options: Options) -> Plan:
    from breaker.wiring import codex  # tomllib: only Codex needs it

    places = options.places
    hooks_json = places.settings_file("codex", options.project)
    plan = _plan_json(options, hooks_json)
    change = plan.changes[0]
    config = places.codex_home() / "config.toml"
    config_old = read(config)
    config_text = decode(config, config_old)
    before = Document(decode(hooks_json, change.old) or "").value
    after = Document(decode(hooks_json, change.new) or "").value if change.new is not None else {}
    wanted = _trust_records(hooks_json, after)
    drop = set(_trust_records(hooks_json, before)) - set(wanted)
    new_config = codex.record_trust(config, config_text, wanted, drop)
    trust = Change(config, config_old, new_config.encode("utf-8") if config_old is not None or new_config else None)
    if options.remove:
        plan.notes += _remove_trust(trust, hooks_json, before, config_text)
        plan.changes.insert(0, trust)
        return plan
    pristine = not (set(wanted) | drop).intersection(codex.trusted(config, config_text))
    trust.backup = config_old is not None and pristine
    if wanted:
        plan.notes.append(
            f"Codex runs a hook only once it is trusted: setup recorded the trust of its {len(wanted)} cbhook "
            f"hooks in {config} (what trusting them in codex's /hooks writes)"
        )
    if options.project is not None:
        plan.notes.append(
            f"Codex reads {hooks_json} only in a trusted project: codex asks to trust {options.project} the first "
            "time it runs there"
        )
    plan.changes.insert(0, trust)  # the trust first: a hook without its trust would be skipped
    return plan


def _remove_trust(trust: Change, hooks_json: Path, hooks: Any, text: str | None) -> list[str]:
    """config.toml on `--remove`, `trust.new` the text with only setup's trust records taken out: its
    original bytes instead if it is exactly what setup wrote over them (the trust of the cbhook hooks in
    hooks.json as it is, or as setup wrote it). What to tell the user."""
    from breaker.wiring import codex

    config = trust.path
    if text is None:
        return []  # no config.toml: nothing to take out
    original = read_backup(config, codex.trusted)
    if original.text is not None:
        written = _json_setup_texts(hooks_json, "codex", hooks, _json_original(hooks_json, "codex"))
        records = [_trust_records(hooks_json, hooks)] + [_trust_records(hooks_json, Document(t).value) for t in written]
        for wanted in records:
            try:
                wrote = wanted and codex.record_trust(config, original.text, wanted, set()) == text
            except SetupError:
                wrote = False
            if wrote:  # no backup: setup created it, and it goes
                trust.new, trust.drop_backup = original.data, original.data is not None
                return []
    if original.data is not None and trust.new == original.data:
        trust.drop_backup = True  # what is left is the original, to the byte
    elif original.data is None and trust.changed and (trust.new or b"").strip() == b"":
        trust.new = None  # setup created it, and nothing else is left
    elif original.data is not None and trust.changed:
        return [
            f"{config} has other changes since setup: only cbconsole's entries were taken out; "
            f"{backup_path(config)} is kept"
        ]
    return []


# -- the command ----------------------------------------------------------------------------------


def plan(options: Options) -> Plan:
    """Every change a setup run makes, computed and checked; nothing is written."""
    if options.harness == "dsh":
        from breaker.wiring.setup_dsh import plan_dsh  # PyYAML and the config schema: only dsh needs them

        result = plan_dsh(options)
    elif options.harness == "codex":
        result = _plan_codex(options)
    else:
        result = _plan_json(options, options.places.settings_file(options.harness, options.project))
    for change in result.changed:
        check_writable(change)
    return result


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cbconsole setup",
        description="Write the hooks that ask the guard into a harness's own settings (merged with what is "
        "there; a backup of the old file is kept beside it). Run it again at any time: it changes nothing, or "
        "updates the cbhook path in place.",
    )
    p.add_argument("harness", metavar="HARNESS", help="claude-code, codex, gemini, dsh or cursor")
    p.add_argument("--project", metavar="DIR", help="the project's own settings in DIR (default: your user settings)")
    p.add_argument("--home", metavar="DIR", help="the home to write in (default: $HOME)")
    p.add_argument("--profile", metavar="NAME", help="dsh: that profile's patch layer (default: $DSH_HOME's)")
    p.add_argument("--socket", metavar="PATH", help="the guard's socket, if not the default (written into the hook)")
    p.add_argument("--fail-closed", action="store_true", help="deny tool calls while the guard is unavailable")
    p.add_argument(
        "--cbhook",
        metavar="PATH",
        help="the cbhook to call: a `cbhook` program, or a breaker/cbhook.py to run with this Python (default: this "
        "installation's breaker/cbhook.py, as `python -I -S`)",
    )
    p.add_argument("--keep-loop-detector", action="store_true", help="gemini: leave Gemini CLI's own loop detector on")
    p.add_argument("--dry-run", action="store_true", help="print what would change; write nothing")
    p.add_argument("--remove", action="store_true", help="take cbconsole's entries out again")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    out = sys.stdout

    def fail(message: str) -> int:
        print(f"cbconsole setup: {message}", file=sys.stderr)
        return 1

    harness = resolve_name(args.harness)
    if harness is None:
        return fail(f"unknown harness {args.harness!r}; expected one of {', '.join(NAMES)}")
    if harness == "dsh" and args.project:
        return fail("dsh has no project settings: use --profile NAME for one profile, or nothing for all of them")
    if harness != "dsh" and args.profile:
        return fail("--profile is for dsh only")
    if args.profile is not None and (
        not args.profile or "/" in args.profile or "\\" in args.profile or args.profile in (".", "..", "node_modules")
    ):
        return fail(f"--profile {args.profile!r}: not a dsh profile name (dsh refuses it too)")
    if args.cbhook:  # a console script `cbhook`, or a breaker/cbhook.py (run by the Python running us)
        cbhook = Path(os.path.abspath(Path(args.cbhook).expanduser()))
        if cbhook.name == HOOK_FILE and not cbhook.is_file():
            return fail(f"--cbhook {cbhook}: not a file")
        if cbhook.name != HOOK_FILE and not (cbhook.is_file() and os.access(cbhook, os.X_OK)):
            return fail(f"--cbhook {cbhook}: not an executable file")
    else:
        cbhook = hook_file()  # `<python> -I -S …/breaker/cbhook.py`: no console-script wrapper, no `site`
    options = Options(
        harness,
        Places.of(args.home, args.project),
        cbhook,
        project=Path(os.path.abspath(Path(args.project).expanduser())) if args.project else None,
        profile=args.profile,
        socket=os.path.abspath(os.path.expanduser(args.socket)) if args.socket else None,
        fail_closed=args.fail_closed,
        keep_loop_detector=args.keep_loop_detector,
        remove=args.remove,
    )
    try:
        result = plan(options)
    except SetupError as exc:
        return fail(f"{exc}")
    name = NAMES[harness]
    changed = result.changed
    for change in changed:
        out.write(diff(change))
    if not changed:
        files = ", ".join(str(c.path) for c in result.changes)
        state = "holds no cbconsole entries" if options.remove else "is already set up"
        print(f"{name}: {files} {state}; nothing changed.", file=out)
        for note in result.notes:
            if "bundle" in note or "disabled" in note or "by hand" in note:
                print(f"note: {note}", file=out)
        return 0
    if args.dry_run:
        print(f"(dry run: nothing was written; {len(changed)} file(s) would change)", file=out)
        return 0
    try:
        for change in changed:
            for line in apply(change):
                print(line, file=out)
        for line in remove_created_dirs(changed) if options.remove else []:
            print(line, file=out)
    except (SetupError, OSError) as exc:
        return fail(f"{exc}")
    for note in result.notes:
        print(f"note: {note}", file=out)
    if options.remove:
        print(f"{name} no longer asks the guard.", file=out)
    else:
        print(
            f"{name} now asks the guard before every tool call. Check with: {doctor_command(options, args.home)}",
            file=out,
        )
    return 0


def doctor_command(options: Options, home: str | None) -> str:
    """The `cbconsole doctor` that checks what this setup run wrote, from any directory: its --home and
    --project (absolute), quoted for the shell."""
    words = ["cbconsole", "doctor"]
    if home:
        words += ["--home", str(options.places.home)]
    if options.project is not None:
        words += ["--project", str(options.project)]
    return shlex.join(words)
