# hpctrain: `make demo` sets up and runs the demo job, `make test` sets up and
# runs the tests. Both install what they need first (scripts/install-deps.sh;
# the demo only its own part, --demo).
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
CTEST_FLAGS ?=

.PHONY: all deps deps-demo configure build test test-unit demo clean format package

all: build

deps:
	@bash scripts/install-deps.sh

# Only what the demo takes (a new user's first run): `make test` adds the rest.
deps-demo:
	@bash scripts/install-deps.sh --demo

# Configured after every install, not only when CMakeLists.txt changed: a part
# that `make demo`'s smaller install left out (the tf.Example benchmark, which
# needs protobuf) is found once `make test` has installed what it needs.
# Configuring an existing build folder takes a few seconds.
CONFIGURE = cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

configure: deps
	$(CONFIGURE)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure --timeout 600 $(CTEST_FLAGS)

# Only the fast in-process tests.
test-unit: build
	cd $(BUILD) && ctest --output-on-failure -L unit $(CTEST_FLAGS)

# The Debian package: $(BUILD)/hpctrain_<version>_amd64.deb (docs/cluster.md).
package: build
	cmake --build $(BUILD) --target hpctrain-deb

# The demo needs only the two executables (hpctrain execs hpctrain-torch for
# train), not the tests or the Python module: 165 of the tree's 261 build
# steps. Ninja keeps one progress line on a terminal.
DEMO_TARGETS = hpctrain hpctrain-torch
demo: deps-demo
	$(CONFIGURE)
	NINJA_STATUS="[%f/%t %p, %es] " cmake --build $(BUILD) -j $(JOBS) --target $(DEMO_TARGETS)
	bash scripts/demo.sh $(BUILD)

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD)
