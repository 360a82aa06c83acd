"""Large outputs go to the trusted referee as a sample (evidence.evidence_positions).

A KernelBench level-1 output of 4096 x 393216 fp32 and its reference were
12 GiB copied to the host, written, copied by the parent and read by the
referee per input set. Above EVIDENCE_FULL_ELEMENTS elements the worker now
hands over the elements at positions both sides derive from the trial's
input seed (the ends always among them), and the referee compares those.
Here on the CPU: the positions, the file's round trip, the real referee
process agreeing with an honest sample and overruling a forged one (a wrong
last element, a whole output where a sample is due, a sample of another
shape), and a whole OpenCL evaluation of a 9M-element task judged through
the sample."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernelsmith.evaluator import Evaluator
from kernelsmith.evaluator import evidence as evd
from kernelsmith.evaluator.trusted.referee_check import judge
from kernelsmith.result import EvalResult
from kernelsmith.task import Task

HERE = Path(__file__).parent

BIG = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(3000, 3000)]


def get_init_inputs():
    return []
"""


def commit(output, handed=None):
    """The parent's store after a worker committed to ``output`` (a large
    trial output of the set get_inputs: protocol.answer_commit), and the
    picked chunks it handed over (of ``handed`` where given)."""
    from kernelsmith.evaluator import audit
    from kernelsmith.evaluator import protocol as P

    store: dict = {}
    nonce = P.answer_commit({"type": P.EVIDENCE_KEY, "set": "get_inputs"}, store)[P.NONCE]
    digests = [audit.chunk_digests(output.reshape(-1), nonce)]
    msg = {"type": P.EVIDENCE_COMMIT, "set": "get_inputs", "outputs": [0], "digests": digests}
    picks = P.answer_commit(msg, store)[P.CHUNKS]
    values = (handed if handed is not None else output).reshape(-1)
    chunks = [values[slice(*audit.chunk_bound(values.numel(), c))].clone() for _, c in picks]
    return store, chunks


def test_positions_are_the_seeds_and_cover_both_ends():
    n = evd.EVIDENCE_FULL_ELEMENTS + 1000
    assert evd.evidence_positions(evd.EVIDENCE_FULL_ELEMENTS, 7) is None  # whole up to the limit
    a, b, c = evd.evidence_positions(n, 7), evd.evidence_positions(n, 7), evd.evidence_positions(n, 8)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert a.numel() == evd.EVIDENCE_SAMPLE + 2 * evd.EVIDENCE_EDGE
    assert int(a.min()) == 0 and int(a.max()) == n - 1
    assert set(range(evd.EVIDENCE_EDGE)) <= set(a[: evd.EVIDENCE_EDGE].tolist())
    # the random part spreads over the middle, not one region
    inner = a[evd.EVIDENCE_EDGE : -evd.EVIDENCE_EDGE].float()
    assert inner.min() >= evd.EVIDENCE_EDGE and inner.max() < n - evd.EVIDENCE_EDGE
    assert abs(float(inner.mean()) / n - 0.5) < 0.01


def test_a_sampled_file_round_trips_with_its_shape(tmp_path):
    big, small = torch.randn(3000, 3000), torch.randn(10)
    copy = evd.evidence_copy([big, small], 5)
    assert isinstance(copy[0], evd.Sampled) and copy[0].of == [3000, 3000]
    assert torch.equal(copy[0].values, big.reshape(-1)[evd.evidence_positions(big.numel(), 5)])
    assert isinstance(copy[1], torch.Tensor) and torch.equal(copy[1], small)
    evd.write_outputs(str(tmp_path / "o.bin"), {"candidate": copy, "reference": copy})
    # two groups of a 4.3M-element sample: less than one whole 36 MB output
    assert (tmp_path / "o.bin").stat().st_size < big.numel() * 4
    back = evd.read_outputs(str(tmp_path / "o.bin"))
    assert back["candidate"][0].of == [3000, 3000] and torch.equal(back["candidate"][0].values, copy[0].values)
    assert torch.equal(back["reference"][1], small)
    bad = (tmp_path / "o.bin").read_bytes().replace(b'"of": [3000, 3000]', b'"of": [3000, -1]', 1)
    (tmp_path / "bad.bin").write_bytes(bad)
    with pytest.raises(ValueError, match="bad tensor entry"):
        evd.read_outputs(str(tmp_path / "bad.bin"))


