"""What an audit round's CUDA-graph capture costs per call, and where: the
worker's set-up before the first round (evaluator/worker_audit.py
``_Calls``) for an example's seed, with the backend's launch hooks in place
as a pool worker has them.

For each example it prints, for the round's ``calls`` (sized as the parent
sizes them, audit.calls_per_round, from the seed's own time per call):

- the seed's device time per call (CUDA graph of 64 calls, replayed);
- the calls run eagerly (launches only, wall per call);
- the capture as worker_audit captures it (all the calls in one graph):
  the body (the program's Python under capture), ``capture_end`` (the
  graph's instantiation) and the first replay (its upload), with the
  top functions of a cProfile of the body;
- the same calls as ``replays`` replays of a graph of fewer calls
  (audit.round_layout), each replay's inputs changed and its outputs
  copied out: the capture and one round's wall time.

On the GPU machine::

    PYTHONPATH=python python3 benchmarks/gpu_capture_cost.py [relu softmax ...]
"""

from __future__ import annotations

import cProfile
import io
import pstats
import sys
import time
from pathlib import Path
from typing import Any

import torch

from kernelsmith.backends import get_backend
from kernelsmith.evaluator import audit
from kernelsmith.task import Task

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples" / "triton"


def _device_time_per_call(model: Any, inputs: list) -> float:
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(64):
            model(*inputs)
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / 64)
    return min(times)


def _flat_calls(model: Any, sets: list, cmp: Any) -> list:
    return audit.stacked([cmp.flatten_outputs(model(*s)) for s in sets])


def _capture(model: Any, sets: list, cmp: Any, profile: bool) -> tuple[Any, list, dict[str, float], str]:
    parts: dict[str, float] = {}
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        model(*sets[0])
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    pool = torch.cuda.graph_pool_handle()
    capture_stream = torch.cuda.Stream()
    with torch.cuda.stream(capture_stream):
        graph.capture_begin(pool=pool)
        t1 = time.perf_counter()
        prof = cProfile.Profile() if profile else None
        if prof is not None:
            prof.enable()
        outputs = _flat_calls(model, sets, cmp)
        if prof is not None:
            prof.disable()
        t2 = time.perf_counter()
        graph.capture_end()
    t3 = time.perf_counter()
    graph.replay()
    torch.cuda.synchronize()
    t4 = time.perf_counter()
    parts.update(begin_s=t1 - t0, body_s=t2 - t1, end_s=t3 - t2, first_replay_s=t4 - t3)
    text = ""
    if prof is not None:
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(12)
        text = buf.getvalue()
    return graph, outputs, parts, text


def run(backend: Any, name: str) -> None:
    from kernelsmith.evaluator import correctness as cmp

    task = Task.load(EXAMPLES / name, trials=1)
    ref = backend.load_candidate(str(EXAMPLES / name / "reference.py"), f"ref_{name}")
    seed = backend.load_candidate(str(EXAMPLES / name / "seed.py"), f"seed_{name}")
    torch.manual_seed(0)
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in ref.get_inputs()]
    init = ref.get_init_inputs() if hasattr(ref, "get_init_inputs") else []
    model = seed.ModelNew(*init).cuda()
    with torch.no_grad():
        first = cmp.flatten_outputs(model(*inputs))
        torch.cuda.synchronize()
        per_call = _device_time_per_call(model, inputs)
        call_bytes = audit.tensor_bytes(inputs) + audit.tensor_bytes(first)
        count = audit.calls_per_round(per_call, call_bytes)
        print(f"\n== {name} ({task.name}): {per_call * 1e6:.2f} us a call on the device, {count} calls a round")
        _buffers, sets = audit.copies(inputs, count)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        _flat_calls(model, sets, cmp)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        print(f"  eager launches        {(t1 - t0) * 1e3:8.1f} ms  ({(t1 - t0) / count * 1e6:6.1f} us a call)")
        for profile in (False, True):
            _graph, _outs, parts, text = _capture(model, sets, cmp, profile)
            label = "capture (cProfiled)" if profile else "capture, all calls"
            total = sum(parts.values())
            print(
                f"  {label:21s} {total * 1e3:8.1f} ms  ({total / count * 1e6:6.1f} us a call): "
                + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in parts.items())
            )
            if profile:
                print("\n".join("    " + line for line in text.splitlines()[:40]))
        del _graph, _outs, sets, _buffers
        torch.cuda.synchronize()
        for copies in sorted({min(count, c) for c in (64, 256, 1024)}):
            replays = -(-count // copies)
            buffers, sets = audit.copies(inputs, copies)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            graph, outs, parts, _ = _capture(model, sets, cmp, False)
            t1 = time.perf_counter()
            keep = [torch.empty((replays, o.numel()), dtype=o.dtype, device=o.device) for o in outs]
            walls = []
            for nonce in range(1, 4):
                torch.cuda.synchronize()
                s = time.perf_counter()
                for r in range(replays):
                    audit.change_inputs(buffers, nonce * 1000 + r)
                    graph.replay()
                    for k, o in zip(keep, outs):
                        k[r].copy_(o)
                for k in keep:
                    audit.round_digests(k.reshape(-1), nonce)
                torch.cuda.synchronize()
                walls.append(time.perf_counter() - s)
            print(
                f"  {copies:4d} copies x {replays:3d} replays: capture {(t1 - t0) * 1e3:7.1f} ms, "
                f"round {min(walls) * 1e3:6.2f} ms (calls alone {count * per_call * 1e3:.2f} ms)"
            )
            del graph, outs, keep, buffers, sets


def main() -> None:
    backend = get_backend("triton")
    backend.prepare_zygote()
    backend.prepare_worker()
    for name in sys.argv[1:] or ["relu", "softmax", "vector_add", "layernorm"]:
        run(backend, name)


if __name__ == "__main__":
    main()
