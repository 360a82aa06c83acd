"""Audit rounds (evaluator/audit.py, worker_audit.py, trusted/audit_check.py):
the program's call under the parent's own clock, on inputs it could not
know before that clock started, its output checked by the trusted referee.

The hashes: the worker's vectorised hashes equal the referee's per chunk,
for every dtype; one changed bit changes its chunk's hash only; the input
change is the same from the same nonce and reaches every element. The
parent's side of the messages (protocol.answer_audit). Then real pools:
the honest seed passes its rounds; a report rewritten in the worker's own
process (report_patch_send: the harness's own report and result, speedup
times 20) is `hacked` by the rounds' figures; a program that skips the work
under the rounds (report_skip_audited) is `hacked` by the referee's look at
the asked chunks, and one that writes the true values into the chunk file
afterwards (report_lazy_audited) by the hashes sent before the clock
stopped."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
import torch

from kernelsmith.evaluator import Evaluator
from kernelsmith.evaluator import audit as A
from kernelsmith.evaluator.protocol import (
    AUDIT_DONE,
    AUDIT_EVIDENCE,
    AUDIT_REQUEST,
    CHUNKS,
    NONCE,
    TAKEN,
    answer_audit,
)
from kernelsmith.task import Task

HERE = Path(__file__).parent
HACKS = HERE / "fixtures" / "hacks_v3"
RELU = HERE.parent / "examples" / "triton" / "relu"

needs_interpreter = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET", "0") in ("", "0"),
    reason="CPU evaluator tests run the Triton interpreter (set TRITON_INTERPRET=1)",
)


# ---------------------------------------------------------------- the hashes


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.bool, torch.complex64]
)
@pytest.mark.parametrize("numel", [1, 7, 1024, 1025, 5000])
def test_the_workers_hashes_are_the_referees_per_chunk(dtype, numel):
    t = torch.randn(numel, dtype=torch.complex64) if dtype == torch.complex64 else (torch.randn(numel) * 3).to(dtype)
    sent = A.chunk_digests(t, 1234567)
    bounds = A.chunk_bounds(A.flat(t).numel())
    assert len(sent) == len(bounds) <= A.CHUNKS
    assert bounds[0][0] == 0 and bounds[-1][1] == A.flat(t).numel()
    values = A.flat(t)
    for (lo, hi), digest in zip(bounds, sent):
        assert A.digest_of_chunk(A.words(values[lo:hi].clone()), lo, 1234567) == digest


def test_one_changed_bit_changes_its_chunk_only_and_the_nonce_changes_all():
    t = torch.randn(64, 100)
    before = A.chunk_digests(t, 99)
    bumped = t.clone()
    bumped.view(-1)[4321] = torch.nextafter(bumped.view(-1)[4321], torch.tensor(float("inf")))
    after = A.chunk_digests(bumped, 99)
    length = A.chunk_bounds(t.numel())[0][1]
    assert [i for i, (a, b) in enumerate(zip(before, after)) if a != b] == [4321 // length]
    other = A.chunk_digests(t, 100)
    assert all(a != b for a, b in zip(before, other))


def test_a_chunk_moved_to_another_place_hashes_differently():
    """Positions are part of the hash: the right values handed over for
    another chunk do not pass."""
    t = torch.randn(4096)
    sent = A.chunk_digests(t, 5)
    (lo0, hi0), (lo1, _hi1) = A.chunk_bounds(t.numel())[:2]
    assert A.digest_of_chunk(A.words(t[lo0:hi0]), lo1, 5) != sent[1]


def test_the_input_change_is_the_nonces_and_reaches_every_element():
    x = torch.randn(256, 256)
    ints = torch.arange(10)
    a, b = [x.clone(), ints.clone()], [x.clone(), ints.clone()]
    A.change_inputs(a, 42)
    A.change_inputs(b, 42)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], ints)
    changed = (a[0] != x).float().mean().item()
    assert changed > 0.99, changed
    ratio = (a[0] / x).flatten()
    assert float(ratio.min()) >= 1 - A.EPS - 1e-6 and float(ratio.max()) <= 1 + A.EPS + 1e-6
    c = [x.clone()]
    A.change_inputs(c, 43)
    assert not torch.equal(a[0], c[0])


# ------------------------------------------------- the parent's side of it


def test_the_parent_keeps_the_round_and_picks_chunks_after_the_hashes():
    store: dict = {}
    first = answer_audit(
        {"type": AUDIT_REQUEST, "set": "get_inputs", "input_seed_index": 3, "init_seed_index": 1}, store
    )
    assert isinstance(first[NONCE], int) and store["audits"][0]["nonce"] == first[NONCE]
    store["audits"][0]["started"] = time.monotonic()
    picks = answer_audit({"type": AUDIT_DONE, "digests": [list(range(16)), [7, 8]]}, store)[CHUNKS]
    assert len(picks) == A.PICKS and len({tuple(p) for p in picks}) == A.PICKS
    assert all((o == 0 and 0 <= c < 16) or (o == 1 and 0 <= c < 2) for o, c in picks)
    assert store["audits"][0]["wall_s"] >= 0 and store["audits"][0]["picks"] == picks
    # a second "done" for the same round changes nothing
    assert answer_audit({"type": AUDIT_DONE, "digests": [[1]]}, store) == {CHUNKS: []}
    assert store["audits"][0]["picks"] == picks


def test_malformed_hashes_or_a_failed_call_leave_the_round_unaudited():
    for done in ({"digests": "x"}, {"digests": [[1.5]]}, {"digests": [[1 << 64]]}, {"error": "ValueError: no"}):
        store: dict = {}
        answer_audit({"type": AUDIT_REQUEST, "set": "get_inputs"}, store)
        store["audits"][0]["started"] = time.monotonic()
        assert answer_audit({"type": AUDIT_DONE, **done}, store) == {CHUNKS: []}
        assert store["audits"][0]["error"]


def test_the_chunks_are_copied_at_once_and_only_for_an_asked_round(tmp_path):
    src, dst = tmp_path / "worker", tmp_path / "parent"
    src.mkdir()
    dst.mkdir()
    store: dict = {"src": str(src), "dir": str(dst)}
    (src / "audit-0.bin").write_bytes(b"chunks")
    # nothing asked yet: nothing copied
    assert answer_audit({"type": AUDIT_EVIDENCE, "file": "audit-0.bin"}, store) == {TAKEN: True}
    assert "audits" in store and not store["audits"]
    answer_audit({"type": AUDIT_REQUEST, "set": "get_inputs"}, store)
    store["audits"][0]["started"] = time.monotonic()
    answer_audit({"type": AUDIT_DONE, "digests": [[1, 2, 3, 4, 5]]}, store)
    answer_audit({"type": AUDIT_EVIDENCE, "file": "../worker/audit-0.bin"}, store)
    copy = store["audits"][0]["file"]
    assert Path(copy).parent == dst and Path(copy).read_bytes() == b"chunks"
    (src / "audit-0.bin").write_bytes(b"changed later")
    assert Path(copy).read_bytes() == b"chunks"


# ------------------------------------------------------------- real pools

#: fixture -> what its reason must say
REASONS = {
    "report_patch_send": r"^the timing reported [\d.e-]+ ms per call of the program and [\d.e-]+ ms of the reference; "
    r"the parent's own clock saw the program's call take at least [\d.e-]+ ms \(the fastest of 3 audit rounds",
    "report_skip_audited": r"^audit round 1: the program's output on the round's inputs \(new values the parent "
    r"chose as its clock started\) is wrong \(output 0 chunk \d+",
    "report_lazy_audited": r"^audit round 1: the output handed over is not the one whose hashes the worker sent "
    r"before the parent's clock stopped \(output 0 chunk \d+ \(elements \d+-\d+\)",
}


@pytest.fixture(scope="module")
def verdicts():
    relu = Task.load(RELU)
    names = sorted(REASONS)
    items = [(relu, (RELU / "seed.py").read_text())] + [(relu, (HACKS / f"{n}.py").read_text()) for n in names]
    with Evaluator(backend="triton", workers=2, timeout_s=150, timing=True) as ev:
        out = ev.evaluate_many(items)
    return dict(zip(["seed"] + names, out))


def _show(r) -> str:
    return f"{r.category}: {r.error[:600]} {r.hack_reasons} {(r.census or {}).get('audit')}\n{r.log_tail[-1200:]}"


@needs_interpreter
def test_the_honest_seed_passes_its_audit_rounds(verdicts):
    r = verdicts["seed"]
    assert r.category == "ok" and r.speedup is not None, _show(r)
    audit = r.census["audit"]
    assert audit["rounds"] == A.ROUNDS and len(audit["wall_ms"]) == A.ROUNDS
    # the interpreter's eager call is the timed call: the lower bound the
    # parent measured is below the reported time, well under the threshold
    assert audit["candidate_side"] < 2 and audit["excess"] < 2, audit
    assert audit["referee_reference_ms"] > 0 and audit["reference_side"] < 2, audit


@needs_interpreter
@pytest.mark.parametrize("name", sorted(REASONS))
def test_a_report_written_in_the_workers_own_process_is_caught_by_the_rounds(verdicts, name):
    r = verdicts[name]
    assert r.category == "hacked" and r.hacked and r.speedup is None, _show(r)
    assert len(r.hack_reasons) == 1 and re.search(REASONS[name], r.hack_reasons[0]), r.hack_reasons


def test_the_report_fixtures_pass_the_static_checks():
    from kernelsmith.backends.base import get_backend

    backend = get_backend("triton")
    names = sorted(p.stem for p in HACKS.glob("report_*.py"))
    assert names == sorted(REASONS), names
    for name in names:
        src = (HACKS / f"{name}.py").read_text()
        report = backend.static_check(src)
        assert not report.hacks and not report.errors and not report.warnings, (name, report)
        assert src.startswith("# category: report"), name
