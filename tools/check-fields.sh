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
# The same rule for a peer's fields (ps_peer_t, ps/peers.h): every write
# through a peer pointer, which ps/ names `p` (`p->X = ...`, `p->X++`,
# `p->mb.X = ...`), is listed by file, and a peer field written from two
# files is a violation. The member record `p->mb` (ps_member_rec_t) has a
# fixed owner besides: its fields are written in ps/member.c only, through
# the transitions of ps/member.h; the liveness, place and counts of a peer
# in ps/peers.c only. What a member's identity has done (`p->ident->X`,
# ps/ident.h) is written in ps/ident.c only.
#
# The curvature thread's state (ps/curv.h: the running factor averages
# and their versions, the statistics guard's histories, the probes) is
# changed through functions, not fields: those functions
# (kfac_opt_fold, kfac_opt_block_job*, ps_stats_guard_check/accept,
# ps_verify_cut/check/forget) may be called in ps/curv.c only, which runs
# them on that thread, and the statistics guard's in ps/round_push.c too,
# where a GradPush's statistics are judged under ps_curv_lock.
#
# Prints one line per violation (the field and the files) and exits 1 if
# there was any, 2 when DIR/ps has no .c files, else 0. With -v it also
# lists every field written and its writers.
set -eu
verbose=0
[ "${1:-}" = -v ] && { verbose=1; shift; }
dir=${1:-.}
[ -n "$(ls "$dir"/ps/*.c 2>/dev/null)" ] || { echo "check-fields: no $dir/ps/*.c"; exit 2; }
# writes PTR KEEP: "file field" for every write through PTR-> in ps/*.c;
# KEEP is a sed pattern of the part of the field's path kept as its name
# (the first member; for a peer, `mb.X` stays `mb.X`).
writes() {
  ptr=$1
  for f in "$dir"/ps/*.c; do
    b=${f##*/}
    # Strip comments and string literals crudely: block comments on one
    # line, then "..." strings; a write inside a comment is not a write.
    sed -e 's://.*$::' -e 's:/\*.*\*/::g' -e 's/"[^"]*"//g' "$f" |
      grep -oE "(\\+\\+|--)\\b$ptr->[A-Za-z_][A-Za-z_0-9]*(\\[[^]]*\\]|\\.[A-Za-z_][A-Za-z_0-9]*)*(->)?|\\b$ptr->[A-Za-z_][A-Za-z_0-9]*(\\[[^]]*\\]|\\.[A-Za-z_][A-Za-z_0-9]*)*[[:space:]]*([-+*/|&^]?=[^=]|\\+\\+|--)" |
      grep -vE -- '->$' |
      sed -E "s/^(\\+\\+|--)//; s/^$ptr->//; $2" |
      sort -u | sed "s|^|$b |"
  done
}
# check PTR OWNERS: one line per violation; OWNERS is "prefix=file ..."
# (a field whose name starts with prefix may be written from file only).
check() {
  awk -v verbose="$verbose" -v ptr="$1" -v owners="$2" '
  BEGIN { n_own = split(owners, own, " ") }
  { if (!((($2) SUBSEP ($1)) in seen)) { seen[$2, $1] = 1; w[$2] = w[$2] (w[$2] == "" ? "" : " ") $1; n[$2]++; f[$2, n[$2]] = $1 } }
  END {
    bad = 0
    for (k in w) {
      if (verbose) printf "%s->%s: %s\n", ptr, k, w[k]
      if (n[k] > 1) { printf "%s->%s is written from %d files: %s (one unit owns it; the others call its functions)\n", ptr, k, n[k], w[k]; bad = 1; continue }
      for (i = 1; i <= n_own; i++) {
        split(own[i], po, "=")
        if ((po[1] == "*" || index(k, po[1]) == 1) && f[k, 1] != po[2]) { printf "%s->%s is written from %s: its owner is %s\n", ptr, k, f[k, 1], po[2]; bad = 1 }
      }
    }
    exit bad
  }'
}
st=0
writes s 's/^([A-Za-z_][A-Za-z_0-9]*).*/\1/' | check s "" || st=1
writes p 's/^(mb\.[A-Za-z_][A-Za-z_0-9]*|[A-Za-z_][A-Za-z_0-9]*).*/\1/' | check p "mb.=member.c" || st=1
writes 'p->ident' 's/^([A-Za-z_][A-Za-z_0-9]*).*/\1/' | check 'p->ident' "*=ident.c" || st=1
# curv_calls: "file function" for every call of the curvature thread's
# functions in ps/*.c, comments and strings skipped
for f in "$dir"/ps/*.c; do
  b=${f##*/}
  sed -e 's://.*$::' -e 's:/\*.*\*/::g' -e 's/"[^"]*"//g' "$f" |
    grep -oE '\b(kfac_opt_fold|kfac_opt_block_job(_at)?|ps_stats_guard_(check|accept)|ps_verify_(cut|check|forget))[[:space:]]*\(' |
    sed -E 's/[[:space:]]*\($//' | sort -u | sed "s|^|$b |"
done | awk '
  $1 == "curv.c" || $1 == "stats_guard.c" || $1 == "verify.c" { next } # the thread, and the definitions
  $1 == "round_push.c" && $2 ~ /^ps_stats_guard_/ { next }
  { printf "%s is called in %s: the curvature thread owns what it changes (call it in ps/curv.c, ps/curv.h)\n", $2, $1; bad = 1 }
  END { exit bad }' || st=1
exit $st
