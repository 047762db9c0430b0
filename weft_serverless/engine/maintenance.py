"""``run_maintenance``: the pass a host (an EventBridge schedule, a ticker) calls to move time on.

Order (DESIGN.md section 5): ownership first (renew held claims, reclaim expired ones and
drive them, poll buffered signals of parked owned workflows), then due timers. Cross-engine
``result()`` waiters need no settling pass: a waiting handle re-reads the stored state.

Due timers are read earliest first across all shards (the shards' scans merged by due time,
O(due + shards) reads), each woken workflow is driven once, and only then are its fired timers
deleted: a crash mid-pass leaves them to fire again, which is safe because every step commit
is conditional. Reading in due order is what bounds a timer's wait: a pass that stops at its
cap has read every timer due before the ones it left, and moves the ones it could not act on
behind them (``defer_retained``), so a backlog in one shard cannot starve another's timers.
A timer of a run another engine holds on a live claim is not moved: its owner fires it.

Each shard is first read with a small probe, unbounded above: its earliest timers. The
first one not due ends the shard, and its due time is the shard's share of ``next_due``;
so a pass with nothing due costs one read per timer shard whatever the number of parked runs,
and ``next_due`` costs nothing more (ADR 0039). A pass that fired knows it too without reading
the shards again (ADR 0058): the earliest of what its probes saw not yet due, the timers it
read and left stored, and the timers its own drives armed (``watch_armed``). Only a shard read
past its probe, or a pass cut short, is read again for it. A timer another engine arms while
the pass runs is not in it, as it was not in a re-read that came before that timer: the
background driver waits at most ``POLL_INTERVAL`` and the deployed stack hints such a timer.

A pass may be one worker's of several (``Share``: the shards ``s % W == i`` of the timer,
claim and outbox indexes) and may fire several runs at once (``parallel``, one run to a
thread); overlapping shares and racing threads only repeat reads, since every wake is
fenced (ADR 0055).
"""

from __future__ import annotations

import contextvars
import heapq
import itertools
import threading
from collections.abc import Generator, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import closing
from dataclasses import asdict, dataclass, field
from typing import Any

from weft_serverless.codec import decode_record
from weft_serverless.engine import teardown
from weft_serverless.engine.bulk import operation as bulk
from weft_serverless.engine.drive.dispatch import Dispatcher
from weft_serverless.engine.drive.run_loop import BUSY, COLLECT, DEPOSED, RETAIN
from weft_serverless.engine.persistence.stored_records import TimerRecord
from weft_serverless.engine.persistence.timers import firing_order, timer_value
from weft_serverless.engine.process.telemetry import skip_unsupported
from weft_serverless.engine.process.timer_hints import watch_armed
from weft_serverless.engine.runs import admission, control, outbox, retention
from weft_serverless.engine.runs.commit import delete_fenced, write_moves
from weft_serverless.engine.runtime import Budget, Runtime, logger
from weft_serverless.engine.schedules import firing as schedule_firing
from weft_serverless.errors import UnsupportedSchemaVersionError, WeftError, WorkflowNotFoundError
from weft_serverless.storage import keys
from weft_serverless.storage.base import Delete, Key, Put
from weft_serverless.storage.keys.shards import EVERY_SHARD, Share

PROBE_TIMERS = 16
"""Timers the first read of a shard asks for. A strongly consistent Query is billed per 4 KB
read, and 16 timer items (about 130 bytes each) stay within one unit: the probe costs what a
one-item read costs, and a pass with up to 16 due timers in a shard needs no second read."""
RETAIN_BACKOFF = 1.0  # seconds a retained timer is moved on by, doubling per retention
MAX_RETAIN_BACKOFF = 3600.0


Due = list[tuple[Key, float, str]]
"""A run's due timers: key, due time, kind."""


@dataclass(slots=True)
class MaintenanceReport:
    """What one maintenance pass did."""

    now: float
    timers_fired: int = 0
    workflows_driven: int = 0
    max_lateness: float = 0.0
    next_due: float | None = None
    cut_short: bool = False
    parts: dict[str, int] = field(default_factory=dict)
    _reread: set[int] = field(default_factory=set, repr=False, compare=False)
    """Shards read past their probe: what lies after the due ones is not known (internal)."""

    def _note_due(self, due: float) -> None:
        self.next_due = due if self.next_due is None else min(self.next_due, due)

    def as_dict(self) -> dict[str, Any]:
        found = asdict(self)
        del found["_reread"]
        return found


