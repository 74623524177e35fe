# statsd/: the kfac-statsd daemon (main.c plus its own modules).
$(eval $(call daemon_rule,statsd,kfac-statsd))
