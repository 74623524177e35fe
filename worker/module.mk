# worker/: the kfac-worker daemon (main.c plus its own modules).
$(eval $(call daemon_rule,worker,kfac-worker))
