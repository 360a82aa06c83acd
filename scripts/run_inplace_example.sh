#!/usr/bin/env bash
# The in-place example, main-job style: evolve tinyops.rms_norm (a Triton
# kernel inside a small package, examples/inplace/tinyops) where it lives,
# offline (the mutation proposer, no LLM, no GPU: Triton's interpreter on the
# CPU), then check that the run's best.patch applies to the package and that
# the package's own tests pass with it. See docs/in_place.md.
# Extra arguments go to `kernelsmith evolve` (e.g. --iterations 12).
# Set-up as for scripts/run_example.sh (bash scripts/setup.sh) is assumed done.
set -euo pipefail
cd "$(dirname "$0")/.."
export TRITON_INTERPRET=1
py="${PYTHON:-python3}"
out="${OUT:-runs/inplace-rms_norm-$(date +%Y%m%d-%H%M%S)}"
"$py" -m kernelsmith evolve examples/inplace/rms_norm.yaml --iterations 16 --out "$out" "$@"
echo "--- $out/summary.md"
cat "$out/summary.md"
# the patch on a clean copy of the package, then the package's own tests
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r examples/inplace/tinyops "$work/tinyops"
if [ -s "$out/best.patch" ]; then
    (cd "$work/tinyops" && git apply --verbose "$OLDPWD/$out/best.patch")
    echo "best.patch applies to examples/inplace/tinyops; the package's tests with it:"
else
    echo "no improvement found (best.patch is empty); the package's tests on the original:"
fi
(cd "$work/tinyops" && PYTHONPATH=. "$py" -m pytest -q -p no:cacheprovider tests)
