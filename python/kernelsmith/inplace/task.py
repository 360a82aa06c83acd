"""The in-place task: a target in a source tree, turned into what the evolve
loop and the evaluator already know (a program to evolve, a reference to
compare with), plus what only an in-place task has (the tree, the project's
tests, the patch)."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..task import Task, TaskConfig, TimingConfig
from .config import InplaceConfig, InplaceError, load_config
from .source import candidate_program, module_name, reference_program, seed_program, strip_markers

#: lines of a caller shown in the prompt, either side of the call
CALLER_CONTEXT = 6
MAX_CALLERS = 4
MAX_TEST_CHARS = 6000


@dataclass
class InplaceSpec:
    config: InplaceConfig
    config_path: Path
    base: Path  # folder the config's relative paths start from
    tree: Path
    original: str  # the target file as it is in the tree
    inputs_source: str
    inputs_function: str
    module: str

    @property
    def tree_paths(self) -> list[str]:
        return [str((self.tree / p).resolve()) for p in self.config.python_path]

    @property
    def target_path(self) -> Path:
        return self.tree / self.config.target.file

    def seed(self) -> str:
        t = self.config.target
        return seed_program(self.original, t.function.split(".")[0], t.region, t.file, t.annotate)

    def marked_original(self) -> str:
        """The unmodified file with its EVOLVE block (no annotations): what
        ``task init`` checks."""
        t = self.config.target
        return seed_program(self.original, t.function.split(".")[0], t.region, t.file)

    def file_text(self, candidate: str) -> str:
        """What the candidate writes into the target file: kernelsmith's
        markers removed, and the ``# tune:`` comments that ``target.annotate``
        added (lines the original does not have) dropped, so the patch reads
        as the maintainers' code."""
        text = strip_markers(candidate)
        if not self.config.target.annotate:
            return text
        own = set(self.original.splitlines())
        out = []
        for line in text.splitlines(keepends=True):
            body = line.rstrip("\r\n")
            if body not in own and re.search(r"\s*#\s*tune\s*:", body):
                line = re.sub(r"\s*#\s*tune\s*:.*$", "", body) + line[len(body) :]
            out.append(line)
        return "".join(out)

    def program(self, candidate: str) -> str:
        """The evaluator's program for a candidate file (ModelNew = the candidate's target)."""
        return candidate_program(
            candidate, module=self.module, function=self.config.target.function, tree_paths=self.tree_paths
        )

    def comparison_task(
        self,
        *,
        dtype: Optional[str] = None,
        shape_index: int = 0,
        compare_shapes: bool = True,
        timed: bool = True,
        name_suffix: str = "",
    ) -> Task:
        """A KernelBench-format task: the original target as ``Model`` on
        benchmark shape ``shape_index`` (trials and timing), the comparison
        shapes as extra inputs."""
        c = self.config
        dtype = dtype or c.compare.dtypes[0]
        shapes: dict[str, list] = {"get_inputs": list(c.benchmark.shapes[shape_index])}
        extra = []
        if compare_shapes:
            for i, shape in enumerate(c.compare.shapes):
                shapes[f"get_inputs_compare_{i}"] = list(shape)
                extra.append(f"get_inputs_compare_{i}")
        ref = reference_program(
            self.original,
            self.inputs_source,
            module=self.module,
            function=c.target.function,
            tree_paths=self.tree_paths,
            inputs_function=self.inputs_function,
            shapes=shapes,
            dtype=dtype,
        )
        cfg = TaskConfig(
            name=c.name + name_suffix,
            backend=c.backend,
            dtype=dtype,
            atol=c.compare.atol,
            rtol=c.compare.rtol,
            trials=c.compare.trials,
            extra_inputs=extra,
            allowed_torch_ops=list(c.allowed_torch_ops),
            timeout_s=c.timeout_s,
            description=c.description,
            timing=TimingConfig(enabled=timed, repeats=3, input_sets=1),
        )
        return Task(reference_source=ref, config=cfg, path=str(self.config_path))

    # -- prompt context ---------------------------------------------------
    def callers(self) -> list[tuple[str, str]]:
        """(location, excerpt) of places in the tree that call the target."""
        name = self.config.target.function.split(".")[0]
        pattern = re.compile(rf"\b{re.escape(name)}\s*\(")
        found: list[tuple[str, str]] = []
        for path in sorted(self.tree.rglob("*.py")):
            rel = path.relative_to(self.tree).as_posix()
            if rel == self.config.target.file or any(part.startswith(".") for part in path.parts):
                continue
            try:
                lines = path.read_text(errors="replace").splitlines()
            except OSError:
                continue
            for i, line in enumerate(lines):
                if pattern.search(line) and not line.lstrip().startswith(("def ", "#")):
                    lo, hi = max(0, i - CALLER_CONTEXT), min(len(lines), i + CALLER_CONTEXT + 1)
                    found.append((f"{rel}:{i + 1}", "\n".join(lines[lo:hi])))
                    break
            if len(found) >= MAX_CALLERS:
                break
        return found

    def test_files(self) -> list[Path]:
        """Files of the tree named in the test command (e.g. a pytest selection)."""
        out = []
        for word in self.command(self.config.tests).split():
            candidate = self.tree / word.split("::")[0]
            if candidate.suffix == ".py" and candidate.is_file():
                out.append(candidate)
        return out

    def command(self, text: str) -> str:
        """A configured command with ``{config_dir}`` (the config file's folder,
        e.g. for tests kept outside an installed package's tree) filled in."""
        return text.replace("{config_dir}", str(self.base))

    def prompt_context(self) -> str:
        """What the prompt shows in place of a reference module: the target
        file as it is, the callers, the tests, what is compared and timed."""
        c = self.config
        parts = [
            f"Target: `{c.target.function}` in `{c.target.file}` (module `{self.module}`) of the tree "
            f"`{self.tree.name}`. The program below is that whole file; only the EVOLVE block changes, and "
            "the result goes back into the tree as a patch.",
            f"Correctness: the project's own tests (`{c.tests}`) must pass, and `{c.target.function}` must "
            f"match the original on random inputs of shapes {c.compare.shapes + c.benchmark.shapes} in "
            f"{', '.join(c.compare.dtypes)}.",
            f"Speed: timed against the original on shapes {c.benchmark.shapes} (the first one scores).",
            "",
            f"### The original file `{c.target.file}`",
            "```python",
            self.original.rstrip("\n"),
            "```",
        ]
        callers = self.callers()
        if callers:
            parts += ["", "### Callers in the tree"]
            for where, excerpt in callers:
                parts += [f"`{where}`:", "```python", excerpt, "```"]
        for test in self.test_files():
            text = test.read_text(errors="replace")
            if len(text) > MAX_TEST_CHARS:
                text = text[:MAX_TEST_CHARS] + "\n# ... (cut)"
            shown = test.relative_to(self.tree).as_posix() if test.is_relative_to(self.tree) else test.name
            parts += ["", f"### Test file `{shown}`", "```python", text.rstrip("\n"), "```"]
        parts += [
            "",
            "### Inputs generator (shape, dtype) -> arguments",
            "```python",
            self.inputs_source.rstrip("\n"),
            "```",
        ]
        return "\n".join(parts)


