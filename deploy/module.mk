# deploy/: launcher, systemd units and example configs; installed by `make install`.
#
#   make install [PREFIX=/usr/local] [DESTDIR=] [SYSTEMD_UNIT_DIR=$(PREFIX)/lib/systemd/system]
#
# Binaries and kfac-launch go to $(PREFIX)/bin, the units to
# $(SYSTEMD_UNIT_DIR) (their ExecStart= and Documentation= paths rewritten
# for PREFIX), the example configuration to /etc/kfac/kfac.ini.example (an
# existing /etc/kfac/kfac.ini is never touched), the model descriptions to
# $(PREFIX)/share/kfac/models and the deployment docs to
# $(PREFIX)/share/doc/kfac.
SYSTEMD_UNIT_DIR ?= $(PREFIX)/lib/systemd/system
DEPLOY_UNITS := $(wildcard deploy/systemd/*.service deploy/systemd/*.target)
DEPLOY_SED = sed -e 's|/usr/local/bin/|$(PREFIX)/bin/|g' -e 's|/usr/local/share/|$(PREFIX)/share/|g'

.PHONY: uninstall
install: all
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(BINS) $(DESTDIR)$(PREFIX)/bin/
	install -m 755 deploy/kfac-launch $(DESTDIR)$(PREFIX)/bin/kfac-launch
	install -d $(DESTDIR)$(SYSTEMD_UNIT_DIR)
	for u in $(DEPLOY_UNITS); do \
	  $(DEPLOY_SED) $$u > $(DESTDIR)$(SYSTEMD_UNIT_DIR)/$${u##*/} && \
	  chmod 644 $(DESTDIR)$(SYSTEMD_UNIT_DIR)/$${u##*/} || exit 1; done
	install -d $(DESTDIR)/etc/kfac
	$(DEPLOY_SED) deploy/examples/kfac.ini > $(DESTDIR)/etc/kfac/kfac.ini.example
	chmod 644 $(DESTDIR)/etc/kfac/kfac.ini.example
	install -d $(DESTDIR)$(PREFIX)/share/kfac/models $(DESTDIR)$(PREFIX)/share/kfac/examples
	install -m 644 models/*.model $(DESTDIR)$(PREFIX)/share/kfac/models/
	install -m 644 deploy/examples/*.ini $(DESTDIR)$(PREFIX)/share/kfac/examples/
	install -d $(DESTDIR)$(PREFIX)/share/doc/kfac
	install -m 644 $(wildcard README.md docs/*.md) $(DESTDIR)$(PREFIX)/share/doc/kfac/
	@echo "kfac: installed under $(DESTDIR)$(PREFIX); units in $(DESTDIR)$(SYSTEMD_UNIT_DIR)"
	@echo "kfac: next: cp /etc/kfac/kfac.ini.example /etc/kfac/kfac.ini, edit it, systemctl daemon-reload"

uninstall:
	rm -f $(addprefix $(DESTDIR)$(PREFIX)/bin/,$(notdir $(BINS)) kfac-launch)
	rm -f $(addprefix $(DESTDIR)$(SYSTEMD_UNIT_DIR)/,$(notdir $(DEPLOY_UNITS)))
	rm -f $(DESTDIR)/etc/kfac/kfac.ini.example
	rm -rf $(DESTDIR)$(PREFIX)/share/kfac $(DESTDIR)$(PREFIX)/share/doc/kfac
