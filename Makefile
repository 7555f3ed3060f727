# mixscope build. Objects are linked directly (no archive): the command and mixer tables refer to
# their entries weakly, and an archive would drop members nothing else names.
#
#
#   make            the binary ./mixscope (CUDA kernels included when nvcc is found; CUDA=0 leaves
#                   them out; the binary runs on machines without a GPU either way)
#   make test       every CPU test; ends with "tests: N passed, M failed"
#   make check      the tests under AddressSanitizer + UndefinedBehaviorSanitizer
#   make test-gpu   the GPU tests (needs a GPU; skipped with a message when there is none)
#   make fuzz       libFuzzer targets (clang); make fuzz-run fuzzes each for FUZZ_SECONDS
#   make bench      CPU benchmarks (printed tables of medians)
#   make bench-step the engine stepping models and raw lanes with probes: tokens/s against the floor
#   make bench-train `train gdn` timed against its FLOP floor (TRAIN_STEPS=300, TRAIN_ARGS=...)
#   make bench-attribution  exact attribution of a 16-head layer on the GPU against the CPU
#   make run        the guided tour
#   make format     clang-format every source file

CC       ?= cc
NVCC     ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
ifeq ($(NVCC),)
CUDA ?= 0
else
CUDA ?= 1
endif

BUILD    ?= build/release
# -fvect-cost-model=dynamic: GCC vectorises loops whose trip count is not a multiple of the
# vector width (the cores' value-column blocks); it reassociates no floating-point sum, so results
# are the same bits as without it.
OPT      ?= -O2 -fvect-cost-model=dynamic
WARN      = -Wall -Wextra -Werror -Wno-format-truncation
CFLAGS   ?=
CPPFLAGS += -D_DEFAULT_SOURCE -I. -DMIXSCOPE_SOURCE_DIR='"$(CURDIR)"'

SANITIZE ?=

# Debian packages found through pkg-config (scripts/deps.sh installs them).
PKGS     := libcjson libpcre2-8 cairo freetype2 sdl2 ncursesw readline stb cmocka
PKG_CFLAGS := $(filter-out -D_XOPEN_SOURCE=% -D_REENTRANT,$(shell pkg-config --cflags $(PKGS) 2>/dev/null))
PKG_LIBS   := $(shell pkg-config --libs libcjson libpcre2-8 cairo freetype2 sdl2 ncursesw readline stb 2>/dev/null)
ifeq ($(PKG_LIBS),)
PKG_LIBS := -lcjson -lpcre2-8 -lcairo -lfreetype -lSDL2 -lncursesw -lreadline -lstb
endif
CMOCKA_LIBS := $(shell pkg-config --libs cmocka 2>/dev/null || echo -lcmocka)

ALL_CFLAGS = -std=c11 $(WARN) $(OPT) -g $(SANITIZE) $(PKG_CFLAGS) $(CFLAGS)
LDLIBS    = $(PKG_LIBS) -lm -lpthread

