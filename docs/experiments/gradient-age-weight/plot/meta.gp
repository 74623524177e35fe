n = 9
plot_title = "Gradient age weight: steps to 95% vs gradient staleness, SGD on the MNIST MLP, 4 workers, quorum 1"
target = 0.95
trade_target = 1
xunit = "step"
have_ages = 0
have_trade = 1
array L[9]
L[1] = "1: gradient_staleness=1 none"
L[2] = "2: gradient_staleness=1 inverse"
L[3] = "3: gradient_staleness=1 none-lr02"
L[4] = "4: gradient_staleness=2 none"
L[5] = "5: gradient_staleness=2 inverse"
L[6] = "6: gradient_staleness=2 none-lr02"
L[7] = "7: gradient_staleness=4 none"
L[8] = "8: gradient_staleness=4 inverse"
L[9] = "9: gradient_staleness=4 none-lr02"
