n = 3
plot_title = "Study 1 on a GPU machine: asynchronous vs synchronous inverses, MNIST CNN"
target = 0
trade_target = 0
xunit = "step"
have_ages = 1
have_trade = 1
array L[3]
L[1] = "1: async"
L[2] = "2: sync-every-20"
L[3] = "3: sync-every-step"
