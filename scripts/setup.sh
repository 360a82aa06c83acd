#!/usr/bin/env bash
# Installs everything kernelsmith needs on a fresh Debian/Ubuntu machine and
# builds the package: system packages with apt-get, Python packages with pip,
# then `pip install .` (which compiles the C++ core and the extension).
# Safe to run again: installed pieces are skipped quickly.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config
  pybind11-dev python3-dev nlohmann-json3-dev libspdlog-dev libeigen3-dev
  ocl-icd-opencl-dev opencl-c-headers libgtest-dev
  pocl-opencl-icd clinfo bubblewrap
  chromium
  clang-format
)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "setup: installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# torch: exactly 2.13.0 (a CPU build is available locally; an open range would
# pull several GB of CUDA packages). NumPy stays below 2.4: the Triton
# interpreter breaks on loops over runtime scalars with NumPy >= 2.4.
# fastapi, uvicorn, pydantic: kernelsmith serve (swagger-ui-bundle: its /docs page without a CDN); rich: evolve's progress bar
# (pyproject.toml's dependencies; the package itself goes in with --no-deps).
"$PYTHON" -m pip install -q --disable-pip-version-check \
  "torch==2.13.0" "numpy>=1.24,<2.4" triton pyyaml \
  "openai>=1.40" "anthropic>=0.40" \
  matplotlib scikit-learn pyarrow ray transformers \
  pytest pytest-timeout nbformat nbclient ipykernel \
  "scikit-build-core>=0.8" "pybind11>=2.12" \
  "transformers>=5" datasets tokenizers "trl>=1.0" aiohttp omegaconf hydra-core codetiming pylatexenc \
  dill pandas "pyvers>=0.1,<0.2" \
  "fastapi>=0.110" "uvicorn>=0.29" "pydantic>=2" "swagger-ui-bundle>=1.1" "rich>=13"

# The habits the test run enforces (scripts/test.sh): the linter, the type checker and the
# import contracts of pyproject.toml (the C++ format check's clang-format is a Debian
# package, above). ruff is pinned to a minor version so a
# new release's rules cannot fail a run that changed nothing.
"$PYTHON" -m pip install -q --disable-pip-version-check "ruff>=0.17,<0.18" "import-linter>=2,<3" "mypy>=1.20,<1.21"

# The RL trainers the trainer tests run (tests_py/test_trainers.py). verl and
# OpenRLHF pin torch and GPU packages (vLLM, flash-attn, deepspeed) that a CPU
# machine with torch 2.13.0 cannot take, and pin older transformers: they are
# installed without their dependencies, plus the pieces the tests use (verl's
# RLHFDataset and reward managers, OpenRLHF's remote-reward client).
"$PYTHON" -m pip install -q --disable-pip-version-check --no-deps \
  "verl==0.9.1" "tensordict==0.10.0" torchdata "openrlhf==0.11.2"

# The RL environment's adapters (tests_py/test_env_*.py, docs/rl_environment.md).
# verl's agent loop imports cachetools, fastapi and uvicorn (installed above:
# kernelsmith serve runs on them). verifiers 0.3.1 is
# the newest release with MultiTurnEnv (0.4 replaced that API with verifiers.v1);
# its full dependency set pins openai<3 (and sandbox, MCP and GEPA packages), so
# it is installed without dependencies plus the modules its MultiTurnEnv imports.
"$PYTHON" -m pip install -q --disable-pip-version-check cachetools msgpack pyzmq
"$PYTHON" -m pip install -q --disable-pip-version-check --no-deps \
  "verifiers==0.3.1" renderers httpx httpcore prime-pydantic-config tenacity aiolimiter aiofiles \
  setproctitle prime-sandboxes "connectrpc==0.11.1" pyqwest "protobuf-py==0.1.1" "protobuf-py-ext==0.1.1"

echo "setup: building and installing kernelsmith"
"$PYTHON" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps .
"$PYTHON" -c "import kernelsmith; print('setup: kernelsmith', kernelsmith.__version__, 'installed')"
