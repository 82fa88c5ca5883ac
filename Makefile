# spill — one non-recursive Makefile. Outputs go under build/<variant>/.
#
# Knobs: DEBUG=0..3  ASAN=1  UBSAN=1  TSAN=1  V=1  CUDA_ARCH=90  NO_CUDA=1  WERROR=1
# Goals: all (default), test, test-gpu, demo, bench-*, install, format, check-format, readme,
#        deps (install missing packages), clean.
# Each module folder holds its sources (*.c, *.cu) and may add goals in module.mk.

.DEFAULT_GOAL := all
SHELL := /bin/bash

DEBUG ?= 0
ASAN ?= 0
UBSAN ?= 0
TSAN ?= 0
V ?= 0
NO_CUDA ?= 0
CUDA_ARCH ?= 90
CUDA_HOME ?= /usr/local/cuda
WERROR ?= $(if $(filter true 1,$(CI)),1,0)

Q := $(if $(filter 1,$(V)),,@)

variant := $(strip $(if $(filter-out 0,$(DEBUG)),debug$(DEBUG)) $(if $(filter 1,$(ASAN)),asan) \
	$(if $(filter 1,$(UBSAN)),ubsan) $(if $(filter 1,$(TSAN)),tsan) $(if $(filter 1,$(NO_CUDA)),nocuda))
VARIANT := $(if $(variant),$(subst $(eval) ,-,$(variant)),release)
O := build/$(VARIANT)

# ---- dependencies: one found/missing line each ------------------------------
# A literal '#' for the probes: make 4.3 keeps a backslash before '#' inside a
# function call, which turned the directive into text and every probe into "found".
hash := \#
probe_hdr = $(shell printf '$(hash)include <$(1)>\n' | $(CC) $(2) -E -x c - >/dev/null 2>&1 && echo 1)
HAVE_URING := $(call probe_hdr,liburing.h)
HAVE_BLAS := $(call probe_hdr,cblas.h,-I/usr/include/x86_64-linux-gnu -I/usr/include/openblas)
HAVE_MPI := $(if $(shell command -v mpicc 2>/dev/null),1)
HAVE_GLPK := $(call probe_hdr,glpk.h)
HAVE_FIO := $(if $(shell command -v fio 2>/dev/null),1)
HAVE_CUDA := $(if $(filter 1,$(NO_CUDA)),,$(if $(wildcard $(CUDA_HOME)/bin/nvcc),1))
HAVE_NCCL := $(if $(HAVE_CUDA),$(if $(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h),1))

quiet_deps := $(if $(and $(filter 0,$(MAKELEVEL)),$(filter test test-gpu demo deps,$(MAKECMDGOALS))),1)
quiet_deps += $(if $(filter format check-format clean,$(MAKECMDGOALS)),1)
ifeq ($(strip $(quiet_deps)),)
dep_line = $(info dep $(1): $(if $(2),found,missing$(3)))
$(call dep_line,cuda,$(HAVE_CUDA), ($(if $(filter 1,$(NO_CUDA)),NO_CUDA=1,no $(CUDA_HOME)/bin/nvcc): cuda backend and CUDA kernels disabled))
$(call dep_line,nccl,$(HAVE_NCCL), (multi-GPU collectives disabled))
$(call dep_line,liburing,$(HAVE_URING), (disk tier disabled; apt-get install liburing-dev))
$(call dep_line,openblas,$(HAVE_BLAS), (CPU GEMMs fall back to plain loops; apt-get install libopenblas-dev))
$(call dep_line,mpi,$(HAVE_MPI), (multi-node disabled; apt-get install libopenmpi-dev))
$(call dep_line,glpk,$(HAVE_GLPK), (MILP reference schedule disabled; apt-get install libglpk-dev))
$(call dep_line,fio,$(HAVE_FIO), (bench-disk has no baseline; apt-get install fio))
endif

# ---- flags -------------------------------------------------------------------
CC ?= gcc
NVCC := $(CUDA_HOME)/bin/nvcc
CPPFLAGS := -I. -Iinclude -D_GNU_SOURCE -DSP_DEBUG_LEVEL=$(DEBUG) -MMD -MP \
	-DSPILL_HAVE_CUDA=$(if $(HAVE_CUDA),1,0) -DSPILL_HAVE_NCCL=$(if $(HAVE_NCCL),1,0) \
	-DSPILL_HAVE_URING=$(if $(HAVE_URING),1,0) -DSPILL_HAVE_BLAS=$(if $(HAVE_BLAS),1,0) \
	-DSPILL_HAVE_MPI=$(if $(HAVE_MPI),1,0) -DSPILL_HAVE_GLPK=$(if $(HAVE_GLPK),1,0)
