"""Where the guard's socket lives: a per-user default, overridable by flag and by environment."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path

__all__ = ["SOCKET_ENV", "SocketPathError", "default_socket_path", "ensure_private_dir"]

SOCKET_ENV = "CBCONSOLE_SOCKET"
_SUN_PATH_MAX = 107  # sockaddr_un.sun_path is 108 bytes on Linux, one for the terminating NUL


class SocketPathError(OSError):
    """The socket path or its directory cannot be used safely."""


def default_socket_path(environ: Mapping[str, str] | None = None) -> Path:
    """`$CBCONSOLE_SOCKET`, else `$XDG_RUNTIME_DIR/cbconsole/guard.sock`, else `<tmp>/cbconsole-<uid>/guard.sock`."""
    env = os.environ if environ is None else environ
    if env.get(SOCKET_ENV):
        return Path(env[SOCKET_ENV]).expanduser()
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return Path(runtime) / "cbconsole" / "guard.sock"
    return Path(tempfile.gettempdir()) / f"cbconsole-{os.getuid()}" / "guard.sock"


def ensure_private_dir(directory: Path) -> None:
    """Create `directory` 0700 if missing; refuse one that another user owns or others can enter."""
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise SocketPathError(f"cannot create the socket directory {directory}: {exc.strerror or exc}") from None
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode):
        raise SocketPathError(f"{directory} is not a directory (a symlink or a file); refusing to put the socket there")
    if st.st_uid != os.getuid():
        raise SocketPathError(f"{directory} belongs to uid {st.st_uid}, not to you (uid {os.getuid()}); refusing")
    if st.st_mode & 0o077:
        raise SocketPathError(
            f"{directory} is open to other users (mode {stat.S_IMODE(st.st_mode):04o}); the guard's socket "
            "must be in a private (0700) directory: chmod 700 it or choose another --socket path"
        )


def check_length(path: Path) -> None:
    if len(os.fsencode(path)) > _SUN_PATH_MAX:
        raise SocketPathError(
            f"socket path is {len(os.fsencode(path))} bytes, over the {_SUN_PATH_MAX}-byte limit for Unix sockets: "
            f"{path}"
        )