LIB_SRC  := $(sort $(wildcard core/*.c mixers/*.c models/*.c engine/*.c train/*.c scenes/*.c viz/*.c export/*.c diag/*.c tokenizer/*.c cli/*.c))
LIB_SRC  := $(filter-out cli/main.c,$(LIB_SRC))
CU_SRC   := $(sort $(wildcard kernels/*.cu))
TEST_SRC := $(sort $(wildcard tests/test_*.c))
BENCH_SRC := $(sort $(wildcard bench/bench_*.c))

ifeq ($(CUDA),1)
CPPFLAGS += -DMIXSCOPE_CUDA=1
KOBJ     := $(patsubst %.cu,$(BUILD)/%.o,$(CU_SRC))
NVFLAGS  ?= -O2 -std=c++17 -gencode arch=compute_90,code=[sm_90,compute_90] -I. -Xcompiler -fPIC
NVFLAGS_90A ?= -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a -I. -Xcompiler -fPIC
LDLIBS   += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcudart_static -ldl -lrt -lstdc++
else
LIB_SRC  += kernels/gpu_none.c
KOBJ     :=
endif

LIB_OBJ  := $(patsubst %.c,$(BUILD)/%.o,$(LIB_SRC))
TEST_BIN := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
BENCH_BIN := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))

# test-bins: built by `make test`
TRAIN_STEPS ?= 300
.PHONY: all test test-bins check test-gpu bench bench-step bench-train bench-gpu bench-attribution fuzz fuzz-run run clean format golden deps

all: mixscope

mixscope: $(BUILD)/mixscope
	@cp $< $@

$(BUILD)/mixscope: $(BUILD)/cli/main.o $(LIB_OBJ) $(KOBJ)
	@echo LINK $@
	@$(CC) $(ALL_CFLAGS) -o $@ $(BUILD)/cli/main.o $(LIB_OBJ) $(KOBJ) $(LDLIBS)

$(BUILD)/%.o: %.c $(wildcard */*.h */*.inc)
	@mkdir -p $(dir $@)
	@echo CC $<
	@$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -c -o $@ $<

# The commit the binary was built from, for figures' provenance (cli/version.c): rewritten only
# when it changes, so it rebuilds one file.
$(BUILD)/commit.h: FORCE
	@mkdir -p $(BUILD)
	@c=$$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown); \
	 d=$$(git diff --quiet HEAD -- 2>/dev/null || echo +changes); \
	 printf '#define MIXSCOPE_COMMIT "%s%s"\n' "$$c" "$$d" > $@.tmp; \
	 cmp -s $@.tmp $@ || mv $@.tmp $@; rm -f $@.tmp
$(BUILD)/cli/version.o: $(BUILD)/commit.h
$(BUILD)/cli/version.o: CPPFLAGS += -I$(BUILD)
.PHONY: FORCE
FORCE:

$(BUILD)/kernels/%.o: kernels/%.cu $(wildcard kernels/*.h kernels/*.cuh mixers/*.h core/*.h)
	@mkdir -p $(dir $@)
	@echo NVCC $<
	@$(NVCC) $(NVFLAGS) $(CPPFLAGS) -c -o $@ $<

# The wgmma kernels (*_wgmma.cu) are Hopper-only instructions: sm_90a machine code alone. On other
# GPUs they have no image and the callers keep their sm_90 kernels.
$(BUILD)/kernels/%_wgmma.o: kernels/%_wgmma.cu $(wildcard kernels/*.h kernels/*.cuh mixers/*.h core/*.h)
	@mkdir -p $(dir $@)
	@echo NVCC $<
	@$(NVCC) $(NVFLAGS_90A) $(CPPFLAGS) -c -o $@ $<

$(BUILD)/tests/%: tests/%.c $(LIB_OBJ) $(KOBJ) $(wildcard tests/*.h)
	@mkdir -p $(dir $@)
	@echo LINK $@
	@$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -o $@ $< $(LIB_OBJ) $(KOBJ) $(CMOCKA_LIBS) $(LDLIBS)

$(BUILD)/bench/%: bench/%.c $(LIB_OBJ) $(KOBJ)
	@mkdir -p $(dir $@)
	@echo LINK $@
	@$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -o $@ $< $(LIB_OBJ) $(KOBJ) $(LDLIBS)

# The recursive builds of test and run use every core unless -j was given (nvcc compiles a dozen
# kernel files: one by one that took minutes on a fresh clone).
NPROC := $(shell nproc 2>/dev/null || echo 2)
JOBS   = $(if $(findstring j,$(filter-out --%,$(MAKEFLAGS))),,-j$(NPROC))

# deps first, in its own step, so a fresh machine gets its packages before anything compiles
test:
	@sh scripts/deps.sh
	@$(MAKE) --no-print-directory $(JOBS) test-bins
	@MIXSCOPE_BIN=$(BUILD)/mixscope MIXSCOPE_ROOT=$(CURDIR) sh tests/run.sh $(TEST_BIN)

test-bins: $(BUILD)/mixscope $(TEST_BIN)

check:
	LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp $(MAKE) test BUILD=build/asan CUDA=0 OPT=-O1 \
	  SANITIZE="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"

# The GPU tests link only what they need (core, mixers, models, kernels): a GPU machine needs no SDL2,
# ncurses or readline to run them.
GPU_TEST_OBJ := $(filter $(BUILD)/core/% $(BUILD)/mixers/% $(BUILD)/models/%,$(LIB_OBJ))
$(BUILD)/tests/gpu/test_gpu: tests/gpu/test_gpu.c $(GPU_TEST_OBJ) $(KOBJ)
	@mkdir -p $(dir $@)
	@echo LINK $@
	@$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -o $@ $< $(GPU_TEST_OBJ) $(KOBJ) $(filter-out -lSDL2 -lncursesw -ltinfo -lreadline -lstb -lpcre2-8 -lcairo -lfreetype,$(LDLIBS))

# the engine's device gpu paths against its CPU path: the engine, the lanes and the recorders too
GPU_ENGINE_OBJ := $(GPU_TEST_OBJ) $(filter $(BUILD)/engine/% $(BUILD)/scenes/raw.o $(BUILD)/scenes/stream.o $(BUILD)/viz/recall.o $(BUILD)/kernels/gpu_none.o,$(LIB_OBJ))
$(BUILD)/tests/gpu/test_engine_gpu: tests/gpu/test_engine_gpu.c $(GPU_ENGINE_OBJ) $(KOBJ)
	@mkdir -p $(dir $@)
	@echo LINK $@
	@$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -o $@ $< $(GPU_ENGINE_OBJ) $(KOBJ) $(filter-out -lSDL2 -lncursesw -ltinfo -lreadline -lstb -lpcre2-8 -lcairo -lfreetype,$(LDLIBS))

$(BUILD)/tests/gpu/test_lanes_gpu: tests/gpu/test_lanes_gpu.c $(GPU_ENGINE_OBJ) $(KOBJ)
	@mkdir -p $(dir $@)
	@echo LINK $@
	@$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -o $@ $< $(GPU_ENGINE_OBJ) $(KOBJ) $(filter-out -lSDL2 -lncursesw -ltinfo -lreadline -lstb -lpcre2-8 -lcairo -lfreetype,$(LDLIBS))

# the trainer on the GPU against the trainer on the CPU
GPU_TRAIN_OBJ := $(GPU_TEST_OBJ) $(filter $(BUILD)/train/model_grad.o $(BUILD)/train/ops_f.o $(BUILD)/train/ops_d.o $(BUILD)/train/train.o $(BUILD)/train/train_gpu.o $(BUILD)/scenes/prompts.o,$(LIB_OBJ))
$(BUILD)/tests/gpu/test_train_gpu: tests/gpu/test_train_gpu.c $(GPU_TRAIN_OBJ) $(KOBJ)
	@mkdir -p $(dir $@)
	@echo LINK $@
	@$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -o $@ $< $(GPU_TRAIN_OBJ) $(KOBJ) $(filter-out -lSDL2 -lncursesw -ltinfo -lreadline -lstb -lpcre2-8 -lcairo -lfreetype,$(LDLIBS))

# `train` timed beside its FLOP floor; links no SDL, ncurses or readline (builds on the GPU machine)
$(BUILD)/bench/train/bench_train: bench/train/bench_train.c $(GPU_TRAIN_OBJ) $(BUILD)/train/cfg.o $(KOBJ) $(if $(KOBJ),,$(BUILD)/kernels/gpu_none.o)
	@mkdir -p $(dir $@)
	@echo LINK $@
	@$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -o $@ $< $(GPU_TRAIN_OBJ) $(BUILD)/train/cfg.o $(KOBJ) $(if $(KOBJ),,$(BUILD)/kernels/gpu_none.o) $(filter-out -lSDL2 -lncursesw -ltinfo -lreadline -lstb -lpcre2-8 -lcairo -lfreetype,$(LDLIBS))

bench-train: $(BUILD)/bench/train/bench_train
	@$(BUILD)/bench/train/bench_train gdn steps=$(TRAIN_STEPS) $(TRAIN_ARGS)

# the GPU attribution kernel against the CPU reference, and its benchmark
$(BUILD)/tests/gpu/test_attribution_gpu: tests/gpu/test_attribution_gpu.c $(GPU_TEST_OBJ) $(KOBJ) $(if $(KOBJ),,$(BUILD)/kernels/gpu_none.o)
	@mkdir -p $(dir $@)
	@echo LINK $@
	@$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -o $@ $< $(GPU_TEST_OBJ) $(KOBJ) $(if $(KOBJ),,$(BUILD)/kernels/gpu_none.o) $(filter-out -lSDL2 -lncursesw -ltinfo -lreadline -lstb -lpcre2-8 -lcairo -lfreetype,$(LDLIBS))

$(BUILD)/bench/gpu/bench_attribution: bench/gpu/bench_attribution.c $(GPU_TEST_OBJ) $(KOBJ)
	@mkdir -p $(dir $@)
	@echo LINK $@
	@$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -o $@ $< $(GPU_TEST_OBJ) $(KOBJ) $(filter-out -lSDL2 -lncursesw -ltinfo -lreadline -lstb -lpcre2-8 -lcairo -lfreetype,$(LDLIBS))

bench-attribution: $(BUILD)/bench/gpu/bench_attribution
	@$(BUILD)/bench/gpu/bench_attribution

test-gpu: $(BUILD)/tests/gpu/test_gpu $(BUILD)/tests/gpu/test_engine_gpu $(BUILD)/tests/gpu/test_lanes_gpu $(BUILD)/tests/gpu/test_train_gpu $(BUILD)/tests/gpu/test_attribution_gpu
	@sh tests/gpu/run.sh $(BUILD)

# regenerate tests/golden/*.png on purpose (after a deliberate change to a view or a mixer)
golden: $(BUILD)/tests/test_viz $(BUILD)/mixscope
	MIXSCOPE_GOLDEN=1 MIXSCOPE_BIN=$(BUILD)/mixscope MIXSCOPE_ROOT=$(CURDIR) $(BUILD)/tests/test_viz

bench: $(BENCH_BIN)
	@for b in $(BENCH_BIN); do $$b || exit 1; echo; done

$(BUILD)/bench/gpu/bench_gpu: bench/gpu/bench_gpu.c $(GPU_ENGINE_OBJ) $(KOBJ)
	@mkdir -p $(dir $@)
	@echo LINK $@
	@$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -o $@ $< $(GPU_ENGINE_OBJ) $(KOBJ) $(filter-out -lSDL2 -lncursesw -ltinfo -lreadline -lstb -lpcre2-8 -lcairo -lfreetype,$(LDLIBS))

# the engine's CPU stepping (tokens/s against the memory floor); its own target: it takes minutes
$(BUILD)/bench/step/bench_step: bench/step/bench_step.c $(LIB_OBJ) $(KOBJ)
	@mkdir -p $(dir $@)
	@echo LINK $@
	@$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -o $@ $< $(LIB_OBJ) $(KOBJ) $(LDLIBS)

bench-step: $(BUILD)/bench/step/bench_step
	@$(BUILD)/bench/step/bench_step

bench-gpu: $(BUILD)/bench/gpu/bench_gpu
	@sh bench/gpu/run.sh $(BUILD)

FUZZ_SECONDS ?= 60
FUZZ_SRC := $(sort $(wildcard fuzz/fuzz_*.c))
FUZZ_BIN := $(patsubst fuzz/%.c,build/fuzz/%,$(FUZZ_SRC))
FUZZ_LIB_SRC := $(filter-out kernels/gpu_none.c,$(LIB_SRC)) kernels/gpu_none.c

fuzz: $(FUZZ_BIN)

build/fuzz/%: fuzz/%.c $(FUZZ_LIB_SRC) $(wildcard */*.h) $(BUILD)/commit.h
	@mkdir -p $(dir $@)
	clang -std=c11 -g -O1 $(CPPFLAGS) -I$(BUILD) $(PKG_CFLAGS) -fsanitize=fuzzer,address,undefined \
	  -o $@ $< $(FUZZ_LIB_SRC) $(PKG_LIBS) -lm -lpthread

fuzz-run: fuzz
	@for f in $(FUZZ_BIN); do n=$$(basename $$f); mkdir -p build/fuzz/corpus-$$n; \
	  cp -n fuzz/seeds/$$n/* build/fuzz/corpus-$$n/ 2>/dev/null; \
	  echo "== $$n for $(FUZZ_SECONDS) s"; \
	  $$f -max_total_time=$(FUZZ_SECONDS) -max_len=65536 build/fuzz/corpus-$$n >build/fuzz/$$n.log 2>&1; \
	  rc=$$?; tail -n 12 build/fuzz/$$n.log; [ $$rc -eq 0 ] || { echo "$$n: crash (exit $$rc)"; exit 1; }; done

run:
	@sh scripts/deps.sh
	@$(MAKE) --no-print-directory $(JOBS) mixscope
	./mixscope

deps:
	@sh scripts/deps.sh

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu' '*.cuh')

clean:
	rm -rf build mixscope
