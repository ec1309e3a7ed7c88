# The two README commands. Everything else is plain CMake (see README).
BUILD ?= build
JOBS ?= $(shell nproc)
BUILD_TYPE ?= Quick
CMAKE_FLAGS ?=

.PHONY: demo demo-rl test deps build clean

demo: build
	$(BUILD)/bin/enginery train --config examples/demo.toml --nproc 2 --fresh-run  # a previous demo is moved aside, never overwritten
	$(BUILD)/bin/enginery plot runs/demo

# GRPO after an SFT warm-up stopped part-way (examples/grpo.toml says why): the demo's SFT on a 400-step schedule,
# checkpointed (with a Hugging Face export) at step 300, then GRPO from that export. Both runs move a previous one
# aside.
RL_SFT_STEPS = 300
demo-rl: build
	$(BUILD)/bin/enginery train --config examples/demo.toml --nproc 2 --fresh-run \
	  --set trainer.experiment_name=demo-rl-sft --set trainer.total_training_steps=400 \
	  --set trainer.save_freq=$(RL_SFT_STEPS) --set trainer.max_ckpt_to_keep=2 --set trainer.test_freq=100 \
	  --set 'checkpoint.save_contents=["model","optimizer","extra","hf_model"]'
	$(BUILD)/bin/enginery train --config examples/grpo.toml --nproc 2 --fresh-run \
	  --set model.path=runs/demo-rl-sft/global_step_$(RL_SFT_STEPS)/actor/huggingface
	$(BUILD)/bin/enginery plot runs/demo-rl

test: build
	cd $(BUILD) && ctest --output-on-failure -LE gpu -j $(JOBS) --timeout 900

build: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

deps:
	scripts/install_deps.sh

clean:
	rm -rf $(BUILD)
