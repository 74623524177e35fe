# ps/: the kfac-ps daemon (main.c plus its own modules).
$(eval $(call daemon_rule,ps,kfac-ps))
