# tools/points-plot.gp — one study's points from its published summary.csv
# (tools/kfac-figures writes the data and calls this):
#
#   gnuplot -e "dir='D'; out='OUT/points.png'" tools/points-plot.gp
#
# dir/meta.gp sets plot_title, target (0: none) and have_target (1 when
# some point reached it). dir/points.dat, one line per point: number;
# runs that reached the target; runs; y1 mean, min, max; y2 mean, min, max;
# the point's label (quoted). With a target y1 is the steps and y2 the
# wall seconds to it (over the runs that reached it); without one, y1 is
# the iterations per second and y2 the final test accuracy in percent of
# the current parameters, and columns 11-13 the Polyak average's.
# Two panels, one bar per point (mean over seeds; error bars min-max), the
# point's label under it and "k/n" over it where not every run reached the
# target; without a target the accuracies are points on a free scale.
load dir.'/meta.gp'
set datafile missing "NaN"
set grid ytics
set terminal pngcairo size 1300,560 font "Sans,10" noenhanced
set output out
set multiplot layout 1,2 title plot_title font ",12"
set style fill solid 0.35 border
set boxwidth 0.6
set xtics rotate by 30 right font ",8"
set offsets 0.5, 0.5, graph 0.08, 0
set yrange [0:*]
unset key
do for [panel=1:2] {
  c = panel == 1 ? 4 : 7
  if (!have_target && panel == 2) {
    # accuracies differ by tenths of a point: points on a free scale, not bars from 0
    set ylabel 'final test accuracy % (mean; bars min-max over seeds)'
    set title 'final test accuracy per point (filled: current parameters; open: Polyak average)'
    set yrange [*:*]
    set key top right font ",9"
    plot dir.'/points.dat' using ($1 - 0.1):7:8:9:xtic(10) with yerrorbars pt 7 ps 1.2 lc 1 title 'current parameters', \
         '' using ($1 + 0.1):11:12:13 with yerrorbars pt 6 ps 1.2 lc 2 title 'Polyak average'
    continue
  }
  if (have_target) {
    set ylabel (panel == 1 ? 'steps' : 'wall seconds').sprintf(' to %.1f%% (mean; bars min-max over seeds)', 100 * target)
    set title (panel == 1 ? 'steps' : 'wall time').' to the target, per point'
  } else {
    set ylabel (panel == 1 ? 'iterations per second' : 'final test accuracy %').' (mean; bars min-max over seeds)'
    set title (panel == 1 ? 'iterations per second' : 'final test accuracy').' per point'
  }
  plot dir.'/points.dat' using 1:c:xtic(10) with boxes lc 3, \
       '' using 1:c:(column(c + 1)):(column(c + 2)) with yerrorbars pt 0 lc rgb "black", \
       '' using 1:(valid(c + 2) ? column(c + 2) : 0):(have_target && $2 < $3 ? sprintf('%d/%d reached', $2, $3) : '') \
          with labels offset 0,0.8 font ",8"
}
unset multiplot
