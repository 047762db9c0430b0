"""The ``weft`` command line.

Each subcommand is one ``_add_<name>`` function that declares its arguments and binds a
handler ``(args) -> exit status``. Handlers import what they use when they run, so
``weft --help`` stays fast and no subcommand pays for another's imports. The operator
commands (``list``, ``show``, ``signal``, ``start``, ``query``, ... one per API route, see
``cli_commands.calling.COMMANDS``) and ``dev`` live in ``weft_serverless.cli_commands``;
``demo`` is here.

Exit status: 0 success, 1 an error (message on stderr), 2 a usage error (including any
input the HTTP API would refuse with a 400, such as an argument the engine refuses with
``InvalidArgumentError``: on a command line that is the user's option), 141 when the reader
of stdout went away (``weft list | head``), as for any Unix tool killed by SIGPIPE.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from weft_serverless import TimelineStep
    from weft_serverless.storage.base import Storage
    from weft_serverless.workflow import WorkflowDefinition

Handler = Callable[[argparse.Namespace], int]

# The crash phase dies with this status, so the demo can tell the planned crash from a bug.
_CRASH_EXIT = 17
_CRASH_ACTIVITY = "ship_order"
_CRASH_PHASE = "run-until-crash"
SIGPIPE_EXIT = 141
"""128 + SIGPIPE: what a shell reports for a tool whose reader closed the pipe."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``weft`` with ``argv`` (default: the process arguments); return the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    from weft_serverless.aws.responses import ApiError, error_of
    from weft_serverless.cli_commands.target import UsageError
    from weft_serverless.errors import WeftError

    try:
        status = handler(args)
        sys.stdout.flush()  # a closed pipe shows up here, not at interpreter exit
        return status
    except BrokenPipeError:
        return _stdout_closed()
    except UsageError as exc:
        print(f"weft: {exc}", file=sys.stderr)
        return 2
    except (ApiError, WeftError) as exc:
        # What the API would refuse with a 400 (a bad field, an unknown type or query) is
        # the user's input: a usage error. Anything else is an error.
        message = exc.message if isinstance(exc, ApiError) else str(exc)
        print(f"weft: {exc.code}: {message}", file=sys.stderr)
        return 2 if error_of(exc).status == 400 else 1
    except KeyboardInterrupt:
        return 130


def _stdout_closed() -> int:
    """The reader left (``| head``): stop quietly, as a tool killed by SIGPIPE would.

    stdout is pointed at /dev/null so the interpreter's final flush of what is still buffered
    cannot raise again on the way out.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real file descriptor (captured output)
        pass
    return SIGPIPE_EXIT


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="weft", description="Durable Python workflows on DynamoDB or an embedded SQLite file."
    )
    subcommands = parser.add_subparsers(title="commands", metavar="COMMAND")
    _add_demo(subcommands)
    _add_dev(subcommands)
    _add_operator(subcommands)
    _add_schedules(subcommands)
    _add_bulk(subcommands)
    _add_console(subcommands)
    _add_shards(subcommands)
    return parser


def _add_dev(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from weft_serverless.cli_commands import dev

    dev.add(subcommands)


def _add_operator(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from weft_serverless.cli_commands import control, events, interact, operator

    operator.add(subcommands)
    events.add(subcommands)
    control.add(subcommands)
    interact.add(subcommands)


def _add_schedules(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from weft_serverless.cli_commands import schedules

    schedules.add(subcommands)


def _add_bulk(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from weft_serverless.cli_commands import bulk

    bulk.add(subcommands)


def _add_shards(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from weft_serverless.cli_commands import shards

    shards.add(subcommands)


def _add_console(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from weft_serverless.cli_commands import console

    console.add(subcommands)


# -- weft demo ---------------------------------------------------------------------------------


def _add_demo(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = subcommands.add_parser(
        "demo",
        help="watch a workflow survive a real process crash",
        description=(
            "Run the example order workflow on SQLite, kill the process half-way (a real "
            "os._exit, not an exception), restart on the same file, and show which steps were "
            "replayed from the file and which ran."
        ),
    )
    demo.add_argument("--db", default="weft.db", help="SQLite file to use (default: weft.db)")
    demo.add_argument("--fresh", action="store_true", help="delete the file first")
    # The first phase runs in a child process started by the demo itself.
    demo.add_argument("--phase", choices=[_CRASH_PHASE], help=argparse.SUPPRESS)
    demo.add_argument("--id", help=argparse.SUPPRESS)
    demo.set_defaults(handler=_cmd_demo)


def _cmd_demo(args: argparse.Namespace) -> int:
    """Run the demo, or, in the child process the demo starts, its first phase."""
    if args.phase == _CRASH_PHASE:
        return _demo_crash_phase(str(args.db), str(args.id))
    return _demo(Path(args.db), fresh=bool(args.fresh))


def _demo(db: Path, *, fresh: bool) -> int:
    """Phase 1 in a child process that dies; phase 2 here, as a fresh engine on the same file."""
    from weft_serverless import Engine, SQLiteStorage

    began = time.monotonic()
    if fresh:
        for path in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
            path.unlink(missing_ok=True)
    example = _order_example()
    workflow_id = f"order-{uuid.uuid4().hex[:6]}"
    print(f"weft demo: workflow {workflow_id} (examples/order.py) on SQLite file {db}")
    print("Five durable steps. Process 1 runs them and is killed half-way; process 2 opens")
    print("the same file and finishes the run.\n")
    sys.stdout.flush()
    phase_one = [sys.executable, "-m", "weft_serverless.cli", "demo", "--phase", _CRASH_PHASE]
    phase_one += ["--db", str(db.resolve()), "--id", workflow_id]
    child = subprocess.run(phase_one, capture_output=True, text=True, timeout=120)
    sys.stdout.write(child.stdout)
    if child.returncode != _CRASH_EXIT:
        print(
            f"weft demo: the first process exited {child.returncode}, not with the planned "
            f"crash ({_CRASH_EXIT}); its error output follows.\n{child.stderr}",
            file=sys.stderr,
        )
        return 1

    storage = SQLiteStorage(db)
    try:
        before, status = _committed_steps(storage, workflow_id)
        print(f"  (process 1 exited {child.returncode}; {db} holds {len(before)} committed steps,")
        print(f"  and the run is still {status!r})\n")
        print(f"Process 2 (pid {os.getpid()}) opens {db}: Engine.create(..., recover=True)")
        calls: list[str] = []
        definition = example.workflows["order"]
        with Engine.create(
            storage,
            example.workflows,
            background_tasks="manual",
            recover=True,
            activities=_counting(definition, calls),
        ) as engine:
            result = engine.get_handle(workflow_id).result()
        after, _ = _committed_steps(storage, workflow_id)
    finally:
        storage.close()
    _print_timeline(workflow_id, before, after)
    print(f"\nResult: {result}\n")
    _print_lesson(db, before, calls)
    print(
        f"Done in {time.monotonic() - began:.1f} s. Run it again for a new order on the same file."
    )
    return 0


def _demo_crash_phase(db: str, workflow_id: str) -> int:
    """Start the order, deliver the signal, and die inside the fourth step's activity."""
    from weft_serverless import Engine, SQLiteStorage

    example = _order_example()
    pid = os.getpid()

    def die(request: Any) -> Any:
        print(f"  !! {_CRASH_ACTIVITY} starts; process 1 is killed (os._exit) before it returns")
        sys.stdout.flush()
        os._exit(_CRASH_EXIT)

    # recover=False: this process only starts the new run; it must not drive older leftovers.
    engine = Engine.create(
        SQLiteStorage(db),
        example.workflows,
        background_tasks="manual",
        recover=False,
        activities={_CRASH_ACTIVITY: die},
    )
    print(f"Process 1 (pid {pid}) starts {workflow_id}")
    handle = engine.start("order", example.SAMPLE_ORDER, id=workflow_id)
    status = handle.describe().status
    print(f"  ... parked (status {status!r}) until the {example.SHIP_SIGNAL!r} signal arrives")
    print(f"  ... the warehouse signals {example.SHIP_SIGNAL!r} with carrier 'express'")
    handle.signal(example.SHIP_SIGNAL, {"carrier": "express"})
    print("the planned crash did not happen", file=sys.stderr)
    return 1


