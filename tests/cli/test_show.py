"""``weft show`` reads runs right: settled branches, cancelled waits, steps that never ran,
retrying activities, the input and the failed-attempt history, in text and ``--json`` alike.

Each run is made by an application engine on a SQLite file; the CLI reads that file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from weft_serverless import Engine, RetryPolicy, SQLiteStorage, current_activity, workflow
from weft_serverless.cli import main
from weft_serverless.testing import CrashingStorage, SimulatedCrash


class CardDown(Exception):
    pass


def _quick(value: Any) -> Any:
    return value


def _down(_: Any) -> Any:
    raise CardDown("card service down")


_flaky_calls: list[int] = []


def _flaky(_: Any) -> Any:
    _flaky_calls.append(1)
    if len(_flaky_calls) <= 2:
        raise CardDown(f"timeout #{len(_flaky_calls)}")
    return "paid"


PROGRESS = {"page": 3, "cursor": "c" * 60, "seen": ["order-1", "order-2", "order-3"]}


def _beating(_: Any) -> Any:
    current_activity().heartbeat(PROGRESS)
    raise CardDown("card service down")


def _beater(ctx: Any, _: Any) -> Any:
    return (yield ctx.run("beating", retry=RetryPolicy(max_attempts=3, initial_backoff=3600)))


def _racer(ctx: Any, _: Any) -> Any:
    return (yield ctx.race(ctx.sleep("1h"), ctx.wait_for_signal("go")))


def _napper(ctx: Any, _: Any) -> Any:
    yield ctx.sleep("1h")


def _retrier(ctx: Any, order: Any) -> Any:
    return (yield ctx.run("down", order, retry=RetryPolicy(max_attempts=5, initial_backoff=3600)))


def _recovered(ctx: Any, order: Any) -> Any:
    policy = RetryPolicy(max_attempts=5, initial_backoff=0)
    return (yield ctx.run("flaky", order, retry=policy))


def _one_step(ctx: Any, order: Any) -> Any:
    return (yield ctx.run("quick", order))


def _chained(ctx: Any, rounds: int) -> Any:
    yield ctx.run("quick", rounds)
    if rounds > 1:
        yield ctx.continue_as_new(rounds - 1)
    return (yield ctx.wait_for_signal("go"))


def _guarded(ctx: Any, order: Any) -> Any:
    ctx.on_cancel("quick", "released", retry=RetryPolicy(max_attempts=2))
    ctx.on_cancel("down", order, retry=RetryPolicy(max_attempts=2, initial_backoff=3600))
    yield ctx.sleep("1h")


FLOWS = {
    "guarded": workflow("guarded").activities(quick=_quick, down=_down).execute(_guarded),
    "chained": workflow("chained").activities(quick=_quick).execute(_chained),
    "racer": workflow("racer").execute(_racer),
    "napper": workflow("napper").execute(_napper),
    "retrier": workflow("retrier").activities(down=_down).execute(_retrier),
    "recovered": workflow("recovered").activities(flaky=_flaky).execute(_recovered),
    "one_step": workflow("one_step").activities(quick=_quick).execute(_one_step),
    "beater": workflow("beater").activities(beating=_beating).execute(_beater),
}


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("show") / "weft.db"
    with Engine.create(SQLiteStorage(path), FLOWS, background_tasks="manual") as engine:
        engine.start("chained", 3, id="chained")
        engine.start("racer", None, id="race-won")
        engine.signal("race-won", "go", "now")
        engine.start("napper", None, id="nap-cancelled")
        engine.cancel("nap-cancelled")
        engine.start("guarded", {"order": 6}, id="torn-down")
        engine.cancel("torn-down")  # its last-registered finalizer fails: a retry in 1 h
        engine.start("retrier", {"order": 7}, id="retrying")
        _flaky_calls.clear()
        engine.start("recovered", {"order": 8}, id="recovered")
        engine.start("beater", None, id="beating")
    # A start whose engine died right after storing the run: its first step never ran.
    crashing = CrashingStorage(SQLiteStorage(path), crash_after_write=1)
    with pytest.raises(SimulatedCrash):
        Engine.create(crashing, FLOWS, background_tasks="manual").start(
            "one_step", {"order": 9}, id="never-ran"
        )
    return path


def show(capsys: pytest.CaptureFixture[str], db: Path, workflow_id: str) -> tuple[str, Any]:
    """(text, parsed --json) of ``weft show``."""
    capsys.readouterr()
    assert main(["show", workflow_id, "--db", str(db)]) == 0
    text = capsys.readouterr().out
    assert main(["show", workflow_id, "--db", str(db), "--json"]) == 0
    return text, json.loads(capsys.readouterr().out)


def rows(text: str) -> list[str]:
    lines = text[text.index("STEP") :].splitlines()[1:]
    return lines[: lines.index("")] if "" in lines else lines


def test_a_continued_run_shows_its_run_number_and_only_its_own_steps(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    """Run 3 of a chain: steps 1 and 2 belonged to runs 1 and 2 (continuing takes no step) and
    are gone; run 3's activity is step 3 and its wait, step 4, is where it is parked."""
    text, shown = show(capsys, db, "chained")
    assert re.search(r"^run +3$", text, re.MULTILINE)
    assert shown["run"] == 3
    assert [(s["step"], s["status"]) for s in shown["steps"]] == [
        ("3", "ok"),
        ("4", "waiting"),
    ]


