n = 6
plot_title = "Study 1: asynchronous vs synchronous inverses, Fashion-MNIST CNN"
target = 0
trade_target = 0
xunit = "step"
have_ages = 1
have_trade = 1
array L[6]
L[1] = "1: async daemons-idle"
L[2] = "2: async daemons-normal"
L[3] = "3: sync-every-20 daemons-idle"
L[4] = "4: sync-every-20 daemons-normal"
L[5] = "5: sync-every-step daemons-idle"
L[6] = "6: sync-every-step daemons-normal"
