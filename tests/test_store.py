"""The state file: what a save writes reads back the same; a torn, corrupt or foreign file never
stops the guard; compaction keeps the last record of each agent and nothing else."""

from __future__ import annotations

import threading
from pathlib import Path

from breaker import store as store_module
from breaker.engine import AgentState
from breaker.store import GuardRecord, StateStore, digest_probe, encode_agent, load, read_hash_seed


def state(agent: str, calls: int, ring: list[int | None] | None = None) -> AgentState:
    ring = ring if ring is not None else [11, 22, 11, None]
    return AgentState(agent, calls, {"duplicate": 2}, ring, {11: ("web_search", "web_search q=x")}, "web_search", 5.0)


def save(store: StateStore, items: list) -> None:
    done = threading.Event()
    store.save(items, done.set)
    assert done.wait(10)


def test_what_is_saved_reads_back_the_same(tmp_path: Path):
    path = tmp_path / "s.cbstate"
    store = StateStore(path, seed=1234)
    assert store.open().agents == []
    guard = GuardRecord(True, 99, {"duplicate": 3, "cap": 1, "interrupted": 0}, [("x", "why", 2, "dsh", "root")])
    save(store, [("a", state("a", 4), "dsh", "root"), ("b", state("b", 1), "claude-code", None), guard])
    save(store, [("b", None, "", None)])  # b went away
    store.close()
    loaded, _good = load(path)
    assert loaded.problem is None and loaded.windows and not loaded.notes
    ((record),) = loaded.agents
    assert (record.state, record.harness, record.parent) == (state("a", 4), "dsh", "root")
    assert loaded.guard == guard
    assert read_hash_seed(path) == 1234


def test_the_last_record_of_an_agent_wins_and_order_follows_the_last_save(tmp_path: Path):
    path = tmp_path / "s.cbstate"
    store = StateStore(path, seed=1)
    store.open()
    save(store, [("a", state("a", 1), "", None), ("b", state("b", 1), "", None)])
    save(store, [("a", state("a", 7), "", None)])
    store.close()
    loaded, _ = load(path)
    assert [(r.state.agent, r.state.calls) for r in loaded.agents] == [("b", 1), ("a", 7)]


def test_a_torn_last_record_costs_only_that_save_and_is_cut_off(tmp_path: Path):
    path = tmp_path / "s.cbstate"
    store = StateStore(path, seed=1)
    store.open()
    save(store, [("a", state("a", 3), "", None)])
    store.close()
    whole = path.stat().st_size
    with open(path, "ab") as f:
        f.write(encode_agent("b", state("b", 9), "", None)[:-5])  # a crash mid-write
    again = StateStore(path, seed=1)
    loaded = again.open()
    again.close()
    assert [r.state.agent for r in loaded.agents] == ["a"]
    assert any("torn" in note for note in loaded.notes)
    assert path.stat().st_size == whole  # cut back, so later saves append after a whole record


def test_a_foreign_or_corrupt_file_is_set_aside_and_the_store_starts_clean(tmp_path: Path):
    path = tmp_path / "s.cbstate"
    path.write_bytes(b"#!/bin/sh\necho not a state file\n")
    store = StateStore(path, seed=1)
    loaded = store.open()
    save(store, [("a", state("a", 1), "", None)])
    store.close()
    assert loaded.agents == [] and loaded.problem is not None
    assert any("starts clean" in note for note in loaded.notes)
    (aside,) = [p for p in tmp_path.iterdir() if p.name.startswith("s.cbstate.bad-")]
    assert aside.read_bytes().startswith(b"#!/bin/sh")
    assert [r.state.agent for r in load(path)[0].agents] == ["a"]


def test_windows_made_with_another_hash_seed_are_not_restored_but_the_rest_is(tmp_path: Path, monkeypatch):
    path = tmp_path / "s.cbstate"
    monkeypatch.setattr(store_module, "digest_probe", lambda: digest_probe() + 1)  # as another process writes it
    store = StateStore(path, seed=1)
    store.open()
    save(store, [("a", state("a", 3), "", None)])
    store.close()
    monkeypatch.undo()
    loaded, _ = load(path)
    assert not loaded.windows and any("another hash seed" in note for note in loaded.notes)
    assert loaded.agents[0].state.calls == 3


