#!/usr/bin/env bash
# Runs `go test -v` with the given arguments, keeps its exit code, and ends with
# one line that counts tests: "N passed, N failed, N skipped".
set -uo pipefail
log=$(mktemp)
go test -v "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
passed=$(grep -cE '^\s*--- PASS' "$log")
failed=$(grep -cE '^\s*--- FAIL' "$log")
skipped=$(grep -cE '^\s*--- SKIP' "$log")
if [ "$failed" -gt 0 ]; then
  echo "FAILED tests:"; grep -E '^\s*--- FAIL' "$log"
fi
rm -f "$log"
echo "tests: $passed passed, $failed failed, $skipped skipped"
exit "$rc"
