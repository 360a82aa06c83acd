"""Source text of the target: EVOLVE-BLOCK markers, and the two programs the
evaluator compares (the original file and the candidate file, each with a
small wrapper)."""

from __future__ import annotations

import ast
import re
from pathlib import PurePosixPath
from typing import Optional, Sequence

from .config import InplaceError
from .._astutil import parse as parse_source

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
        tree = parse_source(text, filename=filename)
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
    out = lines[: first - 1] + [indent + INSERTED_START] + lines[first - 1 : last] + [INSERTED_END] + lines[last:]
    return "\n".join(out) + "\n"


def strip_markers(text: str) -> str:
    """The file as it goes into the tree: kernelsmith's own marker lines removed
    (markers the user wrote stay)."""
    kept = [
        line
        for line in text.splitlines(keepends=True)
        if line.rstrip("\r\n").strip() not in (INSERTED_START, INSERTED_END)
    ]
    return "".join(kept)


def seed_program(
    original: str, target_function: str, region: Sequence[str], filename: str, annotate: Sequence[dict] = ()
) -> str:
    """The program the search starts from: the target file, with markers
    inserted around the region unless the file already has its own, and the
    ``annotate`` line replacements (tunables for the mutator) made inside the
    block."""
    if has_markers(original):
        program = original if original.endswith("\n") else original + "\n"
    else:
        program = insert_markers(original, list(region) or [target_function], filename)
    if not annotate:
        return program
    lines = program.splitlines()
    starts = [i for i, ln in enumerate(lines) if ln.strip().startswith(START)]
    ends = [i for i, ln in enumerate(lines) if ln.strip().startswith(END)]
    lo, hi = starts[0], ends[-1]
    for entry in annotate:
        hits = [i for i in range(lo + 1, hi) if lines[i].strip() == entry["line"].strip()]
        if len(hits) != 1:
            raise InplaceError(
                f"{filename}: target.annotate line {entry['line']!r} is found "
                f"{len(hits)} times inside the EVOLVE block (must be exactly once)"
            )
        i = hits[0]
        indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
        new = [indent + part for part in entry["replace"].splitlines()]
        lines[i : i + 1] = new
        hi += len(new) - 1
    program = "\n".join(lines) + "\n"
    try:
        parse_source(program)
    except SyntaxError as exc:
        raise InplaceError(
            f"{filename}: target.annotate makes the file invalid: {exc.msg} (line {exc.lineno})"
        ) from None
    return program


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
    return (
        "import sys as _ks_sys\n"
        f"for _ks_path in reversed({list(tree_paths)!r}):\n"
        "    if _ks_path not in _ks_sys.path:\n"
        "        _ks_sys.path.insert(0, _ks_path)\n"
    )


def _header_line(tree_paths: Sequence[str]) -> str:
    """:func:`_header` as one statement line."""
    return (
        f"import sys as _ks_sys; [_ks_sys.path.insert(0, _ks_p) for _ks_p in reversed({list(tree_paths)!r}) "
        "if _ks_p not in _ks_sys.path]"
    )


def split_block(text: str) -> tuple[str, str, str]:
    """(before the first EVOLVE-BLOCK-START line, the block's lines, after
    the last EVOLVE-BLOCK-END line); the marker lines themselves are dropped."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, ln in enumerate(lines) if ln.strip().startswith(START)]
    ends = [i for i, ln in enumerate(lines) if ln.strip().startswith(END)]
    if not starts or not ends or ends[-1] < starts[0]:
        return "", text, ""
    inner = [ln for ln in lines[starts[0] + 1 : ends[-1]] if not ln.strip().startswith((START, END))]
    return "".join(lines[: starts[0]]), "".join(inner), "".join(lines[ends[-1] + 1 :])


def _bound_names(body: Sequence[ast.stmt]) -> list[str]:
    """Names a module's top-level statements bind (through if/try/with blocks)."""
    names: list[str] = []
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names += [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]
        elif isinstance(node, ast.Import):
            names += [(a.asname or a.name).split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names += [a.asname or a.name for a in node.names if a.name != "*"]
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            for field in ("body", "orelse", "finalbody"):
                names += _bound_names(getattr(node, field, []) or [])
            for handler in getattr(node, "handlers", []) or []:
                names += _bound_names(handler.body)
    return list(dict.fromkeys(n for n in names if n != "__future__"))


def context_module(prefix: str, module: str, folder: str | None = None) -> tuple[str, str, list[str]]:
    """The part of the file before the EVOLVE block as a module of its own
    (written once under ``folder``, named by its content's hash): (module
    name, folder, the names it binds). The candidate imports those names, so
    the evaluator's static checks see the block and what follows it, not the
    project's own code before it (which may use try/except and the like)."""
    import hashlib
    import os
    import tempfile

    text = absolute_imports(prefix, module)
    digest = hashlib.sha256((module + "\n" + text).encode()).hexdigest()[:12]
    name = f"_ks_ctx_{digest}"
    folder = folder or os.path.join(tempfile.gettempdir(), "kernelsmith-inplace-ctx")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name + ".py")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    try:
        names = _bound_names(parse_source(text).body)
    except SyntaxError:
        names = []
    return name, folder, names


def _plain_imports(text: str) -> list[tuple[str, list[str]]]:
    """(source line, names bound) of the module-level import statements."""
    try:
        tree = parse_source(text)
    except SyntaxError:
        return []
    out = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) and not (
            isinstance(node, ast.ImportFrom) and (node.module == "__future__" or node.level)
        ):
            if any(a.name == "*" for a in node.names):
                continue
            out.append((ast.unparse(node), _bound_names([node])))
    return out


