n = 12
plot_title = "Damping rules under stale inverses: steps to 97% vs inverse delay, MNIST MLP, 1 inverse daemon, KL bound halved every 150 steps"
target = 0.97
trade_target = 1
xunit = "step"
have_ages = 1
have_trade = 1
array L[12]
L[1] = "1: delay_ms=0 fixed"
L[2] = "2: delay_ms=0 adaptive"
L[3] = "3: delay_ms=0 age"
L[4] = "4: delay_ms=300 fixed"
L[5] = "5: delay_ms=300 adaptive"
L[6] = "6: delay_ms=300 age"
L[7] = "7: delay_ms=1000 fixed"
L[8] = "8: delay_ms=1000 adaptive"
L[9] = "9: delay_ms=1000 age"
L[10] = "10: delay_ms=5000 fixed"
L[11] = "11: delay_ms=5000 adaptive [no inverse installed: K-FAC off]"
L[12] = "12: delay_ms=5000 age [no inverse installed: K-FAC off]"
