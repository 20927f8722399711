# flashgpt build. Everything is nvcc + cuBLAS/cuBLASLt; no cuDNN anywhere.
#
#   make                      build/attention.a (the attention's kernels, compiled once), train_gpt2cu, test_gpt2cu,
#                             profile_gpt2cu, generate_gpt2cu (one build: gpt2_programs.cu) and the dev/cuda binaries,
#                             one job per core (make -jN to choose)
#   make test                 CPU tests everywhere; GPU tests too where a GPU is present, side by side (scripts/
#                             gpu_tests.sh). Ends "N passed, N failed". On a GPU: the shipped attention on the validation
#                             set, the first config of every other variant on one shape, the Python calls, test_gpt2cu,
#                             generation and a 20-step d12 run.
#   make test-all             the same, but every attention variant on every config
#   make GPU_ARCH=90a ...     build for one arch (default: the GPU found by nvidia-smi, else "80 90a")
#   make regs                 ptxas register/smem report for the attention's kernels (src/attention_*.cu)
#   make lib                  libflashgpt_attention.so: the attention behind a C interface (src/attention_capi.h), for
#                             python/flashgpt_attention.py; not part of `all`, built by `make test` where a GPU is present
#
# sm_80 gets the portable mma.sync path; sm_90a also gets the Hopper (wgmma/TMA) path.

NVCC ?= nvcc
CXX ?= g++

# one job per core unless the command line gives -j (GNU make 4.3+ takes a -j set here)
NPROC := $(shell nproc 2>/dev/null || echo 2)
ifeq ($(filter -j%,$(MAKEFLAGS)),)
  MAKEFLAGS += -j$(NPROC)
endif

# lowest compute capability among the GPUs present, e.g. 9.0 -> 90a; no GPU -> build both archs
DETECTED_CC := $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | sort -n | head -n 1 | tr -d '.')
ifeq ($(DETECTED_CC),90)
  DETECTED_CC := 90a
endif
GPU_ARCH ?= $(if $(DETECTED_CC),$(DETECTED_CC),80 90a)
GENCODE := $(foreach a,$(GPU_ARCH),-gencode arch=compute_$(a),code=sm_$(a))
# nvcc compiles an object's archs side by side (--threads 0) on 8 cores or more; on fewer, make's jobs already fill
# the cores, and each object's second arch only contends with them (more CPU time in all, and a longer build)
NVCC_THREADS := $(if $(filter-out 1 2 3 4 5 6 7,$(NPROC)),0,1)

# the dev harnesses run on the GPU at hand, so they build for GPU_ARCH where there is one; with none (a build that
# only checks that they compile, as CI's) for its last arch alone and as PTX: nvcc's front end checks the code, and
# ptxas runs where a harness runs (the driver compiles its PTX at the first launch, then caches it)
DEV_GPU_ARCH ?= $(if $(DETECTED_CC),$(GPU_ARCH),$(lastword $(GPU_ARCH)))
DEV_CODE ?= $(if $(DETECTED_CC),sm,compute)
DEV_GENCODE := $(foreach a,$(DEV_GPU_ARCH),-gencode arch=compute_$(a),code=$(DEV_CODE)_$(a))

GIT_COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null)
NVCC_BASE_FLAGS := -DGIT_COMMIT=\"$(GIT_COMMIT)\" --use_fast_math -std=c++17 --threads=$(NVCC_THREADS) -DNDEBUG -lineinfo -Xptxas=--warn-on-spills -I. -Isrc
# nvcc's -O sets the host compiler's level alone (the PTX is the same). The objects whose host code is dispatch,
# launches and program glue (the attention's, gpt2_programs.o) take -O1, which about halves gcc's part of their
# compile; the dev harnesses keep -O3 for their CPU references and the host loops that compare outputs (-O1 where
# they build as PTX, DEV_CODE compute: a build that only checks that they compile)
NVCC_FLAGS := -O3 $(NVCC_BASE_FLAGS) $(GENCODE)
NVCC_GLUE_FLAGS := -O1 $(NVCC_BASE_FLAGS) $(GENCODE)
DEV_NVCC_FLAGS := $(if $(filter sm,$(DEV_CODE)),-O3,-O1) $(NVCC_BASE_FLAGS) $(DEV_GENCODE)
NVCC_LDLIBS := -lcublas -lcublasLt
CXX_FLAGS := -O2 -std=c++17 -Wall -I. -Isrc

