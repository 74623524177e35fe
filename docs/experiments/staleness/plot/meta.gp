n = 12
plot_title = "Study 3: steps to 97% vs injected inverse delay and inverse daemons, MNIST MLP"
target = 0.97
trade_target = 1
xunit = "step"
have_ages = 1
have_trade = 1
array L[12]
L[1] = "1: invertd=1 delay_ms=0"
L[2] = "2: invertd=1 delay_ms=100"
L[3] = "3: invertd=1 delay_ms=1000"
L[4] = "4: invertd=1 delay_ms=5000"
L[5] = "5: invertd=2 delay_ms=0"
L[6] = "6: invertd=2 delay_ms=100"
L[7] = "7: invertd=2 delay_ms=1000"
L[8] = "8: invertd=2 delay_ms=5000"
L[9] = "9: invertd=4 delay_ms=0"
L[10] = "10: invertd=4 delay_ms=100"
L[11] = "11: invertd=4 delay_ms=1000"
L[12] = "12: invertd=4 delay_ms=5000"