def test_compaction_keeps_only_the_last_record_of_each_agent(tmp_path: Path):
    path = tmp_path / "s.cbstate"
    store = StateStore(path, seed=1)
    store.compact_min = 4096
    store.open()
    for calls in range(1, 60):
        save(store, [("a", state("a", calls, ring=list(range(1, 40))), "", None), ("gone", state("gone", 1), "", None)])
    save(store, [("gone", None, "", None)])
    store.close()
    loaded, _ = load(path)
    assert [(r.state.agent, r.state.calls) for r in loaded.agents] == [("a", 59)]
    assert path.stat().st_size < 4 * len(encode_agent("a", state("a", 59, ring=list(range(1, 40))), "", None)) + 4096


def test_the_new_rules_state_and_the_warning_counter_read_back_the_same(tmp_path: Path):
    from breaker import Config, Guard

    guard = Guard(Config.from_mapping({"preset": "recommended", "tools": {"web_search": {"maxCalls": 9}}}))
    for i, c in enumerate("abababxxa"):
        guard.check("a", "web_search", {"q": c}, call_id=i)
        guard.result("a", f"r{i % 2}", call_id=i)
    full = guard.export_agent("a")
    assert full is not None and full.warns and full.recent and full.before and full.results
    assert full.tool_calls and full.cycles and full.last_key is not None
    path = tmp_path / "s.cbstate"
    store = StateStore(path, seed=1)
    store.open()
    record = GuardRecord(False, 9, {"duplicate": 1}, [], warnings=guard.warnings)
    save(store, [("a", full, "dsh", None), record])
    store.close()
    loaded, _good = load(path)
    assert loaded.agents[0].state == full
    assert loaded.guard is not None and loaded.guard.warnings == guard.warnings > 0


def test_a_seed_guards_agent_record_holds_what_it_always_held_and_the_repeat_run():
    import orjson

    from breaker import Config, Guard

    guard = Guard(Config())
    for c in "abab":
        guard.check("a", "bash", {"command": c})
    data = encode_agent("a", guard.export_agent("a"), "dsh", None)
    # the record as the store reads it back: its header (length, CRC, kind, id) may hold any byte, `{` too
    [(_at, _kind, ident, raw, _end)] = list(store_module._records(data))
    assert ident == "a"
    body = orjson.loads(raw)
    old = {"calls", "denies", "ring", "previews", "last_tool", "last_seen", "harness", "parent"}
    assert set(body) == old | {"last_key", "run"}  # no warnings, cycles, results or per-tool tallies


# -- the file on disk: bounded, never through a symlink, one store at a time --------------------------------


def test_the_writer_compacts_before_the_file_would_pass_its_limit_and_never_writes_past_it(tmp_path: Path):
    path = tmp_path / "s.cbstate"
    one = len(encode_agent("a", state("a", 1, ring=list(range(1, 40))), "", None))
    store = StateStore(path, seed=1, max_bytes=12 * one)
    store.compact_min = 1 << 30  # only the limit compacts here
    store.open()
    for calls in range(1, 60):
        save(store, [("a", state("a", calls, ring=list(range(1, 40))), "", None)])
        assert path.stat().st_size <= 12 * one
    store.close()
    assert store.error is None
    assert [(r.state.agent, r.state.calls) for r in load(path)[0].agents] == [("a", 59)]


def test_a_state_too_large_for_the_file_keeps_the_interrupts_and_says_so(tmp_path: Path):
    path = tmp_path / "s.cbstate"
    one = len(encode_agent("a0", state("a0", 1, ring=list(range(1, 40))), "", None))
    errors: list[str] = []
    store = StateStore(path, seed=1, on_error=errors.append, max_bytes=5 * one)
    store.open()
    guard = GuardRecord(False, 9, {}, [("looper", "stuck", 1, "dsh", None)])
    save(store, [*((f"a{i}", state(f"a{i}", 1, ring=list(range(1, 40))), "", None) for i in range(8)), guard])
    store.close()
    assert path.stat().st_size <= 5 * one
    loaded, _ = load(path)
    assert loaded.guard == guard and loaded.agents == []
    assert store.error is not None and errors == [store.error]
    assert "no longer fits the state file" in store.error and "lower maxAgents or window" in store.error