def _order_example() -> ModuleType:
    """``examples/order.py``: from the source tree beside this package, else by import.

    The path comes first so that an unrelated ``examples`` package in the current directory
    cannot stand in for it.
    """
    import importlib
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "examples" / "order.py"
    for loaded in ("_weft_demo_order", "examples.order"):
        if loaded in sys.modules:
            return sys.modules[loaded]
    if path.is_file():
        spec = importlib.util.spec_from_file_location("_weft_demo_order", path)
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
            return module
    try:
        return importlib.import_module("examples.order")
    except ImportError:
        from weft_serverless.errors import ConfigurationError

        raise ConfigurationError(
            "weft demo needs examples/order.py, which ships in the source tree, not the wheel; "
            "run it from a checkout of weft-serverless"
        ) from None


def _counting(definition: WorkflowDefinition, calls: list[str]) -> dict[str, Callable[..., Any]]:
    """Activity overrides that record each call, so the demo shows what really ran."""

    def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            calls.append(name)
            return fn(*args)

        return call

    return {name: wrap(name, activity.fn) for name, activity in definition.activities.items()}


def _committed_steps(storage: Storage, workflow_id: str) -> tuple[dict[int, TimelineStep], str]:
    """The committed top-level steps of a workflow by 0-based index, and its status."""
    from weft_serverless import read_history

    history = read_history(storage, workflow_id)
    if history is None:
        return {}, "missing"
    # Branches of all() and race() sit under their parent's slot; only top-level steps count.
    steps = {step.index: step for step in history.steps if step.committed and not step.branch}
    return steps, history.status


def _print_timeline(
    workflow_id: str, before: dict[int, TimelineStep], after: dict[int, TimelineStep]
) -> None:
    print(f"\nTimeline of {workflow_id}: each step once, as process 2 saw it")
    print(f"  {'step':<5} {'operation':<23} {'status':<9} {'attempt':<8} note")
    for index in sorted(after):
        step = after[index]
        signature = step.operation
        status = "replayed" if index in before else "ran"
        attempt = "-" if step.attempts is None else str(step.attempts)
        if status == "replayed":
            note = "committed by process 1, answered from the file"
        elif signature == f"run:{_CRASH_ACTIVITY}":
            note = "process 1 died inside it, before its commit"
        else:
            note = ""
        print(f"  {index + 1:<5} {signature:<23} {status:<9} {attempt:<8} {note}".rstrip())


def _print_lesson(db: Path, before: dict[int, TimelineStep], calls: list[str]) -> None:
    """Say what the run proved, from what process 2 actually called, not from expectations."""
    replayed = [s.operation[4:] for s in before.values() if s.operation.startswith("run:")]
    skipped = [name for name in replayed if name not in calls]
    print(f"Process 2 called only: {', '.join(calls) or 'nothing'}.")
    if skipped:
        print(f"Not called again, answered from {db}: {', '.join(skipped)}.")
    print(f"{_CRASH_ACTIVITY} started twice: an activity whose process dies before its step")
    print("commits runs again (at least once), so activities must be idempotent; each step")
    print("commits exactly once.")


if __name__ == "__main__":
    raise SystemExit(main())
