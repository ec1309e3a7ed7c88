#pragma once
// Streaming an engine's full weights out by Hugging Face name, in the dtype the receiver wants (a rollout engine
// takes bf16), one group of tensors at a time (docs/ARCHITECTURE.md, "The contract", weight export). A sharded
// engine gathers one FSDP unit per group, so the extra memory stays at one unit.
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace enginery {

struct NamedTensor {
  std::string name;
  torch::Tensor tensor;
};

// Collective: every rank calls next() the same number of times, until it returns an empty group.
class WeightStream {
 public:
  virtual ~WeightStream();
  // The next group of full tensors (on the engine's device, in the stream's dtype), empty when done. The tensors
  // may be views of one buffer that the following next() reuses or frees: copy what must outlive it, and drop the
  // group before asking for the next one, or two groups are alive at once.
  virtual std::vector<NamedTensor> next() = 0;
};

// What an engine implements to stream its weights natively (docs/ARCHITECTURE.md, "The contract"). A separate
// interface, like OffloadableEngine, so BaseEngine's vtable stays that of 2.0; the host's weight_stream
// (engine_driver/weight_export.h) falls back to get_per_tensor_param for an engine without it.
class WeightExportingEngine {
 public:
  virtual ~WeightExportingEngine();  // key function: defined out of line in libenginery_host_api
  virtual std::unique_ptr<WeightStream> export_weights(c10::ScalarType dtype) = 0;
};

}  // namespace enginery
