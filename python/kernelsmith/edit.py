"""Turn a model's response into a candidate program.

The heavy lifting (EVOLVE-BLOCK enforcement, SEARCH/REPLACE matching, fenced
code extraction) is C++ in ``kernelsmith._core``; this module adds the Python
syntax check and a plain record that the loop writes to the trajectory.

Nothing here executes candidate code: ``compile()`` only parses and compiles
to bytecode, which is safe for untrusted text.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from . import _core

__all__ = [
    "BlockOutcome",
    "EditResult",
    "SyntaxIssue",
    "apply_response",
    "check_evolve_blocks",
    "evolve_blocks",
    "extract_code",
    "syntax_check",
]

MODES = ("diff", "full", "auto")


@dataclass
class BlockOutcome:
    """How one SEARCH/REPLACE block fared (see ``status`` values in docs)."""

    index: int
    status: str  # applied | no_match | ambiguous | outside_blocks | malformed | empty_search
    message: str
    response_line: int = 0
    match_level: str = ""  # exact | trailing_whitespace | indentation | whitespace
    start_line: int = 0
    end_line: int = 0
    nearest_start: int = 0
    nearest_end: int = 0
    similarity: float = 0.0

    @property
    def applied(self) -> bool:
        return self.status == "applied"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "BlockOutcome":
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})


@dataclass
class SyntaxIssue:
    line: int
    col: int
    msg: str
    text: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class EditResult:
    """The outcome of one edit step.

    ``ok`` means the candidate can go to evaluation. ``error`` is the text to
    feed back to the model when it cannot (or, with partial diffs, what did
    not apply). ``source`` is the candidate; for a failed diff it holds the
    blocks that did apply, useful for debugging only.
    """

    ok: bool
    mode: str  # "diff" or "full": what was applied
    source: str
    error: str = ""
    error_kind: str = ""  # "" | no_code | diff | evolve_blocks | syntax
    blocks: list[BlockOutcome] = field(default_factory=list)
    syntax_error: SyntaxIssue | None = None
    evolve_blocks: list[tuple[int, int]] = field(default_factory=list)
    fence_closed: bool = True

    @property
    def applied_blocks(self) -> int:
        return sum(1 for b in self.blocks if b.applied)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "mode": self.mode,
            "source": self.source,
            "error": self.error,
            "error_kind": self.error_kind,
            "blocks": [b.to_dict() for b in self.blocks],
            "syntax_error": self.syntax_error.to_dict() if self.syntax_error else None,
            "evolve_blocks": [list(b) for b in self.evolve_blocks],
            "fence_closed": self.fence_closed,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "EditResult":
        syntax = data.get("syntax_error")
        return cls(
            ok=bool(data["ok"]),
            mode=str(data["mode"]),
            source=str(data.get("source", "")),
            error=str(data.get("error", "")),
            error_kind=str(data.get("error_kind", "")),
            blocks=[BlockOutcome.from_dict(b) for b in data.get("blocks", [])],
            syntax_error=SyntaxIssue(**syntax) if syntax else None,
            evolve_blocks=[(int(a), int(b)) for a, b in data.get("evolve_blocks", [])],
            fence_closed=bool(data.get("fence_closed", True)),
        )


def syntax_check(source: str, filename: str = "<candidate>") -> SyntaxIssue | None:
    """Compile ``source`` without running it; the first syntax error or None."""
    try:
        compile(source, filename, "exec", dont_inherit=True)
    except SyntaxError as exc:  # IndentationError and TabError included
        return SyntaxIssue(
            line=int(exc.lineno or 0),
            col=int(exc.offset or 0),
            msg=str(exc.msg),
            text=(exc.text or "").rstrip("\n"),
        )
    except (ValueError, RecursionError, MemoryError, OverflowError) as exc:
        # Null bytes, absurd nesting or huge literals: still a broken program.
        return SyntaxIssue(line=0, col=0, msg=f"{type(exc).__name__}: {exc}")
    return None


def _convert_blocks(blocks: Any) -> list[BlockOutcome]:
    return [
        BlockOutcome(
            index=b.index,
            status=b.status,
            message=b.message,
            response_line=b.response_line,
            match_level=b.match_level,
            start_line=b.start_line,
            end_line=b.end_line,
            nearest_start=b.nearest_start,
            nearest_end=b.nearest_end,
            similarity=float(b.similarity),
        )
        for b in blocks
    ]


def apply_response(
    parent_source: str,
    response_text: str,
    mode: str = "auto",
    *,
    allow_partial: bool = False,
    check_syntax: bool = True,
) -> EditResult:
    """Apply a model response to ``parent_source``.

    ``mode``: "diff" (SEARCH/REPLACE blocks), "full" (a fenced whole program)
    or "auto" (diff when the response holds a ``<<<<<<< SEARCH`` line, else
    full). The parent's EVOLVE blocks are enforced, then the result is
    syntax-checked with ``compile()``. ``allow_partial`` accepts a diff where
    at least one block applied even if others failed.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
    if not isinstance(parent_source, str) or not isinstance(response_text, str):
        raise TypeError("parent_source and response_text must be str")
    core = _core.apply_edit(parent_source, response_text, mode, allow_partial)
    result = EditResult(
        ok=bool(core.ok),
        mode=core.mode,
        source=core.source,
        error=core.error,
        blocks=_convert_blocks(core.blocks),
        evolve_blocks=[(b.start_line, b.end_line) for b in core.evolve_blocks],
        fence_closed=bool(core.fence.closed) if core.mode == "full" else True,
    )
    cut_note = ""
    if not result.fence_closed:
        cut_note = " (the code block was not closed: the reply was probably cut off)"
    if not result.ok:
        result.error += cut_note
        if core.mode == "full" and not core.fence.found:
            result.error_kind = "no_code"
        elif core.mode == "diff" and (not result.blocks or any(not b.applied for b in result.blocks)):
            result.error_kind = "diff"
        else:
            result.error_kind = "evolve_blocks"
        return result
    if check_syntax:
        issue = syntax_check(result.source)
        if issue is not None:
            result.ok = False
            result.syntax_error = issue
            result.error_kind = "syntax"
            where = f"line {issue.line}, column {issue.col}" if issue.line else "the program"
            text = f"\n    {issue.text.strip()}" if issue.text.strip() else ""
            note = cut_note
            prefix = result.error + "\n" if result.error else ""
            result.error = f"{prefix}SyntaxError at {where}: {issue.msg}{text}{note}"
    return result


def evolve_blocks(source: str) -> list[tuple[int, int]]:
    """(start_line, end_line) of each EVOLVE block's marker lines, 1-based.

    Raises ValueError for malformed markers. No markers gives [].
    """
    parsed = _core.parse_evolve_blocks(source)
    if not parsed.ok:
        raise ValueError(f"malformed EVOLVE-BLOCK markers: {parsed.error}")
    return [(b.start_line, b.end_line) for b in parsed.blocks]


def check_evolve_blocks(parent: str, child: str) -> str | None:
    """None when ``child`` only changes ``parent`` inside its EVOLVE blocks, else the reason."""
    result = _core.check_evolve_blocks(parent, child)
    return None if result.ok else result.error


def extract_code(response_text: str) -> str | None:
    """The fenced code block holding the program (see docs for the rule), or None."""
    fence = _core.extract_fenced_code(response_text)
    return fence.code if fence.found else None
