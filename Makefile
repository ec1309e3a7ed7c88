# The two README commands. Everything else is plain CMake (see README).
BUILD ?= build
JOBS ?= $(shell nproc)
BUILD_TYPE ?= Quick
CMAKE_FLAGS ?=

.PHONY: demo test deps build clean

demo: build
	$(BUILD)/bin/enginery train --config examples/demo.toml --nproc 2 --fresh-run  # a previous demo is moved aside, never overwritten
	$(BUILD)/bin/enginery plot runs/demo

test: build
	cd $(BUILD) && ctest --output-on-failure -LE gpu -j $(JOBS) --timeout 900

build: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

deps:
	scripts/install_deps.sh

clean:
	rm -rf $(BUILD)
