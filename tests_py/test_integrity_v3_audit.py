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
    # every element shrinks, by its own part: a mean moves as well as each
    # element, and no sign flips
    assert float(ratio.min()) >= 1 - A.EPS - 1e-6 and float(ratio.max()) <= 1 + 1e-6
    assert abs(float(ratio.mean()) - (1 - A.EPS / 2)) < 1e-3 and float(ratio.std()) > A.EPS / 4
    assert bool((torch.sign(a[0]) == torch.sign(x)).all())
    probabilities = [torch.rand(4096)]
    A.change_inputs(probabilities, 7)
    assert 0 <= float(probabilities[0].min()) and float(probabilities[0].max()) < 1
    c = [x.clone()]
    A.change_inputs(c, 43)
    assert not torch.equal(a[0], c[0])


# ------------------------------------------- the referee's look at freshness


def test_chunks_nearer_an_earlier_state_than_their_own_round_are_stale():
    from kernelsmith.evaluator.referee_process import _staleness

    g = torch.Generator().manual_seed(3)
    before = [torch.randn(1024, generator=g) for _ in range(4)]
    factor = [1 - A.EPS * torch.rand(1024, generator=g) for _ in range(4)]
    now = [b * f for b, f in zip(before, factor)]
    # an honest kernel: its own error, independent of the change, small or
    # larger than the change's effect
    for scale in (0.0, 1e-6, 1e-2, 1.0):
        honest = [n + scale * torch.randn(1024, generator=g) for n in now]
        assert _staleness(honest, now, [before]) == "", scale
    # the output of the inputs before the change, exact or with a kernel's
    # own small error
    for scale in (0.0, 1e-4):
        stale = [b + scale * torch.randn(1024, generator=g) for b in before]
        why = _staleness(stale, now, [[torch.zeros(1024)] * 4, before])
        assert why.startswith(
            "the chunks are nearer the reference's output on the inputs as they were after round 1"
        ), why
    # nothing moved: no state can be told from another
    assert _staleness(before, before, [before]) == ""
    # a scalar output (a loss): an honest kernel's bias can be the size of
    # the change and in its direction (1.003 against 1.0 now and 1.002
    # before); a few elements are not judged
    one_now, one_before = [torch.tensor([1.0])], [torch.tensor([1.002])]
    assert _staleness([one_now[0] + 3e-3], one_now, [one_before]) == ""
    assert _staleness([one_before[0]], one_now, [one_before]) == ""


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


def test_more_rounds_than_the_harness_runs_are_noted(tmp_path):
    store: dict = {}
    for _ in range(4 * A.ROUNDS + 2):
        assert isinstance(answer_audit({"type": AUDIT_REQUEST, "set": "get_inputs"}, store)[NONCE], int)
    assert len(store["audits"]) == 4 * A.ROUNDS and store["audits_refused"]
    reasons, _result, _referee = _judge(tmp_path, _fine, refused=True)
    assert reasons and "more audit rounds than the harness runs" in reasons[0]


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
    r"the parent's own clock saw the program's (?:call|\d+ calls) take at least [\d.e-]+ ms \(the fastest of 3 audit "
    r"rounds",
    "report_skip_audited": r"^audit round 1: the program's output on the round's inputs \(new values the parent "
    r"chose as its clock started\) is wrong \(output 0 chunk \d+",
    "report_lazy_audited": r"^audit round 1: the output handed over is not the one whose hashes the worker sent "
    r"before the parent's clock stopped \(output 0 chunk \d+ \(elements \d+-\d+\)",
    # the change (up to 6.25 %) is past float32's tolerance: an output of the
    # inputs before the nonce is wrong
    "report_stale_audited": r"^audit round 2: the program's output on the round's inputs \(new values the parent "
    r"chose as its clock started\) is wrong \(output 0 chunk \d+",
}


#: report fixtures the CPU cannot call hacked, only pay what the parent allows
PAID_DOWN = ("report_inflate_reference",)


@pytest.fixture(scope="module")
def verdicts():
    relu = Task.load(RELU)
    names = sorted(REASONS) + list(PAID_DOWN)
    items = [(relu, (RELU / "seed.py").read_text())] + [(relu, (HACKS / f"{n}.py").read_text()) for n in names]
    with Evaluator(backend="triton", workers=2, timeout_s=150, timing=True) as ev:
        out = ev.evaluate_many(items)
    return dict(zip(["seed"] + names, out))


@pytest.fixture(scope="module")
def loose_verdicts(tmp_path_factory):
    """The seed and the stale program on relu with a tolerance wider than
    the audit's change (0.1): the tolerance cannot tell a stale output."""
    import shutil

    root = tmp_path_factory.mktemp("loose") / "relu"
    shutil.copytree(RELU, root)
    (root / "task.yaml").write_text((RELU / "task.yaml").read_text() + "atol: 0.1\nrtol: 0.1\n")
    loose = Task.load(root)
    assert loose.config.tolerances() == (0.1, 0.1)
    items = [(loose, (RELU / "seed.py").read_text()), (loose, (HACKS / "report_stale_audited.py").read_text())]
    with Evaluator(backend="triton", workers=2, timeout_s=150, timing=True) as ev:
        seed, stale = ev.evaluate_many(items)
    return seed, stale


