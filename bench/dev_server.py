"""``weft dev`` over a long session: resident memory per start of a large input, and SIGTERM.

Starts ``weft dev`` as a user does (a subprocess on a free port) with a one-activity workflow,
sends ``--starts`` starts of ``--input-kb`` KB inputs over HTTP, and prints the process's
resident set (``/proc/PID/status``, Linux) every ``--every`` starts, the growth per start,
the time the starts took, and how long ``weft dev`` took to exit after SIGTERM (ADR 0045).

    python bench/dev_server.py                      # 80 starts of 200 KB
    python bench/dev_server.py --starts 200 --every 50
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

FLOWS = """
from weft_serverless import workflow


def measure(value):
    return len(value)


def sized(ctx, value):
    return (yield ctx.run("measure", value))


workflows = {"sized": workflow("sized").activities(measure=measure).execute(sized)}
"""
URL = re.compile(r"weft dev listening on (http://\S+)")


def resident_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS line")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=80)
    parser.add_argument("--every", type=int, default=20)
    parser.add_argument("--input-kb", type=int, default=200)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="weft-dev-bench-"))
    (folder / "bench_flows.py").write_text(FLOWS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEFT_")}
    command = ["dev", "--port", "0", "--workflows", "bench_flows"]
    process = subprocess.Popen(
        [sys.executable, "-m", "weft_serverless.cli", *command],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    base = ""
    for line in process.stdout:
        found = URL.search(line)
        if found:
            base = found[1]
            break
    stdout = process.stdout
    threading.Thread(target=lambda: [None for _ in stdout], daemon=True).start()
    value = "x" * (args.input_kb * 1000)
    time.sleep(1)
    first = resident_mib(process.pid)
    began = time.monotonic()
    print(f"weft dev up: {first:.0f} MiB resident")
    print(f"{'starts':>7}  {'resident MiB':>12}  {'growth MiB':>10}  {'MiB/start':>9}  {'s':>6}")
    for index in range(args.starts):
        body = json.dumps({"workflow_type": "sized", "id": f"b{index}", "input": value}).encode()
        request = urllib.request.Request(
            f"{base}/workflows", body, {"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=120) as answer:
            answer.read()
        if (index + 1) % args.every == 0 or index + 1 == args.starts:
            now = resident_mib(process.pid)
            print(
                f"{index + 1:>7}  {now:>12.0f}  {now - first:>10.0f}  "
                f"{(now - first) / (index + 1):>9.2f}  {time.monotonic() - began:>6.1f}"
            )
    stopping = time.monotonic()
    process.send_signal(signal.SIGTERM)
    status = process.wait(timeout=300)
    print(f"SIGTERM to exit: {time.monotonic() - stopping:.1f} s (status {status})")


if __name__ == "__main__":
    main()
