"""Lambda entry point for the maintenance schedule: ``handlers.maintenance.handler``.

Set ``WEFT_MAINTENANCE_TICK_SECONDS`` to run a pass every few seconds inside one invocation
(second-level timer precision); unset, each scheduled event runs one pass.
"""

from weft_serverless.aws import make_maintenance_handler

handler = make_maintenance_handler()
