"""``kernelsmith`` as a user runs it -- the real CLI, argument parsing, run
directory, proposers, LLM clients and exit codes -- with one part swapped: the
evaluator is the deterministic stand-in of standin_evaluator.py (configured
from KS_STANDIN_* environment variables). Usage: python standin_cli.py evolve ...
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import kernelsmith.evaluator  # noqa: E402
from standin_evaluator import CostModelEvaluator  # noqa: E402

kernelsmith.evaluator.make_evaluator = lambda *args, **kwargs: CostModelEvaluator.from_env()

from kernelsmith.cli import main  # noqa: E402

sys.exit(main())
