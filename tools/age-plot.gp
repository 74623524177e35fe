# tools/age-plot.gp — progress against measured staleness (tools/kfac-sweep
# writes the data and calls this when the sweep has a target):
#
#   gnuplot -e "dir='OUT/plot'; outdir='OUT'; kinds=' inverse gradient'; plot_title='...'; target='0.97'" tools/age-plot.gp
#
# dir/age-KIND.dat, one line per point of the sweep that reached the
# target: point, mean age (versions) over its seeds, min, max; steps to the
# target mean, min, max; wall seconds to it mean, min, max; seeds. Writes
# outdir/steps-vs-KIND-age.png for each kind in `kinds` (two panels: steps
# and wall time to the target against that age, bars min-max over seeds,
# each point labelled with its number) and outdir/steps-vs-age.png with
# every kind. An optional `note` (a line under the title) names the
# points left out because no seed of theirs reached the target.
if (!exists("note")) note = ''
ttl_note = note eq '' ? '' : "\n".note
set datafile missing "NaN"
set grid
set key top left font ",9"
set terminal pngcairo size 1100,450 font ",10"
nk = words(kinds)
do for [k=1:nk] {
  kind = word(kinds, k)
  f = dir.'/age-'.kind.'.dat'
  set output outdir.'/steps-vs-'.kind.'-age.png'
  set multiplot layout 1,2 title plot_title.' (target '.target.')'.ttl_note font ",12"
  set xlabel 'mean '.kind.' age (versions; bars: min-max over seeds)'
  set ylabel 'steps to the target'
  set title 'steps to the target vs '.kind.' age'
  plot f using 2:5:3:4:6:7 with xyerrorbars pt 7 lc 1 title 'point (mean over seeds)', \
       f using 2:5:(sprintf('%d', $1)) with labels offset 1,1 notitle
  set ylabel 'wall seconds to the target'
  set title 'wall time to the target vs '.kind.' age'
  plot f using 2:8:3:4:9:10 with xyerrorbars pt 7 lc 2 title 'point (mean over seeds)', \
       f using 2:8:(sprintf('%d', $1)) with labels offset 1,1 notitle
  unset multiplot
}
set output outdir.'/steps-vs-age.png'
set multiplot layout 1,2 title plot_title.': every kind of staleness (target '.target.')'.ttl_note font ",12"
set xlabel 'mean age (versions)'
set ylabel 'steps to the target'
set title 'steps to the target vs age'
plot for [k=1:nk] dir.'/age-'.word(kinds, k).'.dat' using 2:5:3:4:6:7 with xyerrorbars pt 7 lc k title word(kinds, k).' age'
set ylabel 'wall seconds to the target'
set title 'wall time to the target vs age'
plot for [k=1:nk] dir.'/age-'.word(kinds, k).'.dat' using 2:8:3:4:9:10 with xyerrorbars pt 7 lc k title word(kinds, k).' age'
unset multiplot
