"""The simulation's own proof: one-line defects, each of which the seeded schedules must find.

``python -m weft_serverless.testing.mutations`` copies the package to a temporary folder for
each entry of ``MUTATIONS``, applies that one change to the copy (the working tree is never
touched), and runs CI's seed ranges from seed 0 in a subprocess whose ``PYTHONPATH`` names
the copy, up to the first failing seed or the table's budget: 45 s of CPU for each planted
defect (``mutation_table``, the harness's proof), 300 s for each reverted fix
(``mutation_regressions``: rare races a soak found, each also pinned by a deterministic
test). It prints, per mutation,
whether it was found, the first failing seed, the seconds it took and the shrunk
``--replay`` line. A mutation not found within the budget is a hole in the harness: a
feature the workload does not reach, or an invariant that does not say what it should.

Each entry names a code site by an exact snippet that occurs once in its file (a test
checks that every snippet still does, so a refactor cannot disarm the table), the feature
it belongs to, and what the change breaks. The table samples the engine; the invariants,
not the table, are the point: a defect outside it must be found the same way.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from weft_serverless.testing.mutation_regressions import REGRESSIONS
from weft_serverless.testing.mutation_table import MUTATIONS as PLANTED
from weft_serverless.testing.mutation_table import Mutation

PACKAGE = Path(__file__).resolve().parent.parent
MUTATIONS: tuple[Mutation, ...] = (*PLANTED, *REGRESSIONS)
"""The whole table: the planted defects, then the reverted fixes."""
BUDGET = 45.0
"""Seconds of seeds (from seed 0, on one core) within which every planted mutation must be
found: counted in CPU time, so a busy machine does not shorten it."""
REGRESSIONS_BUDGET = 300.0
"""The same for the reverted fixes: races a soak found, some thousands of seeds deep."""


@dataclass(frozen=True)
class Result:
    """What one mutation's run found."""

    mutation: Mutation
    found: bool
    seed: int | None
    seconds: float
    invariant: str
    replay: str
    output: str


def snippet_count(mutation: Mutation, root: Path = PACKAGE) -> int:
    """How many times the mutation's snippet occurs in its file (it must be exactly once)."""
    return (root / mutation.path).read_text().count(mutation.original)


def mutated_copy(mutation: Mutation, folder: Path, source: Path = PACKAGE) -> Path:
    """The package (``source``) copied under ``folder`` with the mutation applied; returns
    the folder to put on ``PYTHONPATH``."""
    copy = folder / PACKAGE.name
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / mutation.path
    text = target.read_text()
    if text.count(mutation.original) != 1:
        raise ValueError(f"{mutation.name}: its snippet is not exactly once in {mutation.path}")
    target.write_text(text.replace(mutation.original, mutation.replacement))
    return folder


def run(
    mutation: Mutation,
    budget: float = BUDGET,
    shrink_budget: float = 60.0,
    source: Path = PACKAGE,
) -> Result:
    """Run CI's seed ranges against a mutated copy, up to the first failure or the budget."""
    with tempfile.TemporaryDirectory(prefix="weft-mutant-") as temp:
        folder = mutated_copy(mutation, Path(temp), source)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), *_pythonpath()])}
        command = [
            sys.executable,
            "-m",
            "weft_serverless.testing.simulate",
            "--ci",
            "--first-failure",
            "--cpu-time",
            "--time-limit",
            str(budget),
            "--shrink-budget",
            str(shrink_budget),
        ]
        began = time.monotonic()
        try:
            done = subprocess.run(
                command,
                cwd=folder,
                env=env,
                capture_output=True,
                text=True,
                timeout=6 * (budget + shrink_budget) + 120.0,  # a busy machine: wall time
                check=False,
            )
            output = done.stdout + done.stderr
        except subprocess.TimeoutExpired as exc:
            output = f"timed out after {time.monotonic() - began:.0f} s: {exc}"
    return _read(mutation, output, time.monotonic() - began)


def _pythonpath() -> list[str]:
    return [part for part in os.environ.get("PYTHONPATH", "").split(os.pathsep) if part]


FIRST = re.compile(r"first failure: seed (\d+) on \w+ after ([\d.]+) s")


def _read(mutation: Mutation, output: str, wall: float) -> Result:
    first = FIRST.search(output)
    replay = next((line.strip() for line in output.splitlines() if "reproduce:" in line), "")
    invariant = next((line.strip() for line in output.splitlines() if line.startswith("  [")), "")
    if first is None:
        return Result(mutation, False, None, wall, "", "", output)
    return Result(
        mutation,
        True,
        int(first.group(1)),
        float(first.group(2)),
        invariant,
        replay.removeprefix("reproduce: "),
        output,
    )


def report(result: Result) -> str:
    m = result.mutation
    if not result.found:
        return f"NOT FOUND  {m.name} ({m.feature}) in {result.seconds:.0f} s: {m.breaks}"
    return (
        f"found      {m.name} ({m.feature}): seed {result.seed} after {result.seconds:.1f} s\n"
        f"           {result.invariant[:160]}\n"
        f"           {result.replay}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m weft_serverless.testing.mutations", description=__doc__
    )
    parser.add_argument("--only", help="comma-separated mutation names")
    parser.add_argument(
        "--budget", type=float, default=BUDGET, help="CPU seconds of seeds for each planted one"
    )
    parser.add_argument(
        "--regressions-budget",
        type=float,
        default=REGRESSIONS_BUDGET,
        help="CPU seconds of seeds for each reverted fix",
    )
    parser.add_argument("--shrink-budget", type=float, default=60.0)
    parser.add_argument("--list", action="store_true", help="list the table and exit")
    parser.add_argument("--verbose", action="store_true", help="print each run's output")
    args = parser.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    tables = [
        ("planted", [m for m in PLANTED if only is None or m.name in only], args.budget),
        (
            "reverted fixes",
            [m for m in REGRESSIONS if only is None or m.name in only],
            args.regressions_budget,
        ),
    ]
    if args.list:
        for _, chosen, _ in tables:
            for m in chosen:
                print(f"{m.name:34} {m.feature:26} {m.path}: {m.breaks}")
        return 0
    missed = 0
    with tempfile.TemporaryDirectory(prefix="weft-pristine-") as temp:
        # One copy of the package as it is now: edits made while the loop runs reach no run.
        source = Path(temp) / PACKAGE.name
        shutil.copytree(PACKAGE, source, ignore=shutil.ignore_patterns("__pycache__"))
        for name, chosen, budget in tables:
            results = []
            for mutation in chosen:
                result = run(mutation, budget, args.shrink_budget, source)
                print(report(result), flush=True)
                if args.verbose:
                    print(result.output)
                results.append(result)
            if results:
                print(summary(name, results, budget), flush=True)
            missed += sum(not result.found for result in results)
    return 1 if missed else 0


def summary(name: str, results: list[Result], budget: float) -> str:
    found = [result for result in results if result.found]
    slowest = max((result.seconds for result in found), default=0.0)
    return (
        f"{name}: {len(found)} of {len(results)} found within {budget:.0f} s of CPU each; "
        f"the slowest after {slowest:.1f} s"
    )


if __name__ == "__main__":
    sys.exit(main())
