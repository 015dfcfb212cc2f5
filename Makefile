# Thin wrapper over CMake. `make` builds build/ft; `make test` runs every CPU test.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all build test test-gpu fuzz tsan format clean

all: build

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -L 'cpu|model|server' -j $(JOBS)

test-gpu: build
	cd $(BUILD) && ctest --output-on-failure -L gpu

fuzz:
	CC=clang cmake -S . -B build-fuzz -DFT_FUZZ=ON -DFT_CUDA=OFF -DFT_SANITIZE=ON -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link
	cmake --build build-fuzz -j $(JOBS) --target fuzz_all
	tools/run_fuzz.sh build-fuzz $(FUZZ_SECONDS)

# the thread pool, the CPU expert executor (whose fused step hands work between workers
# through atomics) and the scheduler (its engine thread, the watchdogs' abandoned jobs) under
# ThreadSanitizer; any report fails
tsan:
	cmake -S . -B build-tsan -DFT_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS=-fsanitize=thread -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread
	cmake --build build-tsan -j $(JOBS) --target test_threadpool test_moe_exec test_model_sched
	TSAN_OPTIONS=halt_on_error=1 build-tsan/test_threadpool
	TSAN_OPTIONS=halt_on_error=1 build-tsan/test_moe_exec
	TSAN_OPTIONS=halt_on_error=1 build-tsan/test_model_sched

format:
	clang-format -i include/*.h src/*/*.[ch] src/*/*/*.[ch] tests/*.[ch] fuzz/*.c

clean:
	rm -rf $(BUILD) build-fuzz build-tsan