def fire_due_timers(
    rt: Runtime,
    dispatcher: Dispatcher,
    now: float,
    report: MaintenanceReport,
    budget: Budget,
    share: Share = EVERY_SHARD,
    parallel: int = 1,
) -> int:
    """Fire what is due at ``now`` in ``share``'s timer shards, up to ``parallel`` runs at
    once; returns how many due timers were read (0: the probes found none, and
    ``report.next_due`` holds the earliest timer stored in the share)."""
    due: dict[str, Due] = {}
    backoffs: dict[Key, int] = {}
    seen = 0
    for sort, partition, value in _earliest_due(rt, now, budget.max_timers, report, share):
        seen += 1
        try:
            timer = TimerRecord.from_map(decode_record(value, f"timer {sort!r} in {partition!r}"))
        except UnsupportedSchemaVersionError as exc:
            skip_unsupported(rt.metrics, exc)
            report._note_due(keys.timer_due_of(sort))  # left stored, still due
            continue
        entry = (Key(partition, sort), keys.timer_due_of(sort), timer.kind)
        due.setdefault(timer.workflow_id, []).append(entry)
        backoffs[entry[0]] = timer.retained
    if seen >= budget.max_timers:
        report.cut_short = True
    order = sorted(due.items(), key=lambda item: min(t[1] for t in item[1]))
    with closing(_fire_each(rt, dispatcher, order, budget, parallel)) as fired:
        retained = _settle(rt, now, report, fired, backoffs)
    if seen >= budget.max_timers and retained:
        movable = _not_held_elsewhere(rt, retained)
        defer_retained(rt, movable, now)
        report.parts["timers_deferred"] = len(movable)
    return seen


def _settle(
    rt: Runtime,
    now: float,
    report: MaintenanceReport,
    fired: Iterator[tuple[str, Due, str | None]],
    backoffs: dict[Key, int],
) -> list[tuple[Key, str, str, int]]:
    """Count each fired run in the report and delete its timers; returns those retained."""
    retained: list[tuple[Key, str, str, int]] = []
    for workflow_id, timers, outcome in fired:
        if outcome is None:  # the budget ran out before this run's turn
            report.cut_short = True
            continue
        if outcome in KEPT:
            report.parts["timers_retained"] = report.parts.get("timers_retained", 0) + len(timers)
            for _, due, _ in timers:  # left stored (a capped pass may move them later)
                report._note_due(due)
            retained += [(key, workflow_id, kind, backoffs[key]) for key, _, kind in timers]
            continue
        if outcome != COLLECT:
            report.workflows_driven += 1
        _collect(rt, timers)
        report.timers_fired += len(timers)
        report.max_lateness = max(report.max_lateness, *(now - d for _, d, _ in timers))
    return retained


def _fire_each(
    rt: Runtime,
    dispatcher: Dispatcher,
    order: list[tuple[str, Due]],
    budget: Budget,
    parallel: int,
) -> Generator[tuple[str, Due, str | None], None, None]:
    """Fire each run's timers (``_fire``), up to ``parallel`` runs at once, and yield each
    run with its outcome (None: the budget ran out before its turn) as it ends.

    Each run is one task, so no two threads fire one run (the dispatcher refuses a run
    already driven here: BUSY, retained). An exception in one task is that run's failure,
    retained for a later pass; the others go on. A ``BaseException`` (a crash, an
    interrupt) stops every task not yet started and is raised once the started ones end.
    The caller alone touches the report and deletes fired timers, so neither is shared.
    """
    stop = threading.Event()

    def task(workflow_id: str, timers: Due) -> str | None:
        if stop.is_set() or budget.exhausted():
            return None
        try:
            return _fire(rt, dispatcher, workflow_id, {kind for _, _, kind in timers}, budget)
        except Exception:
            logger.exception("timers of workflow %s could not fire", workflow_id)
            return "error"
        except BaseException:
            stop.set()
            raise

    if parallel <= 1 or len(order) <= 1:
        for workflow_id, timers in order:
            yield workflow_id, timers, task(workflow_id, timers)
        return
    pool = ThreadPoolExecutor(max_workers=min(parallel, len(order)))
    try:
        futures = {
            pool.submit(contextvars.copy_context().run, task, workflow_id, timers): (
                workflow_id,
                timers,
            )
            for workflow_id, timers in order
        }
        for future in as_completed(futures):
            workflow_id, timers = futures[future]
            yield workflow_id, timers, future.result()
    finally:
        stop.set()  # the caller stopped (a lost store fence, a crash): start nothing more
        pool.shutdown(wait=True)


