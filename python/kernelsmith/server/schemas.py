"""The requests and answers of ``kernelsmith serve`` as pydantic models.

FastAPI validates each request body against its model (a mismatch is a 400
that names the field) and each answer against its model, and publishes both
in ``/openapi.json`` (rendered at ``/docs``). The models of the records that
already exist as dataclasses (``EvalResult``, ``Reward``, ``RewardConfig``)
are made from those dataclasses' fields, so the schema cannot drift from the
record. Answers allow keys the model does not name: a newer record field is
passed on, not dropped.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Dict, List, Optional, Tuple, Type, Union

from pydantic import BaseModel, ConfigDict, Field, create_model

from ..result import EvalResult
from ..rewards.core import Reward, RewardConfig


def _optional_fields(cls: type, skip: Tuple[str, ...] = ()) -> Dict[str, Any]:
    """Each field of dataclass ``cls`` as an optional model field; its real
    default goes into the description (the model's default is "not sent")."""
    hints = typing.get_type_hints(cls)
    fields: Dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        if f.default is not dataclasses.MISSING:
            said = f"default {f.default!r}"
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            said = f"default {f.default_factory()!r}"  # type: ignore[misc]
        else:
            said = "always present"
        fields[f.name] = (Optional[hints[f.name]], Field(default=None, description=said))
    return fields


def _model(
    name: str, cls: type, *, extra: str, doc: str, skip: Tuple[str, ...] = (), base: Optional[Type[BaseModel]] = None
) -> Type[BaseModel]:
    config = None if base is not None else ConfigDict(extra=extra)  # type: ignore[typeddict-item]
    model = create_model(
        name,
        __config__=config,
        __base__=base,
        __doc__=doc,  # type: ignore[call-overload]
        **_optional_fields(cls, skip),
    )
    return model


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


#: EvalResult as the service answers it (``EvalResult.to_dict()``)
EvalResultModel = _model(
    "EvalResult",
    EvalResult,
    extra="allow",
    doc="The evaluator's verdict on one candidate (kernelsmith.result.EvalResult).",
)

#: RewardConfig fields a request may override; an unknown key is a 400
RewardConfigModel = _model(
    "RewardConfig",
    RewardConfig,
    extra="forbid",
    doc="Reward shaping and penalties (kernelsmith.rewards.RewardConfig); fields not sent keep the server's setting.",
)


class ErrorAnswer(BaseModel):
    error: str = Field(description="what was wrong, in words")


class HealthAnswer(BaseModel):
    status: str = Field(examples=["ok"])


class StatusAnswer(_Open):
    workers: int = Field(description="evaluation slots (one per device)")
    devices: List[str]
    queue_length: int = Field(description="evaluations admitted and waiting for a slot")
    queue_capacity: int
    running: int
    waiting_admission: int = Field(description="requests waiting for room in the full queue")
    admitted_after_waiting: int
    admission_wait_s: float = Field(description="how long a request waits for room before its 503")
    counts: Dict[str, int] = Field(description="requests, verdicts and refusals since the start")
    tasks: List[str] = Field(description="registered task ids")
    uptime_s: float


class TaskRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task: Optional[Dict[str, Any]] = Field(
        default=None, description="a task dict (Task.to_dict(), or an exported task with config_json)"
    )
    task_path: Optional[str] = Field(
        default=None, description="a task directory on the server (needs --allow-task-paths)"
    )


class TaskAnswer(BaseModel):
    task_id: str
    name: str


class ScoringItem(_Open):
    """One candidate: the task (one of task_id, task, task_path) and either
    a program (``source``) or a model's answer to apply to a parent
    (``completion`` + ``parent_source``). Other keys are passed to the
    scorer as they are."""

    task_id: Optional[str] = Field(default=None, description="a task registered with --task or POST /tasks")
    task: Optional[Union[Dict[str, Any], str]] = Field(default=None, description="the task inline")
    task_path: Optional[str] = Field(default=None, description="a task directory (needs --allow-task-paths)")
    source: Optional[str] = Field(default=None, description="a whole program (POST /evaluate)")
    completion: Optional[Any] = Field(
        default=None, description="the model's answer: text, a chat message or a list of messages"
    )
    parent_source: Optional[str] = Field(default=None, description="the program the completion edits")
    parent_runtime_ms: Optional[float] = Field(default=None, description="the parent's runtime (0 or missing: unknown)")
    parent_speedup: Optional[float] = Field(default=None, description="the parent's speedup over the reference")
    edit_mode: Optional[str] = Field(default=None, description="diff | full | auto")
    trials: Optional[int] = Field(default=None, description="correctness trials (default: the task's)")


class EvaluateRequest(ScoringItem):
    pass


class EvaluateAnswer(_Open):
    result: Optional[EvalResultModel] = Field(  # type: ignore[valid-type]
        description="the verdict; null when the completion could not be applied"
    )
    edit_error: Optional[str] = Field(description="why the completion could not be applied, else null")


class RewardRequest(ScoringItem):
    """One item (the fields below), or a batch in ``items``; ``config``
    overrides reward settings for this request."""

    items: Optional[List[ScoringItem]] = Field(default=None, description="a batch: admitted whole, answered whole")
    config: Optional[RewardConfigModel] = None  # type: ignore[valid-type]


_RewardFields = _model(
    "Reward", Reward, extra="allow", skip=("result",), base=_Open, doc="kernelsmith.rewards.Reward without its result"
)


class RewardDetail(_RewardFields):  # type: ignore[valid-type,misc]
    """One reward, and what each of its speedups is against (``speedup``
    and ``speedup_ci`` are the old names of the first)."""

    speedup_vs_parent: Optional[float] = Field(default=None, description="what the reward pays (after the CI rule)")
    speedup_vs_parent_ci: Optional[Tuple[float, float]] = None
    speedup_vs_reference: Optional[float] = Field(default=None, description="the completion over PyTorch")
    category: Optional[str] = Field(default=None, description="the EvalResult category")
    hack_reasons: Optional[List[str]] = None


class RewardBatchAnswer(_Open):
    rewards: List[float]
    details: List[RewardDetail]


class OpenRLHFRequest(BaseModel):
    """OpenRLHF's remote reward model request (``--remote_rm_url``)."""

    query: List[Any] = Field(description="prompt + response, one per sample")
    prompts: Optional[List[Any]] = Field(default=None, description="the prompts, to cut from the queries")
    labels: Optional[List[Any]] = Field(default=None, description="the ground truth (RL rows' label JSON)")


class OpenRLHFAnswer(BaseModel):
    rewards: List[float]
    scores: List[float]
    extra_logs: Dict[str, List[float]] = Field(description="the same keys for every answer, one value per query")
