"""Every example workflow in one registry, for ``weft dev`` and the Lambda handlers.

``WEFT_WORKFLOWS_MODULE=examples.workflows`` (the ``weft dev`` default) points the handlers
at this module: they read its ``workflows`` dict. ``SAMPLES`` holds one ready input per
example type; ``weft dev`` prints a curl line built from the first one.

=============  ===================================================================
type           what it shows
=============  ===================================================================
order_saga     saga with compensations in reverse order (examples/order_saga.py)
approval       signals raced against a timer, escalation, query, update
batch          fan-out to child workflows, fan-in report (with ``batch_chunk``)
reminder       a durable timer until a due time, repeats until acknowledged
order          the five-step order of ``weft demo`` (examples/order.py)
scheduled_     a nightly cron schedule in a time zone (examples/scheduled_report.py)
report
=============  ===================================================================
"""

from __future__ import annotations

from typing import Any

from examples import approval, batch, order, order_saga, reminder, scheduled_report
from weft_serverless import WorkflowDefinition

workflows: dict[str, WorkflowDefinition] = {
    **order_saga.workflows,
    **approval.workflows,
    **batch.workflows,
    **reminder.workflows,
    **order.workflows,
    **scheduled_report.workflows,
}

SAMPLES: dict[str, Any] = {
    "order_saga": order_saga.SAMPLE_INPUT,
    "approval": approval.SAMPLE_INPUT,
    "batch": batch.SAMPLE_INPUT,
    "reminder": reminder.SAMPLE_INPUT,
    "order": order.SAMPLE_ORDER,
    "scheduled_report": scheduled_report.SAMPLE_INPUT,
}
