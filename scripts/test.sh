#!/usr/bin/env bash
# The whole test suite: set-up, the linter, the import contracts, the type
# checker and the C++ format check, then the C++ tests (ctest) and the Python
# tests (pytest, against the installed package). Exit status is non-zero if any fail.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

PYTHON=${PYTHON:-python3}
BUILD_DIR=${BUILD_DIR:-build/tests}
JOBS=${JOBS:-$(nproc)}

echo "== Lint and format (ruff), import contracts (lint-imports), types (mypy)"
# pyproject.toml holds both configurations; any finding fails the run.
"$PYTHON" -m ruff check python/ tests_py/ benchmarks/
# the formatter: every Python file as `ruff format` writes it (fix a failure with the command it prints)
if ! "$PYTHON" -m ruff format --check python/ tests_py/ benchmarks/; then
  echo "ruff format: the files above are not formatted. Fix them with: ruff format python/ tests_py/ benchmarks/" >&2
  exit 1
fi
# lint-imports through $PYTHON (its script may not be on PATH); PYTHONPATH=python:
# the contracts are checked on the source tree, not on an installed copy
PYTHONPATH=python "$PYTHON" -c 'from importlinter.cli import lint_imports_command; lint_imports_command()' --no-cache

# the type checker, strict on the files [tool.mypy] in pyproject.toml lists
PYTHONPATH=python "$PYTHON" -m mypy

echo "== C++ format (clang-format --dry-run --Werror)"
# .clang-format at the root; every C++ file of cpp/, bindings/ and tests_cpp/
CXX_FILES=()
while IFS= read -r f; do CXX_FILES+=("$f"); done < <(
  find cpp bindings tests_cpp -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' \) | LC_ALL=C sort)
if ! clang-format --dry-run --Werror "${CXX_FILES[@]}"; then
  echo "clang-format: the C++ files above are not formatted ($(clang-format --version)). Fix them with:" >&2
  echo "  clang-format -i \$(find cpp bindings tests_cpp -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' \))" >&2
  exit 1
fi

echo "== C++ tests (ctest)"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DKERNELSMITH_BUILD_TESTS=ON -DKERNELSMITH_BUILD_PYTHON=OFF \
  -DKERNELSMITH_WARNINGS_AS_ERRORS=ON >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS"

echo "== Python tests (pytest)"
# Run from tests_py so `import kernelsmith` resolves to the installed package,
# not the source folder.
export TRITON_INTERPRET=1
cd tests_py
"$PYTHON" -m pytest -q -ra "$@"
