"""SFT export: trajectories decomposed into single-turn samples.

A sample is the prompt that was sent at one step and the response that was
received. Which steps become samples:

* translation steps (the parent is the PyTorch reference): every correct one;
* optimization steps (the parent is a kernel): correct ones whose speedup
  over the parent exceeds ``min_speedup`` (default 1.0).

Then exact duplicates (same prompt and response) are dropped and the rest is
balanced across difficulty categories. Every dropped step is counted under
the reason it was dropped (:class:`ExportSummary`).
"""

from __future__ import annotations

import collections
import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from .formats import (
    SFT_FORMATS,
    llamafactory_dataset_info,
    render_text,
    split_system,
    write_jsonl,
    write_parquet,
)
from .steps import Run, Step
from .lengths import LengthReport, TokenCounter, compact_messages

BALANCE_MODES = ("none", "min", "cap")
REASONING_MODES = ("drop", "think", "field")


@dataclass
class SFTConfig:
    #: optimization steps are kept when speedup over the parent > this
    min_speedup: float = 1.0
    #: translation steps are kept when speedup over the reference >= this
    #: (0 = every correct translation, the default)
    min_translation_speedup: float = 0.0
    #: keep translation / optimization steps at all
    include_translation: bool = True
    include_optimization: bool = True
    #: "min": every difficulty category cut down to the smallest one's size;
    #: "cap": at most ``per_category`` per category; "none": keep all
    balance: str = "min"
    per_category: Optional[int] = None
    #: at most this many samples in all (after balancing); None = no limit
    max_samples: Optional[int] = None
    #: "drop": the response only; "think": reasoning prepended inside
    #: <think>...</think>; "field": reasoning in the assistant message's
    #: ``reasoning_content`` (a column of its own in parquet)
    reasoning: str = "drop"
    seed: int = 0
    #: tokenizer (a local path) for the length report; None: characters / 4
    tokenizer: Optional[str] = None
    #: warn about samples longer than this (prompt + completion, in tokens)
    max_tokens: Optional[int] = None
    #: drop optional prompt parts (inspirations, top programs, history) of
    #: samples over max_tokens until they fit
    compact: bool = False

    def __post_init__(self) -> None:
        if self.balance not in BALANCE_MODES:
            raise ValueError(f"balance must be one of {', '.join(BALANCE_MODES)}, got '{self.balance}'")
        if self.balance == "cap" and not self.per_category:
            raise ValueError("balance 'cap' needs per_category (--per-category N)")
        if self.reasoning not in REASONING_MODES:
            raise ValueError(f"reasoning must be one of {', '.join(REASONING_MODES)}, got '{self.reasoning}'")


@dataclass
class Sample:
    prompt: list[dict[str, str]]
    response: str
    reasoning: Optional[str]
    meta: dict[str, Any]

    def key(self) -> str:
        blob = json.dumps([self.prompt, self.response], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()


@dataclass
class ExportSummary:
    """What was kept and why: counts per decision reason."""

    kind: str
    runs: list[str]
    steps_seen: int = 0
    kept: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    kept_by: dict[str, dict[str, int]] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    lengths: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def count(self, reason: str) -> None:
        self.reasons[reason] = self.reasons.get(reason, 0) + 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "runs": list(self.runs),
            "steps_seen": self.steps_seen,
            "kept": self.kept,
            "reasons": dict(sorted(self.reasons.items())),
            "kept_by": {k: dict(sorted(v.items())) for k, v in sorted(self.kept_by.items())},
            "config": self.config,
            "files": list(self.files),
            "lengths": self.lengths,
            "warnings": list(self.warnings),
        }

    def render(self) -> str:
        lines = [f"{self.kind} export: {self.kept} kept of {self.steps_seen} steps from {len(self.runs)} run(s)"]
        for reason, n in sorted(self.reasons.items()):
            lines.append(f"  {reason:<40} {n}")
        for key, counts in sorted(self.kept_by.items()):
            lines.append(f"  kept by {key}: " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())))
        if self.lengths:
            lengths = self.lengths
            for key in ("prompt_tokens", "completion_tokens"):
                if lengths.get(key):
                    lines.append(
                        f"  {key.replace('_', ' ')} ({lengths['method']}): "
                        + ", ".join(f"{k} {v}" for k, v in lengths[key].items())
                    )
            if lengths.get("rows_compacted"):
                fallback = f"compacted {lengths['rows_compacted']} prompt(s) over {lengths['limit']} tokens"
                lines.append("  " + (lengths.get("compacted_line") or fallback))
        for warning in self.warnings:
            lines.append(f"  WARNING: {warning}")
        for path in self.files:
            lines.append(f"  wrote {path}")
        return "\n".join(lines)


