"""dsh's patch layer as `cbconsole setup dsh` edits it: the row that loads the plugin, and the `hmr` row.

The plugin is added as `dsh plugin add` plus the bundle's own patch would add it, without pnpm: an
`insert` entry holding the `circuit-breaker` row, whose `name` is the plugin file's absolute path (dsh
loads a row's module by path). dsh 0.1.0-rc.8 refuses to start any profile ("user patch-layer
watching requires the Cordis HMR service") until a layer enables the HMR row: `- id: hmr`,
`disabled: false`, `config: {root: []}`. Both are added to one layer file and every other byte of it
is kept; a file that holds `[]` (what `dsh plugin add` creates) becomes a block list.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.reader import ReaderError

from breaker.patch import ROW_ID, PatchError, parse_entries

__all__ = [
    "BUNDLE",
    "HMR_ROW",
    "ParsedLayer",
    "Profiles",
    "only_header",
    "read_layer_file",
    "read_profiles",
]

BUNDLE = "cbconsole-circuit-breaker"  # the plugin's package name, as `dsh plugin add` installs it
HMR_ROW: dict[str, Any] = {"id": "hmr", "disabled": False, "config": {"root": []}}
HEADER = "# cordis patch layer (dsh): rows here apply after the bundles'. Written by `cbconsole setup dsh`.\n"


def _pairs(node: Node) -> dict[str, Node]:
    if not isinstance(node, MappingNode):
        return {}
    return {k.value: v for k, v in node.value if isinstance(k, ScalarNode)}


@dataclass
class ParsedLayer:
    """One patch layer file, parsed: its text, its top-level list node and the entries' values."""

    path: Path
    text: str
    root: SequenceNode | None
    entries: list[Any]

    # -- what it holds -----------------------------------------------------------------------------

    def plugin_rows(self) -> list[tuple[int, int, dict[str, Any]]]:
        """(entry, row, value) of each inserted circuit-breaker row."""
        out = []
        for i, entry in enumerate(self.entries):
            if isinstance(entry, dict) and isinstance(entry.get("insert"), list):
                for j, row in enumerate(entry["insert"]):
                    if isinstance(row, dict) and row.get("id") == ROW_ID:
                        out.append((i, j, row))
        return out

    def hmr_rows(self) -> list[tuple[int, dict[str, Any]]]:
        """(entry, value) of each row with id `hmr`, bare or inserted."""
        out = []
        for i, entry in enumerate(self.entries):
            if not isinstance(entry, dict):
                continue
            if entry.get("id") == "hmr":
                out.append((i, entry))
            for row in entry.get("insert", []) if isinstance(entry.get("insert"), list) else []:
                if isinstance(row, dict) and row.get("id") == "hmr":
                    out.append((i, row))
        return out

    def hmr_enabled(self) -> bool:
        rows = self.hmr_rows()
        return bool(rows) and rows[-1][1].get("disabled") is not True

    def first_override(self) -> int | None:
        """The first bare `- id: circuit-breaker` entry: an insert must come before it, or dsh would
        insert the row after the override that configures it, and the row would lose its config."""
        for i, entry in enumerate(self.entries):
            if isinstance(entry, dict) and entry.get("id") == ROW_ID and "insert" not in entry:
                return i
        return None

    # -- edits -------------------------------------------------------------------------------------

    def _entry_node(self, i: int) -> Node:
        assert self.root is not None
        return self.root.value[i]

    def _line_start(self, index: int) -> int:
        return self.text.rfind("\n", 0, index) + 1

    def _nl(self) -> str:
        return "\r\n" if self.text.count("\r\n") * 2 > self.text.count("\n") else "\n"

    def with_entries(self, rows: list[dict[str, Any]], before: int | None = None) -> str:
        """The text with `rows` added as top-level entries, before entry `before` or at the end."""
        nl = self._nl()
        root = self.root
        if root is not None and root.flow_style:
            inner = self.text[root.start_mark.index + 1 : root.end_mark.index - 1]
            if inner.strip():  # a flow list with entries: ours go in as flow (JSON) entries
                at = root.end_mark.index - 1
                return self.text[:at] + "".join(", " + json.dumps(r) for r in rows) + self.text[at:]
            block = _block(rows, 0, nl)
            return self.text[: root.start_mark.index] + block.rstrip("\r\n") + self.text[root.end_mark.index :]
        col = root.start_mark.column if root is not None else 0
        block = _block(rows, col, nl)
        if before is not None and root is not None:
            at = self._line_start(self._entry_node(before).start_mark.index)
            return self.text[:at] + block + self.text[at:]
        text = self.text or HEADER.replace("\n", nl)
        if not text.endswith(("\n", "\r")):
            text += nl
        return text + block

    def with_name(self, i: int, j: int, name: str) -> str:
        """The text with row j of insert entry i loading `name`."""
        insert = _pairs(self._entry_node(i)).get("insert")
        assert isinstance(insert, SequenceNode)
        node = _pairs(insert.value[j]).get("name")
        if node is None or not isinstance(node, ScalarNode):
            raise PatchError(self.path, f"the {ROW_ID} row here has no `name` to update; edit it by hand")
        return self.text[: node.start_mark.index] + json.dumps(name) + self.text[node.end_mark.index :]

    def without_entries(self, indices: list[int]) -> str:
        """The text without the top-level entries at `indices`, every other byte kept. A list left with
        no entry is `[]`: dsh refuses a layer that holds no list ("must be a top-level YAML array")."""
        if self.root is None or not indices:
            return self.text
        if self.root.flow_style:
            return self._without_flow(set(indices))
        text = self.text
        values = self.root.value
        for i in sorted(set(indices), reverse=True):
            start = self._line_start(values[i].start_mark.index)
            if i + 1 < len(values):
                end = self._line_start(values[i + 1].start_mark.index)
            else:
                end = values[i].end_mark.index
                while end > start and text[end - 1] in " \t\r\n":
                    end -= 1
                nl = text.find("\n", end)
                end = len(text) if nl < 0 else nl + 1
            text = text[:start] + text[end:]
        if len(set(indices)) == len(values):
            at = self._line_start(values[0].start_mark.index)
            text = text[:at] + "[]" + self._nl() + text[at:]
        return text

    def _without_flow(self, indices: set[int]) -> str:
        """`without_entries` for a flow list (`[a, b]`): each entry goes with the comma before it (the
        first, with the comma after it)."""
        assert self.root is not None
        values = self.root.value
        kept = [i for i in range(len(values)) if i not in indices]
        if not kept:
            start, end = self.root.start_mark.index + 1, self.root.end_mark.index - 1
            return self.text[:start] + self.text[end:]
        spans = [(values[i - 1].end_mark.index, values[i].end_mark.index) for i in indices if i > kept[0]]
        if kept[0] > 0:
            spans.append((values[0].start_mark.index, values[kept[0]].start_mark.index))
        text = self.text
        for start, end in sorted(spans, reverse=True):
            text = text[:start] + text[end:]
        return text