def test_a_state_file_over_the_limit_is_set_aside_unread(tmp_path: Path):
    path = tmp_path / "s.cbstate"
    store = StateStore(path, seed=1)
    store.open()
    save(store, [("a", state("a", 3), "", None)])
    store.close()
    size = path.stat().st_size
    again = StateStore(path, seed=1, max_bytes=size - 1)
    loaded = again.open()
    again.close()
    assert loaded.agents == [] and loaded.problem is not None
    assert f"is {size:,} bytes, over the {size - 1:,} bytes a state file may hold" in loaded.problem
    (aside,) = [p for p in tmp_path.iterdir() if p.name.startswith("s.cbstate.bad-")]
    assert aside.stat().st_size == size


def test_a_second_store_on_one_file_is_refused_naming_the_holders_pid_until_the_first_closes(tmp_path: Path):
    import os

    import pytest

    path = tmp_path / "s.cbstate"
    first = StateStore(path, seed=1)
    first.open()
    with pytest.raises(store_module.StateLocked) as refused:
        StateStore(path, seed=1).open()
    assert f"another guard keeps its state in {path} (pid {os.getpid()} holds s.cbstate.lock)" in str(refused.value)
    first.close()
    second = StateStore(path, seed=1)
    second.open()
    second.close()


def test_two_files_set_aside_in_the_same_second_are_both_kept(tmp_path: Path):
    path = tmp_path / "s.cbstate"
    for text in (b"first foreign file", b"second foreign file"):
        path.write_bytes(text)
        store = StateStore(path, seed=1)
        store.open()
        store.close()
    kept = {p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("s.cbstate.bad-")}
    assert kept == {b"first foreign file", b"second foreign file"}


def test_reading_the_hash_seed_of_a_fifo_returns_at_once(tmp_path: Path):
    import os

    fifo = tmp_path / "s.cbstate"
    os.mkfifo(fifo)
    got: list[int | None] = []
    reader = threading.Thread(target=lambda: got.append(read_hash_seed(fifo)), daemon=True)
    reader.start()
    reader.join(10)  # a blocking open would never return: nobody writes the FIFO
    assert got == [None]


def test_a_symlink_put_at_the_path_while_the_store_runs_is_never_followed_and_loses_no_agent(tmp_path: Path):
    import os

    path = tmp_path / "s.cbstate"
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"someone else's file\n")
    store = StateStore(path, seed=1)
    store.compact_min = 1024
    store.open()
    save(store, [("quiet", state("quiet", 1), "", None), ("a", state("a", 1), "", None)])  # quiet: saved once
    link = tmp_path / "link"
    link.symlink_to(victim)
    os.replace(link, path)  # as a tool call that may write the state directory could
    for calls in range(2, 40):  # appends, then a compaction
        save(store, [("a", state("a", calls), "", None)])
    store.close()
    assert victim.read_bytes() == b"someone else's file\n"
    assert path.is_file() and not path.is_symlink()  # the compaction's rename replaced the link itself
    assert [(r.state.agent, r.state.calls) for r in load(path)[0].agents] == [("quiet", 1), ("a", 39)]


def test_a_store_that_cannot_take_its_lock_writes_nothing_but_gives_back_what_the_file_holds(tmp_path: Path):
    path = tmp_path / "s.cbstate"
    store = StateStore(path, seed=1)
    store.open()
    save(store, [("a", state("a", 3), "", None)])
    store.close()
    before = path.read_bytes()
    lock = tmp_path / "s.cbstate.lock"
    lock.unlink()
    lock.mkdir()  # no lock file can be made there
    again = StateStore(path, seed=1)
    loaded = again.open()
    again.save([("a", state("a", 4), "", None)])
    again.close()
    assert [r.state.calls for r in loaded.agents] == [3]
    assert not again.running and again.error is not None and "will forget on restart" in again.error
    assert path.read_bytes() == before
