"""The shared Triton launcher cache (backends/triton/cache.py): requests are
untrusted hints checked against a strict grammar, workers read launchers
only from the trusted folder and only under Triton's own key, and on a GPU
with a Triton that builds launchers per signature (3.6 and older) the second
worker loads the launcher the trusted builder made."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

pytest.importorskip("triton")

from kernelsmith.backends.triton import cache as tc  # noqa: E402

HERE = Path(__file__).parent


@pytest.mark.parametrize(
    "signature",
    [
        ["*fp32", "*fp32", "i32", "constexpr"],
        ["*bf16", "*kfp16", "i64", "fp32", "u1"],
        [["*fp32", "*fp32"], "i32"],  # a tuple argument
    ],
)
def test_valid_signatures_round_trip(signature):
    assert tc.valid_signature(signature)
    assert tc.parse_request(tc.request_text(signature)) == signature


@pytest.mark.parametrize(
    "signature",
    [
        [],
        ["*fp32", 'i32); system("id"); //'],  # C injected through a type name
        ["*fp32", "I32"],
        ["tensordesc<fp32[64, 64]>"],  # descriptors depend on lowering metadata: not shared
        ["*fp32"] * 129,
        [[[["i32"]]]],  # nested too deep
        ["*fp32", 3],
        "*fp32,i32",
        {"0": "*fp32"},
    ],
)
def test_invalid_signatures_are_refused(signature):
    assert not tc.valid_signature(signature)
    assert tc.parse_request(tc.HEADER + "\n" + __import__("json").dumps({"signature": signature})) is None


def test_requests_need_the_header_and_json():
    good = tc.request_text(["*fp32", "i32"])
    assert tc.parse_request(good) == ["*fp32", "i32"]
    assert tc.parse_request(good.replace(tc.HEADER, "kernelsmith-cuda-build")) is None
    assert tc.parse_request(tc.HEADER + "\n{not json") is None
    assert tc.parse_request(tc.HEADER + "\n" + "[" * 70000) is None


def test_layered_manager_reads_only_launchers_from_the_shared_folder(tmp_path, monkeypatch):
    private, shared = tmp_path / "private", tmp_path / "shared"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(private))
    monkeypatch.setenv(tc.SHARED_ENV, str(shared))
    key = "KEYABC"
    (shared / key).mkdir(parents=True)
    (shared / key / "__triton_launcher.so").write_bytes(b"trusted")
    (shared / key / "kernel.cubin").write_bytes(b"not for workers")
    manager = tc.LayeredCacheManager(key)
    assert manager.get_file("__triton_launcher.so") == str(shared / key / "__triton_launcher.so")
    # anything else comes from the private cache only
    assert manager.get_file("kernel.cubin") is None
    path = manager.put(b"mine", "kernel.cubin")
    assert Path(path).parent == private / key and manager.get_file("kernel.cubin") == path
    # without the shared folder it is Triton's own file cache
    monkeypatch.delenv(tc.SHARED_ENV)
    assert tc.LayeredCacheManager("OTHER").get_file("__triton_launcher.so") is None


def test_triton_names_the_manager_class_it_will_load(monkeypatch):
    """TRITON_CACHE_MANAGER as the pool sets it resolves to our class."""
    from triton import knobs

    monkeypatch.setenv("TRITON_CACHE_MANAGER", tc.MANAGER)
    assert knobs.cache.manager_class is tc.LayeredCacheManager


def _needs_launcher_builds():
    torch = pytest.importorskip("torch")
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0") or not torch.cuda.is_available():
        pytest.skip("needs a GPU (the interpreter builds no launcher)")
    if tc._driver() is None:
        pytest.skip("this Triton launches through one generic launcher: nothing to share")


@pytest.mark.gpu
def test_second_worker_loads_the_builders_launcher(monkeypatch):
    _needs_launcher_builds()
    # the shared launchers serve the signatures the generic launcher cannot
    # express (tensor descriptors); turned off here so a plain kernel uses them
    monkeypatch.setenv("KERNELSMITH_TRITON_GENERIC_LAUNCHER", "0")
    from kernelsmith.evaluator import Evaluator
    from kernelsmith.task import Task

    task = Task.load(HERE.parent / "examples" / "triton" / "relu", trials=1)
    with Evaluator(backend="triton", workers=1, spares=0, timing=False) as ev:
        first = ev.evaluate(task, task.seed_source)
        pool = next(iter(ev._device_pools.values()))
        shared = Path(pool.cache_dir, "triton")
        deadline = time.monotonic() + 120
        while not list(shared.glob("*/__triton_launcher*")) and time.monotonic() < deadline:
            time.sleep(0.5)
        built = list(shared.glob("*/__triton_launcher*"))
        assert built, Path(pool.root, "builder.log").read_text()
        second = ev.evaluate(task, task.seed_source)
    assert first.category == "ok" and second.category == "ok"
    assert second.phases["compile"] < first.phases["compile"], (first.phases, second.phases)
