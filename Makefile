# The two commands of the README:
#   make demo   build everything (core, header, Open MPI component) and run the demo
#   make test   run every test suite (scripts/test.sh)
.PHONY: all build component install demo test bench deps header

all: build

deps:
	scripts/deps.sh

# include/doorbell.h from the C ABI (a build never writes the tree; make
# test fails while the committed header is stale)
header:
	scripts/header.sh

build:
	cargo build --release
	$(MAKE) -C ompi all

install: build
	$(MAKE) -C ompi install
	scripts/install-prefix.sh target/prefix

demo: install
	cargo run --release --example demo

test: build
	scripts/test.sh

bench: install
	bench/core/run.sh
	bench/ompi/run.sh
