// Target of the FSDP checkpoint's metadata.json (plugin/fsdp/checkpoint_format.cpp), seeded with metadata written
// by the format's own to_json so the seeds follow the format.
#include "host_api/error.h"
#include "plugin/fsdp/checkpoint_format.h"
#include "tests/fuzz/targets.h"

namespace enginery {
namespace fuzz {
namespace {

namespace ckpt = fsdp::ckpt;

// The entry point under test: read_metadata takes a checkpoint directory, so the input goes through a file.
ckpt::Metadata parse_metadata(const std::string& text) {
  const std::filesystem::path dir = scratch_dir() / "checkpoint";
  write_file(dir / ckpt::kMetadataFile, text);
  return ckpt::read_metadata(dir.string());
}

ckpt::Metadata two_rank_metadata() {
  ckpt::Metadata m;
  m.global_step = 3;
  m.world_size = 2;
  m.fsdp_size = 2;
  m.strategy = "fsdp";
  m.contents = {"model", "optimizer", "extra"};
  m.params = {{"model.embed_tokens.weight", {4, 2}, "float32"}, {"lm_head.bias", {4}, "float32"}};
  for (int64_t rank = 0; rank < 2; ++rank) {
    ckpt::FileInfo model{ckpt::model_file_name(rank), "model", rank, 24, std::string(64, '0'), {}};
    model.segments = {{0, ckpt::kStateParam, rank * 4, rank * 4 + 4, 0},
                      {1, ckpt::kStateParam, rank * 2, rank * 2 + 2, 16}};
    ckpt::FileInfo optim{ckpt::optim_file_name(rank), "optimizer", rank, 48, std::string(64, 'f'), {}};
    optim.segments = {{0, ckpt::kStateExpAvg, rank * 4, rank * 4 + 4, 0},
                      {0, ckpt::kStateExpAvgSq, rank * 4, rank * 4 + 4, 16},
                      {1, ckpt::kStateExpAvg, rank * 2, rank * 2 + 2, 32},
                      {1, ckpt::kStateExpAvgSq, rank * 2, rank * 2 + 2, 40}};
    m.files.push_back(model);
    m.files.push_back(optim);
    m.files.push_back({ckpt::extra_file_name(rank), "extra", rank, 2, std::string(64, 'a'), {}});
  }
  // What FSDPEngine's training_state() writes.
  m.state = {{"optimizer", {{"step", 3}}},
             {"lr_scheduler", {{"step", 3}}},
             {"grad_scaler", {{"scale", 65536.0}, {"growth_tracker", 0}}}};
  m.config = {{"strategy", "fsdp"}, {"mixed_precision", {{"param_dtype", "fp32"}}}};
  return m;
}

}  // namespace

namespace checkpoint {
void fuzz_one(const std::string& input) { parse_metadata(input); }
}  // namespace checkpoint

Target checkpoint_target() {
  Target t;
  t.name = "checkpoint";
  t.syntax = Syntax::kJson;
  t.fuzz_one = checkpoint::fuzz_one;
  t.seeds = [] {
    ckpt::Metadata one;
    one.strategy = "fsdp2";
    one.contents = {"model"};
    one.params = {{"w", {2}, "float32"}};
    one.files = {{ckpt::model_file_name(0), "model", 0, 8, std::string(64, '1'), {{0, ckpt::kStateParam, 0, 2, 0}}}};
    one.state = {{"optimizer", {{"step", 0}}}, {"lr_scheduler", {{"step", 0}}}};
    return std::vector<std::string>{ckpt::to_json(two_rank_metadata()).dump(), ckpt::to_json(one).dump(2)};
  };
  t.dictionary = {"\"format\":", "\"version\":", "\"global_step\":", "\"world_size\":", "\"fsdp_size\":",
                  "\"strategy\":", "\"contents\":", "\"params\":", "\"files\":", "\"segments\":", "\"state\":",
                  "\"config\":", "\"shape\":", "\"bytes\":", "\"sha256\":", "\"enginery-fsdp-checkpoint\""};
  return t;
}

}  // namespace fuzz
}  // namespace enginery