def candidate_program(file_text: str, *, module: str, function: str, tree_paths: Sequence[str]) -> str:
    """The program the evaluator runs for a candidate file: the file's code
    before the EVOLVE block imported from a module of its own (see
    :func:`context_module`), the block and the rest of the file (relative
    imports made absolute, the rest of the package imported from the tree),
    and a ``ModelNew`` whose forward is the target function. The block
    starts on the line it starts on in the tree's file where the file has
    a line before it (see :func:`_aligned_head`)."""
    future, _ = hoist_future(file_text)
    prefix, block, suffix = split_block(file_text)
    statements = list(dict.fromkeys(future))
    paths = list(tree_paths)
    ctx_import = ""
    direct: list[tuple[str, list[str]]] = []
    if prefix.strip():
        ctx, folder, names = context_module(prefix, module)
        paths.append(folder)
        # plain top-level imports are repeated as they are, so the static
        # checks know torch, triton, ... as modules; the rest comes from ctx
        direct = _plain_imports(absolute_imports(prefix, module))
        bound = {name for _, names_ in direct for name in names_}
        names = [n for n in names if n not in bound]
        if names:
            ctx_import = f"from {ctx} import {', '.join(names)}"
    statements += [_header_line(paths)] + [line for line, _ in direct] + ([ctx_import] if ctx_import else [])
    _, body = hoist_future(absolute_imports(block + suffix, module))
    head = _aligned_head(statements, prefix.count("\n"))
    if head is None:  # the block starts on the file's first line: nothing to align with
        head = "\n".join(statements) + "\n\n"
    return (
        head + body.rstrip("\n") + "\n\n\n# -- kernelsmith in-place wrapper: the target as the evaluated forward --\n"
        "import torch as _ks_torch\n\n\n"
        "class ModelNew(_ks_torch.nn.Module):\n"
        "    def forward(self, *args):\n"
        f"        return {function}(*args)\n"
    )


def _aligned_head(statements: Sequence[str], lines: int) -> Optional[str]:
    """``statements`` (one line each) laid out on exactly ``lines`` lines:
    one a line and blank lines after them, or all on the first line joined
    by ``;`` where there are more statements than lines. Triton's compile
    cache key contains a kernel's first line number (its binaries carry line
    information), so a kernel of the evaluated program that sits on the line
    it has in the tree's file is the very kernel the project's tests and
    the reference compiled: one compile serves all of them
    (backends/triton/cache.py, the trusted kernel layer). None when
    ``lines`` is 0."""
    if lines < 1:
        return None
    if len(statements) <= lines:
        return "".join(s + "\n" for s in statements) + "\n" * (lines - len(statements))
    return "; ".join(statements) + "\n" + "\n" * (lines - 1)


_COMPOUND = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.If,
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.With,
    ast.AsyncWith,
    ast.Try,
    ast.Match,
) + ((ast.TryStar,) if hasattr(ast, "TryStar") else ())


def _on_first_line(head: str, body: str) -> Optional[str]:
    """``body`` with the statement ``head`` put before its first line, so no
    line of ``body`` moves (see :func:`_aligned_head`); None where its first
    line starts a compound statement (a ``def``, a decorator, an ``if``...)."""
    lines = body.splitlines(keepends=True)
    if not lines:
        return head + "\n"
    try:
        tree = parse_source(body)
    except SyntaxError:
        return None
    first = tree.body[0] if tree.body else None
    starts = first is not None and min([first.lineno] + [d.lineno for d in getattr(first, "decorator_list", [])]) == 1
    text = lines[0]
    if not starts:  # a comment or a blank line
        stripped = text.rstrip("\r\n")
        rest = text[len(stripped) :] or "\n"
        return head + ("  " + stripped.strip() if stripped.strip() else "") + rest + "".join(lines[1:])
    if isinstance(first, _COMPOUND):
        return None
    return head + "; " + text + "".join(lines[1:])


def reference_program(
    file_text: str,
    inputs_text: str,
    *,
    module: str,
    function: str,
    tree_paths: Sequence[str],
    inputs_function: str,
    shapes: dict[str, list],
    dtype: str,
) -> str:
    """The reference of the comparison: the original file, the user's inputs
    generator, ``Model`` calling the original target and one ``get_inputs*``
    function per shape (``shapes``: function name -> shape). The file's
    lines stay where they are in the tree (the header goes on its first
    line where it can: :func:`_on_first_line`)."""
    future1, body = hoist_future(absolute_imports(strip_markers(file_text), module))
    future2, inputs_body = hoist_future(inputs_text)
    future = sorted(set(future1 + future2))
    getters = "".join(
        f"\n\ndef {name}():\n    return list({inputs_function}({tuple(shape)!r}, _ks_torch.{dtype}))\n"
        for name, shape in shapes.items()
    )
    aligned = _on_first_line("; ".join(future + [_header_line(tree_paths)]), body)
    if aligned is None:
        aligned = "\n".join(future) + ("\n" if future else "") + _header(tree_paths) + body
    return (
        aligned.rstrip("\n")
        + "\n\n\n# -- the inputs generator of the in-place task --\n"
        + inputs_body.rstrip("\n")
        + "\n\n\n# -- kernelsmith in-place wrapper: the original target as the reference --\n"
        "import torch as _ks_torch\n\n\n"
        "class Model(_ks_torch.nn.Module):\n"
        "    def forward(self, *args):\n"
        f"        return {function}(*args)\n\n\n"
        "def get_init_inputs():\n    return []\n" + getters
    )