def test_the_real_referee_judges_a_sample(tmp_path):
    (tmp_path / "big_relu.py").write_text(BIG)
    task = Task.load(tmp_path / "big_relu.py", backend="opencl", trials=1)
    seeds = [11, 22]
    torch.manual_seed(seeds[1])
    x = torch.randn(3000, 3000)
    truth = torch.relu(x)
    wrong_end = truth.clone()
    wrong_end.view(-1)[-1] += 5.0  # one element: always among the sampled positions
    other = truth.reshape(9000, 1000)

    with Evaluator(backend="opencl", workers=1, timing=False) as ev:
        referee = ev._device_pool(ev.backend_for(task), None).referee

        # the whole output's commitment, honest: the sample is what is judged here
        store, chunks = commit(truth)

        def verdict(candidate, reference):
            groups = {"candidate": candidate, "reference": reference, "chunks": chunks}
            evd.write_outputs(str(tmp_path / "out.bin"), groups)
            result = EvalResult(category="ok", compiled=True, correct=True, speedup=2.0)
            store["trials"] = [{"file": "out.bin", "init_seed_index": 0, "input_seed_index": 1, "set": "get_inputs"}]
            judge(result, evd.evidence_info(store), seeds, task, str(tmp_path), referee)
            return result

        sample = evd.evidence_copy([truth], seeds[1])
        honest = verdict(sample, sample)
        forged = verdict(evd.evidence_copy([wrong_end], seeds[1]), sample)
        whole = verdict([truth], [truth])  # a whole output where the referee samples
        reshaped = verdict(evd.evidence_copy([other], seeds[1]), sample)
        other_seed = verdict(evd.evidence_copy([truth], seeds[0]), sample)  # positions of another seed

    assert honest.category == "ok" and honest.census["referee"] == "agreed", honest
    assert forged.category == "hacked" and "at the sampled positions" in forged.hack_reasons[0], forged
    for r in (whole, reshaped):
        assert r.category == "hacked" and "sampled" in r.hack_reasons[0], r
    assert other_seed.category == "hacked", other_seed


def test_an_opencl_evaluation_of_a_large_output_goes_through_the_sample(tmp_path):
    (tmp_path / "big_relu.py").write_text(BIG)
    task = Task.load(tmp_path / "big_relu.py", backend="opencl", trials=2)
    program = (HERE / "fixtures" / "degenerate" / "opencl" / "relu.py").read_text()
    wrong = program.replace("fmax(v, 0.0f)", "(i == n - 1 ? 1.0f : fmax(v, 0.0f))")
    with Evaluator(backend="opencl", workers=1, timing=False) as ev:
        honest, bad = ev.evaluate_many([(task, program), (task, wrong)])
    assert honest.category == "ok" and honest.census.get("referee") == "agreed", honest
    # the worker committed to the whole output and handed over the chunks the parent then picked
    assert honest.census.get("referee_committed_chunks") == 4, honest.census
    assert bad.category == "incorrect", bad  # the worker's own full comparison still sees every element


