# cli_lib.sh — sourced by the command-line script tests (cli_test.sh,
# cli_edges_test.sh, sign_cli_test.sh): their arguments, a scratch folder
# removed at exit, the pass/fail counters and the check every refusal gets.
#   cli_init BUILD_DIR SOURCE_DIR PREFIX   sets build, src (both absolute),
#                                          diffc, diffrun, fx, tmp
#   ok MSG / bad MSG                       count and print one check
#   expect_fail NAME WANT [OUT] -- CMD...  CMD exits non-zero with one line
#                                          containing WANT and leaves no OUT*
#   cli_finish                             the closing count; the exit status
cli_init() {
  build=$(cd "$1" && pwd)
  src=$(cd "$2" && pwd)
  diffc=$build/diffc
  diffrun=$build/diffrun
  fx=$src/tests/fixtures
  tmp=$(mktemp -d "/tmp/$3-XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  passed=0
  failed=0
}

ok() { passed=$((passed + 1)); echo "  ok: $1"; }
bad() { failed=$((failed + 1)); echo "FAIL: $1"; }

expect_fail() {
  local name=$1 want=$2 out=""
  if [ "$3" = "--" ]; then shift 3; else out=$3; shift 4; fi
  local msg rc
  msg=$("$@" 2>&1 >/dev/null)
  rc=$?
  if [ $rc -eq 0 ]; then bad "$name: exit 0, expected failure"; return; fi
  case "$msg" in
    *"$want"*) ;;
    *) bad "$name: message '$msg' lacks '$want'"; return ;;
  esac
  if [ "$(printf '%s\n' "$msg" | wc -l)" -ne 1 ]; then bad "$name: more than one line: $msg"; return; fi
  if [ -n "$out" ] && ls "$out"* >/dev/null 2>&1; then bad "$name: left $(ls "$out"*) behind"; return; fi
  ok "$name: $msg"
}

cli_finish() {
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}
