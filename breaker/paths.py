"""Where the guard's sockets live, and whether a socket found there may be trusted; files read and written
safely; how a child Python of ours is started so that it loads no code from the directory it runs in.

cbhook imports this once per tool call, so the module top imports only what Python's start-up has
already loaded (`os`, `stat`, `sys`); `pathlib` and
`tempfile` (~10 ms together in a cold interpreter) are imported inside the functions that need them.
"""

from __future__ import annotations

import os
import stat
import sys

TYPE_CHECKING = False  # not typing's: importing typing costs cbhook ~2 ms per tool call
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path
    from typing import Any

__all__ = [
    "OPERATOR_SOCKET_ENV",
    "SOCKET_ENV",
    "FileProblem",
    "SocketPathError",
    "TempFileError",
    "check_length",
    "check_peer",
    "check_socket",
    "default_operator_socket_path",
    "default_socket_path",
    "dsh_home",
    "ensure_private_dir",
    "missing_layer",
    "peer_ids",
    "peer_option",
    "python_child",
    "read_regular",
    "sun_path_max",
    "write_atomic",
]

SOCKET_ENV = "CBCONSOLE_SOCKET"
OPERATOR_SOCKET_ENV = "CBCONSOLE_OPERATOR_SOCKET"
_SOCKET_OVERRIDE = "--socket PATH / $CBCONSOLE_SOCKET"


class SocketPathError(OSError):
    """The socket path or its directory cannot be used safely."""


def sun_path_max(platform: str = sys.platform) -> int:
    """The longest socket path `platform` can bind or connect to, in bytes.

    `sockaddr_un.sun_path` is 108 bytes on Linux and 104 on macOS and the BSDs, one of them for the
    terminating NUL (Node's libuv insists on it). A platform we do not know gets the smaller limit.
    """
    return 107 if platform.startswith(("linux", "android")) else 103


def check_length(path: str | os.PathLike[str], platform: str = sys.platform) -> None:
    """Raise SocketPathError if `path` is too long for a Unix socket on `platform`."""
    size, limit = len(os.fsencode(path)), sun_path_max(platform)
    if size > limit:
        raise SocketPathError(
            f"socket path is {size} bytes, over the {limit}-byte limit for Unix sockets on {platform}: {path} "
            "(choose a shorter path)"
        )


def default_socket_path(environ: Mapping[str, str] | None = None, *, platform: str = sys.platform) -> Path:
    """`$CBCONSOLE_SOCKET`, else `$XDG_RUNTIME_DIR/cbconsole/guard.sock`, else `<tmp>/cbconsole-<uid>/guard.sock`.

    `<tmp>` is Python's temporary directory (`$TMPDIR`...), unless the operator's socket beside it
    (`<tmp>/cbconsole-<uid>-operator/operator.sock`, the longer of the two) would be over `platform`'s
    socket path limit: then `/tmp` (a long macOS `$TMPDIR`, as sandboxed apps get).
    """
    from pathlib import Path

    env = os.environ if environ is None else environ
    if env.get(SOCKET_ENV):
        return Path(env[SOCKET_ENV]).expanduser()
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return Path(runtime) / "cbconsole" / "guard.sock"
    import tempfile

    directory = f"cbconsole-{os.getuid()}"
    tmp = tempfile.gettempdir()
    if len(os.fsencode(os.path.join(tmp, f"{directory}-operator", "operator.sock"))) > sun_path_max(platform):
        tmp = "/tmp"
    return Path(tmp) / directory / "guard.sock"


