"""Export from real run directories: an offline (mutate) evolution of the
OpenCL softmax example, and a run started from the reference whose scripted
LLM translates it (translation steps). Filters are checked against the
records themselves, formats are parsed back. The runs come from the
session fixture ``runs`` in conftest.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelsmith.cli import main as cli_main
from kernelsmith.evolve import read_trajectory
from kernelsmith.export import (
    RLConfig,
    SFTConfig,
    export_rl,
    export_sft,
    load_run,
    read_jsonl,
    rl_schema,
)

SOFTMAX = Path(__file__).resolve().parent.parent / "examples" / "opencl" / "softmax"


def _expected_sft(run_dir: Path, min_speedup: float = 1.0) -> set[tuple[str, int]]:
    """The SFT selection computed straight from trajectory.jsonl."""
    records = read_trajectory(run_dir)
    reference_ids = {i for r in records if r["kind"] == "seed" and r["name"] == "reference" for i in r["copy_ids"]}
    keep = set()
    for r in records:
        if r["kind"] != "step" or r["status"] != "correct" or not r.get("raw_response"):
            continue
        if r["parent_id"] in reference_ids:
            keep.add((str(run_dir.resolve()), r["step"]))
        elif r["parent_metrics"]["runtime_ms"] / r["metrics"]["runtime_ms"] > min_speedup:
            keep.add((str(run_dir.resolve()), r["step"]))
    return keep


def _kept(out: Path) -> set[tuple[str, int]]:
    return {(m["run_dir"], m["step"]) for m in read_jsonl(out / "metadata.jsonl")}


def test_runs_have_both_kinds_of_steps(runs):
    opt, tr = load_run(runs["opt"]), load_run(runs["tr"])
    assert {s.kind for s in opt.steps} == {"optimization"}
    assert tr.seeds[0].is_reference
    statuses = [s.status for s in tr.steps]
    assert statuses[:2] == ["correct", "edit-failed"]
    assert tr.steps[0].kind == "translation"
    assert opt.task.name == "opencl_softmax" and opt.task.reference_source == (SOFTMAX / "reference.py").read_text()


@pytest.mark.parametrize("min_speedup", [1.0, 0.0])
def test_sft_filters_match_the_records(runs, tmp_path, min_speedup):
    out = tmp_path / "sft"
    summary = export_sft([runs["opt"], runs["tr"]], out, config=SFTConfig(balance="none", min_speedup=min_speedup))
    expected = _expected_sft(runs["opt"], min_speedup) | _expected_sft(runs["tr"], min_speedup)
    assert _kept(out) == expected
    assert summary.kept == len(expected)
    # Every step is accounted for under exactly one reason.
    assert (
        sum(summary.reasons.values())
        == summary.steps_seen
        == len(load_run(runs["opt"]).steps) + len(load_run(runs["tr"]).steps)
    )
    assert summary.reasons.get("dropped:edit-failed", 0) >= 1
    assert summary.reasons.get("kept:translation", 0) >= 1
    written = json.loads((out / "summary.json").read_text())
    assert written["kept"] == summary.kept and written["reasons"] == summary.reasons


def test_sft_messages_are_the_prompt_sent_and_the_response_received(runs, tmp_path):
    out = tmp_path / "sft"
    export_sft([runs["tr"]], out, config=SFTConfig(balance="none", reasoning="think"))
    rows = read_jsonl(out / "kernelsmith_sft.jsonl")
    metas = read_jsonl(out / "metadata.jsonl")
    by_step = {r["step"]: r for r in read_trajectory(runs["tr"]) if r["kind"] == "step"}
    assert rows and len(rows) == len(metas)
    for row, meta in zip(rows, metas):
        record = by_step[meta["step"]]
        assert row["messages"][:-1] == record["prompt"]
        assistant = row["messages"][-1]
        assert assistant["role"] == "assistant"
        assert assistant["content"].endswith(record["raw_response"])
        assert assistant["content"].startswith("<think>\none work-item per row\n</think>")
        assert set(row) == {"messages"}  # provenance stays in metadata.jsonl


def test_sft_formats_parse_back(runs, tmp_path):
    import pyarrow.parquet as pq

    cfg = SFTConfig(balance="none")
    export_sft([runs["opt"], runs["tr"]], tmp_path / "m", "messages", cfg)
    base = read_jsonl(tmp_path / "m" / "kernelsmith_sft.jsonl")
    n = len(base)
    assert n >= 2

    export_sft([runs["opt"], runs["tr"]], tmp_path / "pc", "prompt-completion", cfg)
    pc = read_jsonl(tmp_path / "pc" / "kernelsmith_sft.jsonl")
    assert [r["completion"] for r in pc] == [r["messages"][-1]["content"] for r in base]
    assert all(r["messages"][1]["content"].strip() in p["prompt"] for r, p in zip(base, pc))

    export_sft([runs["opt"], runs["tr"]], tmp_path / "pcc", "prompt-completion", cfg, conversational=True)
    pcc = read_jsonl(tmp_path / "pcc" / "kernelsmith_sft.jsonl")
    assert [r["prompt"] + r["completion"] for r in pcc] == [r["messages"] for r in base]

    export_sft([runs["opt"], runs["tr"]], tmp_path / "lf", "llamafactory", cfg, name="ks")
    info = json.loads((tmp_path / "lf" / "dataset_info.json").read_text())
    assert info["ks"]["file_name"] == "ks.json" and info["ks"]["formatting"] == "sharegpt"
    lf = json.loads((tmp_path / "lf" / "ks.json").read_text())
    assert len(lf) == n
    for row, ref in zip(lf, base):
        assert row["system"] == ref["messages"][0]["content"]
        assert [t["from"] for t in row["conversations"]] == ["human", "gpt"]
        assert row["conversations"][1]["value"] == ref["messages"][-1]["content"]

    export_sft([runs["opt"], runs["tr"]], tmp_path / "al", "llamafactory", cfg, name="ks", llamafactory_style="alpaca")
    info = json.loads((tmp_path / "al" / "dataset_info.json").read_text())
    assert info["ks"]["columns"]["prompt"] == "instruction"
    assert [r["output"] for r in json.loads((tmp_path / "al" / "ks.json").read_text())] == [
        r["messages"][-1]["content"] for r in base
    ]

    export_sft([runs["opt"], runs["tr"]], tmp_path / "pq", "parquet", cfg)
    table = pq.read_table(tmp_path / "pq" / "kernelsmith_sft.parquet")
    assert table.to_pylist() and [r["messages"] for r in table.to_pylist()] == [r["messages"] for r in base]
    assert {"task_id", "difficulty", "kind", "speedup_over_parent", "coverage"} <= set(table.column_names)
    # the kernel census's coverage travels with every sample: the OpenCL
    # programs do all their work in their own kernels
    correct = [r for r in table.to_pylist() if r["status"] == "correct"]
    assert correct and all(r["coverage"] == 1.0 for r in correct), [r["coverage"] for r in correct]


def test_balanced_sampling_across_difficulty(runs, tmp_path):
    difficulty = tmp_path / "difficulty.yaml"
    difficulty.write_text("opencl_softmax: easy\nsoftmax_from_ref: hard\n")
    out = tmp_path / "bal"
    unbalanced = export_sft(
        [runs["opt"], runs["tr"]],
        tmp_path / "all",
        config=SFTConfig(balance="none", min_speedup=0.0),
        difficulty_maps=[difficulty],
    )
    counts = unbalanced.kept_by["difficulty"]
    assert set(counts) == {"easy", "hard"}
    summary = export_sft(
        [runs["opt"], runs["tr"]], out, config=SFTConfig(balance="min", min_speedup=0.0), difficulty_maps=[difficulty]
    )
    smallest = min(counts.values())
    assert summary.kept_by["difficulty"] == {"easy": smallest, "hard": smallest}
    dropped = sum(v for k, v in summary.reasons.items() if k.startswith("dropped:balanced-out"))
    assert dropped == sum(counts.values()) - 2 * smallest
    capped = export_sft(
        [runs["opt"], runs["tr"]],
        tmp_path / "cap",
        config=SFTConfig(balance="cap", per_category=1, min_speedup=0.0),
        difficulty_maps=[difficulty],
    )
    assert capped.kept_by["difficulty"] == {"easy": 1, "hard": 1}


def test_same_seed_same_bytes(runs, tmp_path):
    cfg = SFTConfig(balance="none", min_speedup=0.0, seed=3)
    export_sft([runs["opt"], runs["tr"]], tmp_path / "a", config=cfg)
    export_sft([runs["opt"], runs["tr"]], tmp_path / "b", config=cfg)
    assert (tmp_path / "a" / "kernelsmith_sft.jsonl").read_bytes() == (
        tmp_path / "b" / "kernelsmith_sft.jsonl"
    ).read_bytes()
    export_rl([runs["opt"], runs["tr"]], tmp_path / "ra", "jsonl", RLConfig(strategy="all", seed=3))
    export_rl([runs["opt"], runs["tr"]], tmp_path / "rb", "jsonl", RLConfig(strategy="all", seed=3))
    assert (tmp_path / "ra" / "train.jsonl").read_bytes() == (tmp_path / "rb" / "train.jsonl").read_bytes()


def _trusted_runtime(record: dict) -> bool:
    """A correct, timed record whose timing the evaluator trusted (an
    unreliable or suspicious one never sets a best)."""
    metrics = record.get("metrics") or {}
    return (
        record["status"] == "correct"
        and bool(metrics.get("runtime_ms"))
        and not metrics.get("unreliable")
        and not metrics.get("suspicious")
    )


def _lineage_min_runtime(records: list[dict], parent_id: int) -> float:
    by_id = {}
    for r in records:
        if r["kind"] == "seed":
            for i in r["copy_ids"]:
                by_id[i] = (r, -1)
        elif r.get("child_id") is not None:
            by_id[r["child_id"]] = (r, r["parent_id"])
    best, node = float("inf"), parent_id
    while node in by_id:
        record, parent = by_id[node]
        if _trusted_runtime(record):
            best = min(best, record["metrics"]["runtime_ms"])
        node = parent
    return best


def test_rl_strategies_and_one_schema(runs, tmp_path):
    import pyarrow.parquet as pq

    dirs = [runs["opt"], runs["tr"]]
    results = {}
    for strategy in ("best", "all", "initial"):
        out = tmp_path / strategy
        summary = export_rl(dirs, out, config=RLConfig(strategy=strategy))
        table = pq.read_table(out / "train.parquet")
        assert table.schema == rl_schema()
        rows = table.to_pylist()
        assert len(rows) == summary.kept
        results[strategy] = rows
        for row in rows:
            assert row["reward_model"]["style"] == "rule"
            truth = json.loads(row["reward_model"]["ground_truth"])
            assert truth["parent_source"] == row["extra_info"]["parent"]["source"]
            assert row["prompt"][0]["role"] == "system" and row["prompt"][-1]["role"] == "user"
            assert row["extra_info"]["task"]["reference_source"] == (SOFTMAX / "reference.py").read_text()
    records = {str(d.resolve()): read_trajectory(d) for d in dirs}
    steps = {(k, r["step"]): r for k, recs in records.items() for r in recs if r["kind"] == "step"}
    # all: every step with a usable parent (here: every step)
    assert len(results["all"]) == len(steps)
    # initial: one row per seed program of each run, whose parent is that seed
    assert len(results["initial"]) == 2
    assert all(
        steps[(r["extra_info"]["run_dir"], r["extra_info"]["step"])]["parent_id"] in (0, 1, 2, 3)
        for r in results["initial"]
    )
    # best: correct children faster than every ancestor of their parent
    expected = set()
    for (run_dir, step), r in steps.items():
        if _trusted_runtime(r):
            if r["metrics"]["runtime_ms"] < _lineage_min_runtime(records[run_dir], r["parent_id"]):
                expected.add((run_dir, step))
    assert {(r["extra_info"]["run_dir"], r["extra_info"]["step"]) for r in results["best"]} == expected
    # the first correct translation of the reference is a best step, where
    # its timing was trusted (on a machine too busy for that, it is not)
    translations = [
        r
        for r in results["all"]
        if r["extra_info"]["kind"] == "translation"
        and _trusted_runtime(steps[(r["extra_info"]["run_dir"], r["extra_info"]["step"])])
    ]
    assert all(r["extra_info"]["recorded"]["child_coverage"] == 1.0 for r in results["best"])
    if translations:
        translation = next(r for r in results["best"] if r["extra_info"]["kind"] == "translation")
        assert translation["extra_info"]["parent"]["is_reference"]
        assert translation["extra_info"]["parent"]["speedup"] == 1.0


def test_rl_val_split_by_task_and_cli(runs, tmp_path, capsys):
    out = tmp_path / "cli"
    code = cli_main(
        [
            "export",
            "rl",
            str(runs["opt"]),
            str(runs["tr"]),
            "-o",
            str(out),
            "--strategy",
            "all",
            "--val-fraction",
            "0.5",
            "--seed",
            "1",
            "--json",
        ]
    )
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    train, val = read_jsonl_parquet(out / "train.parquet"), read_jsonl_parquet(out / "val.parquet")
    assert printed["kept"] == len(train) + len(val) and train and val
    assert not {r["extra_info"]["task"]["id"] for r in train} & {r["extra_info"]["task"]["id"] for r in val}
    assert [r["extra_info"]["index"] for r in val] == list(range(len(val)))
    assert cli_main(["export", "sft", str(runs["opt"]), "-o", str(tmp_path / "bad"), "--balance", "cap"]) == 2


def read_jsonl_parquet(path: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def test_rl_lengths_warning_compaction_and_openrlhf_columns(runs, tmp_path):
    from kernelsmith.export.lengths import TokenCounter
    from kernelsmith.rewards import item_from_verl

    both = [runs["opt"], runs["tr"]]
    plain = export_rl(both, tmp_path / "plain", "jsonl", RLConfig(strategy="all"))
    lengths = plain.lengths
    assert lengths["method"].startswith("chars/4") and lengths["rows_over_limit"] == 0
    longest = lengths["prompt_tokens"]["max"]
    # Prompts are longer than verl's default limit: the export says so and what to set.
    assert longest > 512 and any("data.max_prompt_length" in w for w in plain.warnings)

    limit = int(longest * 0.8)
    warned = export_rl(both, tmp_path / "warned", "jsonl", RLConfig(strategy="all", max_prompt_tokens=limit))
    over = warned.lengths["rows_over_limit"]
    assert over >= 1 and any(f"{over} of " in w and f"{limit} tokens" in w for w in warned.warnings)

    compact = export_rl(
        both, tmp_path / "compact", "jsonl", RLConfig(strategy="all", max_prompt_tokens=limit, compact=True)
    )
    assert compact.lengths["rows_compacted"] >= 1 and compact.lengths["prompt_tokens"]["max"] <= limit

    def key(row):
        return row["extra_info"]["run_dir"], row["extra_info"]["request_id"]

    before = {key(r): r for r in read_jsonl(tmp_path / "plain" / "train.jsonl")}
    counter = TokenCounter()
    changed = 0
    for row in read_jsonl(tmp_path / "compact" / "train.jsonl"):
        user, original = row["prompt"][-1]["content"], before[key(row)]["prompt"][-1]["content"]
        assert counter.messages(row["prompt"]) <= limit or user == original
        # What the model must see stays: the task, the reference, the current program, the instruction.
        for section in ("## Reference module", "## Current program", "## What to do"):
            assert section in user
        if user != original:
            changed += 1
            assert len(user) < len(original)
    assert changed == compact.lengths["rows_compacted"]

    flat = export_rl(both, tmp_path / "openrlhf", "openrlhf", RLConfig(strategy="all"))
    rows = read_jsonl(tmp_path / "openrlhf" / "train.jsonl")
    assert len(rows) == flat.kept and all(set(r) == {"prompt", "label"} for r in rows)
    label = json.loads(rows[0]["label"])
    assert label["task"]["reference_source"] == (SOFTMAX / "reference.py").read_text() and label["parent_source"]
    item = item_from_verl("completion", rows[0]["label"], None)  # what serve's /get_reward builds from it
    assert item["task"] == label["task"] and item["parent_source"] == label["parent_source"]
