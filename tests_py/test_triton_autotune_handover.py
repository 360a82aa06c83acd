"""Autotuning done once per kernel source and tuning key
(backends/triton/autotune.py): a worker reports the config it tuned, the
parent keeps it (checked, first record wins) and hands it to later workers,
which then benchmark nothing. Triton's default benchmarker needs a GPU, so the
kernels here bring their own ``do_bench`` (the Autotuner's documented
argument) and run under TRITON_INTERPRET=1; on a GPU the same path runs with
Triton's benchmarker (scripts/run_inplace_fla.sh)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.runtime.autotuner import Autotuner  # noqa: E402

from kernelsmith.backends.triton import autotune as at  # noqa: E402

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="CPU test: the interpreter")

HERE = Path(__file__).resolve().parent
BENCHED: list[str] = []


def counting_bench(fn, quantiles=None):
    """The benchmark Triton would run per config, counted."""
    BENCHED.append("x")
    t0 = time.perf_counter()
    fn()
    spent = time.perf_counter() - t0
    return [spent, spent, spent]


def double_kernel(x, y, n, B: tl.constexpr):
    o = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(y + o, tl.load(x + o, mask=o < n) * 2, mask=o < n)


CONFIGS = [triton.Config({"B": b}) for b in (16, 32, 64)]


def make_autotuner(configs=CONFIGS, cls=None):
    """A new Autotuner over the same kernel source (what a new process, or
    the reference next to a candidate that kept the kernel, has)."""
    jitted = triton.jit(double_kernel)
    if cls is None:
        return triton.autotune(configs=configs, key=["n"], do_bench=counting_bench)(jitted)
    return cls(jitted, jitted.arg_names, configs, ["n"], None, None, do_bench=counting_bench)


def launch(tuner, n=100):
    x = torch.randn(n)
    y = torch.empty_like(x)
    tuner[lambda m: (triton.cdiv(n, m["B"]),)](x, y, n)
    assert torch.equal(y, x * 2)
    return tuner


class PackageAutotuner(Autotuner):
    """A package's wrapper, as fla-core's CachedAutotuner is: its own run,
    which ends in Triton's."""

    def run(self, *args, **kwargs):
        self.wrapped_calls = getattr(self, "wrapped_calls", 0) + 1
        return super().run(*args, **kwargs)


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Each test its own records kept between commands (none from before)."""
    monkeypatch.setenv(at.CACHE_ENV, str(tmp_path / "kept" / "triton-autotune.json"))


@pytest.fixture
def handover(tmp_path):
    BENCHED.clear()
    yield tmp_path
    at.uninstall()


def test_a_record_from_the_parent_skips_the_benchmark(handover):
    tmp = handover
    run = Autotuner.run
    at.install(str(tmp / "none.json"), str(tmp / "first.jsonl"))
    assert Autotuner.run is run  # a launch of a tuned key (every timed call) goes through Triton's own run
    first = launch(make_autotuner())
    assert len(BENCHED) == 3  # every config benchmarked once
    assert at.flush() == 1  # what a worker does before it reports its result
    reported = [json.loads(line) for line in (tmp / "first.jsonl").read_text().splitlines()]
    assert len(reported) == 1 and reported[0]["kernel"] == "double_kernel"
    best = str(next(iter(first.cache.values())))
    assert reported[0]["config"] == best

    store = at.AutotuneStore(str(tmp / "store"))
    assert store.absorb(str(tmp / "first.jsonl")) == 1
    assert json.loads(Path(store.known_path).read_text())["records"] == {reported[0]["key"]: best}

    # a later process: the parent's records, a new autotuner of the same source
    BENCHED.clear()
    at.install(store.known_path, str(tmp / "second.jsonl"))
    again = launch(make_autotuner())
    assert BENCHED == [] and str(next(iter(again.cache.values()))) == best
    assert not (tmp / "second.jsonl").exists()  # nothing new to report
    # a package's subclass of Autotuner gets it through Triton's run too
    wrapped = launch(make_autotuner(cls=PackageAutotuner))
    assert BENCHED == [] and wrapped.wrapped_calls == 1
    # another tuning key (n) is tuned, and reported
    launch(make_autotuner(), n=1000)
    at.flush()
    assert len(BENCHED) == 3 and len((tmp / "second.jsonl").read_text().splitlines()) == 1


def test_records_written_after_a_process_started_still_reach_it(tmp_path):
    """A pool started beside task init's tests: its store and its referee
    exist before the tests' records are kept; the store takes them from the
    kept file at the next evaluation, the referee at its next miss."""
    kept = str(tmp_path / "kept.json")
    pool_store = at.AutotuneStore(str(tmp_path / "pool"), persist=kept)
    referee = at._Handover(pool_store.trusted_path, None)
    key = "a" * 64
    assert referee.lookup(key) is None and pool_store.refresh() == 0
    # the tests of the unmodified tree finish: their records, trusted, kept
    new = tmp_path / "tests.jsonl"
    new.write_text(json.dumps({"key": key, "config": "BLOCK: 64"}) + "\n")
    tests_store = at.AutotuneStore(str(tmp_path / "tests"), persist=kept)
    assert tests_store.absorb(str(new), trusted=True) == 1
    assert pool_store.refresh() == 1 and pool_store.refresh() == 0  # once, until the file changes again
    assert json.loads(Path(pool_store.trusted_path).read_text())["records"] == {key: "BLOCK: 64"}
    assert referee.lookup(key) == "BLOCK: 64"


def test_the_same_kernel_tuned_once_per_process(handover):
    """The reference and a candidate that kept the kernel: two autotuners of
    one source in one worker; the second takes the first's result."""
    at.install(None, str(handover / "new.jsonl"))
    launch(make_autotuner())
    launch(make_autotuner())
    assert len(BENCHED) == 3


