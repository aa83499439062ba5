"""`cbhook`: the guard for command-hook harnesses — Claude Code, Codex, Gemini CLI, Cursor, dsh's Claude-Code bridge.

One process per tool call: read the hook's JSON on stdin, tell which harness sent it, ask the guard,
and answer in that harness's own words. Allow = print nothing and exit 0; an allow with a warning
prints the warning where the harness shows hook text to the model. Nothing here may crash a
harness: garbage in, a guard that cannot be asked ("guard unavailable") or a bug all end in exit 0
(the harness runs the tool), except with `--fail-closed`, which prints an explicit deny instead.

After the call ran (PostToolUse, PostToolUseFailure, AfterTool) it reports a digest of the call's
result to the guard (the `result` op), so a repeat whose output changed counts as progress. That
never blocks anything, `--fail-closed` or not: the call already ran.

It starts once per tool call, so the usual path reads no JSON at all: it forwards the payload's bytes
to the guard in the `hook` op, the guard reads them as the harness's dialect (breaker/hookwire.py, the
same code either side) and answers with the bytes to print. This module imports only `sys`, `_socket`
and breaker.wire (which imports nothing); no `os` either (`posix` is built in), nor `__future__`
(`python -X importtime`; figures in tests/bench/bench_hook.py). cbhook reads the payload itself, with
breaker.hookwire, when the guard cannot take it that way: a payload too big or deep for the op, a guard
that cannot be asked (the failure mode decides, as always), an older guard.

`cbconsole setup` runs it as `python -I -S <site-packages>/breaker/cbhook.py` (see that file): without
the console-script wrapper and `site`, which cost more than the hook's own work.

It never tells a socket it has not checked anything: one in a directory another user owns or can
write to, or owned by another user, or served by another user's process, makes the guard
unavailable (breaker.paths.check_socket, check_peer, whose cheap "all is well" case is repeated
here), and nothing it could say is used.
"""

import _socket  # the C module behind `socket`: connect/send/recv is all we need, at a tenth of the import time
import posix  # built in: what `os` wraps, without `os`'s 1 ms of imports
import sys
import time

from breaker.wire import HOOK_BRACKETS_MAX, HOOK_PAYLOAD_MAX, FrameBuffer, GuardUnavailable

TYPE_CHECKING = False  # not typing's: importing typing costs ~2 ms per tool call
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "HARNESSES",
    "GuardUnavailable",
    "HookCommand",
    "Oversized",
    "ask",
    "hook_frame",
    "main",
    "plugin_dir",
    "read_stdin",
    "socket_path",
]

USAGE = """\
usage: cbhook [--socket PATH] [--timeout SECONDS] [--fail-closed] [--harness NAME]
       cbhook --dsh-plugin-path

The circuit breaker for command-hook harnesses: give it a hook's JSON on stdin (Claude Code
PreToolUse/PostToolUse/PostToolUseFailure/SubagentStop/SessionEnd, Codex PreToolUse/PostToolUse,
Gemini CLI BeforeTool/AfterTool/SessionEnd, Cursor beforeShellExecution/beforeMCPExecution/
sessionEnd, dsh's Claude-Code bridge). It asks the guard (`cbconsole --headless` or the console)
and prints the harness's own deny, or nothing to allow (or the guard's warning for the model).
After a call it reports a digest of the call's result, and never blocks.

  --socket PATH      the guard's socket (default: $CBCONSOLE_SOCKET, else
                     $XDG_RUNTIME_DIR/cbconsole/guard.sock, else <tmp>/cbconsole-<uid>/guard.sock)
  --timeout SECONDS  the most a call waits for the guard, connecting included (default 1)
  --fail-closed      deny when the guard cannot be asked (default: allow, one line on stderr)
  --harness NAME     skip detection: claude-code, codex, gemini-cli, cursor or dsh
                     (claude and gemini are accepted too)
  --dsh-plugin-path  print the directory of the dsh plugin (`cbconsole setup dsh` loads it from there)
"""

