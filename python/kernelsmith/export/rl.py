"""RL export: prompts (states) for on-policy training, as verl rows.

A row is the prompt of one recorded step: the parent program with its
metrics, the history and the top programs the loop showed at that moment.
The policy writes a fresh completion for it and the reward is that
completion's speedup over the parent (:mod:`kernelsmith.rewards`).

Step selection strategies:

``best`` (default)
    Steps whose child was correct and faster than the best speedup reached
    *before* it, where "before" is set by ``best_scope``:

    * ``lineage`` (default): the best speedup over the reference among the
      parent and all its ancestors back to the seed -- the parent's best so
      far. The step improved on everything its line of descent had reached.
    * ``island``: the best correct speedup on the step's island among the
      steps applied before it (seeds included).
    * ``run``: the best in the whole run before the step (record-breaking steps).

    A timing the evaluator judged unreliable (contention, drift) or below
    the hardware floor sets no best and is not selected, as in the evolve
    loop. A reference seed counts as speedup 0, so the first correct translation
    of a run started from the reference is always selected. These are
    states from which a real improvement was shown to be reachable.
``all``
    Every step whose parent is a known, correct program (or the reference).
``initial``
    Only the first step from each seed program of each run: the state
    "here is the starting program, make it faster".

Rows with the same prompt are kept once. Every row has the same keys and
types (missing numbers are 0.0; a runtime of 0 means unknown), so the rows
make one parquet table that verl reads as it is.
"""

from __future__ import annotations

import dataclasses
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from .formats import RL_FORMATS, write_jsonl, write_parquet
from .sft import ExportSummary
from .steps import RecordedProgram, Run, Step
from .lengths import LengthReport, TokenCounter, compact_messages

STRATEGIES = ("best", "all", "initial")
BEST_SCOPES = ("lineage", "island", "run")


@dataclass
class RLConfig:
    #: best | all | initial (see the module docstring)
    strategy: str = "best"
    #: what "best so far" is compared against for strategy best
    best_scope: str = "lineage"
    #: verl's data_source column; the reward function is picked by it
    data_source: str = "kernelsmith"
    #: verl's ability column
    ability: str = "kernel-optimization"
    #: fraction of rows (by task, so no task is in both) held out as validation
    val_fraction: float = 0.0
    #: at most this many rows (after shuffling); None = all
    max_rows: Optional[int] = None
    #: how a completion is applied to the parent: diff | full | auto
    edit_mode: str = "auto"
    seed: int = 0
    #: tokenizer (a local path) for the length report; None: characters / 4
    tokenizer: Optional[str] = None
    #: warn about prompts longer than this many tokens (set it to the
    #: trainer's limit, e.g. verl's data.max_prompt_length)
    max_prompt_tokens: Optional[int] = None
    #: drop optional prompt parts (inspirations, top programs, history) of
    #: prompts over max_prompt_tokens until they fit
    compact: bool = False

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got '{self.strategy}'")
        if self.best_scope not in BEST_SCOPES:
            raise ValueError(f"best_scope must be one of {', '.join(BEST_SCOPES)}, got '{self.best_scope}'")
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in [0, 1), got {self.val_fraction}")
        if self.edit_mode not in ("diff", "full", "auto"):
            raise ValueError(f"edit_mode must be diff, full or auto, got '{self.edit_mode}'")


INF = float("inf")


def _program_runtime(program: RecordedProgram) -> float:
    """Runtime of a correct, timed program; inf for anything else (the
    reference seed included: any correct translation beats "no kernel")."""
    if program.is_reference or program.status != "correct" or _untrusted(program.metrics):
        return INF
    value = program.metrics.get("runtime_ms")
    return float(value) if isinstance(value, (int, float)) and value > 0 else INF


def _untrusted(metrics: Any) -> bool:
    """A timing the evaluator judged unreliable (contention, drift) or below
    the hardware floor: it never sets a best, as in the evolve loop."""
    return bool((metrics or {}).get("unreliable") or (metrics or {}).get("suspicious"))


