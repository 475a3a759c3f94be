# shellcheck shell=bash
# tests/lib/sections.sh - sourced by the long script tests: their independent parts as named
# sections, so the sanitizer stage can run a part of one.
#
# A script wraps each part that needs no other part's files or variables in
#   if section NAME; then ... fi
# (a fixture several parts need is made under `if section A || section B; then`). Every section
# runs unless
#   TRIDENT_TEST_SECTIONS="A B"       runs only these (tools/sanitizer_coverage.sh measures each
#                                     section alone that way), or
#   TRIDENT_TEST_SKIP_SECTIONS="A B"  skips these: the sanitizer build sets it for the sections that
#                                     tests/release_only.txt lists as TEST:NAME (tests/CMakeLists.txt),
#                                     whose library lines the rest of that stage executes; the Release
#                                     stage runs them all.
# Section names are lower-case words joined by underscores; tools/sanitizer_coverage.sh finds them
# in the script's text (`section NAME`), so each is written out, not computed.

if [ -n "${TRIDENT_TEST_SKIP_SECTIONS:-}" ]; then
  echo "sections left to the Release stage here: $TRIDENT_TEST_SKIP_SECTIONS"
fi

# section NAME: true when this run includes section NAME
section() {
  if [ -n "${TRIDENT_TEST_SECTIONS:-}" ] && [[ " $TRIDENT_TEST_SECTIONS " != *" $1 "* ]]; then
    return 1
  fi
  [[ " ${TRIDENT_TEST_SKIP_SECTIONS:-} " != *" $1 "* ]]
}
