"""Figures (matplotlib, Agg backend, PNG): best score against step per
configuration (the paper's figure 1) and speedup distributions."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from .metrics import TaskResult, best_curve_mean, dense_curve


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)  # files only: no display on servers and CI
    import matplotlib.pyplot as plt

    return plt


def _integer_steps(ax) -> None:
    # Steps are whole numbers: without this a short run gets ticks at 0.5, 1.5...
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def plot_best_vs_step(configs: dict[str, Sequence[TaskResult]], path: str | Path, title: str = "") -> Path:
    """One line per configuration: the average over tasks of the best program so
    far (amsr: below 1 or incorrect counts as 0), against the evolution step."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    horizon = max((int(r.curve[-1][0]) for rs in configs.values() for r in rs if r.curve), default=0)
    for label, results in configs.items():
        ys = best_curve_mean(results, horizon)
        if ys:
            ax.plot(range(len(ys)), ys, label=f"{label} ({len(results)} tasks)", linewidth=1.8)
    ax.set_xlabel("evolution step")
    _integer_steps(ax)
    ax.set_ylabel("average speedup of best so far (amsr)")
    ax.set_title(title or "Best score against step")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, plt, path)


def plot_task_curves(results: Sequence[TaskResult], path: str | Path, title: str = "") -> Path:
    """Best speedup so far against step, one line per task."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    for r in results:
        if not r.curve:
            continue
        horizon = int(r.curve[-1][0])
        ax.step(range(horizon + 1), dense_curve(r.curve, horizon), where="post", label=r.key, linewidth=1.2)
    ax.axhline(1.0, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("evolution step")
    _integer_steps(ax)
    ax.set_ylabel("best speedup so far")
    ax.set_title(title or "Per-task best speedup")
    ax.grid(alpha=0.3)
    if len(results) <= 12:
        ax.legend(fontsize=7)
    return _save(fig, plt, path)


def plot_speedup_distribution(configs: dict[str, Sequence[TaskResult]], path: str | Path, title: str = "") -> Path:
    """Histogram (log2 bins) of the best speedup per correct task, per configuration;
    incorrect tasks are counted in the legend."""
    import math

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    values = [r.best_speedup for rs in configs.values() for r in rs if r.correct and r.best_speedup]
    lo = min([0.5] + [v for v in values if v > 0])
    hi = max([2.0] + values)
    edges = [2**x for x in _frange(math.floor(math.log2(lo)), math.ceil(math.log2(hi)) + 0.25, 0.25)]
    for label, results in configs.items():
        good = [r.best_speedup for r in results if r.correct and r.best_speedup]
        missing = sum(1 for r in results if not r.correct)
        ax.hist(good, bins=edges, alpha=0.55, label=f"{label} ({len(good)} correct, {missing} incorrect)")
    ax.set_xscale("log", base=2)
    ax.axvline(1.0, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("best speedup over the reference (log scale)")
    ax.set_ylabel("tasks")
    ax.set_title(title or "Speedup distribution")
    ax.legend(fontsize=8)
    return _save(fig, plt, path)


def _frange(start: float, stop: float, step: float) -> list[float]:
    out, x = [], start
    while x < stop:
        out.append(x)
        x += step
    return out


def _save(fig, plt, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
    return path
