"""Source text of the target: EVOLVE-BLOCK markers, and the two programs the
evaluator compares (the original file and the candidate file, each with a
small wrapper)."""
from __future__ import annotations

import ast
import re
from pathlib import PurePosixPath
from typing import Sequence

from .config import InplaceError

START = "# EVOLVE-BLOCK-START"
END = "# EVOLVE-BLOCK-END"
#: the marker lines kernelsmith inserts; the patch leaves them out
INSERTED_START = START + " (kernelsmith; not part of the patch)"
INSERTED_END = END + " (kernelsmith; not part of the patch)"


def has_markers(text: str) -> bool:
    return any(line.strip().startswith(START) for line in text.splitlines())


def _spans(tree: ast.Module) -> dict[str, tuple[int, int]]:
    """Top-level name -> (first line incl. decorators, last line), 1-based."""
    spans: dict[str, tuple[int, int]] = {}
    for node in tree.body:
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        end = getattr(node, "end_lineno", node.lineno) or node.lineno
        names: list[str] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
        for name in names:
            spans[name] = (start, end)
    return spans


def insert_markers(text: str, names: Sequence[str], filename: str = "<target>") -> str:
    """``text`` with EVOLVE-BLOCK markers around the top-level definitions
    ``names`` (one block from the first to the last of them). The inserted
    marker lines say they are kernelsmith's, and :func:`strip_markers` removes
    exactly them."""
    try:
        tree = ast.parse(text, filename=filename)
    except SyntaxError as exc:
        raise InplaceError(f"{filename}: not valid Python: {exc.msg} (line {exc.lineno})") from None
    spans = _spans(tree)
    missing = [n for n in names if n not in spans]
    if missing:
        known = ", ".join(sorted(spans)) or "none"
        raise InplaceError(f"{filename}: no top-level definition named {', '.join(missing)} (top-level names: {known})")
    first = min(spans[n][0] for n in names)
    last = max(spans[n][1] for n in names)
    lines = text.splitlines()
    indent = ""
    out = lines[: first - 1] + [indent + INSERTED_START] + lines[first - 1: last] + [INSERTED_END] + lines[last:]
    return "\n".join(out) + "\n"


def strip_markers(text: str) -> str:
    """The file as it goes into the tree: kernelsmith's own marker lines removed
    (markers the user wrote stay)."""
    kept = [line for line in text.splitlines(keepends=True)
            if line.rstrip("\r\n").strip() not in (INSERTED_START, INSERTED_END)]
    return "".join(kept)


def seed_program(original: str, target_function: str, region: Sequence[str], filename: str) -> str:
    """The program the search starts from: the target file, with markers
    inserted around the region unless the file already has its own."""
    if has_markers(original):
        return original if original.endswith("\n") else original + "\n"
    return insert_markers(original, list(region) or [target_function], filename)


def module_name(file: str, python_path: Sequence[str]) -> str:
    """Dotted module name of ``file`` (relative to the tree) under the first
    entry of ``python_path`` that contains it."""
    path = PurePosixPath(file)
    for root in python_path:
        root_path = PurePosixPath(root)
        if str(root_path) in ("", "."):
            rel = path
        else:
            try:
                rel = path.relative_to(root_path)
            except ValueError:
                continue
        parts = list(rel.with_suffix("").parts)
        if parts and parts[-1] == "__init__":
            parts = parts[:-1]
        return ".".join(parts)
    raise InplaceError(f"target.file {file}: not under any python_path folder ({', '.join(python_path)})")


_FUTURE = re.compile(r"^from\s+__future__\s+import\s+.+$", re.MULTILINE)


def absolute_imports(text: str, module: str) -> str:
    """Relative imports (``from .x import y``) made absolute against
    ``module``'s package, so the file's text can run as a program of its own
    next to the installed tree (line numbers unchanged)."""
    package = module.rsplit(".", 1)[0] if "." in module else ""

    def repl(match: re.Match) -> str:
        dots, rest = match.group("dots"), match.group("rest") or ""
        parts = package.split(".") if package else []
        up = len(dots) - 1
        if up > len(parts):
            return match.group(0)
        base = parts[: len(parts) - up] if up else parts
        target = ".".join(base + ([rest] if rest else []))
        return f"{match.group('indent')}from {target} import"

    return re.sub(r"^(?P<indent>[ \t]*)from\s+(?P<dots>\.+)(?P<rest>[\w.]*)\s+import", repl, text, flags=re.MULTILINE)


def hoist_future(text: str) -> tuple[list[str], str]:
    """(``from __future__`` lines, the rest): such imports must come first in
    a program, before the wrapper's header."""
    lines = _FUTURE.findall(text)
    return lines, _FUTURE.sub("", text)


def _header(tree_paths: Sequence[str]) -> str:
    return ("import sys as _ks_sys\n"
            f"for _ks_path in reversed({list(tree_paths)!r}):\n"
            "    if _ks_path not in _ks_sys.path:\n"
            "        _ks_sys.path.insert(0, _ks_path)\n")


def candidate_program(file_text: str, *, module: str, function: str, tree_paths: Sequence[str]) -> str:
    """The program the evaluator runs for a candidate file: the file's own
    code (relative imports made absolute, the rest of the package imported
    from the tree) and a ``ModelNew`` whose forward is the target function."""
    future, body = hoist_future(absolute_imports(strip_markers(file_text), module))
    return ("\n".join(future) + ("\n" if future else "") + _header(tree_paths) + body.rstrip("\n")
            + "\n\n\n# -- kernelsmith in-place wrapper: the target as the evaluated forward --\n"
            "import torch as _ks_torch\n\n\n"
            "class ModelNew(_ks_torch.nn.Module):\n"
            "    def forward(self, *args):\n"
            f"        return {function}(*args)\n")


def reference_program(file_text: str, inputs_text: str, *, module: str, function: str, tree_paths: Sequence[str],
                      inputs_function: str, shapes: dict[str, list], dtype: str) -> str:
    """The reference of the comparison: the original file, the user's inputs
    generator, ``Model`` calling the original target and one ``get_inputs*``
    function per shape (``shapes``: function name -> shape)."""
    future1, body = hoist_future(absolute_imports(strip_markers(file_text), module))
    future2, inputs_body = hoist_future(inputs_text)
    future = sorted(set(future1 + future2))
    getters = "".join(
        f"\n\ndef {name}():\n    return list({inputs_function}({tuple(shape)!r}, _ks_torch.{dtype}))\n"
        for name, shape in shapes.items())
    return ("\n".join(future) + ("\n" if future else "") + _header(tree_paths) + body.rstrip("\n")
            + "\n\n\n# -- the inputs generator of the in-place task --\n" + inputs_body.rstrip("\n")
            + "\n\n\n# -- kernelsmith in-place wrapper: the original target as the reference --\n"
            "import torch as _ks_torch\n\n\n"
            "class Model(_ks_torch.nn.Module):\n"
            "    def forward(self, *args):\n"
            f"        return {function}(*args)\n\n\n"
            "def get_init_inputs():\n    return []\n" + getters)