@needs_interpreter
def test_an_output_computed_before_the_nonce_is_caught_where_the_tolerance_cannot_tell(loose_verdicts):
    seed, stale = loose_verdicts
    assert seed.category == "ok" and seed.speedup is not None and seed.census["audit"]["excess"] < 2, _show(seed)
    assert stale.category == "hacked" and stale.speedup is None, _show(stale)
    assert len(stale.hack_reasons) == 1, stale.hack_reasons
    assert re.search(
        r"^audit round 2: the program's output was computed before the round's nonce: the chunks are nearer the "
        r"reference's output on the inputs as they were after round 1's change than on the round's own inputs",
        stale.hack_reasons[0],
    ), stale.hack_reasons


def _show(r) -> str:
    return f"{r.category}: {r.error[:600]} {r.hack_reasons} {(r.census or {}).get('audit')}\n{r.log_tail[-1200:]}"


@needs_interpreter
def test_the_honest_seed_passes_its_audit_rounds(verdicts):
    r = verdicts["seed"]
    assert r.category == "ok" and r.speedup is not None, _show(r)
    audit = r.census["audit"]
    assert audit["rounds"] == A.ROUNDS and len(audit["wall_ms"]) == A.ROUNDS
    # each round also ended when the hashes were there, read in C++ before
    # the parent's thread had the interpreter's lock again: no later than
    # the round's end as the parent's Python saw it
    arrival = audit["wall_arrival_ms"]
    assert len(arrival) == A.ROUNDS and all(0 < a <= w for a, w in zip(arrival, audit["wall_ms"])), audit
    # the interpreter's eager call is the timed call: the lower bound the
    # parent measured is below the reported time, well under the threshold
    assert audit["candidate_side"] < 2 and audit["excess"] < 2, audit
    assert audit["referee_reference_ms"] > 0 and audit["reference_side"] < 2, audit
    # where each side's time went, kept as a record: the worker's set-up
    # before the slot with its first round, the referee's check part by part
    # (its parts happen inside the parent's request, the wait included)
    setup = audit["worker_says_ms"][0]
    assert {"warm_s", "plan_s", "copies_s", "capture_s", "compile_s", "call_s", "hash_s"} <= set(setup), setup
    assert all(v >= 0 for v in setup.values()) and setup["warm_s"] > 0, setup
    assert all("warm_s" not in later for later in audit["worker_says_ms"][1:]), audit["worker_says_ms"]
    split = audit["referee_split_ms"]
    assert set(split) == {"asked", "rebuild", "copies", "compile", "earlier_states", "rounds", "timed_reference"}, split
    # the referee times the reference itself only on a device clock: on the
    # host clock a warm measure there is no bound on the worker's cold calls
    assert audit["referee_timed_reference_ms"] == 0, audit
    assert split["rounds"] > 0 and split["asked"] >= sum(v for k, v in split.items() if k != "asked"), split


@needs_interpreter
@pytest.mark.parametrize("name", sorted(REASONS))
def test_a_report_written_in_the_workers_own_process_is_caught_by_the_rounds(verdicts, name):
    r = verdicts[name]
    if busy_figures(r, REASONS[name]):
        return
    assert r.category == "hacked" and r.hacked and r.speedup is None, _show(r)
    assert len(r.hack_reasons) == 1 and re.search(REASONS[name], r.hack_reasons[0]), r.hack_reasons


@needs_interpreter
def test_a_reference_reported_slower_is_paid_what_the_referee_allows(verdicts):
    """report_inflate_reference sends the reference's time and the speedup
    times 8 in the worker's own reports. On the host clock it is held only
    to the referee's calls back to back, whose allowance is wide there (the
    worker's timed calls of a microsecond reference run cold and take about
    0.03 ms each): its side mostly stays below the hacked threshold (on the
    H100, against the referee's timed measure, it is `hacked`), but the
    reference is paid what the referee allows, never the report."""
    r = verdicts["report_inflate_reference"]
    if r.category == "hacked":  # a slow host's honest reference times 8 can pass the hacked threshold too
        assert len(r.hack_reasons) == 1 and "ms of the reference; the parent's own clock" in r.hack_reasons[0], _show(r)
        return
    audit = r.census["audit"]
    if audit.get("busy") and "clipped" not in audit:
        assert not r.timing_reliable, _show(r)
        return
    assert r.category == "ok" and "clipped" in audit, _show(r)
    allowed = 2 * audit["referee_reference_ms"] + 0.1  # the host clock's bound: calls back to back
    assert r.ref_runtime_ms == pytest.approx(allowed, rel=0.03), _show(r)
    reported = audit["clipped"]["reported"]
    assert reported["ref_runtime_ms"] > r.ref_runtime_ms and r.speedup < reported["speedup"], _show(r)


def busy_figures(r, pattern: str, record=None) -> bool:
    """Whether ``r``'s audit figures were taken on a host the parent
    measured busy (other processes next to the pool: a test run beside
    another); then figures past the threshold must leave the timing
    unreliable with the reason, never reliable (the rule itself is
    test_a_busy_host_leaves_figures_past_the_threshold_unreliable_not_hacked)."""
    record = record if record is not None else (r.census or {}).get("audit") or {}
    if not record.get("busy") or r.category == "hacked":
        return False
    assert r.category == "ok" and not r.timing_reliable, _show(r)
    assert any(re.search(pattern, u) and "ran on a busy host" in u for u in r.unreliable_reasons), _show(r)
    return True