def default_operator_socket_path(
    harness_socket: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> Path:
    """`$CBCONSOLE_OPERATOR_SOCKET`, else `operator.sock` in a sibling of the harness socket's directory.

    The sibling is named after that directory plus `-operator`: `/a/run0/guard.sock` gives
    `/a/run0-operator/operator.sock`. A process that can reach the harness socket does not reach the
    operator plane by that alone. `harness_socket=None` is the default harness socket of `environ`.
    """
    from pathlib import Path

    env = os.environ if environ is None else environ
    if env.get(OPERATOR_SOCKET_ENV):
        return Path(env[OPERATOR_SOCKET_ENV]).expanduser()
    harness = default_socket_path(env) if harness_socket is None else Path(harness_socket).expanduser()
    directory = Path(os.path.abspath(harness)).parent
    if not directory.name:
        raise SocketPathError(
            f"the harness socket {harness} is in the root directory, so the operator's socket has no "
            f"directory beside it: set ${OPERATOR_SOCKET_ENV}"
        )
    return directory.with_name(f"{directory.name}-operator") / "operator.sock"


def _owner(uid: int) -> str:
    """`uid 1001 (mallory)`, or `uid 1001` when the name cannot be looked up."""
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError, OSError):
        return f"uid {uid}"


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def check_socket(path: str | os.PathLike[str]) -> str | None:
    """Why the socket at `path` must not be connected to, or None if it may be (or does not exist).

    Checked as ssh-agent and tmux check theirs, before anything is sent: the socket's directory
    (not following a symlink) is a directory of ours that no group or other user can write to, and
    the socket in it is a socket of ours. In a shared directory such as /tmp, another user can create
    `cbconsole-<uid>` first and listen there to read every tool call and answer for the guard. A
    missing directory or socket is not a reason: the guard is not running, and connecting says so.
    """
    target = os.path.abspath(os.fspath(path))
    directory = os.path.dirname(target)
    me = os.getuid()
    why = f"not trusting the guard's socket {target}:"
    for name, subject, wanted in (
        (directory, f"its directory {directory}", stat.S_IFDIR),
        (target, "it", stat.S_IFSOCK),
    ):
        try:
            st = os.lstat(name)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            return f"{why} cannot check {subject}: {exc.strerror or exc}"
        if stat.S_IFMT(st.st_mode) != wanted:
            return f"{why} {subject} is {_kind(st.st_mode)} owned by {_owner(st.st_uid)}, not {_kind(wanted)}"
        if st.st_uid != me:
            return f"{why} {subject} belongs to {_owner(st.st_uid)}, not to you (uid {me})"
        if wanted == stat.S_IFDIR and st.st_mode & 0o022:
            return (
                f"{why} {subject} can be written by other users "
                f"(mode {stat.S_IMODE(st.st_mode):04o}), who could put their own socket there"
            )
    return None


# How each platform tells who is at the other end of a Unix socket: (level, option, buffer size,
# byte offset of the uid, byte offset of the pid or None). Linux: SO_PEERCRED, struct ucred {pid, uid,
# gid}. macOS and FreeBSD/DragonFly: LOCAL_PEERCRED at SOL_LOCAL (0), struct xucred {u_int version;
# uid_t uid; ...} (what getpeereid(3) reads there). OpenBSD: SO_PEERCRED, struct sockpeercred {uid,
# gid, pid}. NetBSD: LOCAL_PEEREID at SOL_LOCAL, struct unpcbid {pid, euid, egid}.
_PEER_OPTIONS: dict[str, tuple[int, int, int, int, int | None]] = {
    "linux": (1, 17, 12, 4, 0),
    "darwin": (0, 0x001, 76, 4, None),
    "freebsd": (0, 0x001, 76, 4, None),
    "dragonfly": (0, 0x001, 76, 4, None),
    "openbsd": (0xFFFF, 0x1022, 12, 0, 8),
    "netbsd": (0, 0x0003, 12, 4, 0),
}


def peer_option(platform: str = sys.platform) -> tuple[int, int, int, int, int | None] | None:
    """The getsockopt that names a Unix socket peer's uid on `platform`, or None where there is none."""
    for prefix, option in _PEER_OPTIONS.items():
        if platform.startswith(prefix):
            return option
    return None


def peer_ids(sock: Any, platform: str = sys.platform) -> tuple[int | None, int | None]:
    """(uid, pid) of the process at the other end of a connected Unix socket, from the kernel.

    (None, None) where the platform has no such option or the kernel refuses; pid is None where the
    option does not carry it (macOS, the BSDs' xucred). `sock` needs only `getsockopt`, so tests can
    hand in another platform's answers.
    """
    option = peer_option(platform)
    if option is None:
        return None, None
    level, name, size, uid_at, pid_at = option
    try:
        raw = sock.getsockopt(level, name, size)
    except (OSError, AttributeError):
        return None, None
    if len(raw) < max(uid_at, pid_at or 0) + 4:
        return None, None
    uid = int.from_bytes(raw[uid_at : uid_at + 4], sys.byteorder)
    pid = int.from_bytes(raw[pid_at : pid_at + 4], sys.byteorder, signed=True) if pid_at is not None else None
    return uid, pid


