"""One run as a single HTML file: inline CSS and JS, figures embedded as
base64 PNG, so the page can be mailed or archived and opened anywhere.

Sections: overview, score over steps, lineage of the best program (its
ancestor chain with metrics), the best kernel with a diff against its
parent, per-step feedback (status, errors, hack reasons, timing), token
usage and cost.
"""

from __future__ import annotations

import base64
import difflib
import html
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..bench.collect import hardware_name, load_steps
from ..result import EvalResult
from ..trajectory import EvalStore, StepRecord
from ..evolve.best import BestFigure, best_figure, step_figure
from ..timing.sol import SpeedOfLight

MAX_ERROR_CHARS = 4000


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _num(value: Any, fmt: str = "{:.3f}") -> str:
    return fmt.format(value) if isinstance(value, (int, float)) else "-"


@dataclass
class RunView:
    """The parts of a run directory a report shows."""

    path: Path
    steps: list[StepRecord]
    summary: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    by_id: dict[int, StepRecord] = field(default_factory=dict)
    # the steps' whole results, by the key their records keep
    evaluations: EvalStore = field(default_factory=EvalStore)

    @classmethod
    def load(cls, run_dir: str | Path) -> "RunView":
        path = Path(run_dir)
        if not (path / "trajectory.jsonl").exists():
            raise FileNotFoundError(f"{path}: not a run directory (no trajectory.jsonl)")
        summary = json.loads((path / "summary.json").read_text()) if (path / "summary.json").exists() else {}
        config = {}
        if (path / "config.yaml").exists():
            import yaml

            config = yaml.safe_load((path / "config.yaml").read_text()) or {}
        view = cls(path=path, steps=load_steps(path), summary=summary, config=config, evaluations=EvalStore.load(path))
        for record in view.steps:
            for pid in record.program_ids:
                view.by_id[pid] = record
        return view

    # -- derived ------------------------------------------------------------
    def eval_of(self, record: StepRecord) -> Optional[EvalResult]:
        """The step's whole result (through its key), None when not evaluated."""
        return self.evaluations.of(record)

    def source_of(self, record: StepRecord) -> str:
        return record.source

    def best_id(self) -> Optional[int]:
        if self.summary.get("best_program_id") is not None:
            return int(self.summary["best_program_id"])
        if "best" in self.summary:  # a finished run that has no best (none timed reliably)
            return None
        best, best_id = None, None
        for record in self.steps:
            if (
                record.status == "correct"
                and self.eval_of(record) is not None
                and record.child_id is not None
                and not record.metric("unreliable")
            ):
                score = record.metric("score", 0.0)
                if best is None or score > best:
                    best, best_id = score, int(record.child_id)
        return best_id

    def lineage(self, program_id: Optional[int]) -> list[StepRecord]:
        """The ancestor chain of ``program_id``, oldest first."""
        chain: list[StepRecord] = []
        seen: set[int] = set()
        current = program_id
        while current is not None and current >= 0 and current in self.by_id and current not in seen:
            seen.add(current)
            record = self.by_id[current]
            chain.append(record)
            parent = record.parent_id
            current = int(parent) if parent is not None and record.kind != "seed" else None
        return list(reversed(chain))

    def best(self) -> Any:
        """The run's one best number (evolve/best.py): the summary's, else
        (a run still going, or one written before it) the best reliable
        per-step figure."""
        saved = BestFigure.from_dict(self.summary.get("best"))
        best_id = self.best_id()
        record = self.by_id.get(best_id) if best_id is not None else None
        if "best" in self.summary:
            if saved.step is None and record is not None:
                saved.step = record.step
            return saved
        if record is None:
            return BestFigure(note="no correct program")
        per_step = step_figure(
            record.step,
            best_id,
            self.eval_of(record),
            self.summary.get("best_speedup")
            if self.summary.get("best_program_id") is not None
            else record.metric("score"),
        )
        return best_figure(self.summary.get("best_confirmation"), per_step)

    def usage(self) -> dict[str, Any]:
        per_model: dict[str, dict[str, Any]] = {}
        for record in self.steps:
            if record.kind != "step":
                continue
            model = record.model or "-"
            usage = record.usage or {}
            row = per_model.setdefault(
                model,
                {
                    "requests": 0,
                    "prompt_tokens": 0,
                    "completion_tokens": 0,
                    "reasoning_tokens": 0,
                    "total_tokens": 0,
                    "latency_s": 0.0,
                },
            )
            row["requests"] += 1
            for key in ("prompt_tokens", "completion_tokens", "reasoning_tokens", "total_tokens"):
                row[key] += int(usage.get(key) or 0)
            row["latency_s"] += float(record.latency_s or 0.0)
        total = self.summary.get("usage") or {}
        return {"per_model": per_model, "total": total}


