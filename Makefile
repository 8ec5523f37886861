# l4lb: `make demo` shows it working, `make test` runs the whole suite.
GO      ?= go
BIN     := bin
VERSION := $(shell git describe --always --dirty 2>/dev/null || echo dev)
BUILD_DATE := $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
COMMIT  := $(shell git rev-parse HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo +dirty)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.buildDate=$(BUILD_DATE) $(EXTRA_LDFLAGS)
# Keep the whole suite well under CI's budget.
TEST_TIMEOUT ?= 14m

# `make install`: the usual places for a daemon installed from source.
# DESTDIR stages the tree (packaging, tests); the paths inside the unit
# are those without DESTDIR.
PREFIX     ?= /usr/local
SBINDIR    ?= $(PREFIX)/sbin
UNITDIR    ?= $(PREFIX)/lib/systemd/system
DOCDIR     ?= $(PREFIX)/share/doc/l4lb
SYSCONFDIR ?= /etc
MANDIR     ?= $(PREFIX)/share/man
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR ?= $(PREFIX)/share/zsh/site-functions
INSTALL    ?= install

.PHONY: all build deb test generate generate-check docs demo demo-ecmp bench bench-xdp fuzz soak stress lint clean install uninstall

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/l4lb ./cmd/l4lb
	$(GO) build -o $(BIN)/testserver ./scripts/testserver

lint:
	$(GO) vet ./...
	$(GO) vet -tags l4lbpoison ./l4/proxy
	@out=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')); \
	  if [ -n "$$out" ]; then echo "not gofmt-formatted:"; echo "$$out"; exit 1; fi

# After the unit tests, a short run of every fuzz target (TEST_FUZZTIME
# each: under 60 s in all with 9 targets).
TEST_FUZZTIME ?= 3s
# l4lbpoison: a freed connection or UDP session panics on any later use
# (l4/proxy/poison_on.go); the daemons the end-to-end tests start are
# built with the same tags.
TEST_TAGS ?= l4lbpoison
test: build lint generate-check
	$(GO) test -race -tags '$(TEST_TAGS)' -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) ./...
	GO=$(GO) FUZZTIME=$(TEST_FUZZTIME) FUZZFLAGS='-tags=$(TEST_TAGS)' scripts/fuzz.sh

# fuzz: every fuzz target for FUZZTIME each (scripts/fuzz.sh: FUZZ=regexp
# picks targets); failing inputs land in the packages' testdata/fuzz/.
FUZZTIME ?= 1m
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

generate:
	$(GO) generate ./...

# docs: docs/configuration.md and the man page l4lb.toml(5) from the key
# tables of config/keys_*.go, l4lb(8) from cmd/l4lb's command table, and
# docs/counters.md from the tags of l4/plane's status types (both also
# part of generate); each generator's test fails while its page in the
# tree differs.
docs:
	$(GO) run ./config/cmd/configdoc -o docs/configuration.md
	$(GO) run ./config/cmd/configdoc -format man -o docs/man/l4lb.toml.5
	$(GO) run ./cmd/l4lb __man > docs/man/l4lb.8
	$(GO) run ./l4/plane/cmd/counterdoc -o docs/counters.md

# The generated BPF objects and bindings are committed (go build needs no
# clang); CI regenerates them and fails when they differ from the C sources.
generate-check:
	GO=$(GO) scripts/generate-check.sh

demo: build
	scripts/demo.sh

# demo-ecmp: two balancers behind a BIRD router announce the VIP over BGP
# (needs bird2).
demo-ecmp: build
	scripts/demo-ecmp.sh

bench: build
	scripts/bench.sh
	scripts/bench-xdp.sh

bench-xdp: build
	scripts/bench-xdp.sh

# stress: the whole suite RUNS (10) times with LOAD (one per core) busy
# loops, then a table of every test that failed in any run. Not part of
# `make test`.
stress:
	scripts/stress.sh

# soak: SOAK_TIME (10m) of mixed TCP and UDP load through bin/l4lb with
# backends flapping and a reload every 10 s; fails when goroutines,
# descriptors or RSS grow beyond the bounds in scripts/soak.sh. Not part
# of `make test`.
SOAK_TIME ?= 10m
soak: build
	SOAK_TIME=$(SOAK_TIME) scripts/soak.sh

