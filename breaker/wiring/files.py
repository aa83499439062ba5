"""The files setup changes: reading them safely, refusing what it must not write, backups, diffs and
atomic writes (`breaker.paths.write_atomic`).

A change is computed whole (every file of it read, parsed, edited and checked) before anything is
written, so a refusal changes nothing. A file is replaced only if it still holds what it was read as.
"""

from __future__ import annotations

import difflib
import os
import shlex
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from breaker.paths import FileProblem, TempFileError, read_regular, write_atomic

__all__ = [
    "BACKUP_SUFFIX",
    "CREATED_SUFFIX",
    "MAX_BYTES",
    "Change",
    "Original",
    "SetupError",
    "apply",
    "backup_path",
    "created_path",
    "decode",
    "diff",
    "read",
    "read_backup",
    "remove_created_dirs",
]

MAX_BYTES = 4 * 1024 * 1024  # settings files are a few KiB
BACKUP_SUFFIX = ".cbconsole-backup"
CREATED_SUFFIX = ".cbconsole-created"  # beside a file setup created: the directories it made for it, one a line


class SetupError(Exception):
    """Setup refused: which file, what is wrong with it, what to do. Nothing was changed."""

    def __init__(self, path: Path | str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = str(path)
        self.message = message


def backup_path(path: Path) -> Path:
    """Where setup keeps a file as it was before cbconsole first changed it: beside it."""
    return path.with_name(path.name + BACKUP_SUFFIX)


def created_path(path: Path) -> Path:
    """Where setup notes the directories it made to create a file (`~/.cursor` for `~/.cursor/hooks.json`)."""
    return path.with_name(path.name + CREATED_SUFFIX)


def read(path: Path) -> bytes | None:
    """A settings file's bytes (a symlink followed), None if there is none; SetupError if it cannot be one."""
    try:
        data = read_regular(path, MAX_BYTES)
    except FileProblem as exc:
        why = {
            "directory": "is a directory, not a settings file",
            "large": f"is larger than {MAX_BYTES // (1024 * 1024)} MiB; that is not a settings file",
        }.get(exc.kind, exc.why)
        raise SetupError(path, why) from None
    if data is None and os.path.islink(path):
        raise SetupError(path, f"is a symbolic link to {os.readlink(path)}, which does not exist")
    return data


def decode(path: Path, data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise SetupError(path, f"line {line}: is not UTF-8 text (byte {exc.start})") from None


@dataclass
class Change:
    """One file's new content: `new` None deletes it. `backup` keeps `old` beside it first (the file as
    it was before cbconsole changed it); `drop_backup` removes that backup (a remove that restored it)."""

    path: Path
    old: bytes | None
    new: bytes | None
    backup: bool = False
    drop_backup: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.old != self.new

    @property
    def target(self) -> Path:
        """What is written: the file a symbolic link points to."""
        return Path(os.path.realpath(self.path))


def diff(change: Change) -> str:
    """A unified diff of the change (`/dev/null` for a file created or deleted)."""

    def lines(data: bytes | None) -> list[str]:
        if data is None:
            return []
        out = data.decode("utf-8", "replace").splitlines(keepends=True)
        if out and not out[-1].endswith(("\n", "\r")):
            out[-1] += "\n\\ No newline at end of file\n"
        return out

    before = str(change.path) if change.old is not None else "/dev/null"
    after = str(change.path) if change.new is not None else "/dev/null"
    return "".join(difflib.unified_diff(lines(change.old), lines(change.new), before, after))


def check_writable(change: Change) -> None:
    """Refuse a change that writing by rename would get wrong, naming the file and the way out."""
    target = change.target
    backup = backup_path(change.path)
    if change.backup and os.path.isdir(backup) and not os.path.islink(backup):
        raise SetupError(backup, "is a directory: setup keeps the file as it was under that name; move it away")
    if change.old is None:
        parent = target.parent
        while not parent.exists():
            parent = parent.parent
        if not os.access(parent, os.W_OK | os.X_OK):
            raise SetupError(change.path, f"cannot be created: {parent} is not writable by you")
        return
    info = os.stat(target)
    mode = stat.S_IMODE(info.st_mode)
    quoted = shlex.quote(str(target))
    if info.st_uid != os.geteuid():
        who = "the file it points to" if os.path.islink(change.path) else "it"
        raise SetupError(
            change.path,
            f"{who} belongs to another user (uid {info.st_uid}), so setup will not replace it; set up the harness "
            "as that user, or point your settings at a file of your own",
        )
    if not mode & stat.S_IWUSR:
        raise SetupError(
            change.path, f"is read-only (mode {mode:04o}); make it writable (chmod u+w {quoted}) and run again"
        )
    if info.st_nlink > 1:
        raise SetupError(
            change.path,
            f"has {info.st_nlink} hard links: replacing it would leave the other names with the old text. Make them "
            f"symbolic links (ln -sf {quoted} OTHER-NAME), which setup follows",
        )
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise SetupError(change.path, f"cannot be replaced: its directory {target.parent} is not writable by you")


def apply(change: Change) -> list[str]:
    """Write one change; what was done, in plain words."""
    done: list[str] = []
    target = change.target
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = 0o644
    if change.backup and change.old is not None:
        backup = backup_path(change.path)
        _write(backup, change.old, mode, None)
        done.append(f"kept the file as it was in {backup}")

    def unchanged() -> None:
        now = read(target) if target.exists() else None
        if now != change.old:
            raise SetupError(
                change.path, "changed on disk while setup was writing it; nothing was written, run setup again"
            )

    if change.new is None:
        unchanged()
        os.unlink(target)
        done.append(f"removed {change.path} (cbconsole had created it)")
    else:
        made = _missing_dirs(target.parent)
        target.parent.mkdir(parents=True, exist_ok=True)
        if made:  # so that --remove takes away what setup made, and never a directory that was there before
            note = "".join(f"{d}\n" for d in made).encode("utf-8")
            _write(created_path(target), note, 0o644, None)
        _write(target, change.new, mode, unchanged)
        done.append(f"{'wrote' if change.old is not None else 'created'} {change.path}")
    if change.drop_backup:
        try:
            os.unlink(backup_path(change.path))
        except FileNotFoundError:
            pass
        done.append(f"restored the original bytes and removed {backup_path(change.path).name}")
    return done


def _missing_dirs(directory: Path) -> list[Path]:
    """The directories that creating `directory` (absolute) makes, outermost first."""
    missing: list[Path] = []
    while not os.path.lexists(directory) and directory != directory.parent:
        missing.insert(0, directory)
        directory = directory.parent
    return missing


def remove_created_dirs(changes: list[Change]) -> list[str]:
    """After a remove: take away the directories setup made for the files it deleted, innermost first, each only
    if it is empty now (os.rmdir refuses any other). A directory that held anything, or existed before setup,
    stays. Only the deleted file's own ancestors are taken from its note, whatever else the note says."""
    dirs: set[Path] = set()
    for change in changes:
        if change.new is not None or change.old is None:
            continue
        target = change.target
        note = created_path(target)
        try:
            data = read(note)
        except SetupError:
            continue
        if data is None:
            continue
        ancestors = set(target.parents)
        dirs |= {Path(line) for line in data.decode("utf-8", "replace").splitlines() if Path(line) in ancestors}
        os.unlink(note)
    done = []
    for directory in sorted(dirs, key=lambda d: len(d.parts), reverse=True):
        try:
            os.rmdir(directory)
        except OSError:
            continue  # not empty (the harness's own files, or the user's), or gone already
        done.append(f"removed the directory {directory} (cbconsole had created it, and it is empty)")
    return done


def _write(path: Path, data: bytes, mode: int, before_rename: Callable[[], None] | None) -> None:
    try:
        write_atomic(path, data, mode=mode, suffix=".cbtmp", before_rename=before_rename)
    except TempFileError as exc:
        raise SetupError(
            path, f"cannot be written: no file can be created in {path.parent} ({exc.strerror or exc})"
        ) from None


@dataclass
class Original:
    """A file as it was before setup first changed it: its backup (`data` None: there is none, so there
    was no file, or one that already held a cbhook hook) and, if it can be read, its text (`text` None:
    the backup is not UTF-8, or not what the file's format allows)."""

    data: bytes | None
    text: str | None


def read_backup(
    path: Path, parse: Callable[[Path, str], object], errors: tuple[type[Exception], ...] = (SetupError,)
) -> Original:
    """`path`'s backup; `parse(backup, text)` checks its text, raising one of `errors` if it is not usable."""
    backup = backup_path(path)
    data = read(backup)
    if data is None:
        return Original(None, "")
    try:
        parse(backup, decode(backup, data) or "")
    except errors:
        return Original(data, None)
    return Original(data, data.decode("utf-8"))
