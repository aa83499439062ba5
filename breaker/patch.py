"""The cordis patch layer: find the circuit-breaker row in dsh's layer files, merge it as dsh does, write it back.

Reading tolerates what belongs to other rows (`!!js` expressions, any tag, aliases) and refuses, as
a broken file, one over the limits below (size, nesting, nodes with aliases expanded). Writing edits
only the text of our row's `config` — every other byte of the file (rows, comments, tags, order, a
BOM, line endings) stays as it was — and replaces the file atomically, never over a change it did
not start from.
"""

from __future__ import annotations

import codecs
import enum
import os
import re
import shlex
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.error import Mark
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from breaker.config import Config, ConfigError, Problem, describe_value
from breaker.paths import FileProblem, TempFileError, read_regular, write_atomic
from breaker.vocab import LayerOrigin

__all__ = [
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "MAX_NODES",
    "NO_FILE",
    "ROW_ID",
    "Layer",
    "Loaded",
    "PatchConflict",
    "PatchError",
    "PatchSources",
    "Tagged",
    "clean_stale_temps",
    "load",
    "parse_entries",
    "read_layer",
    "read_text",
    "write_config",
]

ROW_ID = "circuit-breaker"

# Limits on what a layer file may hold. Real patch files are a few KiB, a few hundred YAML nodes and
# under ten levels deep; each limit is 50 to 100 times that and far below what stalls the guard.
# Pure-Python PyYAML reads roughly 15,000-40,000 nodes a second (measured on a busy 2-core machine),
# so MAX_NODES bounds a reload to about a second whatever the file holds; a 15-line alias bomb
# expands to 10^8 nodes and stalled the guard for 36 s before.
MAX_FILE_BYTES = 1024 * 1024
MAX_DEPTH = 100  # nesting levels; PyYAML composes recursively, so this also keeps clear of RecursionError
MAX_NODES = 20_000  # YAML nodes counted with every alias expanded (`*name` counts the whole of `&name`)


class PatchError(ConfigError):
    """A layer file cannot be used: which file, which line, what is wrong."""

    def __init__(self, path: str | os.PathLike[str], message: str, line: int | None = None):
        self.path = os.fspath(path)
        self.line = line
        where = f"{self.path}:{line}" if line else self.path
        self.message = message
        super().__init__([Problem("file", "a usable cordis patch file", message, where)])

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {self.message}"


class PatchConflict(PatchError):
    """The file changed on disk since the text a write was computed from; nothing was written."""


class Tagged:
    """A value under a tag we do not evaluate (dsh's `!!js expr`, or any other): kept, never run."""

    __slots__ = ("value", "yaml_tag")

    def __init__(self, tag: str, value: Any) -> None:
        self.yaml_tag = "!!" + tag[len("tag:yaml.org,2002:") :] if tag.startswith("tag:yaml.org,2002:") else tag
        self.value = value

    def __repr__(self) -> str:
        return f"Tagged({self.yaml_tag!r}, {describe_value(self.value)})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tagged) and (self.yaml_tag, self.value) == (other.yaml_tag, other.value)

    __hash__ = None  # type: ignore[assignment]


class _TooBig(yaml.YAMLError):
    """A file over one of the limits above: the message names the limit, `line` where it was crossed."""

    def __init__(self, message: str, mark: Mark | None) -> None:
        super().__init__(message)
        self.message = message
        self.line = mark.line + 1 if mark is not None else None


class _Alias:
    """A node written as an alias (`*name`): its marks are the alias's, its children are the anchor's.

    PyYAML hands back the anchored node itself, whose marks point at the anchor's text (perhaps in
    another row); a copy with the alias's own marks lets an edit tell our text from someone else's.
    """

    anchor: str
    target: Node  # the anchored node (or, for a row reached through an aliased list, the row)


class _AliasScalar(_Alias, ScalarNode):
    pass


class _AliasSequence(_Alias, SequenceNode):
    pass


class _AliasMapping(_Alias, MappingNode):
    pass


