"""kernelsmith export sft|rl RUN_DIR... -o OUT: training data from run directories."""

from __future__ import annotations

import argparse
import json
import sys
from . import UsageError

# the formats of each kind (kernelsmith.export.formats: SFT_FORMATS, RL_FORMATS,
# checked equal by a test), here so that building the parser imports nothing
SFT_FORMATS = ("messages", "prompt-completion", "llamafactory", "parquet")
RL_FORMATS = ("parquet", "jsonl", "openrlhf")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", choices=("sft", "rl"), help="sft: (prompt, response) samples; rl: verl prompt rows")
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories written by kernelsmith evolve")
    parser.add_argument("-o", "--out", required=True, help="output directory (data file(s), metadata, summary.json)")
    parser.add_argument(
        "--format",
        choices=tuple(dict.fromkeys(SFT_FORMATS + RL_FORMATS)),
        metavar="FORMAT",
        help="sft: messages (default) | prompt-completion | llamafactory | parquet; "
        "rl: parquet (default, verl) | jsonl | openrlhf (flat prompt/label columns)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of sampling and shuffling (default 0)")
    parser.add_argument(
        "--difficulty-map",
        action="append",
        default=[],
        metavar="FILE",
        help="task -> difficulty: YAML/JSON mapping or a curation index (JSONL/parquet); repeatable",
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument(
        "--tokenizer",
        metavar="PATH",
        help="tokenizer (local path) to count tokens with (default: characters / 4, an estimate)",
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        metavar="N",
        help="warn about rows longer than N tokens (sft: prompt + completion; rl: prompt)",
    )
    parser.add_argument(
        "--compact",
        action="store_true",
        help="with --max-tokens: drop inspirations, top programs, then history from prompts over it",
    )
    sft = parser.add_argument_group("sft")
    sft.add_argument(
        "--min-speedup",
        type=float,
        default=1.0,
        help="optimization steps kept when speedup over the parent > this (default 1.0)",
    )
    sft.add_argument(
        "--min-translation-speedup",
        type=float,
        default=0.0,
        help="translation steps kept when speedup over the reference >= this (default 0: all correct)",
    )
    sft.add_argument("--no-translation", action="store_true", help="drop translation steps")
    sft.add_argument("--no-optimization", action="store_true", help="drop optimization steps")
    sft.add_argument(
        "--balance",
        choices=("min", "cap", "none"),
        default="min",
        help="difficulty balancing: min (default: every category cut to the smallest), cap, none",
    )
    sft.add_argument("--per-category", type=int, help="with --balance cap: samples per difficulty category")
    sft.add_argument("--max-samples", type=int, help="at most this many samples")
    sft.add_argument(
        "--reasoning",
        choices=("drop", "think", "field"),
        default="drop",
        help="the model's reasoning: drop (default), think (<think> block), field (reasoning_content)",
    )
    sft.add_argument(
        "--llamafactory-style",
        choices=("sharegpt", "alpaca"),
        default="sharegpt",
        help="with --format llamafactory: the dataset layout LLaMA-Factory reads, sharegpt "
        "(conversations of messages; default) or alpaca (instruction, input, output)",
    )
    sft.add_argument(
        "--conversational", action="store_true", help="prompt-completion with message lists instead of plain text"
    )
    sft.add_argument("--name", default=None, help="dataset name (file name and dataset_info.json key)")
    rl = parser.add_argument_group("rl")
    rl.add_argument(
        "--strategy",
        choices=("best", "all", "initial"),
        default="best",
        help="step selection (default best: steps that beat their parent's best so far)",
    )
    rl.add_argument(
        "--best-scope",
        choices=("lineage", "island", "run"),
        default="lineage",
        help="what 'best so far' means for --strategy best (default lineage)",
    )
    rl.add_argument("--data-source", default="kernelsmith", help="verl data_source column")
    rl.add_argument("--ability", default="kernel-optimization", help="verl ability column")
    rl.add_argument("--val-fraction", type=float, default=0.0, help="tasks held out as val split (default 0)")
    rl.add_argument("--max-rows", type=int, help="at most this many rows")
    rl.add_argument(
        "--edit-mode",
        choices=("auto", "diff", "full"),
        default="auto",
        help="how rewards apply a completion to the parent (recorded in each row)",
    )


def run(args: argparse.Namespace) -> int:
    # lazy: keeps 'kernelsmith --help' light (export is not loaded to build the parser)
    from ..export import RLConfig, SFTConfig, export_rl, export_sft

    if args.compact and args.max_tokens is None:
        raise UsageError("--compact needs --max-tokens N (the limit prompts are compacted to)")
    formats = SFT_FORMATS if args.kind == "sft" else RL_FORMATS
    if args.format is not None and args.format not in formats:
        raise UsageError(
            f"--format {args.format} is not a format of {args.kind} exports; choose from {', '.join(formats)}"
        )
    try:
        if args.kind == "sft":
            config = SFTConfig(
                min_speedup=args.min_speedup,
                min_translation_speedup=args.min_translation_speedup,
                include_translation=not args.no_translation,
                include_optimization=not args.no_optimization,
                balance=args.balance,
                per_category=args.per_category,
                max_samples=args.max_samples,
                reasoning=args.reasoning,
                seed=args.seed,
                tokenizer=args.tokenizer,
                max_tokens=args.max_tokens,
                compact=args.compact,
            )
            summary = export_sft(
                args.runs,
                args.out,
                args.format or "messages",
                config,
                args.difficulty_map,
                name=args.name or "kernelsmith_sft",
                llamafactory_style=args.llamafactory_style,
                conversational=args.conversational,
            )
        else:
            config = RLConfig(
                strategy=args.strategy,
                best_scope=args.best_scope,
                data_source=args.data_source,
                ability=args.ability,
                val_fraction=args.val_fraction,
                max_rows=args.max_rows,
                edit_mode=args.edit_mode,
                seed=args.seed,
                tokenizer=args.tokenizer,
                max_prompt_tokens=args.max_tokens,
                compact=args.compact,
            )
            summary = export_rl(args.runs, args.out, args.format or "parquet", config, args.difficulty_map)
    except (ValueError, FileNotFoundError) as exc:
        raise UsageError(str(exc)) from exc
    print(json.dumps(summary.to_dict(), indent=2) if args.json else summary.render())
    if not summary.kept:
        # an empty data file is no training data: said, and a failing exit,
        # so a pipeline does not train on nothing
        why = (
            ", ".join(f"{reason} {n}" for reason, n in sorted(summary.reasons.items()) if not reason.startswith("kept"))
            or "the runs hold no steps"
        )
        print(
            f"kernelsmith export: nothing exported: no row kept of {summary.steps_seen} steps ({why}); the files "
            f"in {args.out} hold no rows",
            file=sys.stderr,
        )
        return 1
    return 0
