"""The embedded default backend: one SQLite file, one table, write-ahead log.

The table ``kv(partition, sort, value)`` is keyed and clustered on ``(partition, sort)``, so a
scan is an index range read. Text columns use SQLite's default BINARY collation, which orders
ASCII sort keys by code point, exactly as the contract requires.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from os import PathLike

from weft_serverless.errors import StorageError, StorageUnavailableError
from weft_serverless.storage.base import (
    Capabilities,
    Condition,
    Key,
    Op,
    Put,
    SortRange,
    Storage,
)

_CAPABILITIES = Capabilities(
    max_batch_ops=10_000,
    max_value_bytes=4 * 1024 * 1024,
    max_partition_bytes=1024,
    max_sort_bytes=1024,
    conditional_batch=True,
    atomic_batch=True,
    persistence="local",
    cheap_multi_item_batch=True,  # one transaction, one fsync, however many rows
)

_PAGE_ROWS = 256
_CLOSED = "this SQLiteStorage is closed; open a new one"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (
    partition TEXT NOT NULL,
    sort TEXT NOT NULL,
    value BLOB NOT NULL,
    PRIMARY KEY (partition, sort)
) WITHOUT ROWID
"""
_SELECT = "SELECT value FROM kv WHERE partition = ? AND sort = ?"
_UPSERT = (
    "INSERT INTO kv (partition, sort, value) VALUES (?, ?, ?) "
    "ON CONFLICT (partition, sort) DO UPDATE SET value = excluded.value"
)
_INSERT = "INSERT INTO kv (partition, sort, value) VALUES (?, ?, ?)"
_DELETE = "DELETE FROM kv WHERE partition = ? AND sort = ?"


