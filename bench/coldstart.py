"""Import cost of the Lambda handlers, against ``import boto3``, each in a fresh process.

A Lambda cold start runs the handler module's imports before the first request, so their
cost is paid once per container. Prints a table; asserts nothing. Run from the repository
root::

    python bench/coldstart.py              # median of 7 fresh processes per row
    python bench/coldstart.py --runs 15

Each row starts a new interpreter, times the statement inside it with ``perf_counter``
(interpreter start-up excluded, so rows compare directly), and reports the median, min and
max over the runs. The handlers build their engine, and with it the boto3 DynamoDB client,
on the first invocation; the last row shows what that adds.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ROWS = (
    ("import weft_serverless", "import weft_serverless"),
    ("import boto3", "import boto3"),
    ("import handlers.api", "import handlers.api"),
    ("import handlers.maintenance", "import handlers.maintenance"),
    (
        "first invocation: boto3 + DynamoDB client",
        "import boto3; boto3.session.Session().client('dynamodb', region_name='us-east-1')",
    ),
)

PROBE = """
import time
started = time.perf_counter()
{statement}
print(time.perf_counter() - started)
"""


def measure(statement: str, runs: int) -> list[float]:
    """Milliseconds for ``statement`` in ``runs`` fresh interpreters."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PYTHONDONTWRITEBYTECODE": "1",
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
    }
    samples = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", PROBE.format(statement=statement)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        samples.append(float(out.strip()) * 1000)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="fresh processes per row")
    args = parser.parse_args()
    for _, statement in ROWS:  # warm the OS file cache, so run 1 is not a disk read
        measure(statement, 1)
    print(f"Python {platform.python_version()} on {platform.machine()}, {args.runs} runs each")
    print(f"{'what':<44} {'median ms':>10} {'min':>8} {'max':>8}")
    for label, statement in ROWS:
        samples = measure(statement, args.runs)
        print(
            f"{label:<44} {statistics.median(samples):>10.1f} "
            f"{min(samples):>8.1f} {max(samples):>8.1f}"
        )


if __name__ == "__main__":
    main()
