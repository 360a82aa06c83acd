"""Offline evolution on a synthetic objective: shows the engine working.

The "program" is a small Python-like file of tunable constants (think tile
sizes of a kernel). It is never executed: the objective parses the constants
with a regular expression and scores their distance to a hidden optimum.
A simple mutator perturbs the parent, crosses it with the inspirations and
sometimes breaks the file, so repair requests show up too.
"""

from __future__ import annotations

import argparse
import random
import re
import time
from pathlib import Path
from . import UsageError

# name -> (low, high, optimum, integer?)
PARAMS: dict[str, tuple[float, float, float, bool]] = {
    "BLOCK_M": (16, 256, 128, True),
    "BLOCK_N": (16, 256, 64, True),
    "BLOCK_K": (8, 128, 32, True),
    "NUM_WARPS": (1, 16, 8, True),
    "UNROLL": (1, 8, 4, True),
    "SCALE": (0.0, 2.0, 0.75, False),
}
_LINE = re.compile(r"^([A-Z_]+)\s*=\s*(-?[0-9.]+)\s*$", re.M)


def render(values: dict[str, float], extras: int) -> str:
    lines = ["# tunable constants of a matmul-like kernel"]
    for name, (_, _, _, integer) in PARAMS.items():
        v = values[name]
        lines.append(f"{name} = {int(v) if integer else round(v, 4)}")
    # Optional helper blocks: they add structure (complexity feature) and cost a little.
    for k in range(extras):
        lines += [f"if UNROLL > {k}:", f"    for i in range({k + 1}):", f"        PREFETCH_{k} = i"]
    return "\n".join(lines) + "\n"


def parse(source: str) -> dict[str, float]:
    return {m.group(1): float(m.group(2)) for m in _LINE.finditer(source)}


def evaluate(source: str):
    from ..engine import Program  # lazy: keeps 'kernelsmith --help' light (engine is not loaded to build the parser)

    values = parse(source)
    missing = [n for n in PARAMS if n not in values]
    if missing:
        return Program(
            source=source,
            status="compile-failed",
            feedback={"error": f"NameError: {missing[0]} is not defined", "missing": missing},
        )
    penalty = 0.0
    for name, (lo, hi, opt, _) in PARAMS.items():
        penalty += ((values[name] - opt) / (hi - lo)) ** 2
    extras = source.count("PREFETCH_")
    score = round(100.0 * (1.0 - penalty) - 0.5 * extras, 4)
    return Program(source=source, status="correct", metrics={"score": score}, feedback={"penalty": round(penalty, 6)})


def mutate(request, rng: random.Random) -> str:
    parent = parse(request.parent.source)
    if request.mode == "repair":
        # Fix: take the missing constants from the island best (first inspiration).
        donor = parse(request.inspirations[0].source) if request.inspirations else {}
        for name, (lo, hi, opt, _) in PARAMS.items():
            parent.setdefault(name, donor.get(name, (lo + hi) / 2))
        return render(parent, request.parent.source.count("PREFETCH_"))
    values = dict(parent)
    for insp in request.inspirations:  # crossover
        other = parse(insp.source)
        for name in PARAMS:
            if name in other and rng.random() < 0.2:
                values[name] = other[name]
    for name in rng.sample(list(PARAMS), k=rng.randint(1, 2)):
        lo, hi, _, integer = PARAMS[name]
        v = values.get(name, (lo + hi) / 2) + rng.gauss(0.0, (hi - lo) * 0.08)
        v = min(max(v, lo), hi)
        values[name] = round(v) if integer else v
    extras = request.parent.source.count("PREFETCH_")
    if rng.random() < 0.15:
        extras = max(0, min(4, extras + rng.choice((-1, 1))))
    source = render(values, extras)
    if rng.random() < 0.08:  # a broken edit: a constant disappears
        victim = rng.choice(list(PARAMS))
        source = re.sub(rf"^{victim} = .*\n", "", source, flags=re.M)
    return source


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--iterations", type=int, default=2000, help="evaluations to run (default 2000)")
    parser.add_argument("--islands", type=int, default=4, help="number of islands (default 4)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument(
        "-o", "--out", type=Path, default=Path("demo_run"), help="directory for the checkpoint (default ./demo_run)"
    )


def run(args: argparse.Namespace) -> int:
    # lazy: keeps 'kernelsmith --help' light (engine is not loaded to build the parser)
    from ..engine import Engine, EngineConfig, Program

    if args.iterations < 1 or args.islands < 1:
        raise UsageError("--iterations and --islands must be >= 1")
    config = EngineConfig(
        num_islands=args.islands,
        max_iterations=args.iterations,
        target_score=99.99,
        migration_interval=max(10, args.iterations // 20),
        feature_bins=8,
    )
    eng = Engine(config, seed=args.seed)
    rng = random.Random(args.seed)
    start = {n: (lo if integer else lo) for n, (lo, _, _, integer) in PARAMS.items()}
    seed_src = render(start, 0)
    seed_prog = evaluate(seed_src)
    eng.add_seed(Program(source=seed_src, metrics=seed_prog.metrics, status="correct"))
    print(f"kernelsmith demo: {args.iterations} iterations, {args.islands} islands, seed {args.seed}")
    print(f"seed score {seed_prog.metrics['score']:.2f} (optimum 100)")
    t0 = time.perf_counter()
    skipped = 0
    report_every = max(1, args.iterations // 10)
    attempts = 0
    while eng.should_stop() is None and attempts < 20 * args.iterations:
        attempts += 1
        req = eng.ask()
        source = mutate(req, rng)
        if eng.seen(source):  # duplicate: never evaluated twice
            eng.cancel(req.id)
            skipped += 1
            continue
        eng.tell(evaluate(source), request_id=req.id)
        st = eng.stats()
        if st["tells"] % report_every == 0:
            print(
                f"  iter {st['tells']:6d}  best {st['best_score']:8.3f}  programs {st['programs']:6d}"
                f"  migrations {st['migrations']:3d}  repairs {st['repairs']:4d}"
            )
    elapsed = time.perf_counter() - t0
    st = eng.stats()
    best = eng.best()
    print(
        f"\nstopped: {eng.should_stop() or 'attempt limit'} after {st['tells']} evaluations in {elapsed:.2f} s "
        f"({skipped} duplicates skipped before evaluation)"
    )
    print(
        f"best score {best.metrics['score']:.3f} (program {best.id}, island {best.island}, iteration {best.iteration})"
    )
    print("\n| island | population | cells filled | recent failures | best score |")
    print("| --- | --- | --- | --- | --- |")
    for i in range(args.islands):
        island_best = eng.elites(1, island=i)
        score = f"{island_best[0].metrics['score']:.3f}" if island_best else "-"
        print(
            f"| {i} | {st['island_population'][i]} | {st['island_cells'][i]} | {st['island_failures'][i]} | {score} |"
        )
    print(
        f"\nmigrations {st['migrations']} ({st['migrants']} programs moved), repairs {st['repairs']}, "
        f"evictions {st['evictions']}"
    )
    path = eng.save(args.out)
    print(f"checkpoint: {path}")
    print("best program:\n" + best.source)
    return 0