def check_peer(sock: Any, path: str | os.PathLike[str], platform: str = sys.platform) -> str | None:
    """Why the process at the other end of connected `sock` is not to be told anything, or None.

    The kernel's word (SO_PEERCRED on Linux, LOCAL_PEERCRED on macOS and the BSDs): the listener
    runs as another user. It closes the gap between `check_socket` and connect, when the directory's
    parent lets someone swap the directory. Where the kernel cannot say, None (check_socket stands).
    """
    uid, _pid = peer_ids(sock, platform)
    me = os.getuid()
    if uid is None or uid == me:
        return None
    why = f"not trusting the guard's socket {os.fspath(path)}:"
    return f"{why} the process serving it runs as {_owner(uid)}, not as you (uid {me})"


def ensure_private_dir(directory: Path, *, override: str = _SOCKET_OVERRIDE) -> None:
    """Create `directory` 0700 if missing; refuse one that another user owns or others can enter.

    The messages say how to get out: remove the directory, chmod it, or choose another path with
    `override` (how the user names another path for this socket).
    """
    import shlex

    elsewhere = f"choose another path with {override}, or set XDG_RUNTIME_DIR"
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise SocketPathError(
            f"cannot create the socket directory {directory}: {exc.strerror or exc}; {elsewhere}"
        ) from None
    st = os.lstat(directory)
    quoted, me = shlex.quote(str(directory)), os.getuid()
    if not stat.S_ISDIR(st.st_mode):
        raise SocketPathError(
            f"{directory} is {_kind(st.st_mode)} owned by {_owner(st.st_uid)}, not a directory; refusing to put "
            f"the socket there. Remove it (`rm {quoted}`; if it is not yours, ask an administrator), or {elsewhere}."
        )
    if st.st_uid != me:
        raise SocketPathError(
            f"{directory} belongs to {_owner(st.st_uid)}, not to you (uid {me}): another user may have created it "
            f"to intercept your guard. Remove it (it is not yours: ask an administrator, or `sudo rm -r {quoted}`), "
            f"or {elsewhere}."
        )
    if st.st_mode & 0o077:
        raise SocketPathError(
            f"{directory} is open to other users (mode {stat.S_IMODE(st.st_mode):04o}); the guard's socket must be "
            f"in a private directory: `chmod 700 {quoted}`, or {elsewhere}."
        )


class FileProblem(OSError):
    """`read_regular` found no file it may read: `kind` is "directory", "special" (a FIFO, socket or device),
    "unreadable" or "large"; `why` says it in words."""

    def __init__(self, kind: str, why: str) -> None:
        super().__init__(why)
        self.kind, self.why = kind, why


