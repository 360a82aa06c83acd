"""A deterministic stand-in for the evaluator, for tests of the loop itself.

It scores a candidate from its declared tunables without running it: the
loop's determinism, resume and fault handling do not depend on what a real
evaluator measures, only on getting the same verdict for the same source, so
these tests stay fast. End-to-end runs with the real sandboxed evaluator are
in test_evolve_e2e.py.

``standin_cli.py`` runs the real CLI with this evaluator, for tests that drive
``kernelsmith evolve`` as a process (and kill it).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from pathlib import Path


class CostModelEvaluator:
    """Verdicts from the tunables BLOCK and WARPS; no code is run.

    ``delay_s``: each evaluation takes this long (so a killed process dies
    with evaluations in flight). ``log``: a file that gets one JSON line per
    evaluation *started*, with ``already_recorded`` true when the run
    directory ``run_dir`` had already logged that source's result, i.e. when
    the run is about to evaluate something a second time.
    """

    def __init__(self, delay_s: float = 0.0, log: str | None = None, run_dir: str | None = None):
        self.calls: list[str] = []
        self.delay_s = delay_s
        self.log = Path(log) if log else None
        self.run_dir = Path(run_dir) if run_dir else None

    @classmethod
    def from_env(cls) -> "CostModelEvaluator":
        kind = ConfirmingEvaluator if os.environ.get("KS_STANDIN_CONFIRM") else cls
        return kind(
            float(os.environ.get("KS_STANDIN_DELAY", "0")),
            os.environ.get("KS_STANDIN_LOG"),
            os.environ.get("KS_STANDIN_RUN_DIR"),
        )

    def backend_for(self, task):
        from kernelsmith.backends import get_backend

        return get_backend(task.config.backend)

    def _log_start(self, source: str) -> None:
        digest = hashlib.sha256(source.encode()).hexdigest()
        recorded = False
        evaluations = self.run_dir / "evaluations.jsonl" if self.run_dir else None
        if evaluations is not None and evaluations.exists():
            data = evaluations.read_bytes()
            # Whole lines only: a line cut off by a kill is not a record.
            complete = data[: data.rfind(b"\n") + 1].decode().splitlines()
            recorded = any(json.loads(line).get("sha256") == digest for line in complete if line.strip())
        with open(self.log, "a") as handle:
            handle.write(json.dumps({"pid": os.getpid(), "sha256": digest, "already_recorded": recorded}) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    async def evaluate_async(self, task, source, trials=None):
        from kernelsmith.proposers.mutate import parse_tunables
        from kernelsmith.result import EvalResult

        if self.log is not None:
            self._log_start(source)
        self.calls.append(source)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        values = {t.name: t.value for t in parse_tunables(source)}
        if "BLOCK" not in values:
            return EvalResult(category="compile", error="no BLOCK")
        cost = abs(values["BLOCK"] - 256) / 64 + abs(values.get("WARPS", 4) - 4)
        runtime = 1.0 + 0.1 * cost
        return EvalResult(
            compiled=True, correct=True, category="ok", runtime_ms=runtime, ref_runtime_ms=1.5, speedup=1.5 / runtime
        )

    def close(self):
        pass


class ConfirmingEvaluator(CostModelEvaluator):
    """The cost model with the figures a real evaluator adds: a CI and a
    verdict per step, steps with WARPS = 8 timed unreliably (as under load),
    and the finalists' head-to-head re-timing (``confirm_best``), whose
    fastest finalist gets the speedup and CI of KS_STANDIN_CONFIRM
    ("speedup,low,high") and the others less. The per-step figures and the
    confirmed one differ, as on a real machine."""

    async def evaluate_async(self, task, source, trials=None):
        from kernelsmith.proposers.mutate import parse_tunables

        result = await super().evaluate_async(task, source, trials)
        if result.speedup is not None:
            result.speedup_ci_low, result.speedup_ci_high = result.speedup * 0.9, result.speedup * 1.1
            low, high = result.speedup_ci_low, result.speedup_ci_high
            result.timing_verdict = "faster" if low > 1 else "slower" if high < 1 else "indistinguishable"
            if {t.name: t.value for t in parse_tunables(source)}.get("WARPS") == 8:
                result.timing_reliable = False
                result.unreliable_reasons = ["the machine was loaded (stand-in)"]
        return result

    def confirm_best(self, task, sources):
        speedup, low, high = (float(x) for x in os.environ["KS_STANDIN_CONFIRM"].split(","))
        rows = []
        for index, _source in enumerate(sources):
            scale = 1.0 if index == 0 else 0.5
            row_low, row_high = low * scale, high * scale
            rows.append(
                {
                    "index": index,
                    "correct": True,
                    "speedup": speedup * scale,
                    "speedup_ci_low": row_low,
                    "speedup_ci_high": row_high,
                    "timing_reliable": True,
                    "suspicious": False,
                    "verdict": "faster" if row_low > 1 else "slower" if row_high < 1 else "indistinguishable",
                }
            )
        return {"finalists": rows, "head_to_head": {}}


class RichEvaluator(CostModelEvaluator):
    """The cost model with the fields a real result carries (hardware, phases,
    timing per shape, census, speed of light, warnings), some steps
    unreliable (WARPS 8), suspicious (BLOCK 32) or hacked (BLOCK 512 with
    WARPS 2), an ``evaluate_many`` for the RL environment and a finalists'
    re-timing: deterministic, for tests of what the records keep."""

    async def evaluate_async(self, task, source, trials=None):
        from kernelsmith.proposers.mutate import parse_tunables

        r = await super().evaluate_async(task, source, trials)
        t = {x.name: x.value for x in parse_tunables(source)}
        r.hardware = {"device": "standin", "torch": "x"}
        r.phases = {"load": 0.1, "compile": 0.2}
        r.log_tail = "printed\n" * 3
        r.memory = {"peak_bytes": 123}
        if r.speedup is not None:
            s = r.speedup
            r.speedup_ci_low, r.speedup_ci_high = s * 0.9, s * 1.1
            r.timing_verdict = "faster" if s * 0.9 > 1 else "indistinguishable"
            r.timing = {
                "confidence": 0.95,
                "n_pairs": 7,
                "candidate": {"median": r.runtime_ms},
                "shapes": [
                    {"shape": "a", "speedup": s, "speedup_ci": [s * 0.9, s * 1.1]},
                    {"shape": "b", "speedup": s * 1.01, "speedup_ci": [s * 0.8, s * 1.2]},
                ],
            }
            r.census = {
                "coverage": 0.75,
                "foreign_us": {"aten::add": 12.0},
                "time_basis": "device",
                "own_us": {"k": 30.0},
                "policy": "strict",
            }
            r.speed_of_light = {
                "counted": True,
                "bound": "memory",
                "fraction": 0.41,
                "device": "standin",
                "achieved_bytes_per_s": 1e12,
                "peak_bytes_per_s": 3e12,
                "arithmetic_intensity": 0.25,
                "ridge_point": 10.0,
                "reference_fraction": 0.2,
            }
            r.correctness = {"max_abs_err": 1e-6, "max_rel_err": 1e-5, "atol": 1e-3, "rtol": 1e-3, "trials": 2}
            r.warnings = ["a cast lowers precision"]
            if t.get("WARPS") == 8:
                r.timing_reliable = False
                r.unreliable_reasons = ["loaded (stand-in)"]
            if t.get("BLOCK") == 32:
                r.suspicious, r.suspicious_reasons = True, ["below the floor (stand-in)"]
            if t.get("BLOCK") == 512 and t.get("WARPS") == 2:
                r.overrule_as_hacked("stand-in hack")
        return r

    def evaluate_many(self, items, trials=None):
        async def all_():
            return [await self.evaluate_async(t, s, trials) for t, s in items]

        return asyncio.run(all_())

    def confirm_best(self, task, sources):
        rows = [
            {
                "index": i,
                "correct": True,
                "speedup": 2.0 / (i + 1),
                "speedup_ci_low": 1.8 / (i + 1),
                "speedup_ci_high": 2.2 / (i + 1),
                "timing_reliable": True,
                "suspicious": False,
                "verdict": "faster",
            }
            for i, _ in enumerate(sources)
        ]
        return {"finalists": rows, "head_to_head": {}}
