"""``kernelsmith curate``: from a tree of repositories to KernelBench-format tasks.

Stages (counts of each go to the report): walk files -> parse -> module
classes (bases resolved across the package) -> self-contained (same-file
dependencies inlined, the mined package's own imports taken from the installed
package when allowed) -> exact-unique (normalized AST hash) -> inputs (config
objects from the package's config classes, shapes per size class) -> runnable
(each candidate task file imported as a plain module in a sandboxed worker;
degenerate modules dropped) -> near-unique (MinHash proposes, behaviour
confirms) -> structurally unique (operator graph or outputs on shared probe
inputs) -> families (HDBSCAN), medoids, difficulty -> task directories.

Verdicts are appended to ``OUT_DIR/work/verdicts.jsonl`` as they arrive; a
rerun with the same settings only checks what is not there yet.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from .extract import Extracted, canonical_hash, extract_file, normalized_text
from .inputs import SIZE_CLASSES, InputVariant
from .resolve import PackageIndex, module_name_of
from .runner import RunnerConfig, run_checks
from .walk import WalkStats, repo_module_names, walk
from .llm_inputs import ask_inputs
from .. import _core
from .families import cluster, difficulty, family_names, feature_matrix, medoids
from ..evaluator.sandbox import bwrap_status

INDEX_SCHEMA_VERSION = 2
LLM_RETRY_STATUSES = {"no_inputs", "init_error", "forward_error", "no_tensor_output"}
# bytes moved (inputs + outputs + parameters) that separate the size classes
SIZE_BOUNDS = {"small": 4 << 20, "medium": 256 << 20}


def size_class_of(nbytes: int) -> str:
    if nbytes < SIZE_BOUNDS["small"]:
        return "small"
    return "medium" if nbytes < SIZE_BOUNDS["medium"] else "large"


@dataclass
class CurateConfig:
    skip_tests: bool = True  # skip test folders and test_*.py files
    max_file_kb: int = 512  # larger files are skipped (generated code, data)
    near_threshold: float = 0.8  # estimated Jaccard over token 5-shingles that proposes a near-duplicate
    num_perm: int = 128
    bands: int = 32
    shingle: int = 5
    structural: bool = True  # drop modules whose operator graph or probe outputs were seen
    min_cluster_size: int = 2
    layout: str = "families"  # "families": tasks/<family>/<name>/; "flat": tasks/<name>/
    format: str = "jsonl"  # index format: "jsonl" or "parquet"
    seed: Optional[int] = 0  # random input seeds of the execution filter (None: fresh)
    max_variants: int = 6  # heuristic input variants tried per module
    max_repairs: int = 4  # variants repaired from a forward's shape error, per module (0: none)
    size: str = "medium"  # size class of get_inputs(); the others become get_inputs_<class>()
    # packages whose own modules a task may import from the installed package
    # (torch always); others' cross-file imports drop the class
    allow_import: list[str] = field(default_factory=list)
    follow_symlinks: bool = True  # follow symlinked folders and files (loops are detected)
    max_files: Optional[int] = None  # stop walking after this many files
    max_modules: Optional[int] = None  # stop extracting after this many module classes
    time_limit_s: Optional[float] = None  # stop starting new checks after this long (the rest: time_limit)
    resume: bool = True  # reuse verdicts already in OUT_DIR/work/verdicts.jsonl
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
        if self.size not in SIZE_CLASSES:
            raise ValueError(f"size must be one of {', '.join(SIZE_CLASSES)}, got {self.size!r}")
        if not 0.0 < self.near_threshold <= 1.0:
            raise ValueError(f"near_threshold must be in (0, 1], got {self.near_threshold}")
        if self.bands <= 0 or self.num_perm % self.bands:
            raise ValueError(f"bands ({self.bands}) must divide num_perm ({self.num_perm})")
        for key in ("max_files", "max_modules"):
            v = getattr(self, key)
            if v is not None and v < 1:
                raise ValueError(f"{key} must be >= 1, got {v}")
        if self.time_limit_s is not None and self.time_limit_s <= 0:
            raise ValueError(f"time_limit_s must be > 0, got {self.time_limit_s}")
        if self.runner.jobs < 1:
            raise ValueError(f"jobs must be >= 1, got {self.runner.jobs}")


# extraction in forked processes: what each needs, set before the fork
_EXTRACT_STATE: dict[str, Any] = {}
PARALLEL_EXTRACT_MIN_FILES = 200  # smaller trees: one process (no fork, the same order of parsing)
EXTRACT_CHUNK = 40  # consecutive files per task (a model folder's files share parsed imports)


def _extract_range(bounds: tuple[int, int]) -> list[tuple[list[Extracted], Optional[str]]]:
    st = _EXTRACT_STATE
    out = []
    for i in range(*bounds):
        f, (modname, is_pkg) = st["files"][i], st["mods"][i]
        out.append(
            extract_file(
                f.text,
                f.repo,
                f.path,
                st["repo_names"][f.repo],
                modname=modname,
                is_pkg=is_pkg,
                index=st["index"],
                allowed=st["allowed"],
                mined=st["mined"],
            )
        )
    return out


def _extract_all(state: dict[str, Any], cfg: "CurateConfig"):
    """(extracted classes, parse error) per file, in file order: in this
    process for small trees or with --max-modules (it stops early), otherwise
    split over ``jobs`` forked processes (extraction is pure-Python AST work;
    each process parses the imports its files need)."""
    n = len(state["files"])
    jobs = max(1, cfg.runner.jobs)
    _EXTRACT_STATE.clear()
    _EXTRACT_STATE.update(state)
    if jobs == 1 or n < PARALLEL_EXTRACT_MIN_FILES or cfg.max_modules is not None:
        for i in range(n):
            yield _extract_range((i, i + 1))[0]
        return
    import multiprocessing as mp

    chunks = [(lo, min(n, lo + EXTRACT_CHUNK)) for lo in range(0, n, EXTRACT_CHUNK)]
    try:
        ctx = mp.get_context("fork")
    except ValueError:  # no fork here: one process
        for i in range(n):
            yield _extract_range((i, i + 1))[0]
        return
    with ctx.Pool(jobs) as pool:
        for part in pool.imap(_extract_range, chunks):
            yield from part
    _EXTRACT_STATE.clear()


@dataclass
class Report:
    stages: list[tuple[str, int]] = field(default_factory=list)
    dropped: dict[str, Counter] = field(default_factory=dict)  # stage -> reason -> count
    elapsed_s: float = 0.0
    stage_s: dict[str, float] = field(default_factory=dict)
    isolation: str = ""

    def add(self, stage: str, count: int) -> None:
        self.stages.append((stage, count))

    def drop(self, stage: str, reason: str, n: int = 1) -> None:
        self.dropped.setdefault(stage, Counter())[reason] += n

    def count(self, stage: str) -> int:
        return dict(self.stages)[stage]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": INDEX_SCHEMA_VERSION,
            "stages": [{"stage": s, "count": c} for s, c in self.stages],
            "counts": dict(self.stages),
            "dropped": {k: dict(v) for k, v in self.dropped.items()},
            "elapsed_s": round(self.elapsed_s, 3),
            "stage_s": {k: round(v, 2) for k, v in self.stage_s.items()},
            "isolation": self.isolation,
        }

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
    texts: list[str] = field(default_factory=list)  # the task file of each variant
    inputs_source: str = "heuristic"
    verdict: dict[str, Any] = field(default_factory=dict)
    exact_duplicates: list[str] = field(default_factory=list)
    near_duplicates: list[str] = field(default_factory=list)
    structural_duplicates: list[str] = field(default_factory=list)
    llm_code: Optional[str] = None


def _safe(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]+", "_", s).strip("_") or "x"


def _prov(c: Candidate) -> str:
    return f"{c.ex.repo}/{c.ex.path}:{c.ex.line} {c.ex.class_name}"


def task_text(c: Candidate, inputs_code: str) -> str:
    """The reference file exactly as it is checked and written."""
    return (
        f"# Curated by kernelsmith from {c.ex.repo}/{c.ex.path}:{c.ex.line} (class {c.ex.class_name})\n"
        + c.ex.source
        + "\n\n"
        + inputs_code
    )


class Progress:
    """One status line on stderr: redrawn in place on a terminal, printed every
    ``every_s`` seconds otherwise (logs, CI)."""

    def __init__(self, total: int, enabled: bool, every_s: float = 10.0) -> None:
        self.total, self.enabled, self.every_s = total, enabled, every_s
        self.tty = enabled and sys.stderr.isatty()
        self.started = time.monotonic()
        self.last = 0.0
        self.done = 0
        self.status: Counter = Counter()

    def update(self, verdict: dict[str, Any]) -> None:
        self.done += 1
        self.status[str(verdict.get("status"))] += 1
        now = time.monotonic()
        if self.enabled and (self.tty or now - self.last >= self.every_s or self.done == self.total):
            self.last = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        el = now - self.started
        rate = self.done / el if el > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else 0.0
        width = 24
        filled = int(width * self.done / max(1, self.total))
        drops = ", ".join(f"{k} {v}" for k, v in self.status.most_common() if k != "ok")[:120]
        line = (
            f"[{'#' * filled}{'.' * (width - filled)}] runnable: checked {self.done}/{self.total} | "
            f"ok {self.status.get('ok', 0)} | {drops} | {rate:.1f}/s | eta {eta / 60:.1f} min"
        )
        if self.tty:
            sys.stderr.write("\r" + line[:200].ljust(200))
            if self.done == self.total:
                sys.stderr.write("\n")
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def curate(
    src: Path,
    out: Path,
    cfg: Optional[CurateConfig] = None,
    log: Callable[[str], None] = lambda s: None,
    progress: bool = False,
) -> Report:
    cfg = cfg or CurateConfig()
    cfg.validate()
    started = time.monotonic()
    src, out = Path(src), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    work.mkdir(exist_ok=True)
    rep = Report()
    dropped_rows: list[dict[str, Any]] = []
    t_stage = time.monotonic()

    def lap(name: str) -> None:
        nonlocal t_stage
        now = time.monotonic()
        rep.stage_s[name] = now - t_stage
        t_stage = now

    def dropped(c: Candidate, stage: str, reason: str, detail: str) -> None:
        rep.drop(stage, reason)
        dropped_rows.append(
            {
                "stage": stage,
                "reason": reason,
                "detail": detail,
                "repo": c.ex.repo,
                "path": c.ex.path,
                "class_name": c.ex.class_name,
                "line": c.ex.line,
            }
        )

    def dropped_file(stage: str, reason: str, detail: str, repo: str, path: str) -> None:
        rep.drop(stage, reason)
        dropped_rows.append(
            {
                "stage": stage,
                "reason": reason,
                "detail": detail,
                "repo": repo,
                "path": path,
                "class_name": None,
                "line": None,
            }
        )

    # 1. walk, resolve packages, extract
    allowed = frozenset({"torch", *cfg.allow_import})
    wstats = WalkStats()
    files = list(
        walk(
            src,
            skip_tests=cfg.skip_tests,
            max_file_kb=cfg.max_file_kb,
            stats=wstats,
            follow_symlinks=cfg.follow_symlinks,
            max_files=cfg.max_files,
        )
    )
    for sk in wstats.skipped:
        dropped_file("files", sk["reason"], sk["detail"], sk["repo"], sk["path"])
    index = PackageIndex()
    mods: list[tuple[str, bool]] = []
    for f in files:
        modname, is_pkg = module_name_of(f.abs_path)
        if modname and "." in modname or (modname and is_pkg):
            parts = modname.split(".")
            root = f.abs_path.parents[len(parts) - (0 if is_pkg else 1)]
            index.add_root(parts[0], root)
        else:
            modname = "__curate__." + _safe(f"{f.repo}/{f.path}")
        mods.append((modname, is_pkg))
    mined = frozenset(r for r in index.roots)
    repo_names: dict[str, frozenset[str]] = {}
    for f in files:
        if f.repo not in repo_names:
            root = src / f.repo if f.repo != "." else src
            repo_names[f.repo] = frozenset(repo_module_names(root)) if f.repo != "." else frozenset()
    cands: list[Candidate] = []
    n_classes = 0
    state = {"files": files, "mods": mods, "repo_names": repo_names, "index": index, "allowed": allowed, "mined": mined}
    for f, (exs, err) in zip(files, _extract_all(state, cfg)):
        if cfg.max_modules is not None and n_classes >= cfg.max_modules:
            break
        if err:
            dropped_file("parse", "syntax_error", err, f.repo, f.path)
            continue
        for ex in exs:
            if cfg.max_modules is not None and n_classes >= cfg.max_modules:
                break
            n_classes += 1
            cands.append(Candidate(ex=ex, key=f"{len(cands)}"))
    rep.add("files", wstats.files)
    rep.add("module_classes", n_classes)
    kept = []
    for c in cands:
        if c.ex.ok:
            kept.append(c)
        else:
            dropped(c, "self_contained", c.ex.status, c.ex.detail)
    rep.add("self_contained", len(kept))
    lap("extract")
    log(
        f"{wstats.files} files, {n_classes} module classes, {len(kept)} self-contained ({rep.stage_s['extract']:.0f} s)"
    )

    # 2. exact duplicates (normalized AST hash), before paying for any execution
    by_hash: dict[str, Candidate] = {}
    uniq = []
    for c in kept:
        c.ast_hash = hashlib.sha256(c.ex.normalized.encode()).hexdigest()[:16]
        first = by_hash.get(c.ast_hash)
        if first is not None:
            first.exact_duplicates.append(_prov(c))
            dropped(c, "exact_dedupe", "exact_duplicate", f"same normalized AST as {_prov(first)}")
            continue
        by_hash[c.ast_hash] = c
        uniq.append(c)
    rep.add("exact_unique", len(uniq))

    # 2b. copies under other names ("Copied from ... with Llama->Mistral"): the
    #     same program once the names it defines or imports from the mined
    #     package are placeholders, and the same config defaults read
    by_canon: dict[str, Candidate] = {}
    canon_uniq = []
    for c in uniq:
        h = _canonical(c)
        first = by_canon.get(h)
        if first is not None and cfg.structural:
            first.exact_duplicates.append(_prov(c))
            dropped(c, "exact_dedupe", "renamed_copy", f"the same program as {_prov(first)} up to names")
            continue
        by_canon.setdefault(h, c)
        canon_uniq.append(c)
    uniq = canon_uniq
    rep.add("renamed_unique", len(uniq))

    # 3. inputs: each variant is a complete task file, checked exactly as written
    with_inputs = []
    for c in uniq:
        if c.ex.inputs_error or not c.ex.variants:
            c.verdict = {"status": "no_inputs", "detail": c.ex.inputs_error or "no input variant"}
            continue
        c.variants = list(c.ex.variants)[: cfg.max_variants]
        c.texts = [task_text(c, v.render(cfg.size)) for v in c.variants]
        c.key = hashlib.sha256("\0".join(c.texts).encode()).hexdigest()[:20]
        with_inputs.append(c)
    lap("inputs")

    # 4. execution filter (sandboxed warm workers), resumable
    verdict_path = work / "verdicts.jsonl"
    known: dict[str, dict[str, Any]] = {}
    if cfg.resume and verdict_path.exists():
        for line in verdict_path.read_text().splitlines():
            try:
                r = json.loads(line)
                known[r["key"]] = r["verdict"]
            except (ValueError, KeyError, TypeError):
                continue  # a line cut short by a kill
    elif verdict_path.exists():
        verdict_path.unlink()
    todo = [c for c in with_inputs if c.key not in known]
    log(f"checking {len(todo)} modules in sandboxed workers ({len(with_inputs) - len(todo)} verdicts reused)")
    bar = Progress(len(with_inputs), progress)
    for c in with_inputs:
        if c.key in known:
            bar.update(known[c.key])
    deadline = started + cfg.time_limit_s if cfg.time_limit_s else None
    with open(verdict_path, "a") as vf:

        def on_result(key: str, verdict: dict[str, Any]) -> None:
            vf.write(json.dumps({"key": key, "verdict": verdict}) + "\n")
            vf.flush()
            bar.update(verdict)

        runner_cfg = cfg.runner
        if cfg.allow_import and not runner_cfg.preload:
            runner_cfg = RunnerConfig(**{**asdict(runner_cfg), "preload": sorted(cfg.allow_import)})
        verdicts = run_checks(
            [
                {
                    "id": c.key,
                    "variants": c.texts,
                    "same_init": all(v.init_args == c.variants[0].init_args for v in c.variants),
                    "specs": [v.to_dict() for v in c.variants],
                    "size": cfg.size,
                    "max_repairs": cfg.max_repairs,
                }
                for c in todo
            ],
            runner_cfg,
            seed=cfg.seed,
            on_result=on_result,
            should_stop=(lambda: time.monotonic() > deadline) if deadline else (lambda: False),
        )
    known.update(verdicts)
    for c in with_inputs:
        c.verdict = known.get(c.key) or {"status": "time_limit", "detail": "not checked before --time-limit"}
        _adopt_repair(c, cfg.size)
    lap("execute")
    if cfg.model:
        retry = [c for c in uniq if c.verdict.get("status") in LLM_RETRY_STATUSES][: cfg.llm_max_modules]
        if retry:
            log(f"asking {cfg.model} for inputs of {len(retry)} modules")
            answers = ask_inputs(
                cfg.model,
                [(c.key, c.ex.source, c.verdict.get("detail", "")) for c in retry],
                base_url=cfg.llm_base_url,
                api_key_env=cfg.llm_api_key_env,
            )
            items = [
                {"id": c.key, "variants": [task_text(c, answers[c.key] or "")]} for c in retry if answers.get(c.key)
            ]
            rep.add("llm_inputs_proposed", len(items))
            if items:
                verdicts = run_checks(items, cfg.runner, seed=cfg.seed)
                for c in retry:
                    v = verdicts.get(c.key)
                    if v is not None and v.get("status") == "ok":
                        c.verdict, c.inputs_source = v, "llm"
                        c.llm_code = answers[c.key]
                        c.texts = [task_text(c, c.llm_code or "")]
                        c.variants = [InputVariant([], [], note="llm")]
    runnable = []
    for c in uniq:
        if c.verdict.get("status") == "ok":
            runnable.append(c)
        else:
            dropped(c, "execution", str(c.verdict.get("status")), str(c.verdict.get("detail", "")))
    rep.add("runnable", len(runnable))
    log(f"{len(runnable)} runnable ({rep.stage_s['execute']:.0f} s)")

    # 5. near duplicates: MinHash LSH (C++ core) proposes, the behaviour decides
    lsh = _core.MinHashLSH(
        num_perm=cfg.num_perm, bands=cfg.bands, shingle=cfg.shingle, seed=1, threshold=cfg.near_threshold
    )
    lsh.add_many([c.ex.normalized or normalized_text(c.ex.source) for c in runnable])
    near_unique = []
    kept_in_group: dict[int, list[int]] = {}
    groups = lsh.groups() if runnable else []
    for i, c in enumerate(runnable):
        g = groups[i]
        same = next((j for j in kept_in_group.get(g, []) if _same_behaviour(runnable[j], c)), None)
        if same is not None:
            rep_c = runnable[same]
            rep_c.near_duplicates.append(_prov(c))
            dropped(
                c,
                "near_dedupe",
                "near_duplicate",
                f"MinHash near-duplicate of {_prov(rep_c)} "
                f"(estimated Jaccard {lsh.estimate(same, i):.2f}) with the same operator graph or outputs",
            )
            continue
        kept_in_group.setdefault(g, []).append(i)
        near_unique.append(c)
    rep.add("near_unique", len(near_unique))

    # 6. structural duplicates anywhere: same operator graph (operators, shapes,
    #    non-float arguments) or the same outputs on the shared probe inputs
    final = []
    seen_graph: dict[str, Candidate] = {}
    seen_out: dict[str, Candidate] = {}
    for c in near_unique:
        h, fp = c.verdict.get("op_graph_hash"), c.verdict.get("fingerprint")
        first = seen_graph.get(h) if h else None
        first = first or (seen_out.get(fp) if fp else None)
        if cfg.structural and first is not None:
            first.structural_duplicates.append(_prov(c))
            how = "operator graph" if h and seen_graph.get(h) is first else "outputs on the probe inputs"
            dropped(c, "structural_dedupe", "structural_duplicate", f"same {how} as {_prov(first)}")
            continue
        if h:
            seen_graph.setdefault(h, c)
        if fp:
            seen_out.setdefault(fp, c)
        final.append(c)
    rep.add("structural_unique", len(final))
    lap("dedupe")

    # 7. families, medoids, difficulty; task directories and index
    recs = [c.verdict for c in final]
    x, _ = feature_matrix(recs)
    labels = cluster(x, cfg.min_cluster_size) if len(final) else []
    meds = medoids(x, labels) if len(final) else {}
    fam = family_names(recs, labels) if len(final) else {}
    rep.add("clusters", len(meds))
    rows = []
    used: set[str] = set()
    import yaml

    for i, c in enumerate(final):
        lab = int(labels[i])
        family = fam[lab]
        base = f"{_safe(c.ex.repo)}__{_safe(c.ex.class_name)}"
        name, k = base, 1
        while name in used:
            k += 1
            name = f"{base}_{k}"
        used.add(name)
        rel = Path("tasks") / family / name if cfg.layout == "families" else Path("tasks") / name
        v = c.verdict
        vi = int(v.get("variant", 0))
        variant = c.variants[vi] if c.inputs_source != "llm" else None
        text = c.texts[vi if variant else 0]
        level = difficulty(v)
        sizes = v.get("sizes") or {}
        default_bytes = (sizes.get("default") or {}).get("bytes")
        (out / rel).mkdir(parents=True, exist_ok=True)
        (out / rel / "reference.py").write_text(text)
        tcfg: dict[str, Any] = {
            "name": name,
            "difficulty": level,
            "description": f"{c.ex.class_name} from {c.ex.repo}/{c.ex.path}:{c.ex.line}",
        }
        if variant is not None:
            tcfg["extra_inputs"] = variant.extra_input_functions(cfg.size)
            other = timing_shape_for(cfg.size, sizes)
            if other is not None:
                # a second timing shape (docs/evaluator.md "Timing shapes"):
                # a kernel fast on one size only is not rewarded as fast
                tcfg["timing_shapes"] = ["get_inputs", f"get_inputs_{other}"]
        (out / rel / "task.yaml").write_text(yaml.safe_dump(tcfg, sort_keys=False))
        rows.append(
            {
                "schema_version": INDEX_SCHEMA_VERSION,
                "name": name,
                "task_path": rel.as_posix(),
                "family": family,
                "cluster": lab,
                "is_medoid": meds.get(lab) == i,
                "difficulty": level,
                "repo": c.ex.repo,
                "path": c.ex.path,
                "class_name": c.ex.class_name,
                "line": c.ex.line,
                "inlined": c.ex.inlined,
                "imports_from_package": c.ex.imported,
                "config_class": c.ex.config_class,
                "initialised": v.get("initialised") or [],
                "ast_hash": c.ast_hash,
                "op_graph_hash": v.get("op_graph_hash"),
                "fingerprint": v.get("fingerprint"),
                "trace": v.get("trace"),
                "inputs_source": c.inputs_source,
                "init_args": variant.init_args if variant else None,
                "inputs": variant.inputs_for(cfg.size) if variant else None,
                "size": cfg.size,
                "size_class": size_class_of(default_bytes) if default_bytes else None,
                "bytes_moved": {k: s.get("bytes") for k, s in sizes.items()},
                "size_checked": {k: s.get("ok") for k, s in sizes.items()},
                "output_shapes": v.get("output_shapes"),
                "params": v.get("params"),
                "compute_ops": v.get("compute_ops"),
                "leaf_modules": v.get("leaf_modules"),
                "custom_submodules": v.get("custom_submodules"),
                "depth": v.get("depth"),
                "forward_ms_cpu": v.get("forward_ms"),
                "ops": v.get("ops"),
                "exact_duplicates": c.exact_duplicates,
                "near_duplicates": c.near_duplicates,
                "structural_duplicates": c.structural_duplicates,
            }
        )
    write_index(out, rows, cfg.format)
    with open(out / "dropped.jsonl", "w") as fh:
        for r in dropped_rows:
            fh.write(json.dumps(r) + "\n")
    rep.add("tasks", len(rows))
    lap("write")

    use_bwrap, note = bwrap_status()
    rep.isolation = "bwrap" if use_bwrap and cfg.runner.isolation != "process" else "process"
    rep.elapsed_s = time.monotonic() - started
    report = rep.to_dict()
    report["config"] = {k: v for k, v in asdict(cfg).items() if k != "runner"} | {"runner": asdict(cfg.runner)}
    report["difficulty"] = dict(Counter(r["difficulty"] for r in rows))
    report["size_class"] = dict(Counter(str(r["size_class"]) for r in rows))
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    return rep


_CONFIG_READ = re.compile(r"\b(?:config|cfg)\.(\w+)")
_DEF = re.compile(
    r"^(?:class|def|async def)\s+(\w+)|^(\w+)\s*[:=]|^from\s+\S+\s+import\s+(\w+)(?:\s+as\s+(\w+))?"
    r"|^import\s+\S+\s+as\s+(\w+)",
    re.M,
)


def _adopt_repair(c: Candidate, size: str) -> None:
    """A verdict won by a variant the worker repaired from a forward error:
    that variant becomes the candidate's own, rendered exactly as checked."""
    rep = c.verdict.get("repaired")
    if c.verdict.get("status") != "ok" or not rep:
        return
    v = InputVariant.from_dict(rep)
    text = task_text(c, v.render(size))
    if hashlib.sha256(text.encode()).hexdigest()[:16] != c.verdict.get("text_sha"):
        c.verdict = {
            **c.verdict,
            "status": "harness_error",
            "detail": "the repaired inputs do not render to the file that was checked",
        }
        return
    c.variants.append(v)
    c.texts.append(text)
    if v.note == "repaired":
        c.inputs_source = "repaired"
    c.verdict = {**c.verdict, "variant": len(c.variants) - 1}


