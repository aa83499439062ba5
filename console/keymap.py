"""The user's keymap (`$XDG_CONFIG_HOME/cbconsole/keymap.yaml`): binding ids to keys, read and checked."""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from textual.binding import Binding

# `_character_to_key` is the normalisation `App.set_keymap` applies ("?" becomes question_mark), so a clash
# found here is the clash Textual would meet; textual==8.2.8 is pinned.
from textual.keys import KEY_NAME_REPLACEMENTS, KEY_TO_UNICODE_NAME, Keys, _character_to_key, key_to_character

__all__ = ["MAX_BYTES", "MODIFIERS", "LoadedKeymap", "keymap_path", "load_keymap", "parse_keymap", "split_keys"]

MAX_BYTES = 64 * 1024  # a keymap is a few dozen lines; anything near this is not one
MODIFIERS = ("ctrl", "shift", "alt", "meta", "super", "hyper")  # what Textual puts before a key's name
EXAMPLE = '"ctrl+r" or "f5,r"'

# Every multi-character name Textual gives a key: the special keys, and the printable ones by their names.
KEY_NAMES = (
    frozenset(
        {k.value.rpartition("+")[2] for k in Keys if not k.value.startswith("<")}
        | set(KEY_TO_UNICODE_NAME)
        | set(KEY_NAME_REPLACEMENTS.values())
        | {"comma", "colon", "semicolon", "apostrophe", "ampersand", "asterisk", "tilde"}
    )
    - set(KEY_NAME_REPLACEMENTS)
    - {"", "@", "ctrl-at", "return"}
)  # names Textual never gives a pressed key

_YAML_KINDS = {"int": "an integer", "float": "a number", "bool": "true/false", "null": "nothing", "str": "a string"}


