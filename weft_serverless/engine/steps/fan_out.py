"""A composite step and every composite nested in it, carried out as one fan-out.

Walking the tree first replays what is recorded and advances, in order, every branch that is
not an activity (waits, sleeps, children); then the activity branches of the whole tree run
together (``together``), each ``all`` bounding the attempts beneath it (its own
``max_concurrency``, within the engine's ``max_parallel_activities``). A branch of an ``all``
is recorded at its own sub-slot the moment it ends; a composite is decided by its branches
(an ``all`` once every branch has a value or one failed, a ``race`` by its first) and is then
recorded at its slot by its parent, or returned at the root, while the attempts still
running beneath it are given up. So a nested composite waits for nothing but its branches,
and replay reads each record whatever order the branches ended in.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from weft_serverless.codec import encode
from weft_serverless.commands import All, Command, Race, Run, Sleep
from weft_serverless.engine.persistence.outcomes import Done, Outcome, error_to_record
from weft_serverless.engine.persistence.stored_records import OpRecord
from weft_serverless.engine.steps.scope import StepScope
from weft_serverless.engine.steps.together import Branch, Group, run_together
from weft_serverless.storage import keys

Composite = All | Race


class Node(ABC):
    """One composite of the tree, at its slot; ``done`` once it is decided."""

    def __init__(self, tree: Tree, cmd: Composite, slot: str, parent: Node | None, index: int):
        self.tree, self.cmd, self.slot, self.parent, self.index = tree, cmd, slot, parent, index
        self.done: Done | None = None

    def settled(self) -> bool:
        """Decided, or beneath a composite that is: nothing of it need run any more."""
        node: Node | None = self
        while node is not None:
            if node.done is not None:
                return True
            node = node.parent
        return False

    def decide(self, done: Done) -> None:
        self.done = done
        if self.parent is not None:
            self.parent.branch_done(self.index, done)

    @abstractmethod
    def branch_done(self, index: int, done: Done) -> None:
        """A branch finished (nothing of it is recorded yet)."""

    @abstractmethod
    def replayed(self, index: int, outcome: Outcome) -> None:
        """A branch's recorded outcome."""

    @abstractmethod
    def walked(self) -> None:
        """Every branch was looked at once."""


class AllNode(Node):
    """``all``/``map``: each branch recorded at its sub-slot; failed at the first failure."""

    def __init__(self, tree: Tree, cmd: All, slot: str, parent: Node | None, index: int):
        super().__init__(tree, cmd, slot, parent, index)
        self.all = cmd
        self.outcomes: dict[int, Outcome] = {}
        bound = tree.scope.rt.parallel_activities
        mc = cmd.max_concurrency
        self.group = Group(bound if mc is None else min(mc, bound))
        self.whole = False

    def branch_done(self, index: int, done: Done) -> None:
        sub = keys.branch_slot(self.slot, index)
        self.tree.scope.commit_done(self.all.commands[index], sub, done)
        self.replayed(index, done.outcome)

    def replayed(self, index: int, outcome: Outcome) -> None:
        self.outcomes[index] = outcome
        if outcome.error is not None:
            err = error_to_record(outcome.error)
            self.decide(self.tree.scope.finish(self.slot, outcome, OpRecord(ok=False, error=err)))
        elif self.whole:
            self.walked()

    def walked(self) -> None:
        self.whole = True
        if self.done is None and len(self.outcomes) == len(self.all.commands):
            values = [self.outcomes[index].value for index in range(len(self.all.commands))]
            record = OpRecord(count=len(values))
            self.decide(self.tree.scope.finish(self.slot, Outcome(values), record))


