"""What an in-place run leaves besides the usual run directory: the task's
own copy (``task/inplace.yaml`` with absolute paths, plus the comparison's
``reference.py`` and ``task.yaml`` so the export tools read the run like any
other), ``best.patch`` and ``summary.md``."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Optional

import yaml

from ..config import to_dict
from .evaluate import copy_tree, run_tests, test_environment, with_interpreter
from .patch import make_patch
from .task import InplaceTask, git_head
from .._astutil import parse as parse_source
from ..evaluator.sandbox import sandbox_prefix
from ..timing.harness import compare_samples


def write_task_copy(run_path: Path, task: InplaceTask) -> None:
    """The run's copy of the task (resume and export read it)."""
    spec = task.spec
    assert spec is not None
    folder = run_path / "task"
    folder.mkdir(parents=True, exist_ok=True)
    config = to_dict(spec.config)
    config["tree"] = str(spec.tree)
    inputs_file, _, fn = spec.config.inputs.rpartition(":")
    shutil.copy2(spec.base / inputs_file, folder / "inputs.py")
    config["inputs"] = f"inputs.py:{fn}"
    (folder / "inplace.yaml").write_text(yaml.safe_dump(config, sort_keys=False, default_flow_style=None))
    (folder / "reference.py").write_text(task.reference_source)
    (folder / "task.yaml").write_text(yaml.safe_dump(to_dict(task.config), sort_keys=False))
    (folder / "target_original.py").write_text(spec.original)


def _command_benchmark(task: InplaceTask, patched_text: str, isolation: str) -> Optional[dict[str, Any]]:
    """The project's own benchmark command, original and patched tree run
    alternately (A B, B A, ...), its printed times compared pairwise."""
    spec = task.spec
    assert spec is not None
    bench = spec.config.benchmark
    if not bench.command:
        return None
    pattern = re.compile(bench.time_regex)
    with tempfile.TemporaryDirectory(prefix="ks-inplace-bench-") as tmp:
        roots = {
            "original": copy_tree(spec.tree, Path(tmp) / "original"),
            "patched": copy_tree(spec.tree, Path(tmp) / "patched"),
        }
        (roots["patched"] / spec.config.target.file).write_text(patched_text)
        outputs: dict[str, list[str]] = {"original": [], "patched": []}

        def sample(side: str) -> float:
            root = roots[side]
            home = root / ".ks-home"
            home.mkdir(exist_ok=True)
            prefix, _, _ = sandbox_prefix(isolation, str(root))
            proc = subprocess.run(
                prefix + ["/bin/sh", "-c", with_interpreter(spec.command(bench.command))],
                cwd=root,
                capture_output=True,
                text=True,
                env=test_environment(spec, root, home),
                timeout=spec.config.tests_timeout_s,
            )
            text = proc.stdout + proc.stderr
            match = pattern.search(text)
            if proc.returncode != 0 or match is None:
                raise RuntimeError(
                    f"benchmark command on the {side} tree: exit {proc.returncode}, "
                    f"no time matching {bench.time_regex!r} in: {text[-500:]}"
                )
            outputs[side].append(match.group(0))
            return float(match.group(1))

        comp = compare_samples(
            lambda: sample("original"),
            lambda: sample("patched"),
            unit=bench.unit,
            min_samples=bench.repeats,
            max_samples=bench.repeats,
            time_budget_s=1e9,
        )
    return {
        "command": bench.command,
        "speedup": comp.speedup,
        "ci_low": comp.speedup_low,
        "ci_high": comp.speedup_high,
        "verdict": comp.verdict,
        "pairs": comp.n_pairs,
        "original_ms": comp.reference_median_s * 1e3,
        "patched_ms": comp.candidate_median_s * 1e3,
        "printed": outputs,
    }


def _shape_timings(task: InplaceTask, evaluator: Any, best_source: str) -> list[dict[str, Any]]:
    """Paired timing of the best against the original on every benchmark shape."""
    spec = task.spec
    assert spec is not None
    rows = []
    program = spec.program(best_source)
    for i, shape in enumerate(spec.config.benchmark.shapes):
        shape_task = spec.comparison_task(shape_index=i, compare_shapes=False, name_suffix=f"-shape{i}")
        result = evaluator.inner.evaluate(shape_task, program)
        rows.append(
            {
                "shape": shape,
                "dtype": shape_task.config.dtype,
                "correct": result.correct,
                "speedup": result.speedup,
                "ci_low": result.speedup_ci_low,
                "ci_high": result.speedup_ci_high,
                "verdict": result.timing_verdict,
                "runtime_ms": result.runtime_ms,
                "ref_runtime_ms": result.ref_runtime_ms,
                "unreliable": not result.timing_reliable,
                "error": "" if result.correct else (result.error or result.category)[:300],
            }
        )
    return rows


