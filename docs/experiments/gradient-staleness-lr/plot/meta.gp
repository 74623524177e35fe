n = 5
plot_title = "Gradient staleness at lr 0.02: steps to 95% vs measured gradient age, SGD on the MNIST MLP, 4 workers, quorum 1"
target = 0.95
trade_target = 1
xunit = "step"
have_ages = 0
have_trade = 1
array L[5]
L[1] = "1: gradient_staleness=0"
L[2] = "2: gradient_staleness=1"
L[3] = "3: gradient_staleness=2"
L[4] = "4: gradient_staleness=4"
L[5] = "5: gradient_staleness=8"
