from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from kernelsmith.prompts import (
    PromptBuilder,
    PromptConfig,
    estimate_tokens,
    hardware_family,
    render_feedback,
)

REFERENCE = "class Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"


@dataclass
class Prog:
    id: str
    source: str
    iteration: int = 0
    parent_id: str | None = None
    island: int = 0
    metrics: dict = field(default_factory=dict)
    status: str = "correct"
    feedback: dict = field(default_factory=dict)


@dataclass
class Req:
    parent: Any
    inspirations: list = field(default_factory=list)
    mode: str = "weighted"
    island: int = 0
    iteration: int = 10


def program(i: int, speedup: float, size: int = 200) -> Prog:
    body = "\n".join(f"    x{i}_{k} = {k}" for k in range(size // 12))
    return Prog(
        id=f"p{i}",
        source=f"# EVOLVE-BLOCK-START\ndef f{i}():\n{body}\n# EVOLVE-BLOCK-END\n",
        iteration=i,
        metrics={"score": speedup, "speedup": speedup, "runtime_ms": 1.0 / speedup},
    )


FAILED_FEEDBACK = {
    "compiled": True,
    "correct": False,
    "hacked": False,
    "category": "incorrect",
    "correctness": {
        "max_abs_err": 0.5,
        "max_rel_err": 0.25,
        "first_mismatch": {"index": [0, 3], "expected": 1.0, "got": 1.5},
    },
    "runtime_ms": 0.8,
    "ref_runtime_ms": 1.2,
    "timing": {"median_ms": 0.8, "iqr_ms": 0.01},
    "error": "Traceback\n" + "noise line\n" * 2000 + "AssertionError: outputs differ\n",
}


def make_builder(**cfg: Any) -> PromptBuilder:
    return PromptBuilder(
        PromptConfig(**cfg),
        reference_source=REFERENCE,
        backend="triton",
        backend_tips="Use tl.load with masks.",
        hardware={"name": "NVIDIA H200", "compute_capability": "9.0"},
        task_name="relu",
    )


def test_system_prompt_has_objective_rules_and_tips():
    prompt = make_builder().build(Req(parent=program(1, 1.0)))
    system = prompt.messages[0]
    assert system["role"] == "system" and prompt.messages[1]["role"] == "user"
    text = system["content"]
    assert "ModelNew" in text and "bounds checks and masks" in text
    assert "Do not call torch" in text
    assert "Use tl.load with masks." in text
    assert "TMA" in text and "Warp specialization" in text
    assert "NVIDIA H200" in text
    assert "EVOLVE-BLOCK-START" in text and "```python" in text  # full-program format
    diff_prompt = make_builder(output_format="diff").build(Req(parent=program(1, 1.0)))
    assert "<<<<<<< SEARCH" in diff_prompt.system


def test_user_prompt_has_every_section():
    current = program(5, 1.3)
    current.feedback = FAILED_FEEDBACK
    prompt = make_builder().build(
        Req(parent=current, inspirations=[program(7, 0.9)], mode="explore"),
        history=[program(2, 1.1), program(3, 0.7)],
        top_programs=[program(4, 2.0), current],
    )
    user = prompt.user
    assert "torch.relu(x)" in user  # reference
    assert "Previous attempts" in user and "id p2" in user and "id p3" in user
    assert "Top programs" in user and "def f4" in user
    assert "Inspirations" in user and "def f7" in user
    assert "Current program" in user and "def f5" in user
    assert "max abs error 0.5" in user and "first mismatch" in user and "got 1.5, expected 1.0" in user
    assert "AssertionError: outputs differ" in user
    assert "characters omitted" in user  # the long log was trimmed
    assert "Explore" in user
    # The current program is not repeated among the top programs.
    assert prompt.meta["included"]["top_programs"] == ["p4"]
    assert prompt.meta["estimated_tokens"] == estimate_tokens(prompt.system) + estimate_tokens(user)


def test_repair_mode_uses_repair_instruction():
    prompt = make_builder().build(Req(parent=program(1, 1.0), mode="repair"))
    assert "Repair" in prompt.user and "Fix the cause" in prompt.user
    with pytest.raises(ValueError, match="mode"):
        make_builder().build(Req(parent=program(1, 1.0), mode="bogus"))


def test_cap_drops_weakest_history_first_then_inspirations():
    history = [program(i, speedup=s) for i, s in [(1, 0.5), (2, 3.0), (3, 0.2), (4, 1.0)]]
    req = Req(parent=program(9, 1.0), inspirations=[program(20, 1.0, 2000), program(21, 1.0, 2000)])
    full = make_builder(max_input_tokens=10**6).build(req, history=history)
    no_history = make_builder(max_input_tokens=10**6).build(req)
    assert full.meta["dropped"] == []

    # One token short: the weakest attempt (p3, speedup 0.2) goes first, nothing else.
    cap = full.meta["estimated_tokens"] - 1
    prompt = make_builder(max_input_tokens=cap).build(req, history=history)
    assert prompt.meta["estimated_tokens"] <= cap
    assert [d["id"] for d in prompt.meta["dropped"]] == ["p3"]
    assert prompt.meta["included"]["inspirations"] == ["p20", "p21"]
    assert "1 older or weaker attempts omitted" in prompt.user

    # Past all history: every attempt goes (weakest first), then the second
    # inspiration (~500 tokens), before any log is touched.
    cap = no_history.meta["estimated_tokens"] - 100
    small = make_builder(max_input_tokens=cap).build(req, history=history)
    assert [d["id"] for d in small.meta["dropped"]] == ["p3", "p1", "p4", "p2", "p21"]
    assert small.meta["included"]["inspirations"] == ["p20"]
    assert small.meta["included"]["log_chars"] == PromptConfig().max_log_chars
    assert small.meta["estimated_tokens"] <= cap
    assert small.meta["over_cap"] is False


def test_cap_truncates_logs_and_reports_over_cap():
    current = program(1, 1.0)
    current.feedback = FAILED_FEEDBACK
    roomy = make_builder(max_input_tokens=10**6, max_log_chars=20000).build(Req(parent=current))
    tight_cap = roomy.meta["estimated_tokens"] - 2000
    tight = make_builder(max_input_tokens=tight_cap, max_log_chars=20000).build(Req(parent=current))
    assert tight.meta["included"]["log_chars"] < 20000
    assert tight.meta["estimated_tokens"] <= tight_cap
    assert any("error log cut" in n for n in tight.meta["notes"])
    impossible = make_builder(max_input_tokens=50).build(Req(parent=current))
    assert impossible.meta["over_cap"] is True


def test_tokenizer_is_used():
    calls = []

    def tok(text: str) -> list[int]:
        calls.append(len(text))
        return [0] * len(text.split())

    builder = PromptBuilder(PromptConfig(), reference_source=REFERENCE, tokenizer=tok)
    prompt = builder.build(Req(parent=program(1, 1.0)))
    assert calls
    assert prompt.meta["estimated_tokens"] == len(prompt.system.split()) + len(prompt.user.split())


def test_template_override_folder(tmp_path):
    (tmp_path / "mode_weighted.md").write_text("CUSTOM INSTRUCTION FOR $nothing\n")
    (tmp_path / "system.md").write_text("My system prompt for $backend on $device_name.\n$output_format\n")
    prompt = PromptBuilder(
        PromptConfig(template_dir=str(tmp_path)),
        reference_source=REFERENCE,
        backend="opencl",
        hardware={"name": "pthread-cpu", "type": "CPU"},
    ).build(Req(parent=program(1, 1.0)))
    assert prompt.system.startswith("My system prompt for opencl on pthread-cpu.")
    assert "CUSTOM INSTRUCTION FOR $nothing" in prompt.user
    assert "Reference module" in prompt.user  # untouched templates still come from the package
    with pytest.raises(ValueError, match="template_dir"):
        PromptBuilder(PromptConfig(template_dir=str(tmp_path / "missing")), reference_source=REFERENCE)


def test_hardware_family_detection():
    assert hardware_family({"name": "NVIDIA H100 80GB HBM3"}) == "hopper"
    assert hardware_family({"name": "x", "compute_capability": (9, 0)}) == "hopper"
    assert hardware_family({"name": "NVIDIA A100-SXM4-40GB"}) == "ampere"
    assert hardware_family({"name": "NVIDIA L40S"}) == "ada"
    assert hardware_family({"name": "AMD Instinct MI300X", "arch": "gfx942"}) == "amd_cdna"
    assert hardware_family({"name": "pthread-haswell", "type": "CPU"}) == "cpu"
    assert hardware_family(None) == "generic"


def test_render_feedback_is_robust():
    assert render_feedback(None) == "Not evaluated yet."
    # An evaluator's new keys are ignored, never an error.
    text = render_feedback(
        {"compiled": False, "category": "compile", "error": "E: bad\n", "new_key": 3, "nested": {"a": 1}}
    )
    assert "COMPILE ERROR" in text and "E: bad" in text and "new_key" not in text
    assert render_feedback({"compiled": False}).startswith("- compiled: no")
    hacked = render_feedback(
        {"compiled": True, "correct": True, "hacked": True, "hack_reasons": ["called torch.matmul"]}
    )
    assert "called torch.matmul" in hacked
    assert "could not be applied" in render_feedback({"edit_error": "block 1 did not apply"})
    timing = render_feedback({"runtime_ms": 0.5, "ref_runtime_ms": 1.0, "speedup": 2.0, "correct": None})
    assert "speedup 2x" in timing and "reference 1 ms" in timing


def test_hardware_family_reads_what_the_backends_report():
    from kernelsmith.prompts import hardware_family

    # Shapes of Triton's and OpenCL's hardware_info() (as recorded on the H200 and here).
    assert hardware_family({"backend": "triton", "device": "NVIDIA H200", "compute_capability": "9.0"}) == "hopper"
    assert hardware_family({"backend": "triton", "device": "CPU (x86_64), Triton interpreter"}) == "cpu"
    assert hardware_family({"backend": "opencl", "name": "NVIDIA H200", "type": "gpu"}) == "hopper"
    assert hardware_family({"backend": "opencl", "name": "pthread-skylake", "type": "cpu"}) == "cpu"


def test_no_program_twice_in_one_prompt():
    parent, best, other = program(1, 1.0), program(2, 2.0), program(3, 1.5)
    migrant = Prog(id="p9", source=best.source + "\n# a copy on another island\n", iteration=9)
    prompt = make_builder().build(
        Req(parent=parent, inspirations=[best, migrant, other, parent]), top_programs=[best, parent]
    )
    included = prompt.meta["included"]
    assert included["top_programs"] == ["p2"] and included["inspirations"] == ["p3"]
    for p in (parent, best, other):
        assert prompt.user.count(p.source.rstrip("\n")) == 1


def test_history_lines_are_cut_on_word_or_line_boundaries():
    words = " ".join(f"word{i:03d}" for i in range(120))
    attempts = [
        Prog(id="e1", source="x", iteration=1, status="edit-failed", feedback={"edit_error": words}),
        Prog(
            id="e2",
            source="y",
            iteration=2,
            status="incorrect",
            feedback={"correct": False, "error": "Traceback:\n  " + words},
        ),
    ]
    prompt = make_builder().build(Req(parent=program(1, 1.0)), history=attempts)
    history = prompt.user[prompt.user.index("## Previous attempts") :].split("\n\n")[0]
    kept = [w for line in history.splitlines() for w in line.replace(":", " ").split() if w.startswith("word")]
    assert kept and all(len(w) == len("word000") for w in kept)  # every word whole
    assert " ..." in history and "... word" in history  # and the cuts are marked


def test_clip_and_trim_log_keep_whole_lines_and_words():
    from kernelsmith.prompts.feedback import clip, trim_log

    text = "alpha beta gamma delta epsilon"
    assert clip(text, 16) == "alpha beta ..."
    assert clip(text, 18, keep="tail") == "... delta epsilon"
    assert clip("x" * 50, 10) == "x" * 6 + " ..."  # one huge word: the only hard cut
    log = "".join(f"line {i} of the log\n" for i in range(500))
    trimmed = trim_log(log, 600)
    head, _, tail = trimmed.partition("\n... [")
    assert all(line.startswith("line ") and line.endswith("of the log") for line in head.splitlines())
    assert all(
        line.startswith("line ") and line.endswith("of the log") for line in tail.split("] ...\n", 1)[1].splitlines()
    )
    assert len(trimmed) <= 600 + 60


def test_tips_follow_the_backend_and_device_in_use():
    interpreter = {"backend": "triton", "device": "CPU (x86_64), Triton interpreter", "interpreter": True}
    assert hardware_family(interpreter) == "triton_interpreter"
    system = make_builder_for(interpreter).system_prompt()
    assert "Triton interpreter" in system and "PoCL" not in system and "work-group" not in system
    pocl = {"name": "pthread-Intel(R) Xeon(R)", "type": "CPU", "platform": "Portable Computing Language"}
    assert hardware_family(pocl) == "cpu" and "PoCL" in make_builder_for(pocl).system_prompt()
    h200 = {"backend": "triton", "device": "NVIDIA H200", "compute_capability": "9.0", "interpreter": False}
    assert hardware_family(h200) == "hopper" and "NVIDIA H200" in make_builder_for(h200).system_prompt()


def make_builder_for(hardware: dict) -> PromptBuilder:
    return PromptBuilder(
        PromptConfig(), reference_source=REFERENCE, backend=hardware.get("backend", "opencl"), hardware=hardware
    )


def test_max_log_chars_trims_a_long_error_in_the_prompt():
    """The evaluator's result (EvalResult.to_dict(), what the loop stores as a
    program's feedback) carries its log as ``error``: the prompt cuts it to
    max_log_chars, head and tail kept."""
    from kernelsmith.result import EvalResult

    log = "Traceback (most recent call last):\n" + "".join(f"  frame {i}\n" for i in range(3000)) + "ValueError: last\n"
    result = EvalResult(category="runtime", compiled=True, error=log)
    current = program(1, 1.0)
    current.feedback = result.to_dict()
    prompt = make_builder(max_log_chars=1000, max_input_tokens=10**6).build(Req(parent=current))
    assert "Verdict: RUNTIME ERROR" in prompt.user
    assert "Traceback (most recent call last)" in prompt.user and "ValueError: last" in prompt.user
    assert "characters omitted" in prompt.user and "frame 1500" not in prompt.user
    assert len(prompt.user) < len(log) // 10
    # The same renderer, untrimmed, for a person at the command line.
    assert "frame 1500" in result.render_feedback()
    assert "frame 1500" not in result.render_feedback(max_log_chars=1000)


def test_one_renderer_and_one_set_of_feedback_names():
    from kernelsmith.feedback import Feedback
    from kernelsmith.prompts import feedback as prompt_feedback
    from kernelsmith.result import EvalResult

    assert prompt_feedback.render_feedback is render_feedback
    r = EvalResult(category="incorrect", compiled=True, error="output 0 differs", runtime_ms=1.0)
    fb = Feedback.from_dict(r.to_dict())
    assert (fb.category, fb.compiled, fb.correct, fb.error) == ("incorrect", True, False, "output 0 differs")
    assert render_feedback(fb) == render_feedback(r.to_dict()) == r.render_feedback()
    edit = Feedback(category="edit", edit_error="block 1 did not apply", compiled=False)
    assert Feedback.from_dict(edit.to_dict()) == edit
    assert "could not be applied" in render_feedback(edit) and "EDIT ERROR" in render_feedback(edit)


def test_triton_prompt_names_the_real_device():
    """What the Triton backend reports (here: the interpreter on this CPU)
    is what the system prompt names: never "the target device"."""
    import platform

    from kernelsmith.backends import get_backend
    from kernelsmith.hardware import HardwareInfo

    backend = get_backend("triton")
    hw = backend.hardware_info()
    assert isinstance(hw, HardwareInfo) and hw.backend == "triton" and hw.name
    builder = PromptBuilder(
        PromptConfig(), reference_source=REFERENCE, backend="triton", backend_tips=backend.prompt_tips(hw), hardware=hw
    )
    system = builder.system_prompt()
    assert hw.name in system and "the target device" not in system
    if hw.interpreter:
        assert (platform.processor() or platform.machine()) in system
        assert hardware_family(hw) == "triton_interpreter"
    # The dict stored in EvalResult.hardware gives the same prompt.
    again = PromptBuilder(
        PromptConfig(),
        reference_source=REFERENCE,
        backend="triton",
        backend_tips=backend.prompt_tips(hw),
        hardware=hw.to_dict(),
    )
    assert again.system_prompt() == system
    # An H200 as the Triton backend reports it.
    h200 = HardwareInfo(backend="triton", name="NVIDIA H200", kind="gpu", compute_capability="9.0", compute_units=132)
    tips = backend.prompt_tips(h200)
    assert "Target: NVIDIA H200 (compute capability 9.0, 132 SMs)" in tips
    assert "NVIDIA H200" in make_builder_for(h200.to_dict()).system_prompt() and hardware_family(h200) == "hopper"


def test_hardware_info_reads_old_records_and_rejects_unknown_keys():
    from kernelsmith.hardware import HardwareInfo

    old_triton = HardwareInfo.from_dict(
        {
            "backend": "triton",
            "device": "NVIDIA H200",
            "compute_capability": "9.0",
            "sm_count": 132,
            "interpreter": False,
            "torch": "2.5",
            "cuda": "12.4",
        }
    )
    assert (old_triton.name, old_triton.compute_units, old_triton.versions) == (
        "NVIDIA H200",
        132,
        {"torch": "2.5", "cuda": "12.4"},
    )
    old_opencl = HardwareInfo.from_dict(
        {
            "backend": "opencl",
            "name": "pthread-x",
            "type": "cpu",
            "device": "pthread-x (Portable Computing Language, OpenCL cpu)",
            "max_compute_units": 2,
            "local_mem_size": 4096,
        }
    )
    assert (old_opencl.name, old_opencl.kind, old_opencl.compute_units) == ("pthread-x", "cpu", 2)
    assert old_opencl.properties == {"local_mem_size": 4096}
    with pytest.raises(ValueError, match="unknown HardwareInfo keys: device"):
        HardwareInfo.from_dict({**HardwareInfo(name="x").to_dict(), "device": "x"})
    with pytest.raises(ValueError, match="kind"):
        HardwareInfo(kind="tpu-ish")
