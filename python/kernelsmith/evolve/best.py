"""The run's one best number, as every reader shows it.

A run measures its programs many times: each step against its own reference
timing (the per-step figure, taken at its own moment), and at the end the
fastest few head to head in one worker (the confirmed figure, with its CI and
verdict; ``Evolution.confirm_best``). The summary, ``best_program.py``, the
report and the progress line all show the figure :func:`best_figure` picks,
worded by :meth:`BestFigure.words`, so one run has one best number: the
confirmed one when the confirmation chose a best, else the per-step one,
labelled as such with the reason.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

from ..timing.results import verdict_of

#: the first line of the comment block ``best_program.py`` starts with
HEADER_MARK = "# kernelsmith best program:"

_VERDICT_WORDS = {
    "faster": "faster than PyTorch",
    "slower": "slower than PyTorch",
    "indistinguishable": "indistinguishable from PyTorch (its CI includes 1.0x)",
}


@dataclass
class BestFigure:
    """The best program's speedup over the PyTorch reference."""

    speedup: Optional[float] = None
    ci_low: Optional[float] = None
    ci_high: Optional[float] = None
    #: faster | slower | indistinguishable | "" (not known)
    verdict: str = ""
    #: True: the finalists' head-to-head re-timing; False: a per-step figure
    confirmed: bool = False
    program_id: Optional[int] = None
    #: the step that wrote the program (the seed is step 0)
    step: Optional[int] = None
    #: other finalists it was re-timed with (confirmed figures)
    rivals: int = 0
    #: why a per-step figure is shown (no confirmation, or none reliable)
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> "BestFigure":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in (data or {}).items() if k in names})

    @property
    def ci_text(self) -> str:
        if self.ci_low is None or self.ci_high is None:
            return ""
        return f"[{self.ci_low:.3f}, {self.ci_high:.3f}]"

    def figure(self) -> str:
        """``1.155x [0.981, 1.328]``, or ``-`` when there is no best."""
        if self.speedup is None:
            return "-"
        return f"{self.speedup:.3f}x" + (f" {self.ci_text}" if self.ci_text else "")

    def verdict_words(self) -> str:
        return _VERDICT_WORDS.get(self.verdict, "")

    def how(self) -> str:
        """Where the figure comes from, in words."""
        if self.confirmed:
            others = f" with {self.rivals} other finalist(s)" if self.rivals else ""
            return f"confirmed: re-timed head to head{others} at the end of the run"
        return "per-step figure, not confirmed" + (f" ({self.note})" if self.note else "")

    def words(self) -> str:
        """One line: figure, CI, verdict in words, where it comes from."""
        if self.speedup is None:
            return "none" + (f" ({self.note})" if self.note else "")
        verdict = self.verdict_words()
        return f"{self.figure()} vs PyTorch" + (f", {verdict}" if verdict else "") + f"; {self.how()}"

    def header(self) -> str:
        """The comment block ``best_program.py`` starts with."""
        where = f"step {self.step}" if self.step is not None else "step ?"
        lines = [
            f"{HEADER_MARK} {where} (program #{self.program_id})",
            f"# speedup vs PyTorch: {self.figure()}" + (" (95% CI)" if self.ci_text else ""),
            "# " + (f"{self.verdict_words()}; " if self.verdict_words() else "") + self.how(),
            "# (these comment lines are not part of the program the run evaluated)",
        ]
        return "\n".join(lines) + "\n"


def step_figure(
    step: Optional[int], program_id: Optional[int], evaluation: Any, speedup: Optional[float], note: str = ""
) -> BestFigure:
    """A per-step figure from a step's evaluation (an ``EvalResult`` or its dict)."""
    get = (
        (evaluation.get if isinstance(evaluation, dict) else (lambda k, d=None: getattr(evaluation, k, d)))
        if evaluation is not None
        else (lambda k, d=None: d)
    )
    low, high = get("speedup_ci_low"), get("speedup_ci_high")
    verdict = get("timing_verdict") or verdict_of(low, high)
    if verdict not in _VERDICT_WORDS:
        verdict = verdict_of(low, high)
    return BestFigure(
        speedup=speedup if speedup is not None else get("speedup"),
        ci_low=low,
        ci_high=high,
        verdict=verdict,
        confirmed=False,
        program_id=program_id,
        step=step,
        note=note,
    )


def best_figure(confirmation: dict[str, Any] | None, per_step: BestFigure | None) -> BestFigure:
    """The run's best: the finalist the confirmation chose (its head-to-head
    figure), else ``per_step`` (the best reliable per-step figure) with the
    reason the confirmation did not choose one."""
    confirmation = confirmation or {}
    rows = confirmation.get("finalists") or []
    chosen = confirmation.get("best_program_id")
    row = next((r for r in rows if chosen is not None and r.get("program_id") == chosen), None)
    if row is not None:
        low, high = row.get("speedup_ci_low"), row.get("speedup_ci_high")
        verdict = row.get("verdict") if row.get("verdict") in _VERDICT_WORDS else verdict_of(low, high)
        return BestFigure(
            speedup=float(row["speedup"]),
            ci_low=low,
            ci_high=high,
            verdict=verdict,
            confirmed=True,
            program_id=int(chosen),
            step=per_step.step if per_step is not None and per_step.program_id == chosen else None,
            rivals=max(0, len(rows) - 1),
        )
    if confirmation.get("error"):
        note = f"the re-timing failed: {confirmation['error']}"
    elif rows:
        unreliable = sum(1 for r in rows if r.get("timing_reliable") is False)
        note = f"{len(rows)} finalist(s) re-timed head to head, " + (
            f"{unreliable} timed unreliably" if unreliable else "none passed"
        )
    else:
        note = confirmation.get("skipped") or "no head-to-head re-timing ran"
    if per_step is None or per_step.speedup is None:
        # nothing to show: no correct program, or none timed reliably
        return BestFigure(
            note=(
                f"{note}; no step was timed reliably either"
                if rows or confirmation.get("error")
                else "no correct program timed reliably"
            )
        )
    figure = dataclasses.replace(per_step)
    figure.confirmed, figure.note = False, note
    return figure


def strip_header(source: str) -> str:
    """``best_program.py``'s program without the header :class:`BestFigure` wrote."""
    if not source.startswith(HEADER_MARK):
        return source
    lines = source.splitlines(keepends=True)
    i = 0
    while i < len(lines) and lines[i].startswith("#") and i < 4:
        i += 1
    return "".join(lines[i:])