def test_a_record_can_only_name_one_of_the_autotuners_configs(handover):
    tmp = handover
    tuner = make_autotuner()
    key = at.tuning_key(tuner, (torch.zeros(100), torch.zeros(100), 100), {})
    forged = at.record_key(at._kernel_identity(tuner), "triton %s interpreter" % triton.__version__, key, CONFIGS)
    (tmp / "known.json").write_text(json.dumps({"records": {forged: "B: 4096, num_warps: 1"}}))
    at.install(str(tmp / "known.json"), None)
    launch(tuner)
    assert len(BENCHED) == 3  # not one of its configs: tuned as usual
    # the record is found when it names one (the key is the one Triton uses)
    BENCHED.clear()
    (tmp / "known.json").write_text(json.dumps({"records": {forged: str(CONFIGS[2])}}))
    at.install(str(tmp / "known.json"), None)
    tuner = launch(make_autotuner())
    assert BENCHED == [] and tuner.cache == {key: CONFIGS[2]}


def test_records_are_keyed_by_source_key_target_and_configs():
    base = at.record_key("code:a", "t", (100, "torch.float32"), CONFIGS)
    assert base == at.record_key("code:a", "t", (100, "torch.float32"), list(reversed(CONFIGS)))
    assert base != at.record_key("code:b", "t", (100, "torch.float32"), CONFIGS)
    assert base != at.record_key("code:a", "t", (101, "torch.float32"), CONFIGS)
    assert base != at.record_key("code:a", "t", (100, "torch.bfloat16"), CONFIGS)
    assert base != at.record_key("code:a", "other gpu", (100, "torch.float32"), CONFIGS)
    assert base != at.record_key("code:a", "t", (100, "torch.float32"), CONFIGS[:2])


