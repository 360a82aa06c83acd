"""kernelsmith serve: an HTTP evaluation and reward service for RL trainers."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from . import add_isolation_argument


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; 0.0.0.0 for all)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="CPU evaluation slots when no CUDA device is visible (default 1); "
        "with CUDA devices there is one slot per device",
    )
    parser.add_argument("--devices", help="comma-separated CUDA device ids (default: all visible)")
    parser.add_argument(
        "--queue-size",
        type=int,
        default=64,
        help="evaluations allowed to wait (default 64); a request that finds it full waits for room",
    )
    parser.add_argument(
        "--admission-wait",
        type=float,
        default=None,
        metavar="SECONDS",
        help="how long a request waits for room in a full queue before a 503 (default 150, below "
        "OpenRLHF's 180 s request timeout)",
    )
    parser.add_argument(
        "--max-request-mb", type=float, default=8.0, help="largest request body (default 8 MiB); more: 413"
    )
    parser.add_argument(
        "--token-env",
        default="KERNELSMITH_SERVER_TOKEN",
        help="environment variable holding the bearer token clients must send "
        "(default KERNELSMITH_SERVER_TOKEN; unset = no token, loopback only); "
        "clients send it as 'Authorization: Bearer TOKEN' or as ?token=TOKEN in the URL",
    )
    parser.add_argument(
        "--allow-no-token",
        action="store_true",
        help="serve without a token on a non-loopback --host (a trusted network only)",
    )
    parser.add_argument("--task", action="append", default=[], metavar="PATH", help="register a task (repeatable)")
    parser.add_argument(
        "--tasks-from",
        action="append",
        default=[],
        metavar="RUN_DIR",
        help="register the task of a run directory (repeatable)",
    )
    parser.add_argument(
        "--allow-task-paths", action="store_true", help="let clients name task paths on this machine (off by default)"
    )
    parser.add_argument("--reward-config", help="YAML with RewardConfig fields (shaping, clip, penalties)")
    parser.add_argument("--trials", type=int, help="correctness trials per candidate (default: the task's)")
    parser.add_argument("--timeout", type=float, help="wall-clock limit per candidate, seconds (default: the task's)")

    add_isolation_argument(parser)


def run(args: argparse.Namespace) -> int:
    # lazy: keeps 'kernelsmith --help' light (config is not loaded to build the parser)
    from ..config import ConfigError, load_yaml

    # lazy: keeps 'kernelsmith --help' light (rewards.core is not loaded to build the parser)
    from ..rewards.core import RewardConfig

    # lazy: keeps 'kernelsmith --help' light (server is not loaded to build the parser)
    from ..server import build_server

    # lazy: keeps 'kernelsmith --help' light (server.app is not loaded to build the parser)
    from ..server.app import ADMISSION_WAIT_S

    try:
        reward_config = load_yaml(RewardConfig, args.reward_config) if args.reward_config else RewardConfig()
    except (ConfigError, OSError) as exc:
        print(f"kernelsmith serve: error: {exc}", file=sys.stderr)
        return 2
    devices = [d.strip() for d in args.devices.split(",") if d.strip()] if args.devices else None
    token = os.environ.get(args.token_env) or None
    try:
        server = build_server(
            host=args.host,
            port=args.port,
            workers=args.workers,
            devices=devices,
            queue_size=args.queue_size,
            admission_wait_s=ADMISSION_WAIT_S if args.admission_wait is None else args.admission_wait,
            allow_no_token=args.allow_no_token,
            token=token,
            max_request_bytes=int(args.max_request_mb * 1024 * 1024),
            reward_config=reward_config,
            tasks=args.task,
            run_dirs=args.tasks_from,
            allow_task_paths=args.allow_task_paths,
            trials=args.trials,
            timeout_s=args.timeout,
            isolation=args.isolation,
        )
    except (ValueError, FileNotFoundError, OSError) as exc:
        print(f"kernelsmith serve: error: {exc}", file=sys.stderr)
        return 2
    status = server.service.status()
    print(
        f"kernelsmith serve on {server.url}: {status['workers']} worker(s) on {', '.join(status['devices'])}, "
        f"queue {args.queue_size}, token {'required' if token else 'off'}, tasks: {', '.join(status['tasks']) or 'none'}",
        file=sys.stderr,
        flush=True,
    )
    # uvicorn answers SIGTERM and Ctrl-C itself (requests waiting for room get
    # their 503, admitted ones are answered), then raises the signal again:
    # SIGTERM as a KeyboardInterrupt too, so both end here without a traceback.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0
