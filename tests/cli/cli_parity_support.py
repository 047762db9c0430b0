"""What the CLI parity tests share: running ``weft`` in-process, a filled SQLite store, and
reading back what a command stored and what the API answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from examples import approval, order, order_saga
from examples.workflows import workflows
from weft_serverless import Engine, SQLiteStorage
from weft_serverless.aws.calls import call
from weft_serverless.cli import main
from weft_serverless.cli_commands.target import reader_engine
from weft_serverless.storage import keys

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = ("--workflows", "examples.workflows")


def weft(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A parked approval (exp-7), a completed saga (saga-ok), a failed order (order-declined)."""
    path = tmp_path / "weft.db"
    storage = SQLiteStorage(path)
    with Engine.create(storage, workflows, background_tasks="manual") as engine:
        engine.start("approval", approval.SAMPLE_INPUT, id="exp-7")
        engine.start("order_saga", order_saga.SAMPLE_INPUT, id="saga-ok")
        declined = {**order.SAMPLE_ORDER, "order_id": "A-2", "card_last4": "0000"}
        engine.start("order", declined, id="order-declined")
    storage.close()
    return path


def stored(path: Path, workflow_id: str) -> dict[str, Any]:
    """Every record of a run, to prove a command wrote nothing."""
    storage = SQLiteStorage(path)
    try:
        return dict(storage.scan(keys.workflow_partition(workflow_id)))
    finally:
        storage.close()


def api(path: Path, operation: str, **params: str) -> Any:
    """What the API answers for a read, through the one path every front end uses."""
    storage = SQLiteStorage(path)
    engine = reader_engine(storage, "test-reader")
    try:
        return call(engine, operation, params=params)[1]
    finally:
        engine.close()
        storage.close()