CPPFLAGS += $(if $(HAVE_CUDA),-I$(CUDA_HOME)/include) $(if $(HAVE_BLAS),-I/usr/include/x86_64-linux-gnu -I/usr/include/openblas)
OPT := $(if $(filter-out 0,$(DEBUG)),-O0,-O2)
SAN := $(if $(filter 1,$(ASAN)),-fsanitize=address -fno-omit-frame-pointer) \
	$(if $(filter 1,$(UBSAN)),-fsanitize=undefined -fno-sanitize-recover=all) \
	$(if $(filter 1,$(TSAN)),-fsanitize=thread)
CFLAGS := -std=c11 -g $(OPT) -fPIC -pthread -fvisibility=hidden -Wall -Wextra -Wshadow \
	-Wstrict-prototypes -Wno-unused-parameter $(if $(filter 1,$(WERROR)),-Werror) $(SAN)
NVCCFLAGS := -std=c++17 -O3 -lineinfo -Xcompiler -fPIC,-fvisibility=hidden,-pthread \
	-gencode arch=compute_$(CUDA_ARCH),code=[sm_$(CUDA_ARCH),compute_$(CUDA_ARCH)] \
	$(if $(filter 1,$(WERROR)),-Werror all-warnings)
LDFLAGS := -pthread $(SAN)
comma := ,
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl$(comma)-rpath$(comma)$(CUDA_HOME)/lib64 -lcublas -lcudart
# MPI (multi-node): train/nodes.c alone includes mpi.h
MPI_CFLAGS := $(if $(HAVE_MPI),$(shell mpicc --showme:compile 2>/dev/null))
MPI_LIBS := $(if $(HAVE_MPI),$(shell mpicc --showme:link 2>/dev/null))
LDLIBS := $(if $(HAVE_URING),-luring) $(if $(HAVE_BLAS),-lopenblas) \
	$(if $(HAVE_CUDA),$(CUDA_LIBS)) \
	$(if $(HAVE_NCCL),-lnccl) $(if $(HAVE_GLPK),-lglpk) $(MPI_LIBS) -ldl -lm -lrt

# ---- modules -----------------------------------------------------------------
# A module's archive holds its objects; a test in tests/<module>/ links that
# archive and the ones it depends on (so a broken module breaks only its own).
MODULES := common device kernels vmm taskgraph runtime train
DEPS_common :=
DEPS_device := common
DEPS_kernels := device common
DEPS_vmm := device common
DEPS_taskgraph := common
DEPS_runtime := vmm kernels taskgraph device common
DEPS_train := runtime vmm kernels taskgraph device common

mod_srcs = $(wildcard $(1)/*.c) $(if $(HAVE_CUDA),$(wildcard $(1)/*.cu))
mod_objs = $(patsubst %,$(O)/obj/%.o,$(call mod_srcs,$(1)))
mod_lib = $(if $(call mod_srcs,$(1)),$(O)/lib/libsp_$(1).a)
mod_libs = $(foreach m,$(1) $(DEPS_$(1)),$(call mod_lib,$(m)))

ALL_OBJS := $(foreach m,$(MODULES),$(call mod_objs,$(m)))
ALL_MOD_LIBS := $(foreach m,train runtime vmm kernels taskgraph device common,$(call mod_lib,$(m)))

$(O)/obj/%.c.o: %.c
	@mkdir -p $(@D)
	$(if $(Q),@echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(O)/obj/%.cu.o: %.cu
	@mkdir -p $(@D)
	$(if $(Q),@echo "  NVCC    $<")
	$(Q)$(NVCC) $(filter-out -MMD -MP,$(CPPFLAGS)) $(NVCCFLAGS) -MMD -MP -c $< -o $@

define module_rules
$(O)/lib/libsp_$(1).a: $(call mod_objs,$(1))
	@mkdir -p $$(@D)
	$$(if $$(Q),@echo "  AR      $$@")
	$$(Q)rm -f $$@ && ar rcs $$@ $$^
endef
$(foreach m,$(MODULES),$(eval $(call module_rules,$(m))))

# ---- libspill ------------------------------------------------------------------
$(O)/lib/libspill.a: $(ALL_OBJS)
	@mkdir -p $(@D)
	$(if $(Q),@echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

$(O)/lib/libspill.so: $(ALL_OBJS)
	@mkdir -p $(@D)
	$(if $(Q),@echo "  LD      $@")
	$(Q)$(CC) -shared $(LDFLAGS) -Wl,-soname,libspill.so.$(SPILL_MAJOR) -o $@ $^ $(LDLIBS)

# `make install PREFIX=...` (default /usr/local; DESTDIR for staging): the
# header, both libraries, spill.pc for `pkg-config --cflags --libs spill`, and
# the spill command.
SPILL_VERSION := $(shell sed -n 's/^#define SPILL_VERSION_STRING "\(.*\)"/\1/p' include/spill.h)
SPILL_MAJOR := $(firstword $(subst ., ,$(SPILL_VERSION)))
PREFIX ?= /usr/local
DESTDIR ?=
install: all
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	install -m 644 include/spill.h $(DESTDIR)$(PREFIX)/include/spill.h
	install -m 755 $(O)/lib/libspill.so $(DESTDIR)$(PREFIX)/lib/libspill.so.$(SPILL_VERSION)
	ln -sf libspill.so.$(SPILL_VERSION) $(DESTDIR)$(PREFIX)/lib/libspill.so.$(SPILL_MAJOR)
	ln -sf libspill.so.$(SPILL_MAJOR) $(DESTDIR)$(PREFIX)/lib/libspill.so
	install -m 644 $(O)/lib/libspill.a $(DESTDIR)$(PREFIX)/lib/libspill.a
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(SPILL_VERSION)|' \
		-e 's|@LIBS_PRIVATE@|-pthread $(LDLIBS)|' tools/spill.pc.in \
		> $(DESTDIR)$(PREFIX)/lib/pkgconfig/spill.pc
	install -m 755 $(O)/bin/spill $(DESTDIR)$(PREFIX)/bin/spill

# ---- tools ---------------------------------------------------------------------
TOOL_SRCS := $(wildcard tools/*.c)
TOOL_BINS := $(patsubst tools/%.c,$(O)/bin/%,$(TOOL_SRCS))
$(O)/bin/%: $(O)/obj/tools/%.c.o $(ALL_MOD_LIBS)
	@mkdir -p $(@D)
	$(if $(Q),@echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(ALL_MOD_LIBS) $(LDLIBS)

# ---- tests ---------------------------------------------------------------------
# tests/<dir>/test_*.c: one executable each; tests/<dir>/test_*.sh run as is.
# test_gpu_* need a CUDA device (exit 77 without one) and also run in test-gpu.
TEST_SRCS := $(wildcard tests/*/test_*.c)
TEST_BINS := $(patsubst %.c,$(O)/%,$(TEST_SRCS))
TEST_SCRIPTS := $(wildcard tests/*/test_*.sh)
test_dir = $(word 2,$(subst /, ,$(1)))
test_libs = $(if $(filter $(call test_dir,$(1)),$(MODULES)),$(call mod_libs,$(call test_dir,$(1))),$(ALL_MOD_LIBS))

define test_rule
$(patsubst %.c,$(O)/%,$(1)): $(O)/obj/$(1).o $(call test_libs,$(1))
	@mkdir -p $$(@D)
	$$(if $$(Q),@echo "  LD      $$@")
	$$(Q)$$(CC) $$(LDFLAGS) -o $$@ $$< $(call test_libs,$(1)) $$(LDLIBS)
endef
$(foreach t,$(TEST_SRCS),$(eval $(call test_rule,$(t))))

# ---- module goals (bench targets, the preload library, ...) ----------------------
-include $(wildcard */module.mk */module-*.mk)

