"""Offline mutation proposer: an evolutionary autotuner with no LLM.

It changes tunable values that the program declares with a ``# tune:``
annotation, inside the EVOLVE blocks only:

    BLOCK_SIZE = 128  # tune: [64, 128, 256, 512]
    NUM_WARPS: int = 4  # tune: pow2(1, 16)
    UNROLL = 2  # tune: range(1, 9)
        num_stages=3,  # tune: [2, 3, 4, 5]       (keyword argument lines)
    #define TILE 16  // tune: [8, 16, 32]        (C preprocessor, e.g. OpenCL source)

The value must be a Python literal (int, float, str, bool). Specs:
``[v1, v2, ...]`` lists the allowed values (Python literals);
``range(lo, hi[, step])`` is Python's range (hi excluded);
``pow2(lo, hi)`` is the powers of two from lo to hi, both included.
A tunable whose current value is not in its list may still move: to the
allowed value nearest to it (numbers) or to a random one.

Each proposal either crosses over (copies some tunables' values from one of
the request's inspirations) or mutates 1..max_changes tunables (to a
neighbouring allowed value with probability ``neighbor_prob``, else to a
random other one). The random stream depends only on (seed, iteration,
retry), so a run is reproducible and resumable.
"""

from __future__ import annotations

import ast
import math
import random
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from .. import _core
from .base import Proposal, Proposer

__all__ = ["MutationProposer", "Tunable", "TuneSyntaxError", "parse_tunables", "set_tunables"]


class TuneSyntaxError(ValueError):
    """A ``# tune:`` annotation that cannot be read; the message names the line."""


_PY_LINE = re.compile(
    r"^(?P<head>\s*(?P<name>[A-Za-z_]\w*)\s*(?::\s*[^=#]+?)?\s*=\s*)(?P<value>[^#]+?)(?P<tail>\s*,?\s*)"
    r"#\s*tune\s*:\s*(?P<spec>.+?)\s*$"
)
_DEFINE_LINE = re.compile(
    r"^(?P<head>\s*#\s*define\s+(?P<name>[A-Za-z_]\w*)\s+)(?P<value>\S+?)(?P<tail>\s*)"
    r"//\s*tune\s*:\s*(?P<spec>.+?)\s*$"
)
_CALL_SPEC = re.compile(r"^(?P<fn>range|pow2)\s*\((?P<args>[^)]*)\)$")
_MAX_CHOICES = 4096


@dataclass
class Tunable:
    key: str  # the name, or name#k for its k-th repeat (k from 2)
    name: str
    line: int  # 1-based
    value: Any
    choices: list[Any]
    spec: str
    value_span: tuple[int, int]  # column span of the value text in the line

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "name": self.name,
            "line": self.line,
            "value": self.value,
            "choices": list(self.choices),
            "spec": self.spec,
        }


def _parse_spec(spec: str, line_no: int) -> list[Any]:
    where = f"line {line_no}: '# tune: {spec}'"
    call = _CALL_SPEC.match(spec)
    if call:
        try:
            args = [int(a) for a in call["args"].split(",") if a.strip()]
        except ValueError as exc:
            raise TuneSyntaxError(f"{where}: {call['fn']}() takes integer arguments") from exc
        if call["fn"] == "range":
            if not 1 <= len(args) <= 3 or (len(args) == 3 and args[2] == 0):
                raise TuneSyntaxError(f"{where}: range(lo, hi[, step]) needs 1-3 integers and step != 0")
            values = range(*args)
            if len(values) > _MAX_CHOICES:
                raise TuneSyntaxError(f"{where}: range has {len(values)} values, at most {_MAX_CHOICES}")
            choices: list[Any] = list(values)
        else:
            if len(args) != 2 or args[0] < 1 or args[1] < args[0]:
                raise TuneSyntaxError(f"{where}: pow2(lo, hi) needs 1 <= lo <= hi")
            lo = 1 << max(0, math.ceil(math.log2(args[0])))
            choices = []
            while lo <= args[1]:
                choices.append(lo)
                lo <<= 1
    else:
        try:
            parsed = ast.literal_eval(spec)
        except (ValueError, SyntaxError) as exc:
            raise TuneSyntaxError(f"{where}: expected [v1, v2, ...], range(lo, hi[, step]) or pow2(lo, hi)") from exc
        if not isinstance(parsed, (list, tuple)):
            raise TuneSyntaxError(f"{where}: expected a list of values")
        choices = list(parsed)
    if not choices:
        raise TuneSyntaxError(f"{where}: no allowed values")
    return choices


