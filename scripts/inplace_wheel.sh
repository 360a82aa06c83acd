# Shared by the in-place package scripts (run_inplace_liger.sh,
# run_inplace_fla.sh); sourced, not run.

# wheel_tree TREE NAME WHEEL...: the wheels' files unpacked into TREE (their
# dist-info dropped) and committed, so a patch has a commit to apply to.
wheel_tree() {
    local tree="$1" name="$2" wheel
    shift 2
    rm -rf "$tree" && mkdir -p "$tree"
    for wheel in "$@"; do
        "$py" -m zipfile -e "$wheel" "$tree"
    done
    rm -rf "$tree"/*.dist-info
    (cd "$tree" && git init -q && git add -A && git -c user.name=ks -c user.email=ks@localhost commit -qm "$name $(basename "$1")")
}

# check_best_patch TREE RUN_DIR WHAT TESTS: best.patch applied with git apply
# to a fresh copy of TREE (when the run found one), then the tests run there.
check_best_patch() {
    local tree="$1" run="$2" what="$3" tests="$4" work
    work="$(mktemp -d)"
    cp -r "$tree" "$work/tree"
    if [ -s "$run/best.patch" ]; then
        (cd "$work/tree" && git apply --verbose "$run/best.patch")
        echo "best.patch applies to $what's files; their tests with it:"
    else
        echo "no improvement found (best.patch is empty); the tests on the original files:"
    fi
    local rc=0
    (cd "$work/tree" && PYTHONPATH=. "$py" -m pytest -q -p no:cacheprovider "$tests") || rc=$?
    rm -rf "$work"
    return "$rc"
}
