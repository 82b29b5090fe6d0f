#!/usr/bin/python3
"""The harness behind scripts/recovery.sh: one pipeline run, one outage after another.

    recovery.py BIN PORT LIMIT [SECONDS...]
"""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTAGES = [1, 2, 3, 5, 8, 13, 20, 30, 45, 60]

PIPELINE = """
[pipeline]
name = "recovery"

[sources.cam]
kind = "rtsp"
uri = "rtsp://127.0.0.1:{port}/cam"

[sinks.out]
kind = "ndjson"
inputs = ["cam"]
path = "{out}"
"""


def accepts(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


def start_camera(port):
    """The test camera; returns (process, when it accepted connections)."""
    p = subprocess.Popen(
        ["/usr/bin/python3", os.path.join(ROOT, "tests/support/rtsp_server.py"), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    until = time.monotonic() + 15
    while not accepts(port):
        if p.poll() is not None:
            sys.exit(f"error: the RTSP server exited at start ({p.returncode})")
        if time.monotonic() > until:
            sys.exit(f"error: the RTSP server is not ready on port {port} in 15 s")
        time.sleep(0.01)
    return p, time.monotonic()


def stop_camera(p):
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(5)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def lines(path):
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return []
    return [json.loads(l) for l in text[: text.rfind("\n") + 1].splitlines()]


def wait_for(what, limit, done, run, log):
    until = time.monotonic() + limit
    while True:
        ls = lines(run)
        if done(ls):
            return ls
        if time.monotonic() > until:
            sys.exit(f"error: no {what} within {limit} s; the log:\n{open(log).read()}")
        time.sleep(0.01)


def frames_after(ls, event, n):
    seen = 0
    for i, v in enumerate(ls):
        if v.get("event") == event:
            seen += 1
            if seen == n:
                return sum(1 for w in ls[i + 1 :] if "seq" in w)
    return 0


def main():
    bin_, port, limit = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    outages = [float(s) for s in sys.argv[4:]] or OUTAGES
    if accepts(port):
        sys.exit(f"error: port {port} is taken (set RECOVERY_PORT)")
    tmp = tempfile.mkdtemp(prefix="recovery.")
    out, log, toml = (os.path.join(tmp, n) for n in ("out.ndjson", "stderr", "p.toml"))
    with open(toml, "w") as f:
        f.write(PIPELINE.format(port=port, out=out))
    camera, _ = start_camera(port)
    run = subprocess.Popen([bin_, "run", toml], stdout=subprocess.DEVNULL, stderr=open(log, "w"), cwd=ROOT)
    results = []
    try:
        wait_for("frames", 30, lambda ls: sum("seq" in v for v in ls) >= 10, out, log)
        print(f"{'outage (s)':>10}  {'recovery (s)':>12}", flush=True)
        for n, secs in enumerate(outages, 1):
            stop_camera(camera)
            wait_for("lost event", 15, lambda ls: sum(v.get("event") == "lost" for v in ls) >= n, out, log)
            time.sleep(secs)
            camera, back = start_camera(port)
            wait_for("frame after the camera's return", 60, lambda ls: frames_after(ls, "reconnected", n) >= 1, out, log)
            took = time.monotonic() - back
            results.append((secs, took))
            print(f"{secs:>10g}  {took:>12.3f}", flush=True)
            # Stream a while before the next outage.
            wait_for("frames after the return", 15, lambda ls: frames_after(ls, "reconnected", n) >= 30, out, log)
    finally:
        run.send_signal(signal.SIGINT)
        try:
            run.wait(15)
        except subprocess.TimeoutExpired:
            run.kill()
        stop_camera(camera)
    secs, worst = max(results, key=lambda r: r[1])
    print(f"worst: {worst:.3f} s (after the {secs:g} s outage); limit {limit:g} s")
    if worst > limit:
        print(f"error: recovery took {worst:.3f} s, over {limit:g} s; the log is {log}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
