# invertd/: the kfac-invertd daemon (main.c plus its own modules).
$(eval $(call daemon_rule,invertd,kfac-invertd))
