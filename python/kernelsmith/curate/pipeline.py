"""``kernelsmith curate``: from a tree of repositories to KernelBench-format tasks.

Stages (counts of each go to the report): walk files -> parse -> module
classes -> self-contained (intra-file dependencies inlined) -> exact-unique
(normalized AST hash) -> inputs guessed -> runnable (sandboxed execution
filter, outputs finite, deterministic and input-dependent) -> near-unique
(MinHash LSH in the C++ core) -> structurally unique (hash of the traced
operator sequence) -> families (HDBSCAN), medoids, difficulty -> files.
"""
from __future__ import annotations

import json
import re
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from .extract import Extracted, extract_file, normalized_ast_hash, normalized_text
from .inputs import GuessError, InputVariant, guess_inputs
from .runner import RunnerConfig, run_checks
from .walk import WalkStats, repo_module_names, walk

INDEX_SCHEMA_VERSION = 1
LLM_RETRY_STATUSES = {"no_inputs", "init_error", "forward_error", "no_tensor_output"}


@dataclass
class CurateConfig:
    skip_tests: bool = True  # skip test folders and test_*.py files
    max_file_kb: int = 512  # larger files are skipped (generated code, data)
    near_threshold: float = 0.8  # estimated Jaccard over token 5-shingles for a near-duplicate
    num_perm: int = 128
    bands: int = 32
    shingle: int = 5
    structural: bool = True  # drop modules whose traced operator sequence was seen
    min_cluster_size: int = 2
    layout: str = "families"  # "families": tasks/<family>/<name>.py; "flat": tasks/<name>.py
    format: str = "jsonl"  # index format: "jsonl" or "parquet"
    seed: Optional[int] = 0  # random input seeds of the execution filter (None: fresh)
    max_variants: int = 6  # heuristic input variants tried per module
    model: Optional[str] = None  # LLM for inputs the heuristics could not provide ("openai:NAME")
    llm_base_url: Optional[str] = None
    llm_api_key_env: Optional[str] = None
    llm_max_modules: int = 200
    runner: RunnerConfig = field(default_factory=RunnerConfig)

    def validate(self) -> None:
        if self.layout not in ("families", "flat"):
            raise ValueError(f"layout must be 'families' or 'flat', got {self.layout!r}")
        if self.format not in ("jsonl", "parquet"):
            raise ValueError(f"format must be 'jsonl' or 'parquet', got {self.format!r}")
        if not 0.0 < self.near_threshold <= 1.0:
            raise ValueError(f"near_threshold must be in (0, 1], got {self.near_threshold}")
        if self.bands <= 0 or self.num_perm % self.bands:
            raise ValueError(f"bands ({self.bands}) must divide num_perm ({self.num_perm})")


@dataclass
class Report:
    stages: list[tuple[str, int]] = field(default_factory=list)
    dropped: dict[str, Counter] = field(default_factory=dict)  # stage -> reason -> count
    elapsed_s: float = 0.0
    isolation: str = ""

    def add(self, stage: str, count: int) -> None:
        self.stages.append((stage, count))

    def drop(self, stage: str, reason: str, n: int = 1) -> None:
        self.dropped.setdefault(stage, Counter())[reason] += n

    def count(self, stage: str) -> int:
        return dict(self.stages)[stage]

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": INDEX_SCHEMA_VERSION, "stages": [{"stage": s, "count": c} for s, c in self.stages],
                "counts": dict(self.stages), "dropped": {k: dict(v) for k, v in self.dropped.items()},
                "elapsed_s": round(self.elapsed_s, 3), "isolation": self.isolation}

    def table(self) -> str:
        w = max(len(s) for s, _ in self.stages) if self.stages else 5
        lines = [f"{'stage':<{w}}  {'count':>7}", "-" * (w + 9)]
        lines += [f"{s:<{w}}  {c:>7}" for s, c in self.stages]
        for stage, reasons in self.dropped.items():
            lines.append(f"dropped at {stage}: " + ", ".join(f"{r}={n}" for r, n in sorted(reasons.items())))
        return "\n".join(lines)


@dataclass
class Candidate:
    ex: Extracted
    key: str
    ast_hash: str = ""
    variants: list[InputVariant] = field(default_factory=list)
    inputs_source: str = "heuristic"
    verdict: dict[str, Any] = field(default_factory=dict)
    exact_duplicates: list[str] = field(default_factory=list)
    near_duplicates: list[str] = field(default_factory=list)
    structural_duplicates: list[str] = field(default_factory=list)


def _safe(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]+", "_", s).strip("_") or "x"


def _prov(c: Candidate) -> str:
    return f"{c.ex.repo}/{c.ex.path}:{c.ex.line} {c.ex.class_name}"


