#!/bin/sh
# Lists the source files over 600 lines and the functions over 100 lines in
# src/, tools/ and include/ (test files, *_test.cc, are exempt), so that a
# long room is seen before it grows. A file that means to stay long says why
# in one line containing "size-exempt:", and is then listed as exempt, not as
# a finding. Functions are found by counting braces with comments and string
# literals blanked (no compiler needed): a block opened outside any function
# and not by namespace/class/struct/enum/union/extern or "= {" is a function.
#
#   scripts/check-sizes.sh            # list findings; exit 1 if any
#   scripts/check-sizes.sh --all      # also list the exempt ones
#   MAX_FILE_LINES=600 MAX_FUNC_LINES=100 are the limits (environment).
set -eu
cd "$(dirname "$0")/.."
max_file=${MAX_FILE_LINES:-600}
max_func=${MAX_FUNC_LINES:-100}
show_all=0
[ "${1:-}" = "--all" ] && show_all=1

files=$(find src tools include -type f \( -name '*.cc' -o -name '*.h' -o -name '*.cpp' -o -name '*.hpp' \) \
          ! -name '*_test.cc' ! -path '*/testing/*' 2>/dev/null | sort)
[ -n "$files" ] || { echo "check-sizes: no sources under src/, tools/, include/ (run from a checkout)" >&2; exit 2; }

# shellcheck disable=SC2086
awk -v max_file="$max_file" -v max_func="$max_func" -v show_all="$show_all" '
function flush_file(   n) {
  if (fname == "") return
  if (nlines > max_file) {
    if (exempt) { if (show_all) printf "exempt  file %s: %d lines (%s)\n", fname, nlines, reason }
    else { printf "FILE    %s: %d lines (limit %d)\n", fname, nlines, max_file; found++ }
  }
}
FNR == 1 {
  flush_file(); fname = FILENAME; nlines = 0; exempt = 0; reason = ""
  depth = 0; func_depth = -1; in_block_comment = 0; head = ""; ncont = 0
}
{
  nlines++
  raw = $0
  if (raw ~ /size-exempt:/) { exempt = 1; reason = raw; sub(/.*size-exempt:[ ]*/, "", reason) }
  line = raw
  # Blank block comments, line comments, string and char literals.
  out = ""
  i = 1; n = length(line)
  while (i <= n) {
    c = substr(line, i, 1); c2 = substr(line, i, 2)
    if (in_block_comment) {
      if (c2 == "*/") { in_block_comment = 0; i += 2 } else i++
      continue
    }
    if (c2 == "/*") { in_block_comment = 1; i += 2; continue }
    if (c2 == "//") break
    if (c == "\"" && substr(line, i - 1, 1) == "R" && substr(line, i + 1) ~ /^[^ ()\\]*\(/) {
      # Raw string literal R"delim( ... )delim": skip to its end on this line
      # (multi-line raw strings are rare here; their braces are not counted).
      d = substr(line, i + 1); d = substr(d, 1, index(d, "(") - 1)
      rest = substr(line, i); e = index(rest, ")" d "\"")
      if (e > 0) { i += e + length(d) + 1; continue }
      break
    }
    if (c == "\"" || c == "\047") {
      q = c; i++
      while (i <= n) {
        cc = substr(line, i, 1)
        if (cc == "\\") { i += 2; continue }
        if (cc == q) break
        i++
      }
      i++; out = out " "
      continue
    }
    out = out c; i++
  }
  # Preprocessor lines do not open blocks.
  if (out ~ /^[ \t]*#/) next
  for (j = 1; j <= length(out); j++) {
    c = substr(out, j, 1)
    if (c == "{") {
      if (func_depth < 0) {
        h = head
        gsub(/[ \t]+/, " ", h)
        container = (h ~ /(^|[^A-Za-z0-9_])(namespace|class|struct|union|enum)([^A-Za-z0-9_(]|$)/ && h !~ /\)[^)]*$/) || h ~ /extern *$/ || h ~ /= *$/ || h ~ /(^|[^A-Za-z0-9_])(namespace)([^A-Za-z0-9_]|$)/
        if (!container) {
          func_depth = depth; func_start = FNR
          name = h; sub(/\(.*/, "", name); sub(/.*[ *&]/, "", name)
          if (name == "") name = "(anonymous block)"
          func_name = name
        }
      }
      depth++; head = ""
    } else if (c == "}") {
      depth--
      if (func_depth >= 0 && depth == func_depth) {
        len = FNR - func_start + 1
        if (len > max_func) {
          if (fn_exempt_line(func_start)) { if (show_all) printf "exempt  func %s:%d %s: %d lines\n", fname, func_start, func_name, len }
          else { printf "FUNC    %s:%d %s: %d lines (limit %d)\n", fname, func_start, func_name, len, max_func; found++ }
        }
        func_depth = -1
      }
      head = ""
    } else if (c == ";") {
      if (func_depth < 0) head = ""
    } else if (func_depth < 0) {
      head = head c
    }
  }
  if (func_depth < 0) head = head " "
  lines[FNR] = raw
}
# A function is exempt when one of the 3 lines above its opening line says
# "size-exempt:".
function fn_exempt_line(start,   k) {
  for (k = start; k >= start - 3 && k >= 1; k--) if (lines[k] ~ /size-exempt:/) return 1
  return 0
}
END {
  flush_file()
  if (found) { printf "%d finding(s): split them, or say in one line why (\"size-exempt: <reason>\")\n", found; exit 1 }
}
' $files