def test_the_report_fixtures_pass_the_static_checks():
    from kernelsmith.backends.base import get_backend

    backend = get_backend("triton")
    names = sorted(p.stem for p in HACKS.glob("report_*.py"))
    assert names == sorted(list(REASONS) + list(PAID_DOWN)), names
    for name in names:
        src = (HACKS / f"{name}.py").read_text()
        report = backend.static_check(src)
        assert not report.hacks and not report.errors and not report.warnings, (name, report)
        assert src.startswith("# category: report"), name


# ------------------------------------------------- the parent's judgement


class _Referee:
    """The referee's side as the check sees it: its folder, its limit, and
    answers given here (the real one runs in the pool tests above)."""

    def __init__(self, workdir, answer):
        self.workdir, self.answer, self.asked = str(workdir), answer, []

    def evidence_limit(self, task):
        return 1 << 20

    def ask(self, request):
        self.asked.append(request)
        return self.answer(request)


def _judge(
    tmp_path,
    answer,
    walls=(0.050, 0.040, 0.045),
    cand_ms=40.0,
    ref_ms=30.0,
    error=None,
    refused=False,
    device=None,
    calls=(1, 1, 1),
    planned=None,
    declared=None,
    loads=None,
    attempts=None,
):
    from kernelsmith.evaluator.trusted.audit_check import AuditCheck
    from kernelsmith.evaluator.trusted.base import TrustedContext
    from kernelsmith.result import EvalResult

    store: dict = {
        "audits": [],
        "timing_reports": [{"speedup": ref_ms / cand_ms, "ref_ms": ref_ms, "cand_ms": cand_ms}],
    }
    if refused:
        store["audits_refused"] = True
    for number, wall in enumerate(walls):
        chunk = tmp_path / f"audit-{number}.bin"
        chunk.write_bytes(b"x")
        store["audits"].append(
            {
                "set": "get_inputs",
                "input_seed_index": 2,
                "init_seed_index": 1,
                "nonce": 7 + number,
                "calls": calls[number],
                "planned": planned[number] if planned else calls[number],
                "declared_bytes": declared,
                "wall_s": wall,
                "digests": [[11, 12, 13, 14]],
                "picks": [[0, 1], [0, 3]],
                "file": str(chunk),
                **({"error": error} if error and number == len(walls) - 1 else {}),
                **({"load": loads[number]} if loads else {}),
            }
        )
    result = EvalResult(
        compiled=True, correct=True, category="ok", speedup=ref_ms / cand_ms, runtime_ms=cand_ms, ref_runtime_ms=ref_ms
    )
    if attempts:
        result.load = {"attempts": attempts}
    if device:
        result.timing = {"device": device}
    referee = _Referee(tmp_path, answer)
    ctx = TrustedContext(task=Task.load(RELU), seeds=[5, 6, 8], workdir=str(tmp_path), referee=referee, evidence=store)
    return AuditCheck().reasons(result, ctx), result, referee


def _fine(request, call_bytes=1 << 16):
    return {
        "rounds": [{"wrong": [], "forged": [], "overhead_s": 0.001, "reference_s": 0.012} for _ in request["rounds"]],
        "call_bytes": call_bytes,
    }


IDLE = {"busy_cores": 1.1, "own_cores": 1.0, "other_cores": 0.1, "cores": 2.0}
BUSY = {"busy_cores": 2.0, "own_cores": 0.5, "other_cores": 1.5, "cores": 2.0}


def test_a_busy_host_leaves_figures_past_the_threshold_unreliable_not_hacked(tmp_path):
    """Other processes lengthen a round (and the timed calls) unevenly: an
    honest program cannot help it, so where the parent measured the host
    busy while the fastest round ran (the candidate's side) or the timing
    did (the reference's side), figures that would be hacked leave the
    timing unreliable with the reason. A busy round that is not the fastest
    excuses nothing; nor does the worker's own word on its use (the gate's
    ``other_cores`` from its report's cpu_s)."""
    # 7x on the candidate's side (5 ms reported, at least 36 measured)
    reasons, result, _ = _judge(tmp_path, _fine, cand_ms=5.0, ref_ms=12.0, loads=[IDLE, BUSY, IDLE])
    assert reasons == [] and not result.timing_reliable, result.census["audit"]
    assert result.unreliable_reasons[-1].endswith(
        "; the fastest audit round ran on a busy host (1.50 of 2 cores used by other processes)"
    ), result.unreliable_reasons
    assert result.census["audit"]["fastest_round_other_cores"] == 1.5 and result.census["audit"]["busy"]
    reasons, result, _ = _judge(tmp_path, _fine, cand_ms=5.0, ref_ms=12.0, loads=[BUSY, IDLE, BUSY])
    assert reasons and "times past what the parent measured" in reasons[0]
    assert result.census["audit"]["fastest_round_other_cores"] == 0.1 and "busy" not in result.census["audit"]
    # the reference reported at 200 ms where the referee's calls take 12 ms:
    # the timing's host as the parent measured it decides
    busy_timing = [{"speedup": 5.0, "other_cores": 0.0, "other_cores_measured": 1.4, "cores": 2.0}]
    reasons, result, _ = _judge(tmp_path, _fine, cand_ms=40.0, ref_ms=200.0, attempts=busy_timing)
    assert reasons == [] and "its timing ran on a busy host (1.40 of 2 cores" in result.unreliable_reasons[-1]
    # a busy timing only inflates the times it reports: it excuses no round
    # longer than the reported calls, and a busy round no slower reference
    reasons, result, _ = _judge(tmp_path, _fine, cand_ms=5.0, ref_ms=12.0, attempts=busy_timing)
    assert reasons and "times past what the parent measured" in reasons[0]
    reasons, result, _ = _judge(tmp_path, _fine, cand_ms=40.0, ref_ms=200.0, loads=[BUSY] * 3)
    assert reasons and result.census["audit"]["reference_side"] > 4
    said_busy = [{"speedup": 5.0, "other_cores": 1.9, "other_cores_measured": 0.2, "cores": 2.0}]
    reasons, result, _ = _judge(tmp_path, _fine, cand_ms=40.0, ref_ms=200.0, attempts=said_busy)
    assert reasons and result.census["audit"]["reference_side"] > 4


