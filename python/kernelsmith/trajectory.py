"""StepRecord: one line of a run directory's ``trajectory.jsonl``, as plain data.

The typed seam between the writers of a trajectory (the evolve loop,
``evolve/loop.py``, and the RL environment's recorder, ``env/record.py``)
and its readers (the loop itself on resume, the session, ``export/``,
``report/``, ``bench/collect.py``, the replay proposer). Writers build a
:class:`StepRecord` and append ``to_dict()``; readers go through
:meth:`StepRecord.from_dict` (or :func:`read_step_records`) and use
attributes.

Each step's whole :class:`~kernelsmith.result.EvalResult` is stored once, in
the run directory's ``evaluations.jsonl`` (one row per evaluation, keyed by
the sha256 of the source); a record keeps its key (``eval_key``), and its
``child`` (a :class:`~kernelsmith.program_record.ProgramRecord`) the
program's status, metrics and compact feedback. A reader that needs more of
the result reads it through the key (:class:`EvalStore`).

The JSON on disk keeps the loop's keys in the loop's order. A record only holds the keys
its path through the loop set (an LLM failure has no ``edit``, a duplicate no
``eval``, the reference seed no ``child``), so a field that is ``None`` is
left out of ``to_dict()`` unless ``null`` is a value that record kind always
writes (a step's ``raw_response`` after an LLM failure, the reference seed's
``eval_key``, the ``child`` of a step that told nothing). Records of the
first shape (schema 1: the whole result inline as ``eval``, and again as the
child's feedback) still load: the result is kept as ``inline_eval``, which
:meth:`EvalStore.of` returns. Older records (no
``copy_ids`` on seeds, no ``llm_error`` or ``status`` before apply) load with
the missing fields at their defaults; unknown keys are ignored, so a reader
never breaks on a field a newer writer added within the same schema version.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Optional

from .edit import EditResult
from .program_record import ProgramRecord
from .result import EvalResult

__all__ = ["STEP_SCHEMA_VERSION", "EvalStore", "StepRecord", "iter_step_records", "read_step_records"]

# 1: the loop's record as first written (schema_version added by the run directory)
# 2: the step's result stored once (evaluations.jsonl), the record keeps its
#    key (eval_key, where "eval" was) and the child its compact feedback + key
STEP_SCHEMA_VERSION = 2

#: record kinds: a program the run started from, and one proposal step
KINDS = ("seed", "step")

# Key order on disk, per kind (the order the loop has always written them in).
_SEED_ORDER = (
    "schema_version",
    "kind",
    "step",
    "name",
    "child_id",
    "copy_ids",
    "child_source",
    "status",
    "metrics",
    "eval_key",
    "child",
    "time",
    "episode",
)
_STEP_ORDER = (
    "schema_version",
    "kind",
    "request_id",
    "iteration",
    "island",
    "mode",
    "parent_id",
    "parent_metrics",
    "inspiration_ids",
    "prompt",
    "prompt_meta",
    "raw_response",
    "reasoning",
    "model",
    "usage",
    "proposal_error",
    "llm_error",
    "latency_s",
    "edit",
    "child_source",
    "eval_key",
    "duplicate",
    "child_id",
    "status",
    "metrics",
    "step",
    "time",
    "child",
    "episode",
)
# After an LLM failure the status sits right after latency_s: the loop sets it
# when the request fails, before the apply adds child_id.
_AFTER_LATENCY = _STEP_ORDER.index("latency_s") + 1
_LLM_ERROR_ORDER = (
    *_STEP_ORDER[:_AFTER_LATENCY],
    "status",
    *(k for k in _STEP_ORDER[_AFTER_LATENCY:] if k != "status"),
)
# Keys written even when null.
_SEED_ALWAYS = {
    "schema_version",
    "kind",
    "step",
    "name",
    "child_id",
    "child_source",
    "status",
    "metrics",
    "eval_key",
    "time",
}
_STEP_ALWAYS = {
    "schema_version",
    "kind",
    "request_id",
    "iteration",
    "island",
    "mode",
    "parent_id",
    "parent_metrics",
    "inspiration_ids",
    "prompt",
    "prompt_meta",
    "raw_response",
    "model",
    "latency_s",
    "child_id",
    "status",
    "step",
    "time",
    "child",
}
# Written for a step whose model answered (absent after an LLM failure).
_ANSWERED = {"reasoning", "usage", "edit"}


@dataclass
class StepRecord:
    # "seed" (a start program: the task's seed, or the reference itself) or
    # "step" (one ask -> propose -> edit -> evaluate -> tell)
    kind: str = "step"
    # position in the applied order (0 = the first seed); None until applied
    step: Optional[int] = None

    # -- seeds ---------------------------------------------------------------
    # "seed", "reference" (the PyTorch reference as start program), or an
    # episode start's name (env)
    name: Optional[str] = None
    # the engine's ids of the seed's copies (one per island); None in records
    # written before copies were recorded
    copy_ids: Optional[list[Any]] = None

    # -- the request (steps) -------------------------------------------------
    request_id: Optional[int] = None
    iteration: Optional[int] = None
    island: Optional[int] = None
    mode: Optional[str] = None  # explore | exploit | repair | ...
    parent_id: Optional[int] = None  # -1: no parent
    parent_metrics: dict[str, Any] = field(default_factory=dict)
    inspiration_ids: list[Any] = field(default_factory=list)
    prompt: list[Any] = field(default_factory=list)  # chat messages [{role, content}]
    prompt_meta: dict[str, Any] = field(default_factory=dict)

    # -- the proposal --------------------------------------------------------
    raw_response: Optional[str] = None
    reasoning: Optional[str] = None
    model: Optional[str] = None
    usage: Optional[dict[str, Any]] = None  # kernelsmith.llm.Usage.to_dict(); {} when not metered
    latency_s: Optional[float] = None
    # set when the LLM request failed after retries (status "llm-error")
    proposal_error: Optional[str] = None
    llm_error: Optional[dict[str, Any]] = None  # {"kind", "message", ...}

    # -- the program -----------------------------------------------------------
    edit: Optional[EditResult] = None
    child_source: Optional[str] = None
    # the key of the evaluator's verdict in the run's evaluations.jsonl
    # (EvalStore); None when not evaluated (edit failed, duplicate, LLM
    # failure, the reference seed)
    eval_key: Optional[str] = None
    # the code was already known (told before, or claimed by an earlier ask)
    duplicate: bool = False

    # -- what was told ---------------------------------------------------------
    child_id: Optional[int] = None
    # correct | incorrect | compile-failed | hacked | edit-failed | duplicate |
    # skipped | llm-error | reference
    status: Optional[str] = None
    metrics: Optional[dict[str, Any]] = None  # the program's metrics as told (score, speedup, ...)
    time: Optional[float] = None  # unix time the record was written
    # the program told to the engine (on disk its engine fields: source,
    # parent_id, island, iteration, metrics, status, feedback, id); None when
    # nothing was told
    child: Optional[ProgramRecord] = None

    # -- the RL environment (env/record.py) -----------------------------------
    # episode id, turn, reward, reward_status, terms, done (+ returns)
    episode: Optional[dict[str, Any]] = None

    schema_version: int = STEP_SCHEMA_VERSION
    # a record of the first shape (schema 1): the whole verdict it carried
    # inline; never written (EvalStore.of reads it)
    inline_eval: Optional[EvalResult] = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"StepRecord.kind '{self.kind}' is not one of {', '.join(KINDS)}")

    # -- derived -----------------------------------------------------------------
    @property
    def is_seed(self) -> bool:
        return self.kind == "seed"

    @property
    def is_reference(self) -> bool:
        """The reference-as-seed of a run started without a kernel."""
        return self.kind == "seed" and self.name == "reference"

    @property
    def llm_failed(self) -> bool:
        return self.proposal_error is not None

    @property
    def source(self) -> str:
        """The program's source: the candidate, else the program told."""
        return self.child_source or (self.child.source if self.child is not None else "")

    @property
    def program_ids(self) -> list[int]:
        """The engine ids this record's program got (a seed's copies, a step's child)."""
        if self.copy_ids:
            return [int(p) for p in self.copy_ids if p is not None]
        return [int(self.child_id)] if self.child_id is not None else []

    def metric(self, key: str, default: Any = None) -> Any:
        return (self.metrics or {}).get(key, default)

    # -- JSON ----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The record as the loop writes it: its kind's keys in their order,
        optional ones only when set."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        values["child"] = self.child.to_child() if self.child is not None else None
        values["edit"] = self.edit.to_dict() if self.edit is not None else None
        values["duplicate"] = True if self.duplicate else None
        order: tuple[str, ...]
        if self.kind == "seed":
            order, always = _SEED_ORDER, _SEED_ALWAYS
        else:
            order, always = _STEP_ORDER, _STEP_ALWAYS
            if not self.llm_failed:
                always = always | _ANSWERED
            elif self.status is not None:
                order = _LLM_ERROR_ORDER
        return {key: values[key] for key in order if key in always or values[key] is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "StepRecord":
        """From ``to_dict()`` or any older record; unknown keys are ignored."""
        version = data.get("schema_version", STEP_SCHEMA_VERSION)
        if not isinstance(version, int) or version > STEP_SCHEMA_VERSION:
            raise ValueError(
                f"StepRecord schema_version {version} is newer than this kernelsmith ({STEP_SCHEMA_VERSION})"
            )
        names = {f.name for f in dataclasses.fields(cls)} - {"inline_eval"}
        kwargs = {k: v for k, v in data.items() if k in names}
        kwargs.setdefault("kind", "step")
        for key in ("parent_metrics", "prompt_meta", "inspiration_ids", "prompt"):
            if kwargs.get(key) is None:  # null in an odd record: the field's empty default
                kwargs.pop(key, None)
        if isinstance(data.get("eval"), Mapping):  # the first shape: the whole verdict inline
            kwargs["inline_eval"] = EvalResult.from_dict(data["eval"])
        if isinstance(kwargs.get("child"), Mapping):
            kwargs["child"] = ProgramRecord.from_child(kwargs["child"])
        if isinstance(kwargs.get("edit"), Mapping):
            kwargs["edit"] = EditResult.from_dict(kwargs["edit"])
        kwargs["duplicate"] = bool(kwargs.get("duplicate", False))
        return cls(**kwargs)

    @classmethod
    def of(cls, value: Any) -> "StepRecord":
        """A StepRecord from a StepRecord or a record dict."""
        return value if isinstance(value, StepRecord) else cls.from_dict(value)


def evaluation_row_key(row: Mapping[str, Any]) -> Optional[str]:
    """The key of one ``evaluations.jsonl`` row: its ``key`` when the run
    wrote one (a source evaluated again: ``SHA256-2``, ...), else its sha256."""
    key = row.get("key") or row.get("sha256")
    return str(key) if key is not None else None


class EvalStore:
    """A run directory's evaluations by key: each step's whole
    :class:`EvalResult`, stored once in ``evaluations.jsonl``. Rows are
    parsed when first asked for; a key written twice (a run of the first
    shape evaluating one source again) means its last row."""

    def __init__(self, rows: Iterable[Mapping[str, Any]] = ()) -> None:
        self._rows: dict[str, Mapping[str, Any]] = {}
        self._parsed: dict[str, EvalResult] = {}
        for row in rows:
            self.add_row(row)

    @classmethod
    def load(cls, run_dir: str | Path) -> "EvalStore":
        """The evaluations of ``run_dir`` (none when it has no log)."""
        from .evolve.rundir import iter_trajectory  # lazy: cycle trajectory -> evolve -> trajectory

        return cls(iter_trajectory(Path(run_dir) / "evaluations.jsonl"))

    def add_row(self, row: Mapping[str, Any]) -> None:
        key = evaluation_row_key(row)
        if key is not None and isinstance(row.get("eval"), Mapping):
            self._rows[key] = row["eval"]
            self._parsed.pop(key, None)

    def __contains__(self, key: object) -> bool:
        return key in self._rows

    def __len__(self) -> int:
        return len(self._rows)

    def get(self, key: Optional[str]) -> Optional[EvalResult]:
        """The result stored under ``key`` (None: no key, or not stored)."""
        if key is None or key not in self._rows:
            return None
        if key not in self._parsed:
            self._parsed[key] = EvalResult.from_dict(dict(self._rows[key]))
        return self._parsed[key]

    def raw(self, key: Optional[str]) -> dict[str, Any]:
        """The stored dict under ``key`` as on disk ({} when none): for a
        script that reads records as JSON (``read_trajectory``)."""
        row = self._rows.get(key) if key is not None else None
        return dict(row) if row is not None else {}

    def of(self, record: StepRecord) -> Optional[EvalResult]:
        """A step's whole result: through its key, or the one a record of
        the first shape carried inline. None when it was not evaluated."""
        if record.inline_eval is not None:
            return record.inline_eval
        return self.get(record.eval_key)


def iter_step_records(path: str | Path) -> Iterator[StepRecord]:
    """The records of a ``trajectory.jsonl`` (a last line cut off by a crash is dropped)."""
    from .evolve.rundir import iter_trajectory  # lazy: cycle trajectory -> evolve -> trajectory

    for data in iter_trajectory(path):
        yield StepRecord.from_dict(data)


def read_step_records(run_dir: str | Path) -> list[StepRecord]:
    """The records of a run directory's ``trajectory.jsonl``, in file order."""
    return list(iter_step_records(Path(run_dir) / "trajectory.jsonl"))
