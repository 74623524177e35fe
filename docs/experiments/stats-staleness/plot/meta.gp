n = 5
plot_title = "Statistics staleness: steps to 97% vs measured statistics age, K-FAC on the MNIST MLP, statistics every N steps"
target = 0.97
trade_target = 1
xunit = "step"
have_ages = 1
have_trade = 1
array L[5]
L[1] = "1: stats_every=1"
L[2] = "2: stats_every=5"
L[3] = "3: stats_every=20"
L[4] = "4: stats_every=50"
L[5] = "5: stats_every=100"
