#include "plugin/fsdp/ulysses.h"

#include <string>
#include <vector>

#include "host_api/error.h"
#include "plugin/fsdp/backend_options.h"
#include "plugin/fsdp/process_groups.h"

namespace enginery {
namespace fsdp {
namespace {

std::string key_of(const EngineArgs& args) { return option_key(args.engine, kUlyssesSize); }

std::string divisors(int64_t n) {
  std::string out;
  for (int64_t d = 1; d <= n; ++d) {
    if (n % d == 0) out += (out.empty() ? "" : ", ") + std::to_string(d);
  }
  return out;
}

}  // namespace

int64_t ulysses_size_wanted(const EngineArgs& args) {
  const int64_t size = backend_option<int64_t>(args.engine, kUlyssesSize, 1);
  const int64_t world = std::max<int64_t>(args.world_size, 1);
  const std::string text = std::to_string(size);
  if (size < 1 || world % size != 0) {
    throw EngineryError(text + " is not a positive integer dividing the world size " + std::to_string(world),
                        key_of(args), divisors(world));
  }
  if (size > 1 && !args.model.use_remove_padding) {
    throw EngineryError(key_of(args) + " = " + text + " splits the packed tokens of a micro-batch, which needs " +
                            "model.use_remove_padding = true (as verl requires)",
                        "model.use_remove_padding", "true with " + key_of(args) + " > 1");
  }
  return size;
}

torch::Tensor UlyssesGroup::all_to_all(const torch::Tensor& in) const {
  auto out = torch::empty_like(in, at::MemoryFormat::Contiguous);
  group_->all_to_all_into(out, in);
  return out;
}

torch::Tensor UlyssesGroup::all_gather(const torch::Tensor& in) const {
  auto out = torch::empty({in.numel() * group_->size()}, in.options());
  group_->all_gather_into(out, in);
  return out;
}

void check_groups_share_micro_batch(const torch::Tensor& input_ids, const torch::Tensor& layout,
                                    const Collectives& world, int64_t size, const std::string& key) {
  // Per tensor its shape, sum and sum weighted by the flat position: a sequence or token moved shows as well as a
  // changed one; exact in fp64 for any batch whose ids * tokens stay below 2^53.
  torch::NoGradGuard no_grad;
  const auto options = torch::TensorOptions().dtype(torch::kDouble).device(input_ids.device());
  std::vector<torch::Tensor> parts;
  for (const torch::Tensor& t : {input_ids, layout}) {
    const auto flat = t.reshape({-1}).to(options);
    const auto position = torch::arange(1, flat.numel() + 1, options);
    parts.push_back(torch::tensor({static_cast<double>(t.dim()), static_cast<double>(t.dim() > 0 ? t.size(0) : 1),
                                   static_cast<double>(t.dim() > 1 ? t.size(1) : 1)},
                                  options));
    parts.push_back(torch::stack({flat.sum(), (flat * position).sum()}));
  }
  const auto mine = torch::cat(parts);
  auto all = torch::empty({world.size() * mine.numel()}, mine.options());
  world.all_gather_into(all, mine);
  const auto table = all.view({world.size(), mine.numel()}).cpu();
  for (int64_t first = 0; first < world.size(); first += size) {
    for (int64_t r = first + 1; r < first + size; ++r) {
      if (torch::equal(table[r], table[first])) continue;
      const bool mine_differs = world.rank() >= first && world.rank() < first + size;
      throw EngineryError(std::string(mine_differs ? "this rank's" : "another") + " sequence group (ranks " +
                              std::to_string(first) + " to " + std::to_string(first + size - 1) +
                              ") holds different micro-batches on ranks " + std::to_string(first) + " and " +
                              std::to_string(r) + ": every rank of a group must get the same rows, its " +
                              "data-parallel rank's (get_data_parallel_rank), as verl's dispatch gives them",
                          key + ", rank " + std::to_string(world.rank()));
    }
  }
}

UlyssesGroups UlyssesGroups::create(const EngineArgs& args, int64_t size) {
  RankGrid grid = make_rank_grid(args, size, "ulysses", key_of(args));
  UlyssesGroups g;
  g.sequence = std::make_shared<UlyssesGroup>(std::move(grid.row));
  g.data = std::move(grid.column);
  return g;
}

}  // namespace fsdp
}  // namespace enginery
