# tools/run-plot.gp — the figure of one run (tools/kfac-plot writes the
# data and calls this):
#
#   gnuplot -e "dir='OUT/plot'; outbase='OUT/run'; gpdir='tools'" tools/run-plot.gp
#
# dir holds meta.gp (plot_title, nb blocks and their names B[j], have_ages,
# have_kfac, have_eval), steps.dat (step, wall s, training loss and
# accuracy as moving averages, inverses installed, statistics folded),
# eval.dat (step, wall s, test accuracy, Polyak test accuracy) and
# ages.dat (step, then every block's inverse age in versions, -1: none).
# Writes outbase.png and outbase.svg, six panels: training loss and
# error (1 - accuracy, log scale) against steps and against wall time, the inverse age of every
# block against steps, and the curvature supply (inverses installed and
# statistics folded) against wall time.

load dir.'/meta.gp'
load gpdir.'/plot-style.gp'
set datafile missing "NaN"
# 1 - accuracy, kept above 1e-4 for the log scale (a perfect batch)
err(a) = (1 - a < 1e-4) ? 1e-4 : 1 - a

do for [fmt in "png svg"] {
  if (fmt eq "png") { eval term_png } else { eval term_svg }
  set output outbase.'.'.fmt
  set multiplot layout 2,3 title plot_title font ",13"
  set grid
  set key bottom right font ",9" opaque

  # 1: training loss against steps
  set logscale y
  set xlabel "step"
  set ylabel "training loss (moving average)"
  set title "training loss vs steps"
  plot dir.'/steps.dat' using 1:3 with lines lw 1.5 lc 1 notitle

  # 2: error against steps (log scale: 99% and 99.5% stay apart)
  set logscale y
  set ylabel "error = 1 - accuracy"
  set title "error vs steps"
  set key top right font ",9" opaque
  if (have_eval) {
    plot dir.'/steps.dat' using 1:(err($4)) with lines lw 1 lc 9 title "train (moving average)", \
         dir.'/eval.dat' using 1:(err($3)) with linespoints lw 1.5 pt 7 ps 0.6 lc 1 title "test, current", \
         dir.'/eval.dat' using 1:(err($4)) with linespoints lw 1.5 pt 5 ps 0.6 lc 2 dt 2 title "test, Polyak average"
  } else {
    plot dir.'/steps.dat' using 1:(err($4)) with lines lw 1 lc 9 title "train (moving average)"
  }
  unset logscale

  # 3: inverse age per block
  set ylabel "inverse age (versions)"
  set title "inverse age of every block vs steps"
  set key top left font ",8" opaque
  if (have_ages) {
    plot for [j=1:nb] dir.'/ages.dat' using 1:(column(j + 1) >= 0 ? column(j + 1) : NaN) with lines lw 1 lc j title B[j]
  } else {
    set label 10 (have_kfac ? "no inverse_ages.csv in this run" : "sgd: no inverses") at graph 0.5, graph 0.5 center
    plot [0:1] [0:1] 2 notitle
    unset label 10
  }
  set key bottom right font ",9" opaque

  # 4: training loss against wall time
  set logscale y
  set xlabel "wall seconds"
  set ylabel "training loss (moving average)"
  set title "training loss vs wall time"
  plot dir.'/steps.dat' using 2:3 with lines lw 1.5 lc 1 notitle

  # 5: error against wall time
  set ylabel "error = 1 - accuracy"
  set title "error vs wall time"
  set key top right font ",9" opaque
  if (have_eval) {
    plot dir.'/steps.dat' using 2:(err($4)) with lines lw 1 lc 9 title "train (moving average)", \
         dir.'/eval.dat' using 2:(err($3)) with linespoints lw 1.5 pt 7 ps 0.6 lc 1 title "test, current", \
         dir.'/eval.dat' using 2:(err($4)) with linespoints lw 1.5 pt 5 ps 0.6 lc 2 dt 2 title "test, Polyak average"
  } else {
    plot dir.'/steps.dat' using 2:(err($4)) with lines lw 1 lc 9 title "train (moving average)"
  }
  unset logscale

  # 6: the curvature supply
  set ylabel "count so far"
  set title "curvature supply vs wall time (flat: K-FAC running on old curvature)"
  set key top left font ",9" opaque
  if (have_kfac) {
    plot dir.'/steps.dat' using 2:5 with lines lw 1.5 lc 5 title "inverses installed", \
         dir.'/steps.dat' using 2:6 with lines lw 1.5 lc 4 title "statistics batches folded"
  } else {
    set label 10 "sgd: no curvature" at graph 0.5, graph 0.5 center
    plot [0:1] [0:1] 2 notitle
    unset label 10
  }
  unset multiplot
  unset output
}
