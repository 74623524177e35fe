#!/bin/sh
# tools/check-fields.sh [-v] [DIR] — one writer per field of kfac-ps's
# state: every direct write of a field through the server pointer
# (`s->X = ...`, `s->X += ...`, `s->X++`, `--s->X`, `s->X.y = ...`,
# `s->X[i]++`) in DIR/ps/*.c (default: this tree) is listed by file, and a
# field written from two files is a violation: a field of ps_server_t
# belongs to one unit, and the others change it through that unit's
# functions (ps/counters.h for the counters, ps/life.h for the life cycle,
# ps/round_state.h for the round, ps_jobs_* for the job ids).
#
# What it cannot see: writes through a pointer handed to a function
# (`ps_counters_bump(&s->ctr, ...)`, `ps_peers_add(&s->peers, ...)`): those
# are the owning unit's own functions, which is the point; and writes
# through a field that is a pointer (`s->jobs->next_id++`, also
# `++s->jobs->wait_seq`): a unit's state behind an opaque pointer
# (ps_report_t, ps_jobs_t, ps_persist_t) can be written only by the .c file
# that defines its struct, which the compiler enforces. Comments and
# string literals on one line are skipped. No allowlist: every field
# passes today.
#
# Prints one line per violation (the field and the files) and exits 1 if
# there was any, 2 when DIR/ps has no .c files, else 0. With -v it also
# lists every field written and its writers.
set -eu
verbose=0
[ "${1:-}" = -v ] && { verbose=1; shift; }
dir=${1:-.}
[ -n "$(ls "$dir"/ps/*.c 2>/dev/null)" ] || { echo "check-fields: no $dir/ps/*.c"; exit 2; }
for f in "$dir"/ps/*.c; do
  b=${f##*/}
  # Strip comments and string literals crudely: block comments on one line,
  # then "..." strings; a write inside a comment is not a write.
  sed -e 's://.*$::' -e 's:/\*.*\*/::g' -e 's/"[^"]*"//g' "$f" |
    grep -oE '(\+\+|--)s->[A-Za-z_][A-Za-z_0-9]*(\[[^]]*\]|\.[A-Za-z_][A-Za-z_0-9]*)*(->)?|s->[A-Za-z_][A-Za-z_0-9]*(\[[^]]*\]|\.[A-Za-z_][A-Za-z_0-9]*)*[[:space:]]*([-+*/|&^]?=[^=]|\+\+|--)' |
    grep -vE -- '->$' |
    sed -E 's/^(\+\+|--)//; s/^s->([A-Za-z_][A-Za-z_0-9]*).*/\1/' |
    sort -u | sed "s|^|$b |"
done | awk -v verbose="$verbose" '
{ if (!((($2) SUBSEP ($1)) in seen)) { seen[$2, $1] = 1; w[$2] = w[$2] (w[$2] == "" ? "" : " ") $1; n[$2]++ } }
END {
  bad = 0
  for (k in w) {
    if (verbose) printf "%s: %s\n", k, w[k]
    if (n[k] > 1) { printf "s->%s is written from %d files: %s (one unit owns it; the others call its functions)\n", k, n[k], w[k]; bad = 1 }
  }
  exit bad
}'
