"""The checked-in _core.pyi is what scripts/gen_core_stub.py writes from the
built extension: a binding added, removed or re-typed without regenerating
the stub fails here, naming the names and signatures that differ."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import kernelsmith
from kernelsmith import _core

ROOT = Path(__file__).resolve().parents[1]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_core_stub", ROOT / "scripts" / "gen_core_stub.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _signatures(text: str) -> dict[str, list[str]]:
    """Dotted name -> the signatures (parameters and return, one per
    overload or property accessor) that the stub declares for it."""
    out: dict[str, list[str]] = {}

    def walk(body: list, prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                bases = ", ".join(ast.unparse(b) for b in node.bases)
                out.setdefault(prefix + node.name, []).append(f"class({bases})")
                walk(node.body, prefix + node.name + ".")
            elif isinstance(node, ast.FunctionDef):
                decorators = ",".join(ast.unparse(d) for d in node.decorator_list)
                returns = ast.unparse(node.returns) if node.returns else ""
                out.setdefault(prefix + node.name, []).append(f"[{decorators}]({ast.unparse(node.args)}) -> {returns}")
            elif isinstance(node, ast.AnnAssign):
                out.setdefault(prefix + ast.unparse(node.target), []).append(ast.unparse(node.annotation))

    walk(ast.parse(text).body, "")
    return out


def test_stub_matches_the_built_module():
    stub_path = Path(kernelsmith.__file__).with_name("_core.pyi")
    assert stub_path.exists(), "kernelsmith/_core.pyi must sit next to the extension"
    checked_in = _signatures(stub_path.read_text())
    built = _signatures(_generator().generate(_core))
    missing = sorted(set(built) - set(checked_in))
    stale = sorted(set(checked_in) - set(built))
    changed = sorted(n for n in set(built) & set(checked_in) if built[n] != checked_in[n])
    assert not (missing or stale or changed), (
        "_core.pyi drifted from the bindings; run `PYTHONPATH=python python3 scripts/gen_core_stub.py`.\n"
        f"not in the stub: {missing}\nno longer bound: {stale}\n"
        + "\n".join(f"{n}: stub {checked_in[n]} != built {built[n]}" for n in changed)
    )
    # The generator is deterministic: the whole text is what it writes.
    assert stub_path.read_text() == _generator().generate(_core)


def test_drift_is_detected_and_named():
    """A stub that lost a function and re-typed another fails the comparison."""
    text = _generator().generate(_core)
    built = _signatures(text)
    assert "timing.median" in built and "_Engine.ask" in built and "opencl.Context.__init__" in built
    tampered = text.replace("def median(samples", "def median_of(samples", 1)
    tampered = tampered.replace("def complexity(source: str) -> float", "def complexity(source: str) -> int", 1)
    drifted = _signatures(tampered)
    assert "timing.median" not in drifted and drifted["complexity"] != built["complexity"]
    # And the signature of every bound function is in the stub, parameter names included.
    assert "(samples: typing.Annotated[numpy.typing.ArrayLike, numpy.float64]) -> float" in built["timing.median"][0]