def classify_sft(step: Step, config: SFTConfig) -> str:
    """The decision for one step: a reason starting with ``kept:`` or ``dropped:``."""
    if step.parent is None:
        return "dropped:unknown-parent"
    if step.response is None:
        return "dropped:no-response"
    if step.status != "correct":
        return f"dropped:{step.status}"
    if step.kind == "translation":
        if not config.include_translation:
            return "dropped:translation-excluded"
        speedup = step.speedup_over_parent
        if config.min_translation_speedup > 0 and (speedup is None or speedup < config.min_translation_speedup):
            return "dropped:translation-below-threshold"
        return "kept:translation"
    if not config.include_optimization:
        return "dropped:optimization-excluded"
    speedup = step.speedup_over_parent
    if speedup is None:
        return "dropped:no-parent-timing"
    if speedup <= config.min_speedup:
        return "dropped:not-faster-than-parent"
    return "kept:optimization"


def step_meta(step: Step) -> dict[str, Any]:
    """Provenance of a sample; the same keys and types for every sample."""
    return {
        "run_dir": step.run_dir,
        "task_id": step.task.id,
        "task_name": step.task.name,
        "difficulty": step.task.difficulty,
        "kind": step.kind,
        "step": step.step,
        "request_id": step.request_id,
        "parent_id": step.parent.id if step.parent else -1,
        "child_id": int(step.record.child_id) if step.record.child_id is not None else -1,
        "status": step.status,
        "model": str(step.record.model or ""),
        "speedup_over_parent": float(step.speedup_over_parent or 0.0),
        "speedup": float(step.child_speedup or 0.0),
        "coverage": step.coverage,
        # the child's fraction of the device's peak and its bound (speed of light)
        "sol_fraction": step.speed_of_light[0],
        "sol_bound": step.speed_of_light[1],
    }


def select_sft(runs: Sequence[Run], config: SFTConfig) -> tuple[list[Sample], ExportSummary]:
    summary = ExportSummary(kind="sft", runs=[r.path for r in runs], config=_config_dict(config))
    candidates: list[Sample] = []
    seen: set[str] = set()
    for run in runs:
        for step in run.steps:
            summary.steps_seen += 1
            decision = classify_sft(step, config)
            if decision.startswith("dropped:"):
                summary.count(decision)
                continue
            sample = Sample(
                prompt=step.prompt, response=step.response or "", reasoning=step.reasoning, meta=step_meta(step)
            )
            key = sample.key()
            if key in seen:
                summary.count("dropped:duplicate-sample")
                continue
            seen.add(key)
            summary.count(decision)
            candidates.append(sample)
    kept = _balance(candidates, config, summary)
    measure_sft(kept, config, summary)
    summary.kept = len(kept)
    for sample in kept:
        for key in ("difficulty", "kind", "task_name"):
            bucket = summary.kept_by.setdefault(key, {})
            bucket[sample.meta[key]] = bucket.get(sample.meta[key], 0) + 1
    return kept, summary


def measure_sft(samples: list[Sample], config: SFTConfig, summary: ExportSummary) -> None:
    """Token lengths into the summary; compacts prompts when asked."""
    counter = TokenCounter(config.tokenizer)
    report = LengthReport(counter.method, config.max_tokens, compact=config.compact)
    for sample in samples:
        completion = counter.text(sample.response)
        prompt = counter.messages(sample.prompt)
        if config.compact and config.max_tokens is not None and prompt + completion > config.max_tokens:
            fitted = compact_messages(sample.prompt, config.max_tokens - completion, counter.messages)
            if fitted.dropped:
                sample.prompt, prompt = fitted.messages, fitted.tokens
                report.compacted += 1
        report.add(prompt, completion)
    summary.lengths = report.to_dict()
    warning = report.warning("prompt + completion")
    if warning:
        summary.warnings.append(warning)


def _balance(samples: list[Sample], config: SFTConfig, summary: ExportSummary) -> list[Sample]:
    rng = random.Random(config.seed)
    by_category: dict[str, list[Sample]] = collections.defaultdict(list)
    for sample in samples:
        by_category[sample.meta["difficulty"]].append(sample)
    limit: Optional[int] = None
    if config.balance == "min" and by_category:
        limit = min(len(v) for v in by_category.values())
    elif config.balance == "cap":
        limit = config.per_category
    kept: list[Sample] = []
    for category in sorted(by_category):
        group = list(by_category[category])
        rng.shuffle(group)
        if limit is not None and len(group) > limit:
            for _ in group[limit:]:
                summary.count(f"dropped:balanced-out ({category})")
            group = group[:limit]
        kept += group
    rng.shuffle(kept)
    if config.max_samples is not None and len(kept) > config.max_samples:
        for _ in kept[config.max_samples :]:
            summary.count("dropped:max-samples")
        kept = kept[: config.max_samples]
    return kept


def _config_dict(config: Any) -> dict[str, Any]:
    import dataclasses

    return dataclasses.asdict(config)