def test_the_store_keeps_the_first_record_and_drops_junk(tmp_path):
    store = at.AutotuneStore(str(tmp_path / "store"), persist=None)
    good, other = "a" * 64, "b" * 64
    (tmp_path / "w1.jsonl").write_text(
        "\n".join(
            [
                json.dumps({"key": good, "config": "B: 32"}),
                "not json",
                json.dumps({"key": "../../etc", "config": "B: 32"}),
                json.dumps({"key": other, "config": "x" * (at.MAX_CONFIG_CHARS + 1)}),
                json.dumps({"key": other}),
            ]
        )
    )
    assert store.absorb(str(tmp_path / "w1.jsonl")) == 1 and store.rejected == 4
    (tmp_path / "w2.jsonl").write_text(json.dumps({"key": good, "config": "B: 16"}) + "\n")
    assert store.absorb(str(tmp_path / "w2.jsonl")) == 0  # a later worker cannot replace it
    assert json.loads(Path(store.known_path).read_text())["records"] == {good: "B: 32"}
    assert json.loads(Path(store.trusted_path).read_text())["records"] == {}
    os.symlink(tmp_path / "w2.jsonl", tmp_path / "link.jsonl")
    assert store.absorb(str(tmp_path / "link.jsonl")) == 0
    assert store.absorb(str(tmp_path / "missing.jsonl")) == 0


SLOW_BENCH = """
import time
import torch
import torch.nn as nn
import triton
import triton.language as tl


def slow_bench(fn, quantiles=None):
    print("BENCHMARKED", flush=True)  # counted in the project tests' output
    time.sleep(1.0)  # what benchmarking a config costs, made visible
    fn()
    return [1.0, 1.0, 1.0]
"""


def test_the_referees_records_win_and_are_all_it_reads_and_they_are_kept(tmp_path):
    kept = tmp_path / "kept.json"
    store = at.AutotuneStore(str(tmp_path / "store"), persist=str(kept))
    a, b = "a" * 64, "b" * 64
    (tmp_path / "worker.jsonl").write_text(
        json.dumps({"key": a, "config": "B: 16"}) + "\n" + json.dumps({"key": b, "config": "B: 16"}) + "\n"
    )
    (tmp_path / "referee.jsonl").write_text(json.dumps({"key": a, "config": "B: 64"}) + "\n")
    assert store.absorb(str(tmp_path / "worker.jsonl")) == 2
    assert store.absorb(str(tmp_path / "referee.jsonl"), trusted=True) == 1  # replaces the worker's
    assert store.absorb(str(tmp_path / "worker.jsonl")) == 0  # and a worker cannot take it back
    assert json.loads(Path(store.known_path).read_text())["records"] == {a: "B: 64", b: "B: 16"}
    assert json.loads(Path(store.trusted_path).read_text())["records"] == {a: "B: 64"}
    # the next command's store starts from them, trust included
    later = at.AutotuneStore(str(tmp_path / "later"), persist=str(kept))
    assert later.records == {a: "B: 64", b: "B: 16"} and later.trusted == {a}
    # two commands at once: the kept file holds both's records
    (tmp_path / "more.jsonl").write_text(json.dumps({"key": "c" * 64, "config": "B: 32"}) + "\n")
    assert later.absorb(str(tmp_path / "more.jsonl")) == 1
    (tmp_path / "other.jsonl").write_text(json.dumps({"key": "d" * 64, "config": "B: 32"}) + "\n")
    assert store.absorb(str(tmp_path / "other.jsonl")) == 1
    assert sorted(json.loads(kept.read_text())["records"]) == [a, b, "c" * 64, "d" * 64]


def _autotuned(program: str) -> str:
    """The fixtures' correct relu program with its kernel under an autotuner
    whose every benchmark is slow and counted."""
    out = program.replace(
        "@triton.jit\ndef relu_kernel",
        '@triton.autotune(configs=[triton.Config({"BLOCK": b}) '
        'for b in (256, 512, 1024)], key=["n"], do_bench=slow_bench)\n@triton.jit\ndef relu_kernel',
    )
    out = out.replace(
        "relu_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)",
        'relu_kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, y, n)',
    )
    assert out.count("autotune") == 1 and 'm["BLOCK"]' in out
    return SLOW_BENCH + out


CANDIDATE = _autotuned((HERE / "fixtures" / "candidates" / "relu_correct.py").read_text())


