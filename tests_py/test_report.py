"""kernelsmith report: the HTML page of one run. The run is real (evolve with
the SDK client against the scripted LLM server, real edits and trajectory);
only the evaluator is a cost model, so the page's content is known."""
from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest

from mock_llm_server import MockResponse

TASK = Path(__file__).resolve().parent / "fixtures_bench" / "suite" / "level1" / "2_softmax_dir"
SEED = (TASK / "seed.py").read_text()


class WorkGroupCostModel:
    """Correct for any WORK_GROUP; faster the larger it is. 'BROKEN' marks a compile error."""

    def backend_for(self, task):
        from kernelsmith.backends import get_backend

        return get_backend(task.config.backend)

    async def evaluate_async(self, task, source, trials=None):
        from kernelsmith.result import EvalResult

        if "BROKEN" in source:
            return EvalResult(category="compile", error="kernel.cl:3: error: use of undeclared identifier 'BROKEN'")
        wg = int(re.search(r"^WORK_GROUP = (\d+)", source, re.M).group(1))
        runtime = 4.0 / wg
        return EvalResult(compiled=True, correct=True, category="ok", runtime_ms=runtime, ref_runtime_ms=1.0,
                          speedup=1.0 / runtime, hardware={"device": "cost model", "backend": "opencl"},
                          phases={"load": 0.05, "compile": 0.4, "correctness": 0.2, "timing": wg / 32})

    def close(self):
        pass


def full(source: str) -> MockResponse:
    return MockResponse(text=f"```python\n{source}```\n")


@pytest.fixture
def run_dir(mock_llm, tmp_path, monkeypatch):
    from kernelsmith.evolve import evolve_sync, load_evolve_config

    monkeypatch.setenv("OPENAI_BASE_URL", mock_llm.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    mock_llm.script(
        full(SEED.replace("WORK_GROUP = 16", "WORK_GROUP = 8")),          # slower than the seed
        full(SEED.replace("WORK_GROUP = 16", "WORK_GROUP = 32")),         # the best: 8x
        full(SEED.replace("int row = get_global_id(0);", "int row = BROKEN;")),  # compile error
        "no code in this answer",                                           # edit failure
    )
    config = load_evolve_config(None, iterations=4, model="openai:m", proposal_concurrency=1,
                                llm={"prices": {"m": {"input_per_mtok": 1000.0, "output_per_mtok": 2000.0}}})
    evolve_sync(TASK, config, tmp_path / "run", evaluator=WorkGroupCostModel())
    return tmp_path / "run"


def test_report_content(run_dir, tmp_path):
    from kernelsmith.cli import main

    out = tmp_path / "report.html"
    assert main(["report", str(run_dir), "-o", str(out)]) == 0
    page = out.read_text()
    # self-contained: no external resources
    assert "<script src" not in page and "<link" not in page and "http://" not in page and "https://" not in page
    images = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", page)
    assert images and base64.b64decode(images[0])[:8] == b"\x89PNG\r\n\x1a\n" and len(images[0]) > 5000
    # the evaluator's phases per step: a second figure, only because the results carry them
    assert "Evaluation time per phase" in page and len(images) == 2

    summary = json.loads((run_dir / "summary.json").read_text())
    best_id = summary["best_program_id"]
    assert summary["best_speedup"] == pytest.approx(8.0)
    assert f"Source of #{best_id}" in page
    # the best kernel's own line, and the diff against its parent (the seed, WORK_GROUP 16)
    assert "WORK_GROUP = 32  # tune" in page
    assert "<span class='del'>-WORK_GROUP = 16  # tune: [8, 16, 32]</span>" in page
    assert "<span class='add'>+WORK_GROUP = 32  # tune: [8, 16, 32]</span>" in page
    # lineage: seed (root) then the best, with its speedup
    lineage = page.split("<ul class='lineage'>")[1].split("</ul>")[0]
    assert lineage.count("<li") == 2 and "seed" in lineage and "root" in lineage and "8.000" in lineage
    # per-step feedback: the compile error and the edit failure are shown
    assert "use of undeclared identifier &#x27;BROKEN&#x27;" in page
    assert "edit-failed" in page and "compile-failed" in page
    # usage and cost: 4 requests of 10 prompt + 20 completion tokens at the configured prices
    assert "total tokens <b>120</b>" in page
    assert "$0.2000" in page  # 4 * (10 * 1000 + 20 * 2000) / 1e6


def test_report_rejects_non_run(tmp_path):
    from kernelsmith.report import build_report

    with pytest.raises(FileNotFoundError, match="not a run directory"):
        build_report(tmp_path)


def test_report_diff_is_single_spaced_in_a_real_browser(run_dir, tmp_path):
    """Headless Chromium lays the page out; a script measures the diff: its
    height over one line's height must equal its number of lines (a double-
    spaced diff measures about twice that)."""
    import shutil
    import subprocess

    from kernelsmith.cli import main

    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    assert browser, "headless Chromium is needed (scripts/setup.sh installs the Debian package 'chromium')"
    out = tmp_path / "report.html"
    assert main(["report", str(run_dir), "-o", str(out)]) == 0
    probe = ("<script>window.addEventListener('load', () => {"
             "const pre = document.querySelector('pre.diff'); const style = getComputedStyle(pre);"
             "const inner = pre.clientHeight - parseFloat(style.paddingTop) - parseFloat(style.paddingBottom);"
             "const spans = pre.querySelectorAll(':scope > span');"
             "document.body.setAttribute('data-probe', [inner / spans[0].getBoundingClientRect().height,"
             " spans.length].join(':'));});</script>")
    probed = tmp_path / "probed.html"
    probed.write_text(out.read_text().replace("</body>", probe + "</body>"))
    dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                          "--virtual-time-budget=5000", probed.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    match = re.search(r'data-probe="([\d.]+):(\d+)"', dom)
    assert match, dom[-2000:]
    line_heights, lines = float(match.group(1)), int(match.group(2))
    assert lines >= 5 and line_heights == pytest.approx(lines, abs=0.5)


def test_step_plots_have_integer_ticks(tmp_path, monkeypatch):
    from kernelsmith.bench import plots
    from kernelsmith.bench.metrics import TaskResult

    plt = plots._pyplot()
    captured = []
    original = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, plt_, path: captured.append(fig) or original(fig, plt_, path))
    # A short run: three steps, where matplotlib alone puts ticks at 0.5, 1.5, 2.5.
    results = [TaskResult(key="t", correct=True, best_speedup=2.0, curve=[(0, 1.0), (3, 2.0)])]
    plots.plot_task_curves(results, tmp_path / "a.png")
    plots.plot_best_vs_step({"c": results}, tmp_path / "b.png")
    assert len(captured) == 2
    for fig in captured:
        fig.canvas.draw()
        ticks = [t for t in fig.axes[0].get_xticks() if fig.axes[0].get_xlim()[0] <= t <= fig.axes[0].get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks
    plt.close("all")
