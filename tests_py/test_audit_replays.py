"""Audit rounds of replayed calls (audit.round_layout): a round's calls run
on fewer copies of the set, replayed, the copies' inputs changed before
each replay from the round's nonce (audit.replay_nonce) and every replay's
outputs kept and hashed. On a CUDA device a graph captures the copies'
calls once (the capture ran each call's Python, 0.18-0.5 ms a call on the
H100), and the replays run the graph.

Here the worker's real rounds (worker_audit.audit_rounds, eager on the
host) and the referee process's real check of them (referee_process.audit)
run in this process, the parent's side of the messages played by a
scripted channel that picks chunks across the replays (one of them across
the boundary between two): an honest program's chunks are right and hashed
as sent; a program whose outputs on a replay are those of an earlier one
(a cache by the tensors' addresses, which the copies keep from replay to
replay) is caught in the first round, by the tolerance, and where the
tolerance is wider than the change, by the staleness check against the
inputs as they were before each replay's change."""

from __future__ import annotations

import shutil
import secrets
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from kernelsmith.backends.base import get_backend
from kernelsmith.evaluator import audit as A
from kernelsmith.evaluator import correctness, referee_process, worker_audit
from kernelsmith.evaluator.task_inputs import draw_inputs
from kernelsmith.task import Task

HERE = Path(__file__).parent
RELU = HERE.parent / "examples" / "triton" / "relu"

REFERENCE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    # positive: every element's change moves its output
    return [torch.rand(64) + 0.5]


def get_init_inputs():
    return []
"""

#: 1536 calls: 512 copies replayed 3 times; 64 outputs a call, chunks of 96
CALLS = 1536
#: chunk 100 in the first replay, 341 across the first two (calls 511 and
#: 512), 400 in the second, 1000 in the third
PICKS = [(0, 100), (0, 341), (0, 400), (0, 1000)]


class Honest(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)


class SameAddressSameOutput(torch.nn.Module):
    """Computes once per input address: the copies keep their addresses
    from replay to replay, so every later replay gets the first's outputs."""

    def __init__(self):
        super().__init__()
        self.seen: dict = {}

    def forward(self, x):
        if x.data_ptr() not in self.seen:
            self.seen[x.data_ptr()] = torch.relu(x)
        return self.seen[x.data_ptr()].clone()


class OneReplayLate(torch.nn.Module):
    """Returns what the previous call at this address computed: each
    replay's outputs are the inputs' of the replay before."""

    def __init__(self):
        super().__init__()
        self.last: dict = {}

    def forward(self, x):
        out = torch.relu(x)
        before = self.last.get(x.data_ptr(), out)
        self.last[x.data_ptr()] = out
        return before.clone()


class Channel:
    """The parent's side of the audit messages (protocol.answer_audit's
    part of them): the plan, a nonce per round, the picks after the hashes."""

    def __init__(self):
        self.rounds: list[dict] = []
        self.seeds_received = 0

    def stage(self, name):
        pass

    def timing_slot(self):
        return 0.0

    def timing_done(self, msg):
        pass

    def audit_plan(self, call_bytes, shape=None):
        return CALLS

    def audit_start(self, set_name, input_seed_index, init_seed_index, calls=1):
        assert calls == CALLS
        self.rounds.append({"nonce": secrets.randbits(62)})
        return self.rounds[-1]["nonce"]

    def audit_done(self, digests, error="", seen=None):
        assert not error, error
        self.rounds[-1].update(digests=digests, seen=seen)
        return PICKS

    def audit_hand_over(self, name):
        self.rounds[-1]["name"] = name


def _task(tmp_path: Path, loose: bool) -> Task:
    root = tmp_path / "task"
    shutil.copytree(RELU, root)
    (root / "reference.py").write_text(REFERENCE)
    (root / "task.yaml").write_text(
        "name: relu64\nbackend: triton\ndtype: float32\n" + ("atol: 0.1\nrtol: 0.1\n" if loose else "")
    )
    return Task.load(root)


def _audited(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: torch.nn.Module, loose: bool = False) -> list:
    """The worker's rounds of ``model`` and the referee's answers to them."""
    monkeypatch.chdir(tmp_path)  # the referee writes the reference's file in its working folder
    task, backend, chan = _task(tmp_path, loose), get_backend("triton"), Channel()
    seed = 1234

    def make_inputs(gen):
        torch.manual_seed(seed)
        return draw_inputs(gen, "cpu", torch.float32)

    ref = type("ref", (), {})()
    exec(compile(REFERENCE, "reference.py", "exec"), ref.__dict__)  # noqa: S102 - our own reference
    gen = ref.__dict__["get_inputs"]
    ctx = SimpleNamespace(
        chan=chan,
        cmp=correctness,
        model_new=model,
        backend=backend,
        make_inputs=make_inputs,
        init_seed_index=0,
        workdir=str(tmp_path),
    )
    phases: dict = {}
    worker_audit.audit_rounds(ctx, "get_inputs", gen, phases)
    assert len(chan.rounds) == A.ROUNDS and chan.rounds[0]["seen"]["replays"] == 3.0, chan.rounds
    request = {
        "audit": True,
        "task": task.to_dict(),
        "init_seed": 7,
        "input_seed": seed,
        "set": "get_inputs",
        "calls": CALLS,
        "rounds": [
            {
                "nonce": r["nonce"],
                "picks": [list(p) for p in PICKS],
                "digests": [r["digests"][o][c] for o, c in PICKS],
                "file": str(tmp_path / r["name"]),
            }
            for r in chan.rounds
        ],
    }
    return referee_process.audit(request, backend)["rounds"]


