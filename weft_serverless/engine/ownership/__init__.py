"""Ownership modes: who may write a workflow, and the fence that enforces it.

``base`` holds the interface (mode ``none``) and what every mode shares; ``store_lease`` is
mode ``lease``; ``claims``, ``takeover`` and ``workflow_lease`` build mode ``workflow-lease``.
Nothing outside this package tests which mode is in use: it asks the mode what it needs.
"""

from __future__ import annotations

from collections.abc import Callable

from weft_serverless.engine.ownership.base import (
    HEAD_LAYOUT,
    HOLDER_LAYOUT,
    PARK_LAYOUT,
    Drive,
    EngineDeposedError,
    Fragment,
    Mode,
    OwnerHost,
    Ownership,
    ReadOnly,
    Timing,
    Verdict,
    merge_conditions,
    pack_epoch,
    unpack_epoch,
)
from weft_serverless.engine.ownership.store_lease import EngineLeaseLost, StoreLease
from weft_serverless.engine.ownership.workflow_lease import WorkflowLease

__all__ = [
    "HEAD_LAYOUT",
    "HOLDER_LAYOUT",
    "PARK_LAYOUT",
    "Drive",
    "EngineDeposedError",
    "EngineLeaseLost",
    "Fragment",
    "Mode",
    "OwnerHost",
    "Ownership",
    "ReadOnly",
    "StoreLease",
    "Timing",
    "Verdict",
    "WorkflowLease",
    "merge_conditions",
    "mode_factory",
    "pack_epoch",
    "unpack_epoch",
]


def mode_factory(
    mode: Mode, lease: Timing, claim: Timing, lease_wait_timeout: float
) -> Callable[[OwnerHost], Ownership]:
    """What builds the ownership of ``mode`` once its host exists."""
    if mode == "lease":
        return lambda host: StoreLease(host, lease, lease_wait_timeout)
    if mode == "workflow-lease":
        return lambda host: WorkflowLease(host, claim)
    return Ownership
