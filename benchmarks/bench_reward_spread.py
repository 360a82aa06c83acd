"""Reward spread and batch scoring throughput.

Spread: the same completion is scored `--repeats` times (one evaluation each,
one after the other, as a trainer scoring it in different steps would) and
the spread of its reward is printed for each way the reward can use the
evaluator's confidence interval (RewardConfig.ci: point, snap, lower) --
computed from the same evaluations, since the reward is a pure function of
the EvalResult. GRPO ranks a group's completions by reward, so a spread wider
than the differences between completions turns the advantages into noise.
Target: within 5% (max-min over mean) on the H200.

Shared groups (`--group N`): N copies of the completion scored in one
`score_many` call with RewardConfig(group="shared"): the group and the parent
are re-timed head to head in one worker against one reference, as a GRPO
group would be; prints the spread of the ci=point reward within each group
and over all groups.

Throughput: `--batch` completions scored in one `score_many` call (the path
of verl's batch compute_score and of `serve`'s batch /reward), over the
evaluator's worker pool; prints completions per second.

    python benchmarks/bench_reward_spread.py                                   # OpenCL softmax, CPU (PoCL)
    python benchmarks/bench_reward_spread.py --task examples/triton/softmax --repeats 30 --batch 64   # on a GPU
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def spread(values: list[float]) -> str:
    mean = statistics.fmean(values)
    rel = (max(values) - min(values)) / abs(mean) if mean else float("nan")
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"mean {mean:.4f}  sd {sd:.4f}  min {min(values):.4f}  max {max(values):.4f}  (max-min)/mean {rel:.1%}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--task",
        default=str(ROOT / "examples" / "opencl" / "softmax"),
        help="task directory with seed.py (default: the OpenCL softmax example)",
    )
    parser.add_argument(
        "--completion",
        help="file with the completion to score (default: the seed, rewritten "
        "as a full program: a child as fast as its parent)",
    )
    parser.add_argument("--repeats", type=int, default=10, help="scores of the same completion (default 10)")
    parser.add_argument("--batch", type=int, default=8, help="completions in the throughput batch (default 8; 0: skip)")
    parser.add_argument("--workers", type=int, default=None, help="evaluator workers (default: the evaluator's)")
    parser.add_argument(
        "--group",
        type=int,
        default=0,
        help="also score --group-batches groups of this many copies of the completion with "
        "RewardConfig(group='shared') and print the spread within and across groups (0: skip)",
    )
    parser.add_argument("--group-batches", type=int, default=3, help="groups for --group (default 3)")
    args = parser.parse_args()

    from kernelsmith.evaluator import Evaluator
    from kernelsmith.rewards import LocalScorer, RewardConfig, compute_reward
    from kernelsmith.task import Task

    task = Task.load(args.task)
    seed = task.seed_source
    if seed is None:
        print(f"{args.task}: no seed.py", file=sys.stderr)
        return 2
    completion = Path(args.completion).read_text() if args.completion else f"```python\n{seed}```\n"
    options = {"workers": args.workers} if args.workers else {}
    with Evaluator(**options) as evaluator:
        scorer = LocalScorer(evaluator)
        parent_runtime = scorer.parent_runtime(task, seed)
        item = {
            "task_id": scorer.tasks.register(task).id,
            "completion": completion,
            "parent_source": seed,
            "parent_runtime_ms": parent_runtime,
        }
        results = []
        for _ in range(args.repeats):
            _, source, error = scorer.prepare(item)
            if source is None:
                print(f"the completion does not apply: {error}", file=sys.stderr)
                return 2
            results.append(evaluator.evaluate(task, source))
        device = results[0].hardware.get("name") or results[0].hardware.get("device") or "?"
        print(
            f"reward spread: {args.repeats} scores of the same completion, task {task.name}, device {device}, "
            f"parent runtime {parent_runtime:.4g} ms"
        )
        runtimes = [r.runtime_ms for r in results if r.correct and r.runtime_ms]
        if len(runtimes) < len(results):
            print(
                f"  {len(results) - len(runtimes)} of {len(results)} evaluations were not correct and timed: "
                f"{sorted({r.category for r in results})}"
            )
        if runtimes:
            print(f"  runtime ms     {spread(runtimes)}")
        for mode in ("point", "snap", "lower"):
            config = RewardConfig(ci=mode)
            rewards = [compute_reward(r, parent_runtime, config).reward for r in results]
            print(f"  reward ci={mode:<6}{spread(rewards)}")
        # the profiling terms (RewardConfig.peak_weight / coverage_weight, off by default), from the same results
        from kernelsmith.rewards.core import profile_terms

        terms = [profile_terms(r, RewardConfig())[1] for r in results if r.correct]
        fractions = [t["fraction_of_peak"] for t in terms if t["fraction_of_peak"] is not None]
        coverages = [t["coverage"] for t in terms if t["coverage"] is not None]
        if fractions:
            print(f"  fraction of peak  {spread(fractions)}")
        if coverages:
            print(f"  coverage          {spread(coverages)}")
        for weights in ({"peak_weight": 1.0}, {"coverage_weight": 1.0}):
            config = RewardConfig(**weights)
            rewards = [compute_reward(r, parent_runtime, config).reward for r in results]
            name = ", ".join(f"{k}={v:g}" for k, v in weights.items())
            print(f"  reward ci=snap {name:<19}{spread(rewards)}")
        widths = [
            (r.speedup_ci_high - r.speedup_ci_low) / r.speedup
            for r in results
            if r.speedup and r.speedup_ci_low and r.speedup_ci_high
        ]
        if widths:
            print(f"  speedup CI width / speedup: median {statistics.median(widths):.1%}, max {max(widths):.1%}")

        if args.batch:
            items = [dict(item) for _ in range(args.batch)]
            start = time.perf_counter()
            rewards = scorer.score_many(items)
            wall = time.perf_counter() - start
            print(
                f"batch scoring: {args.batch} completions in one score_many call: {wall:.2f} s, "
                f"{args.batch / wall:.2f} completions/s; rewards {spread([r.reward for r in rewards])}"
            )
        if args.group:
            shared = RewardConfig(group="shared", ci="point")
            everything = []
            for g in range(args.group_batches):
                items = [{k: v for k, v in item.items() if k != "parent_runtime_ms"} for _ in range(args.group)]
                start = time.perf_counter()
                rewards = scorer.score_many(items, shared)
                wall = time.perf_counter() - start
                paid = [r.reward for r in rewards if r.status == "correct"]
                head = sum("head to head" in r.detail for r in rewards)
                everything += paid
                print(
                    f"shared group {g + 1}: {args.group} copies, {head} timed head to head, {wall:.2f} s; "
                    f"reward ci=point {spread(paid) if paid else 'none correct'}"
                )
            if everything:
                print(f"shared groups, all {len(everything)} rewards: ci=point {spread(everything)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
