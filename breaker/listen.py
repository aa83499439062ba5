"""The guard's sockets on disk: private directories, one lock per path, stale sockets, binding, and
noticing a socket file removed (or replaced) from under a running guard."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import socket
import stat
from collections.abc import Callable
from pathlib import Path

from breaker.paths import SocketPathError, check_length, ensure_private_dir

__all__ = ["Listener", "ServerError", "describe_pid"]

log = logging.getLogger("cbconsole.guard")


class ServerError(RuntimeError):
    """The server cannot start (a socket path is held, unsafe or unusable)."""


class Listener:
    """One socket path the guard serves: checked, locked, bound 0600, watched."""

    def __init__(self, path: Path, override: str | None = None) -> None:
        self.path = path
        self.override = override  # how the user names another path for it, for error messages
        self.server: asyncio.AbstractServer | None = None
        self._lock_fd: int | None = None
        self._bound: tuple[int, int] | None = None  # (device, inode) of the socket file we made
        self._told: tuple[int, int] | None = None  # the impostor already reported

    def prepare(self) -> None:
        """Its directory private (created 0700 if missing), its path short enough, its lock taken."""
        try:
            check_length(self.path)
            if self.override is None:
                ensure_private_dir(self.path.parent)
            else:
                ensure_private_dir(self.path.parent, override=self.override)
        except SocketPathError as exc:
            raise ServerError(str(exc)) from None
        lock_path = self.path.with_name(self.path.name + ".lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip()
            os.close(fd)
            raise ServerError(f"another guard is already serving {self.path}: {describe_pid(holder)}") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    async def listen(self, factory: Callable[[], asyncio.Protocol]) -> None:
        sock = self._bind()
        # A burst of hook processes connects at once; the kernel caps this at net.core.somaxconn.
        self.server = await asyncio.get_running_loop().create_unix_server(factory, sock=sock, backlog=4096)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None

    def release(self, unlink: bool = True) -> None:
        """Stop listening; remove the socket file; let the lock go."""
        self.close()
        if unlink and self._bound is not None:
            with contextlib.suppress(OSError):
                st = os.lstat(self.path)
                if (st.st_dev, st.st_ino) == self._bound:  # ours: never another process's file
                    os.unlink(self.path)
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing releases the flock
            self._lock_fd = None

    async def recheck(self, factory: Callable[[], asyncio.Protocol]) -> None:
        """A socket file removed from under the guard (a tool call in a sandbox that may write the
        directory can) would make every harness fail open: bind it again, and say so. One replaced by
        another process's is never touched: the log says whose it may be."""
        if self._bound is None:
            return
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            log.error("the socket %s was removed while the guard was serving it; listening there again", self.path)
            self.close()
            try:
                await self.listen(factory)
            except OSError as exc:
                log.error("cannot listen on %s again: %s", self.path, exc)
            return
        except OSError:
            return
        if (st.st_dev, st.st_ino) not in (self._bound, self._told):
            log.error(
                "the socket %s was replaced by another file (owner uid %d) while the guard served it: harnesses "
                "may be talking to an impostor; the guard leaves it alone",
                self.path,
                st.st_uid,
            )
            self._told = (st.st_dev, st.st_ino)  # say it once

    def _bind(self) -> socket.socket:
        self._clear_stale()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(str(self.path))
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        sock.setblocking(False)
        st = os.stat(self.path)
        self._bound = (st.st_dev, st.st_ino)
        return sock

    def _clear_stale(self) -> None:
        path = self.path
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise ServerError(f"{path} exists and is not a socket; refusing to replace it")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(0.5)
        try:
            probe.connect(str(path))
        except OSError:
            log.info("removed a stale socket at %s", path)
            os.unlink(path)
            return
        else:
            raise ServerError(f"{path} is held by a live process that is not a guard of ours; refusing to replace it")
        finally:
            probe.close()


def describe_pid(text: str) -> str:
    """`pid 4242 (cbconsole --headless …)`: the command line where /proc has it, else `ps`, else the pid."""
    try:
        pid = int(text)
    except ValueError:
        return "a process whose pid is unknown"
    cmdline = ""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        import subprocess

        with contextlib.suppress(OSError, subprocess.SubprocessError):
            cmdline = subprocess.run(
                ["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True, timeout=2
            ).stdout.strip()
    return f"pid {pid}" + (f" ({cmdline})" if cmdline else "")