@dataclass(frozen=True, slots=True)
class LoadedKeymap:
    """`keys` is what to give `App.set_keymap` (ids to normalised key lists); `errors` the entries skipped."""

    path: Path
    keys: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def keymap_path(environ: Mapping[str, str] = os.environ) -> Path:
    """`$XDG_CONFIG_HOME/cbconsole/keymap.yaml`, `~/.config/…` when the variable is unset or empty."""
    config = Path(environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return config / "cbconsole" / "keymap.yaml"


def split_keys(keys: str) -> list[str]:
    """A binding's key string as Textual reads it: comma-separated, each key normalised ("?" → question_mark)."""
    return [_character_to_key(k) if len(k) == 1 else k for k in (part.strip() for part in keys.split(","))]


def load_keymap(path: Path, scopes: Mapping[str, Sequence[Binding]]) -> LoadedKeymap:
    """The keymap at `path`; a missing file is an empty keymap and no error. Never raises."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return LoadedKeymap(path)
    except OSError as e:
        return LoadedKeymap(path, errors=[f"{path}: cannot read it: {e.strerror or e}"])
    if len(data) > MAX_BYTES:
        return LoadedKeymap(path, errors=[f"{path}: more than {MAX_BYTES:,} bytes, too big for a keymap; ignored"])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        return LoadedKeymap(path, errors=[f"{path}: not UTF-8 text (byte {e.start}); ignored"])
    return parse_keymap(text, path, scopes)


def parse_keymap(text: str, path: Path, scopes: Mapping[str, Sequence[Binding]]) -> LoadedKeymap:
    """Check `text` against `scopes` (each screen's bindings that are in force together, the app's and its
    widgets' included): good entries are kept, each bad one is skipped with an error naming file:line and id."""
    try:
        # compose, not load: the nodes carry line numbers, and nothing is constructed (no tags run, no
        # alias expanded) — as safe as yaml.safe_load.
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(e, "problem", None) or str(e)
        return LoadedKeymap(path, errors=[f"{where}: not YAML: {problem}; ignored"])
    if root is None:
        return LoadedKeymap(path)
    if not isinstance(root, yaml.MappingNode):
        return LoadedKeymap(
            path,
            errors=[f"{path}:{root.start_mark.line + 1}: expected binding ids mapped to keys, found {_kind(root)}"],
        )
    ids = {b.id: b for bindings in scopes.values() for b in bindings if b.id}
    errors: list[tuple[int, str]] = []
    given: dict[str, tuple[list[str], int]] = {}  # binding id -> (normalised keys, line)
    for key_node, value_node in root.value:
        line = key_node.start_mark.line + 1
        where = f"{path}:{line}"
        if not _is_str(key_node):
            errors.append((line, f"{where}: expected a binding id such as main.interrupt, found {_kind(key_node)}"))
            continue
        binding_id = key_node.value
        if binding_id not in ids:
            near = difflib.get_close_matches(binding_id, ids, n=1)
            hint = f" (did you mean {near[0]}?)" if near else " (the ids are listed in docs/console.md)"
            errors.append((line, f"{where}: {binding_id}: no such binding{hint}"))
            continue
        if binding_id in given:
            errors.append((line, f"{where}: {binding_id}: given again (first on line {given[binding_id][1]}); ignored"))
            continue
        if not _is_str(value_node):
            found = _kind(value_node)
            if isinstance(value_node, yaml.ScalarNode) and value_node.value:
                found += f" (quote it: {value_node.value!r})"
            errors.append((line, f"{where}: {binding_id}: expected keys as a string such as {EXAMPLE}, found {found}"))
            given[binding_id] = ([], line)  # a later repeat is still a repeat
            continue
        problem = next((p for p in map(_key_problem, value_node.value.split(",")) if p), None)
        if problem:
            errors.append((line, f"{where}: {binding_id}: {problem}"))
            given[binding_id] = ([], line)
            continue
        given[binding_id] = (list(dict.fromkeys(split_keys(value_node.value))), line)
    accepted = {i: keys_line for i, keys_line in given.items() if keys_line[0]}
    while clashes := _clashes(accepted, scopes):
        for binding_id, message in clashes.items():
            line = accepted.pop(binding_id)[1]
            errors.append((line, f"{path}:{line}: {binding_id}: {message}"))
    errors.sort(key=lambda e: e[0])
    return LoadedKeymap(path, {i: ",".join(keys) for i, (keys, _line) in accepted.items()}, [e for _l, e in errors])


def _clashes(accepted: Mapping[str, tuple[list[str], int]], scopes: Mapping[str, Sequence[Binding]]) -> dict[str, str]:
    """The keymap's entries that give a key another binding in force on the same screen still has."""
    found: dict[str, str] = {}
    for scope, bindings in scopes.items():
        holders: dict[str, list[Binding]] = {}
        for b in _unique(bindings):
            keys = accepted[b.id][0] if b.id in accepted else split_keys(b.key)
            for key in keys:
                holders.setdefault(key, []).append(b)
        for key, held in holders.items():
            for b in held:
                others = [o for o in held if o is not b]
                if b.id in accepted and others and b.id not in found:
                    other = others[0]
                    name = other.id or f"a widget's {other.description.lower() or other.action} key"
                    found[b.id] = f"{key!r} is already {name} on the {scope} screen; not applied"
    return found


def _unique(bindings: Iterable[Binding]) -> list[Binding]:
    seen: list[Binding] = []
    for b in bindings:
        if not any(b is s for s in seen):
            seen.append(b)
    return seen


def _key_problem(key: str) -> str | None:
    """Why `key` (one of a comma-separated list) is not a key Textual can bind, or None."""
    key = key.strip()
    if not key:
        return "an empty key (keys are separated by commas; a comma itself is `comma`)"
    if len(key) == 1:
        return None if key.isprintable() else f"{key!r} is not a key"
    *modifiers, name = key.split("+")
    for modifier in modifiers:
        if modifier not in MODIFIERS:
            return f"{key!r} is not a key: {modifier!r} is not a modifier ({', '.join(MODIFIERS)})"
    if len(set(modifiers)) != len(modifiers):
        return f"{key!r} is not a key: a modifier given twice"
    if not name:
        return f"{key!r} is not a key: nothing after the last +"
    if (len(name) == 1 and name.isprintable()) or name in KEY_NAMES:
        return None
    if name == name.lower() and name not in KEY_NAME_REPLACEMENTS and key_to_character(name) is not None:
        return None  # a printable key by its Unicode name, e.g. left_parenthesis
    near = difflib.get_close_matches(name.lower(), KEY_NAMES, n=1)
    hint = f" (did you mean {'+'.join([*modifiers, near[0]])!r}?)" if near else ""
    return f"{key!r} is not a key Textual knows{hint}"


def _is_str(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:str"


def _kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    return _YAML_KINDS.get(node.tag.rpartition(":")[2], "a tagged value")