# -- figures -------------------------------------------------------------------
def _png(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode()


def score_points(view: RunView) -> dict[str, list[tuple[int, float]]]:
    """The chart's points by kind: ``correct`` (timed reliably),
    ``unreliable`` (correct, timed under load: never a best), ``failed``
    (at 0) and ``best`` (the best reliable per-step figure so far, a step
    line), each as (step, speedup)."""
    points: dict[str, list[tuple[int, float]]] = {"correct": [], "unreliable": [], "failed": [], "best": []}
    best = 0.0
    for record in view.steps:
        step = int(record.step or 0)
        status = record.status
        score = float(record.metric("score") or 0.0)
        evaluation = view.eval_of(record)
        if status == "correct" and evaluation is not None:
            if record.metric("unreliable"):
                points["unreliable"].append((step, float(record.metric("speedup") or evaluation.speedup or 0.0)))
            else:
                points["correct"].append((step, score))
                best = max(best, score)
        elif status not in ("reference", "duplicate", "skipped"):
            points["failed"].append((step, 0.0))
        points["best"].append((step, best))
    return points


def score_figure(view: RunView) -> str:
    """Base64 PNG: each step's speedup over PyTorch (failures at 0, steps
    timed unreliably marked), the best per-step figure so far, the run's
    best with its CI as a band, and the 1.0x PyTorch line."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(7.0, 3.6), dpi=110)
    points = score_points(view)

    def xy(kind: str) -> tuple[list[int], list[float]]:
        return [p[0] for p in points[kind]], [p[1] for p in points[kind]]

    ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label="PyTorch (1.0x)", zorder=1)
    best = view.best()
    if best.speedup is not None:
        label = ("confirmed best " if best.confirmed else "best (per-step, not confirmed) ") + best.figure()
        if best.ci_low is not None and best.ci_high is not None:
            ax.axhspan(best.ci_low, best.ci_high, color="#fdae61", alpha=0.3, zorder=0, label=label + " CI band")
        else:
            ax.axhline(best.speedup, color="#f46d43", linewidth=1, zorder=1, label=label)
        if best.step is not None:
            err = None
            if best.ci_low is not None and best.ci_high is not None:
                err = [[max(0.0, best.speedup - best.ci_low)], [max(0.0, best.ci_high - best.speedup)]]
            ax.errorbar(
                [best.step],
                [best.speedup],
                yerr=err,
                fmt="*",
                markersize=12,
                color="#d7301f",
                capsize=4,
                zorder=4,
                label="the run's best",
            )
    ax.scatter(*xy("correct"), s=18, color="#2b7bba", label="correct (per-step figure)", zorder=3)
    if points["unreliable"]:
        ax.scatter(
            *xy("unreliable"),
            s=30,
            facecolors="none",
            edgecolors="#ff7f00",
            linewidths=1.3,
            label="timed unreliably (not a best)",
            zorder=3,
        )
    if points["failed"]:
        ax.scatter(*xy("failed"), s=14, marker="x", color="#d9534f", label="failed candidate (at 0)", zorder=3)
    ax.step(*xy("best"), where="post", color="#1a9850", linewidth=1.8, label="best per-step so far")
    ax.set_xlabel("step (the seed is step 0)")
    ax.set_ylabel("speedup over PyTorch")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return _png(fig)


#: the evaluator's phases, in the order they happen (EvalResult.phases)
PHASES = ("queue", "startup", "load", "compile", "correctness", "census", "timing_wait", "timing")


def phases_figure(view: RunView) -> Optional[str]:
    """Base64 PNG: each evaluated step's time per evaluator phase (stacked),
    or None when the run's results carry no phases (older runs)."""
    rows = [(int(r.step or 0), getattr(view.eval_of(r), "phases", None) or {}) for r in view.steps]
    rows = [(step, ph) for step, ph in rows if ph]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(7.0, 3.0), dpi=110)
    steps = [step for step, _ in rows]
    bottom = [0.0] * len(rows)
    for phase in PHASES:
        heights = [float(ph.get(phase) or 0.0) for _, ph in rows]
        if any(heights):
            ax.bar(steps, heights, bottom=bottom, label=phase, width=0.8)
            bottom = [b + h for b, h in zip(bottom, heights)]
    ax.set_xlabel("step")
    ax.set_ylabel("seconds")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7, ncol=4)
    return _png(fig)