def test_a_pool_tunes_a_kernel_once_and_hands_the_result_to_later_workers():
    from kernelsmith.evaluator import Evaluator
    from kernelsmith.task import Task

    task = Task.load(HERE.parent / "examples" / "triton" / "relu", trials=1)
    with Evaluator(backend="triton", workers=1, timing=False) as ev:
        first = ev.evaluate(task, CANDIDATE)
        second = ev.evaluate(task, CANDIDATE + "\n# another candidate, the same kernel\n")
    assert first.correct and second.correct, (first.error, second.error)
    # the first worker benchmarked 3 configs (1 s each) in the program's first call
    assert first.phases["compile"] >= 3.0, first.phases
    # the next one, a new process, took the parent's record: nothing benchmarked
    assert second.phases["compile"] < 1.0, second.phases


TUNED_PKG = (
    SLOW_BENCH
    + """

@triton.autotune(configs=[triton.Config({"B": b}) for b in (16, 32, 64)], key=["n"], do_bench=slow_bench)
@triton.jit
def double_kernel(x, y, n, B: tl.constexpr):
    o = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(y + o, tl.load(x + o, mask=o < n) * 2, mask=o < n)


def double(x):
    y = torch.empty_like(x)
    n = x.numel()
    double_kernel[lambda m: (triton.cdiv(n, m["B"]),)](x, y, n)
    return y
"""
)


@pytest.fixture
def tuned_task(tmp_path):
    """An in-place task over a package whose kernel is autotuned."""
    from kernelsmith.cli import main
    from kernelsmith.inplace import load_inplace

    tree = tmp_path / "tree"
    (tree / "tunedpkg").mkdir(parents=True)
    (tree / "tunedpkg" / "__init__.py").write_text(TUNED_PKG)
    (tmp_path / "inputs.py").write_text(
        "import torch\ndef make_inputs(shape, dtype):\n    return [torch.randn(*shape, dtype=dtype)]\n"
    )
    check = "import torch, tunedpkg; x = torch.randn(100); assert torch.equal(tunedpkg.double(x), x * 2)"
    assert (
        main(
            [
                "task",
                "init",
                "--tree",
                str(tree),
                "--file",
                "tunedpkg/__init__.py",
                "--function",
                "double",
                "--region",
                "double_kernel,double",
                "--tests",
                f'python -c "{check}"',
                "--inputs",
                f"{tmp_path / 'inputs.py'}:make_inputs",
                "--bench-shapes",
                "100",
                "-o",
                str(tmp_path / "t.yaml"),
                "--no-check",
            ]
        )
        == 0
    )
    return load_inplace(tmp_path / "t.yaml")


def test_the_project_tests_take_and_give_autotune_results(tuned_task, tmp_path):
    """An in-place task's test command runs in its own processes: a
    sitecustomize put first on its PYTHONPATH installs the hand-over there
    (without importing kernelsmith), so the second run of the tests
    benchmarks nothing."""
    from kernelsmith.inplace import InplaceEvaluator
    from kernelsmith.inplace.evaluate import copy_tree, run_tests

    with InplaceEvaluator(workers=1) as ev:
        store = ev.autotune_store(tuned_task)
        outputs = []
        for run in range(2):
            root = copy_tree(tuned_task.spec.tree, tmp_path / f"copy{run}")
            tests = run_tests(tuned_task.spec, root, autotune=store)
            assert tests["passed"], tests["output"]
            outputs.append(tests["output"])
            if run == 0:
                assert len(store.records) == 1 and not store.trusted
    assert outputs[0].count("BENCHMARKED") == 3 and "BENCHMARKED" not in outputs[1], outputs