# CUPTI, for profile_gpt2cu --timeline (profile/timeline.h opens libcupti at run time): the toolkit keeps cupti.h
# in include/ or extras/CUPTI/include/, and libcupti in one of these folders. Not found: --timeline says so.
CUDA_HOME ?= $(patsubst %/bin/,%,$(dir $(realpath $(shell command -v $(NVCC) 2>/dev/null))))
CUPTI_HEADER := $(firstword $(wildcard $(CUDA_HOME)/extras/CUPTI/include/cupti.h $(CUDA_HOME)/include/cupti.h $(CUDA_HOME)/targets/*/include/cupti.h))
CUPTI_LIBRARY := $(firstword $(wildcard $(CUDA_HOME)/extras/CUPTI/lib64/libcupti.so $(CUDA_HOME)/lib64/libcupti.so $(CUDA_HOME)/targets/*/lib/libcupti.so $(CUDA_HOME)/lib/libcupti.so))
CUPTI_FLAGS := $(if $(CUPTI_HEADER),-I$(dir $(CUPTI_HEADER))) $(if $(CUPTI_LIBRARY),-DCUPTI_LIBRARY=\"$(CUPTI_LIBRARY)\")

# NCCL for multi-GPU training (-pn > 1): the toolkit's, or NCCL_HOME, e.g. the nvidia-nccl wheel's folder
#   make NCCL_HOME=$(python3 -c "import nvidia.nccl; print(nvidia.nccl.__path__[0])")
# (the wheel ships libnccl.so.2 alone; the binaries find it through their rpath). Without NCCL the binaries are
# single-GPU and say so.
NCCL_HEADER := $(firstword $(wildcard $(NCCL_HOME)/include/nccl.h $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h))
NCCL_FLAGS := $(if $(NCCL_HEADER),-DFLASHGPT_NCCL -I$(dir $(NCCL_HEADER)))
NCCL_HOME_LIB := $(if $(NCCL_HOME),-L$(NCCL_HOME)/lib -Xlinker -rpath -Xlinker $(NCCL_HOME)/lib \
                   $(if $(wildcard $(NCCL_HOME)/lib/libnccl.so),-lnccl,-l:libnccl.so.2))
NCCL_LDLIBS := $(if $(NCCL_HEADER),$(if $(NCCL_HOME),$(NCCL_HOME_LIB),-lnccl))

TRAIN_DEPS := train_gpt2.cu $(wildcard src/*.cuh src/*.h)
# the attention, compiled once (forward and backward in parallel) into one archive that every program links
ATTENTION := build/attention.a
ATTENTION_OBJS := build/attention_forward.o build/attention_backward.o build/attention_backward_general.o build/attention_forward_fp16.o \
                  build/attention_backward_fp16.o build/attention_backward_general_fp16.o
ATTENTION_HEADERS := src/attention.cuh src/attention_modifiers.cuh src/attention_forward.cuh src/attention_backward.cuh src/common.cuh src/ptx.cuh
GPT2_PROGRAMS := train_gpt2cu test_gpt2cu generate_gpt2cu profile_gpt2cu
DEV_CUDA := dev/cuda/attention_forward dev/cuda/attention_backward dev/cuda/attention_general dev/cuda/matmul_algos dev/cuda/fused_classifier dev/cuda/layernorm dev/cuda/matmul
CPU_TESTS := tests/test_cpu
LIB := libflashgpt_attention.so
# make test builds the library only where a GPU is present (its Python test needs one; elsewhere it would only add
# build time): `make lib` builds it anywhere
TEST_LIB := $(if $(DETECTED_CC),lib)

.PHONY: all dev lib test test-all regs clean

# the longest compiles first, so that make -j keeps every core busy to the end
all: build/attention_forward_fp16.o build/attention_forward.o build/dev/attention_backward.o build/attention_backward_general.o \
     build/attention_backward_general_fp16.o build/dev/attention_forward.o build/gpt2_programs.o build/attention_backward.o \
     build/attention_backward_fp16.o \
     $(GPT2_PROGRAMS) dev $(CPU_TESTS)

# train_gpt2cu, test_gpt2cu, generate_gpt2cu (text generation with the KV cache) and profile_gpt2cu are one build,
# gpt2_programs.cu, which runs the program its name says: train_gpt2.cu's kernels compile once for the four, and each
# name is a hard link to build/gpt2_programs. Its object compiles while the attention does; the link waits for both.
build/gpt2_programs.o: gpt2_programs.cu test_gpt2.cu generate_gpt2.cu profile/profile_gpt2.cu profile/timeline.h $(TRAIN_DEPS)
	@mkdir -p build
	$(NVCC) $(NVCC_GLUE_FLAGS) $(NCCL_FLAGS) $(CUPTI_FLAGS) -c $< -o $@
build/gpt2_programs: build/gpt2_programs.o $(ATTENTION)
	$(NVCC) $(NVCC_FLAGS) $< $(ATTENTION) $(NVCC_LDLIBS) $(NCCL_LDLIBS) -ldl -o $@

# position-independent with hidden symbols, so the same objects also go into libflashgpt_attention.so; each of the two
# files compiles twice, its fp16 kernels in an object of their own (ATTENTION_FP16) that builds beside the bf16 one
build/attention_%.o: src/attention_%.cu $(ATTENTION_HEADERS)
	@mkdir -p build
	$(NVCC) $(NVCC_GLUE_FLAGS) -Xcompiler -fPIC,-fvisibility=hidden -c $< -o $@
build/attention_%_fp16.o: src/attention_%.cu $(ATTENTION_HEADERS)
	@mkdir -p build
	$(NVCC) $(NVCC_GLUE_FLAGS) -DATTENTION_FP16=1 -Xcompiler -fPIC,-fvisibility=hidden -c $< -o $@

$(ATTENTION): $(ATTENTION_OBJS)
	ar rcs $@ $^

$(GPT2_PROGRAMS): build/gpt2_programs
	ln -f $< $@

dev: $(DEV_CUDA)

# the harnesses compile their own variants (while the attention compiles) and link the shipped attention, src's tiles
# among them (ATTENTION_*_SHARED_LAUNCHERS)
build/dev/%.o: dev/cuda/%.cu $(wildcard dev/cuda/*.h) $(wildcard src/*.cuh src/*.h) $(wildcard dev/cuda/forward_variants/*.cuh dev/cuda/backward_variants/*.cuh)
	@mkdir -p build/dev
	$(NVCC) $(DEV_NVCC_FLAGS) -c $< -o $@

.PRECIOUS: build/dev/%.o
dev/cuda/%: build/dev/%.o $(ATTENTION)
	$(NVCC) $(DEV_NVCC_FLAGS) $< $(ATTENTION) $(NVCC_LDLIBS) -o $@

# shared library: symbols hidden except the C interface's (FLASHGPT_API), the static cudart's too (--exclude-libs);
# --no-undefined makes a missing symbol a link error here rather than a load error in Python
lib: $(LIB)

$(LIB): src/attention_capi.cu src/attention_capi.h src/attention.cuh src/common.cuh $(ATTENTION)
	$(NVCC) $(NVCC_FLAGS) -shared -Xcompiler -fPIC,-fvisibility=hidden -Xlinker --no-undefined,--exclude-libs,ALL $< $(ATTENTION) -o $@

# CPU tests are plain C++ (no CUDA runtime), so they run on any machine
tests/test_cpu: $(wildcard tests/*.cpp tests/*.h) dev/cuda/reference.h $(wildcard src/*.h)
	$(CXX) $(CXX_FLAGS) $(filter %.cpp,$^) -o $@ -lm

regs:
	$(NVCC) $(NVCC_FLAGS) -Xptxas=-v -c src/attention_forward.cu -o /dev/null
	$(NVCC) $(NVCC_FLAGS) -Xptxas=-v -c src/attention_backward.cu -o /dev/null
	$(NVCC) $(NVCC_FLAGS) -DATTENTION_FP16=1 -Xptxas=-v -c src/attention_forward.cu -o /dev/null
	$(NVCC) $(NVCC_FLAGS) -DATTENTION_FP16=1 -Xptxas=-v -c src/attention_backward.cu -o /dev/null
	$(NVCC) $(NVCC_FLAGS) -Xptxas=-v -c src/attention_backward_general.cu -o /dev/null
	$(NVCC) $(NVCC_FLAGS) -DATTENTION_FP16=1 -Xptxas=-v -c src/attention_backward_general.cu -o /dev/null

test: all $(TEST_LIB)
	@bash scripts/run_tests.sh

test-all: all $(TEST_LIB)
	@bash scripts/run_tests.sh --all

clean:
	rm -f $(GPT2_PROGRAMS) build/gpt2_programs build/gpt2_programs.o $(ATTENTION) $(ATTENTION_OBJS) build/dev/*.o $(DEV_CUDA) $(CPU_TESTS) $(LIB)
