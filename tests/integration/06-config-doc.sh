#!/bin/sh
# tests/integration/06-config-doc.sh — what the documentation says about
# options is what the programs do:
#   1. docs/configuration.md's reference tables are the programs' own
#      --help: tools/config-doc.sh regenerates them and any difference (a
#      key added, renamed or re-described without the page) fails, naming
#      the fix;
#   2. every option named in README.md, docs/ and deploy/ exists in the
#      option table (the union of every program's --help): each
#      `--section.key` ('-' and '_' alike), each `[section] key` in an
#      inline code span, and each `key = value` under a `[section]` line in
#      a code block;
#   3. every command in a code block of README.md and docs/ that starts
#      with `deploy/kfac-launch` or `build/kfac-` (after VAR=value
#      assignments) passes the checks a start would make: kfac-launch
#      --check, a program's --dump-config. Configuration files the docs
#      write with `cat > /tmp/NAME <<'EOF'` are written (into a temporary
#      folder) first; --help and --version are not configuration commands;
#      the few commands that show a refusal are listed below, each with
#      why;
#   4. every example configuration in deploy/examples/ passes kfac-launch
#      --check.
# DOC_CHECK_ROOT=DIR checks the documents of DIR instead (a copy with a
# planted mistake: the check must fail there).
set -u
BUILD=${BUILD:-build}
root=${DOC_CHECK_ROOT:-.}
t0=$(date +%s)
out=$(mktemp "${TMPDIR:-/tmp}/kfac-config-doc-test.XXXXXX") || exit 1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kfac-config-doc.XXXXXX") || exit 1
trap 'rm -rf "$out" "$out.page" "$tmp"' EXIT
fail=0
bad() { echo "06-config-doc: FAIL: $*"; fail=1; }
bin=$(cd "$BUILD" && pwd) || exit 1

# ---- 1. the reference tables ---------------------------------------------------
sh tools/config-doc.sh "$BUILD" >"$out" || { echo "06-config-doc: FAIL: tools/config-doc.sh failed"; exit 1; }
awk '/^## Reference/ { ref = 1 } ref && /^### \[/ { go = 1 } go { print }' "$root/docs/configuration.md" >"$out.page"
[ "$(grep -c '^| `' "$out")" -ge 50 ] || { echo "06-config-doc: FAIL: fewer than 50 keys generated"; exit 1; }
if ! diff -u "$out.page" "$out" >&2; then
  bad "docs/configuration.md's reference differs from the programs' --help (above: - page, + programs); run: sh tools/config-doc.sh $BUILD --write"
fi
n_ref=$(grep -c '^| `' "$out")

# ---- 2. every option named exists ----------------------------------------------------
table=$(for b in "$bin"/kfac-*; do
  [ -x "$b" ] && [ -f "$b" ] && "$b" --help 2>/dev/null | sed -n 's/^  --\([a-z0-9_]*\.[a-z0-9_]*\)[= ].*/\1/p'
done | sort -u)
[ "$(printf '%s\n' "$table" | grep -c .)" -ge 100 ] || { echo "06-config-doc: FAIL: fewer than 100 options in the programs' --help"; exit 1; }
sections=" $(printf '%s\n' "$table" | cut -d. -f1 | sort -u | tr '\n' ' ')"
docs="$root/README.md $(ls "$root"/docs/*.md)"
files="$docs $(find "$root/deploy" -type f ! -name '*.tar*' | sort)"
in_table() { printf '%s\n' "$table" | grep -qx "$1"; }
n_named=0
# (a) --section.key; "--section.key" itself is the placeholder of usage lines
# shellcheck disable=SC2086 # the file list
for k in $(grep -oh -- '--[a-z][a-z0-9_-]*\.[a-z][a-z0-9_-]*' $files | sed 's/^--//; s/-/_/g' | sort -u); do
  [ "$k" = section.key ] && continue
  n_named=$((n_named + 1))
  in_table "$k" || bad "--$k is in no program's option table: $(grep -lw -e "--$k" -e "--$(printf '%s' "$k" | tr _ -)" $files | tr '\n' ' ')"
