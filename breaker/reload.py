"""Hot reload of the patch layer: watch the layers' directories and re-merge on any change."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import watchfiles

from breaker.config import Config, ConfigError
from breaker.patch import NO_FILE, Loaded, PatchConflict, PatchSources, load, read_text, write_config
from breaker.protocol import ConfigFrame

__all__ = ["ConfigWatcher", "config_frame", "write_changes"]

WRITE_TRIES = 5  # a hand edit racing a config_set: re-read and apply on top this many times

log = logging.getLogger(__name__)


class ConfigWatcher:
    """Keeps `current` equal to the merged layers, or to the last good merge while a file is broken.

    Editors save by writing a new file and renaming it over the old one, so the watch is on each
    layer's directory (or its nearest existing ancestor while it does not exist yet), filtered to
    the layer files. `on_change(loaded)` runs after every successful reload that changed something;
    `on_error(error)` runs when a reload fails (the last good config stays in force).
    """

    def __init__(
        self,
        sources: PatchSources,
        on_change: Callable[[Loaded], Any] | None = None,
        on_error: Callable[[ConfigError], Any] | None = None,
        *,
        debounce_ms: int = 100,
        force_polling: bool = False,
    ) -> None:
        self.sources = sources
        self.on_change = on_change
        self.on_error = on_error
        self.debounce_ms = debounce_ms
        self.force_polling = force_polling
        self.current: Loaded | None = None
        self._seen: tuple[tuple[int, int, int] | None, ...] = ()
        self.error: ConfigError | None = None
        self.reloads = 0

    @property
    def config(self) -> Config:
        """The config to run with: the last good merge, or the defaults if none ever loaded."""
        return self.current.effective if self.current is not None else Config()

    def _fingerprint(self) -> tuple[tuple[int, int, int] | None, ...]:
        out: list[tuple[int, int, int] | None] = []
        for path in self.sources.watched_files():
            try:
                st = path.stat()
                out.append((st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                out.append(None)
        return tuple(out)

    def _load(self) -> tuple[Loaded | None, ConfigError | None, tuple[tuple[int, int, int] | None, ...]]:
        """Read every layer (safe on a worker thread: it touches nothing of ours)."""
        seen = self._fingerprint()
        try:
            return load(self.sources), None, seen
        except ConfigError as exc:
            return None, exc, seen

    def _take(self, result: tuple[Loaded | None, ConfigError | None, tuple[tuple[int, int, int] | None, ...]]) -> bool:
        loaded, error, seen = result
        self._seen = seen
        if error is not None:
            self.error = error
            log.warning("patch layer not applied, keeping the last good config: %s", error)
            if self.on_error is not None:
                self.on_error(error)
            return False
        assert loaded is not None
        return self.accept(loaded)

    def accept(self, loaded: Loaded) -> bool:
        """Take a merge read elsewhere (after a write) as the config in force; True if it changed."""
        self.error = None
        self.reloads += 1
        changed = self.current is None or loaded != self.current
        self.current = loaded
        if changed and self.on_change is not None:
            self.on_change(loaded)
        return changed

    def reload(self) -> bool:
        """Re-read every layer now; True if the config in force changed."""
        return self._take(self._load())

    async def reload_async(self) -> bool:
        """As `reload`, with the reading and parsing on a worker thread: a huge or hostile file never
        holds up the event loop (the parse limits in breaker.patch bound how long it can take)."""
        return self._take(await asyncio.to_thread(self._load))

    def _targets(self) -> tuple[set[Path], set[Path]]:
        """(files we care about, directories to watch)."""
        files = {p.absolute() for p in self.sources.watched_files()}
        dirs = set()
        for f in files:
            d = f.parent
            while not d.is_dir() and d != d.parent:
                d = d.parent
            dirs.add(d)
        return files, dirs

    async def run(self, stop: asyncio.Event | None = None, reload: Callable[[], Awaitable[bool]] | None = None) -> None:
        """Watch until `stop` is set (or the task is cancelled). Does an initial reload first.

        `reload` (default `reload_async`) is how a change is read: a server passes one that takes
        its config lock, so a reload never interleaves with a write."""
        reload = reload or self.reload_async
        if self.current is None and self.error is None:
            await reload()
        stop = stop or asyncio.Event()
        first = True
        while not stop.is_set():
            if not first:
                await reload()  # catch what changed while the watch was being moved
            first = False
            files, dirs = self._targets()
            ancestors = {a for f in files for a in f.parents}

            def relevant(
                _change: watchfiles.Change, path: str, files: set[Path] = files, ancestors: set[Path] = ancestors
            ) -> bool:
                p = Path(path)
                return p in files or p in ancestors

            rewatch = False
            async for changes in watchfiles.awatch(
                *dirs,
                watch_filter=relevant,
                debounce=self.debounce_ms,
                step=20,
                stop_event=stop,
                rust_timeout=500,
                yield_on_timeout=True,
                recursive=False,
                force_polling=self.force_polling,
                poll_delay_ms=200,
                ignore_permission_denied=True,
            ):
                if not changes:
                    # A quiet half second. Events can be missed (a save racing the watch's start,
                    # a poller's first scan), so compare the files' stat with the last reload's.
                    if self._fingerprint() != self._seen:
                        await reload()
                    continue
                await reload()
                # A layer directory that did not exist may exist now: watch it directly.
                if any(Path(p) in ancestors for _c, p in changes) and self._targets()[1] != dirs:
                    rewatch = True
                    break
            if not rewatch:
                return


def write_changes(sources: PatchSources, changes: dict[str, object]) -> tuple[Loaded, Path]:
    """Apply `changes` (camelCase keys) to the patch layer as it is on disk now; returns what is then
    in force and the file written. Blocking: run it on a worker thread, one at a time.

    The layers are read, the changes applied on top, and the target layer written only if nobody
    changed it since it was read (else everything is read again and the write retried): a write
    never reverts a hand edit. Raises ConfigError (PatchError for the file) or OSError."""
    for _ in range(WRITE_TRIES):
        target = load(sources).write_target()
        base = read_text(target)
        current = load(sources)  # read after `base`: a change in between is caught by the write
        new = current.config.updated(changes)
        try:
            write_config(target, new, based_on=NO_FILE if base is None else base)
        except PatchConflict:
            continue
        return load(sources), target
    raise PatchConflict(
        sources.layers()[-1].path, f"kept changing while it was written ({WRITE_TRIES} tries); try again"
    )


def config_frame(config: Config, loaded: Loaded | None, error: str | None) -> ConfigFrame:
    """The config in force (`config`) and where it came from, as the protocol shows it."""
    target = None
    if loaded is not None:
        try:
            target = str(loaded.write_target())
        except ConfigError:
            target = None
    return ConfigFrame(
        values=config.to_mapping(),
        disabled=bool(loaded and loaded.disabled),
        source=str(loaded.config_from.path) if loaded and loaded.config_from else None,
        target=target,
        layers=[str(layer.path) for layer in loaded.layers] if loaded else [],
        notes=list(loaded.notes) if loaded else list(config.warnings),
        error=error,
    )
