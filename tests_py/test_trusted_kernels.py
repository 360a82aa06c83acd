"""The trusted kernel layer (backends/triton/cache.py) and what makes it
hit: programs built from a project's file keep its kernels on their lines
(inplace/source.py), the tests of the unmodified tree write the layer and
everything else reads it; and the shorter autotune benchmark
(triton/autotune.py: shorten_benchmark). Triton's compiler needs a GPU, so the
layer's reader is checked on a cache folder laid out as Triton writes one;
scripts/run_inplace_fla.sh runs all of it on a GPU."""

from __future__ import annotations

import ast
import json
import os
import sys
from pathlib import Path

import pytest

from kernelsmith.backends.triton import autotune as at
from kernelsmith.backends.triton import cache as tc
from kernelsmith.inplace.source import candidate_program, insert_markers, reference_program, seed_program

FILE = '''# a licence line
# another
"""The module's docstring."""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from .util import helper_scale  # a relative import

SCALE = 2


@triton.jit
def before_kernel(x, y, n, B: tl.constexpr):
    o = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(y + o, tl.load(x + o, mask=o < n), mask=o < n)


@triton.autotune(configs=[triton.Config({"B": 16})], key=["n"])
@triton.jit
def block_kernel(x, y, n, B: tl.constexpr):
    o = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(y + o, tl.load(x + o, mask=o < n) * 2, mask=o < n)


def target(x):
    y = torch.empty_like(x)
    block_kernel[(1,)](x, y, x.numel())
    return y


@triton.jit
def after_kernel(x, n):
    pass


def tail():
    return math.pi
'''


def _def_lines(text: str) -> dict[str, int]:
    """Each top-level function's first line (its first decorator's): where
    Triton's ``starting_line_number`` comes from."""
    out = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef):
            out[node.name] = min([node.lineno] + [d.lineno for d in node.decorator_list])
    return out


def test_programs_keep_the_kernels_on_their_lines_in_the_file():
    lines = _def_lines(FILE)
    seed = insert_markers(FILE, ["block_kernel", "target"], "pkg/ops.py")
    cand = candidate_program(seed, module="pkg.ops", function="target", tree_paths=["/tree"])
    ref = reference_program(
        FILE,
        "def make(shape, dtype):\n    return []\n",
        module="pkg.ops",
        function="target",
        tree_paths=["/tree"],
        inputs_function="make",
        shapes={"get_inputs": [4]},
        dtype="float32",
    )
    got_cand, got_ref = _def_lines(cand), _def_lines(ref)
    for name in ("block_kernel", "target", "after_kernel", "tail"):
        assert got_cand[name] == lines[name], (name, cand)
    for name in lines:
        assert got_ref[name] == lines[name], (name, ref)
    # the programs still say what they did before: the tree on the path first,
    # the future import first, relative imports made absolute
    assert ref.startswith("from __future__ import annotations; import sys as _ks_sys; [_ks_sys.path.insert(0, _ks_p)")
    assert "from pkg.util import helper_scale" in ref and "from pkg.util import helper_scale" in cand
    assert cand.startswith("from __future__ import annotations\n") and "_ks_sys.path.insert(0, _ks_p)" in cand
    for program in (cand, ref):
        compile(program, "<program>", "exec")


def test_a_block_that_starts_the_file_or_a_file_that_starts_with_a_def_still_works():
    """Nothing to align with: the old layout (header lines first)."""
    starts_with_def = FILE[FILE.index("@triton.jit") :]
    ref = reference_program(
        starts_with_def,
        "def make(s, d):\n    return []\n",
        module="ops",
        function="target",
        tree_paths=["/tree"],
        inputs_function="make",
        shapes={"get_inputs": [4]},
        dtype="float32",
    )
    assert ref.startswith("import sys as _ks_sys\n")
    compile(ref, "<ref>", "exec")
    seed = insert_markers(starts_with_def, ["before_kernel", "target"], "ops.py")
    cand = candidate_program(seed, module="ops", function="target", tree_paths=["/tree"])
    compile(cand, "<cand>", "exec")
    assert "_ks_sys.path.insert(0, _ks_p)" in cand


def test_more_statements_than_lines_go_on_one_line():
    short = "import torch\nimport triton\n\n" + FILE[FILE.index("@triton.jit") :]
    seed = insert_markers(short, ["block_kernel", "target"], "ops.py")
    cand = candidate_program(seed, module="ops", function="target", tree_paths=["/tree"])
    assert _def_lines(cand)["block_kernel"] == _def_lines(short)["block_kernel"]
    compile(cand, "<cand>", "exec")


