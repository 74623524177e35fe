n = 5
plot_title = "Tuned baselines, wide model: SGD over rate x schedule vs doubly-factored K-FAC, to 99.0%, deep-MNIST network"
target = 0.99
trade_target = 1
xunit = "step"
have_ages = 1
have_trade = 1
array L[5]
L[1] = "1: kfac_doubly damping=0.03"
L[2] = "2: sgd lr=0.02 lr_schedule=step"
L[3] = "3: sgd lr=0.02 lr_schedule=cosine"
L[4] = "4: sgd lr=0.05 lr_schedule=step"
L[5] = "5: sgd lr=0.05 lr_schedule=cosine"
