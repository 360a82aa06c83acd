"""Engine behaviour through the Python API (the C++ suite covers the same
ground at the core level)."""

from __future__ import annotations

import collections
import threading
from pathlib import Path

import pytest

import kernelsmith
from kernelsmith.config import ConfigError
from kernelsmith.engine import Engine, EngineConfig, Program, Request, normalized_hash


def seed(score: float = 0.0, source: str = "def f(x):\n    return x\n", island: int = -1) -> Program:
    return Program(source=source, metrics={"score": score}, status="correct", island=island)


def child_of(req: Request) -> Program:
    """Deterministic stand-in for propose + evaluate."""
    v = req.id * 7919 % 1000
    src = f"def f(x):\n    return x * {v} + {req.parent.id}\n" + "y" * (v % 5) + " = 1\n"
    if v % 10 == 0:
        return Program(source=src, status="compile-failed", feedback={"error": "SyntaxError", "line": 2})
    return Program(source=src, status="correct", metrics={"score": v / 10.0})


def describe(req: Request) -> tuple:
    return (req.id, req.island, req.mode, req.parent.id, req.iteration, tuple(p.id for p in req.inspirations))


SMALL = dict(num_islands=3, migration_interval=10, population_size=40, recent_failures=4, repair_ratio=0.2)


def test_program_records_round_trip_and_feedback_is_a_dict():
    eng = Engine(EngineConfig(**SMALL), seed=1)
    ids = eng.add_seed(seed(1.0))
    assert len(ids) == 3
    req = eng.ask()
    assert isinstance(req.parent.metrics, dict) and req.parent.metrics["score"] == 1.0
    assert req.mode in ("explore", "exploit", "weighted")
    child = Program(
        source="x = 1\n",
        status="incorrect",
        metrics={"max_abs_err": 0.5},
        feedback={"error": "mismatch", "trials": [1, 2.5, None], "nested": {"ok": False}},
    )
    res = eng.tell(child, request_id=req.id)
    stored = eng.program(res.id)
    assert stored.feedback == child.feedback
    assert stored.parent_id == req.parent.id and stored.island == req.island
    assert Program.from_dict(stored.to_dict()) == stored
    assert Request.from_dict(req.to_dict()) == req
    with pytest.raises(ValueError, match="not open"):
        eng.tell(child, request_id=req.id)
    with pytest.raises(ValueError, match="pending"):
        eng.tell(Program(source="y = 2\n"))


def test_bad_config_fails_at_once_naming_the_key():
    with pytest.raises(ValueError, match="'num_islands' must be >= 1"):
        EngineConfig(num_islands=0)
    with pytest.raises(ValueError, match="'feature_bins' must be >= 1"):
        Engine({"feature_bins": -2})
    with pytest.raises(ValueError, match="unknown feature 'speed'; allowed: complexity, score"):
        EngineConfig(feature_dimensions=["speed"])
    with pytest.raises(ValueError, match="unknown config key 'islands'; allowed keys: num_islands"):
        Engine({"islands": 2})
    with pytest.raises(ConfigError, match="islands"):
        EngineConfig.from_dict({"islands": 2})
    EngineConfig(feature_dimensions=["speedup"], metrics=["speedup"])  # declared metric: fine


def test_config_from_yaml(tmp_path: Path):
    path = tmp_path / "run.yaml"
    path.write_text("engine:\n  num_islands: 2\n  feature_bins: {score: 5, complexity: 3}\n  target_score: 9.5\n")
    cfg = EngineConfig.from_yaml(path, section="engine")
    eng = Engine(cfg)
    assert eng.config.num_islands == 2
    assert eng.config.feature_bins == {"complexity": 3, "score": 5}
    path.write_text("engine:\n  num_islands: 0\n")
    with pytest.raises(ConfigError, match="num_islands"):
        EngineConfig.from_yaml(path, section="engine")


def test_seen_ignores_comments_and_whitespace_but_not_indentation():
    eng = Engine(EngineConfig(**SMALL))
    eng.add_seed(seed())
    assert eng.seen("# header\n\ndef f(x):   # c\n    return   x  \n")
    assert not eng.seen("def f(x):\nreturn x\n")
    assert normalized_hash("a = 'x  # y'\n") != normalized_hash("a = 'x'\n")


