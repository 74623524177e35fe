#!/bin/sh
# tools/check-layers.sh [ROOT] — check every #include "..." of the C sources
# against the layer rule of docs/architecture.md ("Layers"):
#
#   common/base < common/nn < common/kfac < common/backend < common/run < common/net
#
# - a file in common/<layer>/ includes only its own layer and the ones below;
# - proto/ includes only proto/; only common/net/ of the common layers may
#   include proto/ headers;
# - protobuf-c's own headers and the generated kfac.pb-c.h are included only
#   inside proto/;
# - a daemon folder (ps worker statsd invertd) includes common/, proto/ and
#   itself, never another daemon; tools/ includes common/, proto/ and its own parts (tools/poke/) only;
# - ps/round_int.h (the fields of ps_round_t) is included only by the
#   round's own files, ps/round.c, ps/round_push.c and ps/round_state.c;
# - no two headers of those folders have the same basename.
# tests/ and bench/ may include anything. Prints one line per violation
# (file:line: what, and the rule) and exits 1 if there was any, else 0.
set -eu
root=${1:-.}
cd "$root"
files=$(find common proto ps worker statsd invertd tools -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) 2>/dev/null | sort)
rank() { # layer -> its position, or nothing
  case $1 in base) echo 0 ;; nn) echo 1 ;; kfac) echo 2 ;; backend) echo 3 ;; run) echo 4 ;; net) echo 5 ;; esac
}
bad=0
for f in $files; do
  dir=${f%%/*}
  layer=; lr=
  if [ "$dir" = common ]; then
    layer=$(echo "$f" | cut -d/ -f2)
    lr=$(rank "$layer")
    if [ -z "$lr" ]; then
      echo "$f: a file directly in common/ or in an unknown folder: put it in one of common/{base,nn,kfac,backend,run,net}/"
      bad=1; continue
    fi
  fi
  # Each include: line number and target.
  grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]' "$f" | sed 's/^\([0-9]*\):[^<"]*\([<"]\)\([^>"]*\)[>"].*/\1 \2 \3/' |
  while read -r line delim inc; do
    why=
    case $inc in
      protobuf-c/*|*.pb-c.h)
        [ "$dir" = proto ] || why="protobuf-c types stay in proto/: use proto/msg.h" ;;
      ps/round_int.h)
        case $f in ps/round.c|ps/round_push.c|ps/round_state.c|ps/round_int.h) ;;
          *) why="the round's fields are private to ps/round.c, ps/round_push.c and ps/round_state.c: read it through ps/round_state.h's getters" ;;
        esac ;;
    esac
    if [ -z "$why" ]; then
      idir=${inc%%/*}
      [ "$delim" = '"' ] || continue      # <system> headers
      [ "$idir" = "$inc" ] && continue   # a bare name
      case $dir in
        common)
          case $idir in
            common)
              il=$(echo "$inc" | cut -d/ -f2); ir=$(rank "$il")
              if [ -z "$ir" ]; then why="no such layer common/$il"
              elif [ "$ir" -gt "$lr" ]; then why="common/$layer may not include common/$il (a higher layer)"; fi ;;
            proto) [ "$layer" = net ] || why="only common/net may include proto/" ;;
            *) why="common/ may not include $idir/" ;;
          esac ;;
        proto)
          [ "$idir" = proto ] || why="proto/ includes only proto/" ;;
        ps|worker|statsd|invertd)
          case $idir in common|proto|"$dir") ;; *) why="$dir/ may include common/, proto/ and $dir/ only" ;; esac ;;
        tools)
          case $idir in common|proto|tools) ;; *) why="tools/ may include common/, proto/ and its own parts only" ;; esac ;;
      esac
    fi
    if [ -n "$why" ]; then echo "$f:$line: #include \"$inc\": $why"; echo x >>"${TMPDIR:-/tmp}/kfac-layers.$$"; fi
  done
done
if [ -s "${TMPDIR:-/tmp}/kfac-layers.$$" ]; then
  n=$(wc -l <"${TMPDIR:-/tmp}/kfac-layers.$$"); rm -f "${TMPDIR:-/tmp}/kfac-layers.$$"
  echo "check-layers: $n include(s) against the layer rule (docs/architecture.md, \"Layers\")"
  exit 1
fi
rm -f "${TMPDIR:-/tmp}/kfac-layers.$$"
# No two headers share a basename (ps/wire.h beside common/net/wire.h reads
# as one unit in a log, a debugger or a grep for "wire.h").
dups=$(printf '%s\n' "$files" | grep '\.h$' | sed 's#.*/##' | sort | uniq -d)
for h in $dups; do
  echo "$(printf '%s\n' "$files" | grep "/$h\$" | tr '\n' ' ')share the header name $h: rename one (one name per unit, docs/architecture.md)"
  bad=1
done
[ "$bad" = 0 ] || exit 1
echo "check-layers: $(echo "$files" | wc -l) files follow the layer rule"
