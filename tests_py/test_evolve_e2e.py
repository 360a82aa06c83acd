"""End-to-end `kernelsmith evolve` on the CPU against the scripted LLM server:
real SDK client, real edits, real sandboxed evaluator (Triton interpreter)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mock_llm_server import MockResponse
from kernelsmith.trajectory import EvalStore

TASK = Path(__file__).parent / "fixtures_evolve" / "scale"
SEED = (TASK / "seed.py").read_text()
SECRET = "sk-test-0123456789abcdefSECRET"


def full(source: str, think: str | None = None) -> MockResponse:
    return MockResponse(
        text=f"Here is the program:\n```python\n{source}```\n", reasoning=think, think_tags=think is not None
    )


def diff(search: str, replace: str) -> MockResponse:
    return MockResponse(text=f"<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n")


HACKED = SEED.replace(
    "        scale_kernel[(triton.cdiv(n, BLOCK),)](x, y, n, BLOCK=BLOCK, num_warps=WARPS)\n        return y",
    "        return x * 2.0",
)


def _run(args, env, cwd):
    import kernelsmith

    # The child imports the same kernelsmith as this test (installed or dev tree).
    package_root = str(Path(kernelsmith.__file__).resolve().parent.parent)
    env = dict(env, PYTHONPATH=os.pathsep.join([package_root, env.get("PYTHONPATH", "")]))
    return subprocess.run(
        [sys.executable, "-m", "kernelsmith", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
def test_evolve_against_scripted_openai_server(mock_llm, tmp_path):
    assert "scale_kernel[(triton" in SEED and "return x * 2.0" in HACKED
    mock_llm.script(
        full(SEED.replace("BLOCK = 64", "BLOCK = 256"), think="bigger blocks amortize"),  # 1 correct rewrite
        diff("WARPS = 1  # tune: [1, 2, 4, 8]", "WARPS = 4  # tune: [1, 2, 4, 8]"),  # 2 diff that applies
        diff("BLOCK = 999", "BLOCK = 128"),  # 3 diff that does not apply
        full(SEED.replace("BLOCK = 64", "BLOCK = (64")),  # 4 syntax error
        MockResponse.error(429, retry_after=0.05),  # 5 rate limited,
        MockResponse.slow(3.0),  #   then too slow,
        full(SEED.replace("BLOCK = 64", "BLOCK = 128")),  #   then success
        full(HACKED),  # 6 hacked
    )
    config = tmp_path / "run.yaml"
    config.write_text(
        "proposal_concurrency: 1\n"
        "checkpoint_every: 2\n"
        "llm:\n"
        "  retry: {backoff_base_s: 0.01}\n"
        "  timeout_s: 1.0\n"  # the slow reply is abandoned and retried
        "  budget: {max_tokens: 170}\n"  # 30 tokens a reply: the 7th request is refused
        "  prices: {m: {input_per_mtok: 1000.0, output_per_mtok: 2000.0}}\n"
    )
    env = dict(os.environ, OPENAI_BASE_URL=mock_llm.openai_base_url, OPENAI_API_KEY=SECRET, TRITON_INTERPRET="1")
    out = tmp_path / "run"
    proc = _run(
        [
            "evolve",
            str(TASK),
            "--model",
            "openai:m",
            "--iterations",
            "10",
            "--config",
            str(config),
            "--out",
            str(out),
            "--json",
        ],
        env,
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["stop_reason"] == "budget"
    assert summary["usage"]["total_tokens"] == 6 * 30
    assert summary["usage"]["cost_usd"] == pytest.approx(6 * (10 * 1000 + 20 * 2000) / 1e6)

    records = [json.loads(line) for line in (out / "trajectory.jsonl").read_text().splitlines()]
    assert records[0]["kind"] == "seed" and records[0]["status"] == "correct"
    steps = [r for r in records if r["kind"] == "step"]
    evals = EvalStore.load(out)  # each step's whole result, by the key its record keeps
    assert [s["status"] for s in steps] == ["correct", "correct", "edit-failed", "edit-failed", "correct", "hacked"]
    first = steps[0]
    assert first["reasoning"] == "bigger blocks amortize" and "<think>" not in first["raw_response"]
    assert first["model"] == "openai:m" and first["usage"]["total_tokens"] == 30
    assert first["prompt"][0]["role"] == "system" and "class Model" in first["prompt"][1]["content"]
    assert "BLOCK = 256" in first["child_source"] and evals.raw(first["eval_key"])["correct"] is True
    assert "WARPS = 4" in steps[1]["child_source"]
    assert "BLOCK = 999" in steps[2]["edit"]["error"]  # the failed SEARCH is quoted back
    assert steps[3]["edit"]["error_kind"] == "syntax"
    assert evals.raw(steps[5]["eval_key"])["hacked"] is True
    assert len(mock_llm.requests) == 8  # 6 answers, the 429 and the abandoned slow reply
    assert mock_llm.requests[-1].body["temperature"] == 0.6 and mock_llm.requests[-1].body["top_p"] == 0.95

    # the best is the fastest finalist whose re-timing was reliable, with
    # the speedup measured there (not its per-step figure); where none was
    # (a machine too busy), the per-step best stays and the note says so
    confirmation = summary["best_confirmation"]
    reliable = [r for r in confirmation["finalists"] if r.get("timing_reliable") and r.get("speedup") is not None]
    if reliable:
        winner = max(reliable, key=lambda r: r["speedup"])
        assert summary["best_program_id"] == winner["program_id"]
        assert summary["best_speedup"] == pytest.approx(winner["speedup"])
    else:
        assert "no finalist's re-timing was reliable" in confirmation["note"]
    assert {r["program_id"] for r in confirmation["finalists"]} <= {
        s["child_id"] for s in records if s["status"] == "correct"
    }
    if summary["best_program_id"] is not None:  # None only when no timing at all was reliable
        best = next(s for s in records if s.get("child_id") == summary["best_program_id"])
        from kernelsmith.evolve.best import strip_header

        assert strip_header((out / "best_program.py").read_text()) == best["child_source"]
        assert summary["best"]["program_id"] == summary["best_program_id"]
        assert summary["best"]["speedup"] == summary["best_speedup"]
    else:
        assert not any(evals.raw(s.get("eval_key")).get("timing_reliable") for s in records if s["status"] == "correct")
    assert (out / "checkpoint" / "LATEST").exists()
    # The key reached the server but nothing on disk.
    assert mock_llm.requests[0].headers["authorization"] == f"Bearer {SECRET}"
    for path in out.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="ignore"), path


def _llm_rewrites(request) -> MockResponse:
    """A deterministic 'model': the rewrite depends only on the prompt."""
    import hashlib

    digest = hashlib.sha256(request.prompt_text.encode()).digest()
    block = [32, 64, 128, 256, 512][digest[0] % 5]
    warps = [1, 2, 4, 8][digest[1] % 4]
    body = SEED.replace("BLOCK = 64", f"BLOCK = {block}").replace("WARPS = 1", f"WARPS = {warps}")
    return full(body)


def test_killed_llm_run_resumes_to_the_same_archive(mock_llm, tmp_path, monkeypatch):
    """Scripted model, crash after step 7, resume: the same archive and the
    same token count as an uninterrupted run, and no request sent twice for
    a step that was already recorded."""
    from test_evolve import CostModelEvaluator, Crash, _archive

    from kernelsmith.evolve import evolve_sync, load_evolve_config, read_trajectory

    monkeypatch.setenv("OPENAI_BASE_URL", mock_llm.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    mock_llm.handler = _llm_rewrites
    cfg = load_evolve_config(None, iterations=12, seed=3, model="openai:m", proposal_concurrency=2, checkpoint_every=3)
    full_run = evolve_sync(TASK, cfg, tmp_path / "full", evaluator=CostModelEvaluator())
    sent_full = len(mock_llm.requests)

    def crash(snapshot):
        if snapshot["steps"] == 8:
            raise Crash()

    mock_llm.reset()
    mock_llm.handler = _llm_rewrites
    with pytest.raises(Crash):
        evolve_sync(TASK, cfg, tmp_path / "killed", evaluator=CostModelEvaluator(), progress=crash)
    resumed = evolve_sync(None, resume=tmp_path / "killed", evaluator=CostModelEvaluator())
    assert _archive(tmp_path / "killed") == _archive(tmp_path / "full")
    assert resumed.best_speedup == full_run.best_speedup
    assert resumed.usage["total_tokens"] == full_run.usage["total_tokens"] == 12 * 30
    # Steps recorded before the crash were not asked of the model again; only
    # requests in flight at the crash were (at most proposal_concurrency).
    assert sent_full == 12
    assert 12 <= len(mock_llm.requests) <= 12 + cfg.proposal_concurrency
    steps = [r for r in read_trajectory(tmp_path / "killed") if r["kind"] == "step"]
    assert sorted(r["request_id"] for r in steps) == sorted({r["request_id"] for r in steps})
