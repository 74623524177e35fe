# tools/sweep-plot.gp — the overview figure of a sweep (tools/kfac-sweep
# writes the data and calls this):
#
#   gnuplot -e "dir='OUT/plot'; outbase='OUT/overview'; gpdir='tools'" tools/sweep-plot.gp
#
# dir holds meta.gp (n points, their labels L[i], the title, the target,
# the x unit) and per point i: steps-i.dat (step or examples, mean wall s,
# smoothed train loss), eval-i.dat (step or examples, mean wall s, test
# error mean, min, max over seeds, Polyak average's test error), ages-i.dat (inverse age of every step),
# trade-i.dat (x mean min max, y mean min max: steps and wall seconds to
# the target when trade_target, else iterations per second and final test
# error). Writes outbase.png (pngcairo) and outbase.svg, six panels:
# training loss and test error against steps and wall time, the
# trade-off, and the inverse-age distribution. Colour i is point i in
# every panel.

load dir.'/meta.gp'
set datafile missing "NaN"
xunits = (xunit eq "step") ? "steps" : xunit
# colours and terminals shared with tools/run-plot.gp
load gpdir.'/plot-style.gp'

do for [fmt in "png svg"] {
  if (fmt eq "png") { eval term_png } else { eval term_svg }
  set output outbase.'.'.fmt
  set multiplot layout 2,3 title plot_title font ",13"
  set grid
  set key top right font ",9" opaque

  # 1: training loss against steps
  set logscale y
  set xlabel xunit
  set ylabel "training loss (mean over seeds, moving average)"
  set title "training loss vs ".xunits
  plot for [i=1:n] dir.'/steps-'.i.'.dat' using 1:3 with lines lw 1.5 lc i title L[i]

  # 2: test error against steps
  set ylabel "test error (mean, bars min-max; dashed: Polyak average)"
  set title "test error vs ".xunits
  unset arrow
  if (target > 0) { set arrow 1 from graph 0, first (1 - target) to graph 1, first (1 - target) nohead dt 3 lc rgb "gray40" }
  plot for [i=1:n] dir.'/eval-'.i.'.dat' using 1:3:4:5 with yerrorlines lw 1.5 pt 7 ps 0.5 lc i notitle, \
       for [i=1:n] dir.'/eval-'.i.'.dat' using 1:6 with lines lw 1 dt 2 lc i notitle

  # 3: the trade-off
  unset logscale
  unset arrow
  if (trade_target) {
    set xlabel xunits." to the target (mean, min-max)"
    set ylabel "wall seconds to the target (mean, min-max)"
    set title sprintf("trade-off: %s vs wall time to %.1f%% test accuracy", xunits, 100 * target)
  } else {
    set xlabel "iterations per second (mean, min-max)"
    set ylabel "final test error (mean, min-max)"
    set title (target > 0 ? sprintf("no point reached %.1f%%: speed vs final test error", 100 * target) : "trade-off: speed vs final test error")
  }
  if (have_trade) {
    set offsets graph 0.08, graph 0.08, graph 0.08, graph 0.08
    plot for [i=1:n] dir.'/trade-'.i.'.dat' using 1:4:2:3:5:6 with xyerrorbars pt 7 ps 1.2 lw 1.5 lc i notitle, \
         for [i=1:n] dir.'/trade-'.i.'.dat' using 1:4:(sprintf("%d", i)) with labels offset 1.2,0.8 notitle
    set offsets 0, 0, 0, 0
  } else {
    set label 10 "no data" at graph 0.5, graph 0.5 center
    plot [0:1] [0:1] 2 notitle
    unset label 10
  }

  # 4: training loss against wall time
  set logscale y
  set xlabel "wall seconds since the first step"
  set ylabel "training loss (mean over seeds, moving average)"
  set title "training loss vs wall time"
  plot for [i=1:n] dir.'/steps-'.i.'.dat' using 2:3 with lines lw 1.5 lc i notitle

  # 5: test error against wall time
  set ylabel "test error (mean, bars min-max; dashed: Polyak average)"
  set title "test error vs wall time"
  if (target > 0) { set arrow 1 from graph 0, first (1 - target) to graph 1, first (1 - target) nohead dt 3 lc rgb "gray40" }
  plot for [i=1:n] dir.'/eval-'.i.'.dat' using 2:3:4:5 with yerrorlines lw 1.5 pt 7 ps 0.5 lc i notitle, \
       for [i=1:n] dir.'/eval-'.i.'.dat' using 2:6 with lines lw 1 dt 2 lc i notitle
  unset arrow

  # 6: inverse age per step
  unset logscale
  set xlabel "point"
  set ylabel "mean inverse age of a step (versions)"
  set title "inverse age at each step (box: quartiles)"
  set xrange [0.3:n + 0.7]
  set xtics 1
  set style boxplot outliers pointtype 7
  set style data boxplot
  set boxwidth 0.5
  if (have_ages) {
    plot for [i=1:n] dir.'/ages-'.i.'.dat' using (i):1 lc i pointsize 0.3 notitle
  } else {
    set label 10 "no inverses (SGD, or none installed)" at graph 0.5, graph 0.5 center
    plot [0:1] [0:1] 2 notitle
    unset label 10
  }
  set style data points
  set xrange [*:*]
  set xtics autofreq
  unset multiplot
  unset output
}
