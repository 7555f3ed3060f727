# gpu-case-lists.sh, sourced (. scripts/gpu-case-lists.sh) by the device check scripts after
# scripts/gpu-unpack.sh: the case lists a change is tested on before anything is timed.
#
# run_case_lists NAME MIXERS: every test binary of TEST_BINS (default every
# gpubin/tests/gpu/test_gpu*) on the cases of each mixer in MIXERS (MIXSCOPE_GPU_ONLY) under every
# setting of TEST_ENVS (default ENVS: space-separated, "-" for none, "," between the variables of
# one setting), each list cut off after TIMEOUT seconds (default 300, what a kernel that hangs
# costs). A line a list on stdout and in $OUT/NAME-tests.txt, each list's whole output in
# $OUT/NAME-test-BINARY-MIXER-SETTING.txt. Returns 1 when a list failed or did not finish (a hang
# or a crash), so that the caller stops before its timings.
run_case_lists() {
    for t in ${TEST_BINS:-gpubin/tests/gpu/test_gpu*}; do
        [ -x "$t" ] || continue
        for cfg in ${TEST_ENVS:-$ENVS}; do
            envs=$(echo "$cfg" | sed 's/^-$//' | tr ',' ' ')
            for m in $2; do
                printf '%s [%s] %s: ' "$(basename "$t")" "$cfg" "$m"
                f="$OUT/$1-test-$(basename "$t")-$m-$(echo "$cfg" | tr -c 'A-Za-z0-9\n' _).txt"
                # line-buffered: a test that hangs still leaves the lines before it
                env $envs MIXSCOPE_GPU_ONLY="$m" timeout "${TIMEOUT:-300}" stdbuf -oL "$t" >"$f" 2>&1
                grep -E "FAIL|gpu: .* passed" "$f" | head -5
                grep -q "gpu: .* passed" "$f" || echo "did not finish (a hang or a crash)"
            done
        done
    done | tee "$OUT/$1-tests.txt"
    if grep -q FAIL "$OUT/$1-tests.txt" || grep -vq " 0 failed" "$OUT/$1-tests.txt"; then
        echo "$1 tests failed or did not finish: no timings"
        return 1
    fi
}

# run_all_tests: every GPU test binary in full (tests/gpu/run.sh) into $OUT/test-gpu-all.txt, and
# the lines that count.
run_all_tests() {
    sh tests/gpu/run.sh gpubin >"$OUT/test-gpu-all.txt" 2>&1 && echo "test-gpu: ok" || echo "test-gpu: FAILED"
    grep -E "FAIL|passed" "$OUT/test-gpu-all.txt"
}