def test_the_fla_like_annotation_keeps_the_kernels_in_place():
    """seed_program's annotation adds a line inside the block's function,
    after the kernels: the kernels stay where they are."""
    annotated = seed_program(
        FILE,
        "target",
        ["block_kernel", "target"],
        "ops.py",
        [{"line": "return y", "replace": "Z = 1  # tune: [1, 2]\nreturn y"}],
    )
    cand = candidate_program(annotated, module="ops", function="target", tree_paths=["/tree"])
    assert _def_lines(cand)["block_kernel"] == _def_lines(FILE)["block_kernel"]


# -- the layer's reader ------------------------------------------------------


def _triton_layout(folder: Path, key: str, name: str = "k") -> dict[str, str]:
    """One compiled kernel as Triton's FileCacheManager lays it out."""
    d = folder / key
    d.mkdir(parents=True)
    files = {f"{name}.json": "{}", f"{name}.cubin": "binary", f"{name}.ptx": "ptx"}
    for fname, text in files.items():
        (d / fname).write_text(text)
    (d / f"__grp__{name}.json").write_text(json.dumps({"child_paths": {f: str(d / f) for f in files}}))
    return {f: str(d / f) for f in files}


@pytest.fixture
def layer(tmp_path, monkeypatch):
    trusted = tmp_path / "trusted"
    trusted.mkdir(mode=0o755)
    monkeypatch.setenv(tc.TRUSTED_ENV, str(trusted))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "private"))
    return trusted


def test_a_worker_finds_a_trusted_kernel_under_its_own_key(layer):
    pytest.importorskip("triton")
    files = _triton_layout(layer, "KEY1")
    manager = tc.LayeredCacheManager("KEY1")
    assert manager.get_group("k.json") == files
    # another key: the worker's own cache (empty here)
    assert tc.LayeredCacheManager("KEY2").get_group("k.json") is None


def test_the_reader_refuses_what_is_not_one_kernels_own_files(layer, tmp_path):
    pytest.importorskip("triton")
    _triton_layout(layer, "KEY1")
    grp = layer / "KEY1" / "__grp__k.json"
    elsewhere = tmp_path / "elsewhere.cubin"
    elsewhere.write_text("planted")
    # a file named under another name than its own
    grp.write_text(json.dumps({"child_paths": {"k.cubin": str(elsewhere)}}))
    assert tc.trusted_group("KEY1", "k.json") is None
    # a link out of the folder
    (layer / "KEY1" / "k.cubin").unlink()
    (layer / "KEY1" / "k.cubin").symlink_to(elsewhere)
    grp.write_text(json.dumps({"child_paths": {"k.cubin": str(layer / "KEY1" / "k.cubin")}}))
    assert tc.trusted_group("KEY1", "k.json") is None
    # a key that climbs out, junk, a missing file
    assert tc.trusted_group("../KEY1", "k.json") is None
    grp.write_text("not json")
    assert tc.trusted_group("KEY1", "k.json") is None
    assert tc.trusted_group("NOPE", "k.json") is None


def test_the_layer_is_used_only_when_no_one_else_can_write_it(tmp_path, monkeypatch):
    folder = tmp_path / "layer"
    monkeypatch.setenv(tc.TRUSTED_ENV, str(folder))
    assert tc.trusted_kernel_folder() == str(folder) and (folder.stat().st_mode & 0o777) == 0o755
    folder.chmod(0o775)
    assert tc.trusted_kernel_folder() is None
    monkeypatch.setenv(tc.TRUSTED_ENV, "off")
    assert tc.trusted_kernel_folder() is None
    # by default only as root, where the pool's children run under uids of
    # their own: a child of this user could otherwise plant a binary there
    monkeypatch.delenv(tc.TRUSTED_ENV)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert tc.trusted_kernel_folder() is None