DEFAULT_TIMEOUT = 1.0  # seconds; a harness waits for the hook, and the guard answers in well under 1 ms
MAX_STDIN = 64 * 1024 * 1024  # past this the payload is drained unread: too big to parse once per tool call
MAX_REPLY = 1024 * 1024  # a reply is a few hundred bytes; anything bigger is not our guard

# The harnesses cbhook speaks for, by the names the guard knows them by (the check's `harness`
# field), and what `--harness` also accepts for each. dsh here is its Claude-Code hook bridge.
HARNESSES = {
    "claude-code": "claude-code",
    "claude": "claude-code",
    "codex": "codex",
    "gemini-cli": "gemini-cli",
    "gemini": "gemini-cli",
    "cursor": "cursor",
    "dsh": "dsh",
}

# What breaker.hookwire holds, importable from here as before it moved there (tests, integrations).
_MOVED = {
    "TOOL_EVENTS",
    "RESULT_EVENTS",
    "END_EVENTS",
    "WARN_BEFORE",
    "WARN_AFTER",
    "HEAD",
    "HookRequest",
    "answer",
    "context",
    "detect",
    "dumps",
    "head_event",
    "loads",
    "parse_event",
    "result_digest",
    "subagent_id",
    "_frame",
}


def __getattr__(name: str) -> "Any":
    if name in _MOVED:
        from breaker import hookwire

        return getattr(hookwire, name)
    raise AttributeError(f"module 'breaker.hook' has no attribute {name!r}")


