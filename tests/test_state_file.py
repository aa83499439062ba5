"""The guard's state file on disk, with real guard processes: only a regular file of bounded size is read
(a FIFO, a device or a symlink at its path is set aside and the guard starts clean, saying why), nothing
is ever written through a symlink, and one state file serves one guard at a time."""

from __future__ import annotations

import os
from pathlib import Path

from tests.conftest import Conn, GuardProcess, request
from tests.test_server_trust import check


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def set_aside(path: Path) -> list[Path]:
    return sorted(p for p in path.parent.iterdir() if p.name.startswith(path.name + ".bad-"))


def started_clean(g: GuardProcess, path: Path, why: str) -> Path:
    """The guard answers, said why it set `path` aside, and keeps a regular state file there now: what was set aside."""
    assert request(g.socket, check(1, "a"))["decision"] == "allow"
    log = g.log.read_text()
    assert why in log and "starts clean" in log and str(path) in log, log
    (aside,) = set_aside(path)
    assert path.is_file() and not path.is_symlink()
    return aside


def test_a_fifo_at_the_state_path_never_hangs_the_guards_start_it_is_set_aside(guard_factory, tmp_path):
    path = tmp_path / "state" / "s.cbstate"
    path.parent.mkdir()
    os.mkfifo(path)
    g = guard_factory("--state", str(path))  # waits for a ping: the start did not hang on the FIFO
    aside = started_clean(g, path, "is a FIFO, not a regular file")
    assert aside.is_fifo()


def test_a_symlink_to_dev_zero_at_the_state_path_is_set_aside_unread(guard_factory, tmp_path):
    path = tmp_path / "state" / "s.cbstate"
    path.parent.mkdir()
    path.symlink_to("/dev/zero")
    g = guard_factory("--state", str(path))
    aside = started_clean(g, path, "is a symlink (to /dev/zero)")
    assert aside.is_symlink() and os.readlink(aside) == "/dev/zero"  # only the name moved
    assert peak_rss_mib(g.pid) < 300


def test_a_1_gib_state_file_is_set_aside_by_its_size_without_being_read(guard_factory, tmp_path):
    path = tmp_path / "state" / "s.cbstate"
    path.parent.mkdir()
    with open(path, "wb") as f:
        f.truncate(1024**3)  # sparse: a GiB of zeros on no disk
    g = guard_factory("--state", str(path))
    aside = started_clean(g, path, "is 1,073,741,824 bytes, over the")
    assert aside.stat().st_size == 1024**3  # set aside whole, not cut
    assert peak_rss_mib(g.pid) < 300  # never read into memory


def test_the_guard_never_writes_its_state_through_a_symlink_at_the_state_path(guard_factory, tmp_path):
    elsewhere = tmp_path / "elsewhere.cbstate"
    first = guard_factory("--state", str(elsewhere))
    assert request(first.operator, {"op": "interrupt", "id": 1, "agent": "looper"})["ok"]
    first.stop()
    before = elsewhere.read_bytes()
    path = tmp_path / "state" / "s.cbstate"
    path.parent.mkdir()
    path.symlink_to(elsewhere)
    g = guard_factory("--state", str(path))
    started_clean(g, path, f"is a symlink (to {elsewhere})")
    assert request(g.operator, {"op": "interrupt", "id": 2, "agent": "other"})["ok"]  # saved before its reply
    g.stop()
    assert elsewhere.read_bytes() == before  # the link's target is untouched: written neither by append nor rename
    (aside,) = set_aside(path)
    assert aside.is_symlink() and aside.resolve() == elsewhere


def test_a_second_guard_on_the_same_state_file_refuses_to_start_and_names_the_holder(guard_factory, tmp_path):
    path = tmp_path / "shared.cbstate"
    first = guard_factory("--state", str(path))
    assert request(first.operator, {"op": "interrupt", "id": 1, "agent": "looper", "reason": "stuck"})["ok"]
    second = guard_factory("--state", str(path), start=False)  # another socket, the same state file
    second.start(wait=False)
    assert second.proc is not None and second.proc.wait(30) != 0
    log = second.log.read_text()
    assert f"another guard keeps its state in {path} (pid {first.pid} " in log, log
    assert "--state PATH" in log
    assert request(first.socket, check(1, "looper"))["kind"] == "interrupted"  # the first runs on, untouched

    first.kill9()  # the kernel lets the lock go with the process
    third = guard_factory("--state", str(path))
    c = Conn(third.socket)
    assert c.ask(check(2, "looper"))["kind"] == "interrupted"  # the first's acknowledged interrupt kept
    assert (tmp_path / "shared.cbstate.lock").read_text().strip() == str(third.pid)