def test_the_parent_measures_the_workers_use_and_the_rest_of_the_host(tmp_path):
    """HostLoadWindow with the worker's pids: its CPU from /proc, apart from
    the rest of the host's (a process spinning next to it)."""
    import subprocess
    import sys

    from kernelsmith.evaluator.contention import HostLoadWindow, process_cpu_s

    spin = [sys.executable, "-c", "import time\nend = time.time() + 1.5\nwhile time.time() < end: pass"]
    spinner = subprocess.Popen(spin)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(2)"])
    try:
        time.sleep(0.2)
        assert process_cpu_s([spinner.pid]) is not None and process_cpu_s([2**22 + 7]) is None
        as_other, as_own = HostLoadWindow(), HostLoadWindow()
        as_other.start([sleeper.pid])
        as_own.start([spinner.pid])
        time.sleep(0.8)
        other, own = as_other.stop(), as_own.stop()
    finally:
        spinner.kill()
        sleeper.kill()
    assert other["own_cores"] < 0.1 and other["other_cores"] > 0.3, other
    assert own["own_cores"] > 0.3 and own["other_cores"] < other["other_cores"], own

    # a process the worker starts is the worker's use: a program cannot make
    # the host look busy (its figures then only unreliable) by spinning a child
    parent = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, sys; subprocess.run({spin!r})"],
    )
    try:
        time.sleep(0.3)
        window = HostLoadWindow()
        window.start([parent.pid])
        time.sleep(0.8)
        tree = window.stop()
    finally:
        parent.kill()
        parent.wait()
    assert tree["own_cores"] > 0.3, tree


def test_a_microsecond_call_is_audited_over_as_many_calls_as_its_reported_time_asks(tmp_path):
    # 2 us reported per call: 2500 calls (5 ms of them) of 64 KiB each; the
    # fastest round 40 ms, other work 1 ms, slack 2.6 ms (a GPU's share of
    # the other work): the calls took at least 36.4 ms, 2500 x 2 us = 5 ms
    # reported: hacked
    reasons, result, referee = _judge(tmp_path, _fine, cand_ms=0.002, ref_ms=0.01, calls=(2500,) * 3, device="cuda")
    assert referee.asked[0]["calls"] == 2500
    assert len(reasons) == 1 and "the program's 2500 calls take at least 36.4 ms" in reasons[0], reasons
    audit = result.census["audit"]
    assert audit["calls"] == audit["calls_needed"] == 2500 and audit["candidate_side"] > 4, audit
    # the same calls at their honest time: 2500 x 15 us = 37.5 ms reported
    reasons, result, _ = _judge(tmp_path, _fine, cand_ms=0.015, ref_ms=0.02, calls=(2500,) * 3, device="cuda")
    assert reasons == [] and result.timing_reliable, result.census["audit"]


def test_the_rounds_calls_are_sized_for_the_clock_the_parent_knows_times_the_job():
    from kernelsmith.evaluator.protocol import AUDIT_PLAN, CALLS

    # 2 us a call, 64 KiB a call: 2500 calls on a GPU, 128 on the host clock
    # (8 MiB of copies: the torch hashes there cost about 100 ns an element)
    assert A.calls_per_round(2e-6, 1 << 16) == 2500
    assert A.calls_per_round(2e-6, 1 << 16, host=True) == (8 << 20) // (1 << 16)
    reports = [{"speedup": 2.0, "ref_ms": 0.004, "cand_ms": 0.002}]
    for host, calls in ((False, 2500), (True, 128)):
        store: dict = {"timing_reports": reports, "host_clock": host}
        assert answer_audit({"type": AUDIT_PLAN, "call_bytes": 1 << 16}, store)[CALLS] == calls
        answer_audit({"type": AUDIT_REQUEST, "set": "get_inputs", "calls": calls}, store)
        assert store["audits"][0]["host_clock"] is host and store["audits"][0]["planned"] == calls
    # a store that does not say (no gate): the host's smaller budget
    store = {"timing_reports": reports}
    assert answer_audit({"type": AUDIT_PLAN, "call_bytes": 1 << 16}, store)[CALLS] == 128


def test_rounds_of_fewer_calls_than_the_report_asks_leave_the_timing_unreliable(tmp_path):
    # one call of a microsecond kernel: rounds of 4 ms, under the slack
    short = (0.0040, 0.0035, 0.0038)
    reasons, result, _ = _judge(
        tmp_path, _fine, walls=short, cand_ms=0.002, ref_ms=0.01, calls=(1, 1, 1), device="cuda"
    )
    assert reasons == [] and not result.timing_reliable, result.census["audit"]
    assert any("made 1 calls each where the reported 0.002 ms per call" in r for r in result.unreliable_reasons)
    # ... hacked where the worker declared more bytes per call than the
    # referee counts (fewer calls for the same report)
    reasons, result, _ = _judge(
        tmp_path, _fine, walls=short, cand_ms=0.002, ref_ms=0.01, calls=(1, 1, 1), declared=1 << 40, device="cuda"
    )
    assert len(reasons) == 1 and "the worker declared 1099511627776 bytes per call" in reasons[0], reasons
    # the parent's count of bytes bounds the calls: 512 MiB over 1 MiB a call
    reasons, result, _ = _judge(
        tmp_path, lambda r: _fine(r, 1 << 20), cand_ms=0.002, ref_ms=0.01, calls=(512,) * 3, device="cuda"
    )
    assert result.census["audit"]["calls_needed"] == 512 and result.timing_reliable, result.census["audit"]


