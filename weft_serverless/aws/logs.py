"""Structured JSON logs for the Lambda handlers, through one powertools ``Logger``.

The engine logs through the standard ``logging`` tree (``weft_serverless.*``); here that tree
is sent through the powertools handler, so engine and workflow lines come out as the same
JSON as the handler's own, carrying the keys the invocation scope appends (``workflow_id``,
``correlation_id``, the function's names). powertools is imported on first use only.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import IO, TYPE_CHECKING, cast

if TYPE_CHECKING:
    from aws_lambda_powertools import Logger

ENGINE_LOGGER = "weft_serverless"

_logger: Logger | None = None
_lock = threading.Lock()


class _CurrentStdout:
    """Writes to whatever ``sys.stdout`` is at the time of the write.

    powertools binds its stream when the Logger is built; Lambda never swaps stdout, but
    test capture (``capsys``) and local runners do, and lines must follow them.
    """

    def write(self, text: str) -> int:
        return sys.stdout.write(text)

    def flush(self) -> None:
        sys.stdout.flush()


def get_logger() -> Logger:
    """The process's powertools Logger (service from ``POWERTOOLS_SERVICE_NAME``).

    It also keeps the engine's ``weft_serverless`` loggers routed through it, at its level,
    without propagating to the root logger (which would print each line twice); the check
    is cheap, and it restores the routing if something reset the logging tree.
    """
    global _logger
    with _lock:
        if _logger is None:
            from aws_lambda_powertools import Logger

            _logger = Logger(stream=cast(IO[str], _CurrentStdout()))
        if logging.getLogger(ENGINE_LOGGER).handlers != [_logger.registered_handler]:
            route_engine_logs(_logger)
        return _logger


def route_engine_logs(logger: Logger) -> None:
    """Send the ``weft_serverless`` logging tree through ``logger``'s JSON handler.

    Each line then names its logger (``name``), so engine lines stand apart from the
    handler's own, as powertools' ``copy_config_to_registered_loggers`` does.
    """
    logger.append_keys(name="%(name)s")
    engine_logger = logging.getLogger(ENGINE_LOGGER)
    engine_logger.handlers = [logger.registered_handler]
    engine_logger.setLevel(logger.log_level)
    engine_logger.propagate = False
