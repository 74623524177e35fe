#!/bin/sh
# tests/integration/54-figures.sh — tools/kfac-figures redraws the figures
# of docs/experiments.md from the published tables alone (no training, no
# binaries), into a temporary folder: every published study folder with a
# summary.csv gets its per-point figure (steps-and-time-to-target.png with a
# target, speed-and-accuracy.png without), the four headline staleness
# figures of docs/experiments/progress-vs-age/ are drawn, every figure
# --list names exists, and each of them is a non-empty PNG (its magic
# bytes). ages.csv holds one row per point of each study it draws from,
# with the age read from that study's runs.csv. Nothing under docs/ is
# written. Without gnuplot no figure can be drawn: skipped (77).
set -u
name=54-figures
command -v gnuplot >/dev/null 2>&1 || { echo "$name: skipped: gnuplot is not installed (tools/deps.sh installs gnuplot-nox)"; exit 77; }
t0=$(date +%s)
dir=$(mktemp -d "${TMPDIR:-/tmp}/kfac-it.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
trap 'rm -rf "$dir"; exit 130' INT
trap 'rm -rf "$dir"; exit 143' TERM
fail() { echo "$name: FAIL: $*"; [ -r "$dir/log" ] && sed 's/^/  /' "$dir/log"; exit 1; }
docs=docs/experiments
out=$dir/figs
before=$(ls -l --time-style=+%s.%N -R "$docs" | cksum)

sh tools/kfac-figures --docs "$docs" --out "$out" >"$dir/log" 2>&1 || fail "tools/kfac-figures exited with $?"
sh tools/kfac-figures --docs "$docs" --out "$out" --list >"$dir/list" 2>>"$dir/log" || fail "tools/kfac-figures --list failed"
[ "$(ls -l --time-style=+%s.%N -R "$docs" | cksum)" = "$before" ] || fail "it wrote under $docs with --out elsewhere"

# a non-empty PNG: the 8-byte signature 89 50 4e 47 0d 0a 1a 0a
is_png() { [ -s "$1" ] && [ "$(od -An -tx1 -N8 "$1" | tr -d ' \n')" = 89504e470d0a1a0a ]; }

n=0
for d in "$docs"/*/; do
  s=$(basename "$d")
  [ -r "$d/summary.csv" ] || continue
  if is_png "$out/$s/steps-and-time-to-target.png" || is_png "$out/$s/speed-and-accuracy.png"; then n=$((n + 1))
  else fail "no per-point figure of $s (steps-and-time-to-target.png or speed-and-accuracy.png) in $out/$s"
  fi
done
[ "$n" -ge 1 ] || fail "no published study found under $docs"
for k in inverse statistics gradient; do
  is_png "$out/progress-vs-age/steps-vs-$k-age.png" || fail "progress-vs-age/steps-vs-$k-age.png missing or not a PNG"
  grep -qx "$out/progress-vs-age/steps-vs-$k-age.png" "$dir/list" || fail "--list does not name steps-vs-$k-age.png"
done
is_png "$out/progress-vs-age/steps-vs-age.png" || fail "progress-vs-age/steps-vs-age.png missing or not a PNG"
while read -r f; do
  case $f in *.png) is_png "$f" || fail "--list names $f, which is missing or not a PNG" ;; *) [ -s "$f" ] || fail "--list names $f, which is missing or empty" ;; esac
done <"$dir/list"

# ages.csv: every point of study 3 (the inverse age), with that point's mean age over its runs from runs.csv
a=$out/progress-vs-age/ages.csv
[ -s "$a" ] || fail "no ages.csv"
# the published tables are in the tree: without them the ages cannot be checked, a failure
[ -r "$docs/staleness/runs.csv" ] || fail "$docs/staleness/runs.csv is missing: the ages cannot be checked"
want=$(awk -F, 'NR > 1 { n++ } END { print n + 0 }' "$docs/staleness/summary.csv")
got=$(awk -F, '$1 == "inverse" && $2 == "staleness" { n++ } END { print n + 0 }' "$a")
[ "$got" = "$want" ] || fail "ages.csv has $got rows of study 3's inverse age, its summary $want points"
# point 1's mean inverse age, recomputed from runs.csv
ref=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next }
  $h["point"] == 1 && $h["status"] == 0 && $h["inv_age_mean"] != "" { s += $h["inv_age_mean"]; n++ } END { printf "%.4f", s / n }' "$docs/staleness/runs.csv")
got=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next }
  $h["kind"] == "inverse" && $h["study"] == "staleness" && $h["point"] == 1 { print $h["age_mean"] }' "$a")
[ "$got" = "$ref" ] || fail "ages.csv: study 3 point 1 mean inverse age $got, runs.csv gives $ref"
echo "ok: $name: $n studies and the headline staleness figures redrawn from the published tables ($(($(date +%s) - t0))s)"
exit 0