@dataclass
class InplaceTask(Task):
    """A :class:`Task` whose reference is the original target (for the
    comparison and timing) and whose seed is the target file with its EVOLVE
    block; ``spec`` holds the tree, tests and target."""

    spec: Optional[InplaceSpec] = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        data["inplace"] = {"config_path": str(self.spec.config_path)} if self.spec else None
        return data


def load_inplace(path: str | Path, *, tree: Optional[str | Path] = None) -> InplaceTask:
    """Load an in-place task from its YAML (or a folder holding ``inplace.yaml``).
    ``tree`` replaces the configured tree (a resumed run's own copy)."""
    config, base = load_config(path)
    config_path = Path(path)
    if config_path.is_dir():
        config_path = config_path / "inplace.yaml"
    tree_path = Path(tree) if tree is not None else (base / config.tree)
    tree_path = tree_path.resolve()
    if not tree_path.is_dir():
        raise InplaceError(f"{config_path}: tree {tree_path} is not a folder")
    target = tree_path / config.target.file
    if not target.is_file():
        raise InplaceError(f"{config_path}: target.file {config.target.file} is not a file of {tree_path}")
    inputs_file, _, inputs_function = config.inputs.rpartition(":")
    inputs_path = base / inputs_file
    if not inputs_path.is_file():
        raise InplaceError(f"{config_path}: inputs file {inputs_path} not found")
    spec = InplaceSpec(
        config=config,
        config_path=config_path.resolve(),
        base=base,
        tree=tree_path,
        original=target.read_text(),
        inputs_source=inputs_path.read_text(),
        inputs_function=inputs_function,
        module=module_name(config.target.file, config.python_path),
    )
    if not re.search(rf"^def\s+{re.escape(inputs_function)}\s*\(", spec.inputs_source, re.MULTILINE):
        raise InplaceError(f"{inputs_path}: defines no top-level function {inputs_function}(shape, dtype)")
    head = config.target.function.split(".")[0]
    if not re.search(rf"^((async\s+)?def|class)\s+{re.escape(head)}\s*[(:]", spec.original, re.MULTILINE):
        raise InplaceError(
            f"{target}: defines no top-level function or class {head} (target.function {config.target.function})"
        )
    base_task = spec.comparison_task()
    return InplaceTask(
        reference_source=base_task.reference_source,
        config=base_task.config,
        seed_source=spec.seed(),
        path=str(spec.config_path),
        spec=spec,
    )


def git_head(tree: Path) -> str:
    """The tree's git commit, '' when it is not a git checkout."""
    try:
        out = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""
