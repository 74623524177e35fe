# deploy/: launcher, systemd units and example configs; installed by `make install`.
install: all
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(BINS) $(DESTDIR)$(PREFIX)/bin/
