"""The defects the simulation found, each fix reverted: the mutation loop checks that the
seeds still find every one (``tests/features/test_found_by_simulation.py`` pins each fix with
a deterministic test; docs/decisions/0047-simulation-covers-the-engine.md lists them)."""

from __future__ import annotations

from weft_serverless.testing.mutation_table import Mutation

REGRESSIONS: tuple[Mutation, ...] = (
    Mutation(
        "found-async-slot-read-as-step",
        "engine/persistence/records.py",
        "keys.counter_value(keys.top_slot(slot)) < first",
        'keys.counter_value(slot.split(".", 1)[0]) < first',
        "continue_as_new (async)",
        "a run continued after an async activity can never be driven again",
    ),
    Mutation(
        "found-outside-move-keeps-wake-up",
        "engine/runs/control.py",
        "ops += _replaced_wake(rt, workflow_id, target in TERMINAL, ops)",
        "ops += []",
        "cancel, time-out, resume",
        "a run ended from outside keeps its wake-up; a resumed one gets a second",
    ),
    Mutation(
        "found-purge-unfenced",
        "engine/runs/retention.py",
        "    delete_fenced(rt, rest)",
        "    rt.storage.delete_many(rest)",
        "store-wide lease (purge)",
        "an engine that lost the lease still deletes a purged run's records",
    ),
    Mutation(
        "found-heartbeat-in-cleanup",
        "engine/steps/activities.py",
        "done = scope.finish(slot, Outcome(value), "
        "OpRecord.activity_result(verdict.value, number))\n"
        "        done.ops.extend(beat_ops)",
        "done = scope.finish(slot, Outcome(value), "
        "OpRecord.activity_result(verdict.value, number))\n"
        "        done.cleanup.extend(beat_ops)",
        "heartbeats (crash)",
        "a crash after a step's commit leaves its heartbeat record for good",
    ),
    Mutation(
        "found-bulk-timer-at-fired-key",
        "engine/bulk/operation.py",
        'timer = timers.timer_key(rt.shards, timers.BULK, record["id"], due + 0.001)',
        "timer = old_timer",
        "bulk operations (stopped twice)",
        "an operation stopped twice at one instant loses its timer and never finishes",
    ),
    Mutation(
        "found-schedule-fire-by-exact-time",
        "engine/schedules/spec.py",
        "fire = self.at_or_before(now + 1e-3)",
        "fire = self.at_or_before(now)",
        "schedules (float rounding)",
        "a pass a float rounding before a fire raises AssertionError",
    ),
    Mutation(
        "found-branch-park-disarms",
        "engine/steps/scope.py",
        '        if "." in slot:',
        "        if False:",
        "race (branches together)",
        "a race won by an activity leaves its run no way forward after a crash",
    ),
    Mutation(
        "found-head-outranks-recommit",
        "engine/persistence/run_head.py",
        "return int(item.fence_epoch or 0) > int(record.fence_epoch or 0)",
        "return item.tombstone and int(item.fence_epoch or 0) > int(record.fence_epoch or 0)",
        "retry (workflow-lease heads)",
        "a step committed again after a retry is shadowed by the head's old record",
    ),
    Mutation(
        "found-child-start-transient-fails",
        "engine/runs/starting.py",
        "    except StorageUnavailableError:",
        "    except KeyboardInterrupt:",
        "children (transient errors)",
        "a child start the store did not answer fails its parent for good",
    ),
    Mutation(
        "found-lapsed-lease-runs-activity",
        "engine/ownership/store_lease.py",
        "if self.host.now() < self.renewed_at + self.timing.ttl - self.timing.renew_interval:",
        "if True:",
        "store-wide lease (lapsed)",
        "an engine whose lease lapsed runs an activity another engine runs too",
    ),
    Mutation(
        "found-end-misses-new-child",
        "engine/runs/control.py",
        "            state.status == RUNNING or bool(children_to_close(rt, workflow_id))",
        "            bool(children_to_close(rt, workflow_id))",
        "children (parent ended from outside)",
        "a child started while its parent is cancelled or timed out runs on",
    ),
    Mutation(
        "found-share-keeps-parked-claims",
        "engine/ownership/takeover.py",
        "if share != EVERY_SHARD:",
        "if False:",
        "maintenance shares (claims)",
        "a worker keeps a parked run whose timers only another worker's share reads",
    ),
)
"""Every fix the simulation led to, reverted one at a time."""
