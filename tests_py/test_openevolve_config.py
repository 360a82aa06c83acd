"""OpenEvolve configs: its common keys are read under kernelsmith's names,
the others stop with one line that says what to write instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelsmith.cli import main as cli_main
from kernelsmith.config import ConfigError
from kernelsmith.evolve import load_evolve_config

SOFTMAX = Path(__file__).resolve().parent.parent / "examples" / "opencl" / "softmax"


def test_openevolve_keys_are_read_as_ours(tmp_path):
    path = tmp_path / "openevolve.yaml"
    path.write_text(
        "max_iterations: 7\nrandom_seed: 42\ncheckpoint_interval: 3\nearly_stopping_patience: 5\n"
        "database:\n  num_islands: 2\n  population_size: 50\n  migration_interval: 10\n"
        "prompt:\n  num_top_programs: 2\n  num_diverse_programs: 1\n"
    )
    config = load_evolve_config(path)
    assert (config.iterations, config.seed, config.checkpoint_every) == (7, 42, 3)
    assert config.engine == {"num_islands": 2, "population_size": 50, "migration_interval": 10, "patience": 5}
    assert config.prompt_config().max_top_programs == 2 and config.prompt_config().max_inspirations == 1
    # Command-line flags still win over the file.
    assert load_evolve_config(path, iterations=2).iterations == 2


@pytest.mark.parametrize(
    "text, hint",
    [
        ("diff_based_evolution: true\n", "edit_mode: diff"),
        ("language: python\n", "backend"),
        ("evaluator:\n  timeout: 60\n", "trials: N"),
        ("llm:\n  api_base: http://x\n  models: [{name: m, weight: 1}]\n", "base_url"),
        ("prompt:\n  system_message: hi\n", "template_dir"),
    ],
)
def test_other_openevolve_keys_are_refused_in_one_line(tmp_path, capsys, text, hint):
    path = tmp_path / "openevolve.yaml"
    path.write_text("max_iterations: 3\n" + text)
    with pytest.raises(ConfigError, match=hint):
        load_evolve_config(path)
    assert cli_main(["evolve", str(SOFTMAX), "--config", str(path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and hint in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()
