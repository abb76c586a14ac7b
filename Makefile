# rotor: the two set-up commands are `make run` and `make test`.
# Both install missing Debian packages first (as root; otherwise they print the command).

BUILD_DIR ?= build
ASAN_DIR ?= build-asan
JOBS ?= $(shell nproc)
MODEL ?= models/stories260K.gguf
PROMPT ?= Once upon a time
# Tests run under AddressSanitizer + UBSan (ctest label "asan"): the GGUF reader and the
# tokenizer, the code that parses untrusted files and text.
ASAN_TARGETS ?= gguf_test gguf_malformed_test tokenizer_test

DEB_PACKAGES := cmake gcc g++ make libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev \
	nlohmann-json3-dev libcpp-httplib-dev libfmt-dev pkgconf \
	libcairo2-dev tmux libpcre2-dev haproxy curl chromium
# node and npm run the npm clients' tests (openai, puppeteer-core); any install
# of node will do (Debian's packages only where there is none).
DEB_PACKAGES += $(shell command -v npm >/dev/null 2>&1 || echo nodejs npm)

.PHONY: all deps deps-browser build run test test-asan bench install clean format

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
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release

build: deps $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS)

run: build
	./$(BUILD_DIR)/rotor generate -m $(MODEL) -p "$(PROMPT)"

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 600
	$(MAKE) --no-print-directory test-asan

test-asan: deps
	cmake -S . -B $(ASAN_DIR) -DCMAKE_BUILD_TYPE=Debug -DROTOR_SANITIZE=ON -DROTOR_BUILD_BENCH=OFF >/dev/null
	cmake --build $(ASAN_DIR) -j $(JOBS) --target $(ASAN_TARGETS)
	cd $(ASAN_DIR) && ctest --output-on-failure -j $(JOBS) -L asan --timeout 600

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
	rm -rf $(BUILD_DIR) $(ASAN_DIR)