def _log(message: str) -> None:
    try:
        sys.stderr.write(f"cbhook: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # a closed stderr must not turn a log line into a crash


def _env(name: str) -> "str | None":
    """os.environ.get(name), from `posix.environ` (bytes), decoded as `os` decodes it."""
    value = posix.environ.get(name.encode())
    return None if value is None else value.decode(sys.getfilesystemencoding(), "surrogateescape")


def _is_dir(path: str) -> bool:
    try:
        return posix.stat(path).st_mode & 0o170000 == 0o040000
    except (OSError, ValueError):
        return False


# -- the socket ----------------------------------------------------------------------------------


def socket_path(environ: "Any" = None) -> str:
    """The guard's default socket, exactly as `breaker.paths.default_socket_path` computes it.

    Its rules are repeated here so that the common cases cost no import: $CBCONSOLE_SOCKET, the runtime
    directory, and a temp directory that already holds the guard's socket directory (`tempfile.gettempdir`
    would pick it: the first of $TMPDIR, $TEMP, $TMP or /tmp, a directory someone could write to). Any
    other case asks breaker.paths itself, which imports pathlib and tempfile for it.
    """
    get = _env if environ is None else environ.get
    explicit = get("CBCONSOLE_SOCKET")
    if explicit:
        return _expand(explicit)
    runtime = get("XDG_RUNTIME_DIR")
    if runtime and _is_dir(runtime):
        return runtime + ("" if runtime.endswith("/") else "/") + "cbconsole/guard.sock"
    tmp = next((v for v in (get("TMPDIR"), get("TEMP"), get("TMP")) if v), "/tmp").rstrip("/")
    directory = f"{tmp}/cbconsole-{posix.getuid()}"
    limit = 107 if sys.platform.startswith(("linux", "android")) else 103  # breaker.paths.sun_path_max
    operator = f"{directory}-operator/operator.sock".encode(sys.getfilesystemencoding(), "surrogateescape")
    if _normal(directory) and len(operator) <= limit and _is_dir(directory):
        return directory + "/guard.sock"
    import os

    from breaker.paths import default_socket_path

    return str(default_socket_path(os.environ if environ is None else environ))


def _normal(path: str) -> bool:
    """An absolute path that os.path.abspath leaves as it is."""
    return (
        path.startswith("/")
        and not path.startswith("//")
        and "//" not in path
        and "/./" not in path
        and "/../" not in path
        and not path.endswith(("/", "/.", "/.."))
    )


def _expand(path: str) -> str:
    """os.path.expanduser(path), importing `os` only for a path that starts with `~`."""
    if not path.startswith("~"):
        return path
    import os

    return os.path.expanduser(path)


def _socket_ok(path: str) -> bool:
    """True if breaker.paths.check_socket would find nothing wrong with the socket at absolute `path`: its
    directory a directory of ours no one else may write to, the socket a socket of ours. False when it is
    anything else (missing, suspect, or a path to normalise first): then breaker.paths.check_socket decides."""
    directory = path.rpartition("/")[0] or "/"
    if not _normal(path):
        return False
    me = posix.getuid()
    try:
        st = posix.lstat(directory)
        if st.st_mode & 0o170000 != 0o040000 or st.st_uid != me or st.st_mode & 0o022:
            return False
        st = posix.lstat(path)
    except (OSError, ValueError):
        return False
    return st.st_mode & 0o170000 == 0o140000 and st.st_uid == me


def _peer_ok(sock: "Any") -> bool:
    """True if the kernel says the process serving `sock` runs as us (Linux's SO_PEERCRED: the case
    breaker.paths.check_peer finds nothing wrong with); False leaves it to check_peer."""
    if not sys.platform.startswith(("linux", "android")):
        return False
    try:
        raw = sock.getsockopt(1, 17, 12)  # SOL_SOCKET, SO_PEERCRED: struct ucred {pid, uid, gid}
    except OSError:
        return False
    return len(raw) >= 8 and int.from_bytes(raw[4:8], sys.byteorder) == posix.getuid()


_HOOK_REPLY = b'{"id":1,"exit":'  # how the guard's answer to the `hook` op begins (orjson keeps the order)


def _exchange(path: str, frame: bytes, timeout: float, hook: bool = False) -> "bytes | dict[str, Any]":
    """Send one request on a fresh connection and return the reply with id 1 (events skipped): with
    `hook`, a reply to the `hook` op as its frame (bytes), any other as a dict.

    `timeout` is one deadline for the whole exchange (connect, send, every read): a peer that
    dribbles its reply a byte at a time cannot hold the harness past it. A socket that fails
    `check_socket` is never connected to; a peer that fails `check_peer` is sent nothing.
    """
    if not _socket_ok(path):
        from breaker.paths import check_socket

        unsafe = check_socket(path)
        if unsafe is not None:
            raise GuardUnavailable(unsafe)
    deadline = time.monotonic() + timeout
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        try:
            sock.settimeout(timeout)
            sock.connect(path)
            if not _peer_ok(sock):
                from breaker.paths import check_peer

                unsafe = check_peer(sock, path)
                if unsafe is not None:
                    raise GuardUnavailable(unsafe)
            _time_left(sock, deadline)
            sock.sendall(frame)
            replies = FrameBuffer(MAX_REPLY)
            while True:
                _time_left(sock, deadline)
                chunk = sock.recv(65536)
                if not chunk:
                    raise GuardUnavailable(f"the guard at {path} closed the connection without answering")
                replies.feed(chunk)
                for line in replies.frames():
                    if hook and line.startswith(_HOOK_REPLY):
                        return line
                    import json  # not for the `hook` op's answer: only an older guard's, an error, an event

                    try:
                        msg = json.loads(line)
                    except ValueError:
                        raise GuardUnavailable(f"the guard at {path} answered something that is not JSON") from None
                    if isinstance(msg, dict) and "event" not in msg and msg.get("id") in (1, None):
                        return msg
                if replies.too_large:
                    raise GuardUnavailable(f"the guard at {path} sent an oversized reply")
        except GuardUnavailable:
            raise  # already says why (it is an OSError too: keep it from the clause below)
        except TimeoutError:
            raise GuardUnavailable(f"no answer from the guard at {path} within {timeout:g} s") from None
        except OSError as exc:
            raise GuardUnavailable(f"cannot reach the guard at {path}: {exc.strerror or exc}") from None
    finally:
        sock.close()


def ask(path: str, frame: bytes, timeout: float) -> "dict[str, Any]":
    """Send one request (check, result, agent_end) on a fresh connection and return its reply."""
    reply = _exchange(path, frame, timeout)
    assert isinstance(reply, dict)
    return reply


def _time_left(sock: "Any", deadline: float) -> None:
    """Give the next blocking call only what is left of the deadline."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    sock.settimeout(left)


# -- the `hook` op ----------------------------------------------------------------------------------


def hook_frame(data: bytes, harness: "str | None", fail_closed: bool) -> "bytes | None":
    """The `hook` op's frame for payload `data`, or None if the op cannot take it (too long or too deep:
    cbhook reads it itself). The payload goes as a JSON string of its very bytes: only `\\`, `"` and the
    line breaks and tabs are escaped, with C-speed replaces. Bytes that are not UTF-8 or other control
    characters make a frame the guard refuses (`bad_json`): cbhook then reads that payload itself."""
    if len(data) > HOOK_PAYLOAD_MAX or data.count(b"{") + data.count(b"[") > HOOK_BRACKETS_MAX:
        return None
    for raw, escaped in ((b"\\", b"\\\\"), (b'"', b'\\"'), (b"\n", b"\\n"), (b"\r", b"\\r"), (b"\t", b"\\t")):
        if raw in data:
            data = data.replace(raw, escaped)
    if len(data) > HOOK_PAYLOAD_MAX:
        return None
    named = b"null" if harness is None else b'"' + harness.encode() + b'"'
    closed = b"true" if fail_closed else b"false"
    return b'{"op":"hook","id":1,"harness":%s,"fail_closed":%s,"payload":"%s"}\n' % (named, closed, data)


def _hook_reply(line: bytes) -> "tuple[int, bytes, bytes] | None":
    """(exit status, stdout bytes, stderr bytes) of the guard's answer to the `hook` op, or None."""
    head, _, rest = line.partition(b',"stdout":"')
    out, _, rest = rest.partition(b'","stderr":"')
    if not rest.endswith(b'"}'):
        return None
    try:
        return int(head[len(_HOOK_REPLY) :]), bytes.fromhex(out.decode()), bytes.fromhex(rest[:-2].decode())
    except ValueError:
        return None


