"""``best.patch``: the candidate's change to the target file as a git-format
diff that ``git apply`` (and ``patch -p1``) take on the original tree."""

from __future__ import annotations

import difflib


def _lines(text: str) -> list[str]:
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n\\ No newline at end of file\n"
    return lines


def make_patch(original: str, changed: str, path: str) -> str:
    """A unified diff of one file, ``path`` relative to the tree root, in
    git's format (``diff --git a/path b/path``). Empty when nothing changed."""
    if original == changed:
        return ""
    body = list(difflib.unified_diff(_lines(original), _lines(changed), f"a/{path}", f"b/{path}", n=3))
    # difflib writes "--- a/x\t" style headers only when dates are given; these are plain
    return f"diff --git a/{path} b/{path}\n" + "".join(body)
