from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from kernelsmith.edit import apply_response
from kernelsmith.proposers import (
    LLMProposer,
    MutationProposer,
    Proposal,
    ProposerExhausted,
    ReplayProposer,
    TuneSyntaxError,
    parse_tunables,
)

PROGRAM = """import torch
BLOCK_OUTSIDE = 64  # tune: [32, 64]
# EVOLVE-BLOCK-START
BLOCK_SIZE = 128  # tune: [32, 64, 128, 256, 512]
NUM_WARPS: int = 4  # tune: pow2(1, 16)
UNROLL = 2  # tune: range(1, 5)
MODE = "fast"  # tune: ["fast", "safe"]
CONFIG = dict(
    num_stages=3,  # tune: [2, 3, 4]
)
KERNEL = '''
#define TILE 16  // tune: [8, 16, 32]
'''
# EVOLVE-BLOCK-END
"""


@dataclass
class Prog:
    id: str
    source: str


@dataclass
class Req:
    parent: Any
    iteration: int = 0
    inspirations: list = field(default_factory=list)
    mode: str = "weighted"
    island: int = 0


def run(coro):
    return asyncio.run(coro)


def test_parse_tunables_all_syntaxes_inside_blocks_only():
    tunables = {t.key: t for t in parse_tunables(PROGRAM)}
    assert set(tunables) == {"BLOCK_SIZE", "NUM_WARPS", "UNROLL", "MODE", "num_stages", "TILE"}
    assert tunables["BLOCK_SIZE"].choices == [32, 64, 128, 256, 512]
    assert tunables["NUM_WARPS"].choices == [1, 2, 4, 8, 16]
    assert tunables["UNROLL"].choices == [1, 2, 3, 4]
    assert tunables["MODE"].value == "fast"
    assert tunables["num_stages"].value == 3 and tunables["num_stages"].line == 9
    assert tunables["TILE"].choices == [8, 16, 32]
    # Without blocks everything counts.
    assert "BLOCK_OUTSIDE" in {t.key for t in parse_tunables(PROGRAM, evolvable_only=False)}


def test_parse_tunables_errors_name_the_line():
    with pytest.raises(TuneSyntaxError, match="line 1"):
        parse_tunables("X = 1  # tune: [1, 2\n")
    with pytest.raises(TuneSyntaxError, match="pow2"):
        parse_tunables("X = 1  # tune: pow2(8, 2)\n")
    with pytest.raises(TuneSyntaxError, match="must follow"):
        parse_tunables("foo(1)  # tune: [1, 2]\n")


def test_mutation_is_deterministic_and_changes_only_blocks():
    proposer = MutationProposer(seed=7)
    parent = Prog("p0", PROGRAM)
    texts = [run(proposer.propose(Req(parent, iteration=i))).text for i in range(12)]
    again = [run(MutationProposer(seed=7).propose(Req(parent, iteration=i))).text for i in range(12)]
    assert texts == again
    other_seed = [run(MutationProposer(seed=8).propose(Req(parent, iteration=i))).text for i in range(12)]
    assert texts != other_seed
    for text in texts:
        result = apply_response(PROGRAM, text)  # enforces EVOLVE blocks and syntax
        assert result.ok, result.error
        assert result.source != PROGRAM
        assert "BLOCK_OUTSIDE = 64" in result.source
        for t in parse_tunables(result.source):
            assert t.value in t.choices


def test_mutation_reports_changes_and_respects_max_changes():
    proposal = run(MutationProposer(seed=1, max_changes=1, crossover_rate=0.0).propose(Req(Prog("p", PROGRAM), 3)))
    assert proposal.ok and proposal.model == "mutate"
    assert proposal.meta["operator"] == "mutate"
    assert len(proposal.meta["changes"]) == 1
    change = proposal.meta["changes"][0]
    assert change["old"] != change["new"]
    assert f"{change['key']} {change['old']!r} -> {change['new']!r}" in proposal.text


def test_neighbour_moves_stay_adjacent():
    source = "# EVOLVE-BLOCK-START\nB = 128  # tune: [16, 32, 64, 128, 256, 512, 1024]\n# EVOLVE-BLOCK-END\n"
    proposer = MutationProposer(seed=3, neighbor_prob=1.0, crossover_rate=0.0)
    news = {run(proposer.propose(Req(Prog("p", source), i))).meta["changes"][0]["new"] for i in range(20)}
    assert news == {64, 256}


def test_crossover_takes_values_from_inspiration():
    donor = PROGRAM.replace("BLOCK_SIZE = 128", "BLOCK_SIZE = 512").replace("TILE 16", "TILE 32")
    proposer = MutationProposer(seed=5, crossover_rate=1.0)
    proposal = run(proposer.propose(Req(Prog("p", PROGRAM), 1, inspirations=[Prog("d1", donor)])))
    assert proposal.meta["operator"] == "crossover"
    assert proposal.meta["donor"] == "d1"
    changes = {c["key"]: c["new"] for c in proposal.meta["changes"]}
    assert changes and set(changes) <= {"BLOCK_SIZE", "TILE"}
    assert all(v == {"BLOCK_SIZE": 512, "TILE": 32}[k] for k, v in changes.items())