# -- the command ---------------------------------------------------------------------------------


class HookCommand:
    """One run of cbhook: options in, (stdout bytes, stderr bytes, exit status) out."""

    def __init__(
        self,
        socket: "str | None" = None,
        timeout: float = DEFAULT_TIMEOUT,
        fail_closed: bool = False,
        harness: "str | None" = None,
    ) -> None:
        self.socket = socket
        self.timeout = timeout
        self.fail_closed = fail_closed
        self.harness = harness  # a key of breaker.hookwire.TOOL_EVENTS (--harness), or None: detect it per payload

    def run(self, data: bytes) -> "tuple[bytes, bytes, int]":
        """`data` is stdin (`Oversized`: its head only, the rest drained unread)."""
        path = ""
        if not isinstance(data, Oversized):
            frame = hook_frame(data, self.harness, self.fail_closed)
            if frame is not None:
                path = self.socket or socket_path()
                try:
                    reply = _exchange(path, frame, self.timeout, hook=True)
                except GuardUnavailable as exc:
                    return self.read_here(data, path, exc)  # the failure mode decides, in the harness's words
                answer = _hook_reply(reply) if type(reply) is bytes else None
                if answer is not None:
                    status, out, err = answer
                    return out, err, status
                # An older guard (unknown_op), or a payload its frame could not carry (bad_json): read it here.
        return self.read_here(data, path)

    def read_here(
        self, data: bytes, path: str = "", unavailable: "GuardUnavailable | None" = None
    ) -> "tuple[bytes, bytes, int]":
        """Read the payload in this process (breaker.hookwire) and ask the guard request by request, as
        cbhook did before the `hook` op; `unavailable`: the guard could not be asked just now (not asked again)."""
        from breaker.hookwire import HookRun

        def ask_guard(frame: bytes) -> "dict[str, Any]":
            if unavailable is not None:
                raise unavailable
            return ask(path or self.socket or socket_path(), frame, self.timeout)

        run = HookRun(ask_guard, _log, fail_closed=self.fail_closed, harness=self.harness)
        oversized = f"over {MAX_STDIN // (1024 * 1024)} MiB" if isinstance(data, Oversized) else ""
        out, status = run.run(data, oversized=oversized)
        return out.encode(), b"", status


