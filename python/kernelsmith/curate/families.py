"""Families (HDBSCAN over operator and size features), medoids and difficulty.

Features per module: the share of each operator among the traced aten calls
(over the operators seen in the whole corpus), plus log-scaled size features
(parameters, compute operator calls, leaf layers, custom submodules, nesting
depth). Clusters come from :class:`sklearn.cluster.HDBSCAN`; a cluster's
representative is its medoid (the member with the smallest summed distance to
the others). Modules HDBSCAN leaves as noise form the family ``unclustered``.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Sequence

import numpy as np

from .worker import VIEW_OPS


def difficulty(rec: dict[str, Any]) -> str:
    """KernelBench-style level from the traced operator graph and the module tree.

    * level1 (single operator): one kind of compute operator in the graph
      (``addmm``, ``convolution``, ``silu``, ``_softmax``, ``gru``...), called
      at most twice, no custom submodule;
    * level3 (a block or a whole model): >= 2 custom submodules, nesting depth
      >= 3, >= 8 leaf layers, or >= 40 compute operator calls;
    * level2 (a fusion of a few operators): everything in between.
    """
    ops = {k: v for k, v in (rec.get("ops") or {}).items() if k not in VIEW_OPS}
    kinds = len(ops)
    leaf = sum((rec.get("leaf_modules") or {}).values())
    custom = int(rec.get("custom_submodules") or 0)
    depth = int(rec.get("depth") or 0)
    compute = int(rec.get("compute_ops") or sum(ops.values()))
    if custom >= 2 or depth >= 3 or leaf >= 8 or compute >= 40:
        return "level3"
    if kinds <= 1 and compute <= 2 and custom == 0:
        return "level1"
    return "level2"


def feature_matrix(recs: Sequence[dict[str, Any]]) -> tuple[np.ndarray, list[str]]:
    vocab = sorted({op for r in recs for op in (r.get("ops") or {}) if op not in VIEW_OPS})
    col = {op: i for i, op in enumerate(vocab)}
    x = np.zeros((len(recs), len(vocab) + 5), dtype=np.float64)
    for i, r in enumerate(recs):
        ops = {k: v for k, v in (r.get("ops") or {}).items() if k in col}
        total = sum(ops.values()) or 1
        for k, v in ops.items():
            x[i, col[k]] = 2.0 * v / total  # composition weighs more than size
        x[i, len(vocab) :] = [
            math.log1p(r.get("params") or 0) / 10.0,
            math.log1p(r.get("compute_ops") or 0) / 3.0,
            math.log1p(sum((r.get("leaf_modules") or {}).values())) / 2.0,
            math.log1p(r.get("custom_submodules") or 0) / 2.0,
            (r.get("depth") or 0) / 4.0,
        ]
    return x, vocab


def cluster(x: np.ndarray, min_cluster_size: int = 2) -> np.ndarray:
    """HDBSCAN labels (-1: noise); everything is noise when there are too few points."""
    n = x.shape[0]
    if n < max(2, min_cluster_size) + 1:
        return np.full(n, -1, dtype=int)
    from sklearn.cluster import HDBSCAN

    return HDBSCAN(min_cluster_size=max(2, min_cluster_size), min_samples=1, copy=True).fit_predict(x).astype(int)


def medoids(x: np.ndarray, labels: np.ndarray) -> dict[int, int]:
    out: dict[int, int] = {}
    for lab in sorted(set(labels.tolist()) - {-1}):
        idx = np.flatnonzero(labels == lab)
        pts = x[idx]
        d = np.sqrt(((pts[:, None, :] - pts[None, :, :]) ** 2).sum(-1)).sum(1)
        out[lab] = int(idx[int(np.argmin(d))])
    return out


def family_names(recs: Sequence[dict[str, Any]], labels: np.ndarray) -> dict[int, str]:
    """Cluster label -> folder-safe name: the label and the cluster's dominant compute operator."""
    names: dict[int, str] = {}
    for lab in sorted(set(labels.tolist())):
        if lab == -1:
            names[lab] = "unclustered"
            continue
        ops: Counter[str] = Counter()
        for r, l in zip(recs, labels):
            if l == lab:
                ops.update({k: v for k, v in (r.get("ops") or {}).items() if k not in VIEW_OPS})
        top = ops.most_common(1)[0][0] if ops else "misc"
        names[lab] = f"f{lab:03d}_{''.join(c if c.isalnum() else '_' for c in top)}"
    return names
