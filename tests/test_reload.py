"""Hot reload: real files, a real watcher; editors' rename-saves, broken files, late directories."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import watchfiles

from breaker.patch import PatchSources
from breaker.reload import ConfigWatcher
from tests.waits import eventually_async

ROW = "- id: circuit-breaker\n  config:\n    duplicateLimit: {}\n"

Batch = set[tuple[watchfiles.Change, str]]


def recording(watches: list[list[Batch]]) -> Callable[..., Any]:
    """watchfiles.awatch, keeping each batch it yields: one list per watch (a layer directory made later moves
    it). An empty batch is a quiet half second (the watch's rust_timeout) with the watch in place."""
    real = watchfiles.awatch

    async def awatch(*paths: Any, **options: Any) -> AsyncIterator[Batch]:
        batches: list[Batch] = []
        watches.append(batches)
        async for changes in real(*paths, **options):
            batches.append(changes)
            yield changes

    return awatch


def quiet(watches: list[list[Batch]]) -> int:
    """How many quiet half seconds the watches have had so far."""
    return sum(1 for batches in watches for changes in batches if not changes)


def named(watches: list[list[Batch]], path: Path) -> bool:
    """Whether a watch reported a change of `path` (not only the stat comparison of a quiet half second)."""
    return any(Path(p) == path.absolute() for batches in watches for changes in batches for _c, p in changes)


def run(body: Callable[[ConfigWatcher], object], sources: PatchSources, watching: bool = True, **kw) -> ConfigWatcher:
    """Run the watcher around `body`; with `watching`, `body` starts once the watch is in place."""
    changes, errors = [], []
    watches: list[list[Batch]] = []
    watcher = ConfigWatcher(sources, on_change=changes.append, on_error=errors.append, **kw)
    watcher.changes, watcher.errors, watcher.watches = changes, errors, watches  # type: ignore[attr-defined]

    async def main() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(watcher.run(stop))
        await eventually_async(lambda: watcher.current is not None or watcher.error is not None, what="the first load")
        if watching:
            await eventually_async(lambda: quiet(watches), what="the watch in place (its first quiet half second)")
        try:
            await body(watcher)  # type: ignore[misc]
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)

    with mock.patch.object(watchfiles, "awatch", recording(watches)):
        asyncio.run(main())
    return watcher