def test_a_completed_race_shows_its_losing_branch_as_lost(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    text, shown = show(capsys, db, "race-won")
    assert shown["status"] == "completed"
    losing = [line for line in rows(text) if "(branch 1)" in line]
    assert losing and "lost" in losing[0].split() and "waiting" not in text and "(in " not in text
    branch = next(s for s in shown["steps"] if s["step"] == "1 (branch 1)")
    assert (branch["status"], branch["due_at"], branch["detail"]) == ("lost", None, "branch 2 won")


def test_a_cancelled_run_shows_its_sleep_as_cancelled_not_due(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    text, shown = show(capsys, db, "nap-cancelled")
    assert re.search(r"^status +cancelled$", text, re.MULTILINE)
    assert "waiting" not in text and "due in" not in text and "(in " not in text
    [step] = shown["steps"]
    assert (step["operation"], step["status"], step["due_at"]) == ("sleep", "cancelled", None)


def test_a_step_that_never_ran_is_not_called_a_signal_wait(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    text, shown = show(capsys, db, "never-ran")
    assert "waits for a signal, update or child" not in text
    [step] = shown["steps"]
    assert step["status"] == "waiting" and "not started" in step["detail"]
    assert "activity not run yet" in step["detail"]


def test_a_retrying_step_names_its_activity_with_a_consistent_attempt_count(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    text, shown = show(capsys, db, "retrying")
    [row] = rows(text)
    assert row.split()[:4] == ["1", "run:down", "retrying", "1"]
    assert "attempt 1 failed: CardDown: card service down" in row
    [step] = shown["steps"]
    assert (step["operation"], step["status"], step["attempts"]) == ("run:down", "retrying", 1)
    assert step["detail"].startswith("attempt 1 failed") and "attempt 2 is due" in step["detail"]


def test_show_prints_the_input(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    text, shown = show(capsys, db, "retrying")
    assert re.search(r'^input +\{"order": 7\}$', text, re.MULTILINE)
    assert shown["input"] == {"order": 7}


def test_failed_attempts_of_a_step_that_succeeded_are_shown(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    text, shown = show(capsys, db, "recovered")
    assert shown["status"] == "completed"
    [step] = shown["steps"]
    assert (step["status"], step["attempts"]) == ("ok", 3)
    assert [(f["attempt"], f["error_type"], f["message"]) for f in shown["failed_attempts"]] == [
        (1, "CardDown", "timeout #1"),
        (2, "CardDown", "timeout #2"),
    ]
    table = text[text.index("failed attempts") :].splitlines()
    assert table[1].split()[:4] == ["STEP", "ACTIVITY", "ATTEMPT", "FAILED"]
    assert table[2].split()[:3] == ["1", "flaky", "1"] and "CardDown: timeout #1" in table[2]
    assert table[3].split()[:3] == ["1", "flaky", "2"] and "CardDown: timeout #2" in table[3]


def test_a_cancelled_run_shows_its_teardown(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    """Finalizers in the order they run, each with its state, attempts and last error."""
    text, shown = show(capsys, db, "torn-down")
    assert "teardown after cancelled: pending" in text
    table = text[text.index("teardown after") :].splitlines()
    assert table[1].split() == ["FINALIZER", "STATE", "ATTEMPTS", "LAST", "ERROR"]
    assert table[2].split()[:4] == ["2", "down", "pending", "1"]
    assert "CardDown: card service down" in table[2]
    assert table[3].split() == ["1", "quick", "pending", "0", "-"]
    teardown = shown["teardown"]
    assert (teardown["status"], teardown["reason"]) == ("pending", "cancelled")
    assert [(f["activity"], f["state"], f["attempts"]) for f in teardown["finalizers"]] == [
        ("down", "pending", 1),
        ("quick", "pending", 0),
    ]


def test_a_step_shows_its_heartbeat_details_whole(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    """The DETAIL cell (the last column, so nothing after it needs aligning) is printed whole:
    a retry's error and the attempt's heartbeat details, as ``--json`` gives them."""
    text, shown = show(capsys, db, "beating")
    [step] = shown["steps"]
    assert step["heartbeat"]["details"] == PROGRESS
    assert step["detail"].endswith(f"heartbeat of attempt 1: {PROGRESS!r}")
    [row] = rows(text)
    assert row.endswith(step["detail"])