def test_the_tests_of_the_unmodified_tree_tune_for_the_reference(tuned_task):
    """task init's check runs the project's own code: what its tests tune is
    trusted, so the referee and the workers take it (nothing tuned twice);
    a candidate's tests are not."""
    from kernelsmith.inplace import InplaceEvaluator

    with InplaceEvaluator(workers=1) as ev:
        original = ev.evaluate(tuned_task, tuned_task.spec.marked_original())
        assert original.correct, original.error
        tests_store = ev.autotune_store(tuned_task)
        assert len(tests_store.records) == 1 and tests_store.trusted == set(tests_store.records)
        pool = next(iter(ev.inner._device_pools.values()))
        assert pool.autotune.trusted == tests_store.trusted  # the pool started from the kept records
        assert not os.path.exists(pool.referee.autotune_path)  # so the referee tuned nothing
        assert original.phases["compile"] < 1.0, original.phases  # nor did the worker
        changed = tuned_task.seed_source.replace("* 2, mask=o < n)", "* 2.0, mask=o < n)")
        assert changed != tuned_task.seed_source
        candidate = ev.evaluate(tuned_task, changed)
        assert candidate.correct, candidate.error
        assert len(tests_store.records) == 2 and len(tests_store.trusted) == 1  # its kernel: untrusted


