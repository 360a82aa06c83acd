"""``kernelsmith daemon status|start|stop``: the per-user evaluation daemon
that keeps a warm evaluator between ``kernelsmith eval`` calls (and the
Python API's ``kernelsmith.daemon.evaluate``). It starts by itself on first
use and stops after ``KERNELSMITH_DAEMON_IDLE`` seconds idle (default 600);
these commands look at it, start it ahead of use or stop it now."""

from __future__ import annotations

import argparse
import json
import time


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        choices=("status", "start", "stop"),
        help="status: the daemons of this user; start: the one for this environment, now; "
        "stop: every daemon of this user",
    )
    parser.add_argument(
        "--idle",
        type=float,
        default=None,
        metavar="SECONDS",
        help="start: stop after this long without a request (default: KERNELSMITH_DAEMON_IDLE, else 600)",
    )
    parser.add_argument("--json", action="store_true", help="status as JSON")


def _line(st: dict) -> str:
    pools = [f"{p['backend']}/{p['device'] or 'cpu'}" for ev in st.get("evaluators", []) for p in ev.get("pools", [])]
    up = time.time() - float(st.get("started", time.time()))
    return (
        f"daemon {st['pid']} (environment {st['key']}, build {st['build']}): up {up:.0f} s, "
        f"{st['served']} served, {st['failed']} failed, {st['in_flight']} in flight, idle {st['idle_for_s']:.0f} s "
        f"of {st['idle_s']:g} s; pools: {', '.join(pools) or 'none yet'}"
    )


def run(args: argparse.Namespace) -> int:
    from .. import daemon  # lazy: keeps 'kernelsmith --help' light (daemon is not loaded to build the parser)

    if args.action == "start":
        st = daemon.start(idle_s=args.idle)
        print(json.dumps(st, indent=2) if args.json else _line(st))
        return 0
    if args.action == "stop":
        stopped = [pid for paths in daemon.Paths.all() if (pid := daemon.stop(paths)) is not None]
        print(f"stopped daemon {', '.join(map(str, stopped))}" if stopped else "no daemon running")
        return 0
    current = daemon.Paths().key
    states = [st for paths in daemon.Paths.all() if (st := daemon.status(paths)) is not None]
    if args.json:
        print(
            json.dumps(
                {"environment": current, "dir": daemon.runtime_dir(), "build": daemon.build_id(), "daemons": states},
                indent=2,
            )
        )
        return 0
    if not states:
        print(f"no daemon running (folder {daemon.runtime_dir()})")
    for st in states:
        mark = " [this environment]" if st["key"] == current else ""
        print(_line(st) + mark)
    return 0