def test_archive_cells_keep_the_fitter_program_and_bins():
    cfg = EngineConfig(
        num_islands=1,
        feature_dimensions=["score"],
        feature_ranges={"score": [0, 10]},
        feature_bins=5,
        migration_interval=0,
    )
    eng = Engine(cfg)
    eng.add_seed(seed(1.0, "a = 1\n", island=0))
    eng.add_seed(seed(1.5, "a = 2\n", island=0))  # same bin [0, 2)
    eng.add_seed(seed(9.0, "a = 3\n", island=0))
    cells = dict(eng.archive_cells(0))
    assert set(cells) == {(0,), (4,)}
    assert cells[(0,)].metrics["score"] == 1.5
    assert eng.best().metrics["score"] == 9.0
    assert [p.metrics["score"] for p in eng.elites(2)] == [9.0, 1.5]


def test_eviction_never_removes_cell_owners_or_best():
    cfg = EngineConfig(
        num_islands=1,
        feature_dimensions=["score"],
        feature_ranges={"score": [-10, 10]},
        feature_bins=2,
        population_size=3,
        elite_size=1,
        migration_interval=0,
    )
    eng = Engine(cfg)
    best = eng.add_seed(seed(9.0, "b = 0\n", island=0))[0]
    lonely = eng.add_seed(seed(-9.0, "l = 0\n", island=0))[0]  # worst, but owns the low cell
    for i in range(8):
        eng.tell(seed(1.0 + i / 10, f"c = {i}\n", island=0))
    ids = {p.id for p in eng.programs()}
    assert best in ids and lonely in ids
    assert eng.stats()["island_population"] == [3]
    assert eng.stats()["evictions"] == 7


def test_selection_ratios_and_power_law():
    cfg = EngineConfig(
        num_islands=1,
        exploration_ratio=0.25,
        exploitation_ratio=0.5,
        weighted_ratio=0.25,
        repair_ratio=0.0,
        migration_interval=0,
        power_law_alpha=2.0,
    )
    eng = Engine(cfg, seed=3)
    for i in range(30):
        eng.add_seed(seed(float(i), f"v = {i}\n", island=0))
    modes: collections.Counter = collections.Counter()
    ranks: collections.Counter = collections.Counter()
    n = 8000
    for _ in range(n):
        r = eng.ask()
        modes[r.mode] += 1
        if r.mode == "exploit":
            ranks[29 - int(r.parent.metrics["score"])] += 1
        eng.cancel(r.id)
    assert abs(modes["explore"] / n - 0.25) < 0.03
    assert abs(modes["exploit"] / n - 0.5) < 0.03
    assert abs(modes["weighted"] / n - 0.25) < 0.03
    total = sum(ranks.values())
    # alpha=2: P(r) = (1/(r+1) - 1/(r+2)) / (1 - 1/31)
    for r in (0, 1, 3):
        expected = (1 / (r + 1) - 1 / (r + 2)) / (1 - 1 / 31)
        assert abs(ranks[r] / total - expected) < 0.03, (r, ranks[r] / total, expected)


def test_repair_requests_hand_back_failures_with_feedback():
    eng = Engine(EngineConfig(num_islands=1, repair_ratio=1.0, migration_interval=0), seed=2)
    eng.add_seed(seed(1.0))
    eng.tell(Program(source="bad(", status="compile-failed", feedback={"error": "SyntaxError: '(' was never closed"}))
    req = eng.ask()
    assert req.mode == "repair"
    assert req.parent.status == "compile-failed"
    assert "never closed" in req.parent.feedback["error"]
    assert eng.ask().mode != "repair"  # each failure is handed out once


def test_migration_ring_no_duplicates_never_twice():
    eng = Engine(EngineConfig(num_islands=3, migration_interval=5, migration_rate=0.5, repair_ratio=0.0), seed=4)
    eng.add_seed(seed(0.0))
    for _ in range(60):
        r = eng.ask()
        eng.tell(child_of(r), request_id=r.id)
    progs = {p.id: p for p in eng.programs()}
    assert eng.stats()["migrants"] > 0
    per_island: dict[int, set] = collections.defaultdict(set)
    for p in progs.values():
        if p.status == "correct":
            h = normalized_hash(p.source)
            assert h not in per_island[p.island], "identical code twice on one island"
            per_island[p.island].add(h)
    origins = collections.Counter(p.migrated_from for p in progs.values() if p.migrated_from >= 0)
    assert origins and max(origins.values()) == 1
    for p in progs.values():
        if p.migrated_from >= 0:
            assert not p.migrated
            if p.migrated_from in progs:
                assert p.island == (progs[p.migrated_from].island + 1) % 3


