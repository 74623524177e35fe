#!/bin/sh
# tools/check-calls.sh [BUILD] — the direction of calls between source files,
# read from the object files' symbols (nm) under BUILD/obj (default build):
#
# - no two files of ps/, common/, proto/, worker/, statsd/ and invertd/ call
#   each other (a calls a function b defines, and b one of a's), and no
#   longer circle of calls either (a -> b -> c -> a: each file's callers
#   and callees form a hierarchy);
# - no upward call: a file in common/<layer>/ calls only its own layer and
#   the ones below (common/base < nn < kfac < backend < run < net, the
#   include rule of tools/check-layers.sh), never a daemon's folder; proto/
#   calls only proto/.
#
# Calls through function pointers (callbacks: the pool's work and done
# functions, the client skeleton's role table, libuv's and zloop's
# handlers) are not symbols and are not seen; docs/architecture.md lists
# them. Prints one line per violation (caller -> callee: the symbols) and
# exits 1 if there was any, 2 when BUILD/obj has no object files, else 0.
set -eu
build=${1:-build}
obj=$build/obj
[ -d "$obj" ] || { echo "check-calls: no $obj: build first (make BUILD=$build)"; exit 2; }
list=$(cd "$obj" && find common proto ps worker statsd invertd -name '*.o' 2>/dev/null | sort)
[ -n "$list" ] || { echo "check-calls: no object files under $obj"; exit 2; }
for o in $list; do
  f=${o%.o}
  nm "$obj/$o" 2>/dev/null | awk -v f="$f" '$2 ~ /^[TDBR]$/ { print "D", f, $3 } $1 == "U" { print "U", f, $2 }'
done | awk '
function rank(f,  p) {
  split(f, p, "/")
  if (p[1] == "proto") return -1
  if (p[1] != "common") return 100
  if (p[2] == "base") return 0; if (p[2] == "nn") return 1; if (p[2] == "kfac") return 2
  if (p[2] == "backend") return 3; if (p[2] == "run") return 4; if (p[2] == "net") return 5
  return 100
}
$1 == "D" { def[$3] = $2; next }
{ nu++; uf[nu] = $2; us[nu] = $3 }
END {
  for (i = 1; i <= nu; i++) {
    d = def[us[i]]
    if (d == "" || d == uf[i]) continue
    k = uf[i] " " d
    syms[k] = syms[k] (syms[k] == "" ? "" : ", ") us[i]
    e[k] = 1
  }
  bad = 0
  for (k in e) {
    split(k, a, " ")
    if ((a[2] " " a[1]) in e && a[1] < a[2]) {
      printf "%s <-> %s: %s calls %s; %s calls %s (one of them must go through the other direction or a callback)\n",
        a[1], a[2], a[1], syms[k], a[2], syms[a[2] " " a[1]]
      bad = 1
    }
    ra = rank(a[1]); rb = rank(a[2])
    split(a[1], pa, "/"); split(a[2], pb, "/")
    if ((pa[1] == "common" || pa[1] == "proto") && rb > ra && !(ra == -1 && rb == -1)) {
      printf "%s -> %s: an upward call (%s); common/ calls its own layer and the ones below, proto/ only proto/\n",
        a[1], a[2], syms[k]
      bad = 1
    }
  }
  # circles of three files or more (pairs are named above): a depth-first
  # search from each file for a path of calls back to it; each circle is
  # named once, from its smallest file name
  for (k in e) { split(k, a, " "); if (a[1] != a[2]) { nadj[a[1]]++; adj[a[1], nadj[a[1]]] = a[2] } }
  for (f in nadj) {
    delete seen
    path = f
    if (s_circle(f, f, 0)) { printf "circle: %s (each calls the next: one call must go the other way or through a callback)\n", cpath; bad = 1 }
  }
  exit bad
}
# s_circle(start, node, depth): 1 when a path of calls from node leads back
# to start through at least 2 other files, none smaller than start (so a
# circle is found once), with the path in cpath
function s_circle(start, node, depth,   i, nx, save) {
  seen[node] = 1
  for (i = 1; i <= nadj[node]; i++) {
    nx = adj[node, i]
    if (nx == start && depth >= 2) { cpath = path " -> " start; return 1 }
    if (nx in seen || nx < start) continue
    save = path
    path = path " -> " nx
    if (s_circle(start, nx, depth + 1)) return 1
    path = save
  }
  return 0
}'
