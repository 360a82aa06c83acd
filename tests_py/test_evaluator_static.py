"""Static checks, env scrubbing, op-name normalisation and result records:
the fast parts of the evaluator, no worker processes."""

from __future__ import annotations

import json

import pytest

from kernelsmith.backends import available_backends, get_backend
from kernelsmith.evaluator import scrub_env
from kernelsmith.result import EvalResult

HEADER = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
"""

MODEL = """
class ModelNew(nn.Module):
    def forward(self, x):
        y = x.clone()
        k[(1,)](y, y.numel(), BLOCK=1024)
        return y
"""


@pytest.fixture(scope="module")
def triton_backend():
    return get_backend("triton")


def check(backend, body: str, header: str = HEADER):
    return backend.static_check(header + body)


def test_clean_candidate_has_no_findings(triton_backend):
    rep = check(triton_backend, MODEL)
    assert rep.errors == [] and rep.hacks == [] and rep.warnings == []


@pytest.mark.parametrize(
    "snippet,reason",
    [
        ("try:\n    pass\nexcept Exception:\n    pass\n", "try/except"),
        ("import threading\n", "import of threading"),
        ("from concurrent.futures import ThreadPoolExecutor\n", "import of concurrent.futures"),
        ("import multiprocessing as mp\n", "import of multiprocessing"),
        ("s = torch.cuda.Stream()\n", "torch.cuda.Stream"),
        ("ctx = torch.cuda.stream(None)\n", "torch.cuda.stream"),
        ("import time\ntime.perf_counter = lambda: 0.0\n", "assignment to time.perf_counter"),
        ("torch.cuda.Event.elapsed_time = lambda a, b: 0.0\n", "assignment to torch.cuda.Event.elapsed_time"),
        ("torch.nn.functional.relu = print\n", "assignment to torch.nn.functional.relu"),
        ("setattr(torch, 'matmul', print)\n", "setattr() on module torch"),
        ("from contextlib import suppress\n", "contextlib.suppress"),
        ("import sys\nf = sys._getframe(1)\n", "introspecting the harness"),
        ("import gc\n", "import of gc"),
        ("m = Model()\n", "reference Model"),
        ("exec('x = 1')\n", "exec()"),
    ],
)
def test_hacks_found(triton_backend, snippet, reason):
    rep = check(triton_backend, MODEL + "\n" + snippet)
    assert any(reason in h for h in rep.hacks), rep.hacks


def test_own_copy_of_model_class_is_not_a_static_hack(triton_backend):
    copy = "class Model(nn.Module):\n    def __init__(self):\n        super(Model, self).__init__()\n"
    assert check(triton_backend, MODEL + copy).hacks == []


def test_candidate_without_triton_kernel_is_hacked(triton_backend):
    rep = triton_backend.static_check(
        "import torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"
    )
    assert any("no @triton.jit kernel" in h for h in rep.hacks)


def test_autotuned_kernel_counts_as_kernel(triton_backend):
    src = HEADER.replace("@triton.jit", "@triton.autotune(configs=[], key=['n'])\n@triton.jit") + MODEL
    assert triton_backend.static_check(src).hacks == []


@pytest.mark.parametrize(
    "snippet",
    [
        "z = torch.zeros(3).half()\n",
        "z = torch.zeros(3).to(torch.bfloat16)\n",
        "z = torch.zeros(3, dtype=torch.float16)\n",
    ],
)
def test_precision_lowering_is_a_warning_not_a_hack(triton_backend, snippet):
    rep = check(triton_backend, MODEL + snippet)
    assert rep.hacks == [] and rep.errors == []
    assert any("lowers precision" in w for w in rep.warnings)


def test_syntax_error_and_missing_modelnew_are_errors(triton_backend):
    rep = triton_backend.static_check("def f(:\n  pass\n")
    assert rep.errors and "SyntaxError" in rep.errors[0] and "line 1" in rep.errors[0]
    rep = check(triton_backend, "class Other(nn.Module):\n    pass\n")
    assert any("No class ModelNew" in e for e in rep.errors)


def test_scrub_env_removes_keys_and_tokens_keeps_the_rest():
    env = {
        "OPENAI_API_KEY": "x",
        "ANTHROPIC_API_KEY": "x",
        "GITHUB_TOKEN": "x",
        "HF_TOKEN": "x",
        "AWS_SECRET_ACCESS_KEY": "x",
        "MY_SERVICE_PASSWORD": "x",
        "WANDB_API_KEY": "x",
        "db_secret": "x",
        "PATH": "/usr/bin",
        "TRITON_INTERPRET": "1",
        "CUDA_VISIBLE_DEVICES": "0",
        "LD_LIBRARY_PATH": "/lib",
    }
    assert scrub_env(env) == {
        "PATH": "/usr/bin",
        "TRITON_INTERPRET": "1",
        "CUDA_VISIBLE_DEVICES": "0",
        "LD_LIBRARY_PATH": "/lib",
    }


def test_backend_discovery():
    assert "triton" in available_backends()
    with pytest.raises(ValueError, match="unknown backend 'nope'; available: .*triton"):
        get_backend("nope")
    tips = get_backend("triton").prompt_tips({"device": "NVIDIA H200", "compute_capability": "9.0", "sm_count": 132})
    assert "H200" in tips and "132 SMs" in tips


def test_eval_result_round_trip_and_validation():
    r = EvalResult(
        category="incorrect",
        compiled=True,
        error="output 0 differs",
        correctness={
            "max_abs_err": 0.5,
            "max_rel_err": 0.1,
            "atol": 1e-4,
            "rtol": 1e-4,
            "trials": 2,
            "first_mismatch": {
                "input_set": "get_inputs",
                "trial": 1,
                "output": 0,
                "index": [3, 4],
                "got": 1.0,
                "expected": 0.5,
            },
        },
        hardware={"device": "cpu"},
        isolation="bwrap",
    )
    assert EvalResult.from_dict(json.loads(json.dumps(r.to_dict()))) == r
    text = r.render_feedback()
    assert "INCORRECT" in text and "index [3, 4]" in text and "max abs error 0.5" in text
    with pytest.raises(ValueError, match="category"):
        EvalResult(category="weird")
    with pytest.raises(ValueError, match="unknown EvalResult keys: bogus"):
        EvalResult.from_dict({**r.to_dict(), "bogus": 1})


def test_op_names_normalised():
    pytest.importorskip("torch")
    from kernelsmith.evaluator.guards import DEFAULT_ALLOWED_OPS, normalize_op

    assert normalize_op("aten.add.Tensor") == "add"
    assert normalize_op("torch.matmul") == "matmul"
    assert normalize_op("relu") == "relu"
    assert "empty_like" in DEFAULT_ALLOWED_OPS and "mm" not in DEFAULT_ALLOWED_OPS


def test_available_backends_are_exactly_the_backends():
    """Only backends are listed: not ``base`` or ``_choose`` beside them, nor
    the helper modules inside a backend's package (``triton.cache``,
    ``triton.launch``, ``triton.autotune``, ``cuda.toolchain``...), found here
    by walking the package so that a new helper is covered too; none of them
    loads by name, and each listed one does."""
    import pkgutil

    import kernelsmith.backends as package

    names = available_backends()
    assert names == ["cuda", "opencl", "triton"], names
    for name in names:
        assert get_backend(name).name == name
    helpers = {
        info.name[len("kernelsmith.backends.") :]
        for info in pkgutil.walk_packages(package.__path__, "kernelsmith.backends.")
    } - set(names)
    assert {
        "base",
        "_choose",
        "triton.cache",
        "triton.launch",
        "triton.warm",
        "triton.autotune",
        "triton.backend",
        "cuda.toolchain",
        "cuda.backend",
    } <= helpers, sorted(helpers)
    for helper in sorted(helpers | {"triton.base"}):
        with pytest.raises(ValueError, match="unknown backend"):
            get_backend(helper)