def _evolvable_lines(source: str) -> set[int] | None:
    """1-based line numbers inside EVOLVE blocks, or None when there are no blocks."""
    parsed = _core.parse_evolve_blocks(source)
    if not parsed.ok:
        raise TuneSyntaxError(f"malformed EVOLVE-BLOCK markers: {parsed.error}")
    if not parsed.blocks:
        return None
    lines: set[int] = set()
    for b in parsed.blocks:
        lines.update(range(b.start_line + 1, b.end_line))
    return lines


def _tunables_or_problem(source: str) -> tuple[list[Tunable], str | None]:
    """(the tunables of ``source``, None), or ([], why the mutator cannot change it)."""
    try:
        tunables = parse_tunables(source)
    except TuneSyntaxError as exc:
        return [], str(exc)
    if not any(any(c != t.value for c in t.choices) for t in tunables):
        return [], (
            "no tunable values to mutate: annotate values inside the EVOLVE blocks with "
            "'# tune: [v1, v2, ...]' (see docs/edits_prompts_proposers.md)"
        )
    return tunables, None


def parse_tunables(source: str, *, evolvable_only: bool = True) -> list[Tunable]:
    """The ``# tune:`` annotated values of ``source`` (inside EVOLVE blocks when
    ``evolvable_only`` and the program has blocks)."""
    allowed = _evolvable_lines(source) if evolvable_only else None
    found: list[Tunable] = []
    counts: dict[str, int] = {}
    for i, line in enumerate(source.splitlines(), 1):
        if "tune" not in line:
            continue
        match = _PY_LINE.match(line) or _DEFINE_LINE.match(line)
        if not match:
            if re.search(r"(#|//)\s*tune\s*:", line) and (allowed is None or i in allowed):
                raise TuneSyntaxError(
                    f"line {i}: a '# tune:' annotation must follow 'NAME = VALUE' (or '#define NAME VALUE "
                    f"// tune: ...'), got: {line.strip()}"
                )
            continue
        if allowed is not None and i not in allowed:
            continue
        try:
            value = ast.literal_eval(match["value"].strip())
        except (ValueError, SyntaxError) as exc:
            raise TuneSyntaxError(f"line {i}: the value {match['value'].strip()!r} is not a literal") from exc
        name = match["name"]
        counts[name] = counts.get(name, 0) + 1
        key = name if counts[name] == 1 else f"{name}#{counts[name]}"
        start = match.start("value")
        found.append(
            Tunable(
                key=key,
                name=name,
                line=i,
                value=value,
                choices=_parse_spec(match["spec"], i),
                spec=match["spec"],
                value_span=(start, start + len(match["value"])),
            )
        )
    return found


def _render(value: Any, current: str = "") -> str:
    """Python literal for ``value``; strings keep the quote style of the
    current text, so a value and its round trip are the same code."""
    text = repr(value)
    if isinstance(value, str) and current[:1] == '"' and '"' not in value and "\\" not in text:
        text = '"' + text[1:-1] + '"'
    return text


def set_tunables(source: str, tunables: Sequence[Tunable], values: Mapping[str, Any]) -> str:
    """``source`` with the tunables named in ``values`` (by key) set."""
    lines = source.splitlines(keepends=True)
    for t in tunables:
        if t.key not in values:
            continue
        raw = lines[t.line - 1]
        a, b = t.value_span
        lines[t.line - 1] = raw[:a] + _render(values[t.key], raw[a:b]) + raw[b:]
    return "".join(lines)