# -- html pieces -----------------------------------------------------------------
def diff_html(parent: str, child: str, parent_name: str = "parent", child_name: str = "best") -> str:
    """Unified diff with added/removed lines highlighted."""
    lines = list(difflib.unified_diff(parent.splitlines(), child.splitlines(), parent_name, child_name, lineterm=""))
    if not lines:
        return "<p class='muted'>identical to its parent</p>"
    out = []
    for line in lines:
        cls = (
            "add"
            if line.startswith("+") and not line.startswith("+++")
            else "del"
            if line.startswith("-") and not line.startswith("---")
            else "hunk"
            if line.startswith("@@")
            else "ctx"
        )
        out.append(f"<span class='{cls}'>{_e(line)}</span>")
    # Each line is a block of its own (for its background): a newline
    # between them as well would add an empty line after every line.
    return "<pre class='diff'>" + "".join(out) + "</pre>"


def _feedback_details(record: StepRecord, evaluation: Optional[EvalResult]) -> str:
    parts = []
    feedback = record.child.feedback.to_dict() if record.child is not None else {}
    if record.proposal_error:
        parts.append(f"<b>proposal error</b><pre>{_e(record.proposal_error)}</pre>")
    edit = record.edit
    if edit is not None and not edit.ok:
        parts.append(f"<b>edit error</b><pre>{_e(edit.error or feedback.get('edit_error'))}</pre>")
    reasons = (evaluation.hack_reasons if evaluation is not None else []) or feedback.get("hack_reasons") or []
    if reasons:
        parts.append("<b>hack reasons</b><ul>" + "".join(f"<li>{_e(r)}</li>" for r in reasons) + "</ul>")
    if evaluation is not None and evaluation.error:
        parts.append(f"<b>error ({_e(evaluation.category)})</b><pre>{_e(evaluation.error[-MAX_ERROR_CHARS:])}</pre>")
    if evaluation is not None and evaluation.warnings:
        parts.append("<b>warnings</b><ul>" + "".join(f"<li>{_e(w)}</li>" for w in evaluation.warnings) + "</ul>")
    if evaluation is not None and evaluation.timing:
        parts.append(f"<b>timing</b><pre>{_e(json.dumps(evaluation.timing, indent=1, default=str)[:2000])}</pre>")
    if record.reasoning:
        parts.append(f"<b>reasoning</b><pre>{_e(str(record.reasoning)[:MAX_ERROR_CHARS])}</pre>")
    return "".join(parts)


def _sol(evaluation: Optional[EvalResult]) -> Any:
    """The step's speed of light (timing/sol.py), or None when it has none."""
    data = getattr(evaluation, "speed_of_light", None) if evaluation is not None else None
    return SpeedOfLight.from_dict(data) if data else None


