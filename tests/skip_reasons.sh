#!/usr/bin/env bash
# skip_reasons.sh BUILD_DIR — run by ctest after the tests (see
# skip_reasons.cmake): prints each test's "SKIP: reason" line from ctest's
# log of this run, so that the reasons show under ctest's list of skipped
# tests.  Never fails: it reports, the tests decide.
# While the post-test command runs, CTest 3.25 is still writing this run's
# log as LastTest.log.tmp (LastTest.log is the previous run's until ctest
# renames it on exit), so the .tmp is read when present.
log=$1/Testing/Temporary/LastTest.log
[ -f "$log.tmp" ] && log=$log.tmp
[ -f "$log" ] || exit 0
awk '/^[0-9]+\/[0-9]+ Test: / { name = $3 }
     /^SKIP: / { sub(/^SKIP: /, ""); why[++n] = name ": " $0 }
     END { if (n) { print "Why they were skipped:"; for (i = 1; i <= n; i++) print "\t  " why[i] } }' "$log"
exit 0