@pytest.mark.parametrize("calls", [(4, 4, 8), (0, 0, 0), (5000,) * 3, ("4",) * 3])
def test_rounds_whose_calls_are_not_the_harness_are_hacked(tmp_path, calls):
    reasons, _, referee = _judge(tmp_path, _fine, calls=calls)
    assert not referee.asked and len(reasons) == 1 and "calls per audit round" in reasons[0], reasons


def test_rounds_of_other_calls_than_the_parent_asked_for_are_hacked(tmp_path):
    reasons, _, referee = _judge(tmp_path, _fine, calls=(2, 2, 2), planned=(4096, 4096, 4096))
    assert not referee.asked and len(reasons) == 1, reasons
    assert "audit round 1: the worker made 2 calls where the parent asked for 4096" in reasons[0], reasons


def test_the_referee_is_asked_once_per_set_with_every_nonce_in_order(tmp_path):
    reasons, result, referee = _judge(tmp_path, _fine)
    assert reasons == [] and result.timing_reliable, result.census
    (request,) = referee.asked
    assert [r["nonce"] for r in request["rounds"]] == [7, 8, 9]
    assert request["init_seed"] == 6 and request["input_seed"] == 8
    assert request["rounds"][0]["digests"] == [12, 14]  # the hashes of the picked chunks, as sent
    # fastest round 40 ms, other work 1 ms, slack 2.5 + 0.5 ms: at least 36 ms
    # against 40 reported (plus its 0.25 ms margin); the reference 30 ms
    # against twice the referee's 12 ms plus 0.1 ms (the host clock's slack)
    audit = result.census["audit"]
    assert audit["call_at_least_ms"] == pytest.approx(36.0) and audit["candidate_side"] == pytest.approx(
        36 / 40.25, abs=1e-4
    )
    assert audit["reference_side"] == pytest.approx(30 / 24.1, abs=1e-4)


@pytest.mark.parametrize(
    "cand_ms, verdict",
    [(30.0, "ok"), (15.0, "unreliable"), (5.0, "hacked")],
    ids=["1.2x", "2.4x", "7x"],
)
def test_the_reported_time_against_the_parents_clock_has_two_thresholds(tmp_path, cand_ms, verdict):
    reasons, result, _ = _judge(tmp_path, _fine, cand_ms=cand_ms, ref_ms=12.0)
    got = "hacked" if reasons else ("unreliable" if not result.timing_reliable else "ok")
    assert got == verdict, (reasons, result.census["audit"])
    if reasons:
        assert "the report is" in reasons[0] and "times past what the parent measured" in reasons[0]


def test_a_reference_reported_slower_than_the_referee_times_it_is_caught_alone(tmp_path):
    # the candidate's side within bounds (40 ms reported), the reference
    # reported at 200 ms where the referee's back-to-back calls take 12 ms
    reasons, result, _ = _judge(tmp_path, _fine, cand_ms=40.0, ref_ms=200.0)
    assert reasons and result.census["audit"]["reference_side"] > 4


def test_wrong_or_late_chunks_are_hacked_and_the_referees_failure_is_not(tmp_path):
    def wrong(request):
        return {"rounds": [{"wrong": ["output 0 chunk 1: 3 of 16 differ"], "forged": []}] * len(request["rounds"])}

    def late(request):
        return {"rounds": [{"wrong": [], "forged": ["output 0 chunk 3 (elements 48-63)"]}] * len(request["rounds"])}

    assert "is wrong (output 0 chunk 1" in _judge(tmp_path, wrong)[0][0]
    assert "before the parent's clock stopped" in _judge(tmp_path, late)[0][0]
    reasons, result, _ = _judge(tmp_path, lambda request: {"error": "the referee exited"})
    assert reasons == [] and not result.timing_reliable
    assert "could not check the audit rounds" in result.unreliable_reasons[-1]


def test_a_round_the_programs_call_failed_in_leaves_the_timing_unaudited(tmp_path):
    reasons, result, referee = _judge(tmp_path, _fine, error="RuntimeError: not positive definite")
    assert reasons == [] and not result.timing_reliable and not referee.asked
    assert "did not complete (RuntimeError: not positive definite)" in result.unreliable_reasons[-1]


def test_the_reference_allowance_is_wider_on_the_host_clock(tmp_path):
    """The host clock's timed calls carry the harness's per-call host work
    (a tenth of a millisecond), a CUDA event's do not."""

    def tiny(request):
        return {"rounds": [{"wrong": [], "forged": [], "overhead_s": 1e-3, "reference_s": 6e-6}] * 3}

    host = _judge(tmp_path, tiny, cand_ms=40.0, ref_ms=0.036)[1].census["audit"]["reference_side"]
    cuda = _judge(tmp_path, tiny, cand_ms=40.0, ref_ms=0.036, device="cuda")[1].census["audit"]["reference_side"]
    assert host == pytest.approx(0.036 / 0.112, abs=1e-3) and cuda == pytest.approx(0.036 / 0.022, abs=1e-3)