def curate(src: Path, out: Path, cfg: Optional[CurateConfig] = None,
           log: Callable[[str], None] = lambda s: None) -> Report:
    cfg = cfg or CurateConfig()
    cfg.validate()
    started = time.monotonic()
    src, out = Path(src), Path(out)
    rep = Report()
    dropped_rows: list[dict[str, Any]] = []

    def dropped(c: Candidate, stage: str, reason: str, detail: str) -> None:
        rep.drop(stage, reason)
        dropped_rows.append({"stage": stage, "reason": reason, "detail": detail, "repo": c.ex.repo,
                             "path": c.ex.path, "class_name": c.ex.class_name, "line": c.ex.line})

    # 1. walk and extract
    wstats = WalkStats()
    repo_names: dict[str, frozenset[str]] = {}
    cands: list[Candidate] = []
    n_classes = 0
    for f in walk(src, skip_tests=cfg.skip_tests, max_file_kb=cfg.max_file_kb, stats=wstats):
        if f.repo not in repo_names:
            root = src / f.repo if f.repo != "." else src
            repo_names[f.repo] = frozenset(repo_module_names(root)) if f.repo != "." else frozenset()
        exs, err = extract_file(f.text, f.repo, f.path, repo_names[f.repo])
        if err:
            rep.drop("parse", "syntax_error")
            continue
        for ex in exs:
            n_classes += 1
            c = Candidate(ex=ex, key=f"{len(cands)}")
            cands.append(c)
    rep.add("files", wstats.files)
    rep.add("module_classes", n_classes)
    kept = []
    for c in cands:
        if c.ex.ok:
            kept.append(c)
        else:
            dropped(c, "self_contained", c.ex.status, c.ex.detail)
    rep.add("self_contained", len(kept))
    log(f"{wstats.files} files, {n_classes} module classes, {len(kept)} self-contained")

    # 2. exact duplicates (normalized AST hash), before paying for any execution
    by_hash: dict[str, Candidate] = {}
    uniq = []
    for c in kept:
        c.ast_hash = normalized_ast_hash(c.ex.source)
        first = by_hash.get(c.ast_hash)
        if first is not None:
            first.exact_duplicates.append(_prov(c))
            dropped(c, "exact_dedupe", "exact_duplicate", f"same normalized AST as {_prov(first)}")
            continue
        by_hash[c.ast_hash] = c
        uniq.append(c)
    rep.add("exact_unique", len(uniq))

    # 3. inputs
    with_inputs, no_inputs = [], []
    for c in uniq:
        try:
            c.variants = guess_inputs(c.ex.source, cfg.max_variants)
            with_inputs.append(c)
        except (GuessError, SyntaxError, RecursionError) as exc:
            c.verdict = {"status": "no_inputs", "detail": str(exc)}
            no_inputs.append(c)

    # 4. execution filter (sandboxed workers); LLM inputs for what the heuristics could not run
    items = [{"id": c.key, "source": c.ex.source, "variants": [v.render() for v in c.variants]} for c in with_inputs]
    log(f"checking {len(items)} modules in sandboxed workers")
    verdicts = run_checks(items, cfg.runner, seed=cfg.seed)
    for c in with_inputs:
        c.verdict = verdicts.get(c.key, {"status": "crash", "detail": "no verdict"})
    if cfg.model:
        retry = [c for c in uniq if c.verdict.get("status") in LLM_RETRY_STATUSES][: cfg.llm_max_modules]
        if retry:
            from .llm_inputs import ask_inputs

            log(f"asking {cfg.model} for inputs of {len(retry)} modules")
            answers = ask_inputs(cfg.model, [(c.key, c.ex.source, c.verdict.get("detail", "")) for c in retry],
                                 base_url=cfg.llm_base_url, api_key_env=cfg.llm_api_key_env)
            items = [{"id": c.key, "source": c.ex.source, "variants": [answers[c.key]]} for c in retry if answers.get(c.key)]
            rep.add("llm_inputs_proposed", len(items))
            if items:
                verdicts = run_checks(items, cfg.runner, seed=cfg.seed)
                for c in retry:
                    v = verdicts.get(c.key)
                    if v is not None and v.get("status") == "ok":
                        c.verdict, c.inputs_source = v, "llm"
                        c.variants = [InputVariant([], [], note="llm")]
                        c.llm_code = answers[c.key]  # type: ignore[attr-defined]
    runnable = []
    for c in uniq:
        if c.verdict.get("status") == "ok":
            runnable.append(c)
        else:
            dropped(c, "execution", str(c.verdict.get("status")), str(c.verdict.get("detail", "")))
    rep.add("runnable", len(runnable))

    # 5. near duplicates (MinHash LSH in the C++ core)
    from .. import _core

    lsh = _core.MinHashLSH(num_perm=cfg.num_perm, bands=cfg.bands, shingle=cfg.shingle,
                           seed=1, threshold=cfg.near_threshold)
    lsh.add_many([normalized_text(c.ex.source) for c in runnable])
    groups = lsh.groups() if runnable else []
    near_unique = []
    for i, c in enumerate(runnable):
        g = groups[i]
        if g != i:
            rep_c = runnable[g]
            rep_c.near_duplicates.append(_prov(c))
            dropped(c, "near_dedupe", "near_duplicate", f"MinHash near-duplicate of {_prov(rep_c)} "
                    f"(estimated Jaccard {lsh.estimate(g, i):.2f})")
        else:
            near_unique.append(c)
    rep.add("near_unique", len(near_unique))

    # 6. structural duplicates (traced operator sequence)
    final = []
    seen_graph: dict[str, Candidate] = {}
    for c in near_unique:
        h = c.verdict.get("op_graph_hash")
        if cfg.structural and h and h in seen_graph:
            seen_graph[h].structural_duplicates.append(_prov(c))
            dropped(c, "structural_dedupe", "structural_duplicate", f"same operator graph as {_prov(seen_graph[h])}")
            continue
        if h:
            seen_graph.setdefault(h, c)
        final.append(c)
    rep.add("structural_unique", len(final))

    # 7. families, medoids, difficulty; files and index
    from .families import cluster, difficulty, family_names, feature_matrix, medoids

    recs = [c.verdict for c in final]
    x, _ = feature_matrix(recs)
    labels = cluster(x, cfg.min_cluster_size) if len(final) else []
    meds = medoids(x, labels) if len(final) else {}
    fam = family_names(recs, labels) if len(final) else {}
    rep.add("clusters", len(meds))
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    used: set[str] = set()
    for i, c in enumerate(final):
        lab = int(labels[i])
        family = fam[lab]
        base = f"{_safe(c.ex.repo)}__{_safe(c.ex.class_name)}"
        name, k = base, 1
        while name in used:
            k += 1
            name = f"{base}_{k}"
        used.add(name)
        rel = Path("tasks") / family / f"{name}.py" if cfg.layout == "families" else Path("tasks") / f"{name}.py"
        v = c.verdict
        if c.inputs_source == "llm":
            inputs_code = getattr(c, "llm_code")
            variant = None
        else:
            variant = c.variants[int(v.get("variant", 0))]
            inputs_code = variant.render()
        text = (f"# Curated by kernelsmith from {c.ex.repo}/{c.ex.path}:{c.ex.line} (class {c.ex.class_name})\n"
                + c.ex.source + "\n\n" + inputs_code)
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
        rows.append({
            "schema_version": INDEX_SCHEMA_VERSION, "name": name, "task_path": rel.as_posix(), "family": family,
            "cluster": lab, "is_medoid": meds.get(lab) == i, "difficulty": difficulty(v),
            "repo": c.ex.repo, "path": c.ex.path, "class_name": c.ex.class_name, "line": c.ex.line,
            "inlined": c.ex.inlined, "ast_hash": c.ast_hash, "op_graph_hash": v.get("op_graph_hash"),
            "trace": v.get("trace"), "inputs_source": c.inputs_source,
            "init_args": variant.init_args if variant else None, "inputs": variant.inputs if variant else None,
            "output_shapes": v.get("output_shapes"), "params": v.get("params"), "compute_ops": v.get("compute_ops"),
            "leaf_modules": v.get("leaf_modules"), "custom_submodules": v.get("custom_submodules"),
            "depth": v.get("depth"), "forward_ms_cpu": v.get("forward_ms"), "ops": v.get("ops"),
            "exact_duplicates": c.exact_duplicates, "near_duplicates": c.near_duplicates,
            "structural_duplicates": c.structural_duplicates,
        })
    write_index(out, rows, cfg.format)
    with open(out / "dropped.jsonl", "w") as fh:
        for r in dropped_rows:
            fh.write(json.dumps(r) + "\n")
    rep.add("tasks", len(rows))
    from ..evaluator.sandbox import bwrap_status

    use_bwrap, note = bwrap_status()
    rep.isolation = ("bwrap" if use_bwrap and cfg.runner.isolation != "process" else "process")
    rep.elapsed_s = time.monotonic() - started
    report = rep.to_dict()
    report["config"] = {k: v for k, v in asdict(cfg).items() if k != "runner"} | {"runner": asdict(cfg.runner)}
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    return rep


def write_index(out: Path, rows: list[dict[str, Any]], fmt: str) -> Path:
    if fmt == "jsonl":
        path = out / "index.jsonl"
        with open(path, "w") as fh:
            for r in rows:
                fh.write(json.dumps(r) + "\n")
        return path
    import pyarrow as pa
    import pyarrow.parquet as pq

    # nested dicts with varying keys (op histograms) go in as JSON strings: one stable schema
    flat = [{k: (json.dumps(v) if isinstance(v, dict) else v) for k, v in r.items()} for r in rows]
    path = out / "index.parquet"
    pq.write_table(pa.Table.from_pylist(flat), path)
    return path


def read_index(out: Path) -> list[dict[str, Any]]:
    out = Path(out)
    if (out / "index.jsonl").exists():
        return [json.loads(l) for l in (out / "index.jsonl").read_text().splitlines() if l.strip()]
    import pyarrow.parquet as pq

    rows = pq.read_table(out / "index.parquet").to_pylist()
    for r in rows:
        for k in ("leaf_modules", "ops"):
            if isinstance(r.get(k), str):
                r[k] = json.loads(r[k])
    return rows