class _Loader(yaml.SafeLoader):
    """SafeLoader that keeps unknown tags as Tagged values and refuses files over the limits.

    The limits are enforced while composing, before anything is built: depth as nodes open, and the
    expanded node count as each node or alias arrives (an alias adds the size of its anchor).
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0
        self.nodes = 0
        self.sizes: dict[str, int] = {}  # anchor -> expanded nodes under it, known once it is complete
        self.anchored: dict[str, Node] = {}  # PyYAML forgets its anchors after the document; edits need them
        self.alias_uses: list[tuple[str, int, int]] = []  # (anchor, index of `*name`, line)

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(AliasEvent):
            event = self.peek_event()
            target = self.anchors.get(event.anchor)
            if target is None:
                return super().compose_node(parent, index)  # PyYAML's own "found undefined alias"
            size = self.sizes.get(event.anchor)
            if size is None:
                raise _TooBig(
                    f"alias *{_name(event.anchor)} refers to the node that contains it; "
                    "a recursive structure cannot be expanded",
                    event.start_mark,
                )
            self._count(size, event.start_mark)
            self.get_event()
            self.alias_uses.append((event.anchor, event.start_mark.index, event.start_mark.line + 1))
            return _alias_node(target, event.anchor, event.start_mark, event.end_mark)
        event = self.peek_event()
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _TooBig(f"nests deeper than {MAX_DEPTH} levels (the limit for a patch file)", event.start_mark)
        before = self.nodes
        self._count(1, event.start_mark)
        node = super().compose_node(parent, index)
        self.depth -= 1
        if event.anchor is not None and node is not None:
            self.sizes[event.anchor] = self.nodes - before
            self.anchored[event.anchor] = node
        return node

    def _count(self, nodes: int, mark: Mark) -> None:
        self.nodes += nodes
        if self.nodes > MAX_NODES:
            raise _TooBig(
                f"holds more than {MAX_NODES:,} YAML nodes with its aliases expanded (the limit for a patch "
                "file; real ones hold a few hundred): an alias bomb, or not a patch file",
                mark,
            )

    def construct_undefined(self, node: Node) -> Tagged:  # type: ignore[override]
        if isinstance(node, ScalarNode):
            value: Any = self.construct_scalar(node)
        elif isinstance(node, SequenceNode):
            value = self.construct_sequence(node, deep=True)
        elif isinstance(node, MappingNode):
            value = self.construct_mapping(node, deep=True)
        else:  # pragma: no cover - pyyaml has only three node kinds
            value = None
        return Tagged(node.tag, value)

    def construct_yaml_int(self, node: ScalarNode) -> int:
        # Base-60 integers (`1:2:3`, YAML 1.1) cost quadratic time in their length: a 1 MiB one takes
        # minutes. Python's own limit on decimal digits is the bound; nothing valid comes near it.
        if len(node.value) > _MAX_INT_TEXT:
            raise ValueError(f"an integer written with more than {_MAX_INT_TEXT:,} characters")
        return super().construct_yaml_int(node)


_MAX_INT_TEXT = 4300  # sys.int_info.default_max_str_digits
_Loader.add_constructor(None, _Loader.construct_undefined)
_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)


def _alias_node(target: Node, anchor: str, start: Mark, end: Mark) -> Node:
    # The child list is copied: constructing a mapping with `<<` edits its list in place.
    node: _AliasScalar | _AliasSequence | _AliasMapping
    if isinstance(target, ScalarNode):
        node = _AliasScalar(target.tag, target.value, start, end, style=target.style)
    elif isinstance(target, SequenceNode):
        node = _AliasSequence(target.tag, list(target.value), start, end, flow_style=target.flow_style)
    elif isinstance(target, MappingNode):
        node = _AliasMapping(target.tag, list(target.value), start, end, flow_style=target.flow_style)
    else:  # pragma: no cover - pyyaml has only three node kinds
        raise TypeError(f"unknown YAML node {type(target).__name__}")
    node.anchor = anchor
    node.target = target
    return node


def _name(anchor: str) -> str:
    return anchor if len(anchor) <= 40 else anchor[:39] + "…"


# What PyYAML (or the data it builds) raises on hostile input, beyond YAMLError: bad !!int/!!float/
# !!timestamp text (ValueError, OverflowError), unhashable keys (TypeError), deep nesting (RecursionError).
_PARSE_ERRORS = (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError, UnicodeError)


# -- reading one file -----------------------------------------------------------------------------


@dataclass(frozen=True)
class RowRef:
    """One circuit-breaker row found in a file."""

    form: str  # "insert" (inside an `- insert:` list) or "override" (a bare `- id:` entry)
    line: int
    fields: dict[str, Any]
    key_lines: dict[str, str]  # config key -> "file:line"


@dataclass(frozen=True)
class _Parsed:
    text: str
    root: Node | None
    rows: list[tuple[MappingNode, str]]
    anchored: dict[str, Node] = field(default_factory=dict)  # anchor name -> the node it names
    alias_uses: tuple[tuple[str, int, int], ...] = ()  # (anchor, index of `*name` in text, line)


def _read_file(path: Path) -> bytes | None:
    """A layer file's bytes, or None if it does not exist; PatchError if it is not a readable patch file."""
    try:
        return read_regular(path, MAX_FILE_BYTES)  # a FIFO put where a patch file belongs never hangs the guard
    except FileProblem as exc:
        why = {
            "directory": "is a directory, not a patch file",
            "special": "is not a regular file (a FIFO, socket or device?); a patch file is a YAML file",
            "large": f"is larger than {MAX_FILE_BYTES / (1024 * 1024):g} MiB (the limit for a patch file; real ones "
            "are a few KiB)",
        }.get(exc.kind, exc.why)
        raise PatchError(path, why) from None


