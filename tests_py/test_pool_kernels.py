"""The audit hashes' kernel compiled once per pool (backends/triton/cache.py
``publish_kernels``, ``LayeredCacheManager``): what a trusted process (the
referee) compiled is copied into the pool's kernels folder, and a process
with an empty private cache then loads it instead of compiling it.

Real Triton compiles for an sm_90 target (LLVM and the ptxas Triton ships
with; no GPU is needed to compile), each in a process of its own with the
environment a pool gives it, since Triton reads its cache settings from the
environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

import kernelsmith  # noqa: E402
from kernelsmith.backends.triton import cache as tc  # noqa: E402
from kernelsmith.evaluator.audit import HASH_KERNELS  # noqa: E402

#: the folder holding the kernelsmith package this test imported
PACKAGE_ROOT = str(Path(kernelsmith.__file__).resolve().parent.parent)

#: one compile of the hash kernel for int32 words, as fused_digests launches
#: it (BLOCK, WARPS; numel and length not specialised), printing the cubin's
#: digest and the folders of the private cache it wrote
COMPILE = r"""
import hashlib, json, os, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kernelsmith.evaluator import audit_fused as F
sig = {"words_ptr": "*i32", "keys_ptr": "*i64", "out_ptr": "*i64", "numel": "i32", "length": "i32", "BLOCK": "constexpr"}
src = ASTSource(F._digest_kernel, sig, constexprs={"BLOCK": F.BLOCK})
kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": F.WARPS})
cache = os.environ["TRITON_CACHE_DIR"]
print(json.dumps({
    "cubin": hashlib.sha256(kernel.asm["cubin"]).hexdigest(),
    "name": kernel.metadata.name,
    # the files this compile wrote in its own cache (Triton makes a key's
    # folder when it looks the key up, so an empty one is no compile)
    "private": sorted(os.path.relpath(os.path.join(r, f), cache) for r, _, fs in os.walk(cache) for f in fs),
}))
"""


def _compile(cache: Path, **env: str) -> dict:
    # kernelsmith as this test run imports it (the installed package, or
    # the tree on PYTHONPATH): the compiled _core lives only there
    full = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "TRITON_CACHE_MANAGER")}
    full.update(
        PYTHONPATH=os.pathsep.join(p for p in (PACKAGE_ROOT, os.environ.get("PYTHONPATH", "")) if p),
        TRITON_CACHE_DIR=str(cache),
        TRITON_DEFAULT_FP_FUSION="1",
        **env,
    )
    done = subprocess.run([sys.executable, "-c", COMPILE], env=full, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def referee_cache(tmp_path_factory):
    """A trusted process's private cache after it compiled the hash kernel."""
    root = tmp_path_factory.mktemp("referee")
    try:
        first = _compile(root / ".triton")
    except AssertionError as exc:
        if "ptxas" in str(exc).lower() or "No such file" in str(exc):
            pytest.skip(f"this Triton cannot compile for sm_90 here: {str(exc)[-300:]}")
        raise
    assert first["name"] == HASH_KERNELS[0] and first["private"], first
    return root / ".triton", first


def test_a_worker_loads_the_kernel_the_referee_compiled_instead_of_compiling_it(referee_cache, tmp_path):
    source, first = referee_cache
    shared = tmp_path / "cache" / "triton-kernels"
    assert tc.publish_kernels(str(source), str(shared), HASH_KERNELS[0]) == 1
    # published once: a second look copies nothing, leaves no staging folder
    assert tc.publish_kernels(str(source), str(shared), HASH_KERNELS[0]) == 0
    assert (
        sorted(os.path.relpath(p, shared) for p in map(str, shared.rglob("*")) if os.path.isfile(p)) == first["private"]
    )
    for path in shared.rglob("*"):
        assert oct(path.stat().st_mode & 0o777) == ("0o755" if path.is_dir() else "0o644"), path

    worker = _compile(tmp_path / "worker", TRITON_CACHE_MANAGER=tc.MANAGER, **{tc.POOL_KERNELS_ENV: str(shared)})
    # the same binary, and nothing of it compiled into the worker's own cache
    assert worker["cubin"] == first["cubin"] and worker["private"] == [], worker
    # without the pool's folder the same process compiles it itself
    alone = _compile(tmp_path / "alone", TRITON_CACHE_MANAGER=tc.MANAGER)
    assert alone["cubin"] == first["cubin"] and alone["private"] == first["private"], alone


def test_only_plain_files_of_the_named_kernel_are_published(referee_cache, tmp_path):
    import shutil

    source, first = referee_cache
    planted = tmp_path / "src"
    shutil.copytree(source, planted)
    (key,) = {p.split(os.sep)[0] for p in first["private"]}
    # another kernel's name finds nothing
    assert tc.publish_kernels(str(planted), str(tmp_path / "none"), "other_kernel") == 0
    assert not (tmp_path / "none").exists()
    # a file of the group swapped for a link: the key is not published, and
    # no half-copied folder is left where a worker would look
    group = json.loads(next((planted / key).glob("__grp__*.json")).read_text())["child_paths"]
    victim = planted / key / sorted(os.path.basename(p) for p in group.values())[0]
    victim.unlink()
    victim.symlink_to("/etc/passwd")
    out = tmp_path / "out"
    assert tc.publish_kernels(str(planted), str(out), HASH_KERNELS[0]) == 0
    assert not out.exists() or os.listdir(out) == []


def test_the_backend_publishes_where_the_pools_workers_look(referee_cache, tmp_path, monkeypatch):
    """The pool's wiring: TritonBackend.publish_kernels copies from the
    referee's own cache (its working folder's, as worker_env names it) into
    the folder shared_cache_env names to every worker; the interpreter
    compiles nothing and publishes nothing."""
    from kernelsmith.backends.triton import backend as tb

    source, first = referee_cache
    backend = tb.TritonBackend()
    shared = tmp_path / "cache"
    monkeypatch.setattr(tb, "_interpret", lambda: True)
    assert backend.publish_kernels(str(source.parent), str(shared), HASH_KERNELS) == 0
    assert backend.shared_cache_env(str(shared), str(tmp_path / "requests")) == {}
    monkeypatch.setattr(tb, "_interpret", lambda: False)
    assert backend.worker_env(str(source.parent))["TRITON_CACHE_DIR"] == str(source)
    env = backend.shared_cache_env(str(shared), str(tmp_path / "requests"))
    assert env["TRITON_CACHE_MANAGER"] == tc.MANAGER
    assert backend.publish_kernels(str(source.parent), str(shared), HASH_KERNELS) == 1
    (key,) = {p.split(os.sep)[0] for p in first["private"]}
    assert tc._group_in(env[tc.POOL_KERNELS_ENV], key, f"{HASH_KERNELS[0]}.json") is not None