def roofline_points(view: RunView) -> tuple[list[dict[str, Any]], str]:
    """One point per correct program whose work was counted (the first
    step of each program): its step and program id, arithmetic intensity,
    achieved FLOP/s and bytes/s, the peaks, and the reference's achieved
    rates at the same work; and, when no step was counted, the first
    reason given (the page says it instead of a plot)."""
    points: list[dict[str, Any]] = []
    seen: set = set()
    reason = ""
    for record in view.steps:
        evaluation = view.eval_of(record)
        if record.status != "correct" or evaluation is None:
            continue
        sol = _sol(evaluation)
        if sol is None:
            continue
        if not sol.counted:
            reason = reason or sol.reason
            continue
        if record.child_id in seen or not sol.runtime_ms:
            continue
        seen.add(record.child_id)
        # the reference did the same work in its own time (fraction of the same bound)
        ref_s = (
            (sol.runtime_ms / 1e3) * (sol.fraction / sol.reference_fraction)
            if sol.fraction and sol.reference_fraction
            else None
        )
        points.append(
            {
                "step": int(record.step or 0),
                "id": record.child_id,
                "ai": float(sol.arithmetic_intensity or 0.0),
                "flops_s": float(sol.achieved_flops_per_s or 0.0),
                "bytes_s": float(sol.achieved_bytes_per_s or 0.0),
                "peak_flops_s": float(sol.peak_flops_per_s or 0.0),
                "peak_bytes_s": float(sol.peak_bytes_per_s or 0.0),
                "ref_flops_s": (sol.flops or 0) / ref_s if ref_s else None,
                "ref_bytes_s": (sol.bytes_moved or 0) / ref_s if ref_s else None,
                "bound": sol.bound,
                "fraction": sol.fraction,
                "device": sol.device,
            }
        )
    return points, reason


def roofline_figure(view: RunView) -> Optional[str]:
    """Base64 PNG, one point per program, or None when no step's work was
    counted. Where the programs do floating-point work (a GEMM, a
    convolution: FLOPs counted), the roofline: achieved FLOP/s against
    arithmetic intensity under the bandwidth and compute roofs. Where they
    do none the counter sees (elementwise, softmax: 0 FLOP/byte, which a
    log axis cannot place), the bound that applies is bandwidth: achieved
    bytes/s per program against the peak."""
    points, _ = roofline_points(view)
    if not points:
        return None
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    best_id = view.best_id()
    fig, ax = plt.subplots(figsize=(7.0, 3.6), dpi=110)
    device = points[0]["device"]
    ref = next((p for p in points if p["ref_bytes_s"]), None)
    if any(p["flops_s"] > 0 for p in points):
        peak_f = max(p["peak_flops_s"] for p in points)
        peak_b = max(p["peak_bytes_s"] for p in points)
        ais = [p["ai"] for p in points if p["ai"] > 0]
        lo, hi = min(ais + [peak_f / peak_b]) / 10, max(ais + [peak_f / peak_b]) * 10
        xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
        ax.plot(
            xs,
            [min(peak_f, peak_b * x) / 1e12 for x in xs],
            color="black",
            linewidth=1.2,
            label=f"roofline ({peak_b / 1e12:.3g} TB/s, {peak_f / 1e12:.3g} TFLOP/s)",
        )
        plotted = [p for p in points if p["ai"] > 0 and p["flops_s"] > 0]
        ax.scatter(
            [p["ai"] for p in plotted],
            [p["flops_s"] / 1e12 for p in plotted],
            s=20,
            color="#2b7bba",
            label="program (first step it was timed)",
            zorder=3,
        )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (FLOP/byte)")
        ax.set_ylabel("achieved TFLOP/s")
        if ref is not None and ref["ai"] > 0:
            ax.scatter(
                [ref["ai"]],
                [ref["ref_flops_s"] / 1e12],
                marker="s",
                s=40,
                color="black",
                zorder=4,
                label="PyTorch reference",
            )
        key, scale = "flops_s", 1e12
        xkey = "ai"
    else:
        peak_b = max(p["peak_bytes_s"] for p in points)
        ax.axhline(peak_b / 1e9, color="black", linewidth=1.2, label=f"peak bandwidth {peak_b / 1e9:.4g} GB/s")
        ax.scatter(
            [p["step"] for p in points],
            [p["bytes_s"] / 1e9 for p in points],
            s=20,
            color="#2b7bba",
            label="program (first step it was timed)",
            zorder=3,
        )
        if ref is not None:
            ax.axhline(
                ref["ref_bytes_s"] / 1e9,
                color="black",
                linestyle="--",
                linewidth=1,
                label=f"PyTorch reference {ref['ref_bytes_s'] / 1e9:.4g} GB/s",
            )
        ax.set_ylim(bottom=0)
        ax.set_xlabel("step the program was first timed (0 FLOP/byte: bandwidth is the bound)")
        ax.set_ylabel("achieved GB/s")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        key, scale, xkey = "bytes_s", 1e9, "step"
    best = next((p for p in points if p["id"] == best_id), None)
    if best is not None and best[key] > 0 and (xkey == "step" or best["ai"] > 0):
        ax.scatter(
            [best[xkey]],
            [best[key] / scale],
            marker="*",
            s=160,
            color="#d7301f",
            zorder=5,
            label=f"the run's best #{best_id}",
        )
    ax.set_title(f"speed of light on {device}", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="best")
    return _png(fig)


