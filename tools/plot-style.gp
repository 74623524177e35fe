# tools/plot-style.gp — what the kfac figures share (loaded by
# tools/sweep-plot.gp and tools/run-plot.gp): sixteen distinguishable line
# colours (gnuplot's default cycle repeats after 8), as line types 1-16,
# and the terminal of each output format.
#
#   load gpdir.'/plot-style.gp'
#   ... call set_term(fmt, width, height) is spelled as the two lines below:
#   if (fmt eq "png") { eval term_png } else { eval term_svg }
array C[16] = ["#9400d3", "#009e73", "#56b4e9", "#e69f00", "#0072b2", "#e51e10", "#000000", "#f0e442", \
               "#808080", "#cc79a7", "#8b4513", "#00ced1", "#7cfc00", "#ff1493", "#191970", "#b8860b"]
do for [i=1:16] { set linetype i linecolor rgb C[i] }
term_png = 'set terminal pngcairo size 1600,950 font "Sans,10" noenhanced'
term_svg = 'set terminal svg size 1600,950 font "Sans,10" noenhanced dynamic'