# install puts the binary, the systemd unit (its paths rewritten for
# SBINDIR and SYSCONFDIR), the README, docs/, examples/, the Grafana
# dashboard and alert rules (contrib/), the man pages, bash and zsh
# completion and the example config in place. The
# config is installed only where none is: an operator's file is never
# overwritten. Then: systemctl daemon-reload && systemctl enable --now l4lb
install: build
	$(INSTALL) -d -m 0755 $(DESTDIR)$(SBINDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(DOCDIR)
	$(INSTALL) -m 0755 $(BIN)/l4lb $(DESTDIR)$(SBINDIR)/l4lb
	sed -e 's|/usr/local/sbin/l4lb|$(SBINDIR)/l4lb|g' -e 's|/etc/l4lb/|$(SYSCONFDIR)/l4lb/|g' \
	    -e 's|/usr/local/share/doc/l4lb/|$(DOCDIR)/|g' scripts/l4lb.service > $(BIN)/l4lb.service
	$(INSTALL) -m 0644 $(BIN)/l4lb.service $(DESTDIR)$(UNITDIR)/l4lb.service
	$(INSTALL) -m 0644 README.md examples/l4lb.toml $(DESTDIR)$(DOCDIR)/
	$(INSTALL) -d -m 0755 $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(DOCDIR)/docs
	$(INSTALL) -m 0644 examples/*.toml $(DESTDIR)$(DOCDIR)/examples/
	$(INSTALL) -m 0644 docs/*.md $(DESTDIR)$(DOCDIR)/docs/
	$(INSTALL) -d -m 0755 $(DESTDIR)$(DOCDIR)/contrib
	$(INSTALL) -m 0644 contrib/grafana/l4lb.json contrib/prometheus/l4lb-rules.yml $(DESTDIR)$(DOCDIR)/contrib/
	$(INSTALL) -d -m 0755 $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR)
	$(INSTALL) -m 0644 docs/man/l4lb.toml.5 $(DESTDIR)$(MANDIR)/man5/l4lb.toml.5
	$(INSTALL) -m 0644 docs/man/l4lb.8 $(DESTDIR)$(MANDIR)/man8/l4lb.8
	$(BIN)/l4lb completion bash > $(BIN)/l4lb.bash && $(INSTALL) -m 0644 $(BIN)/l4lb.bash $(DESTDIR)$(BASHCOMPDIR)/l4lb
	$(BIN)/l4lb completion zsh > $(BIN)/_l4lb && $(INSTALL) -m 0644 $(BIN)/_l4lb $(DESTDIR)$(ZSHCOMPDIR)/_l4lb
	$(INSTALL) -d -m 0755 $(DESTDIR)$(SYSCONFDIR)/l4lb
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/l4lb/l4lb.toml ]; then \
	  echo "$(DESTDIR)$(SYSCONFDIR)/l4lb/l4lb.toml exists: kept (the example is in $(DESTDIR)$(DOCDIR)/l4lb.toml)"; \
	else \
	  echo "$(INSTALL) -m 0640 examples/l4lb.toml $(DESTDIR)$(SYSCONFDIR)/l4lb/l4lb.toml"; \
	  $(INSTALL) -m 0640 examples/l4lb.toml $(DESTDIR)$(SYSCONFDIR)/l4lb/l4lb.toml; \
	fi

# uninstall removes what install put, except the config in $(SYSCONFDIR)/l4lb.
uninstall:
	rm -f $(DESTDIR)$(SBINDIR)/l4lb $(DESTDIR)$(UNITDIR)/l4lb.service
	rm -f $(DESTDIR)$(DOCDIR)/README.md $(DESTDIR)$(DOCDIR)/l4lb.toml
	rm -rf $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(DOCDIR)/docs $(DESTDIR)$(DOCDIR)/contrib
	rm -f $(DESTDIR)$(MANDIR)/man5/l4lb.toml.5 $(DESTDIR)$(MANDIR)/man8/l4lb.8
	rm -f $(DESTDIR)$(BASHCOMPDIR)/l4lb $(DESTDIR)$(ZSHCOMPDIR)/_l4lb
	rmdir $(DESTDIR)$(DOCDIR) 2>/dev/null || true

# deb: $(BIN)/l4lb_DEB_VERSION_amd64.deb, from the tree `make install`
# stages (scripts/deb/build.sh): a static, stripped binary in /usr/sbin,
# the unit, /etc/l4lb/l4lb.toml as a conffile, docs, examples, man pages,
# completion. Installing it starts nothing; see docs/operations.md.
deb:
	GO=$(GO) BIN=$(BIN) scripts/deb/build.sh

clean:
	rm -rf $(BIN)
