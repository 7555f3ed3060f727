#!/bin/sh
# Runs every test binary given, then prints one summary line: "tests: N passed, M failed".
# cmocka prints per-binary results; this adds them up so the last line speaks for the whole suite.
pass=0 fail=0 bad=""
for t in "$@"; do
    out=$("$t" 2>&1); rc=$?
    printf '%s\n' "$out"
    p=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | tail -n 1)
    f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | tail -n 1)
    pass=$((pass + ${p:-0})); fail=$((fail + ${f:-0}))
    if [ $rc -ne 0 ]; then
        [ -z "$f" ] && fail=$((fail + 1))
        bad="$bad $(basename "$t")"
    fi
done
[ -n "$bad" ] && echo "failing:$bad"
echo "tests: $pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ -z "$bad" ]
