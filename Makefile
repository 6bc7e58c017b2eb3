# mailer: PGXS build, plus the targets that run services, tests, the demo and
# the benchmarks.  `make test` works from a fresh Debian 12 machine.

EXTENSION   = mailer
MODULE_big  = mailer
EXTVERSION  = 0.2.0

SRCS        = $(sort $(wildcard src/*.c src/*/*.c))
OBJS        = $(SRCS:.c=.o)
DATA        = $(wildcard sql/mailer--*.sql)
# The dashboard's page, script and style: the HTTP worker reads them from
# $(sharedir)/extension/ when it starts.
DATA       += web/mailer-dashboard.html web/mailer-dashboard.js web/mailer-dashboard.css

REGRESS      = $(patsubst sql/%.sql,%,$(filter-out sql/mailer--%,$(sort $(wildcard sql/*.sql))))
# Jobs run only in mailer.database, so the tests use that database as it is
# (PGDATABASE, default 'mailer') instead of a fresh one; the first test
# (re)creates the extension.
REGRESS_OPTS = --inputdir=. --use-existing
override CONTRIB_TESTDB = $(or $(PGDATABASE),mailer)

PG_CPPFLAGS = -I$(srcdir)/src -Wall -Werror -DMAILER_VERSION=\"$(EXTVERSION)\"
SHLIB_LINK  = -lrdkafka -lrocksdb -lmicrohttpd -lwebsockets -lcurl -lssl -lcrypto

# RDKAFKA_PREFIX=/some/prefix: link the librdkafka installed there
# (test/services/librdkafka.sh builds one) instead of Debian's, found at run
# time through the rpath.  Debian 12's 2.0.2 lacks fetch.queue.backoff.ms
# (2.2), without which the prefetch queue must hold a second of input.
# The prefix is kept in a stamp, so that changing it rebuilds and relinks.
ifneq ($(RDKAFKA_PREFIX),)
PG_CPPFLAGS += -I$(RDKAFKA_PREFIX)/include
SHLIB_LINK  += -L$(RDKAFKA_PREFIX)/lib -Wl,-rpath,$(RDKAFKA_PREFIX)/lib
endif
RDKAFKA_STAMP = .rdkafka-prefix
$(shell echo '$(RDKAFKA_PREFIX)' | cmp -s - $(RDKAFKA_STAMP) || echo '$(RDKAFKA_PREFIX)' >$(RDKAFKA_STAMP))

PG_CONFIG ?= /usr/lib/postgresql/15/bin/pg_config
# No LLVM bitcode: JIT inlining of mailer's code is not worth the build.
override with_llvm = no
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# Rebuild an object when a header it includes changes.
override CPPFLAGS += -MMD -MP
-include $(OBJS:.o=.d)
EXTRA_CLEAN = $(OBJS:.o=.d) $(RDKAFKA_STAMP)
$(OBJS): $(RDKAFKA_STAMP)
# The version is compiled in: a changed EXTVERSION must reach the library.
src/jobs/catalog.o: Makefile

SERVICES = test/services

.PHONY: deps services services-down test test-long integration demo demo-kafka bench fuzz pulsar-tool

# Debian packages and the Kafka and Pulsar jars; a no-op once installed.
deps:
	$(SERVICES)/deps.sh
	$(SERVICES)/kafka.sh fetch
	$(SERVICES)/pulsar.sh fetch

# A throwaway PostgreSQL cluster (library preloaded) and a KRaft broker.
services:
	$(SERVICES)/pg.sh start
	$(SERVICES)/kafka.sh start

# Pulsar is not among the services: its tests start it when they need it
# ($(SERVICES)/pulsar.sh start), and this stops it too.
services-down:
	-$(SERVICES)/pg.sh stop
	-$(SERVICES)/kafka.sh stop
	-$(SERVICES)/pulsar.sh stop

# The Pulsar tests' client (test/pulsar_tool), on src/connectors/pulsar_ws.c.
pulsar-tool:
	$(MAKE) -C test/pulsar_tool PG_CONFIG=$(PG_CONFIG)

integration:
	test/run-integration.sh

# Everything, from a fresh machine: dependencies, build, install, services,
# pg_regress, integration tests; services stop whatever the outcome.
test:
	test/run-all.sh

# The long integration tests (test/t/long: soak and fault runs), prepared
# the same way; CI runs them after `make test`.
test-long:
	test/run-all.sh --long

demo:
	test/demo.sh

# Only the demo's Kafka to Kafka pipeline (test/demo_kafka.sh), after the
# same setup and orders.
demo-kafka:
	test/demo.sh kafka

# Differential fuzzing of the JSON field scanner and the ISO 8601 fast path
# against PostgreSQL's parsers, under AddressSanitizer, in a cluster of its
# own (test/fuzz/run.sh); FUZZ_SEED repeats a run.
FUZZ_SECONDS ?= 300
fuzz:
	test/fuzz/run.sh $(FUZZ_SECONDS)

bench:
	test/bench/run.sh