def _not_held_elsewhere(
    rt: Runtime, retained: list[tuple[Key, str, str, int]]
) -> list[tuple[Key, str, str, int]]:
    """The retained timers a capped pass may move on: not those of a run another engine holds
    on a live claim. That owner is the one engine that can fire them, so they stay where its
    pass reads them. Moved by the other engines' passes, behind a backoff that doubled each
    time, they could stay ahead of the owner's reads for ever while a backlog due before them
    took the owner's cap. Costs one read per retained run, only on a capped pass."""
    held = {wf for wf in {timer[1] for timer in retained} if rt.fence.held_elsewhere(wf)}
    return [timer for timer in retained if timer[1] not in held]


def _earliest_due(
    rt: Runtime, now: float, cap: int, report: MaintenanceReport, share: Share
) -> Iterator[tuple[str, str, bytes]]:
    """Up to ``cap`` timers due at ``now``, earliest first across ``share``'s shards.

    Sort keys start with the due time, so merging the shards' ordered scans by sort key reads
    in due order; each scan is lazy, so a shard is read only as far as the merge gets. A
    shard is first probed, unbounded above, for its earliest ``PROBE_TIMERS`` timers: the
    first one not due ends the shard, and its due time goes to ``report.next_due`` (the
    earliest of such probes; a pass that finds something due reads ``next_due`` again at its
    end). Only a shard whose probe was all due is read on, up to the bound.
    """

    def shard(number: int) -> Iterator[tuple[str, str, bytes]]:
        partition = keys.timer_partition(number)
        read = 0
        last = ""
        for sort, value in rt.storage.scan(partition, limit=PROBE_TIMERS):
            if sort >= bound:
                report._note_due(keys.timer_due_of(sort))
                return
            read += 1
            last = sort
            yield sort, partition, value
        if read < PROBE_TIMERS:
            return  # the probe read the whole shard
        report._reread.add(number)
        for sort, value in rt.storage.scan(partition, gt=last, lt=bound, limit=cap - read):
            yield sort, partition, value

    bound = keys.timer_due_bound(now)
    merged = heapq.merge(*(shard(n) for n in share.of(rt.shards_to_read.timers)))
    return itertools.islice(merged, cap)


def defer_retained(rt: Runtime, timers: list[tuple[Key, str, str, int]], now: float) -> None:
    """Move retained timers later, with a doubling delay, when a pass read its cap of timers.

    A retained timer is read again by every pass; without this, a cap's worth of them that
    no engine here can act on (a retired workflow type, runs owned elsewhere) would hide every
    timer due after them for ever. Moved, each falls due again after its backoff, so every
    due timer is read within a bounded number of passes. Each move is one atomic batch of a
    delete and a put; a crash between chunks leaves timers in the old or the new place.

    Two timers of one run with one tag (a copy left at another due time) land on one key:
    they move as one timer, since firing either does the same.
    """
    moves: dict[Key, tuple[list[Key], Put]] = {}
    for key, workflow_id, kind, count in timers:
        moved = keys.timer_moved(key, now + min(MAX_RETAIN_BACKOFF, RETAIN_BACKOFF * 2**count))
        put = Put(moved, timer_value(workflow_id, kind, retained=count + 1))
        moves.setdefault(moved, ([], put))[0].append(key)
    write_moves(rt, ([*map(Delete, originals), put] for originals, put in moves.values()))


class _Actions:
    """What timer handlers do (``timers.TimerActions``), carried out on this engine."""

    def __init__(self, rt: Runtime, dispatcher: Dispatcher, budget: Budget) -> None:
        self._rt = rt
        self._dispatcher = dispatcher
        self._budget = budget

    def close_children(self, workflow_id: str) -> None:
        control.close_children(self._rt, workflow_id)

    def purge_when_due(self, workflow_id: str) -> str:
        return retention.purge(self._rt, workflow_id, when_due=True)

    def time_out(self, workflow_id: str) -> bool:
        return control.time_out(self._rt, workflow_id)

    def activate_delayed(self, workflow_id: str) -> bool:
        return control.activate_delayed(self._rt, workflow_id)

    def fire_schedule(self, schedule_id: str) -> None:
        """Start what the schedule has due, then drive each run it started."""

        def drive(workflow_id: str) -> None:
            self._dispatcher.run(workflow_id, "start")

        schedule_firing.fire_due(self._rt, schedule_id, drive)

    def admit_queued(self, gate: str) -> int:
        return admission.admit(self._rt, gate)

    def run_teardown(self, workflow_id: str) -> str:
        return teardown.run(self._rt, workflow_id)

    def continue_bulk(self, operation_id: str) -> None:
        """Carry an abandoned bulk operation on from its cursor, within this pass's budget
        and the invocation's; the runs it wakes are driven by their own timers."""

        def stop() -> bool:
            return self._budget.exhausted() or self._rt.low_on_time(None)

        bulk.advance(self._rt, operation_id, stop, lambda _: None, lambda: None)


