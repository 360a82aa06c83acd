"""The OpenCL example seeds are correct for every value of their `# tune:`
annotations, on the default and the extra input shapes. The example code is
ours (trusted), so it runs in-process here; the evaluator tests run it sandboxed."""

from __future__ import annotations

import itertools
import re
import types
from pathlib import Path

import pytest
import torch
import yaml

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "opencl"
NAMES = ["softmax", "layernorm", "matmul", "fused_residual"]
TUNE = re.compile(r"^(?P<name>[A-Z_][A-Z0-9_]*)\s*=\s*(?P<value>\S+)\s*#\s*tune:\s*\[(?P<values>[^\]]*)\]", re.M)


def _module(source: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module


def _variants(seed: str) -> list[tuple[str, str]]:
    """(label, source) for every combination of the tunables' values."""
    tunables = [
        (m.group("name"), m.group("value"), [v.strip() for v in m.group("values").split(",")])
        for m in TUNE.finditer(seed)
    ]
    assert tunables, "seed has no `# tune:` annotations"
    out = []
    for combo in itertools.product(*[values for _, _, values in tunables]):
        source = seed
        for (name, _, _), value in zip(tunables, combo):
            source = re.sub(rf"^{name}\s*=\s*\S+", f"{name} = {value}", source, count=1, flags=re.M)
        out.append((",".join(f"{n}={v}" for (n, _, _), v in zip(tunables, combo)), source))
    return out


def _cases() -> list[tuple[str, str, str]]:
    cases = []
    for name in NAMES:
        seed = (EXAMPLES / name / "seed.py").read_text()
        cases += [(name, label, source) for label, source in _variants(seed)]
    return cases


@pytest.mark.parametrize("name", NAMES)
def test_task_yaml_names_the_opencl_backend(name: str) -> None:
    config = yaml.safe_load((EXAMPLES / name / "task.yaml").read_text())
    assert config["backend"] == "opencl"
    reference = _module((EXAMPLES / name / "reference.py").read_text(), f"{name}_ref")
    for extra in config.get("extra_inputs", []):
        assert callable(getattr(reference, extra)), extra


@pytest.mark.parametrize("name,label,source", _cases(), ids=[f"{n}[{l}]" for n, l, _ in _cases()])
def test_every_tuned_variant_matches_the_reference(name: str, label: str, source: str) -> None:
    config = yaml.safe_load((EXAMPLES / name / "task.yaml").read_text())
    atol = float(config.get("atol", 1e-4))
    rtol = float(config.get("rtol", 1e-4))
    reference = _module((EXAMPLES / name / "reference.py").read_text(), f"{name}_ref")
    candidate = _module(source, f"{name}_seed")
    torch.manual_seed(0)
    model = reference.Model(*reference.get_init_inputs())
    torch.manual_seed(0)
    model_new = candidate.ModelNew(*reference.get_init_inputs())
    generators = [reference.get_inputs] + [getattr(reference, e) for e in config.get("extra_inputs", [])]
    with torch.no_grad():
        for generate in generators:
            inputs = generate()
            expected = model(*[x.clone() for x in inputs])
            got = model_new(*inputs)
            torch.testing.assert_close(got, expected, atol=atol, rtol=rtol, msg=lambda m: f"{label}: {m}")