def test_the_layout_replays_the_captured_calls_within_the_caps():
    assert A.round_layout(1) == (1, 1) and A.round_layout(A.CAPTURED_CALLS) == (A.CAPTURED_CALLS, 1)
    assert A.round_layout(CALLS) == (512, 3)
    for calls in range(1, A.MOST_CALLS + 1):
        copies, replays = A.round_layout(calls)
        assert copies <= A.CAPTURED_CALLS and calls <= copies * replays <= A.MOST_CALLS, calls
        # the parent's count is laid out exactly, on every side alike
        assert A.round_layout(copies * replays) == (copies, replays), calls
    # a 2 us call's 2500 calls: 500 copies, 5 replays
    assert A.calls_per_round(2e-6, 1 << 16) == 2500 and A.round_layout(2500) == (500, 5)
    # the L2 flush after each replay's change: a GPU's rounds of several replays only
    assert not A.replays_flush([torch.zeros(4)], 8) and not A.replays_flush([torch.zeros(4)], 1)
    keys = {A.replay_nonce(99, r) for r in range(8)}
    assert A.replay_nonce(99, 0) == 99 and len(keys) == 8 and all(0 < k < 1 << 62 for k in keys)


def test_an_honest_programs_replayed_rounds_are_right_and_as_hashed(tmp_path, monkeypatch):
    answers = _audited(tmp_path, monkeypatch, Honest())
    for answer in answers:
        assert answer["wrong"] == [] and answer["forged"] == [] and "stale" not in answer, answer
        assert answer["overhead_s"] > 0 and answer["reference_s"] > 0


def test_a_replay_given_an_earlier_replays_outputs_is_wrong_in_the_first_round(tmp_path, monkeypatch):
    answers = _audited(tmp_path, monkeypatch, SameAddressSameOutput())
    # the first replay's chunk is right; those of the later replays are not
    first = answers[0]
    assert first["forged"] == [] and len(first["wrong"]) == 3, first
    assert all(w.startswith(f"output 0 chunk {c} ") for w, (_, c) in zip(first["wrong"], PICKS[1:])), first


def test_outputs_one_replay_late_are_stale_where_the_tolerance_cannot_tell(tmp_path, monkeypatch):
    answers = _audited(tmp_path, monkeypatch, OneReplayLate(), loose=True)
    first = answers[0]
    assert first["wrong"] == [] and first["forged"] == [], first
    assert "before its replay's change in the round (the round's picked chunk 3)" in first.get("stale", ""), first
    (tmp_path / "honest").mkdir()
    honest = _audited(tmp_path / "honest", monkeypatch, Honest(), loose=True)
    assert all("stale" not in a and a["wrong"] == [] for a in honest), honest


def test_each_replays_change_is_followed_by_the_flush_in_the_worker_and_the_referee(tmp_path, monkeypatch):
    """Where a round replays on a GPU (audit.replays_flush), the worker
    flushes the L2 after every replay's change, before the replay's calls,
    and the referee makes the same flush in its measure of the other work:
    the order of the calls of both sides, recorded here on the host with the
    flush itself a recorder (the flush's effect on the rounds' figures is
    measured on the H100: benchmarks/gpu_verify.sh integrity --figures)."""
    events: list = []
    real_change = A.change_inputs

    def change(buffers, nonce):
        events.append("change")
        real_change(buffers, nonce)

    class Recorded(Honest):
        def forward(self, x):
            events.append("call")
            return super().forward(x)

    class Flusher:
        def flush(self):
            events.append("flush")

    for module in (worker_audit, A):
        monkeypatch.setattr(module, "replays_flush", lambda buffers, replays: replays > 1)
        monkeypatch.setattr(module, "l2_flusher", lambda buffers: Flusher())
        monkeypatch.setattr(module, "change_inputs", change)
    answers = _audited(tmp_path, monkeypatch, Recorded())
    assert all(a["wrong"] == [] and a["forged"] == [] for a in answers), answers
    # after the worker's set-up (the change's kernel compiled before the
    # slot), its rounds: per replay a change, the flush, then the copies' 512
    # calls (here eager; on a GPU the flush is the captured graph's first node)
    start = events.index("change", events.index("change") + 1)
    worker = events[start : start + 3 * 3 * (2 + 512)]
    one_replay = ["change", "flush"] + ["call"] * 512
    assert worker == one_replay * 9, [e for e in worker if e != "call"][:12]
    # the referee's: each replay's change followed by its flush
    rest = [e for e in events[start + len(worker) :] if e != "call"]
    assert rest == ["change", "flush"] * 9, rest