# ------------------------------------------------------------------ writing
def _assistant(sample: Sample, mode: str) -> dict[str, str]:
    message = {"role": "assistant", "content": sample.response}
    if sample.reasoning and mode == "think":
        message["content"] = f"<think>\n{sample.reasoning.strip()}\n</think>\n\n{sample.response}"
    elif mode == "field":
        message["reasoning_content"] = sample.reasoning or ""
    return message


def write_sft(
    samples: Sequence[Sample],
    out: Path,
    fmt: str,
    config: SFTConfig,
    *,
    name: str = "kernelsmith_sft",
    llamafactory_style: str = "sharegpt",
    conversational: bool = False,
) -> list[Path]:
    """Write samples to directory ``out``; returns the files written.

    Besides the data file, ``metadata.jsonl`` holds each sample's provenance,
    line for line (kept out of the data file because trainers such as the
    OpenAI fine-tuning API reject unknown keys).
    """
    if fmt not in SFT_FORMATS:
        raise ValueError(f"SFT format must be one of {', '.join(SFT_FORMATS)}, got '{fmt}'")
    out.mkdir(parents=True, exist_ok=True)
    files: list[Path] = []
    mode = config.reasoning
    if fmt == "messages":
        path = out / f"{name}.jsonl"
        write_jsonl(path, ({"messages": [*s.prompt, _assistant(s, mode)]} for s in samples))
        files.append(path)
    elif fmt == "prompt-completion":
        path = out / f"{name}.jsonl"
        if conversational:
            rows = ({"prompt": s.prompt, "completion": [_assistant(s, mode)]} for s in samples)
        else:
            rows = (
                {
                    "prompt": render_text(s.prompt),
                    "completion": _assistant(s, "think" if mode == "think" else "drop")["content"],
                }
                for s in samples
            )
        write_jsonl(path, rows)
        files.append(path)
    elif fmt == "llamafactory":
        path = out / f"{name}.json"
        rows = []
        for s in samples:
            system, rest = split_system(s.prompt)
            answer = _assistant(s, "think" if mode == "think" else "drop")["content"]
            if llamafactory_style == "alpaca":
                rows.append(
                    {"instruction": render_text(rest).rstrip("\n"), "input": "", "output": answer, "system": system}
                )
            else:
                turns = [{"from": "human" if m["role"] == "user" else "gpt", "value": m["content"]} for m in rest]
                rows.append({"conversations": turns + [{"from": "gpt", "value": answer}], "system": system})
        info = llamafactory_dataset_info(name, path.name, llamafactory_style)
        path.write_text(json.dumps(rows, ensure_ascii=False, indent=1) + "\n")
        (out / "dataset_info.json").write_text(json.dumps(info, indent=2) + "\n")
        files += [path, out / "dataset_info.json"]
    else:  # parquet
        import pyarrow as pa

        path = out / f"{name}.parquet"
        message = pa.struct([("role", pa.string()), ("content", pa.string())])
        # prompt and completion are both message lists: TRL's SFTTrainer
        # reads a prompt column as prompt-completion data, and a message-list
        # prompt with a plain-text completion is a TypeError there.
        fields = [
            ("messages", pa.list_(message)),
            ("prompt", pa.list_(message)),
            ("completion", pa.list_(message)),
            ("reasoning", pa.string()),
        ]
        meta_types = {
            "step": pa.int64(),
            "request_id": pa.int64(),
            "parent_id": pa.int64(),
            "child_id": pa.int64(),
            "speedup_over_parent": pa.float64(),
            "speedup": pa.float64(),
            "coverage": pa.float64(),
            "sol_fraction": pa.float64(),
        }
        meta_keys = list(samples[0].meta) if samples else list(step_meta_keys())
        fields += [(k, meta_types.get(k, pa.string())) for k in meta_keys]
        rows = []
        for s in samples:
            answer = _assistant(s, "think" if mode == "think" else "drop")["content"]
            reply = {"role": "assistant", "content": answer}
            rows.append(
                {
                    "messages": [*s.prompt, reply],
                    "prompt": s.prompt,
                    "completion": [reply],
                    "reasoning": s.reasoning or "",
                    **s.meta,
                }
            )
        write_parquet(path, rows, pa.schema(fields))
        files.append(path)
    meta_path = out / "metadata.jsonl"
    write_jsonl(meta_path, (s.meta for s in samples))
    files.append(meta_path)
    return files


def step_meta_keys() -> tuple[str, ...]:
    return (
        "run_dir",
        "task_id",
        "task_name",
        "difficulty",
        "kind",
        "step",
        "request_id",
        "parent_id",
        "child_id",
        "status",
        "model",
        "speedup_over_parent",
        "speedup",
        "coverage",
        "sol_fraction",
        "sol_bound",
    )