def _check_patch(task: InplaceTask, patch_text: str, isolation: str, autotune: Any = None) -> dict[str, Any]:
    """``git apply`` the patch to a fresh copy of the original tree, then run
    the project's tests there (``autotune``: the run's Triton autotune
    results, taken as every candidate's tests take them; fla-core's tests
    tune 274 configs without them, 104 s on the H100)."""
    spec = task.spec
    assert spec is not None
    with tempfile.TemporaryDirectory(prefix="ks-inplace-apply-") as tmp:
        root = copy_tree(spec.tree, Path(tmp) / "tree")
        patch_file = Path(tmp) / "best.patch"
        patch_file.write_text(patch_text)
        applied = subprocess.run(
            ["git", "apply", "--verbose", str(patch_file)], cwd=root, capture_output=True, text=True, timeout=60
        )
        if applied.returncode != 0:
            return {"applies": False, "error": applied.stderr[-800:]}
        tests = run_tests(spec, root, isolation=isolation, autotune=autotune)
    return {
        "applies": True,
        "tests_passed": tests["passed"],
        "tests_seconds": tests["seconds"],
        "tests_output": tests["output"][-600:],
    }


def _changed_summary(original: str, patched: str) -> list[str]:
    """Top-level definitions whose text changed, and changed tunable lines."""
    import ast

    def defs(text: str) -> dict[str, str]:
        out = {}
        for node in parse_source(text).body:
            names = (
                [node.name]
                if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                else [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
            )
            for name in names:
                out[name] = ast.get_source_segment(text, node) or ""
        return out

    a, b = defs(original), defs(patched)
    lines = []
    for name in b:
        if name not in a:
            lines.append(f"added `{name}`")
        elif a[name] != b[name]:
            if "\n" not in a[name] and "\n" not in b[name]:
                lines.append(f"`{a[name].strip()}` -> `{b[name].strip()}`")
            else:
                lines.append(f"rewrote `{name}`")
    lines += [f"removed `{name}`" for name in a if name not in b]
    return lines


def finish_run(
    run_path: Path, task: InplaceTask, evaluator: Any, summary: dict[str, Any], isolation: str = "auto"
) -> dict[str, Any]:
    """Write ``best.patch`` and ``summary.md`` (and ``inplace_summary.json``)."""
    spec = task.spec
    assert spec is not None
    best_file = run_path / "best_program.py"
    # lazy: cycle inplace.outputs -> evolve -> evolve.session -> inplace -> inplace.outputs
    from ..evolve.best import strip_header

    best_source = strip_header(best_file.read_text()) if best_file.exists() else (task.seed_source or spec.original)
    patched = spec.file_text(best_source)
    patch_text = make_patch(spec.original, patched, spec.config.target.file)
    (run_path / "best.patch").write_text(patch_text)
    info: dict[str, Any] = {
        "target": f"{spec.config.target.file}:{spec.config.target.function}",
        "tree": str(spec.tree),
        "git_head": git_head(spec.tree),
        "tests": spec.config.tests,
        "changed": bool(patch_text),
        "run": summary,
        "compare": {
            "shapes": spec.config.compare.shapes + spec.config.benchmark.shapes[:1],
            "dtypes": spec.config.compare.dtypes,
            "trials": spec.config.compare.trials,
        },
    }
    if patch_text:
        info["what_changed"] = _changed_summary(spec.original, patched)
        store = evaluator.autotune_store(task) if hasattr(evaluator, "autotune_store") else None
        info["patch_check"] = _check_patch(task, patch_text, isolation, autotune=store)
        info["shapes"] = _shape_timings(task, evaluator, best_source)
        try:
            info["command_benchmark"] = _command_benchmark(task, patched, isolation)
        except (RuntimeError, subprocess.TimeoutExpired, ValueError) as exc:
            info["command_benchmark"] = {"error": str(exc)}
    (run_path / "inplace_summary.json").write_text(json.dumps(info, indent=2, default=str))
    (run_path / "summary.md").write_text(render_summary(info))
    return info


def _fmt(value: Optional[float], spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def render_summary(info: dict[str, Any]) -> str:
    run = info.get("run") or {}
    out = [f"# kernelsmith: `{info['target']}`", ""]
    out.append(
        f"Tree `{info['tree']}`"
        + (f" at commit `{info['git_head'][:12]}`" if info.get("git_head") else "")
        + f"; {run.get('steps', '?')} steps, stop reason {run.get('stop_reason', '?')}, "
        f"{_fmt(run.get('wall_time_s'), '.0f')} s."
    )
    out.append("")
    if not info["changed"]:
        out += ["**No improvement found**: the best program is the original code; `best.patch` is empty.", ""]
        return "\n".join(out)
    shapes = info.get("shapes") or []
    faster = [r for r in shapes if r.get("correct") and (r.get("ci_low") or 0) > 1]
    slower = [r for r in shapes if r.get("correct") and (r.get("ci_high") or 2) < 1]
    if shapes and len(faster) == len(shapes):
        verdict = "Verdict: faster than the original on every benchmark shape (95% CI above 1)."
    elif slower:
        verdict = "Verdict: slower than the original on some shape: do not merge it as a speed-up."
    elif not faster:
        verdict = (
            "**No improvement found**: the best candidate is not shown faster than the original on any "
            "benchmark shape (every CI contains 1); `best.patch` holds it for inspection, not as a speed-up."
        )
    else:
        verdict = (
            f"Verdict: faster on {len(faster)} of {len(shapes)} benchmark shapes (CI above 1), not "
            "distinguishable from the original on the others."
        )
    out += [verdict, "", "## What changed", ""]
    out += [f"- {line}" for line in info.get("what_changed", [])] + [
        "",
        "See `best.patch` (`git apply best.patch` in the tree).",
        "",
    ]
    out += [
        "## Speedup per benchmark shape",
        "",
        "Paired, interleaved timing of the patched target against the original on the same inputs "
        "(kernelsmith's harness), 95% confidence intervals.",
        "",
        "| shape | dtype | original ms | patched ms | speedup | 95% CI | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in shapes:
        if not r.get("correct"):
            out.append(f"| {r['shape']} | {r['dtype']} | - | - | - | - | failed: {r.get('error', '')} |")
            continue
        note = " (timed under load)" if r.get("unreliable") else ""
        out.append(
            f"| {r['shape']} | {r['dtype']} | {_fmt(r.get('ref_runtime_ms'))} | {_fmt(r.get('runtime_ms'))} | "
            f"{_fmt(r.get('speedup'))}x | [{_fmt(r.get('ci_low'))}, {_fmt(r.get('ci_high'))}] | "
            f"{r.get('verdict') or '-'}{note} |"
        )
    bench = info.get("command_benchmark")
    if bench:
        out += ["", "## The project's benchmark command", ""]
        if bench.get("error"):
            out.append(f"`{bench.get('command', '')}` failed: {bench['error']}")
        else:
            out.append(
                f"`{bench['command']}`, original and patched tree alternately, {bench['pairs']} pairs: "
                f"{_fmt(bench['original_ms'])} ms -> {_fmt(bench['patched_ms'])} ms, speedup "
                f"{_fmt(bench['speedup'])}x [{_fmt(bench['ci_low'])}, {_fmt(bench['ci_high'])}] ({bench['verdict']})."
            )
    check = info.get("patch_check") or {}
    out += ["", "## Tests run", ""]
    compare = info.get("compare") or {}
    out.append(
        f"- every candidate: the project's tests `{info['tests']}` in a sandboxed copy of the tree, then "
        f"kernelsmith's randomized comparison with the original on fresh random inputs of shapes "
        f"{compare.get('shapes', '?')} in {', '.join(compare.get('dtypes', []))}, with the evaluator's "
        "integrity checks on the target's forward"
    )
    if check.get("applies"):
        out.append(
            f"- `best.patch` applied with `git apply` to a fresh copy of the original tree: the project's tests "
            f"{'passed' if check.get('tests_passed') else 'FAILED'} ({check.get('tests_seconds')} s)"
        )
    elif check:
        out.append(f"- `best.patch` did NOT apply: {check.get('error', '')}")
    return "\n".join(out) + "\n"