done
# (b) `[section] key` in an inline code span (the key ends the span or is
# followed by a space or a comma; "[data] idx:" is a log line)
# shellcheck disable=SC2086
for k in $(grep -oh '`\[[a-z_]*\] [a-z_][a-z0-9_]*[` ,]' $files | sed 's/^`\[//; s/\] /./; s/[` ,]$//' | sort -u); do
  case $sections in *" ${k%%.*} "*) ;; *) continue ;; esac
  n_named=$((n_named + 1))
  in_table "$k" || bad "[${k%%.*}] ${k#*.} is in no program's option table: $(grep -lw "\[${k%%.*}\] ${k#*.}" $files | tr '\n' ' ')"
done
# (c) key = value under a [section] line in a code block
for f in $docs; do
  awk -v secs="$sections" '/^ *```/ { inb = !inb; sec = ""; next }
    inb { l = $0; sub(/^ +/, "", l)
      if (l ~ /^\[[a-z_]+\]$/) { s = substr(l, 2, length(l) - 2); sec = index(secs, " " s " ") ? s : ""; next }
      if (l == "EOF") sec = ""
      if (sec != "" && l ~ /^[a-z_][a-z0-9_]* *=/) { k = l; sub(/ *=.*/, "", k); print FILENAME ":" NR " " sec "." k } }' "$f"
done >"$tmp/ini-keys"
while read -r loc k; do
  n_named=$((n_named + 1))
  in_table "$k" || bad "$loc: [${k%%.*}] ${k#*.} = ... is in no program's option table"
done <"$tmp/ini-keys"

# ---- 3. the documents' commands pass the start-up checks -----------------------------------
# Commands shown failing on purpose (file: a part of the command line, why).
exempt="docs/deployment.md:deploy/kfac-launch my-run.ini --check:shows kfac-invertd rejecting a typo"
# The configuration files the documents write with a here-document.
for f in $docs; do
  awk -v dir="$tmp" '/^ *```/ { inb = !inb; next }
    inb && !w && match($0, /cat > \/tmp\/[a-z0-9_.-]+ <</) {
      p = substr($0, RSTART + 6, RLENGTH - 9); sub(/.*\//, "", p); w = dir "/" p; printf "" > w; next }
    w && $0 == "EOF" { close(w); w = ""; next }
    w { print > w }' "$f"
done
for f in $docs; do
  awk '/^ *```/ { inb = !inb; next }
    inb { l = $0
      while (l ~ /\\$/ && (getline nxt) > 0) { sub(/\\$/, "", l); l = l " " nxt }
      sub(/^ +/, "", l)
      c = l; while (c ~ /^[A-Z_][A-Z0-9_]*=[^ ]* /) sub(/^[A-Z_][A-Z0-9_]*=[^ ]* +/, "", c)
      if (c ~ /^(deploy\/kfac-launch|build\/kfac-)/) print FILENAME "\t" l }' "$f"
done >"$tmp/commands"
n_cmd=0
n_skip=0
while IFS='	' read -r f line; do
  rel=${f#"$root"/}
  # one command: up to a comment, a pipe, a redirection, a list or a background &
  c=$(printf '%s\n' "$line" | sed -e 's/"\$([^)]*)"/tcp:\/\/127.0.0.1:5555/g' -e 's/ #.*//' -e 's/ *[;|&>].*//')
  case " $c " in *" --help "* | *" -h "* | *" --version "*) n_skip=$((n_skip + 1)); continue ;; esac
  skip=0
  old_ifs=$IFS
  IFS='
'
  for e in $exempt; do
    case "$rel" in "${e%%:*}") ;; *) continue ;; esac
    what=${e#*:}
    what=${what%%:*}
    case $c in *"$what"*) skip=1 ;; esac
  done
  IFS=$old_ifs
  [ "$skip" = 1 ] && { n_skip=$((n_skip + 1)); continue; }
  n_cmd=$((n_cmd + 1))
  c=$(printf '%s\n' "$c" | sed -e "s|/tmp/\([a-z0-9_.-]*\.ini\)|$tmp/\1|g" -e "s|^\(.*\)build/kfac-|\1$bin/kfac-|")
  case $c in
    *deploy/kfac-launch*) run="$c --check" ;;
    *) run="$c --dump-config" ;;
  esac
  [ -n "${DOC_CHECK_VERBOSE:-}" ] && echo "run: $run"
  if ! (export S="" OUT="$tmp/out" ID=1 KFAC_BIN="$bin"; sh -c "$run") >"$tmp/cmd.log" 2>&1; then
    bad "$rel: '$line' fails its checks: $(grep -v '^ *$' "$tmp/cmd.log" | tail -n 3 | tr '\n' ' ')"
  fi
done <"$tmp/commands"
[ "$n_cmd" -ge 20 ] || bad "only $n_cmd commands found in the documents' code blocks"

# ---- 4. the example configurations ---------------------------------------------------------
n_ex=0
for e in "$root"/deploy/examples/*.ini; do
  n_ex=$((n_ex + 1))
  KFAC_BIN="$bin" sh deploy/kfac-launch "$e" --check >"$tmp/ex.log" 2>&1 ||
    bad "${e#"$root"/} does not pass kfac-launch --check: $(tail -n 3 "$tmp/ex.log" | tr '\n' ' ')"
done

[ "$fail" = 0 ] || exit 1

# ---- the checks can fail: a copy of the documents with one planted mistake of each kind ----
if [ -z "${DOC_CHECK_ROOT:-}" ]; then
  p=$tmp/planted
  mkdir -p "$p" && cp -r README.md docs deploy "$p/" || exit 1
  printf '\nSet `--kfac.dampin 0.1` and `[ps] eval_every`.\n\n```ini\n[kfac]\nwd_mode = gradient\n```\n' >>"$p/docs/scaling.md"
  printf '\n```sh\ndeploy/kfac-launch deploy/examples/mnist-mlp-sgd.ini --ps.aggregate median --cluster.workers 2\n```\n' \
    >>"$p/docs/operations.md"
  printf '[ps]\naggregate = median\n' >>"$p/deploy/examples/mnist-mlp-sgd.ini"
  DOC_CHECK_ROOT=$p BUILD="$BUILD" sh "$0" >"$tmp/planted.log" 2>&1 && bad "the planted mistakes passed the check"
  for want in "--kfac.dampin is in no program" "\\[ps\\] eval_every is in no program" "\\[kfac\\] wd_mode = ... is in no" \
    "docs/operations.md: 'deploy/kfac-launch deploy/examples/mnist-mlp-sgd.ini --ps.aggregate median" \
    "deploy/examples/mnist-mlp-sgd.ini does not pass"; do
    grep -q -- "$want" "$tmp/planted.log" || bad "the planted mistake '$want' was not reported: $(cat "$tmp/planted.log")"
  done
  [ "$fail" = 0 ] || exit 1
  planted="; 5 planted mistakes caught"
fi
echo "06-config-doc: ok: $n_ref keys in docs/configuration.md match the programs' --help; $n_named option names in the documents exist; $n_cmd commands from their code blocks pass --check or --dump-config ($n_skip --help or shown failing); $n_ex example configurations pass --check${planted:-} ($(($(date +%s) - t0))s)"