def test_tests_of_the_unmodified_tree_write_the_layer_and_a_candidates_read_it(tmp_path, monkeypatch):
    """The environment each test run gets (a GPU's: the interpreter
    compiles nothing and gets no layer)."""
    from kernelsmith.inplace.config import BenchmarkConfig, InplaceConfig, TargetConfig
    from kernelsmith.inplace.evaluate import run_tests
    from kernelsmith.inplace.task import InplaceSpec

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    layer_dir = tmp_path / "layer"
    monkeypatch.setenv(tc.TRUSTED_ENV, str(layer_dir))
    tree = tmp_path / "tree"
    tree.mkdir()
    probe = (
        "import os, sys; print(repr([os.environ.get(k) for k in ('TRITON_CACHE_DIR', 'TRITON_CACHE_MANAGER', "
        f"'{tc.TRUSTED_ENV}')]))"
    )
    (tree / "probe.py").write_text(probe + "\nimport _ks_triton_cache  # the site folder's copy imports\n")
    config = InplaceConfig(
        name="t",
        tree=str(tree),
        target=TargetConfig(file="probe.py", function="f"),
        tests="python probe.py",
        inputs="x.py:make",
        benchmark=BenchmarkConfig(shapes=[[4]]),
    )
    spec = InplaceSpec(
        config=config,
        config_path=tmp_path / "t.yaml",
        base=tmp_path,
        tree=tree,
        original="",
        inputs_source="",
        inputs_function="make",
        module="probe",
    )
    store = at.AutotuneStore(str(tmp_path / "records"), persist=None)
    store.site_dir = at.write_site_folder(str(tmp_path / "site"))
    monkeypatch.setenv(tc.USER_ENV, "off")
    trusted = run_tests(spec, tree, isolation="none", autotune=store, trusted=True)
    assert trusted["passed"], trusted["output"]
    assert eval(trusted["output"].strip().splitlines()[-1]) == [str(layer_dir), None, str(layer_dir)]
    # the user's own Triton cache: the trusted run seeds the layer from it
    users = tmp_path / "users-triton"
    users.mkdir(mode=0o755)
    monkeypatch.setenv(tc.USER_ENV, str(users))
    seeded = run_tests(spec, tree, isolation="none", autotune=store, trusted=True)
    assert seeded["passed"], seeded["output"]
    assert eval(seeded["output"].strip().splitlines()[-1]) == [str(layer_dir), at.SITE_SEEDING_MANAGER, str(layer_dir)]
    other = run_tests(spec, tree, isolation="none", autotune=store, trusted=False)
    assert other["passed"], other["output"]
    cache, manager, layer_env = eval(other["output"].strip().splitlines()[-1])
    assert cache.startswith(str(tree)) and manager == at.SITE_CACHE_MANAGER and layer_env == str(layer_dir)


def test_the_trusted_run_seeds_the_layer_from_the_users_own_cache(tmp_path, monkeypatch):
    """What the user's own runs of the tests compiled (``~/.triton/cache``)
    is copied into the layer under the same key instead of compiled again;
    only a kernel's own plain files are taken."""
    pytest.importorskip("triton")
    layer_dir, users = tmp_path / "layer", tmp_path / "users"
    layer_dir.mkdir(mode=0o755)
    users.mkdir(mode=0o755)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(layer_dir))
    monkeypatch.setenv(tc.USER_ENV, str(users))
    files = _triton_layout(users, "KEY1")
    (users / "KEY1" / "fwd_kernel.autotune.json").write_text('{"configs_timings": [], "key": "x"}')
    manager = tc.SeedingCacheManager("KEY1")
    group = manager.get_group("k.json")
    assert group == {name: str(layer_dir / "KEY1" / name) for name in files}
    assert all(Path(group[n]).read_text() == Path(p).read_text() for n, p in files.items())
    # in the layer now, as a worker reads it (the group file too)
    monkeypatch.setenv(tc.TRUSTED_ENV, str(layer_dir))
    assert tc.trusted_group("KEY1", "k.json") == group
    # an autotune result (Triton's cache_results) the same way; junk names and other keys are not looked up
    assert manager.get_file("fwd_kernel.autotune.json") == str(layer_dir / "KEY1" / "fwd_kernel.autotune.json")
    (users / "outside.json").write_text("{}")
    assert manager.get_file("../outside.json") is None and manager.get_file("missing.json") is None
    assert tc.SeedingCacheManager("KEY2").get_group("k.json") is None
    # a link planted in the user's folder is not followed
    elsewhere = tmp_path / "elsewhere.cubin"
    elsewhere.write_text("planted")
    _triton_layout(users, "KEY3")
    (users / "KEY3" / "k.cubin").unlink()
    (users / "KEY3" / "k.cubin").symlink_to(elsewhere)
    assert tc.SeedingCacheManager("KEY3").get_group("k.json") is None
    assert not (layer_dir / "KEY3" / "k.cubin").exists()