def _decode(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise PatchError(path, f"is not UTF-8 text (byte {exc.start})", line) from None


def _read_text(path: Path) -> str:
    data = _read_file(path)
    if data is None:
        raise PatchError(path, "cannot be read: no such file (a dangling symbolic link?)")
    return _decode(path, data)


def read_text(path: str | os.PathLike[str]) -> str | None:
    """A layer file's text as `write_config` reads it (the base for its `based_on`); None if there is no file.

    Raises PatchError if the file exists but cannot be used (unreadable, too large, not UTF-8).
    """
    p = Path(os.path.realpath(Path(path).expanduser()))
    data = _read_file(p)
    return None if data is None else _decode(p, data)


def _parse(path: Path, text: str) -> _Parsed:
    try:
        loader = _Loader(text)  # its reader already refuses a NUL or another control character
    except yaml.YAMLError as exc:
        raise PatchError(path, f"is not valid YAML: {_short(str(exc))}") from None
    try:
        root = loader.get_single_node()
    except _TooBig as exc:
        raise PatchError(path, exc.message, exc.line) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = " ".join(p for p in (exc.context, exc.problem) if p) or str(exc)
        raise PatchError(path, f"is not valid YAML: {_short(problem)}", mark.line + 1 if mark else None) from None
    except _PARSE_ERRORS as exc:
        raise PatchError(path, f"is not valid YAML: {_short(str(exc))}") from None
    finally:
        loader.dispose()
    anchored, uses = loader.anchored, tuple(loader.alias_uses)
    if root is None:
        return _Parsed(text, None, [])
    if isinstance(root, ScalarNode) and root.tag == "tag:yaml.org,2002:null":
        return _Parsed(text, None, [])
    if not isinstance(root, SequenceNode):
        kind = "a mapping" if isinstance(root, MappingNode) else "a single value"
        raise PatchError(
            path,
            f"holds {kind} at the top level; a patch file is a list of entries (- id: ... or - insert: [...])",
            root.start_mark.line + 1,
        )
    return _Parsed(text, root, list(_find_rows(root)), anchored, uses)


def _short(text: str, limit: int = 200) -> str:
    """PyYAML quotes what it found (an anchor name, a tag) in full; a message stays a line."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _pairs(node: MappingNode) -> dict[str, Node]:
    return {k.value: v for k, v in node.value if isinstance(k, ScalarNode)}


def _is_row(node: Node) -> bool:
    if not isinstance(node, MappingNode):
        return False
    ident = _pairs(node).get("id")
    return isinstance(ident, ScalarNode) and ident.value == ROW_ID


def _find_rows(root: SequenceNode) -> Iterator[tuple[MappingNode, str]]:
    """Our rows in file order; a row reached through an alias (`- *cb`, `insert: *rows`) comes as an _Alias."""
    for entry in root.value:
        if not isinstance(entry, MappingNode):
            continue
        inserted = _pairs(entry).get("insert")
        if inserted is not None:
            if isinstance(inserted, SequenceNode):
                via = entry if isinstance(entry, _Alias) else inserted if isinstance(inserted, _Alias) else None
                for row in inserted.value:
                    if _is_row(row):
                        yield (_borrowed(row, via) if via is not None else row), "insert"
        elif _is_row(entry):
            yield entry, "override"


def _borrowed(row: MappingNode, via: Node) -> MappingNode:
    """A row whose text is wherever the alias `via` points, marked as such."""
    if isinstance(row, _Alias) or not isinstance(via, _Alias):
        return row
    node = _AliasMapping(row.tag, list(row.value), via.start_mark, via.end_mark, flow_style=row.flow_style)
    node.anchor, node.target = via.anchor, row
    return node


def _construct(path: Path, node: Node) -> Any:
    # An empty stream: constructing reads only the nodes (a loader scans its whole stream on creation,
    # which, once per row of a file with thousands of rows, would be quadratic).
    loader = _Loader("")
    try:
        return loader.construct_object(node, deep=True)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = _short(str(exc.problem or exc))
        raise PatchError(path, f"row {ROW_ID}: {problem}", mark.line + 1 if mark else None) from None
    except _PARSE_ERRORS as exc:
        raise PatchError(path, f"row {ROW_ID}: {_short(str(exc))}", node.start_mark.line + 1) from None
    finally:
        loader.dispose()


def parse_entries(path: str | os.PathLike[str], text: str) -> tuple[SequenceNode | None, list[Any]]:
    """A layer file's top-level list, for edits of other rows than ours (`cbconsole setup dsh`): its YAML
    node, whose marks say where each entry's text is (None for an empty file), and each entry's value
    (values under tags kept as Tagged). PatchError, as `read_layer` raises, for a file dsh would refuse."""
    p = Path(path)
    parsed = _parse(p, text)
    if parsed.root is None:
        return None, []
    assert isinstance(parsed.root, SequenceNode)  # _parse refuses any other top level
    return parsed.root, [_construct(p, entry) for entry in parsed.root.value]


def read_layer(path: str | os.PathLike[str]) -> list[RowRef]:
    """The circuit-breaker rows in one layer file, in file order ([] if the file does not exist)."""
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        return []
    parsed = _parse(p, _read_text(p))
    refs = []
    for node, form in parsed.rows:
        fields_ = _construct(p, node)
        key_lines: dict[str, str] = {}
        cfg = _pairs(node).get("config")
        if isinstance(cfg, MappingNode):
            for k, _v in cfg.value:
                if isinstance(k, ScalarNode):
                    key_lines[k.value] = f"{p}:{k.start_mark.line + 1}"
        refs.append(RowRef(form, node.start_mark.line + 1, fields_, key_lines))
    return refs


# -- layers and merging ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Layer:
    """One patch file in dsh's order: "bundle", "profile", "home" or "patch" (an explicit --patch)."""

    path: Path
    origin: LayerOrigin

    def __str__(self) -> str:
        return f"{self.origin} layer {self.path}"


@dataclass(frozen=True)
class PatchSources:
    """Where the layers are: `$DSH_HOME` (default ~/.dsh), an optional profile, explicit --patch files."""

    dsh_home: Path | None = None
    profile: str | None = None
    patches: tuple[Path, ...] = ()
    bundles: tuple[Path, ...] = ()

    @classmethod
    def from_env(
        cls,
        *,
        profile: str | None = None,
        patches: Iterable[str | os.PathLike[str]] = (),
        bundles: Iterable[str | os.PathLike[str]] = (),
        environ: Mapping[str, str] | None = None,
    ) -> PatchSources:
        env = os.environ if environ is None else environ
        home = Path(env.get("DSH_HOME") or "~/.dsh").expanduser()
        return cls(home, profile, tuple(Path(p).expanduser().absolute() for p in patches), tuple(map(Path, bundles)))

    def layers(self) -> list[Layer]:
        """All layers, lowest precedence first (a later layer wins per row; its `config` replaces whole)."""
        out = [Layer(b, "bundle") for b in self.bundles]
        if self.dsh_home is not None:
            if self.profile:
                out.append(Layer(self.dsh_home / "profiles" / self.profile / "cordis.patch.yml", "profile"))
            out.append(Layer(self.dsh_home / "cordis.patch.yml", "home"))
        out.extend(Layer(p, "patch") for p in self.patches)
        return out

    def settings_files(self) -> list[Path]:
        """dsh's settings.yaml files, which do NOT configure bundle plugins (we warn if they try)."""
        if self.dsh_home is None:
            return []
        out = [self.dsh_home / "settings.yaml"]
        if self.profile:
            out.append(self.dsh_home / "profiles" / self.profile / "settings.yaml")
        return out

    def watched_files(self) -> list[Path]:
        return [layer.path for layer in self.layers()] + self.settings_files()


@dataclass(frozen=True)
class Loaded:
    """The merged result of all layers."""

    config: Config  # the settings in force, as written (see `effective` for `disabled`)
    disabled: bool  # `disabled: true` on the row: the guard is off
    config_from: Layer | None  # the layer whose `config` is in force (None = built-in defaults)
    row_in: tuple[Layer, ...]  # layers that hold a circuit-breaker row
    layers: tuple[Layer, ...]
    notes: tuple[str, ...] = field(default=())  # things the user should know (not errors)

    @property
    def effective(self) -> Config:
        """The config the guard should run with."""
        return self.config.replace(enabled=False) if self.disabled and self.config.enabled else self.config

    def write_target(self) -> Path:
        """Where an edit should be written so that it takes effect.

        The highest-precedence user layer that already holds our row (nothing above it does, so
        its `config` wins); else the last --patch file, else the profile layer, else the home layer.
        """
        for layer in reversed(self.row_in):
            if layer.origin != "bundle":
                return layer.path
        for origin in ("patch", "profile", "home"):
            for layer in reversed(self.layers):
                if layer.origin == origin:
                    return layer.path
        raise PatchError("(no layer)", "there is no user patch layer to write to; give --patch FILE or set DSH_HOME")


def load(sources: PatchSources) -> Loaded:
    """Read every layer and merge the circuit-breaker row as dsh does. Raises PatchError/ConfigError."""
    layers = sources.layers()
    disabled = False
    config_map: Any = None
    config_from: Layer | None = None
    config_lines: dict[str, str] = {}
    row_in: list[Layer] = []
    replaced: list[Layer] = []
    for layer in layers:
        for ref in read_layer(layer.path):
            if not row_in or row_in[-1] != layer:
                row_in.append(layer)
            where = f"{layer.path}:{ref.line}"
            if "disabled" in ref.fields:
                value = ref.fields["disabled"]
                if not isinstance(value, bool):
                    raise ConfigError([Problem("disabled", "true or false", describe_value(value), where)])
                disabled = value
            if "config" in ref.fields:
                if config_from is not None and config_from != layer:
                    replaced.append(config_from)
                config_map, config_from, config_lines = ref.fields["config"], layer, ref.key_lines
    config = Config.from_mapping(config_map, where=str(config_from.path) if config_from else "", lines=config_lines)
    notes = list(config.warnings)
    if disabled:
        notes.append(f"the {ROW_ID} row is disabled (disabled: true): the guard allows every call")
    for layer in replaced:
        notes.append(
            f"the config in {layer} is replaced whole by the one in {config_from} "
            "(dsh does not merge configs key by key)"
        )
    notes.extend(_settings_warnings(sources))
    return Loaded(config, disabled, config_from, tuple(row_in), tuple(layers), tuple(notes))


def _settings_warnings(sources: PatchSources) -> list[str]:
    notes = []
    for path in sources.settings_files():
        try:
            text = _read_text(path) if path.is_file() else ""
            data = yaml.load(text, Loader=_Loader) if text else None
        except (PatchError, *_PARSE_ERRORS):
            continue  # settings.yaml is dsh's to validate, not ours
        if isinstance(data, dict) and any(k in data for k in (ROW_ID, "circuitBreaker", "circuit_breaker")):
            notes.append(
                f"{path} has a circuit-breaker section, which has no effect in dsh: bundle plugins are "
                f"configured only by the cordis patch layer. Move it into a `- id: {ROW_ID}` row with "
                "a `config:` mapping in your profile's or $DSH_HOME's cordis.patch.yml."
            )
    return notes


# -- writing --------------------------------------------------------------------------------------

_PLAIN = re.compile(r"[A-Za-z_/][A-Za-z0-9_./-]*\Z")  # no ':', '#', space or leading indicator: safe unquoted
_RESERVED = {"true", "false", "yes", "no", "on", "off", "null", "y", "n"}


def _render(value: Any) -> str:
    """One value as YAML flow text (readable by PyYAML and by dsh's js-yaml)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return value if _PLAIN.match(value) and value.lower() not in _RESERVED else _quote(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_render(v) for v in value) + "]"
    if isinstance(value, Mapping):  # per-tool overrides: tool names quoted as any string is
        return "{" + ", ".join(f"{_render(k)}: {_render(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {type(value).__name__} into a patch file")


def _quote(text: str) -> str:
    out = ['"']
    for ch in text:
        o = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif o < 0x20 or 0x7F <= o < 0xA0 or o in (0x2028, 0x2029, 0xFEFF, 0xFFFE, 0xFFFF) or 0xD800 <= o < 0xE000:
            out.append(f"\\u{o:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _flow_map(mapping: Mapping[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {_render(v)}" for k, v in mapping.items()) + "}"


def _block_lines(mapping: Mapping[str, Any], indent: int, nl: str) -> str:
    pad = " " * indent
    return "".join(f"{nl}{pad}{k}: {_render(v)}" for k, v in mapping.items())


def _newline(text: str) -> str:
    """The line ending most of the file's lines use, for the lines we write (LF on a tie or no lines)."""
    crlf = text.count("\r\n")
    lf = text.count("\n") - crlf
    cr = text.count("\r") - crlf
    if crlf > lf and crlf >= cr:
        return "\r\n"
    if cr > lf and cr > crlf:
        return "\r"
    return "\n"


def _content_end(node: Node, text: str) -> int:
    """Index just past a node's own text (PyYAML's end marks swallow trailing comments and blank lines)."""
    if isinstance(node, _Alias):
        return node.end_mark.index  # just past `*name`: the anchor's text is elsewhere
    if isinstance(node, (MappingNode, SequenceNode)) and not node.flow_style and node.value:
        last = node.value[-1]
        return _content_end(last[1] if isinstance(node, MappingNode) else last, text)
    start, end = node.start_mark.index, node.end_mark.index
    while end > start and text[end - 1] in " \t\r\n":
        end -= 1
    return end


_BREAK = re.compile(r"[\r\n]")


def _line_end(text: str, index: int) -> int:
    """Where a new line may be inserted after the line holding `index`: after any comment, before its break."""
    found = _BREAK.search(text, index)
    return len(text) if found is None else found.start()


def _desired(config: Config, present: Iterable[str]) -> dict[str, Any]:
    """Keys the file already has (in its order), then each key that differs from its default (in table order)."""
    full = config.to_mapping()
    keys = [k for k in present if k in full]
    keys += [k for k in config.to_mapping(only_changed=True) if k not in keys]
    return {k: full[k] for k in keys}


def _edit(path: Path, text: str, parsed: _Parsed, config: Config) -> str:
    """The new file text: only our row's config changes."""
    nl = _newline(text)
    edits: list[tuple[int, int, str]] = []
    root = parsed.root
    if not parsed.rows:
        desired = _desired(config, ())
        block = f"- id: {ROW_ID}" + ((nl + "  config:" + _block_lines(desired, 4, nl)) if desired else "")
        if isinstance(root, SequenceNode) and root.flow_style:
            inner = text[root.start_mark.index + 1 : root.end_mark.index - 1].strip()
            entry = f"{{id: {ROW_ID}, config: {_flow_map(desired)}}}"
            edits.append(
                (root.start_mark.index, root.end_mark.index, "[" + (inner + ", " if inner else "") + entry + "]")
            )
        else:
            col = root.start_mark.column if isinstance(root, SequenceNode) else 0
            block = nl.join(" " * col + line for line in block.split(nl))
            sep = "" if not text or text.endswith(("\n", "\r")) else nl
            edits.append((len(text), len(text), f"{sep}{block}{nl}"))
        return _apply(text, edits)

    row = _own_row(path, parsed)
    pairs = {k.value: (k, v) for k, v in row.value if isinstance(k, ScalarNode)}
    cfg_pair = pairs.get("config")
    col = row.value[0][0].start_mark.column  # the row's keys' column
    if cfg_pair is None:
        desired = _desired(config, ())
        if not desired:
            pass  # no config and none needed: the defaults are in force either way
        elif row.flow_style:
            close = text.rfind("}", row.start_mark.index, row.end_mark.index)
            edits.append((close, close, f", config: {_flow_map(desired)}"))
        else:
            at = _line_end(text, _content_end(row.value[-1][1], text))
            edits.append((at, at, nl + " " * col + "config:" + _block_lines(desired, col + 2, nl)))
        return _apply(text, edits)

    key_node, cfg_node = cfg_pair
    # Read everything off the nodes before constructing them: constructing a `<<` merge edits them.
    start, end = key_node.end_mark.index, _content_end(cfg_node, text)
    shared = _shared_anchor(path, parsed, cfg_node, start, end)
    whole = _must_rewrite_whole(parsed, cfg_node)
    is_map = isinstance(cfg_node, MappingNode)
    present = [k.value for k, _ in cfg_node.value if isinstance(k, ScalarNode)] if is_map else []
    if _says(path, cfg_node, config):
        return text  # it already says this: keep its formatting, aliases and all
    if shared is not None:
        raise shared
    desired = _desired(config, present)
    if row.flow_style:
        edits.append((cfg_node.start_mark.index, end, _flow_map(desired)))
    elif is_map and not cfg_node.flow_style and not whole:
        block_edits = _edit_block_map(path, text, cfg_node, desired, nl)
        if block_edits is not None:
            edits.extend(block_edits)
        else:  # keys to drop: rewrite the mapping whole
            edits.append((start, end, ":" + _block_lines(desired, col + 2, nl)))
    elif desired and (not is_map or not cfg_node.flow_style):
        # `config:` left empty (null), or a block config that must be written out whole: the values an
        # alias or a `<<` merge brought in are spelled out here, and the anchor's text is not touched.
        edits.append((start, end, ":" + _block_lines(desired, col + 2, nl)))
    else:  # a flow mapping stays a flow mapping
        edits.append((start, end, ": " + _flow_map(desired)))
    return _apply(text, edits)


def _own_row(path: Path, parsed: _Parsed) -> MappingNode:
    """The row to edit: the file's last circuit-breaker row, as written in this file."""
    row, _form = parsed.rows[-1]  # the last row in a file wins within it
    if not isinstance(row, _Alias):
        return row
    # `- insert: [*cb]`: the row's text is wherever &cb is. Ours to edit only if that text is itself
    # one of the file's rows (not, say, a template inside another row's config).
    target = row.target
    if isinstance(target, MappingNode) and any(found is target for found, _ in parsed.rows):
        return target
    raise PatchError(
        path,
        f"the {ROW_ID} row here comes through an alias (*{_name(row.anchor)}) from text at line "
        f"{target.start_mark.line + 1}, which is not a row of its own; the settings were not saved. Write the "
        "row out in full here, or edit the file by hand",
        row.start_mark.line + 1,
    )


def _children(node: Node) -> Iterator[Node]:
    if isinstance(node, MappingNode):
        for k, v in node.value:
            yield k
            yield v
    elif isinstance(node, SequenceNode):
        yield from node.value


def _own_nodes(node: Node) -> Iterator[Node]:
    """A node and everything under it written in its own text (not what its aliases stand for)."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, _Alias):
            continue
        yield n
        stack.extend(_children(n))


def _must_rewrite_whole(parsed: _Parsed, cfg: Node) -> bool:
    """Whether per-key edits of our config could go wrong, so it is written out whole instead.

    Yes if the config is itself an alias (its keys are written elsewhere), holds a `<<` merge (its
    keys come from elsewhere), or holds an anchor something uses (editing one key could drop the
    anchor another key's alias needs). An alias as a key's value is fine: that value is replaced.
    """
    if isinstance(cfg, _Alias):
        return True
    names = {id(n): name for name, n in parsed.anchored.items()}
    used = {name for name, _at, _line in parsed.alias_uses}
    for n in _own_nodes(cfg):
        if names.get(id(n)) in used:
            return True
        if isinstance(n, MappingNode) and any(k.tag == "tag:yaml.org,2002:merge" for k, _ in n.value):
            return True
    return False


def _shared_anchor(path: Path, parsed: _Parsed, cfg: Node, start: int, end: int) -> PatchError | None:
    """The error to raise if an anchor inside our config is used outside it: an edit would change that use too."""
    names = {id(n): name for name, n in parsed.anchored.items()}
    inside = {names[id(n)] for n in _own_nodes(cfg) if id(n) in names}
    for name, at, line in parsed.alias_uses:
        if name in inside and not start <= at < end:
            return PatchError(
                path,
                f"the {ROW_ID} config holds the anchor &{_name(name)}, which line {line} uses "
                f"(*{_name(name)}); saving would change that text too, so the settings were not saved. "
                f"Write the values out in full at line {line}, or edit the file by hand",
                parsed.anchored[name].start_mark.line + 1,
            )
    return None


def _says(path: Path, node: Node, config: Config) -> bool:
    """Whether a config node already reads as `config` (then nothing is written)."""
    try:
        current = Config.from_mapping(_construct(path, node))
    except ConfigError:
        return False
    return current.to_mapping() == config.to_mapping()


def _edit_block_map(
    path: Path, text: str, node: MappingNode, desired: dict[str, Any], nl: str
) -> list[tuple[int, int, str]] | None:
    """Per-key edits that keep every untouched key's text and comments; None if keys must be dropped."""
    edits = []
    col = node.value[0][0].start_mark.column
    seen = set()
    for k, v in node.value:
        name = k.value if isinstance(k, ScalarNode) else None
        if name in desired:
            seen.add(name)
            try:
                current = _construct(path, v)
            except PatchError:
                current = object()
            if _same(current, desired[name]):
                continue  # untouched: keeps its formatting and comments byte for byte
            edits.append((k.end_mark.index, _content_end(v, text), ": " + _render(desired[name])))
        else:  # an unknown key (or a merge key): rewrite the mapping whole instead
            return None
    new = {k: v for k, v in desired.items() if k not in seen}
    if new:
        at = _line_end(text, _content_end(node, text))
        edits.append((at, at, _block_lines(new, col, nl)))
    return edits


def _same(current: Any, wanted: Any) -> bool:
    if isinstance(current, (list, tuple)) and isinstance(wanted, (list, tuple)):
        return list(current) == list(wanted)
    return type(current) is type(wanted) and current == wanted


def _apply(text: str, edits: list[tuple[int, int, str]]) -> str:
    for start, end, new in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        text = text[:start] + new + text[end:]
    return text


class _NoFile(enum.Enum):
    NO_FILE = "no file"


NO_FILE = _NoFile.NO_FILE
"""`write_config(..., based_on=NO_FILE)`: the caller's config was computed with no file there (read_text gave None)."""

_NEW_FILE = "# cordis patch layer: rows here override the bundles' (written by cbconsole)\n"
_CHANGED = (
    "changed on disk since the settings being saved were read from it, so they were not saved and the file "
    "was left as it is; read it again and redo the change"
)


def write_config(path: str | os.PathLike[str], config: Config, *, based_on: str | _NoFile | None = None) -> Path:
    """Write `config` into the circuit-breaker row of one layer file, atomically; returns the file written.

    Only the row's `config` text changes (a missing row is appended as a bare `- id:` override; a
    missing file is created). Keys the row already had are kept, in their order, with new values;
    keys that differ from the defaults are added. A config that is, or holds, an alias is written out
    in full in the row, so the anchor (perhaps another row's) is never edited. A UTF-8 BOM and the
    file's line ending (LF, CRLF or CR) are kept. If the row already reads as `config`, nothing is written.
    The result is re-read and checked before it replaces the old file, so a bug here can never leave
    a file dsh or we cannot read.

    `based_on` keeps a write from reverting an edit made by hand: the text `read_text` gave when the
    caller read the config it changed (NO_FILE if it gave None). If the file does not hold exactly
    that, PatchConflict is raised and the file is left alone. With or without it, a file that changes
    while this call is writing it is never overwritten (PatchConflict).

    PatchError, file untouched, for a read-only file and for one with other hard links (a rename
    would split them; a symbolic link is followed and works).
    """
    target = Path(os.path.realpath(Path(path).expanduser()))  # editors keep symlinks; so do we
    data = _read_file(target)
    text = None if data is None else _decode(target, data)
    if based_on is not None and (NO_FILE if text is None else text) != based_on:
        raise PatchConflict(target, _CHANGED)
    if data is not None:
        _check_replaceable(target)
    source = _NEW_FILE if text is None else text
    parsed = _parse(target, source)
    new_text = _edit(target, source, parsed, config)
    if new_text == text:
        return target  # it already says this: no write, so no reload either
    check = _parse(target, new_text)
    if not check.rows:
        raise PatchError(target, "internal error: the edited text lost the circuit-breaker row; file left unchanged")
    fields_ = _construct(target, check.rows[-1][0])
    written = Config.from_mapping(fields_.get("config"))
    if written.to_mapping() != config.to_mapping():
        raise PatchError(
            target, "internal error: the edited text does not read back as the config; file left unchanged"
        )
    bom = codecs.BOM_UTF8 if data is not None and data.startswith(codecs.BOM_UTF8) else b""

    def unchanged_since_read() -> None:
        if _read_file(target) != data:
            raise PatchConflict(target, _CHANGED)

    _atomic_write(target, bom + new_text.encode("utf-8"), unchanged_since_read)
    return target


def _check_replaceable(target: Path) -> None:
    """Refuse a file that writing by rename would get wrong: read-only, or one of several hard links.

    A rename needs only the directory to be writable, so without this check a read-only file (or
    another user's) would be replaced all the same, and its mode taken as a mere suggestion.
    """
    info = os.stat(target)
    mode = stat.S_IMODE(info.st_mode)
    fix = f"(chmod u+w {shlex.quote(str(target))}) and save again, or edit it by hand"
    # os.access() says yes to root whatever the mode, so the mode's write bits are read as well.
    if not mode & 0o222 or (info.st_uid == os.geteuid() and not mode & stat.S_IWUSR):
        raise PatchError(
            target, f"is read-only (mode {mode:04o}), so the settings were not saved; make it writable {fix}"
        )
    if info.st_uid != os.geteuid():  # a rename would also make it ours: another user's file stays theirs
        raise PatchError(
            target,
            f"belongs to another user (uid {info.st_uid}), so the settings were not saved into it; copy it to a "
            "layer of your own, or edit it as its owner",
        )
    if not os.access(target, os.W_OK):
        raise PatchError(
            target,
            f"is not writable by this user (mode {mode:04o}, owner uid {info.st_uid}), so the settings were not "
            f"saved; make it writable {fix}",
        )
    if info.st_nlink > 1:
        raise PatchError(
            target,
            f"has {info.st_nlink} hard links, so the settings were not saved into it: saving replaces the file "
            "(a new file renamed over it), which would leave the other names with the old text. Make the other "
            f"names symbolic links instead (ln -sf {shlex.quote(str(target))} OTHER-NAME), which saving follows",
        )


_TEMP_SUFFIX = ".cbtmp"


def _temp_name(name: str) -> re.Pattern[str]:
    """The names `_atomic_write` gives its temporary files beside `name` (mkstemp: 8 of [a-z0-9_])."""
    return re.compile(re.escape(f".{name}.") + r"[a-z0-9_]{8}" + re.escape(_TEMP_SUFFIX))


def _atomic_write(target: Path, payload: bytes, before_rename: Callable[[], None]) -> None:
    """Write beside the target, fsync, rename over it (`paths.write_atomic`), keeping the target's mode.

    `before_rename` runs last, just before the rename, and may raise to call the write off.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = 0o644
    try:
        write_atomic(target, payload, mode=mode, suffix=_TEMP_SUFFIX, before_rename=before_rename)
    except TempFileError as exc:
        raise PatchError(
            target, f"cannot be saved: no file can be created in {target.parent} ({exc.strerror or exc})"
        ) from None


def clean_stale_temps(sources: PatchSources) -> list[Path]:
    """Remove the temporary files a killed write left beside the layer files; returns what was removed.

    Only our own names (`.<layer file name>.<8 random>.cbtmp`, regular files) beside each layer file
    and beside the file a symlinked layer points to. Call it before this process writes, and while no
    other process writes these layers (a guard at start, holding its socket).
    """
    removed: list[Path] = []
    seen: set[Path] = set()
    for layer in sources.layers():
        for path in (layer.path, Path(os.path.realpath(layer.path))):
            if path in seen:
                continue
            seen.add(path)
            ours = _temp_name(path.name)
            try:
                with os.scandir(path.parent) as entries:
                    stale = [e for e in entries if ours.fullmatch(e.name) and e.is_file(follow_symlinks=False)]
            except OSError:
                continue  # no such directory (yet), or not ours to read
            for entry in stale:
                try:
                    os.unlink(entry.path)
                except OSError:
                    continue
                removed.append(Path(entry.path))
    return removed
