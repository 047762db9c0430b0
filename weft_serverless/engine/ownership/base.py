"""Ownership modes: who may write a workflow, and the fence that enforces it.

``none`` fences nothing (one engine per store, or idempotent work only). ``lease`` fences every
write on one store-wide epoch. ``workflow-lease`` gives each workflow one fenced owner, so many
engines share a store (DESIGN.md section 6; docs/decisions/0004-workflow-lease.md).

The engine talks to every mode through the ``Ownership`` interface below; the base class is
mode ``none`` and does nothing.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from weft_serverless.codec import decode_record, encode
from weft_serverless.engine.persistence.run_head import holder_record
from weft_serverless.engine.process.clock_skew import ClockGuard
from weft_serverless.errors import (
    ConfigurationError,
    OwnershipModeMismatchError,
    StorageError,
)
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Op, Put, Storage
from weft_serverless.storage.keys.shards import EVERY_SHARD, ShardLayout, Share
from weft_serverless.storage.shard_layout import LiveShards

if TYPE_CHECKING:
    from weft_serverless.engine.persistence.records import History
from weft_serverless.engine.process.telemetry import Metrics

Mode = Literal["none", "lease", "workflow-lease"]
HEAD_LAYOUT = "workflow-lease@2"
"""The marker of a workflow-lease store whose runs commit plain steps on their head (ADR
0037). An engine that predates it refuses the store (its mode string differs), so no engine
that cannot read a head ever drives a run that has one."""
HOLDER_LAYOUT = "workflow-lease@3"
"""The marker of a workflow-lease store whose runs carry their claim's holder in the head
(ADR 0056): a claim is one conditional put of the head, with no holder item and no
claims-index entry. An engine of layout 2 reads no holder there, so it refuses the store."""
PARK_LAYOUT = "workflow-lease@4"
"""The marker of a workflow-lease store whose runs also carry the pending record of the step
they park on in their head (ADR 0058): a park is a plain put of its timer and one
conditional put of the head. An engine of layout 3 would not see that park (it would park
the step again, later), so it refuses the store."""
INLINE_HOLDER_LAYOUTS = (HOLDER_LAYOUT, PARK_LAYOUT)
LAYOUTS = (HEAD_LAYOUT, HOLDER_LAYOUT, PARK_LAYOUT)
Verdict = Literal["drive", "retain", "collect"]
Drive = Callable[[str, str], object]
"""Drives a workflow now (id, why); what maintenance hands ``Ownership.maintain``."""

TTL_SAFETY_MULTIPLIER = 3
NO_LOCK: AbstractContextManager[object] = nullcontext()


class EngineDeposedError(Exception):
    """Internal: this engine's fence no longer holds for ``workflow_id``; stop driving it.

    Never reaches user code: the dispatcher catches it, drops the claim and warns.
    """

    def __init__(self, workflow_id: str) -> None:
        super().__init__(f"deposed from workflow {workflow_id!r}")
        self.workflow_id = workflow_id


def merge_conditions(*groups: Iterable[Condition]) -> list[Condition]:
    """The conditions of one batch assembled from several parts, each condition once.

    Parts are built independently and more than one may bring the same fence (a start
    fragment carries it, and so does the commit the start joins); a condition repeated is
    the same condition, while storage refuses two on one key. Two *different* expectations
    on one key are kept, so storage refuses that batch loudly: it could never commit.
    """
    return list(dict.fromkeys(cond for group in groups for cond in group))


@dataclass(slots=True)
class Fragment:
    """Conditions and writes a mode folds into a lifecycle batch."""

    conditions: list[Condition] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)

    def add(self, other: Fragment) -> None:
        """Fold ``other`` into this batch; a condition both carry is kept once."""
        self.conditions = merge_conditions(self.conditions, other.conditions)
        self.ops += other.ops


@dataclass(frozen=True, slots=True)
class Timing:
    ttl: float
    renew_interval: float

    def check(self, what: str) -> None:
        if self.ttl <= 0 or self.renew_interval <= 0:
            raise ConfigurationError(f"{what} ttl and renew interval must be > 0 seconds")
        if self.renew_interval >= self.ttl:
            raise ConfigurationError(
                f"{what}: renew interval ({self.renew_interval}s) must be shorter than the "
                f"ttl ({self.ttl}s)"
            )
        if self.ttl < TTL_SAFETY_MULTIPLIER * self.renew_interval:
            raise ConfigurationError(
                f"{what}: ttl ({self.ttl}s) must be at least {TTL_SAFETY_MULTIPLIER} x the renew "
                f"interval ({self.renew_interval}s), so one missed renewal never loses a claim"
            )


def pack_epoch(epoch: int) -> bytes:
    return struct.pack(">Q", epoch)


def unpack_epoch(data: bytes | None) -> int:
    if data is None or len(data) != 8:
        return 0
    value: int = struct.unpack(">Q", data)[0]
    return value


@dataclass(frozen=True, slots=True)
class OwnerHost:
    """What an ownership mode uses of its engine; built before the engine's ``Runtime``,
    which then holds the mode, so no mode needs the runtime.

    ``now``: engine time. ``workflow_types``: the types this engine can run (it claims no
    other). ``stop``: halt the engine for good (it lost a fence it cannot get back).
    """

    storage: Storage
    engine_id: str
    metrics: Metrics
    now: Callable[[], float]
    clock_guard: ClockGuard
    workflow_types: Container[str]
    stop: Callable[[], None]
    live_shards: LiveShards = field(default_factory=LiveShards.fixed)

    @property
    def shards(self) -> ShardLayout:
        """The store's shard layout now, read again once the copy is old (ADR 0050)."""
        return self.live_shards.current()

    def write(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        """Write the mode's own records (marker, lease, epoch, holder, head) in one batch, on
        the bytes the mode last read or wrote; False when they changed meanwhile.

        These writes are the fence, so they carry no other; every other write of the engine
        goes through ``engine/runs/commit.py``, which is built on the runtime that holds the mode
        and so cannot be imported from here. No conditions: a plain batch.
        """
        return self.storage.conditional_batch(conditions, ops)


class Ownership:
    """Mode ``none``: every engine may write every workflow; nothing is claimed."""

    mode: Mode = "none"

    def __init__(self, host: OwnerHost) -> None:
        self.host = host

    def conditions(self, workflow_id: str) -> list[Condition]:
        """The fence every workflow-scoped write of this engine carries."""
        return []

    def on_lost_commit(self, workflow_id: str) -> None:
        """A fenced commit was refused: raise if it was deposition rather than a lost race."""

    def check_store_fence(self) -> None:
        """A batch carrying no claim of a run (a start, a signal, a move made from outside)
        was refused: raise if the cause is that this engine lost a fence over the whole
        store, so it stops; return when it can only have been a racing writer."""

    def bootstrap(self) -> None:
        """Run the construction gates; called before recovery.

        Mode ``none`` writes no marker (a fencing engine may take the store over later,
        docs/decisions/0011-mode-none-on-a-fenced-store.md) but is refused on a store whose
        marker names a fencing mode: there it would drive runs their owners hold, unfenced.
        """
        stored = read_marker(self.host)
        if stored is not None:
            raise OwnershipModeMismatchError(
                self.mode, marker_mode(stored["mode"]), stored["established_at"]
            )

    def needs_claim(self, workflow_id: str) -> bool:
        """Whether driving this workflow here would first have to claim it (a write)."""
        return False

    def external_conditions(self) -> list[Condition]:
        """Fence for writes any engine may make (signal delivery)."""
        return []

    def start_fragment(self, workflow_id: str, epoch: bytes | None = None) -> Fragment:
        """The claim folded into a start; ``epoch`` is a reused id's surviving epoch."""
        return Fragment()

    def forget_start(self, workflow_id: str) -> None:
        """The start batch carrying ``start_fragment`` was refused."""

    def surviving_epoch(self, workflow_id: str) -> bytes | None:
        """The owner epoch a purged run of this id left, for ``start_fragment`` to claim on
        top of; only a mode that fences on it reads it."""
        return None

    def claim_landed(self, workflow_id: str) -> None:
        """The batch carrying ``start_fragment`` or ``resume_fragment`` committed: from now on
        a stored holder exists for renewal to extend (a heartbeat may run meanwhile)."""

    @contextmanager
    def release_for_terminal(self, workflow_id: str) -> Iterator[Fragment]:
        yield Fragment()

    def rotate_fragment(self, workflow_id: str) -> Fragment:
        return Fragment()

    def resume_fragment(self, workflow_id: str) -> Fragment:
        """Claim folded into a transition back to running (resume, retry, delayed start)."""
        return Fragment()

    def prepare_wake(self, workflow_id: str, kind: str, *, explicit: bool = False) -> Verdict:
        return "drive"

    def confirm_history(self, workflow_id: str, history: History) -> None:
        """A drive read the run's history, its owner epoch and head with it: raise
        ``EngineDeposedError`` if it shows this engine no longer owns the run, before
        anything runs on that read (and take up the head and the step it has still to write
        out)."""

    def commit_epoch(self, workflow_id: str) -> int | None:
        """The epoch this engine commits ``workflow_id``'s steps on, when the run commits
        plain steps on its head (its op records carry it); None otherwise."""
        return None

    def prefetched(self, workflow_id: str) -> list[tuple[str, bytes]] | None:
        """The rows of ``workflow_id``'s partition the wake that claimed it read, when they
        still are the run's history (the claim landed on the head they held and nothing was
        written since), so the drive need not read them again; None otherwise. Handed out
        once."""
        return None

    def commit_on_head(
        self,
        workflow_id: str,
        slot: str,
        record: bytes,
        expected: bytes | None,
        blob: Put | None = None,
    ) -> bool:
        """Commit a plain step as the run's new head; False when the head was not as this
        claim left it. Only called when ``commit_epoch`` is not None."""
        raise NotImplementedError(f"mode {self.mode!r} has no run heads")

    def parks_on_head(self, workflow_id: str) -> bool:
        """Whether the run parks a top-level step in its head (``park_on_head``)."""
        return False

    def park_on_head(self, workflow_id: str, slot: str, pending: bytes) -> bool:
        """Park the top-level step ``slot`` on ``pending``: one conditional put of the run's
        head (ADR 0058); False when the head was not as this claim left it. Only called
        when ``parks_on_head`` is True."""
        raise NotImplementedError(f"mode {self.mode!r} parks no step on a head")

    def flush(self, workflow_id: str) -> None:
        """Write out what a head commit left inline, before any other write of the run."""

    def commit_deferred(self, workflow_id: str) -> bool:
        """End a drive that wrote no claim (ADR 0059): land the step it committed in memory
        only, in one conditional put of the run's head; False when the head moved since the
        wake read it (nothing of the drive landed). True when there is nothing to land."""
        return True

    def exclusive(self, workflow_id: str) -> AbstractContextManager[object]:
        """Hold the run's writes still while a batch's fence is read and the batch sent (the
        fence of a run with a head changes with each plain step, which another thread of
        this engine may be committing). A shared no-op here: every commit enters it."""
        return NO_LOCK

    def before_activity(self, workflow_id: str) -> None:
        """An attempt of an activity is about to run in this engine's drive of
        ``workflow_id``: raise ``EngineDeposedError`` if this engine cannot keep owning the
        run while it does (an activity is the one thing a fence cannot undo)."""

    def after_drive(self, workflow_id: str, status: str | None, awaiting: frozenset[str]) -> None:
        """Called once a drive returns; ``awaiting`` names the signals it parked on."""

    def deposed(self, workflow_id: str) -> None:
        """Called when a drive hit ``EngineDeposedError``."""

    def maintain(
        self, drive: Drive, exhausted: Callable[[], bool], share: Share = EVERY_SHARD
    ) -> dict[str, int]:
        """The ownership parts of a maintenance pass (renew, reclaim, poll): ``drive`` runs
        what they wake, ``exhausted`` says the pass's time is up, ``share`` which claim
        shards this worker scans for expired claims. Returns what each part did, by name,
        for the pass's report."""
        return {}

    def renew_all(self) -> None:
        """Renew every held claim now (the invocation heartbeat calls this)."""

    def release_parked(self, keep: Callable[[str], bool] | None = None) -> int:
        """Release claims of parked workflows (end of a serverless invocation), but those
        ``keep`` names."""
        return 0

    def owner_of(self, workflow_id: str) -> dict[str, object] | None:
        return None

    def held_elsewhere(self, workflow_id: str) -> bool:
        """Whether another engine holds the run on a claim not yet open to takeover: that
        engine alone may act on the run's timers, and is expected to."""
        return False

    def close(self) -> None:
        """Best-effort release of what this engine holds."""

    @property
    def renew_interval(self) -> float | None:
        return None


class ReadOnly(Ownership):
    """For tools that only read (the CLI's list, show, result) a store of any mode.

    It checks no marker and claims nothing; every write the engine would fence is refused,
    so such a tool can never write unfenced on a fenced store.
    """

    def bootstrap(self) -> None:
        """Nothing to check: this engine never writes."""

    def conditions(self, workflow_id: str) -> list[Condition]:
        raise ConfigurationError("this engine only reads; open one in the store's mode to write")

    def owner_of(self, workflow_id: str) -> dict[str, object] | None:
        # The claim is a record like any other, so a reader describes a run as the engines
        # of its store do (under workflow-lease: who holds it); other modes store none.
        return stored_owner(self.host.storage, workflow_id)

    def external_conditions(self) -> list[Condition]:
        return self.conditions("")

    def commit_epoch(self, workflow_id: str) -> int | None:
        self.conditions(workflow_id)  # refuses: this engine only reads
        return None

    def start_fragment(self, workflow_id: str, epoch: bytes | None = None) -> Fragment:
        return Fragment(conditions=self.conditions(workflow_id))

    def rotate_fragment(self, workflow_id: str) -> Fragment:
        return Fragment(conditions=self.conditions(workflow_id))

    def resume_fragment(self, workflow_id: str) -> Fragment:
        return Fragment(conditions=self.conditions(workflow_id))


def stored_owner(storage: Storage, workflow_id: str) -> dict[str, Any] | None:
    """The run's claim record under workflow-lease (holder, epoch, expiry), decoded; None
    when no engine holds it or the store is of another mode. One read of the run's owner
    records: the holder is an item of its own, or (layout 3) a part of the run's head."""
    found = dict(storage.scan(keys.workflow_partition(workflow_id), "owner#"))
    return holder_record(found.get(keys.OWNER_HOLDER), found.get(keys.OWNER_HEAD))


def head_holder(head_bytes: bytes) -> dict[str, Any] | None:
    """The holder a head carries (layout 3), spelled as a holder item; None when unheld."""
    return holder_record(None, head_bytes)


def read_marker(host: OwnerHost) -> dict[str, Any] | None:
    """The store's ownership-mode marker ``{mode, established_at}``, None on a store no
    fencing engine has used."""
    stored = host.storage.get(keys.meta_key(keys.OWNERSHIP_MODE))
    if stored is None:
        return None
    return dict(decode_record(stored, "the store's ownership-mode marker"))


def marker_mode(stored: object) -> str:
    """The ownership mode a marker's ``mode`` names, whatever layout it adds."""
    return "workflow-lease" if stored in LAYOUTS else str(stored)


def establish_mode(host: OwnerHost, mode: Mode) -> str:
    """Gates 1 and 2: conditional batches available, and one mode per store (marker CAS).

    Returns the marker's mode as stored: a workflow-lease store is ``PARK_LAYOUT`` when
    this release set it up, or ``HOLDER_LAYOUT``, ``HEAD_LAYOUT`` or plain
    ``workflow-lease`` when an earlier one did (its runs then keep the layout that release
    wrote, so engines of both releases may share it)."""
    if not host.storage.capabilities().conditional_batch:
        raise ConfigurationError(
            f"ownership={mode!r} needs a storage with conditional batches; "
            f"{type(host.storage).__name__} has none"
        )
    key = keys.meta_key(keys.OWNERSHIP_MODE)
    for _ in range(5):
        record = read_marker(host)
        if record is None:
            stored = PARK_LAYOUT if mode == "workflow-lease" else mode
            marker = encode({"mode": stored, "established_at": host.now()})
            if host.write([Condition(key, None)], [Put(key, marker)]):
                return stored
            continue
        if marker_mode(record["mode"]) != mode:
            raise OwnershipModeMismatchError(
                mode, marker_mode(record["mode"]), record["established_at"]
            )
        return str(record["mode"])
    raise StorageError("could not establish the ownership-mode marker; try again")
