# tether: `make demo` runs the main job, `make test` runs every test, `make quick` the
# day-to-day subset (docs/building.md), `make gen` rewrites the op tables made from ONNX's schemas.
# Both install what is missing first (Debian packages when run as root, a virtualenv in
# .venv, the package in editable mode) and are quick when nothing changed.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMPS := .stamps
BUILD := build/py
APT_PACKAGES := libprotobuf-dev protobuf-compiler libeigen3-dev libgtest-dev libvulkan-dev glslc \
                mesa-vulkan-drivers vulkan-validationlayers chromium ccache
# Builds go through ccache when it is installed (from the second `make` of a fresh machine on):
# a fresh clone on a machine that built tether before compiles only what differs. Paths under
# the checkout are hashed relative to it, so clones in other folders share the cache.
ifneq ($(shell command -v ccache 2>/dev/null),)
export CMAKE_C_COMPILER_LAUNCHER := ccache
export CMAKE_CXX_COMPILER_LAUNCHER := ccache
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1
endif
# Sources whose change needs the extension rebuilt.
CORE_SOURCES := $(shell find cpp bindings tests/cpp cmake -type f 2>/dev/null) CMakeLists.txt pyproject.toml

.PHONY: all demo test quick gen gen-check test-cpp test-sanitize test-arm64 test-python test-install test-reduced \
        setup apt lint \
        clean fuzz

all: setup

demo: setup
	$(VPY) -m tether.demo

test: setup test-cpp test-sanitize test-arm64 test-python test-install test-reduced lint

# The day-to-day loop: the incremental build, the C++ tests of build/py and the Python tests
# except the slow ones: those marked `slow` and those tools/quick_skip.txt lists (half a second
# or more each, or using a fixture slow to set up; tools/pytest_quick.py says how the list is
# made). No notebooks, sanitizer, AArch64 build, install check or lint: `make test` runs them.
quick: setup
	$(VENV)/bin/ctest --test-dir $(BUILD) --output-on-failure -j2 --progress
	PYTHONPATH=tools $(VPY) -m pytest -q -p pytest_quick -m "not slow"

test-cpp: setup
	ctest --test-dir $(BUILD) --output-on-failure -j2

# The C++ library, its tests and the fuzz targets' replays of their corpora once more under
# AddressSanitizer and UndefinedBehaviorSanitizer, in a build folder of their own (incremental).
SAN_BUILD := build/asan
test-sanitize: setup
	@test -f $(SAN_BUILD)/build.ninja || $(VENV)/bin/cmake -S . -B $(SAN_BUILD) -G Ninja \
	  -DCMAKE_MAKE_PROGRAM=$(abspath $(VENV)/bin/ninja) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DTETHER_SANITIZE=ON -DTETHER_BUILD_TESTS=ON -DTETHER_VULKAN=OFF >/dev/null
	$(VENV)/bin/cmake --build $(SAN_BUILD) -j2
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  $(VENV)/bin/ctest --test-dir $(SAN_BUILD) --output-on-failure -j2

