# deploy/: launcher, systemd units and example configs; installed by `make install`.
#
#   make install [PREFIX=/usr/local] [DESTDIR=] [SYSCONFDIR=/etc]
#                [SYSTEMD_UNIT_DIR=$(PREFIX)/lib/systemd/system]
#
# Binaries and kfac-launch go to $(PREFIX)/bin, the CUDA backend's plugin
# (CUDA builds) to $(PREFIX)/lib/kfac/libkfac-cuda.so, the units to
# $(SYSTEMD_UNIT_DIR) (their ExecStart=, Documentation= and configuration
# paths rewritten for PREFIX and SYSCONFDIR), the example configuration to
# $(SYSCONFDIR)/kfac/kfac.ini.example (an existing kfac.ini is never
# touched), the model descriptions and example run files to
# $(PREFIX)/share/kfac/ (the installed examples name the installed models,
# $(PREFIX)/share/kfac/models/..., and the data folder KFAC_DATA instead of
# the repository's models/ and data), the data fetch script to
# $(PREFIX)/share/kfac/fetch-data.sh, the drop-ins of the insecure mode and
# of GPU hosts to $(PREFIX)/share/kfac/systemd/insecure/ and .../gpu/, the
# Grafana dashboard to
# $(PREFIX)/share/kfac/grafana/, the docs to $(PREFIX)/share/doc/kfac.
# SYSCONFDIR is /etc only for PREFIX /usr or /usr/local; any other PREFIX
# gets $(PREFIX)/etc, so an install into a private prefix never writes /etc.
# KFAC_DATA (default /srv/kfac/data, the fetch script's default too) is the
# data folder the installed configurations name.
# Everything lands under $(DESTDIR) when it is set.
SYSTEMD_UNIT_DIR ?= $(PREFIX)/lib/systemd/system
SYSCONFDIR ?= $(if $(filter /usr /usr/local,$(PREFIX)),/etc,$(PREFIX)/etc)
DEPLOY_UNITS := $(wildcard deploy/systemd/*.service deploy/systemd/*.target)
# drop-ins, as KIND/UNIT.d/NAME.conf: insecure/ (docs/deployment.md), gpu/
# (docs/gpu.md)
DEPLOY_DROPINS := $(patsubst deploy/systemd/%,%,$(wildcard deploy/systemd/*/*.d/*.conf))
KFAC_DATA ?= /srv/kfac/data
DEPLOY_SED = sed -e 's|/usr/local/bin/|$(PREFIX)/bin/|g' -e 's|/usr/local/share/|$(PREFIX)/share/|g' \
                 -e 's|/etc/kfac/|$(SYSCONFDIR)/kfac/|g' -e 's|/srv/kfac/data|$(KFAC_DATA)|g'
# The example run files use repository paths; their installed copies point
# at the installed models and the data folder.
EXAMPLE_SED = $(DEPLOY_SED) -e 's|^file = models/|file = $(PREFIX)/share/kfac/models/|' \
                 -e 's|^dir = data$$|dir = $(KFAC_DATA)|' \
                 -e 's|deploy/kfac-launch deploy/examples/|kfac-launch $(PREFIX)/share/kfac/examples/|g'

.PHONY: uninstall
install: all
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(BINS) $(DESTDIR)$(PREFIX)/bin/
	install -m 755 deploy/kfac-launch $(DESTDIR)$(PREFIX)/bin/kfac-launch
	$(if $(CUDA_PLUGIN),install -d $(DESTDIR)$(PREFIX)/lib/kfac && install -m 755 $(CUDA_PLUGIN) $(DESTDIR)$(PREFIX)/lib/kfac/)
	install -d $(DESTDIR)$(SYSTEMD_UNIT_DIR)
	for u in $(DEPLOY_UNITS); do \
	  $(DEPLOY_SED) $$u > $(DESTDIR)$(SYSTEMD_UNIT_DIR)/$${u##*/} && \
	  chmod 644 $(DESTDIR)$(SYSTEMD_UNIT_DIR)/$${u##*/} || exit 1; done
	install -d $(DESTDIR)$(SYSCONFDIR)/kfac
	$(DEPLOY_SED) deploy/examples/kfac.ini > $(DESTDIR)$(SYSCONFDIR)/kfac/kfac.ini.example
	chmod 644 $(DESTDIR)$(SYSCONFDIR)/kfac/kfac.ini.example
	install -d $(DESTDIR)$(PREFIX)/share/kfac/models $(DESTDIR)$(PREFIX)/share/kfac/examples
	install -m 644 models/*.model $(DESTDIR)$(PREFIX)/share/kfac/models/
	for e in deploy/examples/*.ini; do \
	  $(EXAMPLE_SED) $$e > $(DESTDIR)$(PREFIX)/share/kfac/examples/$${e##*/} && \
	  chmod 644 $(DESTDIR)$(PREFIX)/share/kfac/examples/$${e##*/} || exit 1; done
	for d in $(DEPLOY_DROPINS); do \
	  install -d $(DESTDIR)$(PREFIX)/share/kfac/systemd/$${d%/*} && \
	  $(DEPLOY_SED) deploy/systemd/$$d > $(DESTDIR)$(PREFIX)/share/kfac/systemd/$$d && \
	  chmod 644 $(DESTDIR)$(PREFIX)/share/kfac/systemd/$$d || exit 1; done
	install -d $(DESTDIR)$(PREFIX)/share/kfac/grafana
	install -m 644 deploy/grafana/kfac-dashboard.json $(DESTDIR)$(PREFIX)/share/kfac/grafana/
	install -m 755 tools/fetch-data.sh $(DESTDIR)$(PREFIX)/share/kfac/fetch-data.sh
	install -m 755 tools/kfac-plot $(DESTDIR)$(PREFIX)/share/kfac/kfac-plot
	install -m 644 tools/run-plot.gp tools/plot-style.gp $(DESTDIR)$(PREFIX)/share/kfac/
	printf '#!/bin/sh\n# kfac-plot OUT_DIR: the figures of one run (its gnuplot files live beside it)\nexec %s "$$@"\n' \
	  '$(PREFIX)/share/kfac/kfac-plot' >$(DESTDIR)$(PREFIX)/bin/kfac-plot
	chmod 755 $(DESTDIR)$(PREFIX)/bin/kfac-plot
	install -d $(DESTDIR)$(PREFIX)/share/doc/kfac
	install -m 644 $(wildcard README.md docs/*.md) $(DESTDIR)$(PREFIX)/share/doc/kfac/
	@echo "kfac: installed under $(DESTDIR)$(PREFIX); units in $(DESTDIR)$(SYSTEMD_UNIT_DIR)"
	@echo "kfac: next: cp $(SYSCONFDIR)/kfac/kfac.ini.example $(SYSCONFDIR)/kfac/kfac.ini, edit it, systemctl daemon-reload"
	@echo "kfac: data: KFAC_DATA=$(KFAC_DATA) sh $(PREFIX)/share/kfac/fetch-data.sh"

uninstall:
	rm -f $(addprefix $(DESTDIR)$(PREFIX)/bin/,$(notdir $(BINS)) kfac-launch kfac-plot)
	rm -rf $(DESTDIR)$(PREFIX)/lib/kfac
	rm -f $(addprefix $(DESTDIR)$(SYSTEMD_UNIT_DIR)/,$(notdir $(DEPLOY_UNITS)))
	rm -f $(DESTDIR)$(SYSCONFDIR)/kfac/kfac.ini.example
	rm -rf $(DESTDIR)$(PREFIX)/share/kfac $(DESTDIR)$(PREFIX)/share/doc/kfac
