# tools/staleness-plot.gp — the headline staleness figures: progress against
# measured age, across the published studies that vary it (tools/kfac-figures
# writes the data and calls this):
#
#   gnuplot -e "dir='D'; outdir='OUT'" tools/staleness-plot.gp
#
# dir/meta.gp sets kinds (e.g. "inverse statistics gradient"), per kind
# S_<kind> (the numbers of its series, e.g. "1 2"; "" for none),
# M_<kind> (the note drawn when it has none), N_<kind> (the studies listed
# for it but not published yet, "" for none), T[i] (series i's title) and
# K[i] (its kind).
# dir/series-i.dat: tools/age-data.awk's columns (point; age mean, min, max;
# steps to the target mean, min, max; wall seconds mean, min, max; runs
# that reached it; runs), then 13-15 the steps and 16-18 the wall seconds
# relative to the series' fresh settings (mean, min, max; the baseline is
# the mean over the settings with a mean age at most twice the freshest's),
# 19 a label ("1/2" where not every run reached the target, else "").
#
# Writes outdir/steps-vs-<kind>-age.png for each kind (steps and wall
# seconds to the target against the mean age, one colour per study, bars
# min-max over seeds) and outdir/steps-vs-age.png (every kind, relative to
# each study's fresh settings). The x axis is 1 + age on a log scale, so
# age 0 sits at 1 and ages of 0.5 and 800 versions share a figure.
load dir.'/meta.gp'
load gpdir.'/plot-style.gp'
set datafile missing "NaN"
set grid
set key below left font ",9" maxrows 3
set terminal pngcairo size 1300,600 font "Sans,10" noenhanced
set logscale x
set xrange [0.8:*]
set offsets 0, 0, graph 0.05, graph 0.05
age_x = '1 + mean %s age (versions, log scale; bars: min-max over seeds)'
nk = words(kinds)
do for [k=1:nk] {
  kind = word(kinds, k)
  S = value('S_'.kind)
  ns = words(S)
  set output outdir.'/steps-vs-'.kind.'-age.png'
  set multiplot layout 1,2 title 'Progress against measured '.kind.' age (each point: one setting, mean over its seeds)' font ",12"
  set xlabel sprintf(age_x, kind)
  do for [panel=1:2] {
    yc = panel == 1 ? 5 : 8
    set ylabel (panel == 1 ? 'steps to the target' : 'wall seconds to the target').' (bars: min-max over seeds)'
    set title (panel == 1 ? 'steps' : 'wall time').' to the target vs '.kind.' age'
    if (ns == 0) {
      set label 10 value('M_'.kind) at graph 0.5, graph 0.5 center font ",9"
      plot [1:10] [0:1] 2 notitle
      unset label 10
    } else {
      N = value('N_'.kind)
      if (strlen(N) > 0) { set label 11 N at graph 0.98, graph 0.04 right font ",8" tc rgb "gray30" }
      plot for [j=1:ns] dir.'/series-'.word(S, j).'.dat' \
             using (1 + $2):yc:(1 + $3):(1 + $4):(column(yc + 1)):(column(yc + 2)) \
             with xyerrorbars pt 7 ps 1.1 lw 1.3 lc int(word(S, j)) title T[int(word(S, j))], \
           for [j=1:ns] dir.'/series-'.word(S, j).'.dat' using (1 + $2):yc:19 with labels offset 1.8,0.6 font ",8" notitle
      unset label 11
    }
  }
  unset multiplot
}

# every kind: relative to each study's fresh settings
set output outdir.'/steps-vs-age.png'
set multiplot layout 1,2 title 'Progress against measured age, every kind (relative to each study''s fresh settings: mean age at most twice the lowest)' font ",12"
set xlabel '1 + mean age (versions, log scale; bars: min-max over seeds)'
all = ''
do for [k=1:nk] { all = all.' '.value('S_'.word(kinds, k)) }
na = words(all)
do for [panel=1:2] {
  yc = panel == 1 ? 13 : 16
  set ylabel (panel == 1 ? 'steps' : 'wall seconds').' to the target / the fresh settings'''
  set title (panel == 1 ? 'steps' : 'wall time').' to the target, relative'
  set arrow 1 from graph 0, first 1 to graph 1, first 1 nohead dt 3 lc rgb "gray40"
  if (na == 0) {
    set label 10 'no published study varies a measured age' at graph 0.5, graph 0.5 center
    plot [1:10] [0:2] 2 notitle
    unset label 10
  } else {
    plot for [j=1:na] dir.'/series-'.word(all, j).'.dat' \
           using (1 + $2):yc:(1 + $3):(1 + $4):(column(yc + 1)):(column(yc + 2)) \
           with xyerrorbars pt 7 ps 1.1 lw 1.3 lc int(word(all, j)) title K[int(word(all, j))].' age, '.T[int(word(all, j))]
  }
  unset arrow 1
}
unset multiplot