def _numeric(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class MutationProposer(Proposer):
    """See the module docstring. ``seen``: optional ``source -> bool`` (e.g. the
    engine's duplicate check); a candidate already seen is redrawn up to
    ``max_retries`` times."""

    name = "mutate"

    def __init__(
        self,
        seed: int = 0,
        *,
        max_changes: int = 2,
        neighbor_prob: float = 0.7,
        crossover_rate: float = 0.3,
        seen: Callable[[str], bool] | None = None,
        max_retries: int = 16,
    ) -> None:
        if max_changes < 1:
            raise ValueError(f"max_changes must be >= 1; got {max_changes}")
        for label, p in (("neighbor_prob", neighbor_prob), ("crossover_rate", crossover_rate)):
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{label} must be in [0, 1]; got {p}")
        self.seed = seed
        self.max_changes = max_changes
        self.neighbor_prob = neighbor_prob
        self.crossover_rate = crossover_rate
        self.seen = seen
        self.max_retries = max_retries

    # -- one draw --------------------------------------------------------
    def _move(self, rng: random.Random, t: Tunable) -> Any:
        choices = t.choices
        if t.value in choices:
            idx = choices.index(t.value)
            others = [c for c in choices if c != t.value]
            if rng.random() < self.neighbor_prob:
                near = [choices[j] for j in (idx - 1, idx + 1) if 0 <= j < len(choices) and choices[j] != t.value]
                if near:
                    return rng.choice(near)
            return rng.choice(others)
        if _numeric(t.value) and all(_numeric(c) for c in choices):
            return min(choices, key=lambda c: (abs(c - t.value), c))
        return rng.choice(choices)

    def _crossover(self, rng: random.Random, mine: list[Tunable], inspirations: Sequence[Any]) -> dict[str, Any]:
        donors = []
        for insp in inspirations:
            source = getattr(insp, "source", None) if not isinstance(insp, Mapping) else insp.get("source")
            if not source:
                continue
            try:
                theirs = {t.key: t.value for t in parse_tunables(source)}
            except TuneSyntaxError:
                continue
            diffs = {
                t.key: theirs[t.key]
                for t in mine
                if t.key in theirs and theirs[t.key] != t.value and theirs[t.key] in t.choices
            }
            if diffs:
                donors.append((getattr(insp, "id", None) if not isinstance(insp, Mapping) else insp.get("id"), diffs))
        if not donors:
            return {}
        donor_id, diffs = rng.choice(donors)
        keys = sorted(diffs)
        taken = [k for k in keys if rng.random() < 0.5] or [rng.choice(keys)]
        self._last_donor = donor_id
        return {k: diffs[k] for k in taken}

    def _draw(
        self, rng: random.Random, tunables: list[Tunable], inspirations: Sequence[Any]
    ) -> tuple[dict[str, Any], str]:
        movable = [t for t in tunables if any(c != t.value for c in t.choices)]
        self._last_donor = None
        if inspirations and rng.random() < self.crossover_rate:
            changes = self._crossover(rng, movable, inspirations)
            if changes:
                return changes, "crossover"
        k = rng.randint(1, min(self.max_changes, len(movable)))
        picked = rng.sample(movable, k)
        return {t.key: self._move(rng, t) for t in picked}, "mutate"

    # -- the proposer ----------------------------------------------------
    def propose_source(self, parent_source: str, iteration: int, inspirations: Sequence[Any] = ()) -> Proposal:
        """The synchronous core of :meth:`propose`."""
        tunables, problem = _tunables_or_problem(parent_source)
        if problem:
            return Proposal(text="", model=self.name, error=problem)
        by_key = {t.key: t for t in tunables}
        candidate, changes, how = parent_source, {}, "mutate"
        attempt = 0
        for attempt in range(self.max_retries + 1):
            rng = random.Random(f"kernelsmith-mutate:{self.seed}:{iteration}:{attempt}")
            changes, how = self._draw(rng, tunables, inspirations)
            candidate = set_tunables(parent_source, tunables, changes)
            if candidate != parent_source and (self.seen is None or not self.seen(candidate)):
                break
        described = [
            {"key": k, "line": by_key[k].line, "old": by_key[k].value, "new": v} for k, v in sorted(changes.items())
        ]
        summary = ", ".join(f"{c['key']} {c['old']!r} -> {c['new']!r} (line {c['line']})" for c in described)
        origin = f" from inspiration {self._last_donor}" if how == "crossover" and self._last_donor else ""
        text = (
            f"Offline {how}{origin} (seed {self.seed}, iteration {iteration}): {summary}.\n\n"
            f"```python\n{candidate.rstrip(chr(10))}\n```\n"
        )
        return Proposal(
            text=text,
            model=self.name,
            usage={"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            meta={"operator": how, "changes": described, "attempts": attempt + 1, "donor": self._last_donor},
        )

    def cannot_start_from(self, source: str) -> str | None:
        """Why no proposal can be made from ``source`` (no movable ``# tune:``
        value, or an annotation that does not read), None when one can: asked
        before a run starts, so a program the mutator cannot change is bad
        input, not a run of failed steps."""
        return _tunables_or_problem(source)[1]

    async def propose(self, request: Any, messages: Sequence[Mapping[str, str]] = ()) -> Proposal:
        parent = getattr(request, "parent", None)
        source = getattr(parent, "source", None) if not isinstance(parent, Mapping) else parent.get("source")
        if not isinstance(source, str):
            raise ValueError("MutationProposer needs request.parent.source (the parent program's text)")
        iteration = int(getattr(request, "iteration", 0) or 0)
        inspirations = list(getattr(request, "inspirations", None) or [])
        return self.propose_source(source, iteration, inspirations)