def _lineage_best(run: Run, program: RecordedProgram) -> float:
    best, seen = INF, set()
    node: Optional[RecordedProgram] = program
    while node is not None and node.id not in seen:
        seen.add(node.id)
        best = min(best, _program_runtime(node))
        node = run.programs.get(node.parent_id) if node.parent_id >= 0 else None
    return best


def select_steps(run: Run, config: RLConfig, summary: ExportSummary) -> list[Step]:
    """The steps of one run the strategy selects; others are counted by reason.

    "Best so far" compares runtimes measured in the run (lower is better),
    not speedups over the reference: a disturbed reference timing can
    inflate one evaluation's speedup, while the candidate's own runtime is
    what the search improves.
    """
    chosen: list[Step] = []
    seed_best = min((_program_runtime(p) for p in run.seeds), default=INF)
    run_best = seed_best
    island_best: dict[int, float] = {}
    initial_sources: set[str] = set()
    for step in run.steps:
        summary.steps_seen += 1
        island = int(step.record.island) if step.record.island is not None else -1
        before_run, before_island = run_best, island_best.get(island, seed_best)
        child_runtime = step.child_runtime_ms if step.status == "correct" and not _untrusted(step.metrics) else None
        # Every step updates the running bests, chosen or not.
        if child_runtime:
            run_best = min(run_best, child_runtime)
            island_best[island] = min(before_island, child_runtime)
        reason = _usable(step)
        if reason:
            summary.count(reason)
            continue
        if config.strategy == "all":
            chosen.append(step)
            summary.count("kept:all")
        elif config.strategy == "initial":
            if step.parent.is_seed and step.parent.source not in initial_sources:
                initial_sources.add(step.parent.source)
                chosen.append(step)
                summary.count("kept:initial")
            else:
                summary.count("dropped:not-initial" if not step.parent.is_seed else "dropped:seed-already-used")
        else:
            if step.status != "correct":
                summary.count(f"dropped:{step.status}")
                continue
            if not child_runtime:
                summary.count("dropped:unreliable-timing" if _untrusted(step.metrics) else "dropped:untimed")
                continue
            before = {"run": before_run, "island": before_island, "lineage": _lineage_best(run, step.parent)}[
                config.best_scope
            ]
            if child_runtime < before:
                chosen.append(step)
                summary.count(f"kept:improved-on-{config.best_scope}-best")
            else:
                summary.count(f"dropped:not-above-{config.best_scope}-best")
    return chosen


def _usable(step: Step) -> Optional[str]:
    if step.parent is None:
        return "dropped:unknown-parent"
    if not step.prompt:
        return "dropped:no-prompt"
    if not step.parent.is_reference and step.parent.status != "correct":
        return "dropped:parent-not-correct"
    return None