def test_the_reference_is_held_to_the_referees_timed_measure_of_it(tmp_path):
    """On a GPU the referee's calls back to back carry each call's launch
    from Python: a 2.3 us reference took 8 us a call there, so twice that
    plus 10 us let a report multiply the timed reference by 11 unclipped
    (report_inflate_reference). The referee's measure taken by the timing's
    own harness holds it to 1.25 times that plus 1 us: past it
    the reference is paid the allowance, past 2 the timing is unreliable,
    past 4 hacked."""

    def small(timed_s):
        def answer(request):
            rounds = [
                {"wrong": [], "forged": [], "overhead_s": 1e-3, "reference_s": 8e-6, "reference_timed_s": timed_s}
            ] * len(request["rounds"])
            return {"rounds": rounds, "call_bytes": 1 << 16}

        return answer

    allowed = 1.25 * 2.3e-3 + 1e-3  # ms
    # honest: the timed reference as the referee times it
    reasons, result, _ = _judge(tmp_path, small(2.3e-6), cand_ms=40.0, ref_ms=0.0023, device="cuda")
    audit = result.census["audit"]
    assert reasons == [] and result.timing_reliable and "clipped" not in audit
    assert audit["referee_timed_reference_ms"] == pytest.approx(0.0023)
    assert audit["reference_side"] == pytest.approx(0.0023 / allowed, abs=1e-3)
    # 1.9 times (past the allowance: 1.13 times): paid the allowance
    reasons, result, _ = _judge(tmp_path, small(2.3e-6), cand_ms=40.0, ref_ms=0.00437, device="cuda")
    assert reasons == [] and result.timing_reliable and result.ref_runtime_ms == pytest.approx(allowed)
    assert result.census["audit"]["clipped"]["reported"]["ref_runtime_ms"] == pytest.approx(0.00437)
    # 5 and 11 times: unreliable, then hacked (the bound back to back alone
    # passed both: 2 x 8 + 10 = 26 us)
    reasons, result, _ = _judge(tmp_path, small(2.3e-6), cand_ms=40.0, ref_ms=0.0115, device="cuda")
    assert reasons == [] and not result.timing_reliable, result.census["audit"]
    reasons, result, _ = _judge(tmp_path, small(2.3e-6), cand_ms=40.0, ref_ms=0.0253, device="cuda")
    assert reasons and "0.0023 ms timed as the timing times it" in reasons[0], reasons
    # a referee that sent no timed measure: the bound back to back alone
    reasons, result, _ = _judge(tmp_path, small(0.0), cand_ms=40.0, ref_ms=0.0115, device="cuda")
    assert reasons == [] and result.timing_reliable and "clipped" not in result.census["audit"]


def test_the_referee_times_the_reference_on_a_device_clock_and_keeps_its_least(monkeypatch):
    """The referee's measure of the reference: the parent's schedule
    (referee.TimedReferences, over all of a device's referee lanes) asks for
    one at a task and set's 1st, 8th and 64th audit and keeps the least; the
    process (referee_process._timed_reference) measures only when asked,
    none on the host clock (the real backend here: the interpreter's), and a
    reference the harness cannot time gives no measure rather than failing
    the round's check (the parent then holds the report to the bound back to
    back alone). The device clock's measure itself runs on the H100
    (benchmarks/gpu_verify.sh verdicts integrity)."""
    from kernelsmith.backends.base import get_backend
    from kernelsmith.evaluator import correctness, referee_process
    from kernelsmith.evaluator.referee import TimedReferences

    backend, task = get_backend("triton"), Task.load(RELU)
    x = torch.rand(1 << 14)
    state = referee_process._State(torch.nn.ReLU(), [[x.clone()] for _ in range(4)], [x.numel()], correctness)
    req = {"task": task.to_dict(), "set": "get_inputs"}
    assert referee_process._bench_reference(task.config.timing, state, backend) == []  # the host clock

    measures = iter([3e-6, 5e-6, 2e-6])
    monkeypatch.setattr(referee_process, "_bench_reference", lambda cfg, st, be: [next(measures)])
    schedule, key, got = TimedReferences(), (task.id, "get_inputs"), []
    for _ in range(70):
        asked = schedule.plan(key)
        taken = referee_process._timed_reference({**req, "time_reference": asked}, task, state, backend)
        assert bool(taken) == asked, (asked, taken)
        got.append(schedule.record(key, taken))
    assert got[0] == got[6] == 3e-6 and got[7] == got[62] == 3e-6 and got[63] == got[69] == 2e-6, got
    assert schedule.seen[key] == ([70], [3e-6, 5e-6, 2e-6])
    assert referee_process._timed_reference(req, task, state, backend) == []  # not asked: no measure

    def untimeable(cfg, st, be):
        raise RuntimeError("no graph for this one")

    monkeypatch.setattr(referee_process, "_bench_reference", untimeable)
    odd = {**req, "set": "get_inputs_odd", "time_reference": True}
    assert referee_process._timed_reference(odd, task, state, backend) == []
    assert schedule.record((task.id, "get_inputs_odd"), []) == 0.0


