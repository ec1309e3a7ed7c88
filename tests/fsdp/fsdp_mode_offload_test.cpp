// [engine.<backend>] offload_outside_modes (docs/ARCHITECTURE.md, "Offload outside the modes"): BaseEngine's mode
// guards bring what a mode needs and send it back at the guard's end. First the guards' bookkeeping against an
// engine that records every move (it claims a CUDA device, so "bring" and "send back" differ; nothing is
// allocated), then the fsdp and fsdp2 engines on 2 Gloo ranks: with the option each outermost guard copies the
// state into fresh storage (a move on a CPU engine), nested guards copy nothing, and the numbers are bitwise those
// of an engine without it. The GPU side (memory freed outside the modes) is fsdp_offload_gpu_test.cpp.
#include <gtest/gtest.h>

#include <optional>
#include <stdexcept>

#include "host_api/error.h"
#include "engine_driver/mode_offload.h"
#include "tests/fsdp/fsdp_test_util.h"
#include "tests/support/multirank.h"
#include "engine_driver/step_loop.h"
#include "engine_driver/mode_guard.h"

namespace enginery {
namespace fsdp_test {
namespace {

struct Move {
  std::string device;
  bool model, optimizer, grad;
  bool operator==(const Move& o) const {
    return device == o.device && model == o.model && optimizer == o.optimizer && grad == o.grad;
  }
};
std::ostream& operator<<(std::ostream& os, const Move& m) {
  return os << m.device << "(" << m.model << m.optimizer << m.grad << ")";
}

class RecordingEngine : public StubEngine {
 public:
  // `option`: engine.recording.offload_outside_modes as a config would give it; "" leaves it out, "true" and
  // "false" are booleans, any other text stays a string.
  explicit RecordingEngine(const std::string& option) : StubEngine("recording", torch::Device(torch::kCUDA, 0)) {
    if (option == "true" || option == "false") {
      args_.engine.backend_options[kOffloadOutsideModes] = option == "true";
    } else if (!option.empty()) {
      args_.engine.backend_options[kOffloadOutsideModes] = option;
    }
  }
  void move_state(const torch::Device& device, bool model, bool optimizer, bool grad) override {
    if (fail_next_) {
      fail_next_ = false;
      throw EngineryError("the copy failed", "RecordingEngine");
    }
    moves.push_back({device.str(), model, optimizer, grad});
  }
  void optimizer_zero_grad() override { ++zeroed; }
  void fail_next_move() { fail_next_ = true; }
  std::vector<Move> moves;
  int zeroed = 0;

