# rotor: the two set-up commands are `make run` and `make test`.
# Both install missing Debian packages first (as root; otherwise they print the command).

BUILD_DIR ?= build
ASAN_DIR ?= build-asan
TSAN_DIR ?= build-tsan
FUZZ_DIR ?= build-fuzz
JOBS ?= $(shell nproc)
MODEL ?= models/stories260K.gguf
PROMPT ?= Once upon a time
# Sanitizer builds: -O1 with debug info and CHECKs on (docs/RELIABILITY.md, "Sanitizers").
SAN_CONFIG = -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g" "-DCMAKE_C_FLAGS_DEBUG=-O1 -g" \
	-DROTOR_BUILD_BENCH=OFF
# Every test runs under AddressSanitizer + UBSan except these labels: install (packaging:
# it builds and installs a second copy of the project, no code of ours that ASan would
# add to) and replicas (haproxy in front of several `rotor serve`: minutes under ASan;
# the same server code runs under ASan in server_test).
ASAN_EXCLUDE ?= install|replicas
# ThreadSanitizer: the tests labelled tsan (the thread pool, the engine and its
# scheduler; the server's and batcher's tests once labelled).
TSAN_TARGETS ?= base_test engine_test
# Seconds each libFuzzer harness runs in `make fuzz` (`make test` runs each briefly).
FUZZ_TIME ?= 600
FUZZ_JOBS ?= 1

DEB_PACKAGES := cmake gcc g++ make libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev \
	nlohmann-json3-dev libcpp-httplib-dev libfmt-dev pkgconf \
	libcairo2-dev tmux libpcre2-dev haproxy curl clang-14 libclang-rt-14-dev

.PHONY: all deps build run test test-asan test-tsan test-fuzz fuzz bench install clean format

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

$(BUILD_DIR)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release

build: deps $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS)

run: build
	./$(BUILD_DIR)/rotor generate -m $(MODEL) -p "$(PROMPT)"

# The unit tests, then the same tests under ASan+UBSan, the threaded ones under TSan,
# and each fuzz harness briefly with its regression corpus.
test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 600
	$(MAKE) --no-print-directory test-asan
	$(MAKE) --no-print-directory test-tsan
	$(MAKE) --no-print-directory test-fuzz

test-asan: deps
	cmake -S . -B $(ASAN_DIR) $(SAN_CONFIG) -DROTOR_SANITIZE=address >/dev/null
	cmake --build $(ASAN_DIR) -j $(JOBS)
	cd $(ASAN_DIR) && ASAN_OPTIONS=detect_leaks=1 \
	  ctest --output-on-failure -j $(JOBS) -LE '$(ASAN_EXCLUDE)' --timeout 900

test-tsan: deps
	cmake -S . -B $(TSAN_DIR) $(SAN_CONFIG) -DROTOR_SANITIZE=thread >/dev/null
	cmake --build $(TSAN_DIR) -j $(JOBS) --target $(TSAN_TARGETS)
	cd $(TSAN_DIR) && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	  ctest --output-on-failure -j $(JOBS) -L tsan --timeout 900

$(FUZZ_DIR)/CMakeCache.txt: | deps
	CC=clang-14 CXX=clang++-14 cmake -S . -B $(FUZZ_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g" \
	  -DROTOR_FUZZ=ON -DROTOR_BUILD_BENCH=OFF >/dev/null

# Each harness for a few seconds, and every input of its regression corpus.
test-fuzz: $(FUZZ_DIR)/CMakeCache.txt
	cmake --build $(FUZZ_DIR) -j $(JOBS) --target fuzzers
	cd $(FUZZ_DIR) && ctest --output-on-failure -j $(JOBS) -L fuzz --timeout 300

# Each harness for FUZZ_TIME seconds (make fuzz FUZZ_TIME=3600 FUZZ_JOBS=2); new inputs
# under $(FUZZ_DIR)/tests/fuzz/work/NAME/corpus, a crash as .../work/NAME/crash-*.
fuzz: $(FUZZ_DIR)/CMakeCache.txt
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
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(TSAN_DIR) $(FUZZ_DIR)