def test_a_report_past_the_parents_figures_below_the_threshold_is_paid_what_they_allow(tmp_path):
    """Below the unreliable threshold a report may still claim more than the
    parent's own figures allow. The speedup paid is then the parent's: the
    candidate's runtime raised to the rounds' lower bound, the reference's
    lowered to the referee's allowance, the speedup and its CI by both; the
    report is kept beside. An honest report (each side below 1) is paid as
    reported."""
    # honest: 40 ms reported against at least 36 measured
    reasons, result, _ = _judge(tmp_path, _fine, cand_ms=40.0, ref_ms=12.0)
    assert reasons == [] and result.timing_reliable and result.speedup == pytest.approx(0.3)
    assert "clipped" not in result.census["audit"] and "clip_candidate" not in result.census["audit"]
    # the most an understated report could still be paid in full: one call of
    # 40 ms reported, 3 ms of slack and the 0.25 ms margin over it
    assert result.census["audit"]["headroom"] == pytest.approx(43.25 / 40, abs=1e-4)
    # 30 ms reported where the parent saw at least 36 (a side of 36/30.25):
    # reliable (below 2), but paid at the parent's figure
    reasons, result, _ = _judge(tmp_path, _fine, cand_ms=30.0, ref_ms=12.0)
    side = 36 / 30.25
    assert reasons == [] and result.timing_reliable, result.census["audit"]
    assert result.runtime_ms == pytest.approx(30.0 * side) and result.ref_runtime_ms == pytest.approx(12.0)
    assert result.speedup == pytest.approx(0.4 / side)
    clipped = result.census["audit"]["clipped"]
    assert clipped["reported"]["speedup"] == pytest.approx(0.4) and clipped["reported"]["runtime_ms"] == 30.0
    assert clipped["by"] == pytest.approx(side, abs=1e-4) and clipped["reference"] == 1.0
    # the reference reported at 30 ms where the referee allows 2 x 12 + 0.1:
    # its runtime is brought down to the allowance, the speedup with it
    reasons, result, _ = _judge(tmp_path, _fine, cand_ms=40.0, ref_ms=30.0)
    assert reasons == [] and result.ref_runtime_ms == pytest.approx(24.1) and result.runtime_ms == 40.0
    assert result.speedup == pytest.approx(24.1 / 40.0)
    # a side past 1 where the parent measured the host busy is the load's
    # doing as much as the report's: left as reported
    reasons, result, _ = _judge(tmp_path, _fine, cand_ms=30.0, ref_ms=12.0, loads=[BUSY] * 3)
    assert reasons == [] and result.speedup == pytest.approx(0.4) and "clipped" not in result.census["audit"]


def test_the_clip_keeps_a_figure_past_the_hacked_threshold_hacked(tmp_path):
    # 7x on the candidate's side: hacked, and no figure is paid at all
    reasons, result, _ = _judge(tmp_path, _fine, cand_ms=5.0, ref_ms=12.0)
    assert reasons and "clipped" not in result.census["audit"]
    # 15 ms: unreliable (2.4x), and clipped too: never a best, and never paid
    # more than the parent measured
    reasons, result, _ = _judge(tmp_path, _fine, cand_ms=15.0, ref_ms=12.0)
    assert reasons == [] and not result.timing_reliable
    assert result.runtime_ms == pytest.approx(36 * 15 / 15.25) and result.census["audit"]["clipped"]


def test_the_shapes_clips_combine_as_their_speedups_do(monkeypatch):
    """A task timed on several shapes pays the weighted geometric mean of the
    shapes' speedups (timing.combine_shapes): each side's clip combines by
    the same weights."""
    from kernelsmith.evaluator.trusted import audit_check as C

    verdicts = {"a": C.Judged(clip=(2.0, 1.0), record={}), "b": C.Judged(clip=(1.0, 1.5), record={})}
    # each shape's own judgement as given: only the combination is looked at
    monkeypatch.setattr(C, "judge_rounds", lambda audits, *rest: verdicts[audits[0]["set"]])
    audits = [{"set": "a"}, {"set": "b"}]
    even = C.judge_shapes(audits, False, None, ["a", "b"], lambda n, s: (1.0, 1.0), False)
    weighted = C.judge_shapes(audits, False, None, ["a", "b"], lambda n, s: (1.0, 1.0), False, None, [3.0, 1.0])
    assert even.clip == pytest.approx((2.0**0.5, 1.5**0.5))
    assert weighted.clip == pytest.approx((2.0**0.75, 1.5**0.25))
    figures = {"speedup": 2.0, "speedup_ci_low": 1.8, "speedup_ci_high": 2.2, "runtime_ms": 1.0, "ref_runtime_ms": 2.0}
    reported = C.clip(figures, (2.0, 1.25))
    assert figures == pytest.approx(
        {"speedup": 0.8, "speedup_ci_low": 0.72, "speedup_ci_high": 0.88, "runtime_ms": 2.0, "ref_runtime_ms": 1.6}
    )
    assert reported["reported"]["speedup"] == 2.0 and reported["by"] == 2.5
    assert C.clip(dict(figures), (1.0, 1.0)) is None
    # the verdict the CI implies follows it (a run's best reads it); a
    # rejected timing's stays
    row = {"speedup": 1.2, "speedup_ci_low": 1.1, "speedup_ci_high": 1.3, "verdict": "faster"}
    C.clip(row, (1.15, 1.0))
    assert row["verdict"] == "indistinguishable" and row["speedup_ci_low"] < 1 < row["speedup_ci_high"]
    step = {"speedup": 1.2, "speedup_ci_low": 1.1, "speedup_ci_high": 1.15, "timing_verdict": "faster"}
    assert C.clip(step, (1.2, 1.0))["reported"]["timing_verdict"] == "faster" and step["timing_verdict"] == "slower"
    rejected = {"speedup_ci_low": 1.1, "speedup_ci_high": 1.3, "timing_verdict": "rejected"}
    C.clip(rejected, (2.0, 1.0))
    assert rejected["timing_verdict"] == "rejected"