def only_header(text: str) -> bool:
    """Whether a layer's text holds nothing but what setup writes in a file it creates besides its rows:
    the header comment, and `[]` once its rows are gone."""
    rest = text.replace("\r\n", "\n").replace(HEADER, "", 1).strip()
    return rest in ("", "[]")


def _block(rows: list[dict[str, Any]], col: int, nl: str) -> str:
    """Rows as block entries at column `col`, scalars as JSON (which YAML reads as they are)."""
    pad = " " * col
    lines: list[str] = []
    for row in rows:
        lines += _block_lines(row, pad, first="- ")
    return "".join(line + nl for line in lines)


def _block_lines(value: dict[str, Any], pad: str, first: str) -> list[str]:
    lines = []
    lead = pad + first
    rest = pad + " " * len(first)
    for n, (key, item) in enumerate(value.items()):
        head = lead if n == 0 else rest
        if isinstance(item, list) and item and all(isinstance(r, dict) for r in item):
            lines.append(f"{head}{key}:")
            for row in item:
                lines += _block_lines(row, rest + "  ", first="- ")
        else:
            lines.append(f"{head}{key}: {_flow(item)}")
    return lines


def _flow(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if isinstance(value, str) and value and all(c.isalnum() or c in "-_" for c in value) and not value[0].isdigit():
        return (
            value
            if value.lower() not in ("true", "false", "null", "yes", "no", "on", "off", "y", "n")
            else json.dumps(value)
        )
    return json.dumps(value)


def read_layer_file(path: Path, text: str | None) -> ParsedLayer:
    """A layer file parsed as dsh would refuse it (PatchError with the line) or use it."""
    try:
        root, entries = parse_entries(path, text or "")
    except ReaderError as exc:  # PyYAML's reader refuses control characters before parsing starts
        line = (text or "").count("\n", 0, exc.position) + 1
        what = f"the character U+{exc.character:04X}" if isinstance(exc.character, int) else "a character"
        raise PatchError(path, f"is not valid YAML: it holds {what}, which YAML does not allow", line) from None
    return ParsedLayer(path, text or "", root, entries)


MAX_MANIFEST_BYTES = 1024 * 1024  # a profile's package.json is a few hundred bytes


@dataclass(frozen=True)
class Profiles:
    """dsh's profiles: each one's `dsh.profile.bundles` (from its package.json), and the profiles whose
    package.json cannot be read, with why (dsh cannot start those either)."""

    bundles: dict[str, list[str]]
    problems: dict[str, str]


def read_profiles(dsh_home: Path) -> Profiles:
    """The profiles under `dsh_home/profiles`."""
    from breaker.paths import FileProblem, read_regular
    from breaker.wiring.jsontext import Document, JsonTextError

    bundles: dict[str, list[str]] = {}
    problems: dict[str, str] = {}
    profiles = dsh_home / "profiles"
    try:
        names = sorted(os.listdir(profiles))
    except OSError:
        return Profiles(bundles, problems)
    for name in names:
        manifest = profiles / name / "package.json"
        if not (profiles / name).is_dir():
            continue
        try:
            data = read_regular(manifest, MAX_MANIFEST_BYTES)
            if data is None:
                continue
            value = Document(data.decode("utf-8")).value
        except FileProblem as exc:
            problems[name] = f"{manifest} {exc.why}"
            continue
        except UnicodeDecodeError as exc:
            problems[name] = f"{manifest}: is not UTF-8 text (byte {exc.start})"
            continue
        except JsonTextError as exc:
            problems[name] = f"{manifest}: {exc}"
            continue
        dsh_ = value.get("dsh")
        profile = dsh_.get("profile") if isinstance(dsh_, dict) else None
        found = profile.get("bundles") if isinstance(profile, dict) else None
        bundles[name] = [b for b in found if isinstance(b, str)] if isinstance(found, list) else []
    return Profiles(bundles, problems)