def test_a_compiled_kernel_is_the_same_kernel_on_another_line(tmp_path):
    """Triton's own cache_key includes the kernel's first line, which differs
    between the project's file and the program the evaluator builds from it
    (a header, markers): the hand-over's identity leaves it out, and still
    tells a changed kernel apart. JITFunctions, not the interpreter (no GPU
    needed to hash them)."""
    import subprocess
    import sys

    kernel = (
        "import triton\nimport triton.language as tl\n\n"
        '@triton.autotune(configs=[triton.Config({"B": 16}), triton.Config({"B": 32})], key=["n"])\n'
        "@triton.jit\ndef k(x, n, B: tl.constexpr):\n    tl.store(x + tl.arange(0, B), 1.0)\n"
    )
    (tmp_path / "original.py").write_text(kernel)
    (tmp_path / "moved.py").write_text("# a header\n# and a marker\n\n" + kernel)
    (tmp_path / "changed.py").write_text(kernel.replace("1.0)", "2.0)"))
    script = (
        "import original, moved, changed\n"
        "from kernelsmith.backends.triton.autotune import _kernel_identity as i\n"
        "assert original.k.fn.cache_key != moved.k.fn.cache_key  # Triton's own: the line counts\n"
        "assert i(original.k).startswith('jit:')\n"
        "print(i(original.k) == i(moved.k), i(original.k) == i(changed.k))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(Path(at.__file__).parents[2]), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["True", "False"]


# -- a key's configs compiled side by side before Triton benchmarks them
# (at.precompile). Triton's compiler needs a GPU target, so here the
# kernel's warmup is a stand-in that records where it ran; what this shows
# is the orchestration: one forked child per config, at most N at once,
# the GPU never asked for in a child, failures and hangs left to Triton's
# own benchmark, nothing changed in the parent. The compile itself is shown
# on the GPU (benchmarks/bench_autotune_compile.py).


class _StandInJIT:
    def __init__(self, out: Path) -> None:
        import collections

        self.device_caches = collections.defaultdict(dict)
        self.out = out
        self.calls: list[int] = []

    def run(self, *args, grid, warmup, **kwargs):
        from triton.runtime import driver

        assert warmup is True, "precompile must compile, not launch"
        self.calls.append(kwargs["BT"])
        if kwargs["BT"] == 3:
            raise RuntimeError("this config does not compile")
        if kwargs["BT"] == 5:
            time.sleep(60)
        # what a compile sees of the device: the parent's, not a call to the GPU
        (self.out / f"bt{kwargs['BT']}").write_text(
            json.dumps(
                {
                    "pid": os.getpid(),
                    "args": list(args),
                    "x": kwargs["x"],
                    "device": driver.active.get_current_device(),
                    "stream": driver.active.get_current_stream(),
                    "warps": kwargs["num_warps"],
                    "grid": list(grid),
                }
            )
        )


class _StandInConfig:
    def __init__(self, bt: int) -> None:
        self.bt = bt

    def all_kwargs(self):
        return {"BT": self.bt, "num_warps": 4}


class _StandInTuner:
    arg_names = ["a", "x"]

    def __init__(self, out: Path) -> None:
        self.fn = _StandInJIT(out)
        self.nargs = {"a": 7}


class _ParentDriver:
    def __init__(self) -> None:
        self.asked = 0

    def get_current_device(self):
        self.asked += 1
        return 3

    def get_current_stream(self, *args):
        raise AssertionError("the parent's stream is not needed")


@pytest.fixture
def stand_in_driver(monkeypatch):
    from triton.runtime import driver

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    parent = _ParentDriver()
    before = driver._active  # reset_active() would look for a GPU driver
    driver.set_active(parent)
    try:
        yield parent
    finally:
        driver._active = before


def test_precompile_forks_a_compile_per_config(tmp_path, monkeypatch, stand_in_driver):
    monkeypatch.setenv(at.PROCS_ENV, "2")
    monkeypatch.setattr(at, "PRECOMPILE_TIMEOUT_S", 3.0)
    tuner = _StandInTuner(tmp_path)
    before = set(_forked_children())  # what earlier tests of the suite left behind is theirs
    started = time.monotonic()
    # Autotuner.run hands prune_configs the launch's keywords: grid and warmup=False among them
    done = at.precompile(tuner, [_StandInConfig(b) for b in (1, 2, 3, 4, 5)], {"x": 9, "grid": (8,), "warmup": False})
    assert time.monotonic() - started < 30  # the hung config was stopped
    assert done["mode"] == "fork" and done["configs"] == 5 and done["compiled"] == 3, done
    # the compiler's complaint comes back (the hung child says nothing)
    assert done["errors"] == 1 and "RuntimeError: this config does not compile" in done["error"], done
    for bt in (1, 2, 4):
        seen = json.loads((tmp_path / f"bt{bt}").read_text())
        # a child of this process, with the kernel's arguments and the
        # config's keywords, the parent's device and a stream it never asked the GPU for
        assert seen["pid"] != os.getpid() and seen["args"] == [7] and seen["x"] == 9
        assert seen["device"] == 3 and seen["stream"] == 0 and seen["warps"] == 4 and seen["grid"] == [8]
    assert not (tmp_path / "bt3").exists() and not (tmp_path / "bt5").exists()
    # the parent asked for the device once and is as it was: no call ran here,
    # its driver is its own, no child is left
    assert stand_in_driver.asked == 1 and tuner.fn.calls == []
    from triton.runtime import driver

    assert driver.active is stand_in_driver and driver.active.get_current_device() == 3
    assert not set(_forked_children()) - before, "a compile child is left (running or unreaped)"


def _forked_children() -> list[int]:
    """This process's children that are forks of it (the same command line)
    or zombies: what precompile must not leave (other children, the suite's
    servers and pools, have command lines of their own)."""
    me = os.getpid()
    mine = Path(f"/proc/{me}/cmdline").read_bytes()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == me and (fields[0] == "Z" or (entry / "cmdline").read_bytes() == mine):
                found.append(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue
    return found


def test_precompile_off_one_at_a_time_and_interpreter(tmp_path, monkeypatch, stand_in_driver):
    tuner = _StandInTuner(tmp_path)
    configs = [_StandInConfig(b) for b in (1, 2)]
    monkeypatch.setenv(at.PRECOMPILE_ENV, "off")
    assert at.precompile(tuner, configs, {"x": 1})["mode"] == "off"
    monkeypatch.setenv(at.PRECOMPILE_ENV, "fork")
    monkeypatch.setenv(at.PROCS_ENV, "1")  # one at a time is what Triton does anyway
    assert at.precompile(tuner, configs, {"x": 1})["mode"] == "off"
    monkeypatch.delenv(at.PROCS_ENV)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert at.precompile(tuner, configs, {"x": 1})["mode"] == "off"
    assert not list(tmp_path.iterdir()) and tuner.fn.calls == []
