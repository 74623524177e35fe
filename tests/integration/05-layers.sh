#!/bin/sh
# tests/integration/05-layers.sh — the include rule of docs/architecture.md
# ("Layers") holds for the whole tree, and tools/check-layers.sh really
# catches each kind of violation: a lower layer including a higher one, a
# common layer other than net including proto/, protobuf-c outside proto/,
# one daemon including another, a file directly in common/, and two
# headers of one name. Then the
# call rule of tools/check-calls.sh on the build's object files, and the
# one-writer rule of kfac-ps's state (tools/check-fields.sh) on the tree
# and on two planted files that write the same field.
set -u
t0=$(date +%s)
out=$(sh tools/check-layers.sh 2>&1) || { echo "05-layers: FAIL: the tree breaks the layer rule:"; echo "$out"; exit 1; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/kfac-layers.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/common/base" "$dir/common/kfac" "$dir/common/net" "$dir/proto" "$dir/ps" "$dir/worker"
printf '#include "common/base/log.h"\n' >"$dir/common/kfac/ok.c"
# Each case: file, its text, and what the checker must name.
fails=0
try() { # file text expected-substring
  rm -f "$dir/common/kfac/bad.c" "$dir/common/base/bad.c" "$dir/common/kfac/bad2.c" "$dir/ps/bad.c" "$dir/common/bad.c"
  printf '%s\n' "$2" >"$dir/$1"
  if o=$(sh tools/check-layers.sh "$dir" 2>&1); then
    echo "05-layers: FAIL: $1 with '$2' passed the checker"; fails=$((fails + 1))
  elif ! printf '%s' "$o" | grep -q "$3"; then
    echo "05-layers: FAIL: $1: expected a line naming '$3', got: $o"; fails=$((fails + 1))
  fi
}
try common/base/bad.c  '#include "common/kfac/kfac_opt.h"' 'common/base may not include common/kfac'
try common/kfac/bad.c  '#include "proto/msg.h"'            'only common/net may include proto/'
try common/kfac/bad2.c '#include <protobuf-c/protobuf-c.h>' 'protobuf-c types stay in proto/'
try ps/bad.c           '#include "worker/worker.h"'        'ps/ may include common/, proto/ and ps/ only'
try common/bad.c       '#include "common/base/log.h"'      'a file directly in common/'
rm -f "$dir/common/bad.c" "$dir/ps/bad.c"
printf '/* a */\n' >"$dir/common/net/wire.h"; printf '/* b */\n' >"$dir/ps/wire.h"
if o=$(sh tools/check-layers.sh "$dir" 2>&1); then
  echo "05-layers: FAIL: two headers named wire.h passed the checker"; fails=$((fails + 1))
elif ! printf '%s' "$o" | grep -q "share the header name wire.h"; then
  echo "05-layers: FAIL: two headers named wire.h: expected a line naming them, got: $o"; fails=$((fails + 1))
fi
rm -f "$dir/common/net/wire.h" "$dir/ps/wire.h"
printf '#include "proto/msg.h"\n#include "common/kfac/kfac_opt.h"\n' >"$dir/common/net/ok.c"
sh tools/check-layers.sh "$dir" >/dev/null 2>&1 || { echo "05-layers: FAIL: a clean synthetic tree was rejected"; fails=$((fails + 1)); }
# The call rule (tools/check-calls.sh, from the object files of $BUILD):
# the tree's own build passes; two planted files that call each other, a
# planted circle of three and a planted upward call are caught.
BUILD=${BUILD:-build}
calls="not checked (no $BUILD/obj)"
if [ -d "$BUILD/obj/ps" ]; then
  o=$(sh tools/check-calls.sh "$BUILD" 2>&1) || { echo "05-layers: FAIL: the build breaks the call rule:"; echo "$o"; exit 1; }
  cc=${CC:-cc}
  ob=$dir/build/obj
  mkdir -p "$ob/ps" "$ob/common/base" "$ob/common/net"
  printf 'int b_fn(void);
int a_fn(void) { return b_fn(); }
' >"$dir/a.c"
  printf 'int a_fn(void);
int b_fn(void) { return 1; }
int b_other(void) { return a_fn(); }
' >"$dir/b.c"
  printf 'int net_fn(void);
int base_fn(void) { return net_fn(); }
' >"$dir/x.c"
  printf 'int net_fn(void) { return 2; }
' >"$dir/y.c"
  # a circle of three: p -> q -> r -> p
  printf 'int q_fn(void);
int p_fn(void) { return q_fn(); }
' >"$dir/p.c"
  printf 'int r_fn(void);
int q_fn(void) { return r_fn(); }
' >"$dir/q.c"
  printf 'int p_fn(void);
int r_fn(void) { return p_fn(); }
' >"$dir/r.c"
  if "$cc" -c -o "$ob/ps/a.o" "$dir/a.c" && "$cc" -c -o "$ob/ps/b.o" "$dir/b.c" &&
    "$cc" -c -o "$ob/common/base/x.o" "$dir/x.c" && "$cc" -c -o "$ob/common/net/y.o" "$dir/y.c" &&
    "$cc" -c -o "$ob/ps/p.o" "$dir/p.c" && "$cc" -c -o "$ob/ps/q.o" "$dir/q.c" && "$cc" -c -o "$ob/ps/r.o" "$dir/r.c"; then
    if o=$(sh tools/check-calls.sh "$dir/build" 2>&1); then
      echo "05-layers: FAIL: planted mutual and upward calls passed tools/check-calls.sh"; exit 1
    fi
    printf '%s' "$o" | grep -q '^ps/a <-> ps/b: ' || { echo "05-layers: FAIL: the mutual calls were not named: $o"; exit 1; }
    printf '%s' "$o" | grep -q '^common/base/x -> common/net/y: an upward call' ||
      { echo "05-layers: FAIL: the upward call was not named: $o"; exit 1; }
    printf '%s' "$o" | grep -q '^circle: ps/p -> ps/q -> ps/r -> ps/p ' ||
      { echo "05-layers: FAIL: the circle of three files was not named: $o"; exit 1; }
    [ "$(printf '%s\n' "$o" | grep -c '^circle:')" = 1 ] || { echo "05-layers: FAIL: a circle named more than once: $o"; exit 1; }
    calls="no two files call each other, no circle, no upward call; 3 planted violations caught"
  else
    calls="not checked (no C compiler for the planted files)"
  fi
fi
# The one-writer rule (tools/check-fields.sh): the tree passes; a field
# written from two planted files is named, a write in one file and reads
# (or a comparison, a comment, a write through a pointer field) in another
# are not.
o=$(sh tools/check-fields.sh . 2>&1) || { echo "05-layers: FAIL: a field of ps_server_t is written from two files:"; echo "$o"; exit 1; }
fd=$dir/fields
mkdir -p "$fd/ps"
printf 'void a(struct ps_server *s) { s->planted = 1; s->mine++; }\n' >"$fd/ps/a.c"
printf 'int b(struct ps_server *s) { s->planted += 2; /* s->mine = 3; */ ++s->mine->n; s->mine->m = 1; return s->mine == 1 ? s->mine : 0; }\n' >"$fd/ps/b.c"
if o=$(sh tools/check-fields.sh "$fd" 2>&1); then
  echo "05-layers: FAIL: a field written from two planted files passed tools/check-fields.sh"; exit 1
fi
printf '%s' "$o" | grep -q '^s->planted is written from 2 files: a.c b.c' ||
  { echo "05-layers: FAIL: the field written twice was not named: $o"; exit 1; }
if printf '%s' "$o" | grep -q 's->mine'; then echo "05-layers: FAIL: reads, or writes through a pointer field, were counted as writes: $o"; exit 1; fi
# The curvature thread's functions: called outside ps/curv.c they are
# named; the same call in a comment, or the guard under the lock in
# round_push.c, is not.
rm -f "$fd/ps/a.c" "$fd/ps/b.c"
printf 'void c(void *k) { kfac_opt_fold(k, 0, 1); ps_verify_cut(0, 0, 0, 0, 0, 0); }\n' >"$fd/ps/curv.c"
printf 'void j(void *k) { /* kfac_opt_fold(k) */ int rc = kfac_opt_block_job_at (k, 0, 0.1, 0, 0, 0); (void)rc; }\n' >"$fd/ps/jobs.c"
printf 'void g(void *x) { ps_stats_guard_check(x, 0, 0, 0, 0, 0, 0); }\n' >"$fd/ps/round_push.c"
if o=$(sh tools/check-fields.sh "$fd" 2>&1); then
  echo "05-layers: FAIL: a curvature-thread call planted in jobs.c passed tools/check-fields.sh"; exit 1
fi
printf '%s' "$o" | grep -q '^kfac_opt_block_job_at is called in jobs.c' ||
  { echo "05-layers: FAIL: the planted call was not named: $o"; exit 1; }
if printf '%s' "$o" | grep -qE '^kfac_opt_fold |called in (curv|round_push)\.c'; then
  echo "05-layers: FAIL: curv.c's own calls, a comment or the guard in round_push.c were counted: $o"; exit 1
fi
rm -f "$fd/ps/curv.c" "$fd/ps/jobs.c" "$fd/ps/round_push.c"
# A peer's fields: a second writer of a peer field, and a member-record
# field written outside ps/member.c, are named; member.c's own writes and
# reads elsewhere are not.
rm -f "$fd/ps/a.c" "$fd/ps/b.c"
printf 'void m(struct ps_peer *p) { p->mb.wait = 1; p->mb.pushed = 1; p->present = 0; }\n' >"$fd/ps/member.c"
printf 'int r(struct ps_peer *p) { p->mb.member = 1; p->present++; return p->mb.pushed == 1 || p->mb.wait; }\n' >"$fd/ps/round.c"
if o=$(sh tools/check-fields.sh "$fd" 2>&1); then
  echo "05-layers: FAIL: planted peer-field writes passed tools/check-fields.sh"; exit 1
fi
printf '%s' "$o" | grep -q '^p->present is written from 2 files: ' ||
  { echo "05-layers: FAIL: the peer field written twice was not named: $o"; exit 1; }
printf '%s' "$o" | grep -q '^p->mb.member is written from round.c: its owner is member.c' ||
  { echo "05-layers: FAIL: a member-record write outside ps/member.c was not named: $o"; exit 1; }
if printf '%s' "$o" | grep -qE 'p->mb\.(wait|pushed)'; then echo "05-layers: FAIL: member.c's writes or reads elsewhere were counted: $o"; exit 1; fi
fields="one writer per field of kfac-ps's state and of a peer, the member record in ps/member.c only, the curvature thread's functions called in ps/curv.c only; 4 planted violations caught"
[ "$fails" = 0 ] || exit 1
echo "05-layers: ok: $(printf '%s' "$out" | sed 's/^check-layers: //'); 6 kinds of violation caught; calls: $calls; $fields ($(($(date +%s) - t0))s)"