class RaceNode(Node):
    """``race``: the first branch to finish wins; its index and value are the race's record."""

    def branch_done(self, index: int, done: Done) -> None:
        if done.outcome.error is not None:
            record = OpRecord(ok=False, index=index, error=error_to_record(done.outcome.error))
            outcome = done.outcome
        else:
            record = OpRecord.holding(encode(done.outcome.value), index=index)
            outcome = Outcome((index, done.outcome.value))
        extra = {
            "conditions": done.conditions,
            "ops": done.ops,
            "after_commit": done.after_commit,
            "cleanup": done.cleanup,
        }
        self.decide(self.tree.scope.finish(self.slot, outcome, record, **extra))

    def replayed(self, index: int, outcome: Outcome) -> None:
        """Never called: a race records no branch of its own, only the winner in its record."""

    def walked(self) -> None:
        """Nothing to do: a race is decided by its first branch, or waits."""


class Tree:
    """The composites of one step, the activity branches they hold and the race sleeps."""

    def __init__(self, scope: StepScope) -> None:
        self.scope = scope
        self.leaves: list[Branch] = []
        self.owners: list[tuple[Node, int]] = []
        self.sleeps: list[tuple[Node, int, str, float]] = []
        self.root: Node | None = None

    def carry_out(self, cmd: Composite, slot: str) -> Done | None:
        """The root's outcome once decided; None when it waits (its parts are committed)."""
        root = self.walk(cmd, slot, None, 0)
        if root.done is None and self.leaves:
            pool = root.group if isinstance(root, AllNode) else None
            run_together(self.scope, self.leaves, self.decide, pool, self.due, self.wake)
        if root.done is None and self.sleeps:
            self.wake()
        return root.done

    def walk(self, cmd: Composite, slot: str, parent: Node | None, index: int) -> Node:
        scope = self.scope
        node: Node = RaceNode(self, cmd, slot, parent, index)
        groups: tuple[Group, ...] = ()
        if isinstance(cmd, All):
            node = AllNode(self, cmd, slot, parent, index)
            groups = (node.group,)
        if parent is None:
            self.root = node
        ancestor = parent
        while ancestor is not None:
            if isinstance(ancestor, AllNode):
                groups += (ancestor.group,)
            ancestor = ancestor.parent
        for position, branch in enumerate(cmd.commands):
            if node.settled():
                return node
            sub = keys.branch_slot(slot, position)
            record = scope.history.ops.get(sub) if isinstance(node, AllNode) else None
            if record is not None:
                node.replayed(position, scope.replay(branch, sub, record))
            elif isinstance(branch, Run) and not scope.rt.inline_activities:
                self.owners.append((node, position))
                self.leaves.append(Branch(len(self.leaves), branch, sub, groups, node.settled))
            elif isinstance(branch, All | Race):
                scope.begin(branch, sub)
                self.walk(branch, sub, node, position)
            else:
                self.advance(node, position, branch, sub)
        node.walked()
        return node

    def advance(self, node: Node, index: int, branch: Command[Any], sub: str) -> None:
        scope = self.scope
        done = scope.advance(branch, sub)
        if done is not None:
            node.branch_done(index, done)
            return
        pending = scope.history.pending.get(sub)
        due = None if pending is None else pending.due
        if isinstance(node, RaceNode) and isinstance(branch, Sleep) and due is not None:
            self.sleeps.append((node, index, sub, float(due)))

    def decide(self, leaf: int, done: Done) -> bool:
        node, index = self.owners[leaf]
        node.branch_done(index, done)
        return self.root_done()

    def root_done(self) -> bool:
        return self.root is not None and self.root.done is not None

    def due(self) -> bool:
        """A sleep of an undecided race has fallen due."""
        now = self.scope.rt.now()
        return any(keys.is_due(now, at) and not node.settled() for node, _, _, at in self.sleeps)

    def wake(self) -> bool:
        """Let the races whose sleep fell due have it win; True when that decides the root."""
        now = self.scope.rt.now()
        for entry in list(self.sleeps):
            node, index, sub, at = entry
            if node.settled() or keys.is_due(now, at):
                self.sleeps.remove(entry)
            if not node.settled() and keys.is_due(now, at):
                done = self.scope.advance(node.cmd.commands[index], sub)
                if done is not None:
                    node.branch_done(index, done)
        return self.root_done()
