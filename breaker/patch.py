"""The cordis patch layer: find the circuit-breaker row in dsh's layer files, merge it as dsh does, write it back.

Reading tolerates what belongs to other rows (`!!js` expressions, any tag). Writing edits only the
text of our row's `config` — every other byte of the file (rows, comments, tags, order) stays as it
was — and replaces the file atomically.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from breaker.config import KEYS, Config, ConfigError, Problem, describe_value

__all__ = [
    "ROW_ID",
    "Layer",
    "Loaded",
    "PatchError",
    "PatchSources",
    "Tagged",
    "load",
    "read_layer",
    "write_config",
]

ROW_ID = "circuit-breaker"
_MAX_FILE = 16 * 1024 * 1024  # a patch file is a few KiB; refuse to slurp something absurd


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


class Tagged:
    """A value under a tag we do not evaluate (dsh's `!!js expr`, or any other): kept, never run."""

    __slots__ = ("value", "yaml_tag")

    def __init__(self, tag: str, value: Any) -> None:
        self.yaml_tag = "!!" + tag[len("tag:yaml.org,2002:") :] if tag.startswith("tag:yaml.org,2002:") else tag
        self.value = value

    def __repr__(self) -> str:
        return f"Tagged({self.yaml_tag!r}, {self.value!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tagged) and (self.yaml_tag, self.value) == (other.yaml_tag, other.value)

    __hash__ = None  # type: ignore[assignment]


class _Loader(yaml.SafeLoader):
    """SafeLoader that turns any unknown tag into a Tagged value instead of failing."""

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


_Loader.add_constructor(None, _Loader.construct_undefined)

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


def _read_text(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read(_MAX_FILE + 1)
    except IsADirectoryError:
        raise PatchError(path, "is a directory, not a patch file") from None
    except OSError as exc:
        raise PatchError(path, f"cannot be read: {exc.strerror or exc}") from None
    if len(data) > _MAX_FILE:
        raise PatchError(path, f"is larger than {_MAX_FILE // (1024 * 1024)} MiB; not a patch file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise PatchError(path, f"is not UTF-8 text (byte {exc.start})", line) from None


def _parse(path: Path, text: str) -> _Parsed:
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = " ".join(p for p in (exc.context, exc.problem) if p) or str(exc)
        raise PatchError(path, f"is not valid YAML: {problem}", mark.line + 1 if mark else None) from None
    except _PARSE_ERRORS as exc:
        raise PatchError(path, f"is not valid YAML: {exc}") from None
    finally:
        loader.dispose()
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
    return _Parsed(text, root, list(_find_rows(root)))


def _pairs(node: MappingNode) -> dict[str, Node]:
    return {k.value: v for k, v in node.value if isinstance(k, ScalarNode)}


def _is_row(node: Node) -> bool:
    if not isinstance(node, MappingNode):
        return False
    ident = _pairs(node).get("id")
    return isinstance(ident, ScalarNode) and ident.value == ROW_ID


def _find_rows(root: SequenceNode) -> Iterator[tuple[MappingNode, str]]:
    for entry in root.value:
        if not isinstance(entry, MappingNode):
            continue
        inserted = _pairs(entry).get("insert")
        if inserted is not None:
            if isinstance(inserted, SequenceNode):
                for row in inserted.value:
                    if _is_row(row):
                        yield row, "insert"
        elif _is_row(entry):
            yield entry, "override"


def _construct(path: Path, text: str, node: Node) -> Any:
    loader = _Loader(text)
    try:
        return loader.construct_object(node, deep=True)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise PatchError(path, f"row {ROW_ID}: {exc.problem or exc}", mark.line + 1 if mark else None) from None
    except _PARSE_ERRORS as exc:
        raise PatchError(path, f"row {ROW_ID}: {exc}", node.start_mark.line + 1) from None
    finally:
        loader.dispose()


def read_layer(path: str | os.PathLike[str]) -> list[RowRef]:
    """The circuit-breaker rows in one layer file, in file order ([] if the file does not exist)."""
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        return []
    parsed = _parse(p, _read_text(p))
    refs = []
    for node, form in parsed.rows:
        fields_ = _construct(p, parsed.text, node)
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
    origin: str

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


def _block_lines(mapping: Mapping[str, Any], indent: int) -> str:
    pad = " " * indent
    return "".join(f"\n{pad}{k}: {_render(v)}" for k, v in mapping.items())


def _content_end(node: Node, text: str) -> int:
    """Index just past a node's own text (PyYAML's end marks swallow trailing comments and blank lines)."""
    if isinstance(node, (MappingNode, SequenceNode)) and not node.flow_style and node.value:
        last = node.value[-1]
        return _content_end(last[1] if isinstance(node, MappingNode) else last, text)
    start, end = node.start_mark.index, node.end_mark.index
    while end > start and text[end - 1] in " \t\r\n":
        end -= 1
    return end


def _line_end(text: str, index: int) -> int:
    """Where a new line may be inserted after the line holding `index` (after any trailing comment)."""
    nl = text.find("\n", index)
    return len(text) if nl < 0 else nl


def _desired(config: Config, present: Iterable[str]) -> dict[str, Any]:
    """Keys the file already has (in its order) plus every key that differs from the default."""
    full = config.to_mapping()
    changed = config.to_mapping(only_changed=True)
    keys = [k for k in present if k in full]
    keys += [k for k in KEYS if k in changed and k not in keys]
    return {k: full[k] for k in keys}


def _edit(path: Path, text: str, parsed: _Parsed, config: Config) -> str:
    """The new file text: only our row's config changes."""
    edits: list[tuple[int, int, str]] = []
    root = parsed.root
    if not parsed.rows:
        desired = _desired(config, ())
        block = f"- id: {ROW_ID}" + (("\n  config:" + _block_lines(desired, 4)) if desired else "")
        if isinstance(root, SequenceNode) and root.flow_style:
            inner = text[root.start_mark.index + 1 : root.end_mark.index - 1].strip()
            entry = f"{{id: {ROW_ID}, config: {_flow_map(desired)}}}"
            edits.append(
                (root.start_mark.index, root.end_mark.index, "[" + (inner + ", " if inner else "") + entry + "]")
            )
        else:
            col = root.start_mark.column if isinstance(root, SequenceNode) else 0
            block = "\n".join(" " * col + line for line in block.split("\n"))
            sep = "" if not text or text.endswith("\n") else "\n"
            edits.append((len(text), len(text), f"{sep}{block}\n"))
        return _apply(text, edits)

    row, _form = parsed.rows[-1]  # the last row in a file wins within it
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
            edits.append((at, at, "\n" + " " * col + "config:" + _block_lines(desired, col + 2)))
        return _apply(text, edits)

    key_node, cfg_node = cfg_pair
    is_map = isinstance(cfg_node, MappingNode)
    present = [k.value for k, _ in cfg_node.value if isinstance(k, ScalarNode)] if is_map else []
    desired = _desired(config, present)
    end = _content_end(cfg_node, text)
    if row.flow_style:
        edits.append((cfg_node.start_mark.index, end, _flow_map(desired)))
    elif is_map and not cfg_node.flow_style:
        block_edits = _edit_block_map(path, text, cfg_node, desired)
        if block_edits is not None:
            edits.extend(block_edits)
        else:  # keys to drop: rewrite the mapping whole
            edits.append((key_node.end_mark.index, end, ":" + _block_lines(desired, col + 2)))
    elif desired and not is_map:  # `config:` left empty (null): give it a block
        edits.append((key_node.end_mark.index, end, ":" + _block_lines(desired, col + 2)))
    else:  # a flow mapping stays a flow mapping
        edits.append((key_node.end_mark.index, end, ": " + _flow_map(desired)))
    return _apply(text, edits)


def _edit_block_map(
    path: Path, text: str, node: MappingNode, desired: dict[str, Any]
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
                current = _construct(path, text, v)
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
        edits.append((at, at, _block_lines(new, col)))
    return edits


def _same(current: Any, wanted: Any) -> bool:
    if isinstance(current, (list, tuple)) and isinstance(wanted, (list, tuple)):
        return list(current) == list(wanted)
    return type(current) is type(wanted) and current == wanted


def _apply(text: str, edits: list[tuple[int, int, str]]) -> str:
    for start, end, new in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        text = text[:start] + new + text[end:]
    return text


def write_config(path: str | os.PathLike[str], config: Config) -> Path:
    """Write `config` into the circuit-breaker row of one layer file, atomically; returns the file written.

    Only the row's `config` text changes (a missing row is appended as a bare `- id:` override; a
    missing file is created). Keys the row already had are kept, in their order, with new values;
    keys that differ from the defaults are added. The result is re-read and checked before it
    replaces the old file, so a bug here can never leave a file dsh or we cannot read.
    """
    target = Path(os.path.realpath(Path(path).expanduser()))  # editors keep symlinks; so do we
    exists = target.exists()
    text = (
        _read_text(target)
        if exists
        else "# cordis patch layer: rows here override the bundles' (written by cbconsole)\n"
    )
    parsed = _parse(target, text)
    new_text = _edit(target, text, parsed, config)
    check = _parse(target, new_text)
    if not check.rows:
        raise PatchError(target, "internal error: the edited text lost the circuit-breaker row; file left unchanged")
    fields_ = _construct(target, new_text, check.rows[-1][0])
    written = Config.from_mapping(fields_.get("config"))
    if written.to_mapping() != config.to_mapping():
        raise PatchError(
            target, "internal error: the edited text does not read back as the config; file left unchanged"
        )
    _atomic_write(target, new_text, exists)
    return target


def _atomic_write(target: Path, text: str, exists: bool) -> None:
    """Write beside the target, fsync, rename over it: a crash at any point leaves old or new, never half."""
    target.parent.mkdir(parents=True, exist_ok=True)
    mode = (target.stat().st_mode & 0o7777) if exists else 0o644
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".cbtmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        dir_fd = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        pass  # the rename is done; a directory fsync is best effort on some filesystems
