"""Replay proposer: returns the responses of a recorded run.

It reads ``RUN_DIR/trajectory.jsonl``, one JSON object per line, each read
as a :class:`kernelsmith.trajectory.StepRecord`. Fields used:

- ``iteration`` (int, required): the step the response belongs to;
- ``raw_response`` (str or null, required): the model's text as received;
- ``model`` (str), ``usage`` (dict), ``latency_s`` (float), ``reasoning``
  (str), ``proposal_error`` (str): copied into the Proposal when present.

``match="iteration"`` returns the record with the request's iteration (the
last one when a resumed run recorded an iteration twice) and raises
ProposerExhausted past the last recorded iteration; ``match="order"``
returns the records one after the other regardless of the request.
Blank lines are skipped; a broken line is an error naming its line number.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..trajectory import StepRecord
from .base import Proposal, Proposer, ProposerExhausted

__all__ = ["ReplayProposer"]


class ReplayProposer(Proposer):
    name = "replay"

    def __init__(self, run_dir: str | Path, *, match: str = "iteration") -> None:
        if match not in ("iteration", "order"):
            raise ValueError(f"match must be 'iteration' or 'order'; got {match!r}")
        self.run_dir = Path(run_dir)
        self.match = match
        path = self.run_dir / "trajectory.jsonl" if self.run_dir.is_dir() else self.run_dir
        if not path.is_file():
            raise FileNotFoundError(f"replay: no trajectory at {path} (expected RUN_DIR/trajectory.jsonl)")
        self.path = path
        self.records: list[StepRecord] = []
        with path.open(encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"replay: {path} line {n} is not JSON: {exc}") from exc
                if not isinstance(record, dict) or "iteration" not in record or "raw_response" not in record:
                    raise ValueError(f"replay: {path} line {n} needs the keys 'iteration' and 'raw_response'")
                try:
                    self.records.append(StepRecord.from_dict(record))
                except (TypeError, ValueError) as exc:
                    raise ValueError(f"replay: {path} line {n} is not a trajectory record: {exc}") from exc
        self.by_iteration = {int(r.iteration): r for r in self.records}
        self._next = 0

    def __len__(self) -> int:
        return len(self.records)

    def _record_for(self, request: Any) -> StepRecord:
        if self.match == "order":
            if self._next >= len(self.records):
                raise ProposerExhausted(
                    f"replay: all {len(self.records)} recorded steps of {self.path} have been replayed"
                )
            record = self.records[self._next]
            self._next += 1
            return record
        iteration = getattr(request, "iteration", None)
        if iteration is None:
            raise ValueError("replay with match='iteration' needs request.iteration")
        record = self.by_iteration.get(int(iteration))
        if record is None:
            last = max(self.by_iteration) if self.by_iteration else None
            raise ProposerExhausted(
                f"replay: {self.path} has no step for iteration {iteration} (recorded iterations: "
                f"{min(self.by_iteration) if self.by_iteration else '-'}..{last}, {len(self.records)} records)"
            )
        return record

    async def propose(self, request: Any, messages: Sequence[Mapping[str, str]] = ()) -> Proposal:
        record = self._record_for(request)
        text = record.raw_response
        error = record.proposal_error
        if text is None and error is None:
            error = "the recorded step has no response"
        return Proposal(
            text=text or "",
            model=str(record.model or self.name),
            usage=dict(record.usage or {}),
            latency_s=float(record.latency_s or 0.0),
            reasoning=record.reasoning,
            error=error,
            error_info=record.llm_error if error is not None else None,
            meta={"replayed_iteration": record.iteration, "source": str(self.path)},
        )
