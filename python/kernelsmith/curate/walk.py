"""Find the Python files of a tree of repositories.

SRC_DIR holds one folder per repository (``SRC_DIR/<repo>/...``); Python files
directly under SRC_DIR belong to a repository named ``.``. Virtual
environments, VCS folders, caches and (optionally) test folders are skipped, so
are files that are too large or cannot be read as text.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

SKIP_DIRS = {
    ".git",
    ".hg",
    ".svn",
    "__pycache__",
    ".tox",
    ".nox",
    ".mypy_cache",
    ".pytest_cache",
    "node_modules",
    "site-packages",
    "dist",
    "build",
    ".eggs",
    ".ipynb_checkpoints",
}
TEST_DIRS = {"test", "tests", "testing"}


@dataclass
class SourceFile:
    repo: str
    path: str  # relative to the repository's folder, '/'-separated
    abs_path: Path
    text: str


@dataclass
class WalkStats:
    files: int = 0
    skipped_large: int = 0
    skipped_unreadable: int = 0
    skipped_tests: int = 0
    repos: set[str] = field(default_factory=set)
    # files and folders left out for a reason the user should see (dropped.jsonl):
    # {"repo", "path", "reason", "detail"}
    skipped: list[dict[str, str]] = field(default_factory=list)


def _is_venv(d: Path) -> bool:
    return (d / "pyvenv.cfg").exists() or (d / "bin" / "activate").exists()


def repo_module_names(root: Path) -> set[str]:
    """Top-level names a repository's own files can be imported as (its
    modules and packages at any depth: repositories put their sources under
    src/ or a package folder, and imports may start at either)."""
    names: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".")]
        for f in filenames:
            if f.endswith(".py") and f != "__init__.py":
                names.add(f[:-3])
        if "__init__.py" in filenames:
            names.add(Path(dirpath).name)
    return names


def walk(
    src: Path,
    *,
    skip_tests: bool = True,
    max_file_kb: int = 512,
    stats: WalkStats | None = None,
    follow_symlinks: bool = True,
    max_files: int | None = None,
) -> Iterator[SourceFile]:
    """Yield readable Python files in a stable (sorted) order.

    Symlinked folders and files are followed (each real folder once, so a
    link loop ends) or, with ``follow_symlinks=False``, left out and listed in
    ``stats.skipped``."""
    src = Path(src)
    if not src.is_dir():
        raise ValueError(f"SRC_DIR {str(src)!r} is not a directory")
    stats = stats if stats is not None else WalkStats()
    seen_real: set[str] = {os.path.realpath(src)}

    def split(p: Path) -> tuple[str, str]:
        rel = p.relative_to(src)
        repo = rel.parts[0] if len(rel.parts) > 1 else "."
        inner = "/".join(rel.parts[1:]) if len(rel.parts) > 1 else rel.parts[0]
        return repo, inner

    def skip(p: Path, reason: str, detail: str) -> None:
        repo, inner = split(p)
        stats.skipped.append({"repo": repo, "path": inner, "reason": reason, "detail": detail})

    for dirpath, dirnames, filenames in os.walk(src, followlinks=follow_symlinks):
        here = Path(dirpath)
        keep = []
        for d in sorted(dirnames):
            if d in SKIP_DIRS or d.startswith(".") or _is_venv(here / d):
                continue
            if skip_tests and d.lower() in TEST_DIRS:
                stats.skipped_tests += 1
                continue
            full = here / d
            if full.is_symlink():
                if not follow_symlinks:
                    skip(full, "symlink", "a symlinked folder, left out by --no-follow-symlinks")
                    continue
                real = os.path.realpath(full)
                if real in seen_real:
                    skip(full, "symlink_loop", f"links to {real}, already read")
                    continue
                seen_real.add(real)
            keep.append(d)
        dirnames[:] = keep
        for f in sorted(filenames):
            if not f.endswith(".py"):
                continue
            if skip_tests and (f.startswith("test_") or f.endswith("_test.py") or f == "conftest.py"):
                stats.skipped_tests += 1
                continue
            if max_files is not None and stats.files >= max_files:
                return
            p = here / f
            repo, inner = split(p)
            if f.startswith("modular_") and f"modeling_{f[len('modular_') :]}" in filenames:
                # transformers' "modular" sources: modeling_<x>.py is generated from
                # them and holds the same classes, written out
                skip(p, "generated_from", f"the source modeling_{f[len('modular_') :]} is generated from; read instead")
                continue
            try:
                if p.is_symlink() and not follow_symlinks:
                    skip(p, "symlink", "a symlinked file, left out by --no-follow-symlinks")
                    continue
                if not p.is_file():
                    skip(p, "unreadable", "not a regular file (a dangling link?)")
                    continue
                if p.stat().st_size > max_file_kb * 1024:
                    stats.skipped_large += 1
                    skip(p, "too_large", f"over --max-file-kb {max_file_kb}")
                    continue
                text = p.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                stats.skipped_unreadable += 1
                skip(p, "unreadable", f"{type(exc).__name__}: {exc}"[:200])
                continue
            stats.files += 1
            stats.repos.add(repo)
            yield SourceFile(repo=repo, path=inner, abs_path=p, text=text)
