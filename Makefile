# m2n: `make run` installs what is missing, builds refit and runs a checked reshard;
# `make test` runs the whole suite. See README.md.
GO      ?= go
BIN     := bin/refit
# refit/gpu is the runtime's GPU driver (cuda, nccl): the runtime itself is pure.
PURE    := $(foreach d,mesh dtype placement strided transport reshard hier bounds pipeline model fp8 sim lora pattern units routespec modelspec delta control,$(if $(wildcard $(d)/*.go),./$(d)/...)) ./refit
FUZZTIME ?= 30s

# OpenMPI refuses to start as root unless told; CI and containers run as root.
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1

.PHONY: all deps build capi run test vet purecheck fuzz fuzz-refit fuzz-capi bench gpu-bins gpu-fp8-bins clean

all: build

deps:
	@scripts/ensure-deps.sh

build: deps
	$(GO) build -o $(BIN) ./apps/refit

# capi builds the C shared library and its header for C and Python
# (python/m2n): dist/libm2n.so and dist/m2n.h. The nonvml tag leaves go-nvml
# out (its NVML symbols stay undefined until run time, which a dlopened
# library cannot have); libm2n.map exports m2n.h's functions only.
CAPI_FLAGS := -tags nonvml -buildmode=c-shared \
	-ldflags='-extldflags=-Wl,--version-script=$(CURDIR)/capi/libm2n.map,-soname,libm2n.so'
capi: deps
	@mkdir -p dist
	@rm -f dist/libm2n.so # relink: go build does not see libm2n.map change
	$(GO) build $(CAPI_FLAGS) -o dist/libm2n.so ./capi
	rm -f dist/libm2n.h
	cp capi/m2n.h dist/m2n.h

# The demo: 4 trainer ranks holding rows (Shard(0)) hand a 32 MiB bf16 matrix
# to a DP2 x TP2 generator that wants columns (Replicate, Shard(1)): a change
# of shard dim and 2-way replication, on every route, checked element by
# element, as a real 8-process MPI job.
run: build
	scripts/mpirun.sh -np 8 $(BIN) run --shape 4096x4096 --dtype bf16 \
	  --src-mesh 4 --src-placements S0 --dst-mesh 2x2 --dst-placements R,S1 \
	  --route all --check --iters 3

# purecheck proves the pure packages build without cgo and import no cgo package.
purecheck:
	CGO_ENABLED=0 $(GO) build $(PURE)
	@bad=$$($(GO) list -deps $(PURE) | grep -E '/m2n/(mpi|cuda|nccl|internal/dl)$$' || true); \
	  if [ -n "$$bad" ]; then echo "pure packages import cgo packages: $$bad"; exit 1; fi

vet: deps
	$(GO) vet ./...

test: deps purecheck vet
	$(GO) test -timeout 30m ./...

# fuzz runs every fuzz target for FUZZTIME each (go test runs one target at a time).
fuzz:
	$(GO) test ./mesh -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME)
	$(GO) test ./placement -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME)
	$(GO) test ./reshard -run '^$$' -fuzz '^FuzzPlan$$' -fuzztime $(FUZZTIME)
	$(GO) test ./fp8 -run '^$$' -fuzz '^FuzzQuantize$$' -fuzztime $(FUZZTIME)
	$(GO) test ./delta -run '^$$' -fuzz '^FuzzApply$$' -fuzztime $(FUZZTIME)
	$(GO) test ./delta -run '^$$' -fuzz '^FuzzRoundTrip$$' -fuzztime $(FUZZTIME)
	$(MAKE) fuzz-refit
	$(MAKE) fuzz-capi

# fuzz-capi drives the C ABI (capi/testdata/calls.c under mpirun: call
# orders, threads, options) with configurations the fuzzer decodes, one job
# of about a second at a time; what fails lands in
# capi/testdata/fuzz/FuzzCABI, which `make test` replays.
fuzz-capi: deps
	$(GO) test ./capi -run '^$$' -fuzz '^FuzzCABI$$' -fuzztime $(FUZZTIME) -parallel 1

# fuzz-refit launches whole `refit run` jobs (at most 8 ranks each, under
# mpirun) of configurations the fuzzer decodes, one worker at a time: a
# job is a few seconds, so REFIT_FUZZTIME is a count or a duration of its
# own. SWEEP=A-B first launches the seeded configurations A to B. What
# fails lands in apps/refit/testdata/fuzz/FuzzRunConfig, which `make test`
# replays.
REFIT_FUZZTIME ?= $(FUZZTIME)
fuzz-refit: deps
	$(if $(SWEEP),M2N_FUZZ_SWEEP=$(SWEEP) $(GO) test ./apps/refit -run '^TestRunConfigSweep$$' -count=1 -timeout 0,)
	$(GO) test ./apps/refit -run '^$$' -fuzz '^FuzzRunConfig$$' -fuzztime $(REFIT_FUZZTIME) -parallel 1 -fuzzminimizetime 10x
	$(GO) test ./apps/refit -run '^$$' -fuzz '^FuzzSyncConfig$$' -fuzztime $(REFIT_FUZZTIME) -parallel 1 -fuzzminimizetime 10x

bench:
	$(GO) test ./reshard ./refit -run '^$$' -bench . -benchmem

# gpu-bins builds what scripts/gpu-check.sh, scripts/gpu-fp8-check.sh and
# scripts/gpu-python.sh run on a GPU machine without Go.
gpu-bins: deps
	mkdir -p .devbin
	$(GO) build -o .devbin/refit ./apps/refit
	$(GO) test -c -o .devbin/cuda.test ./cuda
	$(GO) test -c -o .devbin/kernels.test ./cuda/kernels
	$(GO) test -c -o .devbin/cudamem.test ./cudamem
	$(GO) test -c -o .devbin/nccl.test ./nccl
	$(GO) test -c -o .devbin/gpu.test ./refit/gpu
	$(GO) test -c -o .devbin/nvlink.test ./internal/nvlink
	$(GO) test -c -o .devbin/session.test ./session
	rm -f .devbin/libm2n.so
	$(GO) build $(CAPI_FLAGS) -o .devbin/libm2n.so ./capi
	rm -f .devbin/libm2n.h

# gpu-fp8-bins builds only what scripts/gpu-fp8-check.sh runs (about 40 MB,
# under what a device call carries).
gpu-fp8-bins: deps
	mkdir -p .devbin
	$(GO) build -o .devbin/refit ./apps/refit
	$(GO) test -c -o .devbin/cuda.test ./cuda
	$(GO) test -c -o .devbin/kernels.test ./cuda/kernels
	$(GO) test -c -o .devbin/cudamem.test ./cudamem

clean:
	rm -rf bin dist
