#!/usr/bin/env bash
# docs_test.sh SOURCE_DIR — the repository stands alone (issue 11, item 13):
# no file points into ../shared (a clone has no such folder), the README
# links docs/ARCHITECTURE.md, and every relative link in the Markdown files
# names a file or folder that exists.
set -u
src=$1
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "  ok: $1"; }
bad() { failed=$((failed + 1)); echo "FAIL: $1"; }
cd "$src" || exit 1

# the project's own files: sources, scripts, docs (not build trees or virtual environments)
files=$(find README.md CMakeLists.txt docs support frontend ir passes codegen runtime tools tests samples bench \
          -type f \( -name '*.md' -o -name '*.c' -o -name '*.h' -o -name '*.cpp' -o -name '*.cuh' -o -name '*.sh' \
          -o -name '*.py' -o -name '*.txt' -o -name '*.cmake' -o -name '*.json' \) -not -path 'tests/fixtures/*' 2>/dev/null)
hits=$(grep -n -e '\.\./shared' -e 'shared/DESIGN' -e 'shared/notes' $files 2>/dev/null | grep -v '^tests/docs_test.sh:')
if [ -z "$hits" ]; then ok "no file points into ../shared"; else bad "links outside the repository: $hits"; fi

[ -s docs/ARCHITECTURE.md ] && ok "docs/ARCHITECTURE.md exists" || bad "docs/ARCHITECTURE.md is missing"
grep -q '](docs/ARCHITECTURE.md)' README.md && ok "the README links it" || bad "the README does not link docs/ARCHITECTURE.md"

# [text](target) with a relative target: the target (without #anchor) must exist beside the file
for md in README.md docs/*.md tests/fixtures/README.md tests/fuzz/README.md; do
  [ -f "$md" ] || continue
  dir=$(dirname "$md")
  for target in $(grep -o '](\([^)]*\))' "$md" | sed 's/^](//; s/)$//'); do
    case "$target" in http://* | https://* | mailto:* | '#'*) continue ;; esac
    path=${target%%#*}
    [ -e "$dir/$path" ] || bad "$md links $target, which does not exist"
  done
done
ok "relative links in the Markdown files resolve"

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
