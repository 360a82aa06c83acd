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
        return EvalResult(
            compiled=True,
            correct=True,
            category="ok",
            runtime_ms=runtime,
            ref_runtime_ms=1.0,
            speedup=1.0 / runtime,
            hardware={"device": "cost model", "backend": "opencl"},
            phases={"load": 0.05, "compile": 0.4, "correctness": 0.2, "timing": wg / 32},
            speed_of_light=sol_of(runtime, self.flops),
        )

    flops = 0  # a softmax: the FLOP counter sees none, bandwidth is the bound

    def close(self):
        pass


def sol_of(runtime_ms: float, flops: int) -> dict:
    """The speed of light of a call of ``runtime_ms`` moving 64 MiB (and
    doing ``flops``) on an H100 SXM, by the evaluator's own arithmetic
    (timing/sol.py) and peak table; the reference takes 1 ms."""
    from kernelsmith.timing.roofline import WorkEstimate, lookup_peak
    from kernelsmith.timing.sol import speed_of_light

    work = WorkEstimate(bytes_moved=64 << 20, flops=flops, dtype="float32", flop_counter="torch.utils.flop_counter")
    return speed_of_light(runtime_ms / 1e3, work, lookup_peak("NVIDIA H100 80GB HBM3"), reference_s=1e-3).to_dict()


def full(source: str) -> MockResponse:
    return MockResponse(text=f"```python\n{source}```\n")


@pytest.fixture
def run_dir(mock_llm, tmp_path, monkeypatch):
    return _run(mock_llm, tmp_path, monkeypatch, WorkGroupCostModel())


def _run(mock_llm, tmp_path, monkeypatch, evaluator):
    from kernelsmith.evolve import evolve_sync, load_evolve_config

    monkeypatch.setenv("OPENAI_BASE_URL", mock_llm.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    mock_llm.script(
        full(SEED.replace("WORK_GROUP = 16", "WORK_GROUP = 8")),  # slower than the seed
        full(SEED.replace("WORK_GROUP = 16", "WORK_GROUP = 32")),  # the best: 8x
        full(SEED.replace("int row = get_global_id(0);", "int row = BROKEN;")),  # compile error
        "no code in this answer",  # edit failure
    )
    config = load_evolve_config(
        None,
        iterations=4,
        model="openai:m",
        proposal_concurrency=1,
        llm={"prices": {"m": {"input_per_mtok": 1000.0, "output_per_mtok": 2000.0}}},
    )
    evolve_sync(TASK, config, tmp_path / "run", evaluator=evaluator)
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
    # the evaluator's phases per step: a second figure, only because the results carry them;
    # the speed of light a third (bandwidth: the programs do no FLOPs the counter sees)
    assert "Evaluation time per phase" in page and len(images) == 3

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
    probe = (
        "<script>window.addEventListener('load', () => {"
        "const pre = document.querySelector('pre.diff'); const style = getComputedStyle(pre);"
        "const inner = pre.clientHeight - parseFloat(style.paddingTop) - parseFloat(style.paddingBottom);"
        "const spans = pre.querySelectorAll(':scope > span');"
        "document.body.setAttribute('data-probe', [inner / spans[0].getBoundingClientRect().height,"
        " spans.length].join(':'));});</script>"
    )
    probed = tmp_path / "probed.html"
    probed.write_text(out.read_text().replace("</body>", probe + "</body>"))
    dom = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--dump-dom",
            "--virtual-time-budget=5000",
            probed.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
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


def test_report_speed_of_light(run_dir, tmp_path, mock_llm, monkeypatch):
    """The speed-of-light section: each step's fraction of the bound in the
    table, the best's sentence, and a figure: bandwidth per program where
    the counter sees no FLOPs, the roofline where it does (a GEMM-like
    cost model), and a sentence instead where nothing was counted."""
    from kernelsmith.report import build_report
    from kernelsmith.report.html import roofline_points
    from kernelsmith.report.html import RunView

    page = build_report(run_dir)
    # the best (WORK_GROUP 32: 0.125 ms for 64 MiB) reaches 537 GB/s of the H100's 3.35 TB/s: 16%
    best = sol_of(0.125, 0)
    assert best["bound"] == "memory" and round(best["fraction"] * 100) == 16
    assert "the run&#x27;s best #" in page and "16% of the memory bound on H100" in page
    assert page.count("of memory</td>") >= 3 and "<img id='roofline'" in page
    points, _ = roofline_points(RunView.load(run_dir))
    # one point per program (the seed and the two correct proposals), the reference at 1 ms
    assert sorted(round(p["bytes_s"] / 1e9) for p in points) == [134, 268, 537]
    assert all(p["ref_bytes_s"] == pytest.approx((64 << 20) / 1e-3) for p in points)

    class Gemm(WorkGroupCostModel):
        flops = 2 * 4096**3  # 137 GFLOP over 64 MiB: far right of the ridge

    gemm = _run(mock_llm, tmp_path / "gemm", monkeypatch, Gemm())
    points, _ = roofline_points(RunView.load(gemm))
    assert points and all(
        p["bound"] == "compute" and p["ai"] == pytest.approx(2 * 4096**3 / (64 << 20)) for p in points
    )
    page = build_report(gemm)
    assert "of the compute bound" in page and "<img id='roofline'" in page

    class Uncounted(WorkGroupCostModel):
        async def evaluate_async(self, task, source, trials=None):
            result = await super().evaluate_async(task, source, trials)
            result.speed_of_light = {"counted": False, "reason": "cannot be counted: no peak figures for device 'x'"}
            return result

    none = _run(mock_llm, tmp_path / "none", monkeypatch, Uncounted())
    page = build_report(none)
    assert "<img id='roofline'" not in page and "not counted: cannot be counted: no peak figures" in page


def test_report_roofline_renders_in_a_real_browser(run_dir, tmp_path):
    """Headless Chromium decodes the speed-of-light figure and lays it out
    (a broken data URI has naturalWidth 0); a screenshot is kept beside."""
    import shutil
    import subprocess

    from kernelsmith.report import write_report

    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    assert browser, "headless Chromium is needed (scripts/setup.sh installs the Debian package 'chromium')"
    out = write_report(run_dir, tmp_path / "report.html")
    probe = (
        "<script>window.addEventListener('load', () => {const img = document.getElementById('roofline');"
        "const box = img.getBoundingClientRect();"
        "document.body.setAttribute('data-probe', [img.complete, img.naturalWidth, img.naturalHeight,"
        " Math.round(box.width), document.getElementById('sol-best').textContent].join('|'));});</script>"
    )
    probed = tmp_path / "probed.html"
    probed.write_text(out.read_text().replace("</body>", probe + "</body>"))
    args = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000"]
    dom = subprocess.run(args + ["--dump-dom", probed.as_uri()], capture_output=True, text=True, timeout=120).stdout
    match = re.search(r'data-probe="([^"]*)"', dom)
    assert match, dom[-2000:]
    complete, width, height, shown, words = match.group(1).split("|", 4)
    # matplotlib's 7.0 x 3.6 in at 110 dpi
    assert complete == "true" and int(width) == 770 and int(height) == 396 and int(shown) > 300
    assert "of the memory bound on H100" in words
    shot = tmp_path / "report.png"
    subprocess.run(
        args + ["--window-size=1000,3000", f"--screenshot={shot}", out.as_uri()], capture_output=True, timeout=120
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
