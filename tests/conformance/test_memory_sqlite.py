"""The storage contract on the in-process backends, plus what only SQLite promises."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from weft_serverless.errors import StorageError
from weft_serverless.storage.base import Condition, Key, Put, Storage
from weft_serverless.storage.conformance import StorageConformance
from weft_serverless.storage.memory import MemoryStorage
from weft_serverless.storage.sqlite import SQLiteStorage


@pytest.mark.storage("memory")
class TestMemoryStorage(StorageConformance):
    @pytest.fixture
    def storage(self) -> Storage:
        return MemoryStorage()


@pytest.mark.storage("sqlite")
class TestSQLiteFile(StorageConformance):
    """On a file, the race test runs across two connections, as two processes would."""

    @pytest.fixture
    def storage(self, tmp_path: Path) -> Iterator[Storage]:
        store = SQLiteStorage(tmp_path / "weft.db")
        yield store
        store.close()

    @pytest.fixture
    def storage_peer(self, storage: Storage, tmp_path: Path) -> Iterator[Storage]:
        peer = SQLiteStorage(tmp_path / "weft.db")
        yield peer
        peer.close()


@pytest.mark.storage("sqlite")
class TestSQLiteInMemory(StorageConformance):
    @pytest.fixture
    def storage(self) -> Iterator[Storage]:
        store = SQLiteStorage(":memory:")
        yield store
        store.close()


@pytest.mark.storage("sqlite")
def test_sqlite_data_survives_close_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "weft.db"
    first = SQLiteStorage(path)
    first.put(Key("p", "a"), b"\x00committed\xff")
    first.close()
    second = SQLiteStorage(path)
    try:
        assert list(second.scan("p")) == [("a", b"\x00committed\xff")]
    finally:
        second.close()


@pytest.mark.storage("sqlite")
def test_sqlite_file_uses_the_write_ahead_log(tmp_path: Path) -> None:
    path = tmp_path / "weft.db"
    SQLiteStorage(path).close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


@pytest.mark.storage("sqlite")
def test_sqlite_openers_racing_on_a_fresh_file_all_succeed(tmp_path: Path) -> None:
    """Engines started together on a new file each switch it to WAL and create the table;
    SQLite answers some of those steps "locked" at once, without its busy handler, so an
    opener that did not wait and retry failed about one race in ten."""
    openers, trials = 3, 60
    for trial in range(trials):
        path = tmp_path / f"fresh-{trial}.db"
        barrier = threading.Barrier(openers, timeout=30)

        def open_and_write(
            index: int, path: Path = path, barrier: threading.Barrier = barrier
        ) -> None:
            barrier.wait()
            store = SQLiteStorage(path)
            try:
                store.put(Key("p", str(index)), b"x")
            finally:
                store.close()

        with ThreadPoolExecutor(max_workers=openers) as pool:
            list(pool.map(open_and_write, range(openers)))
        check = SQLiteStorage(path)
        try:
            assert [sort for sort, _ in check.scan("p")] == [str(i) for i in range(openers)]
        finally:
            check.close()


@pytest.mark.storage("sqlite")
def test_sqlite_closed_handle_raises_storage_error(tmp_path: Path) -> None:
    store = SQLiteStorage(tmp_path / "weft.db")
    store.close()
    store.close()
    with pytest.raises(StorageError):
        store.get(Key("p", "a"))


@pytest.mark.storage("sqlite")
def test_sqlite_handles_on_one_file_lose_no_cas_increment(tmp_path: Path) -> None:
    """Two objects race read-then-CAS increments; a double winner would lose an increment."""
    path, key, per_writer = tmp_path / "weft.db", Key("p", "counter"), 25
    handles = [SQLiteStorage(path), SQLiteStorage(path)]
    barrier = threading.Barrier(len(handles), timeout=30)

    def increment_all(store: Storage) -> int:
        lost = 0
        barrier.wait()
        for _ in range(per_writer):
            while True:
                current = store.get(key)
                new = str(int(current or b"0") + 1).encode()
                if store.conditional_batch([Condition(key, current)], [Put(key, new)]):
                    break
                lost += 1
        return lost

    try:
        with ThreadPoolExecutor(max_workers=len(handles)) as pool:
            lost = sum(pool.map(increment_all, handles))
        assert handles[0].get(key) == str(per_writer * len(handles)).encode()
        assert handles[0].stats.conditional_failures + handles[1].stats.conditional_failures == lost
    finally:
        for handle in handles:
            handle.close()


def test_storage_factory_handles_share_one_store(storage_factory: Callable[[], Storage]) -> None:
    first = storage_factory()
    first.put(Key("p", "a"), b"1")
    second = storage_factory()
    assert second.get(Key("p", "a")) == b"1"
    second.put(Key("p", "b"), b"2")
    assert list(storage_factory().scan("p")) == [("a", b"1"), ("b", b"2")]


@pytest.mark.storage("sqlite")
def test_sqlite_commits_a_step_with_the_statements_of_a_bare_insert(tmp_path: Path) -> None:
    """A step's batch (its op record, absent until now) is one INSERT, its own transaction:
    the primary key checks the condition, with no read before the write and no BEGIN or
    COMMIT round trip; a second commit of the step is refused and changes nothing. A
    one-write batch is one statement too. A fenced batch still reads its other conditions."""
    store = SQLiteStorage(tmp_path / "weft.db")
    try:
        statements: list[str] = []
        conn = store._conn
        assert conn is not None
        conn.set_trace_callback(statements.append)
        step, guard = Key("wf#run", "op#0001"), Key("wf#run", "owner")
        assert store.conditional_batch([Condition(step, None)], [Put(step, b"v")])
        assert [s.split(" (", 1)[0] for s in statements] == ["INSERT INTO kv"]
        assert not conn.in_transaction
        assert store.conditional_batch([Condition(step, None)], [Put(step, b"other")]) is False
        assert store.get(step) == b"v"
        statements.clear()
        store.put(Key("wf#run", "wake"), b"1")
        store.delete(Key("wf#run", "wake"))
        assert [s.split(" ", 1)[0] for s in statements] == ["INSERT", "DELETE"]
        statements.clear()
        fenced = [Condition(Key("wf#run", "op#0002"), None), Condition(guard, None)]
        assert store.conditional_batch(fenced, [Put(Key("wf#run", "op#0002"), b"v")])
        assert [s.split(" ", 1)[0] for s in statements] == ["BEGIN", "SELECT", "INSERT", "COMMIT"]
    finally:
        store.close()
