"""`cbconsole setup dsh`: the plugin's row and the `hmr` row in a cordis patch layer (`breaker.wiring.dsh`
edits its text), and `--remove`, under the same rule as the JSON harnesses' settings (`breaker.wiring.setup`).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from breaker.hook import plugin_dir
from breaker.patch import PatchError
from breaker.wiring import dsh
from breaker.wiring.dsh import ParsedLayer
from breaker.wiring.files import Change, SetupError, backup_path, decode, read, read_backup
from breaker.wiring.options import Options, Plan

__all__ = ["plan_dsh"]


def plan_dsh(options: Options) -> Plan:
    """Every change `cbconsole setup dsh` makes (one layer file), computed and checked; nothing is written."""
    path = options.places.dsh_layer(options.profile)
    old = read(path)
    layer = _layer(path, decode(path, old))
    try:
        if options.remove:
            return _remove_dsh(options, path, old, layer)
        plan = Plan()
        new_text, plan.notes = _dsh_written(options, layer)
    except PatchError as exc:  # a row setup would edit, in a form it cannot edit
        where = f"line {exc.line}: " if exc.line else ""
        raise SetupError(path, f"{where}{exc.message}; nothing was changed") from None
    pristine = old is not None and not layer.plugin_rows()
    plan.changes.append(Change(path, old, new_text.encode("utf-8"), backup=pristine))
    return plan


def _layer(path: Path, text: str | None) -> ParsedLayer:
    """The patch layer file parsed; SetupError naming its line if dsh would refuse it."""

    try:
        return dsh.read_layer_file(path, text)
    except PatchError as exc:
        where = f"line {exc.line}: " if exc.line else ""
        raise SetupError(
            path, f"{where}{exc.message}; nothing was changed (dsh and the guard read this file: fix it by hand)"
        ) from None


def _dsh_written(options: Options, layer: ParsedLayer) -> tuple[str, list[str]]:
    """The text setup writes over a layer's, and what to tell the user about it."""
    places, path = options.places, layer.path
    plugin = os.path.join(plugin_dir(), "index.mjs")
    notes: list[str] = []
    new_text = layer.text
    rows = layer.plugin_rows()
    add: list[dict[str, Any]] = []
    if rows:
        for i, j, row in rows:
            if row.get("name") != plugin:
                new_text = dsh.read_layer_file(path, new_text).with_name(i, j, plugin)
        present = rows[-1][2].get("config") or {}
        if options.socket and present.get("guardSocket") != options.socket:
            notes.append(
                f"the circuit-breaker row in {path} is kept as it is: set guardSocket: {options.socket} in its "
                "config by hand"
            )
    else:
        bundled = [p for p, b in dsh.read_profiles(places.dsh_home()).bundles.items() if dsh.BUNDLE in b]
        if options.profile is not None and options.profile in bundled:
            notes.append(
                f"profile {options.profile} already loads the plugin as a bundle (`dsh plugin add`); no row added"
            )
        else:
            config: dict[str, Any] = {}
            if options.socket:
                config["guardSocket"] = options.socket
            if options.fail_closed:
                config["failClosed"] = True
            add.append({"insert": [{"id": dsh.ROW_ID, "name": plugin, **({"config": config} if config else {})}]})
            if bundled:
                notes.append(
                    f"profiles {', '.join(bundled)} also have the plugin as a bundle: there the row added here "
                    "replaces the bundle's (dsh keeps the later insert of an id)"
                )
    now = dsh.read_layer_file(path, new_text)
    if add:
        override = now.first_override()
        if override is not None and (options.socket or options.fail_closed):
            notes.append(
                f"the `- id: circuit-breaker` row below it in {path} sets the row's config, which replaces the "
                "insert's whole (dsh merges no keys): put guardSocket/failClosed in that config too"
            )
        new_text = now.with_entries(add, before=override)
        now = dsh.read_layer_file(path, new_text)
    if not now.hmr_rows():
        new_text = now.with_entries([dsh.HMR_ROW])
        notes.append(
            f"added the `hmr` row to {path}: dsh 0.1.0-rc.8 refuses to start any profile without it "
            '("user patch-layer watching requires the Cordis HMR service")'
        )
    elif not now.hmr_enabled():
        notes.append(f"the hmr row in {path} is disabled: dsh 0.1.0-rc.8 will not start until it is enabled")
    check = dsh.read_layer_file(path, new_text)
    if (add or rows) and len(check.plugin_rows()) != len(rows) + len(add):
        raise SetupError(path, "internal error: the edited text does not hold the plugin row; nothing was changed")
    return new_text, notes


def _dsh_wrote(options: Options, layer: ParsedLayer, original: str) -> bool:
    """Whether the layer's text is exactly what setup writes over `original` (with the guardSocket and
    failClosed its plugin row holds)."""

    rows = layer.plugin_rows()
    if len(rows) > 1:
        return False
    config = rows[0][2].get("config") if rows else None
    config = config if isinstance(config, dict) else {}
    socket = config.get("guardSocket")
    as_run = replace(
        options,
        socket=socket if isinstance(socket, str) else None,
        fail_closed=config.get("failClosed") is True,
        remove=False,
    )
    try:
        written, _notes = _dsh_written(as_run, dsh.read_layer_file(layer.path, original))
    except (SetupError, PatchError):
        return False
    return bool(written == layer.text)


def _remove_dsh(options: Options, path: Path, old: bytes | None, layer: ParsedLayer) -> Plan:
    """As `_remove_json`: the original back if the layer is exactly what setup wrote over it, else only
    setup's rows taken out."""

    plan = Plan()
    if old is None:
        plan.changes.append(Change(path, None, None))  # no file: nothing to take out
        return plan
    original = read_backup(path, dsh.read_layer_file, (SetupError, PatchError))
    if original.text is not None and _dsh_wrote(options, layer, original.text):
        plan.changes.append(Change(path, old, original.data, drop_backup=original.data is not None))
        return plan
    drop = [i for i, j, row in layer.plugin_rows() if _only_row(layer.entries[i], j)]
    if len(drop) < len(layer.plugin_rows()):
        raise SetupError(path, "holds the circuit-breaker row among other rows of one insert; take it out by hand")
    had_hmr = original.text is not None and dsh.read_layer_file(path, original.text).hmr_rows()
    if not had_hmr:
        drop += [i for i, row in layer.hmr_rows() if layer.entries[i] == dsh.HMR_ROW]
    removed = layer.without_entries(drop) if drop else layer.text
    change = Change(path, old, removed.encode("utf-8"))
    if original.data is not None and change.new == original.data:
        change.drop_backup = True  # what is left is the original, to the byte
    elif original.data is None and change.changed and dsh.only_header(removed):
        change.new = None  # setup created it: nothing else is left, and it goes
    elif original.data is not None and change.changed:
        plan.notes.append(
            f"{path} has other changes since setup: only cbconsole's rows were taken out; {backup_path(path)} is kept"
        )
    plan.changes.append(change)
    return plan


def _only_row(entry: Any, j: int) -> bool:
    return isinstance(entry, dict) and set(entry) == {"insert"} and len(entry["insert"]) == 1 and j == 0