def test_on_a_gpu_the_slack_takes_a_smaller_share_of_the_other_work(tmp_path):
    """At KernelBench's upstream sizes a round is one call of a few ms beside
    up to 30 ms of input change and hashes: half of that work as slack
    bounded nothing (the H100, session 22). On a GPU (the parent's ticket
    says the timing was not on the host clock) the share is
    DEVICE_SLACK_SHARE; the host clock keeps SLACK_SHARE."""
    from kernelsmith.evaluator.trusted import audit_check as C

    def heavy(request):
        return {"rounds": [{"wrong": [], "forged": [], "overhead_s": 0.030, "reference_s": 0.012}] * 3}

    walls = (0.041, 0.0415, 0.042)  # a 10 ms call, 30 ms of other work, 1 ms round trip
    host = _judge(tmp_path, heavy, walls=walls, cand_ms=10.0, ref_ms=12.0)[1].census["audit"]
    gpu = _judge(tmp_path, heavy, walls=walls, cand_ms=10.0, ref_ms=12.0, device="cuda")[1].census["audit"]
    assert host["slack_ms"] == pytest.approx(2.5 + 0.5 * 30) and host["call_at_least_ms"] == 0
    assert gpu["slack_ms"] == pytest.approx(2.5 + C.DEVICE_SLACK_SHARE * 30)
    assert gpu["call_at_least_ms"] == pytest.approx(41 - 30 - gpu["slack_ms"], abs=1e-3)
    assert 0 < gpu["candidate_side"] < 1 and gpu["headroom"] < host["headroom"], (gpu, host)
    # a report of a third of the call's time is now seen past what was
    # measured, and paid what was; on the host clock's share it is not seen
    forged = _judge(tmp_path, heavy, walls=walls, cand_ms=10.0 / 3, ref_ms=12.0, device="cuda")[1]
    assert forged.census["audit"]["candidate_side"] > 1 and forged.census["audit"]["clipped"]
    assert forged.speedup == pytest.approx(12.0 / (10.0 / 3) / forged.census["audit"]["clip_candidate"], rel=1e-4)
    on_host = _judge(tmp_path, heavy, walls=walls, cand_ms=10.0 / 3, ref_ms=12.0)[1]
    assert on_host.census["audit"]["candidate_side"] == 0 and on_host.speedup == pytest.approx(3.6)


def test_the_round_keeps_when_its_hashes_arrived_beside_when_the_parent_read_them():
    """protocol._answer_done: ``wall_s`` is the parent's clock when its
    thread handled the hashes; ``wall_arrival_s`` when the bytes were there
    (``_core.timing.wait_readable``), kept only where it lies inside the
    round (a record, never judged)."""
    import time

    from kernelsmith.evaluator import protocol as P

    started = time.monotonic() - 0.010
    current = {"started": started}
    P._answer_done({"digests": [[1, 2, 3]]}, current, started + 0.004)
    assert current["wall_arrival_s"] == pytest.approx(0.004) and current["wall_s"] >= 0.010
    late = {"started": started}
    P._answer_done({"digests": [[1, 2, 3]]}, late, time.monotonic() + 5)  # not a time inside the round
    assert "wall_arrival_s" not in late and late["wall_s"] >= 0.010


def test_a_task_timed_on_several_shapes_keeps_its_speedup_the_mean_of_its_clipped_rows():
    """The combined speedup is the weighted geometric mean of the shapes'
    rows (timing.combine_shapes): each row is clipped by its own shape's
    figures, so the clipped speedup is still their mean."""
    import math

    from kernelsmith.evaluator.trusted import audit_check as C
    from kernelsmith.result import EvalResult

    rows = [
        {"shape": "a", "speedup": 2.0, "speedup_ci": [1.8, 2.2], "runtime_ms": 1.0, "ref_runtime_ms": 2.0},
        {"shape": "b", "speedup": 0.5, "speedup_ci": [0.45, 0.55], "runtime_ms": 4.0, "ref_runtime_ms": 2.0},
    ]
    rows[0]["verdict"], rows[1]["verdict"] = "faster", "slower"
    result = EvalResult(compiled=True, correct=True, category="ok", speedup=1.0, speedup_ci_low=0.9)
    result.speedup_ci_high, result.runtime_ms, result.ref_runtime_ms = 1.1, 2.0, 2.0
    result.timing = {"shapes": rows}
    census: dict = {"audit": {"shapes": {"a": {"clip_candidate": 1.5, "clip_reference": 1.0}, "b": {}}}}
    C._clip_result(result, C.Judged(clip=(1.5**0.5, 1.0)), census)
    assert rows[0]["speedup"] == pytest.approx(2 / 1.5) and rows[0]["runtime_ms"] == pytest.approx(1.5)
    assert rows[0]["speedup_ci"] == pytest.approx([1.2, 2.2 / 1.5]) and rows[0]["clipped"]["reported"]["speedup"] == 2.0
    assert rows[1]["speedup"] == 0.5 and "clipped" not in rows[1]
    assert result.speedup == pytest.approx(math.exp((math.log(rows[0]["speedup"]) + math.log(0.5)) / 2))
    assert census["audit"]["clipped"]["reported"]["speedup"] == 1.0
