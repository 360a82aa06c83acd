"""Device memory as a scheduled resource, and memory faults attributed
(evaluator/memory.py), on the CPU: the admission against a stand-in device
of a small memory, the attribution rules, and real evaluations in sandboxed
workers whose out-of-memory faults are real (the workers' 8 GiB address-space
limit; the trusted referee has none), attributed by the real code path."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from kernelsmith.evaluator import Evaluator
from kernelsmith.evaluator.memory import (
    GiB,
    MiB,
    Footprint,
    Grant,
    MemoryAdmission,
    ProcessMemorySampler,
    process_role,
    StandInMemory,
    attribute_memory_fault,
    compute_apps,
    summary_line,
    tried_bytes,
)
from kernelsmith.task import Task

HERE = Path(__file__).parent
EXAMPLES = HERE.parent / "examples" / "triton"

needs_interpreter = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET", "0") in ("", "0"),
    reason="CPU evaluator tests run the Triton interpreter (set TRITON_INTERPRET=1)",
)


# -- admission -------------------------------------------------------------------------


def _hold(
    admission: MemoryAdmission, need, events: list, name: str, release: threading.Event, alone: bool = False
) -> threading.Thread:
    def body() -> None:
        with admission.admit(need, alone=alone) as grant:
            events.append(("in", name, grant.alone))
            release.wait(10)
        events.append(("out", name, grant.alone))

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread


def _wait_for(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_admission_fits_footprints_and_waits_for_room():
    device = StandInMemory(8 * GiB)
    admission = MemoryAdmission(device, reserve_bytes=0)
    events: list = []
    gates = [threading.Event() for _ in range(3)]
    a = _hold(admission, 3 * GiB, events, "a", gates[0])
    b = _hold(admission, 3 * GiB, events, "b", gates[1])
    _wait_for(lambda: len(events) == 2)  # 6 GiB of 8: both in at once
    c = _hold(admission, 3 * GiB, events, "c", gates[2])
    time.sleep(0.3)
    assert ("in", "c", False) not in events, "a third 3 GiB job was admitted on an 8 GiB device"
    gates[0].set()
    a.join(5)
    _wait_for(lambda: ("in", "c", False) in events)  # room again once one left
    for gate in gates:
        gate.set()
    for t in (b, c):
        t.join(5)
    assert admission.max_concurrent == 2
    assert [g.alone for g in admission.log] == [False, False, False]


def test_admission_runs_unknown_or_oversized_alone_and_lets_it_go_first():
    device = StandInMemory(8 * GiB)
    admission = MemoryAdmission(device, reserve_bytes=0)
    events: list = []
    first, big, late = threading.Event(), threading.Event(), threading.Event()
    a = _hold(admission, 1 * GiB, events, "small", first)
    _wait_for(lambda: len(events) == 1)
    b = _hold(admission, 20 * GiB, events, "big", big)  # more than the device: alone
    time.sleep(0.2)
    c = _hold(admission, 1 * GiB, events, "late", late)  # would fit, but the alone job waits first
    time.sleep(0.3)
    assert [e[1] for e in events] == ["small"]
    first.set()
    _wait_for(lambda: ("in", "big", True) in events)
    time.sleep(0.2)
    assert ("in", "late", False) not in events, "a job was admitted next to one that runs alone"
    big.set()
    _wait_for(lambda: ("in", "late", False) in events)
    late.set()
    for t in (a, b, c):
        t.join(5)
    unknown: list = []
    gate = threading.Event()
    gate.set()
    _hold(admission, None, unknown, "unknown", gate).join(5)
    assert unknown[0] == ("in", "unknown", True)  # a footprint not measured yet: by itself


def test_admission_reads_free_memory_when_idle_and_keeps_a_reserve():
    taken = {"n": 0}
    device = StandInMemory(8 * GiB, held=lambda: taken["n"])
    admission = MemoryAdmission(device, reserve_bytes=1 * GiB)
    taken["n"] = 4 * GiB  # a foreign process took half the card
    with admission.admit(2 * GiB) as grant:
        assert not grant.alone and grant.free_bytes == 4 * GiB
    with admission.admit(4 * GiB) as grant:  # 4 of the 3 GiB left after the reserve: alone
        assert grant.alone
    no_reading = MemoryAdmission(None)
    with no_reading.admit(64 * GiB) as grant:  # nothing to schedule by: admitted as it is
        assert not grant.alone and grant.free_bytes is None


# -- attribution ------------------------------------------------------------------------

FP = Footprint(params_bytes=0, inputs_bytes=6 * GiB, outputs_bytes=6 * GiB, peak_bytes=6 * GiB, measured="allocator")


def test_candidate_asking_far_more_than_the_reference_peak_is_charged():
    facts = {"fault": "candidate", "candidate_bytes": 40 * GiB, "where": "ModelNew.forward raised"}
    decision = attribute_memory_fault(facts, FP, 2.0, Grant(FP.worker_bytes(2.0), False, free_bytes=80 * GiB))
    assert decision.category == "oom" and not decision.retry_alone
    assert "40.00 GiB" in decision.reason and "12.00 GiB" in decision.reason  # its demand and its allowance


def test_candidate_within_its_allowance_on_a_shared_device_is_the_harness_and_retried():
    facts = {"fault": "candidate", "candidate_bytes": 6 * GiB}
    shared = attribute_memory_fault(facts, FP, 2.0, Grant(FP.worker_bytes(2.0), False, free_bytes=80 * GiB))
    assert shared.category == "harness" and shared.retry_alone
    assert "inputs 6.00 GiB" in shared.reason and "peak during forward 6.00 GiB" in shared.reason
    # alone, with the worker's whole need free, the same fault is its own
    alone = attribute_memory_fault(facts, FP, 2.0, Grant(FP.worker_bytes(2.0), True, free_bytes=79 * GiB))
    assert alone.category == "oom" and "to itself" in alone.reason
    # alone on a card too small for the task: still not the program's
    small = attribute_memory_fault(facts, FP, 2.0, Grant(FP.worker_bytes(2.0), True, free_bytes=40 * GiB))
    assert small.category == "harness" and not small.retry_alone and "too small" in small.reason
    # a larger margin makes a larger demand the harness's
    assert (
        attribute_memory_fault(
            {"fault": "candidate", "candidate_bytes": 30 * GiB}, FP, 6.0, Grant(1, False, free_bytes=80 * GiB)
        ).category
        == "harness"
    )


def test_harness_fault_is_retried_then_reported_unless_the_program_kept_the_memory():
    harness = {"fault": "harness", "where": "input set 'get_inputs', trial 0", "held_bytes": 40 * GiB}
    shared = attribute_memory_fault(harness, FP, 2.0, Grant(1, False, free_bytes=80 * GiB))
    assert shared.category == "harness" and shared.retry_alone
    alone = attribute_memory_fault(harness, FP, 2.0, Grant(FP.worker_bytes(2.0), True, free_bytes=50 * GiB))
    assert alone.category == "harness" and not alone.retry_alone and "does not fit" in alone.reason
    hoarded = dict(harness, held_bytes=FP.harness_bytes() + FP.allowance(2.0) + GiB)
    kept = attribute_memory_fault(hoarded, FP, 2.0, Grant(1, False, free_bytes=80 * GiB))
    assert kept.category == "oom" and "kept the memory" in kept.reason
    assert attribute_memory_fault({}, FP, 2.0, None).category == ""  # no memory fault: nothing to say


def test_sizes_in_out_of_memory_messages_are_read():
    assert tried_bytes("CUDA out of memory. Tried to allocate 6.00 GiB. GPU 0 has a total capacity") == 6 * GiB
    assert (
        tried_bytes("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1099511627776 bytes") == 1 << 40
    )
    assert tried_bytes("Tried to allocate 20.00 MiB") == 20 * MiB
    assert tried_bytes("illegal memory access") is None


def test_process_peaks_from_compute_apps():
    readings = iter([{101: 2 * GiB, 102: GiB}, {101: 5 * GiB}, {101: 3 * GiB, 102: 4 * GiB}])
    sampler = ProcessMemorySampler(read=lambda: next(readings, {}))
    for _ in range(3):
        sampler.sample()
    peaks = sampler.peaks()
    assert peaks[101][1] == 5 * GiB and peaks[102][1] == 4 * GiB
    assert sampler.peak_total == 7 * GiB  # the third reading: 3 + 4 GiB
    assert compute_apps("1234, 7421\n5678, 602\n") == {1234: 7421 * MiB, 5678: 602 * MiB}


def test_process_roles_tell_a_zygote_from_the_workers_it_forked():
    # a real process started as the zygote's module name is, and a child it
    # forks (same command line): the sampler's roles come from /proc
    import subprocess
    import sys

    code = (
        "import os, sys, time\n"
        "pid = os.fork()\n"
        "if pid == 0:\n    time.sleep(30); os._exit(0)\n"
        "print(pid, flush=True); time.sleep(30)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "kernelsmith.evaluator.zygote"], stdout=subprocess.PIPE, text=True
    )
    try:
        child = int(proc.stdout.readline())
        assert process_role(proc.pid) == "zygote"
        assert process_role(child) == "zygote child"
    finally:
        proc.kill()
        proc.wait()
    assert process_role(proc.pid) == "gone"


# -- real evaluations --------------------------------------------------------------------
# The faults are real: a worker has an address-space limit (memory_limit_mb,
# RLIMIT_AS, 8 GiB by default), the trusted referee none. The large buffers
# are torch.empty, never written: address space, not memory.

SEED = (EXAMPLES / "relu" / "seed.py").read_text()
CONTIGUOUS = "        x = x.contiguous()\n"


def _program(extra: str = "", signature: str = "") -> str:
    """The relu example's seed with ``extra`` lines at the top of forward
    (``signature``: more parameters after x)."""
    assert CONTIGUOUS in SEED
    source = SEED.replace(CONTIGUOUS, CONTIGUOUS + extra)
    return source.replace("def forward(self, x: torch.Tensor)", f"def forward(self, x: torch.Tensor{signature})")


def _relu_task(root: Path, name: str, scratch_gib: int = 0, pad_gib: int = 0) -> Task:
    """ReLU over 16 x 1024 whose reference reserves ``scratch_gib`` GiB in
    forward, and whose inputs carry a ``pad_gib`` GiB tensor it ignores."""
    folder = root / name
    folder.mkdir()
    pad = ", pad" if pad_gib else ""
    (folder / "reference.py").write_text(
        "import torch\nimport torch.nn as nn\n\n\n"
        "class Model(nn.Module):\n"
        f"    def forward(self, x{pad}):\n"
        f"        scratch = torch.empty({scratch_gib} << 30, dtype=torch.uint8)\n"
        "        del scratch\n"
        "        return torch.relu(x)\n\n\n"
        "def get_inputs():\n"
        f"    return [torch.randn(16, 1024)] + ([torch.empty({pad_gib} << 30, dtype=torch.uint8)] if {pad_gib} else [])"
        "\n\n\ndef get_init_inputs():\n    return []\n"
    )
    return Task.load(folder, backend="triton", trials=1)


def _show(r) -> str:
    return f"{r.category}: {r.error}\n{r.memory}\n{r.log_tail[-1500:]}"


@needs_interpreter
def test_referee_measures_the_footprint():
    with Evaluator(backend="triton", workers=1, timeout_s=150, timing=False) as ev:
        relu = ev.footprint(Task.load(EXAMPLES / "relu"))
        ln = ev.footprint(Task.load(EXAMPLES / "layernorm"))
    # 16 x 1024 fp32 in and out (the odd input set is smaller), no parameters
    assert (relu.params_bytes, relu.inputs_bytes, relu.outputs_bytes) == (0, 65536, 65536)
    assert relu.peak_bytes == 65536 and relu.measured == "sizes"
    assert ln.params_bytes == 2 * 512 * 4 and ln.inputs_bytes == ln.outputs_bytes == 32 * 512 * 4


@needs_interpreter
def test_out_of_memory_attributed_in_real_workers(tmp_path):
    relu = Task.load(EXAMPLES / "relu")
    cases = [
        # an honest ReLU asking for a 64 GiB workspace: far over the reference's peak
        (relu, _program("        workspace = torch.empty(64 << 30, dtype=torch.uint8, device=x.device)\n")),
        # the reference's 12 GiB scratch does not fit the worker
        (_relu_task(tmp_path, "ref_oom", scratch_gib=12), SEED),
        # nor do its 12 GiB inputs
        (_relu_task(tmp_path, "inputs_oom", pad_gib=12), _program(signature=", pad: torch.Tensor")),
        (relu, SEED),
    ]
    with Evaluator(
        backend="triton", workers=2, timeout_s=150, timing=False, device_memory=lambda device: StandInMemory(16 * GiB)
    ) as ev:
        hog, ref_oom, inputs_oom, honest = ev.evaluate_many(cases)
        log = list(ev.memory[None].log)
    # the program asked for far more than the reference's peak: charged, not retried
    assert hog.category == "oom", _show(hog)
    assert hog.memory["fault"] == "candidate" and hog.memory["candidate_bytes"] == 64 * GiB
    assert hog.memory["attributed"] == "oom" and not hog.memory.get("retried_alone")
    assert "allowance of 512.0 MiB" in hog.error
    # the reference ran out in the worker: the harness's, run again alone, then reported
    assert ref_oom.category == "harness" and not ref_oom.hacked, _show(ref_oom)
    assert ref_oom.memory["fault"] == "harness" and ref_oom.memory["retried_alone"] is True
    assert ref_oom.memory["admission"]["alone"] is True and "Model.forward" in ref_oom.memory["where"]
    assert "not the program's fault" in ref_oom.error and "reference footprint: parameters 0 B" in ref_oom.error
    assert ref_oom.memory["footprint"]["outputs_bytes"] == 65536
    # 6 x 12 GiB of inputs cannot fit the 16 GiB stand-in next to anything: it ran alone
    # from the start (no retry), and making the inputs, not the program, ran out
    assert inputs_oom.category == "harness", _show(inputs_oom)
    assert inputs_oom.memory["admission"]["alone"] is True and not inputs_oom.memory.get("retried_alone")
    assert inputs_oom.memory["where"].startswith("input set 'get_inputs'")
    assert "does not fit this device" in inputs_oom.error and "inputs 12.00 GiB" in inputs_oom.error
    assert honest.category == "ok", _show(honest)
    assert summary_line(honest.memory).startswith("reference params 0 B, inputs 64.0 KiB, outputs 64.0 KiB")
    # every measured task's priming and the retry ran alone; the rest next to each other
    assert sum(g.alone for g in log) >= 4 and any(not g.alone for g in log)


@needs_interpreter
def test_memory_the_program_kept_is_charged_where_the_harness_runs_out(tmp_path):
    task = _relu_task(tmp_path, "ref_scratch", scratch_gib=6)
    # an honest ReLU that keeps 6 GiB across calls: its own call succeeds, the
    # reference's 6 GiB scratch, next, does not fit 12 GiB of address space
    hoarder = _program(
        "        if not hasattr(self, 'kept'):\n"
        "            self.kept = torch.empty(6 << 30, dtype=torch.uint8, device=x.device)\n"
    )
    with Evaluator(
        backend="triton",
        workers=2,
        timeout_s=150,
        timing=False,
        memory_limit_mb=12288,
        device_memory=lambda device: StandInMemory(16 * GiB),
    ) as ev:
        kept, honest = ev.evaluate_many([(task, hoarder), (task, SEED)])
    assert honest.category == "ok", _show(honest)
    assert kept.category == "oom", _show(kept)
    assert kept.memory["fault"] == "harness" and "Model.forward" in kept.memory["where"]
    assert kept.memory["held_bytes"] > 6 * GiB and "kept the memory" in kept.error


@needs_interpreter
def test_small_device_admits_one_worker_at_a_time():
    relu = Task.load(EXAMPLES / "relu")
    # room for one worker's need (512 MiB allowance + the harness's copies) after the 1 GiB reserve
    with Evaluator(
        backend="triton",
        workers=2,
        timeout_s=150,
        timing=False,
        device_memory=lambda device: StandInMemory(GiB + 600 * MiB),
    ) as ev:
        results = ev.evaluate_many([(relu, SEED)] * 3)
        admission = ev.memory[None]
    assert all(r.category == "ok" for r in results), [_show(r) for r in results]
    assert admission.max_concurrent == 1
    assert all(r.memory["admission"]["need_bytes"] > 512 * MiB for r in results)


@needs_interpreter
def test_fresh_mode_goes_through_the_same_admission_and_attribution(tmp_path):
    task = _relu_task(tmp_path, "ref_oom", scratch_gib=12)
    with Evaluator(
        backend="triton",
        mode="fresh",
        workers=1,
        timeout_s=150,
        timing=False,
        device_memory=lambda device: StandInMemory(16 * GiB),
    ) as ev:
        result = ev.evaluate(task, SEED)
        log = list(ev.memory[None].log)
    assert result.category == "harness", _show(result)
    assert result.memory["retried_alone"] is True and "Model.forward" in result.memory["where"]
    # the priming alone, the first run shared, the retry alone
    assert [g.alone for g in log] == [True, False, True]


@needs_interpreter
def test_replay_check_still_catches_an_earlier_output_from_its_fingerprints():
    """The trial history is kept as fingerprints, not device copies: a program
    returning its first output again (under the partial policy, where the
    census's provenance check does not name it first) is still a replay."""
    task = Task.load(EXAMPLES / "relu", policy="partial", trials=3)
    replay = SEED.replace(
        "        return y\n",
        "        if not hasattr(self, 'first'):\n            self.first = y\n        return self.first\n",
    )
    assert replay != SEED
    with Evaluator(backend="triton", workers=1, timeout_s=150, timing=False) as ev:
        result = ev.evaluate(task, replay)
    assert result.category == "hacked", _show(result)
    assert "same output as for earlier, different inputs" in result.hack_reasons[0], result.hack_reasons


def test_host_fingerprint_tells_identical_from_changed_outputs():
    """On the host the fingerprint is two checksums of the raw bytes (one pass
    each): equal for the same bits however the tensor is laid out, different
    for one flipped bit, for another dtype or shape of the same bytes."""
    import torch

    from kernelsmith.evaluator.correctness import fingerprint

    x = torch.randn(1 << 20)
    assert fingerprint([x]) == fingerprint([x.clone()])
    flipped = x.clone()
    flipped.view(torch.int32)[12345] ^= 1
    assert fingerprint([x]) != fingerprint([flipped])
    grid = torch.randn(64, 48)
    assert fingerprint([grid.t()]) == fingerprint([grid.t().contiguous()])  # by value, not by layout
    assert fingerprint([x]) != fingerprint([x.view(torch.int32)]) != fingerprint([x.view(1024, 1024)])
    assert fingerprint([torch.zeros(0)]) == fingerprint([torch.zeros(0)])


def test_evidence_files_are_limited_by_the_tasks_outputs(tmp_path):
    """The referee's evidence (both output groups of a trial) was capped at
    2 GiB: an honest program on a 6 GiB output would have been 'hacked'. The
    cap is now sized by the task's measured outputs, and still enforced."""
    import torch

    from kernelsmith.evaluator.evidence import MAX_BYTES, evidence_limit, read_outputs, take_evidence, write_outputs

    assert evidence_limit(0) == MAX_BYTES and evidence_limit(6 * GiB) > 12 * GiB
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    write_outputs(str(src / "out.bin"), {"candidate": [torch.ones(1000)], "reference": [torch.ones(1000)]})
    size = (src / "out.bin").stat().st_size
    over = {"src": str(src), "dir": str(dst), "max_bytes": size - 1}
    take_evidence(over, [{"file": "out.bin"}])
    assert "size limit" in over["trials"][0]["not_handed_over"]
    within = {"src": str(src), "dir": str(dst), "max_bytes": size}
    take_evidence(within, [{"file": "out.bin"}])
    copy = str(dst / within["trials"][0]["file"])
    assert torch.equal(read_outputs(copy, size)["reference"][0], torch.ones(1000))
    with pytest.raises(ValueError, match="over the limit"):
        read_outputs(copy, size - 1)


def test_the_allocators_nvml_assert_is_an_out_of_memory():
    """On a shared H100 an honest argmax cloning its 8.6 GB input got, instead
    of torch.OutOfMemoryError, PyTorch's allocator failing to format that
    error (NVML cannot start in the sandboxed worker): it was `runtime`,
    charged to the candidate, where an out-of-memory is attributed by the
    parent from the footprints and retried alone."""
    from kernelsmith.evaluator.memory import is_out_of_memory
    from kernelsmith.evaluator.tracebacks import classify_exception

    seen = RuntimeError(
        "NVML_SUCCESS == DriverAPI::get()->nvmlInit_v2_() INTERNAL ASSERT FAILED at "
        '"/pytorch/c10/cuda/CUDACachingAllocator.cpp":1135, please report a bug to PyTorch.'
    )
    assert is_out_of_memory(seen) and classify_exception(seen) == "oom"
    other_assert = RuntimeError('x.is_cuda() INTERNAL ASSERT FAILED at "/pytorch/aten/src/ATen/foo.cpp":12')
    assert not is_out_of_memory(other_assert) and classify_exception(other_assert) == "runtime"
