# rotor: the two set-up commands are `make run` and `make test`.
# Both install missing Debian packages first (as root; otherwise they print the command).

BUILD_DIR ?= build
ASAN_DIR ?= build-asan
TSAN_DIR ?= build-tsan
JOBS ?= $(shell nproc)
# Tests run one more at a time than there are cores: some wait on sockets,
# child processes or timers, and the thread pool yields its core to others
# (docs/RELIABILITY.md, "Time": the ASan+UBSan suite 617 s at -j2, 555 s at -j3).
TEST_JOBS ?= $(shell echo $$(( $(JOBS) + 1 )))
MODEL ?= models/stories260K.gguf
PROMPT ?= Once upon a time
# Every tree compiles the tests and the tool in unity batches (ROTOR_UNITY_BUILD
# in CMakeLists.txt: a fresh build of the three trees is CI's largest cost).
UNITY_CONFIG = -DROTOR_UNITY_BUILD=ON
# A new tree is generated for Ninja (Debian's ninja-build): it starts a
# target's compilations while the libraries it links are still being built,
# where CMake's Makefiles wait for them, so both cores stay busy to the end of
# each build (docs/RELIABILITY.md, "Time"). A tree configured before keeps its
# generator.
generator = $(if $(wildcard $(1)/CMakeCache.txt),,-G Ninja)
# The sanitizer trees: clang 14, -O1 with line tables (what the reports' stacks
# need), CHECKs and asserts on, no benchmarks (docs/RELIABILITY.md, "Sanitizers").
SAN_CONFIG = $(UNITY_CONFIG) -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=Debug \
	"-DCMAKE_CXX_FLAGS_DEBUG=-O1 -gline-tables-only" "-DCMAKE_C_FLAGS_DEBUG=-O1 -gline-tables-only" \
	-DROTOR_BUILD_BENCH=OFF
# One clang tree under AddressSanitizer + UBSan that also builds the libFuzzer
# harnesses (ROTOR_FUZZ). `make test` runs every test there (the fuzz tests
# run each harness briefly and replay its regression corpus) but the labels in
# ASAN_EXCLUDE. The numeric sweeps run fewer combinations there
# (tests/sanitizers/sweep.h); each checks that every ISA, shape, policy and
# type it offers still runs.
# Labels left out under ASan: install (packaging: it builds and installs a
# second copy of the project with the normal flags), readme (the README's
# commands, which install the library and link examples with the system cc;
# the commands themselves run under ASan in the CLI tests) and replicas (haproxy
# in front of several `rotor serve` for minutes; the same server code runs in
# server_test). The readme and replicas programs are not built in the
# sanitizer trees (tests/cli, tests/replicas).
ASAN_EXCLUDE ?= install|readme|replicas
FUZZ_DIR ?= $(ASAN_DIR)
# ThreadSanitizer in `make test`: the thread pool (base_test), the engine
# with its scheduler and batched runner (engine_test), the server
# (server_test, with TSAN_FILTER) and the C library called from several
# threads at once (capi_test) (docs/RELIABILITY.md, "Sanitizers").
TSAN_TARGETS ?= base_test engine_test server_test capi_test
# Left out under TSan: the hostile tests (2,000 connections at once measure
# TSan's speed, not races), the tool-call suites and the npm clients (sampling
# and node processes, no threads of their own beyond the server's).
TSAN_FILTER ?= -ServerHostileTest.*:ToolServerTest.*:MistralToolServerTest.*:OpenAiNpmTest.*:EndpointsNpm.*
# Seconds each libFuzzer harness runs in `make fuzz` (`make test` runs each briefly).
FUZZ_TIME ?= 600
FUZZ_JOBS ?= 1

DEB_PACKAGES := cmake ninja-build gcc g++ make libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev \
	nlohmann-json3-dev libcpp-httplib-dev libfmt-dev pkgconf \
	libcairo2-dev tmux libpcre2-dev haproxy curl chromium clang-14 libclang-rt-14-dev lld
# node and npm run the npm clients' tests (openai, puppeteer-core); any install
# of node will do (Debian's packages only where there is none).
DEB_PACKAGES += $(shell command -v npm >/dev/null 2>&1 || echo nodejs npm)

.PHONY: all deps deps-browser build run test asan-configure test-asan test-tsan tsan-run test-fuzz fuzz bench install clean format

all: build

deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = "0" ]; then \
	    echo "rotor: installing Debian packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null || exit 1; \
	  else \
	    echo "rotor: missing Debian packages:$$missing"; \
	    echo "run:  sudo apt-get install -y$$missing"; \
	    exit 1; \
	  fi; \
	fi
	@$(MAKE) --no-print-directory deps-browser

# The browser test's driver (puppeteer-core, pinned by package-lock.json); it
# drives Debian's chromium. Offline, the test is skipped and says why.
deps-browser:
	@cd tests/browser && if [ ! -f node_modules/.package-lock.json ] || \
	    [ package-lock.json -nt node_modules/.package-lock.json ]; then \
	  echo "rotor: npm ci in tests/browser"; \
	  PUPPETEER_SKIP_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error || \
	    echo "rotor: npm ci failed in tests/browser; the browser test will be skipped"; \
	fi