def _sol_cell(evaluation: Optional[EvalResult]) -> str:
    sol = _sol(evaluation)
    if sol is None or not sol.counted or sol.fraction is None:
        return ""
    return f"{sol.fraction:.0%} of {sol.bound or 'peak'}"


_NOT_EVALUATED = EvalResult()  # the blank cells of a step with no evaluation (speedup, runtimes: None)


def _steps_table(view: RunView) -> str:
    head = (
        "<tr><th>step</th><th>kind</th><th>id</th><th>parent</th><th>island</th><th>mode</th><th>status</th>"
        "<th>speedup</th><th>runtime ms</th><th>ref ms</th><th>of peak</th><th>eval s</th><th>tokens</th>"
        "<th>latency s</th><th>feedback</th></tr>"
    )
    rows = []
    for record in view.steps:
        evaluation = view.eval_of(record)
        status = record.status or "-"
        details = _feedback_details(record, evaluation)
        cell = f"<details><summary>show</summary>{details}</details>" if details else ""
        wall_s = evaluation.wall_s if evaluation is not None else None
        evaluation = evaluation or _NOT_EVALUATED
        rows.append(
            f"<tr class='st-{_e(status)}' data-status='{_e(status)}'>"
            f"<td>{_e(record.step)}</td><td>{_e(record.kind)}</td><td>{_e(record.child_id)}</td>"
            f"<td>{_e('' if record.is_seed else record.parent_id)}</td>"
            f"<td>{_e('' if record.is_seed else record.island)}</td>"
            f"<td>{_e(record.mode or '')}</td><td><span class='badge'>{_e(status)}</span></td>"
            f"<td>{_num(evaluation.speedup)}</td><td>{_num(evaluation.runtime_ms, '{:.4g}')}</td>"
            f"<td>{_num(evaluation.ref_runtime_ms, '{:.4g}')}</td><td>{_e(_sol_cell(view.eval_of(record)))}</td>"
            f"<td>{_num(wall_s, '{:.1f}')}</td>"
            f"<td>{_e((record.usage or {}).get('total_tokens', ''))}</td>"
            f"<td>{_num(record.latency_s, '{:.2f}')}</td><td>{cell}</td></tr>"
        )
    statuses = sorted({r.status or "-" for r in view.steps})
    options = "".join(f"<option value='{_e(s)}'>{_e(s)}</option>" for s in statuses)
    return (
        f"<label>status <select id='status-filter'><option value=''>all</option>{options}</select></label>"
        f"<table class='steps'>{head}{''.join(rows)}</table>"
    )


def _lineage_html(view: RunView, chain: list[StepRecord]) -> str:
    if not chain:
        return "<p class='muted'>no correct program yet</p>"
    items = []
    previous = ""
    for depth, record in enumerate(chain):
        source = view.source_of(record)
        evaluation = view.eval_of(record) or _NOT_EVALUATED
        added = removed = 0
        if previous:
            for line in difflib.unified_diff(previous.splitlines(), source.splitlines(), lineterm="", n=0):
                if line.startswith("+") and not line.startswith("+++"):
                    added += 1
                elif line.startswith("-") and not line.startswith("---"):
                    removed += 1
        change = f"+{added} / -{removed} lines" if previous else "root"
        label = f"step {record.step}" + (" (the seed)" if record.is_seed else "")
        items.append(
            f"<li style='margin-left:{depth * 1.2}em'>{_e(label)} <span class='node muted'>program "
            f"#{_e(record.child_id)}</span> &middot; {_e(record.status)} &middot; per-step speedup "
            f"{_num(evaluation.speedup)} "
            f"&middot; runtime {_num(evaluation.runtime_ms, '{:.4g}')} ms &middot; {_e(record.mode or '')} "
            f"{_e(record.model or '')} &middot; {_e(change)}</li>"
        )
        previous = source
    return "<ul class='lineage'>" + "".join(items) + "</ul>"


