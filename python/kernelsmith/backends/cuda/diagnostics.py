"""The CUDA backend's compiler messages: nvcc's and the host compiler's
errors parsed (``file(line): error: ...`` and ``file:line:col: error: ...``)
and mapped back to the candidate's own lines (``#line`` directives name the
candidate's strings ``cuda_sources`` / ``cpp_sources``), and the exception a
failed build raises."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Optional

from ..._astutil import parse as parse_source

CUDA_FILE = "cuda_sources"  # the name nvcc reports for the candidate's CUDA string
CPP_FILE = "cpp_sources"  # ... and for its C++ declarations
BINDING_FILE = "ks_binding"  # the generated pybind11 module


class CompilationError(RuntimeError):
    """nvcc or the host compiler rejected the program's sources. The message
    lists the errors at the candidate's own lines, then the build log. (The
    evaluator classifies an exception of this name as a compile failure.)"""

    def __init__(self, message: str, diagnostics: Optional[list["Diagnostic"]] = None) -> None:
        super().__init__(message)
        self.diagnostics = diagnostics or []


@dataclass
class Diagnostic:
    file: str
    line: int
    column: Optional[int]
    kind: str  # "error", "warning", ...
    message: str
    context: list[str] = field(default_factory=list)  # the lines the compiler printed after it


_EDG_RE = re.compile(
    r"^(?P<file>[^\s:()][^():]*?)\((?P<line>\d+)\): (?P<kind>catastrophic error|error|warning|remark)"
    r"(?: #\w+(?:-D)?)?: (?P<msg>.*)$"
)
_GCC_RE = re.compile(
    r"^(?P<file>[^\s:][^:]*?):(?P<line>\d+):(?:(?P<col>\d+):)? (?P<kind>fatal error|error|warning|note)"
    r": (?P<msg>.*)$"
)
_OTHER_ERR_RE = re.compile(
    r"^(ptxas|nvlink|ld|collect2|nvcc)\b.*(error|fatal)|undefined reference to|"
    r"^/usr/bin/ld:.*|^nvcc fatal",
    re.I,
)


def parse_diagnostics(log: str) -> list[Diagnostic]:
    """Errors and warnings in an nvcc / gcc log, in order, each with the
    source and caret lines printed under it."""
    diags: list[Diagnostic] = []
    for raw in log.splitlines():
        line = raw.rstrip()
        m = _EDG_RE.match(line) or _GCC_RE.match(line)
        if m:
            col = m.groupdict().get("col")
            diags.append(
                Diagnostic(m["file"].strip(), int(m["line"]), int(col) if col else None, m["kind"], m["msg"].strip())
            )
        elif diags and line.strip() and (raw.startswith(" ") or raw.startswith("\t")) and len(diags[-1].context) < 4:
            diags[-1].context.append(line)
        elif _OTHER_ERR_RE.search(line):
            diags.append(Diagnostic("", 0, None, "error", line.strip()))
    return diags


def _source_offsets(candidate_source: Optional[str]) -> dict[str, int]:
    """String constant -> the candidate line its first line is on."""
    if not candidate_source:
        return {}
    try:
        tree = parse_source(candidate_source)
    except SyntaxError:
        return {}
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) > 8:
            found.setdefault(node.value, node.lineno)
    return found


def _candidate_line(text: str, line: int, offsets: dict[str, int]) -> Optional[int]:
    """The candidate's line for line ``line`` of ``text`` (a source string
    the program assembled from its string constants), or None."""
    for const, lineno in offsets.items():
        idx = text.find(const)
        if idx < 0:
            continue
        first = text.count("\n", 0, idx) + 1
        if first <= line <= first + const.count("\n"):
            return lineno + line - first
    return None


def format_diagnostics(
    diags: list[Diagnostic], sources: dict[str, str], candidate_source: Optional[str], limit: int = 12
) -> str:
    """The errors (warnings when there are none) at the candidate's lines:
    ``candidate.py:LINE (cuda_sources line N): error: ...`` with the line."""
    offsets = _source_offsets(candidate_source)
    chosen = [d for d in diags if "error" in d.kind] or [d for d in diags if d.kind == "warning"]
    mine = [d for d in chosen if d.file in sources] or chosen
    mine = list({(d.file, d.line, d.message): d for d in mine}.values())  # a TU built twice reports twice
    lines = []
    for d in mine[:limit]:
        text = sources.get(d.file)
        if text is not None:
            where = f"{d.file} line {d.line}"
            at = _candidate_line(text, d.line, offsets)
            if at is not None:
                where = f"candidate.py:{at} ({where})"
            col = f", column {d.column}" if d.column else ""
            lines.append(f"{where}{col}: {d.kind}: {d.message}")
            src_lines = text.splitlines()
            if 1 <= d.line <= len(src_lines):
                lines.append(f"    {src_lines[d.line - 1].strip()}")
        else:
            lines.append(f"{d.file + ': ' if d.file else ''}{d.kind}: {d.message}")
        lines += [c for c in d.context if "detected during" in c or "instantiation" in c][:2]
    if len(mine) > limit:
        lines.append(f"... and {len(mine) - limit} more")
    return "\n".join(lines)


def _trim_log(log: str, keep: int = 60) -> str:
    rows = [r for r in log.splitlines() if r.strip()]
    interesting = [r for r in rows if CUDA_FILE in r or CPP_FILE in r or "error" in r.lower()]
    rows = interesting or rows
    return "\n".join(rows[:keep]) + (f"\n... ({len(rows) - keep} more lines)" if len(rows) > keep else "")