 private:
  bool fail_next_ = false;
};

const Move kBringAll{"cuda:0", true, true, true}, kSendAll{"cpu", true, true, true};
const Move kBringModel{"cuda:0", true, false, false}, kSendModel{"cpu", true, false, false};

TEST(ModeOffload, OutermostGuardBringsWhatItsModeNeedsAndSendsBackWhatItBrought) {
  RecordingEngine engine("true");
  {
    auto train = train_mode(engine);
    EXPECT_EQ(engine.moves, (std::vector<Move>{kBringAll}));
    {
      auto eval = eval_mode(engine);  // nested: the model is there already
      EXPECT_FALSE(engine.is_training());
    }
    EXPECT_TRUE(engine.is_training());
    EXPECT_EQ(engine.moves.size(), 1u) << "a nested guard moved something";
  }
  EXPECT_EQ(engine.moves, (std::vector<Move>{kBringAll, kSendAll}));
  engine.moves.clear();
  {
    auto eval = eval_mode(engine);
    { auto train = train_mode(engine); }  // nested: moves nothing, although the optimizer is away
  }
  EXPECT_EQ(engine.moves, (std::vector<Move>{kBringModel, kSendModel}));
  engine.moves.clear();
  {
    // A guard moved elsewhere (the Python binding keeps one in a std::optional) sends back once, at its new end.
    std::optional<ModeGuard> held;
    held.emplace(train_mode(engine));
    EXPECT_EQ(engine.moves, (std::vector<Move>{kBringAll}));
    held.reset();
  }
  EXPECT_EQ(engine.moves, (std::vector<Move>{kBringAll, kSendAll}));
}

const ModeOptions kManualMoves{/*zero_grad_on_exit=*/true, /*disable_auto_offload=*/true};
const ModeOptions kKeepGradients{/*zero_grad_on_exit=*/false, /*disable_auto_offload=*/false};

TEST(ModeOffload, DisableAutoOffloadLeavesTheMovesToTheCaller) {
  RecordingEngine engine("true");
  {
    auto train = train_mode(engine, kManualMoves);
    { auto eval = eval_mode(engine); }  // nested: moves nothing either way
  }
  { auto eval = eval_mode(engine, kManualMoves); }
  EXPECT_TRUE(engine.moves.empty());
}

// verl's contexts: a train block zeroes the gradients on leaving unless zero_grad_on_exit is false, and always when
// it raised (the next block must not step with a failed block's gradients); an eval block never does. The zero
// comes before the offload (the gradients are zeroed where they are).
TEST(ModeOffload, TrainModeZeroesGradientsOnExitAsVerlsContextDoes) {
  RecordingEngine engine("true");
  { auto train = train_mode(engine); }
  EXPECT_EQ(engine.zeroed, 1);
  { auto train = train_mode(engine, kKeepGradients); }
  EXPECT_EQ(engine.zeroed, 1);
  { auto eval = eval_mode(engine); }
  EXPECT_EQ(engine.zeroed, 1);
  try {
    auto train = train_mode(engine, kKeepGradients);
    throw std::runtime_error("the block failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(engine.zeroed, 2) << "a block that threw left its gradients";
  {
    // A host whose exceptions are not C++'s (the Python binding) says so through end().
    auto outer = eval_mode(engine, kManualMoves);
    auto train = train_mode(engine, kKeepGradients);
    train.end(/*raised=*/true);
    EXPECT_EQ(engine.zeroed, 3);
    EXPECT_FALSE(engine.is_training()) << "end() did not restore the outer mode";
  }
  EXPECT_EQ(engine.zeroed, 3) << "the guard ended twice";
  EXPECT_EQ(engine.moves.size(), 8u);  // four outermost guards that moved, each bringing and sending back
  engine.fail_next_move();
  EXPECT_THROW(train_mode(engine), EngineryError);
  EXPECT_EQ(engine.zeroed, 3) << "a guard that failed to enter zeroed on its way out";
}

TEST(ModeOffload, OffByDefaultAndFalseMoveNothing) {
  for (const std::string option : {"", "false"}) {
    RecordingEngine engine(option);
    { auto train = train_mode(engine); }
    { auto eval = eval_mode(engine); }
    EXPECT_TRUE(engine.moves.empty()) << "option '" << option << "'";
  }
}

TEST(ModeOffload, AValueOtherThanABooleanIsRefusedByName) {
  RecordingEngine engine("yes");
  try {
    auto train = train_mode(engine);
    ADD_FAILURE() << "'yes' was accepted";
  } catch (const EngineryError& e) {
    EXPECT_EQ(e.where(), "engine.recording.offload_outside_modes");
    EXPECT_EQ(e.allowed(), "a boolean (true, false)");
    EXPECT_NE(std::string(e.what()).find("'yes' has the wrong type"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(engine.moves.empty());
}

// A failed bring leaves no guard open (the next guard is outermost again); a failed send-back cannot throw from a
// destructor: the state stays on the device and the next guard's end sends it.
TEST(ModeOffload, FailedMovesLeaveTheBookkeepingRight) {
  RecordingEngine engine("true");
  engine.fail_next_move();
  EXPECT_THROW(train_mode(engine), EngineryError);
  { auto train = train_mode(engine); }
  EXPECT_EQ(engine.moves, (std::vector<Move>{kBringAll, kSendAll}));
  engine.moves.clear();
  {
    auto eval = eval_mode(engine);
    engine.fail_next_move();
  }
  EXPECT_EQ(engine.moves, (std::vector<Move>{kBringModel}));
  { auto eval = eval_mode(engine); }
  EXPECT_EQ(engine.moves, (std::vector<Move>{kBringModel, kBringModel, kSendModel}));
}

// Where each moved tensor that has storage keeps it now (before the first step AdamW's moments and the shard
// gradients may have none).
std::vector<const void*> storage_of(fsdp::FSDPEngine& engine) {
  std::vector<const void*> out;
  auto add = [&](const torch::Tensor& t) {
    if (t.defined() && t.numel() > 0) out.push_back(t.data_ptr());
  };
  for (auto& u : engine.fsdp_module()->units()) {
    add(u.shard());
    add(u.shard_grad_unsettled());
  }
  for (auto& t : engine.optimizer()->exp_avg()) add(t);
  return out;
}

void bitwise_with_and_without(const std::string& strategy) {
  testing::run_ranks(2, [strategy](const testing::RankContext& ctx) {
    auto args = make_args(strategy, "bf16", ctx.rank, 2, ctx.group, ctx.store);
    fsdp::FSDPEngine plain(args, tiny_builder(TinyConfig{}));
    args.engine.backend_options[kOffloadOutsideModes] = true;
    fsdp::FSDPEngine moving(args, tiny_builder(TinyConfig{}));
    plain.initialize();
    moving.initialize();
    auto batch = [&](uint64_t seed) { return rank_slice(make_batch(4, 8, 64, seed), ctx.rank, 2); };
    for (uint64_t step = 1; step <= 2; ++step) {
      const auto outside = storage_of(moving);
      BatchOutput got, want;
      {
        auto mode = train_mode(moving);
        const auto inside = storage_of(moving);
        for (size_t i = 0; i < inside.size(); ++i) EXPECT_NE(inside[i], outside[i]) << "tensor " << i << " stayed";
        {
          auto nested = eval_mode(moving);
          EXPECT_EQ(storage_of(moving), inside) << "a nested guard moved the state";
        }
        got = train_batch(moving, batch(step), sft_loss);
      }
      {
        auto mode = train_mode(plain);
        want = train_batch(plain, batch(step), sft_loss);
      }
      EXPECT_EQ(got.loss.item<double>(), want.loss.item<double>()) << "step " << step;
      EXPECT_EQ(got.grad_norm.item<double>(), want.grad_norm.item<double>()) << "step " << step;
      // infer_batch opens its own eval mode: the model comes and goes with it.
      const auto lp_got = infer_batch(moving, batch(10 + step), sft_loss).outputs.at("log_probs");
      const auto lp_want = infer_batch(plain, batch(10 + step), sft_loss).outputs.at("log_probs");
      EXPECT_TRUE(torch::equal(lp_got, lp_want)) << "step " << step;
    }
    const auto a = engine_params(moving), b = engine_params(plain);
    for (const auto& [name, t] : a) EXPECT_TRUE(torch::equal(t, b.at(name))) << name;
  });
}

TEST(ModeOffload, FsdpStepsAreBitwiseThoseOfAnEngineWithoutIt) { bitwise_with_and_without("fsdp"); }
TEST(ModeOffload, Fsdp2StepsAreBitwiseThoseOfAnEngineWithoutIt) { bitwise_with_and_without("fsdp2"); }

TEST(ModeOffload, TheEngineRefusesABadValueAtConstruction) {
  auto args = make_args("fsdp2", "fp32");
  args.engine.backend_options[kOffloadOutsideModes] = int64_t{1};
  try {
    fsdp::FSDPEngine engine(args, tiny_builder(TinyConfig{}));
    ADD_FAILURE() << "'1' was accepted";
  } catch (const EngineryError& e) {
    EXPECT_EQ(e.where(), "engine.fsdp2.offload_outside_modes");
  }
}

}  // namespace
}  // namespace fsdp_test
}  // namespace enginery
