// Weight export, timed: the C++ side of bench/gpu/run_export_bench.sh. Loads the engine through the plugin registry
// from the same checkpoint as the PyTorch FSDP2 reference (bench/gpu/reference_export_fsdp2.py) and times full
// exports of its weights (docs/ARCHITECTURE.md, "The contract": weight export):
//   stream_bf16     BaseEngine::export_weights(bf16): one unit per group, cast on the shards before the all-gather
//   stream_fp32     the same in fp32 (what get_per_tensor_param yields)
//   buckets_bf16    WeightBucketer over the bf16 stream, --bucket-mb buffers (what rollout receivers consume)
// Per mode one JSON line: seconds per export (mean of --repeat after one warm-up), extra peak memory over what the
// engine held before (GiB), tensors and bytes exported, and a float64 checksum of every exported value so the
// reference's numbers can be compared with these.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <functional>
#include <iostream>

#include "bench/bench_common.h"
#include "host_api/exports.h"
#include "support/torch_compat.h"
#include "engine_driver/weight_export.h"

namespace {

using namespace enginery;

struct Drained {
  int64_t tensors = 0, bytes = 0;
  double checksum = 0.0;
};

// The receiver: counts what arrives; the checksum (a sync per tensor) only when asked, outside the timed runs.
Drained drain_stream(WeightStream& stream, bool checksum) {
  Drained d;
  while (true) {  // each group dies before the next is gathered, as a receiver that copies and lets go does
    const auto group = stream.next();
    if (group.empty()) break;
    for (const auto& t : group) {
      ++d.tensors;
      d.bytes += t.tensor.numel() * static_cast<int64_t>(t.tensor.element_size());
      if (checksum) d.checksum += t.tensor.to(torch::kDouble).sum().item<double>();
    }
  }
  return d;
}

Drained drain_buckets(std::unique_ptr<WeightStream> stream, int64_t bucket_bytes, bool checksum) {
  Drained d;
  WeightBucketer bucketer(std::move(stream), bucket_bytes);
  WeightBucket bucket;
  while (bucketer.next(bucket)) {
    d.tensors += static_cast<int64_t>(bucket.entries.size());
    d.bytes += bucket.buffer.numel() * static_cast<int64_t>(bucket.buffer.element_size());
    if (checksum) d.checksum += bucket.buffer.to(torch::kDouble).sum().item<double>();
  }
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"enginery weight export benchmark"};
  bench::EngineFlags flags;
  int64_t repeat = 5, bucket_mb = 512;
  bench::add_engine_flags(app, flags);
  app.add_option("--repeat", repeat, "timed exports per mode (after one warm-up)");
  app.add_option("--bucket-mb", bucket_mb, "bucket size of the bucketed mode, MiB");
  CLI11_PARSE(app, argc, argv);

  const bench::Rank me = bench::join_world(flags.device);
  auto engine = bench::load_engine(flags, bench::engine_args(me, flags));
  const torch::Device device = engine->device();
  const int64_t index = device.is_cuda() ? device.index() : 0;

  struct Mode {
    std::string name;
    std::function<Drained(bool checksum)> run;
  };
  const std::vector<Mode> modes = {
      {"stream_bf16", [&](bool c) { return drain_stream(*engine->export_weights(c10::kBFloat16), c); }},
      {"stream_fp32", [&](bool c) { return drain_stream(*engine->export_weights(c10::kFloat), c); }},
      {"buckets_bf16", [&](bool c) { return drain_buckets(engine->export_weights(c10::kBFloat16), bucket_mb << 20, c); }},
  };
  for (const auto& mode : modes) {
    const Drained checked = mode.run(/*checksum=*/true);  // also the warm-up
    std::vector<double> seconds;
    double extra_gib = 0.0;
    for (int64_t i = 0; i < repeat; ++i) {
      compat::device_synchronize(device);
      compat::cuda_reset_peak_memory();
      const double before_gib = static_cast<double>(compat::cuda_allocated_bytes(index)) / (1 << 30);
      const auto t0 = std::chrono::steady_clock::now();
      mode.run(/*checksum=*/false);
      compat::device_synchronize(device);
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      if (device.is_cuda()) extra_gib = std::max(extra_gib, compat::cuda_peak_allocated_gib() - before_gib);
    }
    nlohmann::json result = {{"impl", "enginery"},      {"mode", mode.name},
                             {"backend", flags.backend}, {"world", me.env.world_size},
                             {"seconds", bench::mean(seconds)}, {"extra_peak_gib", extra_gib},
                             {"tensors", checked.tensors},  {"bytes", checked.bytes},
                             {"checksum", checked.checksum}};
    bench::report(result, me.env.rank, flags.out);
  }
  return 0;
}