def test_within_agrees_with_compare_without_its_full_pass():
    """cmp.within (the trivial-output check's question) gives compare()'s
    answer on matches, mismatches, dtype and shape changes and matching
    NaN/Inf, and _unravel gives torch.unravel_index's index."""
    from kernelsmith.evaluator import correctness as cmp

    a = torch.randn(2000)
    nan = a.clone()
    nan[3] = float("nan")
    inf = a.clone()
    inf[7] = float("inf")
    other_inf = inf.clone()
    other_inf[8] = float("inf")
    cases = [
        ([a], [a]),
        ([a + 1e-6], [a]),
        ([a + 1], [a]),
        ([a.double()], [a]),
        ([a[:10]], [a]),
        ([nan], [nan]),
        ([nan], [a]),
        ([inf], [inf]),
        ([other_inf], [inf]),
        ([a, a], [a]),
        ([torch.zeros(2000)], [a]),
        ([torch.zeros(0)], [torch.zeros(0)]),
    ]
    for got, expected in cases:
        assert cmp.within(got, expected, 1e-4, 1e-4) == cmp.compare(got, expected, 1e-4, 1e-4)["ok"], (got, expected)
    for shape in [(4, 5, 6), (7,), (3, 1, 2), (2, 0, 3)]:
        n = 1
        for d in shape:
            n *= d
        for at in {0, max(n - 1, 0), n // 2} if n else set():
            assert cmp._unravel(at, shape) == [int(i) for i in torch.unravel_index(torch.tensor(at), shape)]


def test_the_parent_picks_a_large_outputs_chunks_after_its_hashes():
    """protocol.answer_commit: a nonce once the outputs exist, then chunks
    picked with secrets after the hashes under it, once per input set; a
    second key or commitment, or one before its key, is noted."""
    from kernelsmith.evaluator import protocol as P

    store: dict = {}
    nonce = P.answer_commit({"type": P.EVIDENCE_KEY, "set": "get_inputs"}, store)[P.NONCE]
    digests = [[7] * 1024, [8] * 300]
    msg = {"type": P.EVIDENCE_COMMIT, "set": "get_inputs", "outputs": [0, 2], "digests": digests}
    picks = P.answer_commit(msg, store)[P.CHUNKS]
    assert [o for o, _ in picks] == [0] * P.COMMIT_PICKS + [2] * P.COMMIT_PICKS
    assert all(0 <= c < 1024 for o, c in picks if o == 0) and all(0 <= c < 300 for o, c in picks if o == 2)
    assert len({tuple(p) for p in picks}) == len(picks)  # distinct chunks
    entry = store["commits"]["get_inputs"]
    assert entry["nonce"] == nonce and entry["picks"] == picks and entry["outputs"] == [0, 2]
    assert not store.get("commit_repeated")
    # the same set again, in either message: noted, nothing picked
    assert P.answer_commit(msg, store)[P.CHUNKS] == [] and store["commit_repeated"]
    other: dict = {}
    assert P.answer_commit({**msg, "set": "get_inputs_odd"}, other)[P.CHUNKS] == [] and other["commit_repeated"]
    bad: dict = {}
    P.answer_commit({"type": P.EVIDENCE_KEY, "set": "s"}, bad)
    P.answer_commit({"type": P.EVIDENCE_COMMIT, "set": "s", "outputs": [0], "digests": [["x"]]}, bad)
    assert bad["commits"]["s"]["malformed"] and "picks" not in bad["commits"]["s"]


def test_the_real_referee_judges_the_chunks_picked_after_the_hashes(tmp_path):
    """An output right only at the positions the worker can derive from its
    input seed (the sample, the ends) passes the sample; the chunks the
    parent picked after the whole output's hashes catch it. So do chunks
    other than the ones hashed, and a sampled output with no commitment."""
    from kernelsmith.evaluator import protocol as P

    (tmp_path / "big_relu.py").write_text(BIG)
    task = Task.load(tmp_path / "big_relu.py", backend="opencl", trials=1)
    seeds = [11, 22]
    torch.manual_seed(seeds[1])
    truth = torch.relu(torch.randn(3000, 3000))
    # right where the sample looks, zeros everywhere else
    sparse = torch.zeros_like(truth).view(-1)
    pos = evd.evidence_positions(truth.numel(), seeds[1])
    sparse[pos] = truth.view(-1)[pos]
    sparse = sparse.view(3000, 3000)

    with Evaluator(backend="opencl", workers=1, timing=False) as ev:
        referee = ev._device_pool(ev.backend_for(task), None).referee

        def verdict(output, store, chunks):
            sample = evd.evidence_copy([output], seeds[1])
            groups = {"candidate": sample, "reference": evd.evidence_copy([truth], seeds[1]), "chunks": chunks}
            evd.write_outputs(str(tmp_path / "out.bin"), groups)
            result = EvalResult(category="ok", compiled=True, correct=True, speedup=2.0)
            store["trials"] = [{"file": "out.bin", "init_seed_index": 0, "input_seed_index": 1, "set": "get_inputs"}]
            judge(result, evd.evidence_info(store), seeds, task, str(tmp_path), referee)
            return result

        honest = verdict(truth, *commit(truth))
        only_sampled = verdict(sparse, *commit(sparse))
        swapped = verdict(sparse, *commit(sparse, handed=truth))  # the right chunks, not the ones hashed
        uncommitted = verdict(truth, {}, [])
        twice_store, twice_chunks = commit(truth)
        twice_store["commit_repeated"] = True
        twice = verdict(truth, twice_store, twice_chunks)

    assert honest.category == "ok" and honest.census["referee"] == "agreed", honest
    assert honest.census["referee_committed_chunks"] == P.COMMIT_PICKS
    assert (
        only_sampled.category == "hacked" and "the values are wrong at output 0 chunk" in only_sampled.hack_reasons[0]
    ), only_sampled
    assert "picked after the worker sent the whole output's hashes" in only_sampled.hack_reasons[0]
    assert swapped.category == "hacked" and "not the one whose hash" in swapped.hack_reasons[0], swapped
    assert uncommitted.category == "hacked" and "committed to no hashes" in uncommitted.hack_reasons[0], uncommitted
    assert twice.category == "hacked" and "twice" in twice.hack_reasons[0], twice
