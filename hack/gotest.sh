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
  # What each failed test said (its own log lines, not the lab logs it
  # dumped), so a CI excerpt shows why and not only which.
  echo "FAILED tests, with their last messages:"
  awk '
    /^=== (RUN|CONT|NAME)/ { cur = $3 }
    /^[ \t]+[A-Za-z0-9_]+_test\.go:[0-9]+:/ && $0 !~ /==> .* <==/ { msgs[cur] = msgs[cur] "\n" $0; n[cur]++ }
    /^[ \t]*--- FAIL/ { name = $3; print; m = split(msgs[name], lines, "\n"); for (i = (m > 12 ? m - 11 : 2); i <= m; i++) print "  " substr(lines[i], 1, 400) }
  ' "$log"
fi
rm -f "$log"
echo "tests: $passed passed, $failed failed, $skipped skipped"
exit "$rc"