$(BUILD_DIR)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD_DIR) $(call generator,$(BUILD_DIR)) -DCMAKE_BUILD_TYPE=Release $(UNITY_CONFIG)

build: deps $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS)

run: build
	./$(BUILD_DIR)/rotor generate -m $(MODEL) -p "$(PROMPT)"

# The unit tests; then all of them again under ASan+UBSan, with each fuzz
# harness briefly and its regression corpus; and the threaded ones under TSan.
test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(TEST_JOBS) --timeout 600
	$(call report_skips,$(BUILD_DIR))
	$(MAKE) --no-print-directory test-asan
	$(MAKE) --no-print-directory test-tsan

# The tests of the last ctest run in $(1) that skipped themselves (GTEST_SKIP):
# ctest runs a suite's tests in groups (tests/CMakeLists.txt, ROTOR_TEST_GROUP),
# and a group that skips some of its tests passes, so its summary does not
# name them.
define report_skips
	@grep -h '^\[  SKIPPED \] [^ ]* (' $(1)/Testing/Temporary/LastTest.log 2>/dev/null | \
	  sed 's/^\[  SKIPPED \] /rotor: skipped: /; s/ ([0-9]* ms)$$//'; true
endef

# Runs each program of $(2) built in $(1), with $(3) as extra arguments; stops at
# the first that fails.
define run_programs
	@for t in $(2); do \
	  exe=$$(find $(1)/tests -name $$t -type f -perm -u+x | head -1); \
	  [ -n "$$exe" ] || { echo "rotor: $$t not built in $(1)"; exit 1; }; \
	  echo "rotor: $$t"; \
	  (cd $$(dirname $$exe) && ./$$t --gtest_brief=1 $(3)) || exit 1; \
	done
endef

asan-configure: deps
	cmake -S . -B $(ASAN_DIR) $(call generator,$(ASAN_DIR)) $(SAN_CONFIG) -DROTOR_FUZZ=ON >/dev/null

ASAN_ENV = ASAN_OPTIONS=detect_leaks=1 \
	LSAN_OPTIONS=suppressions=$(CURDIR)/tests/sanitizers/lsan.supp:print_suppressions=0

# Every test but the labels in $(ASAN_EXCLUDE), the fuzz tests among them.
test-asan: asan-configure
	cmake --build $(ASAN_DIR) -j $(JOBS)
	cd $(ASAN_DIR) && $(ASAN_ENV) ctest --output-on-failure -j $(TEST_JOBS) -LE '$(ASAN_EXCLUDE)' --timeout 900
	$(call report_skips,$(ASAN_DIR))

test-tsan: deps
	cmake -S . -B $(TSAN_DIR) $(call generator,$(TSAN_DIR)) $(SAN_CONFIG) -DROTOR_SANITIZE=thread >/dev/null
	cmake --build $(TSAN_DIR) -j $(JOBS) --target $(TSAN_TARGETS)
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	  $(MAKE) --no-print-directory tsan-run

tsan-run:
	$(call run_programs,$(TSAN_DIR),$(TSAN_TARGETS),--gtest_filter='$(TSAN_FILTER)')

# Each harness for a few seconds, and every input of its regression corpus.
test-fuzz: asan-configure
	cmake --build $(FUZZ_DIR) -j $(JOBS) --target fuzzers
	cd $(FUZZ_DIR) && ctest --output-on-failure -j $(TEST_JOBS) -L fuzz --timeout 300

# Each harness for FUZZ_TIME seconds (make fuzz FUZZ_TIME=3600 FUZZ_JOBS=2); new inputs
# under $(FUZZ_DIR)/tests/fuzz/work/NAME/corpus, a crash as .../work/NAME/crash-*.
fuzz: asan-configure
	cmake --build $(FUZZ_DIR) -j $(JOBS) --target fuzzers
	@status=0; for line in $$(cat $(FUZZ_DIR)/tests/fuzz/fuzzers.txt); do \
	  target=$${line%%:*}; seeds=$${line#*:}; name=$${target#fuzz_}; \
	  echo "rotor: fuzzing $$name for $(FUZZ_TIME) s"; \
	  FUZZ_JOBS=$$([ $(FUZZ_JOBS) -gt 1 ] && echo $(FUZZ_JOBS)) tests/fuzz/run_fuzzer.sh \
	    $(FUZZ_DIR)/tests/fuzz/$$target $(FUZZ_DIR)/tests/fuzz/work/$$name $(FUZZ_TIME) $$seeds \
	    || status=1; \
	done; exit $$status

# The library, header, rotor.pc, the CMake package, the binary and the bundled
# model under $(PREFIX) (make install PREFIX=$$HOME/.local).
PREFIX ?= /usr/local
install: build
	cmake --install $(BUILD_DIR) --prefix $(PREFIX)

bench: build
	./$(BUILD_DIR)/rotor bench -m $(MODEL)

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(TSAN_DIR) $(FUZZ_DIR) build-fuzz
