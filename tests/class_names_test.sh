#!/usr/bin/env bash
# class_names_test.sh SOURCE_DIR — no model class is named outside the
# frontend (issue 12): passes, codegen, the runtime and the tools read what
# they need to know about a class from the module's facts or the class
# descriptor (frontend/registry.h), never from its name, so adding a class
# touches frontend/ only.
#
# The names are every descriptor's `.name` in frontend/ (the registry's
# classes).  Checked: the compiler's sources and scripts (C, C++, CUDA, shell)
# in every directory but frontend/ and tests/.  Not checked: Markdown and
# JSON (documentation and model configs name classes by nature), and the
# Python that drives diffusers itself as the oracle (tools/make_fixtures*.py,
# bench/bench*.py build diffusers models by class).
set -u
src=$1
cd "$src" || exit 1
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "  ok: $1"; }
bad() { failed=$((failed + 1)); echo "FAIL: $1"; }

names=$(grep -rhoE '^ *\.name = "[A-Za-z0-9_]+",' frontend --include='*.c' | sed -E 's/.*"(.*)",/\1/' | sort -u)
count=$(printf '%s\n' "$names" | grep -c .)
# the two classes of today at least: a broken extraction must not pass
[ "$count" -ge 2 ] && ok "$count class names found in frontend/: $(echo $names)" ||
  bad "found $count class names in frontend/ (expected the registry's descriptors' .name lines)"

files=$(find support ir passes codegen runtime tools samples bench -type f \
          \( -name '*.c' -o -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' -o -name '*.sh' \) 2>/dev/null)
for n in $names; do
  hits=$(grep -nw -- "$n" $files 2>/dev/null)
  if [ -z "$hits" ]; then ok "\"$n\" appears only in frontend/ (and tests/)"; else bad "\"$n\" named outside frontend/: $hits"; fi
done

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
