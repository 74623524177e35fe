# tools/age-data.awk — one kind of measured staleness per point of a sweep,
# from its runs.csv, for the figures of progress against age
# (tools/age-plot.gp, tools/staleness-plot.gp). Used by tools/kfac-sweep and
# tools/kfac-figures:
#
#   awk -F, -v col=inv_age_mean -f tools/age-data.awk runs.csv | sort -n -k2
#
# col: the runs.csv column of the age (inv_age_mean, stats_age_mean or
# grad_age_mean). Columns are read by name from the header line. Prints one
# line per point that has the age in some run that finished (status 0),
# space-separated:
#
#   1 point   2-4 age mean, min, max over those runs (versions)
#   5-7 steps to the target: mean, min, max over the runs that reached it
#   8-10 wall seconds to the target: mean, min, max over the same runs
#   11 runs that reached the target   12 runs with the age
#
# Fields 5-10 are NaN when no run of the point reached the target (gnuplot
# then leaves the point out). Prints nothing when the column is missing.
NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; if (!(col in h)) exit; next }
$h["status"] == "0" && $h[col] != "" {
  p = $h["point"]; a = $h[col] + 0
  if (!(p in n)) { amin[p] = amax[p] = a; order[++np] = p }
  n[p]++; as[p] += a
  if (a < amin[p]) amin[p] = a
  if (a > amax[p]) amax[p] = a
  if ($h["target_step"] == "") next
  st = $h["target_step"] + 0; w = $h["target_wall_s"] + 0
  if (!(p in r)) { smin[p] = smax[p] = st; wmin[p] = wmax[p] = w }
  r[p]++; ss[p] += st; ws[p] += w
  if (st < smin[p]) smin[p] = st
  if (st > smax[p]) smax[p] = st
  if (w < wmin[p]) wmin[p] = w
  if (w > wmax[p]) wmax[p] = w
}
END {
  for (i = 1; i <= np; i++) {
    p = order[i]
    printf "%s %.4f %.4f %.4f ", p, as[p] / n[p], amin[p], amax[p]
    if (r[p]) printf "%.1f %.1f %.1f %.3f %.3f %.3f", ss[p] / r[p], smin[p], smax[p], ws[p] / r[p], wmin[p], wmax[p]
    else printf "NaN NaN NaN NaN NaN NaN"
    printf " %d %d\n", r[p] + 0, n[p]
  }
}
