"""Build the evolution prompt: system message (objective, rules, tips) and
user message (reference, history, top programs, inspirations, the current
program with its feedback, what to do).

Inputs are duck-typed so that the engine's records, dataclasses and plain
dicts all work: a program has ``id``, ``source``, ``parent_id``, ``island``,
``iteration``, ``metrics`` (dict), ``status`` and ``feedback`` (dict); a
request has ``island``, ``parent``, ``inspirations``, ``mode`` and
``iteration``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any, Callable, Mapping, Optional, Sequence

from ..backends import DEFAULT_BACKEND
from ..backends.base import device_family
from ..feedback import Feedback, clip, format_metrics, render_feedback
from ..hardware import HardwareInfo
from ..backends import get_backend

__all__ = [
    "Prompt",
    "PromptBuilder",
    "PromptConfig",
    "TEMPLATE_NAMES",
    "estimate_tokens",
    "hardware_family",
    "load_template",
]

log = logging.getLogger(__name__)

TEMPLATE_NAMES = (
    "system.md",
    "user.md",
    "format_full.md",
    "format_diff.md",
    "mode_explore.md",
    "mode_exploit.md",
    "mode_weighted.md",
    "mode_repair.md",
    "hardware_hopper.md",
    "hardware_blackwell.md",
    "hardware_ampere.md",
    "hardware_ada.md",
    "hardware_amd_cdna.md",
    "hardware_cpu.md",
    "hardware_triton_interpreter.md",
    "hardware_generic.md",
)
REQUEST_MODES = ("explore", "exploit", "weighted", "repair")
OUTPUT_FORMATS = ("full", "diff")


@dataclass
class PromptConfig:
    # Reply format asked of the model: "full" (whole program) or "diff" (SEARCH/REPLACE).
    output_format: str = "full"
    # Input cap in tokens (the paper's unified protocol: 32K); history is dropped to fit.
    max_input_tokens: int = 32768
    # At most this many previous attempts, top programs and inspirations are shown.
    max_history: int = 8
    max_top_programs: int = 3
    max_inspirations: int = 2
    # Long error logs are cut to this many characters (head and tail kept).
    max_log_chars: int = 6000
    # A folder whose files (same names as the defaults) replace the default templates.
    template_dir: Optional[str] = None

    def __post_init__(self) -> None:
        if self.output_format not in OUTPUT_FORMATS:
            raise ValueError(
                f"prompt.output_format must be one of {', '.join(OUTPUT_FORMATS)}; got {self.output_format!r}"
            )
        for name in ("max_input_tokens", "max_history", "max_top_programs", "max_inspirations", "max_log_chars"):
            if int(getattr(self, name)) < 0:
                raise ValueError(f"prompt.{name} must be >= 0; got {getattr(self, name)}")


@dataclass
class Prompt:
    messages: list[dict[str, str]]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def system(self) -> str:
        return self.messages[0]["content"]

    @property
    def user(self) -> str:
        return self.messages[1]["content"]

    def to_dict(self) -> dict[str, Any]:
        return {"messages": [dict(m) for m in self.messages], "meta": dict(self.meta)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Prompt":
        return cls(messages=[dict(m) for m in data["messages"]], meta=dict(data.get("meta", {})))


Tokenizer = Callable[[str], Any]


def estimate_tokens(text: str, tokenizer: Any = None) -> int:
    """Tokens in ``text``: ~chars/4, or a tokenizer (callable returning an int
    or a sequence, or an object with ``encode``)."""
    if tokenizer is None:
        return math.ceil(len(text) / 4)
    out = tokenizer.encode(text) if hasattr(tokenizer, "encode") else tokenizer(text)
    return int(out) if isinstance(out, (int, float)) else len(out)


def _backend_of(backend: Any) -> Any:
    """The Backend that chooses the hardware notes: ``backend`` itself, or
    the one of that name; None when there is none (no name, an unknown one)."""
    if backend is None or not isinstance(backend, str):
        return backend
    if not backend:
        return None

    try:
        return get_backend(backend)
    except Exception:  # noqa: BLE001 - an unknown or broken backend gets the generic notes
        log.debug("no backend %r for the hardware notes; using the device's family", backend)
        return None


def hardware_family(hardware: HardwareInfo | Mapping[str, Any] | None, backend: Any = None) -> str:
    """Which hardware tips apply: hopper, blackwell, ampere, ada, amd_cdna,
    cpu (an OpenCL CPU device such as PoCL), generic, or one that the backend
    chooses (``Backend.hardware_family``; e.g. Triton's interpreter).
    ``backend``: a Backend or its name; default: the one that reported
    ``hardware``."""
    hw = HardwareInfo.of(hardware)
    found = _backend_of(backend if backend is not None else hw.backend)
    return found.hardware_family(hw) if found is not None else device_family(hw)


def load_template(name: str, template_dir: str | Path | None = None) -> str:
    """A template's text: from ``template_dir`` when it has the file, else the default."""
    if name not in TEMPLATE_NAMES:
        raise ValueError(f"unknown template {name!r}; known: {', '.join(TEMPLATE_NAMES)}")
    if template_dir is not None:
        path = Path(template_dir) / name
        if path.is_file():
            return path.read_text(encoding="utf-8")
    return resources.files("kernelsmith.prompts").joinpath("templates", name).read_text(encoding="utf-8")


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if obj is None:
        return default
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _score(program: Any) -> float:
    metrics = _get(program, "metrics") or {}
    for key in ("score", "speedup"):
        value = metrics.get(key) if isinstance(metrics, Mapping) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    return float("-inf")


def _code_key(program: Any) -> Any:
    """What makes two programs the same for a prompt: their code up to
    comments and whitespace (the engine's duplicate hash), else their id."""
    source = _get(program, "source")
    if source:
        # lazy: engine pulls in yaml, which prompts.builder does not load on its own
        from ..engine import normalized_hash

        return ("code", normalized_hash(str(source)))
    return ("id", _get(program, "id"))


def _program_header(program: Any) -> str:
    bits = []
    for key, label in (("id", "id"), ("iteration", "iteration"), ("parent_id", "parent"), ("island", "island")):
        value = _get(program, key)
        if value is not None and value != "":
            bits.append(f"{label} {value}")
    status = _get(program, "status")
    if status:
        bits.append(f"status {status}")
    return ", ".join(bits)


def _outcome_line(program: Any, max_chars: int = 200) -> str:
    """One line on why an attempt failed, if it did."""
    fb = Feedback.of(_get(program, "feedback"))
    if fb.edit_error:
        first = str(fb.edit_error).strip().splitlines()[0] if str(fb.edit_error).strip() else ""
        return f"edit failed: {clip(first, max_chars)}"
    if fb.hacked or fb.hack_reasons:
        return "rejected as a shortcut: " + clip("; ".join(str(r) for r in fb.hack_reasons), max_chars)
    failed = fb.category not in ("", "ok")
    if fb.compiled is False or fb.correct is False or failed:
        what = fb.category if failed else ("compile" if fb.compiled is False else "incorrect")
        log_text = str(fb.error or "").strip()
        last = log_text.splitlines()[-1] if log_text else ""
        return f"{what}" + (f": {clip(last, max_chars, keep='tail')}" if last else "")
    return ""


@dataclass
class _Parts:
    history: list[Any]
    top: list[Any]
    inspirations: list[Any]
    log_chars: int
    dropped: list[dict[str, Any]] = field(default_factory=list)
    dropped_history: int = 0


class PromptBuilder:
    """Builds ``[system, user]`` messages for one request.

    ``reference_source``: the task's PyTorch reference module. ``backend``:
    the Backend or its name (it chooses the hardware notes). ``backend_tips``:
    ``Backend.prompt_tips(hardware)``. ``hardware``: the backend's
    :class:`~kernelsmith.hardware.HardwareInfo` (or its dict; records of the
    old per-backend shapes are read too). ``tokenizer``: optional, see
    :func:`estimate_tokens`.
    """

    def __init__(
        self,
        config: PromptConfig | None = None,
        *,
        reference_source: str,
        backend: Any = DEFAULT_BACKEND,
        backend_tips: str = "",
        hardware: HardwareInfo | Mapping[str, Any] | None = None,
        task_name: str = "",
        task_description: str = "",
        tokenizer: Any = None,
    ) -> None:
        self.config = config or PromptConfig()
        self.reference_source = reference_source
        self.backend = backend if isinstance(backend, str) else backend.name
        self._backend = _backend_of(backend)
        self.backend_tips = backend_tips
        self.hardware = HardwareInfo.of(hardware)
        self.task_name = task_name
        self.task_description = task_description
        self.tokenizer = tokenizer
        tdir = self.config.template_dir
        if tdir is not None:
            folder = Path(tdir)
            if not folder.is_dir():
                raise ValueError(f"prompt.template_dir {tdir!r} is not a folder")
            unknown = sorted(p.name for p in folder.glob("*.md") if p.name not in TEMPLATE_NAMES)
            if unknown:
                # A misspelt override would silently fall back to the default.
                log.warning(
                    "prompt.template_dir %s: ignoring unknown templates %s (known: %s)",
                    tdir,
                    ", ".join(unknown),
                    ", ".join(TEMPLATE_NAMES),
                )
        self.templates = {name: load_template(name, tdir) for name in TEMPLATE_NAMES}

    # -- rendering -------------------------------------------------------
    def _tokens(self, text: str) -> int:
        return estimate_tokens(text, self.tokenizer)

    def hardware_family(self) -> str:
        """The hardware notes' family, as the backend chooses it."""
        if self._backend is None:
            return device_family(self.hardware)
        return self._backend.hardware_family(self.hardware)

    def hardware_notes(self) -> str:
        """The system prompt's hardware section, as the backend writes it
        (from this builder's templates, overrides included)."""
        if self._backend is None:
            return self.templates[f"hardware_{device_family(self.hardware)}.md"]
        return self._backend.hardware_notes(self.hardware, self.templates)

    def system_prompt(self) -> str:
        device = self.hardware.label("the target device")
        values = {
            "backend": self.backend,
            "backend_tips": self.backend_tips.strip() or "No backend-specific tips.",
            "device_name": device,
            "hardware_tips": self.hardware_notes().strip(),
            "output_format": self.templates[f"format_{self.config.output_format}.md"].strip(),
        }
        return Template(self.templates["system.md"]).safe_substitute(values).strip() + "\n"

    def _render_history(self, parts: _Parts) -> str:
        if not parts.history and not parts.dropped_history:
            return ""
        out = ["", "## Previous attempts", "Most recent last, with their results:"]
        ordered = sorted(parts.history, key=lambda p: _get(p, "iteration") or 0)
        for p in ordered:
            line = f"- {_program_header(p)}: {format_metrics(_get(p, 'metrics'))}"
            outcome = _outcome_line(p)
            if outcome:
                line += f" -- {outcome}"
            out.append(line)
        if parts.dropped_history:
            out.append(f"({parts.dropped_history} older or weaker attempts omitted to fit the prompt size.)")
        return "\n".join(out) + "\n"

    def _render_programs(self, title: str, intro: str, programs: Sequence[Any]) -> str:
        if not programs:
            return ""
        out = ["", f"## {title}", intro]
        for i, p in enumerate(programs, 1):
            out.append(f"### {i}. {_program_header(p)}")
            out.append(f"Metrics: {format_metrics(_get(p, 'metrics'))}")
            out.append("```python")
            out.append(str(_get(p, "source", "")).rstrip("\n"))
            out.append("```")
        return "\n".join(out) + "\n"

    def _user_prompt(self, request: Any, current: Any, parts: _Parts) -> str:
        mode = _get(request, "mode") or "weighted"
        header = _program_header(current)
        metrics = _get(current, "metrics")
        current_header = f" ({header})" if header else ""
        if metrics:
            current_header += f"\nMetrics: {format_metrics(metrics)}"
        desc = self.task_description.strip()
        values = {
            "task_name": self.task_name or "make the reference faster",
            "task_description": f"{desc}\n" if desc else "",
            "reference": self.reference_source.rstrip("\n"),
            "history": self._render_history(parts),
            "top_programs": self._render_programs("Top programs", "The best programs found so far:", parts.top),
            "inspirations": self._render_programs(
                "Inspirations", "Diverse programs to borrow ideas from:", parts.inspirations
            ),
            "current_header": current_header,
            "current_source": str(_get(current, "source", "")).rstrip("\n"),
            "current_feedback": render_feedback(_get(current, "feedback"), parts.log_chars),
            "instruction": self.templates[f"mode_{mode}.md"].strip(),
        }
        return Template(self.templates["user.md"]).safe_substitute(values).strip() + "\n"

    # -- public ----------------------------------------------------------
    def build(
        self,
        request: Any,
        *,
        current: Any = None,
        history: Sequence[Any] = (),
        top_programs: Sequence[Any] = (),
        inspirations: Sequence[Any] | None = None,
    ) -> Prompt:
        """Messages for ``request``.

        ``current`` defaults to ``request.parent``; ``inspirations`` to
        ``request.inspirations``. ``history``: previous attempts (any order;
        shown oldest first). Programs equal to the current one (same id) are
        left out of the lists.
        """
        mode = _get(request, "mode") or "weighted"
        if mode not in REQUEST_MODES:
            raise ValueError(f"request.mode must be one of {', '.join(REQUEST_MODES)}; got {mode!r}")
        cfg = self.config
        current = current if current is not None else _get(request, "parent")
        if current is None:
            raise ValueError("no current program: pass current= or a request with .parent")
        if inspirations is None:
            inspirations = _get(request, "inspirations") or []
        cur_id = _get(current, "id")

        def others(seq: Sequence[Any]) -> list[Any]:
            return [p for p in seq if cur_id is None or _get(p, "id") != cur_id]

        # No program twice in one prompt: a top program is not also an
        # inspiration, and copies of one program (migrants share the code
        # under another id) count as the same program.
        shown = {_code_key(current)}

        def unseen(seq: Sequence[Any], limit: int) -> list[Any]:
            out = []
            for p in others(seq):
                key = _code_key(p)
                if len(out) < limit and key not in shown:
                    shown.add(key)
                    out.append(p)
            return out

        hist = others(history)
        # Keep the most recent attempts when there are more than allowed.
        hist = sorted(hist, key=lambda p: _get(p, "iteration") or 0)
        over = max(0, len(hist) - cfg.max_history)
        parts = _Parts(
            history=hist[over:],
            top=unseen(top_programs, cfg.max_top_programs),
            inspirations=unseen(inspirations, cfg.max_inspirations),
            log_chars=cfg.max_log_chars,
            dropped_history=over,
        )
        for p in hist[:over]:
            parts.dropped.append({"kind": "history", "id": _get(p, "id"), "reason": "max_history"})

        system = self.system_prompt()
        sys_tokens = self._tokens(system)
        cap = cfg.max_input_tokens

        def render() -> tuple[str, int]:
            user = self._user_prompt(request, current, parts)
            return user, sys_tokens + self._tokens(user)

        user, total = render()
        notes: list[str] = []
        # Least useful first: weakest then oldest attempts, extra inspirations
        # and top programs, long logs, and finally the remaining examples.
        while total > cap and parts.history:
            victim = min(parts.history, key=lambda p: (_score(p), _get(p, "iteration") or 0))
            parts.history.remove(victim)
            parts.dropped_history += 1
            parts.dropped.append({"kind": "history", "id": _get(victim, "id"), "reason": "input_cap"})
            user, total = render()
        for kind in ("inspirations", "top"):
            lst = getattr(parts, kind)
            while total > cap and len(lst) > 1:
                victim = lst.pop()
                parts.dropped.append(
                    {"kind": "top_programs" if kind == "top" else kind, "id": _get(victim, "id"), "reason": "input_cap"}
                )
                user, total = render()
        while total > cap and parts.log_chars > 400:
            parts.log_chars //= 2
            user, total = render()
        if parts.log_chars < cfg.max_log_chars:
            notes.append(f"error log cut to {parts.log_chars} characters")
        for kind in ("inspirations", "top"):
            lst = getattr(parts, kind)
            while total > cap and lst:
                victim = lst.pop()
                parts.dropped.append(
                    {"kind": "top_programs" if kind == "top" else kind, "id": _get(victim, "id"), "reason": "input_cap"}
                )
                user, total = render()
        over_cap = total > cap
        if over_cap:
            notes.append(f"prompt still has ~{total} tokens, over the cap of {cap}, after dropping all optional parts")
            log.warning("prompt over the input cap: ~%d tokens > %d", total, cap)

        meta = {
            "mode": mode,
            "output_format": cfg.output_format,
            "estimated_tokens": total,
            "system_tokens": sys_tokens,
            "user_tokens": total - sys_tokens,
            "max_input_tokens": cap,
            "over_cap": over_cap,
            "hardware_family": self.hardware_family(),
            "included": {
                "current": cur_id,
                "history": [_get(p, "id") for p in parts.history],
                "top_programs": [_get(p, "id") for p in parts.top],
                "inspirations": [_get(p, "id") for p in parts.inspirations],
                "log_chars": parts.log_chars,
            },
            "dropped": parts.dropped,
            "notes": notes,
        }
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return Prompt(messages=messages, meta=meta)
