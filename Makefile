# The two README commands. Both set up the project venv (.venv, from requirements.txt), build the package with
# `pip wheel` in $(BUILD) (scikit-build-core over the same CMake tree a plain `cmake -B` builds) and install the wheel
# into the venv; `demo` then runs the installed `enginery`, `test` runs ctest in the build tree.
BUILD ?= build
VENV ?= .venv
BUILD_TYPE ?= Quick
JOBS ?= $(shell nproc)
# CI has nvcc but no GPU: the CUDA kernels compile for Hopper (the GPU machine's H100 or H200) only, which is what catches a
# CUDA build break; a GPU machine's own build detects its GPUs (cmake/EngineryTorch.cmake).
export TORCH_CUDA_ARCH_LIST ?= $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | grep . || echo 9.0)
PYTHON = $(VENV)/bin/python
WHEEL_DIR = $(BUILD)/dist

.PHONY: demo demo-rl test bench-demo-seeds bench-demo-rl-seeds bench-fidelity-cpu deps venv install clean

# The targets that need no tests build without them, except in a build tree configured with them: `make demo`
# after `make test` must not reconfigure the tree without its tests (ctest would then list none).
CONFIGURED_TESTS := $(shell sed -n 's/^ENGINERY_BUILD_TESTS:BOOL=//p' $(BUILD)/CMakeCache.txt 2>/dev/null)
NO_TESTS_NEEDED = $(or $(CONFIGURED_TESTS),OFF)

demo: TESTS = $(NO_TESTS_NEEDED)
demo: install
	$(VENV)/bin/enginery train --config examples/demo.toml --nproc 2 --fresh-run  # a previous demo is moved aside, never overwritten
	$(VENV)/bin/enginery plot runs/demo

# GRPO after an SFT warm-up that has just found the carries (examples/grpo.toml says why): the demo's SFT,
# evaluated and checkpointed (with a Hugging Face export) every 25 steps, then GRPO from the first checkpoint at
# >= 25% held-out exact match (scripts/pick_warmup.py). Both runs move a previous one aside.
RL_WARMUP_MIN = 0.25
demo-rl: TESTS = $(NO_TESTS_NEEDED)
demo-rl: install
	$(VENV)/bin/enginery train --config examples/demo.toml --nproc 2 --fresh-run \
	  --set trainer.experiment_name=demo-rl-sft --set trainer.test_freq=25 --set trainer.save_freq=25 \
	  --set trainer.max_ckpt_to_keep=0 --set 'checkpoint.save_contents=["model","hf_model"]'
	$(VENV)/bin/enginery train --config examples/grpo.toml --nproc 2 --fresh-run \
	  --set model.path="$$($(PYTHON) scripts/pick_warmup.py runs/demo-rl-sft $(RL_WARMUP_MIN))"
	$(VENV)/bin/enginery plot runs/demo-rl

# Benchmarks, not tests (minutes each; bench/fidelity/run_fidelity.py says what they print). The demo's bar: its
# recipe on seeds 1-5, CPU, 2 ranks, every run >= 95% held-out exact match. The fidelity sweep: fp32, bf16 and fp16
# on the same seeds, each dtype held to fp32's seed spread, curves in runs/bench-fidelity-cpu/curves.png.
bench-demo-seeds: TESTS = $(NO_TESTS_NEEDED)
bench-demo-seeds: install
	$(PYTHON) bench/fidelity/run_fidelity.py --enginery $(VENV)/bin/enginery --dtypes fp32 --seeds 1-5 \
	  --require-accuracy 0.95 --out runs/bench-demo-seeds
# demo-rl's bar: its warm-up and GRPO on seeds 1-5, every run's sampled reward rising by >= 0.03
bench-demo-rl-seeds: TESTS = $(NO_TESTS_NEEDED)
bench-demo-rl-seeds: install
	PYTHON=$(PYTHON) bench/fidelity/demo_rl_seeds.sh runs/bench-demo-rl-seeds "1 2 3 4 5" fp32 \
	  --enginery $(VENV)/bin/enginery
bench-fidelity-cpu: TESTS = $(NO_TESTS_NEEDED)
bench-fidelity-cpu: install
	$(PYTHON) bench/fidelity/run_fidelity.py --enginery $(VENV)/bin/enginery --dtypes fp32,bf16,fp16 --seeds 1-5 \
	  --out runs/bench-fidelity-cpu

test: TESTS = ON
test: install
	cd $(BUILD) && ctest --output-on-failure -LE gpu -j $(JOBS) --timeout 900

TESTS ?= ON
install: deps venv
	rm -rf $(WHEEL_DIR)
	CMAKE_BUILD_PARALLEL_LEVEL=$(JOBS) $(PYTHON) -m pip wheel -v --no-build-isolation --no-deps -w $(WHEEL_DIR) \
	  -Cbuild-dir=$(BUILD) -Ccmake.build-type=$(BUILD_TYPE) -Ccmake.define.ENGINERY_BUILD_TESTS=$(TESTS) .
	$(PYTHON) -m pip install --no-deps --force-reinstall $(WHEEL_DIR)/enginery-*.whl

# Re-run when requirements.txt changes; a pip cache makes a fresh venv a matter of seconds after the first.
venv: $(VENV)/.requirements
$(VENV)/.requirements: requirements.txt
	test -x $(PYTHON) || python3 -m venv $(VENV)
	$(PYTHON) -m pip install -r requirements.txt
	cp requirements.txt $@

deps:
	scripts/install_deps.sh

clean:
	rm -rf $(BUILD) $(VENV)
