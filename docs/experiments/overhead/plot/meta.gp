n = 4
plot_title = "Study 4: per-step overhead of K-FAC over SGD, one worker, MNIST CNN (2 cores)"
target = 0
trade_target = 0
xunit = "step"
have_ages = 1
have_trade = 1
array L[4]
L[1] = "1: sgd-pinned"
L[2] = "2: kfac-pinned"
L[3] = "3: sgd-shared"
L[4] = "4: kfac-shared"