def _canonical(c: Candidate) -> str:
    names = {g for m in _DEF.finditer(c.ex.normalized) for g in m.groups() if g} - {"torch", "nn", "F", "math"}
    names |= set(c.ex.inlined)
    if c.ex.config_class:
        names.add(c.ex.config_class)
    read = set(_CONFIG_READ.findall(c.ex.normalized))
    defaults = {k: v for k, v in c.ex.config_fields.items() if k in read}
    return canonical_hash(c.ex.normalized, names, json.dumps(defaults, sort_keys=True, default=str))


def _same_behaviour(a: Candidate, b: Candidate) -> bool:
    ha, hb = a.verdict.get("op_graph_hash"), b.verdict.get("op_graph_hash")
    fa, fb = a.verdict.get("fingerprint"), b.verdict.get("fingerprint")
    return bool((ha and ha == hb) or (fa and fa == fb))


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


def timing_shape_for(size: str, sizes: dict[str, Any]) -> Optional[str]:
    """The size class timed next to ``get_inputs`` (``size``): the largest
    other class whose size check passed in the worker (``sizes``: the
    verdict's per-class records, ``small`` being the one the module ran on),
    or None where no other class passed."""
    passed = [c for c in SIZE_CLASSES if c != size and (sizes.get(c) or {}).get("ok") is True]
    return passed[-1] if passed else None