def test_the_users_cache_is_read_only_when_it_is_theirs_alone(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o755)
    monkeypatch.delenv(tc.USER_ENV, raising=False)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(folder))
    assert tc.user_triton_cache() == str(folder.resolve())
    folder.chmod(0o777)
    assert tc.user_triton_cache() is None  # anyone could have planted a kernel there
    folder.chmod(0o755)
    monkeypatch.setenv(tc.USER_ENV, "off")
    assert tc.user_triton_cache() is None
    monkeypatch.setenv(tc.USER_ENV, str(tmp_path / "missing"))
    assert tc.user_triton_cache() is None
    # Triton's own default: $TRITON_HOME/.triton/cache
    monkeypatch.delenv(tc.USER_ENV)
    monkeypatch.delenv("TRITON_CACHE_DIR")
    monkeypatch.setenv("TRITON_HOME", str(tmp_path))
    (tmp_path / ".triton" / "cache").mkdir(parents=True, mode=0o755)
    assert tc.user_triton_cache() == str((tmp_path / ".triton" / "cache").resolve())


def test_pool_workers_and_the_referee_read_the_layer(monkeypatch, tmp_path):
    from kernelsmith.backends import get_backend

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setenv(tc.TRUSTED_ENV, str(tmp_path / "layer"))
    env = get_backend("triton").worker_env(str(tmp_path / "w"))
    assert env[tc.TRUSTED_ENV] == str(tmp_path / "layer") and env["TRITON_CACHE_MANAGER"] == tc.MANAGER
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "w" / ".triton")  # its own writes stay private
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert tc.TRUSTED_ENV not in get_backend("triton").worker_env(str(tmp_path / "w"))


# -- the autotune benchmark's budget -----------------------------------------


class _Tuner:
    def __init__(self, **kw):
        self._do_bench = kw.get("do_bench")
        self.num_warmups = kw.get("warmup")
        self.num_reps = kw.get("rep")
        self.use_cuda_graph = kw.get("use_cuda_graph", False)


def test_the_default_benchmark_is_shortened_and_a_packages_own_is_not(monkeypatch):
    triton_testing = pytest.importorskip("triton.testing")
    calls = []
    monkeypatch.setattr(triton_testing, "do_bench", lambda fn, warmup, rep, quantiles: calls.append((warmup, rep)))
    tuner = _Tuner()
    assert at.shorten_benchmark(tuner) == "5,20 ms"
    tuner.do_bench(lambda: None, quantiles=(0.5,))
    assert calls == [(5.0, 20.0)]
    monkeypatch.setenv(at.BENCH_ENV, "10,50")
    assert at.shorten_benchmark(_Tuner()) == "10,50 ms"
    own = _Tuner(do_bench=lambda *a, **k: None)
    assert at.shorten_benchmark(own) == "" and "do_bench" not in own.__dict__
    assert at.shorten_benchmark(_Tuner(rep=100)) == "" and at.shorten_benchmark(_Tuner(use_cuda_graph=True)) == ""
    monkeypatch.setenv(at.BENCH_ENV, "triton")
    assert at.shorten_benchmark(_Tuner()) == ""


def test_the_budget_reaches_tritons_own_autotuner_through_its_cached_property(monkeypatch):
    """Triton reads ``do_bench`` through a cached property: set after a
    first read, the budget still applies."""
    pytest.importorskip("triton")
    from triton.runtime.autotuner import Autotuner

    if not hasattr(Autotuner, "do_bench") or not hasattr(Autotuner.do_bench, "__set_name__"):
        pytest.skip("this Triton has no cached do_bench property")
    import triton.testing as triton_testing

    calls = []
    monkeypatch.setattr(triton_testing, "do_bench", lambda fn, warmup, rep, quantiles: calls.append((warmup, rep)))
    tuner = Autotuner.__new__(Autotuner)
    tuner._do_bench, tuner.num_warmups, tuner.num_reps, tuner.use_cuda_graph = None, None, None, False
    tuner.__dict__["do_bench"] = "what a first read cached"
    at.shorten_benchmark(tuner)
    tuner.do_bench(lambda: None, quantiles=None)
    assert calls == [(5.0, 20.0)]
    assert sys.modules["triton.testing"] is triton_testing and os.environ.get(at.BENCH_ENV) is None