class Oversized(bytes):
    """Stdin past MAX_STDIN: its first HEAD bytes only (the rest was drained unread)."""


HEAD = 1 << 20  # bytes of an oversized payload kept: breaker.hookwire.HEAD, which reads its ids from them


def read_stdin(stream: "Any", limit: int = MAX_STDIN) -> bytes:
    """All of stdin, or (after draining it, so the harness never gets EPIPE) its head as `Oversized` if
    over `limit`."""
    data = stream.read(limit + 1)
    if len(data) <= limit:
        return bytes(data)
    data = Oversized(data[:HEAD])
    while stream.read(1 << 20):
        pass
    return data


def plugin_dir() -> str:
    import os

    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "dsh_plugin")


def _parse_args(argv: "list[str]") -> "HookCommand | str":
    """A HookCommand, or a message for a usage error. Hand-rolled: argparse costs a hook ~3 ms per call."""
    hook = HookCommand()
    it = iter(argv)
    for arg in it:
        name, eq, inline = arg.partition("=")
        if name in ("--socket", "--timeout", "--harness"):
            value = inline if eq else next(it, None)
            if not value:
                return f"{name} needs a value"
            if name == "--socket":
                hook.socket = _expand(value)
            elif name == "--timeout":
                try:
                    hook.timeout = float(value)
                except ValueError:
                    return f"--timeout: expected seconds (a number), found {value!r}"
                if not 0 < hook.timeout <= 600:
                    return f"--timeout: expected seconds from 0 to 600, found {value}"
            else:
                harness = HARNESSES.get(value.lower())
                if harness is None:
                    from breaker.hookwire import TOOL_EVENTS

                    names = ", ".join(TOOL_EVENTS)
                    return f"--harness: expected one of {names} (or claude, gemini), found {value!r}"
                hook.harness = harness
        elif arg == "--fail-closed":
            hook.fail_closed = True
        else:
            return f"unknown argument {arg!r}"
    return hook


def _write(stream: "Any", data: bytes) -> None:
    if data:
        try:
            stream.buffer.write(data)
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass


def main(argv: "list[str] | None" = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("-h", "--help"):
        sys.stdout.write(USAGE)
        return 0
    if args and args[0] == "--version":
        from breaker import __version__

        sys.stdout.write(f"cbhook {__version__}\n")
        return 0
    if args and args[0] == "--dsh-plugin-path":
        sys.stdout.write(plugin_dir() + "\n")
        return 0
    hook = _parse_args(args)
    if isinstance(hook, str):
        # Exit 1: every harness reports a failed hook and runs the tool; exit 2 would block it.
        _log(f"{hook}\n{USAGE}")
        return 1
    try:
        data = read_stdin(sys.stdin.buffer)
    except (OSError, ValueError, AttributeError) as exc:
        _log(f"cannot read stdin: {exc}")
        data = b""
    try:
        out, err, status = hook.run(data)
    except Exception as exc:  # a bug here must not stop the harness; fail as configured
        _log(f"internal error ({type(exc).__name__}: {exc}); {'denying' if hook.fail_closed else 'allowing'}")
        return 2 if hook.fail_closed else 0
    _write(sys.stderr, err)
    _write(sys.stdout, out)
    return status


if __name__ == "__main__":
    sys.exit(main())
