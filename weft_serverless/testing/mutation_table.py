"""The table of one-line defects the simulation must find (``python -m
weft_serverless.testing.mutations``): at least one per feature the workload covers, on its
key condition or write, and the ones earlier audits planted.

``original`` is an exact snippet that occurs once in ``path`` (under the package);
``replacement`` is what the defect writes instead.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str
    original: str
    replacement: str
    feature: str
    breaks: str


MUTATIONS: tuple[Mutation, ...] = (
    # -- the earlier audit's defects (core steps, timers, ownership) ----------------------------
    Mutation(
        "unfenced-head-put",
        "engine/ownership/workflow_lease.py",
        "[Condition(key, claim.head)], [Put(key, new)]",
        "[], [Put(key, new)]",
        "workflow-lease steps",
        "a deposed owner's step lands on the run's head",
    ),
    Mutation(
        "timers-fire-2s-early",
        "engine/maintenance.py",
        "cutoff = rt.clock_guard.timer_cutoff(moment)",
        "cutoff = rt.clock_guard.timer_cutoff(moment) + 2.0",
        "timers",
        "a pass fires timers due up to 2 s later (a sleep ends early)",
    ),
    Mutation(
        "retry-without-timer",
        "engine/steps/scope.py",
        "                Put(timer, timers.timer_value(self.workflow_id, kind.name)),",
        "                *([] if kind is timers.RETRY else [Put(timer, timers.timer_value("
        "self.workflow_id, kind.name))]),",
        "retries",
        "a retry parks with no timer to wake it",
    ),
    Mutation(
        "takeover-keeps-epoch",
        "engine/ownership/claims.py",
        "new_epoch = current_epoch(read) + 1",
        "new_epoch = current_epoch(read)",
        "workflow-lease takeover",
        "a claim taken over keeps the deposed owner's epoch",
    ),
    Mutation(
        "renewal-without-condition",
        "engine/ownership/takeover.py",
        "[Condition(key, claim.head)], [Put(key, new)]",
        "[], [Put(key, new)]",
        "workflow-lease renewal",
        "a deposed owner's renewal overwrites the new holder (in the run's head, layout 3 on)",
    ),
    Mutation(
        "cancel-skips-close-policy",
        "engine/runs/control.py",
        "closing = target in TERMINAL and (",
        "closing = False and (",
        "children",
        "a cancelled parent leaves its awaited and request-cancel children running",
    ),
    Mutation(
        "inline-branch-wrong-slot",
        "engine/steps/fan_out.py",
        "        done = scope.advance(branch, sub)\n        if done is not None:\n"
        "            node.branch_done(index, done)",
        "        done = scope.advance(branch, sub)\n        if done is not None:\n"
        "            node.branch_done(len(node.cmd.commands) - 1 - index, done)",
        "all (one after another)",
        "a branch run inline is recorded at another branch's slot",
    ),
    Mutation(
        "terminal-write-keeps-holder",
        "engine/ownership/workflow_lease.py",
        "released = Head.from_bytes(claim.head).released()",
        "released = claim.head",
        "workflow-lease release",
        "a run's own terminal commit leaves its holder record",
    ),
    Mutation(
        "signal-id-dedup-dropped",
        "engine/runs/signals.py",
        "ops.append(Put(keys.signal_id_key(workflow_id, signal_id), dedup))",
        "ops.append(Put(keys.signal_id_key(workflow_id, signal_id + seq), dedup))",
        "signals",
        "a signal resent with its id is delivered again",
    ),
    # -- the named defects ------------------------------------------------------------
    Mutation(
        "parallel-branch-wrong-slot",
        "engine/steps/fan_out.py",
        "sub = keys.branch_slot(self.slot, index)\n        self.tree.scope.commit_done(",
        "sub = keys.branch_slot(self.slot, len(self.outcomes))\n"
        "        self.tree.scope.commit_done(",
        "all (branches together)",
        "a branch is recorded at the sub-slot of its finishing order",
    ),
    Mutation(
        "continue-drops-signals",
        "engine/runs/continuation.py",
        "ops += [Delete(keys.version_key(state.id, change)) for change in history.versions]",
        "ops += [Delete(keys.version_key(state.id, change)) for change in history.versions]"
        " + [Delete(Key(keys.workflow_partition(state.id), sort)) for queue in"
        " history.signals.values() for sort, _, _ in queue]",
        "continue_as_new",
        "a signal buffered before the continue is lost",
    ),
    Mutation(
        "slot-never-freed",
        "engine/runs/concurrency.py",
        'ops: list[Op] = [Delete(keys.concurrency_slot_key(state.type, key, record["slot"]))]',
        "ops: list[Op] = []",
        "concurrency limits",
        "a finished run keeps its concurrency slot",
    ),
    Mutation(
        "schedule-fire-unconditioned",
        "engine/schedules/firing.py",
        "conditions = [condition, *fragment.conditions]",
        "conditions = [*fragment.conditions]",
        "schedules",
        "a fire overwrites a pause (or another fire) that landed since its read",
    ),
    Mutation(
        "terminal-keeps-wake-up",
        "engine/runs/transitions.py",
        "    ops += wakeups.disarm(history)",
        "    ops += []",
        "wake-ups",
        "a run that ends keeps its wake-up pointer and timer",
    ),
    Mutation(
        "terminal-keeps-claim-index",
        "engine/ownership/claims.py",
        "        *(Delete(key) for key in keys.claim_index_keys(layout, workflow_id)),\n",
        "",
        "workflow-lease release",
        "a released claim leaves its claim-index entry",
    ),
    # -- one or more per feature of the workload ----------------------------------------------
    Mutation(
        "map-ignores-bound",
        "engine/steps/fan_out.py",
        "self.group = Group(bound if mc is None else min(mc, bound))",
        "self.group = Group(bound)",
        "map",
        "a map runs more items at once than its max_concurrency",
    ),
    Mutation(
        "nested-slots-collide",
        "storage/keys/runs.py",
        'return f"{parent}.{counter(index, 3)}"',
        "return f\"{parent.split('.')[0]}.{counter(index, 3)}\"",
        "nested composites",
        "a composite's branches inside a branch are recorded at the outer step's slots",
    ),
    Mutation(
        "race-forgets-winner",
        "engine/steps/fan_out.py",
        "record = OpRecord.holding(encode(done.outcome.value), index=index)",
        "record = OpRecord.holding(encode(done.outcome.value), index=0)",
        "race",
        "a race records branch 0 as its winner whichever won",
    ),
    Mutation(
        "schedule-fired-uncounted",
        "engine/schedules/firing.py",
        "advanced = replace(rec, fired=rec.fired + 1, last=last, running=running)",
        "advanced = replace(rec, fired=rec.fired, last=last, running=running)",
        "schedules",
        "a fire starts a run and does not count it",
    ),
    Mutation(
        "schedule-pause-keeps-next",
        "engine/schedules/manage.py",
        "return replace(rec, paused=True, next=None, timer=None), [Delete(timer)] if timer else []",
        "return replace(rec, paused=True, timer=None), [Delete(timer)] if timer else []",
        "schedule pause",
        "a paused schedule still names a next fire",
    ),
    Mutation(
        "schedule-resume-unarmed",
        "engine/schedules/manage.py",
        "return replace(rec, paused=False).rearmed(rt, rt.now())",
        "return replace(rec, paused=False), []",
        "schedule resume",
        "a resumed schedule never fires again",
    ),
    Mutation(
        "schedule-update-keeps-next",
        "engine/schedules/handle.py",
        "            return new.rearmed(rt, rt.now())",
        "            return new, []",
        "schedule update",
        "an updated schedule fires on its old timing",
    ),
    Mutation(
        "schedule-trigger-ignores-overlap",
        "engine/schedules/firing.py",
        "plan = _fire(rt, replace(rec, running=live_runs(rt, rec.running)), at, None, workflow_id)",
        "plan = _fire(rt, replace(rec, running=()), at, None, workflow_id)",
        "schedule trigger",
        "a trigger starts a run beside a live one under skip, queue or cancel_running",
    ),
    Mutation(
        "reject-queues",
        "engine/runs/concurrency.py",
        'if spec.on_limit == "reject":',
        'if spec.on_limit == "never":',
        "concurrency reject",
        "a start beyond a rejecting limit is queued instead",
    ),
    Mutation(
        "queued-cancel-keeps-entry",
        "engine/runs/concurrency.py",
        "return [Delete(keys.concurrency_queue_key(state.type, key, state.created_at, state.id))]",
        "return []",
        "concurrency queue",
        "a queued run that ends keeps its queue entry",
    ),
    Mutation(
        "freed-slot-wakes-no-queue",
        "engine/runs/concurrency.py",
        'if record.get("queue"):\n            ops.append(arm_admit',
        "if False:\n            ops.append(arm_admit",
        "concurrency queue (crash)",
        "a freed slot arms no admit timer: a crash before the inline admission strands the queue",
    ),
    Mutation(
        "continue-drops-parent",
        "engine/runs/continuation.py",
        "        parent=state.parent,",
        "        parent=None,",
        "continue_as_new (child)",
        "a child that continues never reports to its parent",
    ),
    Mutation(
        "no-teardown",
        "engine/runs/finalizers.py",
        "    if status not in ENDS:",
        "    if True:",
        "finalizers (cancel)",
        "a cancelled run's finalizers never run",
    ),
    Mutation(
        "timeout-skips-finalizers",
        "engine/runs/finalizers.py",
        "ENDS = frozenset({CANCELLED, TIMED_OUT, FAILED})",
        "ENDS = frozenset({CANCELLED, FAILED})",
        "finalizers (time-out)",
        "a timed-out run's finalizers never run",
    ),
    Mutation(
        "teardown-never-taken-over",
        "engine/teardown.py",
        'if record.get("holder") is not None and now < record.get("until", 0.0):',
        'if record.get("holder") is not None:',
        "finalizers (crash mid-teardown)",
        "a teardown whose engine died is never finished",
    ),
    Mutation(
        "bulk-signal-without-id",
        "engine/bulk/operation.py",
        "signal_id = f\"bulk-{record['id']}\"",
        "signal_id = None",
        "bulk operations",
        "a page repeated after a crash signals its runs again",
    ),
    Mutation(
        "bulk-save-unconditioned",
        "engine/bulk/operation.py",
        "return record if write(rt, [Condition(key, current)], ops) else None",
        "return record if write(rt, [], ops) else None",
        "bulk operations (two workers)",
        "two workers both save a page and count its runs twice",
    ),
    Mutation(
        "upsert-skips-index",
        "engine/steps/upserts.py",
        "ops=[Put(key, new_bytes), *index_entries.index_ops(scope.rt.shard_layout, state, new)],",
        "ops=[Put(key, new_bytes)],",
        "search-attribute upserts",
        "list by an upserted attribute misses the run",
    ),
    Mutation(
        "first-tag-only",
        "engine/persistence/index_entries.py",
        "    for tag in tags:",
        "    for tag in tags[:1]:",
        "tag filters",
        "list by a run's second tag misses it",
    ),
    Mutation(
        "heartbeat-timeout-ignored",
        "engine/steps/attempt.py",
        "if hb is not None and (now - self.beat >= hb or real - self.beat_real >= hb):",
        "if False:",
        "heartbeats",
        "an attempt that stopped heartbeating is never given up",
    ),
    Mutation(
        "heartbeat-details-lost",
        "engine/steps/activities.py",
        "context.heartbeat_details = heartbeats.previous_details(scope.history, slot, attempts)",
        "context.heartbeat_details = None",
        "heartbeats",
        "a retried attempt is not handed its predecessor's progress",
    ),
    Mutation(
        "lease-unfenced",
        "engine/ownership/store_lease.py",
        "return [Condition(keys.meta_key(keys.LEASE_EPOCH), self.epoch_bytes)]",
        "return []",
        "store-wide lease",
        "an engine that lost the lease still writes",
    ),
    Mutation(
        "lease-renewal-unconditioned",
        "engine/ownership/store_lease.py",
        "if self.host.write([condition], [Put(key, new)]):",
        "if self.host.write([], [Put(key, new)]):",
        "store-wide lease renewal",
        "a deposed lease holder's renewal overwrites the new holder",
    ),
    Mutation(
        "parent-not-woken",
        "engine/runs/transitions.py",
        "        timers.arm(shards, timers.CHILD, parent_id, now, slot),",
        "",
        "children (two levels)",
        "a parent is not woken when its awaited child ends",
    ),
    Mutation(
        "update-unfenced",
        "engine/runs/updates.py",
        "commit(rt, ctx.workflow_id, [Condition(applied_key, None), Condition(response_key, None)],"
        " ops)",
        "rt.storage.batch(ops)",
        "updates racing cancels",
        "an update lands on a run cancelled (or taken over) since its drive read it",
    ),
    Mutation(
        "update-applied-twice",
        "engine/runs/updates.py",
        "commit(rt, ctx.workflow_id, [Condition(applied_key, None), Condition(response_key, None)],"
        " ops)",
        "commit(rt, ctx.workflow_id, [], ops)",
        "updates racing updates",
        "two engines apply updates at one place: the second replaces the first's applied record",
    ),
    Mutation(
        "continue-keeps-finalizers",
        "engine/runs/continuation.py",
        "        for position, _ in of_history(history)\n",
        "        for position, _ in of_history(history)\n        if False\n",
        "continue_as_new",
        "a continued run keeps the ended run's finalizer registrations",
    ),
    # -- timer hints and maintenance shares (ADR 0054, ADR 0055) ----------------------------
    Mutation(
        "hint-fires-before-due",
        "engine/timer_hints.py",
        "if hint.sort < keys.timer_due_bound(cutoff):",
        "if True:",
        "timer hints (early)",
        "a hint fires its timer without comparing the stored key's due time with the clock",
    ),
    Mutation(
        "hint-deletes-without-drive",
        "engine/timer_hints.py",
        "outcome = fire_run_timers(rt, dispatcher, workflow_id, timers, Budget())",
        'outcome = (rt.storage.delete_many([t[0] for t in timers]), "collect")[1]',
        "timer hints (firing)",
        "a hint deletes its timer and never drives the run",
    ),
    Mutation(
        "hint-resend-dropped",
        "engine/session.py",
        "if port is not None and report.resend:",
        "if False:",
        "timer hints (early delivery)",
        "a hint delivered before its timer is due is not sent again",
    ),
    Mutation(
        "sleep-ends-early",
        "engine/steps/waits.py",
        "    return keys.is_due(scope.rt.now(), due)",
        "    return keys.is_due(scope.rt.now() + 0.5, due)",
        "timers (early)",
        "a sleep (or a wait's timeout) ends half a second before it is due",
    ),
    Mutation(
        "retry-starts-early",
        "engine/steps/activities.py",
        "if attempts and not keys.is_due(now, attempts[-1].due or 0.0):",
        "if attempts and not keys.is_due(now + 0.5, attempts[-1].due or 0.0):",
        "retries (early)",
        "a retry's next attempt starts half a second before its backoff ends",
    ),
    Mutation(
        "share-leaves-a-shard",
        "storage/keys/shards.py",
        "return range(self.worker, count, self.workers)",
        "return range(self.worker, count - (self.workers > 1), self.workers)",
        "maintenance shares",
        "with several workers no share reads the last timer, claim and outbox shard",
    ),
)
"""The planted defects: the earlier audit's, the issue's, and one or more per feature."""