KEPT = (RETAIN, BUSY, DEPOSED, "error")
"""Outcomes that leave a run's timers stored: owned elsewhere, busy here, or failed."""


def fire_run_timers(
    rt: Runtime,
    dispatcher: Dispatcher,
    workflow_id: str,
    timers: list[tuple[Key, float, str]],
    budget: Budget,
) -> str:
    """Fire one run's due ``timers`` (key, due, kind) and then delete them, fenced; returns
    how the firing ended. The sweep and a timer hint both fire through here, so a hint racing
    the sweep does what a second pass would: drives are fenced, deletes idempotent. An
    outcome in ``KEPT`` deletes nothing, for a later pass."""
    outcome = _fire(rt, dispatcher, workflow_id, {kind for _, _, kind in timers}, budget)
    if outcome in KEPT:
        return outcome
    _collect(rt, timers)
    return outcome


def _collect(rt: Runtime, timers: Due) -> None:
    """Delete a fired run's timers, fenced under ``lease``, and count them. A parallel pass
    calls this on its own thread only (``_settle``), so the counters are never shared."""
    delete_fenced(rt, [key for key, _, _ in timers])
    rt.metrics.timers_fired += len(timers)


def _fire(
    rt: Runtime, dispatcher: Dispatcher, workflow_id: str, names: set[str], budget: Budget
) -> str:
    """Act on a workflow's due timers: each kind's handler in table order (``timers.KINDS``),
    then one drive for the kinds that wake it. Unknown kinds only wake."""
    actions = _Actions(rt, dispatcher, budget)
    wake: list[str] = []
    try:
        for kind in firing_order(names):
            if isinstance(kind, str):
                wake.append(kind)
                continue
            if kind.fire is not None:
                ended = kind.fire(actions, workflow_id)
                if ended is not None:
                    return ended
            if kind.wakes:
                wake.append(kind.name)
    except WorkflowNotFoundError:
        return COLLECT
    except UnsupportedSchemaVersionError as exc:
        skip_unsupported(rt.metrics, exc)
        return "error"
    except WeftError as exc:
        logger.warning("timer of workflow %s could not fire: %s", workflow_id, exc)
        return "error"
    if not wake:
        return COLLECT
    return dispatcher.run(workflow_id, "+".join(sorted(wake)))


def next_due(rt: Runtime, share: Share = EVERY_SHARD, only: set[int] | None = None) -> float | None:
    """The earliest timer stored in ``share``'s shards (``only`` those of them, if given):
    one read of a shard each."""
    earliest: float | None = None
    for shard in share.of(rt.shards_to_read.timers):
        if only is not None and shard not in only:
            continue
        for sort, _ in rt.storage.scan(keys.timer_partition(shard), limit=1):
            due = keys.timer_due_of(sort)
            earliest = due if earliest is None else min(earliest, due)
    return earliest


def run_maintenance(
    rt: Runtime,
    dispatcher: Dispatcher,
    now: float | None,
    budget: Budget,
    share: Share = EVERY_SHARD,
    parallel: int = 1,
) -> MaintenanceReport:
    """One pass over ``share``'s shards of each index it reads (timers, claims, outbox),
    firing up to ``parallel`` runs' timers at once; ``next_due`` is the share's."""
    moment = rt.clock() if now is None else now
    rt.time.hold_at_least(moment)
    report = MaintenanceReport(now=moment)
    report.parts.update(rt.fence.maintain(dispatcher.run, budget.exhausted, share))
    known = False
    if not budget.exhausted():
        cutoff = rt.clock_guard.timer_cutoff(moment)
        # The probes read each shard's earliest timer not due, the pass notes what it left
        # stored and what its drives armed: next_due is known without reading the shards
        # again, unless the pass stopped short of what it read (module docstring).
        with watch_armed() as armed:
            fire_due_timers(rt, dispatcher, cutoff, report, budget, share, parallel)
        known = not report.cut_short
        if armed.earliest is not None:
            report._note_due(armed.earliest)
    else:
        report.cut_short = True
    if not budget.exhausted():
        report.parts.update(
            outbox.publish(rt, share)
        )  # after the timers: their terminal events too
    if not known:
        report.next_due = None
        if not budget.exhausted():
            report.next_due = next_due(rt, share)
    elif report._reread:
        rest = next_due(rt, share, report._reread)
        if rest is not None:
            report._note_due(rest)
    logger.debug("maintenance: %s", report)
    return report