def save_like_an_editor(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.swp")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_a_rename_save_applies(tmp_path):
    # How fast is measured by tests/bench/bench_reload.py (target: within a second).
    f = tmp_path / "cordis.patch.yml"
    f.write_text(ROW.format(6))

    async def body(w: ConfigWatcher) -> None:
        assert w.config.duplicate_limit == 6
        save_like_an_editor(f, ROW.format(3))
        await eventually_async(lambda: w.config.duplicate_limit == 3)

    w = run(body, PatchSources(patches=(f,)))
    assert [c.config.duplicate_limit for c in w.changes] == [6, 3]


def test_the_watch_waits_for_quiet_far_less_than_watchfiles_default(tmp_path, monkeypatch):
    # watchfiles' own default waits 1.6 s for a quiet period, more than the one-second target.
    seen: list[int] = []
    real = watchfiles.awatch

    def awatch(*paths, **options):
        seen.append(options.get("debounce", 1600))
        return real(*paths, **options)

    monkeypatch.setattr(watchfiles, "awatch", awatch)
    f = tmp_path / "cordis.patch.yml"
    f.write_text(ROW.format(6))

    async def body(w: ConfigWatcher) -> None:
        save_like_an_editor(f, ROW.format(3))
        await eventually_async(lambda: w.config.duplicate_limit == 3)

    run(body, PatchSources(patches=(f,)))
    assert seen and all(ms <= 200 for ms in seen), seen


def test_an_in_place_write_applies(tmp_path):
    f = tmp_path / "cordis.patch.yml"
    f.write_text(ROW.format(6))

    async def body(w: ConfigWatcher) -> None:
        with open(f, "w") as fh:
            fh.write(ROW.format(4))
        await eventually_async(lambda: w.config.duplicate_limit == 4)

    w = run(body, PatchSources(patches=(f,)))
    assert w.changes[-1].config.duplicate_limit == 4


def test_a_broken_file_keeps_the_last_good_config_and_reports_why(tmp_path):
    f = tmp_path / "cordis.patch.yml"
    f.write_text(ROW.format(5))

    async def body(w: ConfigWatcher) -> None:
        save_like_an_editor(f, "- id: circuit-breaker\n  config:\n    duplicateLimit: [5\n")
        await eventually_async(lambda: w.error is not None)
        assert w.config.duplicate_limit == 5
        assert str(f) in str(w.error)
        save_like_an_editor(f, "- id: circuit-breaker\n  config:\n    duplicateLimit: 0\n")
        await eventually_async(lambda: w.error is not None and "duplicateLimit" in str(w.error))
        assert w.config.duplicate_limit == 5
        save_like_an_editor(f, ROW.format(2))
        await eventually_async(lambda: w.config.duplicate_limit == 2)
        assert w.error is None

    w = run(body, PatchSources(patches=(f,)))
    assert len(w.errors) >= 2


@pytest.mark.parametrize("junk", ["\x00", "\x07", "\ufffe"], ids=["NUL", "BEL", "noncharacter"])
def test_a_control_character_in_the_file_is_an_error_and_the_watch_goes_on(tmp_path, junk):
    """PyYAML's reader refused it before the parse's error handling: the reload died without a word."""
    f = tmp_path / "cordis.patch.yml"
    f.write_text(ROW.format(5))

    async def body(w: ConfigWatcher) -> None:
        save_like_an_editor(f, f"- id: circuit-breaker\n  config:\n    duplicateLimit: 4{junk}\n")
        await eventually_async(lambda: w.error is not None)
        assert str(f) in str(w.error) and "\n" not in str(w.error) and w.config.duplicate_limit == 5
        save_like_an_editor(f, ROW.format(2))
        await eventually_async(lambda: w.config.duplicate_limit == 2)
        assert w.error is None

    run(body, PatchSources(patches=(f,)))


def test_a_profile_directory_created_later_is_watched(tmp_path):
    home = tmp_path / "dsh"
    home.mkdir()
    sources = PatchSources(dsh_home=home, profile="web")

    async def body(w: ConfigWatcher) -> None:
        assert w.config.duplicate_limit == 6
        profile = home / "profiles" / "web"
        profile.mkdir(parents=True)
        watches = w.watches  # type: ignore[attr-defined]
        await eventually_async(
            lambda: len(watches) == 2 and quiet(watches[1:]), what="the watch moved to the new directory"
        )
        save_like_an_editor(profile / "cordis.patch.yml", ROW.format(2))
        await eventually_async(
            lambda: w.config.duplicate_limit == 2 and named(watches[1:], profile / "cordis.patch.yml")
        )
        save_like_an_editor(profile / "cordis.patch.yml", ROW.format(4))
        await eventually_async(lambda: w.config.duplicate_limit == 4)

    run(body, sources)


def test_deleting_the_layer_falls_back_to_the_layer_below(tmp_path):
    home = tmp_path / "dsh"
    (home / "profiles" / "web").mkdir(parents=True)
    (home / "profiles" / "web" / "cordis.patch.yml").write_text(ROW.format(3))
    (home / "cordis.patch.yml").write_text(ROW.format(2))

    async def body(w: ConfigWatcher) -> None:
        assert w.config.duplicate_limit == 2
        (home / "cordis.patch.yml").unlink()
        await eventually_async(lambda: w.config.duplicate_limit == 3)

    run(body, PatchSources(dsh_home=home, profile="web"))


def test_unrelated_files_in_the_directory_do_not_trigger_reloads(tmp_path):
    f = tmp_path / "cordis.patch.yml"
    f.write_text(ROW.format(6))

    async def body(w: ConfigWatcher) -> None:
        before, watches = w.reloads, w.watches  # type: ignore[attr-defined]
        for i in range(20):
            (tmp_path / f"noise-{i}.txt").write_text("x")
        # A quiet half second is a watch call that saw nothing: two after the noise, it was read and filtered out
        # (a reload it caused would have run before the next batch).
        quiet_before = quiet(watches)
        await eventually_async(
            lambda: quiet(watches) >= quiet_before + 2, what="two quiet half seconds after the noise"
        )
        assert w.reloads == before
        f.write_text(ROW.format(3))
        await eventually_async(lambda: w.config.duplicate_limit == 3)
        assert w.reloads == before + 1  # the layer's change, and nothing for the noise (not even late)

    run(body, PatchSources(patches=(f,)))


def test_polling_mode_sees_changes_too(tmp_path):
    f = tmp_path / "cordis.patch.yml"
    f.write_text(ROW.format(6))

    async def body(w: ConfigWatcher) -> None:
        save_like_an_editor(f, ROW.format(3))
        await eventually_async(lambda: w.config.duplicate_limit == 3)

    run(body, PatchSources(patches=(f,)), force_polling=True)


def test_a_broken_file_at_start_runs_with_the_defaults_and_reports(tmp_path):
    f = tmp_path / "cordis.patch.yml"
    f.write_text("{{{")
    w = ConfigWatcher(PatchSources(patches=(f,)))
    assert not w.reload()
    assert w.current is None and w.error is not None
    assert w.config.duplicate_limit == 6


def test_a_save_racing_the_start_of_the_watch_is_not_lost(tmp_path):
    f = tmp_path / "cordis.patch.yml"
    f.write_text(ROW.format(6))

    async def body(w: ConfigWatcher) -> None:
        save_like_an_editor(f, ROW.format(3))  # at once: the directory watch may not be in place yet
        await eventually_async(lambda: w.config.duplicate_limit == 3)

    run(body, PatchSources(patches=(f,)), watching=False, force_polling=True)