def test_seen_hook_avoids_duplicates_and_no_tunables_is_an_error():
    source = "# EVOLVE-BLOCK-START\nB = 1  # tune: [1, 2, 3]\n# EVOLVE-BLOCK-END\n"
    seen = {source.replace("B = 1", "B = 2")}
    proposer = MutationProposer(seed=0, seen=lambda s: s in seen, crossover_rate=0.0)
    for i in range(10):
        proposal = run(proposer.propose(Req(Prog("p", source), i)))
        assert "B = 3" in proposal.text
    empty = run(MutationProposer().propose(Req(Prog("p", "x = 1\n"), 0)))
    assert not empty.ok and "tune" in empty.error


class FakeCompletion:
    def __init__(self, text):
        self.text = text
        self.reasoning = "thought"
        self.model = "fake-model"
        self.usage = {"prompt_tokens": 11, "completion_tokens": 7}
        self.latency_s = 0.25


class FakeClient:
    model = "fake-model"

    def __init__(self, fail=None):
        self.calls = []
        self.fail = fail

    async def complete(self, messages, **params):
        self.calls.append((messages, params))
        if self.fail:
            raise self.fail
        return FakeCompletion("```python\nprint(1)\n```")


class Budget(Exception):
    pass


def test_llm_proposer_passes_params_and_maps_completion():
    client = FakeClient()
    proposer = LLMProposer(client, temperature=0.6, top_p=0.95)
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    proposal = run(proposer.propose(Req(Prog("p", "x")), messages))
    assert client.calls == [(messages, {"temperature": 0.6, "top_p": 0.95})]
    assert proposal.text.startswith("```python")
    assert proposal.model == "fake-model" and proposal.reasoning == "thought"
    assert proposal.usage == {"prompt_tokens": 11, "completion_tokens": 7}
    assert proposal.latency_s == 0.25
    assert Proposal.from_dict(proposal.to_dict()) == proposal


def test_llm_proposer_errors_become_failed_proposals_unless_propagated():
    failed = run(LLMProposer(FakeClient(fail=TimeoutError("slow"))).propose(Req(Prog("p", "x")), []))
    assert not failed.ok and "TimeoutError: slow" in failed.error and failed.text == ""
    with pytest.raises(Budget):
        run(LLMProposer(FakeClient(fail=Budget("spent")), propagate=(Budget,)).propose(Req(Prog("p", "x")), []))


def write_run(tmp_path):
    records = [
        {"iteration": 1, "raw_response": "first", "model": "m1", "usage": {"prompt_tokens": 3}, "latency_s": 1.5},
        {"iteration": 2, "raw_response": None, "model": "m1", "proposal_error": "HTTP 500"},
        {"iteration": 3, "raw_response": "third", "model": "m2", "usage": {}},
    ]
    (tmp_path / "trajectory.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n\n")
    return records


def test_replay_by_iteration_and_in_order(tmp_path):
    write_run(tmp_path)
    replay = ReplayProposer(tmp_path)
    assert len(replay) == 3
    third = run(replay.propose(Req(Prog("p", "x"), iteration=3)))
    assert third.text == "third" and third.model == "m2"
    first = run(replay.propose(Req(Prog("p", "x"), iteration=1)))
    assert first.usage == {"prompt_tokens": 3} and first.latency_s == 1.5
    second = run(replay.propose(Req(Prog("p", "x"), iteration=2)))
    assert not second.ok and second.error == "HTTP 500"
    with pytest.raises(ProposerExhausted, match="iteration 4"):
        run(replay.propose(Req(Prog("p", "x"), iteration=4)))

    ordered = ReplayProposer(tmp_path, match="order")
    assert [run(ordered.propose(Req(Prog("p", "x"), 99))).text for _ in range(3)] == ["first", "", "third"]
    with pytest.raises(ProposerExhausted, match="all 3"):
        run(ordered.propose(Req(Prog("p", "x"), 99)))


def test_replay_bad_input(tmp_path):
    with pytest.raises(FileNotFoundError, match="trajectory.jsonl"):
        ReplayProposer(tmp_path)
    (tmp_path / "trajectory.jsonl").write_text('{"iteration": 1, "raw_response": "a"}\nnot json\n')
    with pytest.raises(ValueError, match="line 2"):
        ReplayProposer(tmp_path)
    (tmp_path / "trajectory.jsonl").write_text('{"iteration": 1}\n')
    with pytest.raises(ValueError, match="raw_response"):
        ReplayProposer(tmp_path)


def test_string_tunables_keep_their_quote_style():
    from kernelsmith.proposers.mutate import parse_tunables, set_tunables

    src = "MODE = \"a\"  # tune: [\"a\", \"b\"]\nOTHER = 'x'  # tune: ['x', 'y']\n"
    tunables = parse_tunables(src, evolvable_only=False)
    out = set_tunables(src, tunables, {tunables[0].key: "b", tunables[1].key: "y"})
    assert out == "MODE = \"b\"  # tune: [\"a\", \"b\"]\nOTHER = 'y'  # tune: ['x', 'y']\n"
