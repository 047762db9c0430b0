"""Lambda entry point for the timer hint queue: ``handlers.timers.handler``.

An SQS event source mapping (``ReportBatchItemFailures``) delivers hints of timers falling
due; each is fired at once from its stored timer record (ADR 0054).
"""

from weft_serverless.aws import make_timer_hint_handler

handler = make_timer_hint_handler()
