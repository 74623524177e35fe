#!/bin/sh
# tests/integration/05-layers.sh — the include rule of docs/architecture.md
# ("Layers") holds for the whole tree, and tools/check-layers.sh really
# catches each kind of violation: a lower layer including a higher one, a
# common layer other than net including proto/, protobuf-c outside proto/,
# one daemon including another, and a file directly in common/.
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
printf '#include "proto/msg.h"\n#include "common/kfac/kfac_opt.h"\n' >"$dir/common/net/ok.c"
sh tools/check-layers.sh "$dir" >/dev/null 2>&1 || { echo "05-layers: FAIL: a clean synthetic tree was rejected"; fails=$((fails + 1)); }
[ "$fails" = 0 ] || exit 1
echo "05-layers: ok: $(printf '%s' "$out" | sed 's/^check-layers: //'); 5 kinds of violation caught ($(($(date +%s) - t0))s)"