def read_regular(path: str | os.PathLike[str], max_bytes: int) -> bytes | None:
    """A small regular file's bytes (a symlink followed), None if nothing is there. Raises FileProblem naming
    what is wrong: a directory, a FIFO, socket or device (opened without blocking: a FIFO put where a file
    belongs never hangs the reader), unreadable, or over `max_bytes`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise FileProblem("directory", "is a directory") from None
    except OSError as exc:
        raise FileProblem("unreadable", f"cannot be read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise FileProblem("directory", "is a directory")
        if not stat.S_ISREG(info.st_mode):
            raise FileProblem("special", "is not a regular file (a FIFO, socket or device?)")
        with open(fd, "rb", closefd=False) as f:
            data = f.read(max_bytes + 1)
    except FileProblem:
        raise
    except OSError as exc:
        raise FileProblem("unreadable", f"cannot be read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise FileProblem("large", f"is larger than {max_bytes / (1024 * 1024):g} MiB")
    return data


class TempFileError(OSError):
    """`write_atomic` could not create its temporary file: the directory is not writable (nothing was written)."""


def write_atomic(
    target: Path,
    payload: bytes,
    *,
    mode: int | None = None,
    suffix: str = "",
    before_rename: Callable[[], None] | None = None,
) -> None:
    """Write `payload` to `target` so that a reader, or a crash, sees the old file or the new one, never half:
    a temporary file beside it (`.<name>.<8 random><suffix>`, 0600 as mkstemp makes it; `mode` if given),
    fsync, `before_rename()` (which may raise to call the write off), a rename over `target`, then a
    best-effort fsync of the directory. On any failure the temporary file is removed and the error raised
    (TempFileError when it could not be created)."""
    import tempfile

    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix, dir=target.parent)
    except OSError as exc:
        raise TempFileError(exc.errno, exc.strerror, exc.filename) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        if before_rename is not None:
            before_rename()
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


def python_child(module: str, environ: Mapping[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """`python -m module` as a child of this process: the command's start (add the module's arguments) and the
    environment to run it with (`environ`, else this process's).

    The child never imports code from the directory it runs in, which may be an agent's workspace holding an
    `orjson.py` the agent wrote: `-P` keeps the current directory off `sys.path`, and PYTHONPATH loses its
    empty entries (each means the current directory) and its relative ones. If this process found `module`'s
    package only that way (`python -m breaker.cli` in a source tree), the child is given the package's
    directory by its absolute path instead, so it runs the same code as its parent."""
    env = dict(os.environ if environ is None else environ)
    entries = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.isabs(p)]
    home = _found_only_nearby(module.partition(".")[0])
    if home is not None and home not in entries:
        entries.insert(0, home)
    if entries:
        env["PYTHONPATH"] = os.pathsep.join(entries)
    else:
        env.pop("PYTHONPATH", None)
    return [sys.executable, "-P", "-m", module], env


def _found_only_nearby(package: str) -> str | None:
    """The directory `package` was imported from, if this process found it through an entry of `sys.path` that a
    `-P` child with a cleaned PYTHONPATH does not have: the script's or current directory (`sys.path[0]`, unless
    this process runs with -P itself), or an empty or relative entry. None if it came from elsewhere (a site
    directory, an absolute PYTHONPATH entry, an editable install's finder): the child finds it there too."""
    loaded = sys.modules.get(package)
    origin = getattr(loaded, "__file__", None)
    if origin is None:
        return None
    home = os.path.dirname(os.path.dirname(os.path.realpath(origin)))
    for index, entry in enumerate(sys.path):
        if os.path.realpath(entry or os.curdir) == home:
            nearby = (index == 0 and not sys.flags.safe_path) or not os.path.isabs(entry)
            return home if nearby else None
    return None


def dsh_home(environ: Mapping[str, str] | None = None) -> Path:
    """`$DSH_HOME`, else `~/.dsh`: where dsh keeps its patch layer and its profiles."""
    from pathlib import Path

    env = os.environ if environ is None else environ
    return Path(env.get("DSH_HOME") or "~/.dsh").expanduser()


def missing_layer(patches: Sequence[str], profile: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """Why a patch layer named on the command line is not there, or None. A typo in `--patch` or `--profile`
    would otherwise run the guard on other limits than the user meant, saying nothing."""
    import shlex
    from pathlib import Path

    for patch in patches:
        path = Path(patch).expanduser().absolute()
        if not path.exists():
            return (
                f"--patch {patch}: there is no file {path}. To start with an empty layer that the console's edits "
                f"are saved to, create it first (touch {shlex.quote(str(path))})"
            )
        if path.is_dir():
            return f"--patch {patch}: {path} is a directory, not a patch layer file"
    if profile is not None:
        home = dsh_home(environ)
        where = home / "profiles" / profile
        if not where.is_dir():
            profiles = home / "profiles"
            known = sorted(p.name for p in profiles.iterdir() if p.is_dir()) if profiles.is_dir() else []
            have = f"; the profiles there: {', '.join(known)}" if known else f"; {profiles} has no profile"
            return f"--profile {profile}: there is no profile directory {where} ($DSH_HOME/profiles/NAME){have}"
    return None