all: $(O)/lib/libspill.a $(O)/lib/libspill.so $(TOOL_BINS) $(EXTRA_ALL)
tests: $(TEST_BINS) $(TOOL_BINS) $(EXTRA_TEST_DEPS) $(O)/lib/libspill.so $(O)/lib/libspill.a

# TESTS=pattern runs only the tests whose path contains pattern.
TESTS ?=
# Tests that run make themselves (the install test) get the variant's knobs;
# those that link against libspill get its sanitizer flags.
run_tests = O=$(O) BUILD_DIR=$(O) TEST_SAN_FLAGS="$(strip $(SAN))" \
	TEST_MAKE_VARIANT="DEBUG=$(DEBUG) ASAN=$(ASAN) UBSAN=$(UBSAN) TSAN=$(TSAN) NO_CUDA=$(NO_CUDA)" \
	tools/run-tests.sh

# `make test` first installs what is missing (tools/deps.sh), then re-enters make
# so the found/missing probes see the installed packages.
test: deps
	@$(MAKE) --no-print-directory test-run
test-run: tests
	@$(run_tests) $(if $(TESTS),--filter '$(TESTS)') $(TEST_BINS) $(TEST_SCRIPTS)

test-gpu: deps
	@$(MAKE) --no-print-directory test-gpu-run
test-gpu-run: tests
	@$(run_tests) --gpu $(if $(TESTS),--filter '$(TESTS)') $(TEST_BINS) $(TEST_SCRIPTS)

deps:
	@tools/deps.sh

# The README's first command: build, then show spill at work on the default backend.
demo: deps
	@$(MAKE) --no-print-directory demo-run
demo-run: all
	@O=$(O) tools/demo.sh

# ---- formatting, README --------------------------------------------------------
FORMAT_SRCS = $(shell git ls-files '*.c' '*.h' '*.cu' 2>/dev/null)
format:
	@clang-format -i $(FORMAT_SRCS)
check-format:
	@clang-format --dry-run --Werror $(FORMAT_SRCS) && echo "format: ok"

# README's parameter table is generated from common/params.def.
readme: $(O)/bin/spill
	@tools/update-readme.sh $(O)/bin/spill

clean:
	rm -rf build

.PHONY: install all tests test test-run test-gpu test-gpu-run deps demo demo-run format check-format readme clean
.SECONDARY:
-include $(shell find $(O) -name '*.d' 2>/dev/null)
