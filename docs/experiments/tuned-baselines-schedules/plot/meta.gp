n = 10
plot_title = "Tuned baselines: SGD over rate x schedule x Polyak decay vs K-FAC, to 99.0% test accuracy, MNIST CNN"
target = 0.99
trade_target = 1
xunit = "step"
have_ages = 1
have_trade = 1
array L[10]
L[1] = "1: kfac damping=0.03"
L[2] = "2: kfac damping=0.1"
L[3] = "3: sgd lr=0.02 lr_schedule=step polyak_decay=0.99"
L[4] = "4: sgd lr=0.02 lr_schedule=step polyak_decay=0.999"
L[5] = "5: sgd lr=0.02 lr_schedule=cosine polyak_decay=0.99"
L[6] = "6: sgd lr=0.02 lr_schedule=cosine polyak_decay=0.999"
L[7] = "7: sgd lr=0.05 lr_schedule=step polyak_decay=0.99"
L[8] = "8: sgd lr=0.05 lr_schedule=step polyak_decay=0.999"
L[9] = "9: sgd lr=0.05 lr_schedule=cosine polyak_decay=0.99"
L[10] = "10: sgd lr=0.05 lr_schedule=cosine polyak_decay=0.999"