class SQLiteStorage(Storage):
    """Storage in one SQLite file (or ``":memory:"``), safe to share between threads.

    Durability is the product: a step reported as committed must still be there after a
    crash. WAL with ``synchronous=NORMAL`` survives a process crash but can lose the last
    commits on power loss or an OS crash, so this uses ``synchronous=FULL``, which fsyncs
    the log on every commit and survives both, at the price of one fsync per batch.

    One connection, guarded by a lock, serves all threads of this object; that also makes
    ``":memory:"`` work, where each connection would otherwise see its own database. Writes
    run in ``BEGIN IMMEDIATE`` transactions, which take SQLite's write lock before the
    conditions are read, so a conditional batch is atomic against other connections and
    processes on the same file too. A batch that is one statement (a step's bare commit: an
    ``INSERT`` whose primary key checks that the record is absent) runs as its own
    transaction instead, which is the same thing in one call. Lock waits last up to
    ``timeout`` seconds, then raise ``StorageUnavailableError``.

    Scans read pages of rows, each page continuing after the last sort key seen, so a huge
    partition never loads at once. Pages are separate reads: a scan sees each key that
    exists throughout it exactly once, in order, but may or may not see keys written while
    it runs.
    """

    def __init__(self, path: str | PathLike[str] = "weft.db", *, timeout: float = 30.0) -> None:
        super().__init__()
        self._lock = threading.Lock()
        with _translated():
            conn = sqlite3.connect(
                path, timeout=timeout, isolation_level=None, check_same_thread=False
            )
            try:
                _prepare(conn, timeout)
            except BaseException:
                conn.close()
                raise
        self._conn: sqlite3.Connection | None = conn
        # Reused by one-statement writes (under the lock): Connection.execute makes a cursor
        # per call.
        self._cursor = conn.cursor()

    def capabilities(self) -> Capabilities:
        return _CAPABILITIES

    def close(self) -> None:
        """Close the connection; closing twice is harmless."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _get(self, key: Key) -> bytes | None:
        with self._lock, _translated():
            row = self._connection().execute(_SELECT, (key.partition, key.sort)).fetchone()
        return None if row is None else bytes(row[0])

    def _scan(
        self, partition: str, rng: SortRange, limit: int | None, reverse: bool
    ) -> Iterator[tuple[str, bytes]]:
        remaining = limit
        # The bound the walk moves away from, then a strict bound after the last key seen.
        start = (rng.high, rng.high_inclusive) if reverse else (rng.low, rng.low_inclusive)
        end = (rng.low, rng.low_inclusive) if reverse else (rng.high, rng.high_inclusive)
        while remaining is None or remaining > 0:
            size = _PAGE_ROWS if remaining is None else min(_PAGE_ROWS, remaining)
            page = self._page(partition, start, end, reverse, size)
            yield from page
            if len(page) < size:
                return
            if remaining is not None:
                remaining -= len(page)
            start = (page[-1][0], False)

    def _batch(self, ops: Sequence[Op]) -> None:
        if len(ops) == 1:
            op = ops[0]
            if isinstance(op, Put):
                self._statement(_UPSERT, (op.key.partition, op.key.sort, bytes(op.value)))
            else:
                self._statement(_DELETE, (op.key.partition, op.key.sort))
            return
        self._write(lambda conn: _apply(conn, ops))

    def _conditional_batch(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        if len(ops) == 1 and len(conditions) == 1:
            op, cond = ops[0], conditions[0]
            same = cond.key is op.key or cond.key == op.key  # a step's record: the same Key
            if cond.expected is None and isinstance(op, Put) and same:
                # A step's bare commit: one INSERT, refused by the primary key if the
                # record exists.
                return self._statement(_INSERT, (op.key.partition, op.key.sort, bytes(op.value)))
        return self._write(lambda conn: _apply_if(conn, conditions, ops))

    # -- helpers -----------------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StorageError(_CLOSED)
        return self._conn

    def _statement(self, sql: str, params: tuple[str, str] | tuple[str, str, bytes]) -> bool:
        """A batch that is one statement, run as its own transaction (SQLite's autocommit):
        the same atomicity, write lock, busy wait and single fsync as ``BEGIN``, the
        statement, ``COMMIT``, in one call instead of three. False when the primary key
        refuses an ``INSERT``.
        """
        with self._lock:
            conn = self._conn
            if conn is None:
                raise StorageError(_CLOSED)
            if conn.in_transaction:
                # Only a rollback that itself failed leaves one open; the statement would
                # join it and not commit. Refused, as a BEGIN would be.
                raise StorageError("SQLite has a transaction left open; open a new store")
            try:
                self._cursor.execute(sql, params)
            except sqlite3.IntegrityError:
                return False
            except sqlite3.Error as exc:
                raise _translate(exc) from exc
        return True

    def _write(self, apply: Callable[[sqlite3.Connection], bool | None]) -> bool:
        """Run ``apply`` in a write transaction: committed unless it returns False (rolled
        back) or raises (rolled back, the error translated).

        Plain try blocks rather than context managers: a step commit passes through here,
        and every call on that path is paid again at every step.
        """
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    ok = apply(conn) is not False
                    conn.execute("COMMIT" if ok else "ROLLBACK")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise _translate(exc) from exc
        return ok

    def _page(
        self,
        partition: str,
        start: tuple[str | None, bool],
        end: tuple[str | None, bool],
        reverse: bool,
        size: int,
    ) -> list[tuple[str, bytes]]:
        clauses = ["partition = ?"]
        params: list[object] = [partition]
        for (bound, inclusive), is_lower in ((start, not reverse), (end, reverse)):
            if bound is not None:
                op = ">" if is_lower else "<"
                clauses.append(f"sort {op}{'=' if inclusive else ''} ?")
                params.append(bound)
        order = "DESC" if reverse else "ASC"
        sql = (
            f"SELECT sort, value FROM kv WHERE {' AND '.join(clauses)} "
            f"ORDER BY sort {order} LIMIT ?"
        )
        params.append(size)
        with self._lock, _translated():
            rows = self._connection().execute(sql, params).fetchall()
        return [(sort, bytes(value)) for sort, value in rows]


def _prepare(conn: sqlite3.Connection, timeout: float) -> None:
    """Switch the file to WAL and create the table, even while other processes do the same.

    SQLite's busy handler does not cover everything an opener does: the journal-mode switch
    and a read that must turn into a write on a snapshot another opener just changed fail at
    once with "database is locked". So the table is created under ``BEGIN IMMEDIATE`` (which
    waits for the write lock with the handler), and the whole preparation is retried with a
    short backoff until ``timeout`` runs out, as the handler would have waited.
    """
    deadline = time.monotonic() + timeout
    pause = 0.001
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(_SCHEMA)
            conn.execute("COMMIT")
            return
        except sqlite3.OperationalError as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if not _is_lock_error(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def _is_lock_error(exc: sqlite3.OperationalError) -> bool:
    return "locked" in str(exc) or "busy" in str(exc)


def _apply(conn: sqlite3.Connection, ops: Sequence[Op]) -> None:
    puts = [(op.key.partition, op.key.sort, bytes(op.value)) for op in ops if isinstance(op, Put)]
    deletes = [(op.key.partition, op.key.sort) for op in ops if not isinstance(op, Put)]
    if len(puts) == 1:
        conn.execute(_UPSERT, puts[0])
    elif puts:
        conn.executemany(_UPSERT, puts)
    if len(deletes) == 1:
        conn.execute(_DELETE, deletes[0])
    elif deletes:
        conn.executemany(_DELETE, deletes)


def _apply_if(conn: sqlite3.Connection, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
    """Apply ``ops`` if every condition holds; False (nothing applied) otherwise.

    A condition that a key is absent, on a key the batch puts (a step's op record), is
    checked by the primary key: a plain INSERT fails if the row exists. A step commit is
    then the same statements as a bare insert, with no read before it. Other conditions
    are read first.
    """
    puts = {op.key: op.value for op in ops if isinstance(op, Put)}
    inserts: list[Key] = []
    for cond in conditions:
        if cond.expected is None and cond.key in puts:
            inserts.append(cond.key)
            continue
        row = conn.execute(_SELECT, (cond.key.partition, cond.key.sort)).fetchone()
        if (None if row is None else bytes(row[0])) != cond.expected:
            return False
    try:
        for key in inserts:
            conn.execute(_INSERT, (key.partition, key.sort, bytes(puts[key])))
    except sqlite3.IntegrityError:
        return False
    if not inserts:
        _apply(conn, ops)
    elif len(inserts) < len(ops):
        inserted = set(inserts)
        _apply(conn, [op for op in ops if op.key not in inserted])
    return True


@contextmanager
def _translated() -> Iterator[None]:
    """Turn sqlite3 errors into storage errors, so no sqlite3 type leaves this module."""
    try:
        yield
    except sqlite3.Error as exc:
        raise _translate(exc) from exc


def _translate(exc: sqlite3.Error) -> StorageError:
    """The storage error for a sqlite3 one: unavailable when a lock outlasted the timeout."""
    if isinstance(exc, sqlite3.OperationalError) and _is_lock_error(exc):
        return StorageUnavailableError(f"SQLite stayed locked past the timeout: {exc}")
    return StorageError(f"SQLite failed: {exc}")
