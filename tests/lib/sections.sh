# shellcheck shell=bash
# shellcheck disable=SC2317 # the helpers of table_sections and table_rows are called through table_each
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
#
# A table of cases (a TAB-separated file, one case per row, its name first) is read with
#   table_rows "$src/tests/TABLE.tsv"
# and each row is a section of its own, named by row_section: "row_" and the row's name in lower
# case, each run of other characters one underscore ("n_embd overflow 2^31": row_n_embd_overflow_2_31).
# tools/sanitizer_coverage.sh finds such tables by that call, written out with the path, and lists
# their rows' sections with table_sections.

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

# row_section NAME: sets $row_section_name to the section name of the table row called NAME
row_section() {
  local s=${1,,}
  s=${s//[^a-z0-9]/_}
  while [[ $s == *__* ]]; do s=${s//__/_}; done
  s=${s#_}
  row_section_name=row_${s%_}
}

# table_each TABLE FUNCTION: calls FUNCTION LINE for every row of TABLE (blank and '#' lines skipped)
table_each() {
  local line
  while IFS= read -r line || [ -n "$line" ]; do
    case $line in ''|'#'*) continue ;; esac
    "$2" "$line" || return 1
  done < "$1"
}

# table_sections TABLE: prints the section name of every row of TABLE, one a line
table_sections() {
  _table_print() { row_section "${1%%$'\t'*}"; printf '%s\n' "$row_section_name"; }
  table_each "$1" _table_print
}

# table_rows TABLE: sets the array table_rows_out to the rows of TABLE whose sections this run
# includes. Returns 1, saying why, when two rows share a section name, or when
# TRIDENT_TEST_SKIP_SECTIONS names a row section TABLE has no row for (tests/release_only.txt is
# then older than the table: rerun tools/sanitizer_coverage.sh).
table_rows() {
  local -A seen=()
  local s table_path=$1
  table_rows_out=()
  _table_take() {
    row_section "${1%%$'\t'*}"
    if [ -n "${seen[$row_section_name]:-}" ]; then
      echo "table_rows: two rows of $table_path are section $row_section_name: give them distinct names"
      return 1
    fi
    seen[$row_section_name]=1
    if section "$row_section_name"; then table_rows_out+=("$1"); fi
  }
  table_each "$1" _table_take || return 1
  for s in ${TRIDENT_TEST_SKIP_SECTIONS:-}; do
    if [[ $s == row_* ]] && [ -z "${seen[$s]:-}" ]; then
      echo "table_rows: TRIDENT_TEST_SKIP_SECTIONS names $s, which $1 has no row for: rerun tools/sanitizer_coverage.sh"
      return 1
    fi
  done
}