def _usage_html(usage: dict[str, Any]) -> str:
    total = usage["total"]
    rows = "".join(
        f"<tr><td>{_e(model)}</td><td>{u['requests']}</td><td>{u['prompt_tokens']}</td><td>{u['completion_tokens']}</td>"
        f"<td>{u['reasoning_tokens']}</td><td>{u['total_tokens']}</td><td>{u['latency_s']:.1f}</td></tr>"
        for model, u in usage["per_model"].items()
    )
    summed = sum(u["total_tokens"] for u in usage["per_model"].values())
    cost = total.get("cost_usd")
    return (
        f"<p>total tokens <b>{_e(total.get('total_tokens', summed))}</b> &middot; cost "
        f"<b>{_num(cost, '${:.4f}') if cost is not None else '$0 (no priced model)'}</b></p>"
        "<table><tr><th>model</th><th>requests</th><th>prompt</th><th>completion</th><th>reasoning</th>"
        f"<th>total</th><th>latency s</th></tr>{rows}</table>"
    )


CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:1.5em auto;max-width:1200px;color:#222}
h1{font-size:1.4em}h2{font-size:1.15em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;font-size:.85em}td,th{border:1px solid #ddd;padding:.25em .5em;vertical-align:top}
th{background:#f4f4f4}pre{background:#f8f8f8;padding:.6em;overflow-x:auto;font-size:.8em;max-height:40em}
.diff .add{background:#e6ffed;display:block}.diff .del{background:#ffeef0;display:block}
.diff .hunk{color:#6f42c1;display:block}.diff .ctx{display:block}
.badge{padding:0 .4em;border-radius:.3em;background:#eee}.st-correct .badge{background:#d4f5d4}
.st-hacked .badge{background:#ffd6a5}.st-incorrect .badge,.st-compile-failed .badge,.st-edit-failed .badge{background:#ffd6d6}
.best{font-size:1.15em;background:#f6f8fa;border:1px solid #ddd;padding:.5em .8em;border-radius:.3em}
.muted{color:#888}.kv td:first-child{font-weight:600}.lineage{list-style:none;padding-left:0}.node{font-family:monospace}
"""

JS = """
document.getElementById('status-filter').addEventListener('change', function (e) {
  var want = e.target.value;
  document.querySelectorAll('table.steps tr[data-status]').forEach(function (row) {
    row.style.display = (!want || row.dataset.status === want) ? '' : 'none';
  });
});
"""


def _best_html(best: Any) -> str:
    """The page's headline: the run's one best number, its CI and verdict in words."""
    if best.speedup is None:
        return f"<p class='best'>Best: {_e(best.words())}</p>"
    verdict = best.verdict_words()
    return (
        f"<p class='best' id='best-figure'>Best: <b>{_e(f'{best.speedup:.3f}x')}</b> vs PyTorch"
        + (f", 95% CI <b>{_e(best.ci_text)}</b>" if best.ci_text else "")
        + (f" &mdash; <b>{_e(verdict)}</b>" if verdict else "")
        + f"<br><span class='muted'>{_e(best.how())}</span></p>"
    )


def _first_backend(view: RunView) -> str:
    """The backend the first record's evaluation names, when the config does not say."""
    if not view.steps:
        return "-"
    first = view.eval_of(view.steps[0])
    return first.backend if first is not None else "task's"


def _roofline_html(view: RunView) -> str:
    figure = roofline_figure(view)
    points, reason = roofline_points(view)
    if figure is None:
        return f"<p class='muted'>not counted: {_e(reason or 'no correct program was timed')}</p>"
    bound = points[0]["bound"] or "peak"
    best = next((p for p in points if p["id"] == view.best_id()), None)
    words = (
        f"the run's best #{best['id']}: {best['fraction']:.0%} of the {bound} bound on {best['device']}"
        if best is not None and best["fraction"] is not None
        else f"{len(points)} program(s) counted"
    )
    return (
        f"<p id='sol-best'>{_e(words)}</p>"
        f"<img id='roofline' alt='speed of light: achieved against the device peak' "
        f"src='data:image/png;base64,{figure}'>"
    )


def build_report(run_dir: str | Path) -> str:
    """The HTML text of the report of ``run_dir``."""
    view = RunView.load(run_dir)
    task = view.config.get("task") or {}
    config = view.config.get("config") or {}
    best_id = view.best_id()
    chain = view.lineage(best_id)
    hardware = next(
        (hardware_name(e.hardware) for e in map(view.eval_of, view.steps) if e is not None and e.hardware), "-"
    )
    counts: dict[str, int] = {}
    for record in view.steps:
        counts[record.status or "-"] = counts.get(record.status or "-", 0) + 1
    best = view.best()
    proposals = sum(1 for r in view.steps if r.kind == "step")
    overview = [
        ("task", f"{task.get('name', '-')} ({task.get('id', '-')})"),
        ("run directory", str(view.path)),
        ("model", config.get("model", "-")),
        ("backend", config.get("backend") or _first_backend(view)),
        ("hardware", hardware),
        ("steps", f"{proposals} after the seed (step 0)" if len(view.steps) > proposals else proposals),
        ("stop reason", view.summary.get("stop_reason", "running or stopped without summary")),
        (
            "best program",
            (f"step {best.step}, program #{best_id}" if best.step is not None else f"#{best_id}")
            if best_id is not None
            else "-",
        ),
        ("outcomes", ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))),
        ("wall time", _num(view.summary.get("wall_time_s"), "{:.1f} s")),
    ]
    phases = phases_figure(view)
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>kernelsmith run: {_e(task.get('name', view.path.name))}</title><style>{CSS}</style></head><body>",
        f"<h1>kernelsmith run &mdash; {_e(task.get('name', view.path.name))}</h1>",
        _best_html(best),
        "<table class='kv'>" + "".join(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in overview) + "</table>",
        "<h2>Speedup over steps</h2>",
        f"<img alt='speedup over steps' src='data:image/png;base64,{score_figure(view)}'>",
        *(
            (
                [
                    "<h2>Evaluation time per phase</h2>",
                    f"<img alt='evaluation phases per step' src='data:image/png;base64,{phases}'>",
                ]
            )
            if phases
            else []
        ),
        "<h2 id='speed-of-light'>Speed of light</h2>",
        _roofline_html(view),
        "<h2>Lineage of the best program</h2>",
        _lineage_html(view, chain),
        "<h2 id='best'>Best kernel</h2>",
    ]
    if chain:
        best_source = view.source_of(chain[-1])
        parent_source = view.source_of(chain[-2]) if len(chain) > 1 else ""
        parent_name = f"#{chain[-2].child_id}" if len(chain) > 1 else "(none)"
        parts.append(f"<h3>Diff against its parent {_e(parent_name)}</h3>")
        parts.append(
            diff_html(parent_source, best_source, f"parent {parent_name}", f"best #{best_id}")
            if len(chain) > 1
            else "<p class='muted'>the best program is a seed: no parent</p>"
        )
        parts.append(f"<h3>Source of #{_e(best_id)}</h3><pre class='source'>{_e(best_source)}</pre>")
    else:
        parts.append("<p class='muted'>no correct program</p>")
    parts += [
        "<h2>Per-step feedback</h2>",
        _steps_table(view),
        "<h2>Token usage and cost</h2>",
        _usage_html(view.usage()),
        f"<script>{JS}</script></body></html>",
    ]
    return "\n".join(parts)


def write_report(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write the report (default RUN_DIR/report.html) and return its path."""
    target = Path(out) if out is not None else Path(run_dir) / "report.html"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(build_report(run_dir), encoding="utf-8")
    return target