def _reference_runtime(run: Run) -> float:
    """The reference's runtime as measured in the run (median over evaluations)."""
    values = sorted(
        float(s.metrics["ref_runtime_ms"])
        for s in run.steps
        if isinstance(s.metrics.get("ref_runtime_ms"), (int, float)) and s.metrics["ref_runtime_ms"] > 0
    )
    values += [
        float(p.metrics["ref_runtime_ms"])
        for p in run.seeds
        if isinstance(p.metrics.get("ref_runtime_ms"), (int, float)) and p.metrics["ref_runtime_ms"] > 0
    ]
    values.sort()
    return values[len(values) // 2] if values else 0.0


def make_row(step: Step, run: Run, config: RLConfig, index: int, split: str) -> dict[str, Any]:
    parent = step.parent
    assert parent is not None
    ref_runtime = float(step.parent.metrics.get("ref_runtime_ms") or 0.0) or _reference_runtime(run)
    parent_runtime = float(step.parent_runtime_ms or (ref_runtime if parent.is_reference else 0.0))
    parent_speedup = float(step.parent_speedup or 0.0)
    truth = {
        "task_id": step.task.id,
        "kind": step.kind,
        "parent_source": parent.source,
        "parent_runtime_ms": parent_runtime,
        "parent_speedup": parent_speedup,
        "ref_runtime_ms": ref_runtime,
        "edit_mode": config.edit_mode,
    }
    return {
        "data_source": config.data_source,
        "prompt": step.prompt,
        "ability": config.ability,
        "reward_model": {"style": "rule", "ground_truth": json.dumps(truth, sort_keys=True)},
        "extra_info": {
            "index": int(index),
            "split": split,
            "strategy": config.strategy,
            "kind": step.kind,
            "task": step.task.to_dict(),
            "parent": {
                "id": int(parent.id),
                "source": parent.source,
                "runtime_ms": parent_runtime,
                "speedup": parent_speedup,
                "is_reference": bool(parent.is_reference),
            },
            "ref_runtime_ms": ref_runtime,
            "edit_mode": config.edit_mode,
            "run_dir": step.run_dir,
            "step": int(step.step),
            "request_id": int(step.request_id),
            "island": int(step.record.island) if step.record.island is not None else -1,
            "recorded": {
                "status": step.status,
                "model": str(step.record.model or ""),
                "response": step.response or "",
                "speedup_over_parent": float(step.speedup_over_parent or 0.0),
                "child_speedup": float(step.child_speedup or 0.0),
                "child_runtime_ms": float(step.child_runtime_ms or 0.0),
                "child_coverage": step.coverage,
                "child_sol_fraction": step.speed_of_light[0],
                "child_sol_bound": step.speed_of_light[1],
            },
        },
    }


def rl_schema() -> Any:
    """The pyarrow schema of every RL row (pinned, so empty columns keep their types)."""
    import pyarrow as pa

    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    task = pa.struct(
        [
            (k, pa.string())
            for k in ("id", "name", "path", "original_path", "reference_source", "backend", "config_json", "difficulty")
        ]
    )
    parent = pa.struct(
        [
            ("id", pa.int64()),
            ("source", pa.string()),
            ("runtime_ms", pa.float64()),
            ("speedup", pa.float64()),
            ("is_reference", pa.bool_()),
        ]
    )
    recorded = pa.struct(
        [
            ("status", pa.string()),
            ("model", pa.string()),
            ("response", pa.string()),
            ("speedup_over_parent", pa.float64()),
            ("child_speedup", pa.float64()),
            ("child_runtime_ms", pa.float64()),
            ("child_coverage", pa.float64()),
            ("child_sol_fraction", pa.float64()),
            ("child_sol_bound", pa.string()),
        ]
    )
    extra = pa.struct(
        [
            ("index", pa.int64()),
            ("split", pa.string()),
            ("strategy", pa.string()),
            ("kind", pa.string()),
            ("task", task),
            ("parent", parent),
            ("ref_runtime_ms", pa.float64()),
            ("edit_mode", pa.string()),
            ("run_dir", pa.string()),
            ("step", pa.int64()),
            ("request_id", pa.int64()),
            ("island", pa.int64()),
            ("recorded", recorded),
        ]
    )
    return pa.schema(
        [
            ("data_source", pa.string()),
            ("prompt", pa.list_(message)),
            ("ability", pa.string()),
            ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
            ("extra_info", extra),
        ]
    )


def select_rl(runs: Sequence[Run], config: RLConfig) -> tuple[dict[str, list[dict[str, Any]]], ExportSummary]:
    """Rows per split ("train", and "val" when val_fraction > 0)."""
    summary = ExportSummary(kind="rl", runs=[r.path for r in runs], config=dataclasses.asdict(config))
    picked: list[tuple[Step, Run]] = []
    seen_prompts: set[str] = set()
    for run in runs:
        for step in select_steps(run, config, summary):
            key = json.dumps(step.prompt, sort_keys=True)
            if key in seen_prompts:
                summary.count("dropped:duplicate-prompt")
                continue
            seen_prompts.add(key)
            picked.append((step, run))
    rng = random.Random(config.seed)
    rng.shuffle(picked)
    if config.max_rows is not None and len(picked) > config.max_rows:
        for _ in picked[config.max_rows :]:
            summary.count("dropped:max-rows")
        picked = picked[: config.max_rows]
    val_tasks: set[str] = set()
    if config.val_fraction > 0:
        tasks = sorted({s.task.id for s, _ in picked})
        rng.shuffle(tasks)
        n_val = max(1, round(len(tasks) * config.val_fraction)) if len(tasks) > 1 else 0
        val_tasks = set(tasks[:n_val])
    splits: dict[str, list[dict[str, Any]]] = {"train": []}
    if config.val_fraction > 0:
        splits["val"] = []
    for step, run in picked:
        split = "val" if step.task.id in val_tasks else "train"
        splits[split].append(make_row(step, run, config, len(splits[split]), split))
    measure_rl(splits, config, summary)
    summary.kept = sum(len(v) for v in splits.values())
    for split, rows in splits.items():
        summary.kept_by.setdefault("split", {})[split] = len(rows)
        for row in rows:
            for key, value in (
                ("kind", row["extra_info"]["kind"]),
                ("difficulty", row["extra_info"]["task"]["difficulty"]),
            ):
                bucket = summary.kept_by.setdefault(key, {})
                bucket[value] = bucket.get(value, 0) + 1
    return splits, summary


def measure_rl(splits: dict[str, list[dict[str, Any]]], config: RLConfig, summary: ExportSummary) -> None:
    """Prompt lengths into the summary; compacts prompts when asked."""
    counter = TokenCounter(config.tokenizer)
    report = LengthReport(counter.method, config.max_prompt_tokens, compact=config.compact)
    for rows in splits.values():
        for row in rows:
            tokens = counter.messages(row["prompt"])
            if config.compact and config.max_prompt_tokens is not None and tokens > config.max_prompt_tokens:
                fitted = compact_messages(row["prompt"], config.max_prompt_tokens, counter.messages)
                if fitted.dropped:
                    row["prompt"], tokens = fitted.messages, fitted.tokens
                    report.compacted += 1
            report.add(tokens)
    summary.lengths = report.to_dict()
    warning = report.warning("prompt")
    if warning:
        summary.warnings.append(warning)
    elif config.max_prompt_tokens is None and report.prompt and max(report.prompt) > 512:
        # verl's RLHFDataset default (max_prompt_length 512, overlong prompts
        # filtered) would silently keep no row at all.
        summary.warnings.append(
            f"prompts are up to {max(report.prompt)} tokens ({counter.method}); set the trainer's prompt limit "
            f"above that (verl: data.max_prompt_length; its default 512 drops them) or export with "
            f"--max-tokens N --compact"
        )


def openrlhf_row(row: dict[str, Any]) -> dict[str, Any]:
    """OpenRLHF's flat columns: ``prompt`` (chat messages, for
    ``--input_key prompt --apply_chat_template``) and ``label`` (a string,
    for ``--label_key label``) that ``kernelsmith serve``'s /get_reward
    scores against: the ground truth with the task inline, so the server
    needs no registered task."""
    truth = json.loads(row["reward_model"]["ground_truth"])
    truth["task"] = row["extra_info"]["task"]
    return {"prompt": row["prompt"], "label": json.dumps(truth, sort_keys=True)}


def write_rl(splits: dict[str, list[dict[str, Any]]], out: Path, fmt: str = "parquet") -> list[Path]:
    if fmt not in RL_FORMATS:
        raise ValueError(f"RL format must be one of {', '.join(RL_FORMATS)}, got '{fmt}'")
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for split, rows in splits.items():
        if fmt == "parquet":
            path = out / f"{split}.parquet"
            write_parquet(path, rows, rl_schema())
        elif fmt == "openrlhf":
            path = out / f"{split}.jsonl"
            write_jsonl(path, (openrlhf_row(r) for r in rows))
        else:
            path = out / f"{split}.jsonl"
            write_jsonl(path, rows)
        files.append(path)
    return files