def test_threads_ask_and_tell_concurrently():
    eng = Engine(EngineConfig(num_islands=4, island_selection="least_loaded", population_size=60), seed=5)
    eng.add_seed(seed(0.0))
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            for i in range(150):
                r = eng.ask()
                c = child_of(r)
                c.source += f"t{t}_{i} = 0\n"
                eng.tell(c, request_id=r.id)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    st = eng.stats()
    assert st["asks"] == st["tells"] == 600
    assert st["in_flight"] == 0 and st["island_in_flight"] == [0, 0, 0, 0]


def test_stopping_reasons():
    eng = Engine(EngineConfig(num_islands=1, patience=2, target_score=50.0, max_iterations=10))
    eng.add_seed(seed(1.0))
    assert eng.should_stop() is None
    eng.tell(seed(0.5, "a = 1\n"))
    eng.tell(seed(0.5, "a = 2\n"))
    assert eng.should_stop() == "patience"
    eng.tell(seed(60.0, "a = 3\n"))
    assert eng.should_stop() == "target_score"


def run_steps(eng: Engine, n: int, log: list) -> None:
    for _ in range(n):
        r = eng.ask()
        log.append(describe(r))
        eng.tell(child_of(r), request_id=r.id)


def test_checkpoint_round_trip_and_resume_determinism(tmp_path: Path):
    full: list = []
    a = Engine(EngineConfig(**SMALL), seed=42)
    a.add_seed(seed(0.5))
    run_steps(a, 200, full)

    part: list = []
    b = Engine(EngineConfig(**SMALL), seed=42)
    b.add_seed(seed(0.5))
    run_steps(b, 70, part)
    path = b.save(tmp_path)
    assert path.parent == tmp_path and path.name.startswith("checkpoint-")
    c = Engine.load(tmp_path)
    assert c.state() == b.state()
    assert [p.to_dict() for p in c.programs()] == [p.to_dict() for p in b.programs()]
    del b
    run_steps(c, 130, part)
    assert part == full


def test_in_flight_requests_are_reissued(tmp_path: Path):
    eng = Engine(EngineConfig(**SMALL), seed=8)
    eng.add_seed(seed(0.5))
    r1, r2 = eng.ask(), eng.ask()
    eng.save(tmp_path)
    loaded = Engine.load(tmp_path)
    assert [describe(r) for r in loaded.pending_requests()] == [describe(r1), describe(r2)]
    assert describe(loaded.ask()) == describe(r1)
    loaded.tell(child_of(r2), request_id=r2.id)  # told directly: not re-issued
    assert describe(loaded.ask()) == describe(eng.ask())


def test_corrupt_checkpoint_raises_and_previous_loads(tmp_path: Path):
    eng = Engine(EngineConfig(num_islands=2), seed=1)
    eng.add_seed(seed(0.5))
    first = eng.save(tmp_path)
    r = eng.ask()
    eng.tell(child_of(r), request_id=r.id)
    second = eng.save(tmp_path)
    data = second.read_bytes()
    second.write_bytes(data[: len(data) // 3])
    with pytest.raises(kernelsmith.CorruptStateError, match="corrupt or truncated") as info:
        Engine.load(tmp_path)
    assert str(first) in str(info.value)
    assert isinstance(info.value, kernelsmith.KernelsmithError)
    old = Engine.load(first)
    assert old.stats()["tells"] == 0
    assert Engine.list_checkpoints(tmp_path) == [first, second]


def test_demo_command_evolves_and_writes_a_loadable_checkpoint(tmp_path: Path, capsys):
    from kernelsmith.cli import main

    assert main(["demo", "--iterations", "300", "--islands", "2", "--seed", "1", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| island | population | cells filled |" in out
    eng = Engine.load(tmp_path)
    st = eng.stats()
    assert st["tells"] == 300
    assert st["migrations"] > 0
    # Evolution made progress over the seed (score of the all-minimum constants).
    seed_score = min(p.metrics["score"] for p in eng.programs() if p.parent_id == -1 and p.status == "correct")
    assert eng.best().metrics["score"] > seed_score + 10