# The deployment build cross-compiled for AArch64 (build/arm64, incremental) and a sample of
# the C++ tests run under qemu-aarch64: the float and integer kernels against plain loops, the
# C API end to end, ONNX I/O, and every CPU case of the op table against its oracle (files that
# tests/python/_op_table_files.py writes: onnxruntime's or numpy's outputs from this machine).
# qemu's default CPU has every extension (the i8mm kernels run);
# then the kernel tests again as a Cortex-A76 (dot product, no i8mm) and a Cortex-A53 (NEON
# alone), where a kernel chosen past what getauxval reports would stop on an illegal
# instruction, and with TETHER_ISA=generic. Nothing here measures speed. The test programs are
# linked statically: Debian 12's qemu-aarch64 (7.2) hangs when a dynamically linked program
# starts a thread.
ARM_BUILD := build/arm64
ARM_TESTS := cpu_kernels_test;qgemm_test;c_api_test;onnx_io_test;op_table_test
ARM_OP_TABLE := $(abspath $(ARM_BUILD))/op_table
ARM_PACKAGES := g++-aarch64-linux-gnu qemu-user libprotobuf-dev:arm64 libgtest-dev:arm64
test-arm64: setup
	@if [ "$$(id -u)" = 0 ] && ! dpkg --print-foreign-architectures | grep -qx arm64; then \
	  dpkg --add-architecture arm64; fi
	@$(MAKE) --no-print-directory apt APT_PACKAGES="$(ARM_PACKAGES)"
	@test -f $(ARM_BUILD)/build.ninja || $(VENV)/bin/cmake -S . -B $(ARM_BUILD) -G Ninja \
	  -DCMAKE_MAKE_PROGRAM=$(abspath $(VENV)/bin/ninja) -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
	  -DTETHER_DEPLOY=ON -DTETHER_TEST_SELECTION="$(ARM_TESTS)" -DCMAKE_EXE_LINKER_FLAGS=-static >/dev/null
	$(VENV)/bin/cmake -B $(ARM_BUILD) -DTETHER_TEST_SELECTION="$(ARM_TESTS)" >/dev/null
	$(VENV)/bin/cmake --build $(ARM_BUILD) -j2
	rm -rf $(ARM_OP_TABLE) && $(VPY) tests/python/_op_table_files.py $(ARM_OP_TABLE)
	TETHER_OP_TABLE_DIR=$(ARM_OP_TABLE) TETHER_EXPECT_ISA=neon_i8mm $(VENV)/bin/ctest --test-dir $(ARM_BUILD) \
	  --output-on-failure -j2
	for run in cortex-a76:neon_dot cortex-a53:neon; do \
	  QEMU_CPU=$${run%:*} TETHER_EXPECT_ISA=$${run#*:} TETHER_OP_TABLE_DIR=$(ARM_OP_TABLE) $(VENV)/bin/ctest \
	    --test-dir $(ARM_BUILD) --output-on-failure -j2 -R "CpuKernels|QGemm.SumsMatchInt64|QGemm.Kernels|CApi.Mlp|OpTable" \
	    || exit 1; \
	done
	TETHER_ISA=generic TETHER_EXPECT_ISA=generic TETHER_OP_TABLE_DIR=$(ARM_OP_TABLE) $(VENV)/bin/ctest \
	  --test-dir $(ARM_BUILD) --output-on-failure -j2 -R "CpuKernels|OpTable"

test-python: setup
	$(VPY) -m pytest -q
	$(VPY) -m pytest -q --nbmake notebooks

# The installed library as a program outside this tree uses it: build/py's dev component
# installed into build/install, examples/cpp built against it with find_package (C++ with
# libtether.so, C with libtether.a) and with pkg-config (C), and each program's output checked
# against onnxruntime (examples/cpp/check.py). Incremental, like the build it installs.
INSTALL_DIR := build/install
EXAMPLES_BUILD := build/examples
test-install: setup
	@$(MAKE) --no-print-directory apt APT_PACKAGES="pkgconf"
	$(VENV)/bin/cmake --install $(BUILD) --prefix $(INSTALL_DIR) --component dev >/dev/null
	@test -f $(EXAMPLES_BUILD)/build.ninja || $(VENV)/bin/cmake -S examples/cpp -B $(EXAMPLES_BUILD) -G Ninja \
	  -DCMAKE_MAKE_PROGRAM=$(abspath $(VENV)/bin/ninja) -DCMAKE_PREFIX_PATH=$(abspath $(INSTALL_DIR)) >/dev/null
	$(VENV)/bin/cmake --build $(EXAMPLES_BUILD)
	cc -std=c99 -O1 -o $(EXAMPLES_BUILD)/run_model_pkgconfig examples/cpp/main.c \
	  $$(PKG_CONFIG_PATH=$(INSTALL_DIR)/lib/pkgconfig pkg-config --cflags --libs tether) -Wl,-rpath,$(abspath $(INSTALL_DIR))/lib
	$(VPY) examples/cpp/check.py $(EXAMPLES_BUILD)/model.onnx $(EXAMPLES_BUILD)/run_model $(EXAMPLES_BUILD)/run_model_c \
	  $(EXAMPLES_BUILD)/run_model_pkgconfig

# The reduced deployment build (docs/building.md): `tether ops-config` lists a small CNN's ops,
# build/reduced builds libtether.so with only their CPU kernels and build/deploy-full the whole
# deployment library (both incremental, the library target alone; the objects outside the CPU
# backend are the same in both and come from ccache), and tests/deploy/check_reduced.py runs the
# CNN through the reduced library against onnxruntime, checks that an LSTM model fails with
# TETHER_ERROR_UNSUPPORTED naming LSTM, that the recurrent kernel's code is gone and that the
# library is smaller than the full one.
REDUCED_BUILD := build/reduced
DEPLOY_FULL_BUILD := build/deploy-full
DEPLOY_CMAKE = $(VENV)/bin/cmake -S . -G Ninja -DCMAKE_MAKE_PROGRAM=$(abspath $(VENV)/bin/ninja) -DTETHER_DEPLOY=ON \
  -DTETHER_BUILD_TESTS=OFF
test-reduced: setup
	$(VPY) tests/deploy/check_reduced.py models $(REDUCED_BUILD)/models
	@test -f $(REDUCED_BUILD)/build.ninja || $(DEPLOY_CMAKE) -B $(REDUCED_BUILD) \
	  -DTETHER_DEPLOY_OPS=$(abspath $(REDUCED_BUILD))/models/ops.txt >/dev/null
	$(VENV)/bin/cmake --build $(REDUCED_BUILD) -j2 --target tether_shared
	@test -f $(DEPLOY_FULL_BUILD)/build.ninja || $(DEPLOY_CMAKE) -B $(DEPLOY_FULL_BUILD) >/dev/null
	$(VENV)/bin/cmake --build $(DEPLOY_FULL_BUILD) -j2 --target tether_shared
	$(VPY) tests/deploy/check_reduced.py check $(REDUCED_BUILD)/models $(REDUCED_BUILD) $(DEPLOY_FULL_BUILD)

setup: apt $(STAMPS)/build

# A fuzzing campaign (not part of `make test`): builds the libFuzzer targets with clang in
# build/fuzz and runs the structured engine and loader targets for FUZZ_TIME seconds each on
# every core, corpora kept in FUZZ_DIR between campaigns. Findings land in FUZZ_DIR/*/artifacts;
# tests/fuzz/README.md says what to do with them.
FUZZ_TIME ?= 600
FUZZ_DIR ?= /tmp/tether-fuzz
FUZZ_BUILD := build/fuzz
FUZZ_FLAGS = -max_total_time=$(FUZZ_TIME) -timeout=10 -rss_limit_mb=4096 -max_len=65536 -fork=$$(nproc) \
             -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1
fuzz: setup
	@$(MAKE) --no-print-directory apt APT_PACKAGES="clang libclang-rt-14-dev"
	@test -f $(FUZZ_BUILD)/build.ninja || $(VENV)/bin/cmake -S tests/fuzz -B $(FUZZ_BUILD) -G Ninja \
	  -DCMAKE_MAKE_PROGRAM=$(abspath $(VENV)/bin/ninja) -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	$(VENV)/bin/ninja -C $(FUZZ_BUILD) engine_fuzzer_structured load_fuzzer_structured
	mkdir -p $(FUZZ_DIR)/engine/corpus $(FUZZ_DIR)/engine/artifacts $(FUZZ_DIR)/load/corpus $(FUZZ_DIR)/load/artifacts
	cp -rn tests/fuzz/engine_seeds/. tests/fuzz/corpus/engine/. $(FUZZ_DIR)/engine/corpus/
	cp -rn tests/fuzz/seeds/. tests/fuzz/corpus/load/. $(FUZZ_DIR)/load/corpus/
	cd $(FUZZ_DIR)/engine && $(abspath $(FUZZ_BUILD))/engine_fuzzer_structured corpus $(FUZZ_FLAGS) \
	  -artifact_prefix=artifacts/ 2>&1 | tee log.txt | grep -E "^#[0-9]+: cov" | tail -1
	cd $(FUZZ_DIR)/load && $(abspath $(FUZZ_BUILD))/load_fuzzer_structured corpus -dict=$(abspath tests/fuzz/onnx.dict) \
	  $(FUZZ_FLAGS) -artifact_prefix=artifacts/ 2>&1 | tee log.txt | grep -E "^#[0-9]+: cov" | tail -1

# Debian packages: checked every time (cheap), installed only when missing. dpkg-query -W
# rather than dpkg -s: once test-arm64 has installed a library for arm64 too, `dpkg -s NAME`
# is ambiguous and fails, and every make would run apt-get.
apt:
	@missing=$$(for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${db:Status-Abbrev}\n' $$p 2>/dev/null | grep -q '^ii' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    mkdir -p $(STAMPS); echo "installing Debian packages (log: $(STAMPS)/apt.log):" $$missing; \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; } \
	      > $(STAMPS)/apt.log 2>&1 || { cat $(STAMPS)/apt.log; exit 1; }; \
	  else \
	    echo "missing Debian packages:" $$missing; \
	    echo "run as root, or: sudo apt-get install" $$missing; exit 1; \
	  fi; \
	fi

# The extension's build with its progress on the terminal: pip -v passes on CMake's and
# ninja's lines ([12/285 40.2s] Building CXX object ...); pip's own chatter at -v is dropped.
# The build runs without isolation so that rebuilds reuse build/py incrementally.
PIP_CHATTER := ^ *(Using pip|Looking in|Obtaining|Checking if build backend|Preparing editable|Running command|Building \
  editable for|Created wheel|Stored in directory|Successfully built|Installing collected|Attempting uninstall|Found \
  existing|Uninstalling|Removing file or directory|Successfully uninstalled|changing mode|Building wheels for)
# One build of build/py at a time (flock): two ninja runs in one folder fail on each other's
# half-linked programs ("text file is busy") and can leave ninja's logs truncated, after which
# every step runs again.
BUILD_CORE = set -o pipefail; mkdir -p build; TETHER_BUILD_TESTS=ON NINJA_STATUS="[%f/%t %es] " \
  flock build/.py.lock $(VPY) -m pip install -v -e . --no-build-isolation --no-deps 2>&1 \
  | { grep -Ev --line-buffered "$(PIP_CHATTER)" || true; }

$(STAMPS)/venv: pyproject.toml
	@mkdir -p $(STAMPS)
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q "scikit-build-core>=0.10" "pybind11>=2.12" ninja cmake
	@echo "building the C++ core (about 6 minutes on 2 cores from nothing), then the Python dependencies"
	@$(BUILD_CORE)
	TETHER_BUILD_TESTS=ON $(VPY) -m pip install -q -e ".[dev]" --no-build-isolation
	# timm's image models for bench/zoo.py, without torchvision (see pyproject.toml).
	$(VPY) -m pip install -q --no-deps "timm>=1.0"
	touch $@

$(STAMPS)/build: $(STAMPS)/venv $(CORE_SOURCES)
	@echo "building the C++ core (incremental: only what changed)"
	@$(BUILD_CORE)
	touch $@

lint: setup gen-check
	$(VPY) -m ruff check python tests/python bench tools
	$(VPY) -m mypy python/tether

# Generated tables committed with the sources: cpp/src/ops/{arity,index_types,same_types}.inc,
# from the ONNX schemas of the onnx version pyproject.toml pins (tools/gen_op_arity.py refuses
# another). `make gen` rewrites those that differ; `make gen-check` (part of lint) fails if any does.
gen: $(STAMPS)/venv
	$(VPY) tools/gen_op_arity.py --write

gen-check: $(STAMPS)/venv
	$(VPY) tools/gen_op_arity.py --check

clean:
	rm -rf build $(STAMPS) out
