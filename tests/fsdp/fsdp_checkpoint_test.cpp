// Sharded checkpoints of the FSDP engine: exact resume, content selection, corruption, write errors, retention,
// Hugging Face export. Multi-rank over real Gloo ranks (tests/support/multirank.h).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <csignal>
#include <iostream>
#include <filesystem>
#include <fstream>

#include "host_api/error.h"
#include "models/model_factory.h"
#include "plugin/fsdp/checkpoint_format.h"
#include "tests/fsdp/checkpoint_test_util.h"
#include "tests/support/multirank.h"
#include "engine_driver/step_loop.h"

namespace enginery {
namespace fsdp_test {
namespace {

namespace fs = std::filesystem;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(FsdpCheckpoint, SaveLoadGivesTheIdenticalNextStep) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    auto args = make_args("fsdp", "fp32", ctx.rank, 2, ctx.group, ctx.store);
    args.engine.grad_scaler.enabled = ScalerMode::kAlways;  // scaler state travels too
    args.engine.grad_scaler.growth_interval = 2;
    args.optim.lr_scheduler_type = "cosine";
    args.optim.lr_warmup_steps = 2;
    const std::string dir = ctx.shared_dir + "/global_step_2";

    fsdp::FSDPEngine first(args, tiny_builder(TinyConfig{}));
    first.initialize();
    for (int step = 0; step < 3; ++step) train_batch(first, rank_slice(make_batch(4, 8, 64, 200 + step), ctx.rank, 2), sft_loss);
    first.save_checkpoint(dir, 3, 0);
    const double scale_at_save = first.grad_scaler()->current_scale();
    Batch next = rank_slice(make_batch(4, 8, 64, 300), ctx.rank, 2);
    auto a = train_batch(first, next, sft_loss);
    auto params_a = engine_params(first);

    auto args_b = args;
    args_b.engine.seed = 1234;  // different initial weights: everything must come from the checkpoint
    fsdp::FSDPEngine second(args_b, tiny_builder(TinyConfig{}));
    second.initialize();
    second.load_checkpoint(dir);
    EXPECT_EQ(second.grad_scaler()->current_scale(), scale_at_save);
    auto b = train_batch(second, next, sft_loss);
    EXPECT_EQ(a.lr, b.lr);
    EXPECT_TRUE(torch::equal(a.grad_norm, b.grad_norm));
    EXPECT_EQ(first.grad_scaler()->current_scale(), second.grad_scaler()->current_scale());
    EXPECT_EQ(first.optimizer()->step_count(), second.optimizer()->step_count());
    auto params_b = engine_params(second);
    for (const auto& [name, t] : params_a) EXPECT_TRUE(torch::equal(t, params_b.at(name))) << name;
  });
}

// 2N steps straight == N steps, save, load into a fresh engine, N steps: bitwise (CPU, fp32, a grad scaler, and
// batches drawn from torch's global generator, so a resume that lost the RNG state takes other batches).
TEST(FsdpCheckpoint, ResumeIsBitwiseExact) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    constexpr int kN = 3;
    auto args = make_args("fsdp2", "fp32", ctx.rank, 2, ctx.group, ctx.store);
    args.engine.grad_scaler.enabled = ScalerMode::kAlways;
    args.engine.grad_scaler.growth_interval = 2;  // the scale grows during the run: its state matters
    args.optim.lr_scheduler_type = "cosine";
    args.optim.lr_warmup_steps = 2;
    auto step = [&](fsdp::FSDPEngine& e) {
      const auto seed = torch::randint(0, 1 << 30, {1}, torch::kLong).item<int64_t>();  // the global CPU generator
      return train_batch(e, rank_slice(make_batch(4, 8, 64, static_cast<uint64_t>(seed)), ctx.rank, 2), sft_loss);
    };

    fsdp::FSDPEngine straight(args, tiny_builder(TinyConfig{}));
    straight.initialize();
    std::vector<BatchOutput> straight_out;
    for (int i = 0; i < 2 * kN; ++i) straight_out.push_back(step(straight));

    fsdp::FSDPEngine before(args, tiny_builder(TinyConfig{}));
    before.initialize();
    for (int i = 0; i < kN; ++i) step(before);
    const std::string dir = ctx.shared_dir + "/global_step_3";
    const auto t0 = std::chrono::steady_clock::now();
    before.save_checkpoint(dir, kN, 0);
    const auto t1 = std::chrono::steady_clock::now();

    auto fresh_args = args;
    fresh_args.engine.seed = 7;  // other weights and another generator state until the load
    fsdp::FSDPEngine after(fresh_args, tiny_builder(TinyConfig{}));
    after.initialize();
    const auto t2 = std::chrono::steady_clock::now();
    after.load_checkpoint(dir);
    const auto t3 = std::chrono::steady_clock::now();
    if (ctx.rank == 0) {
      std::cout << "tiny model, 2 ranks: save " << std::chrono::duration<double, std::milli>(t1 - t0).count()
                << " ms, load " << std::chrono::duration<double, std::milli>(t3 - t2).count() << " ms\n";
    }
    for (int i = kN; i < 2 * kN; ++i) {
      auto out = step(after);
      EXPECT_TRUE(torch::equal(out.loss, straight_out[i].loss)) << "step " << i + 1 << " loss";
      EXPECT_TRUE(torch::equal(out.grad_norm, straight_out[i].grad_norm)) << "step " << i + 1 << " grad norm";
      EXPECT_EQ(out.lr, straight_out[i].lr) << "step " << i + 1;
    }
    expect_bitwise_equal(full_state(after), full_state(straight), "resumed vs straight");
    EXPECT_EQ(after.grad_scaler()->current_scale(), straight.grad_scaler()->current_scale());
    EXPECT_EQ(after.grad_scaler()->growth_tracker(), straight.grad_scaler()->growth_tracker());
    EXPECT_EQ(after.optimizer()->step_count(), straight.optimizer()->step_count());
    EXPECT_EQ(after.lr_scheduler()->current_step(), straight.lr_scheduler()->current_step());
  });
}

TEST(FsdpCheckpoint, ContentsAreSelectable) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    auto args = make_args("fsdp", "fp32", ctx.rank, 2, ctx.group, ctx.store);
    args.checkpoint.save_contents = {"model"};
    fsdp::FSDPEngine engine(args, tiny_builder(TinyConfig{}));
    engine.initialize();
    train_batch(engine, rank_slice(make_batch(4, 8, 64, 1), ctx.rank, 2), sft_loss);
    const std::string dir = ctx.shared_dir + "/model_only";
    engine.save_checkpoint(dir, 1, 0);
    EXPECT_TRUE(fs::exists(dir + "/model_rank_" + std::to_string(ctx.rank) + ".bin"));
    EXPECT_FALSE(fs::exists(dir + "/optim_rank_" + std::to_string(ctx.rank) + ".bin"));
    EXPECT_FALSE(fs::exists(dir + "/extra_rank_" + std::to_string(ctx.rank) + ".json"));

    auto load_args = args;
    load_args.engine.seed = 9;
    fsdp::FSDPEngine all(load_args, tiny_builder(TinyConfig{}));
    all.initialize();
    const std::string err = error_of([&] { all.load_checkpoint(dir); });
    EXPECT_NE(err.find("'optimizer' but the checkpoint was saved without it"), std::string::npos) << err;

    load_args.checkpoint.load_contents = {"model"};
    fsdp::FSDPEngine model_only(load_args, tiny_builder(TinyConfig{}));
    model_only.initialize();
    model_only.load_checkpoint(dir);
    const auto want = engine_params(engine), got = engine_params(model_only);
    for (const auto& [name, t] : want) EXPECT_TRUE(torch::equal(t, got.at(name))) << name;
    EXPECT_EQ(model_only.optimizer()->step_count(), 0);  // the optimizer was not loaded

    load_args.checkpoint.load_contents = {"model", "bogus"};
    fsdp::FSDPEngine bad(load_args, tiny_builder(TinyConfig{}));
    bad.initialize();
    EXPECT_NE(error_of([&] { bad.load_checkpoint(dir); }).find("unknown checkpoint content 'bogus'"), std::string::npos);
  });
}

// A flipped byte or a truncated shard is an error naming the file; a directory without metadata.json is not a
// checkpoint.
TEST(FsdpCheckpoint, CorruptionIsAnErrorNamingTheFile) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    auto args = make_args("fsdp", "fp32", ctx.rank, 2, ctx.group, ctx.store);
    fsdp::FSDPEngine engine(args, tiny_builder(TinyConfig{}));
    engine.initialize();
    train_batch(engine, rank_slice(make_batch(4, 8, 64, 1), ctx.rank, 2), sft_loss);
    const std::string flipped = ctx.shared_dir + "/flipped", cut = ctx.shared_dir + "/cut";
    engine.save_checkpoint(flipped, 1, 0);
    engine.save_checkpoint(cut, 1, 0);
    const std::string bad_model = flipped + "/model_rank_1.bin", bad_optim = cut + "/optim_rank_0.bin";
    if (ctx.rank == 0) {
      std::fstream f(bad_model, std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(100);
      char c = 0;
      f.read(&c, 1);
      c ^= 0x01;
      f.seekp(100);
      f.write(&c, 1);
      fs::resize_file(bad_optim, fs::file_size(bad_optim) - 4);
    }
    engine.get_data_parallel_group()->barrier()->wait();

    const std::string flipped_err = error_of([&] { engine.load_checkpoint(flipped); });
    const std::string cut_err = error_of([&] { engine.load_checkpoint(cut); });
    if (ctx.rank == 1) {  // the rank that reads the file names it
      EXPECT_NE(flipped_err.find(bad_model), std::string::npos) << flipped_err;
      EXPECT_NE(flipped_err.find("sha256"), std::string::npos) << flipped_err;
    } else {
      EXPECT_NE(flipped_err.find("rank 1 failed"), std::string::npos) << flipped_err;
      EXPECT_NE(cut_err.find(bad_optim), std::string::npos) << cut_err;
      EXPECT_NE(cut_err.find("bytes, metadata.json says"), std::string::npos) << cut_err;
    }
    EXPECT_NE(error_of([&] { engine.load_checkpoint(ctx.shared_dir); }).find("metadata.json"), std::string::npos);
  });
}

// A write error in one rank (its files may not grow past a limit, as on a full disk) fails the save on every rank,
// leaves no new directory and the previous checkpoint intact and loadable.
TEST(FsdpCheckpoint, WriteErrorLeavesThePreviousCheckpoint) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    auto args = make_args("fsdp", "fp32", ctx.rank, 2, ctx.group, ctx.store);
    const TinyConfig big{512, 64, 2};  // a shard file of about 150 KB per rank
    fsdp::FSDPEngine engine(args, tiny_builder(big));
    engine.initialize();
    train_batch(engine, rank_slice(make_batch(4, 8, 512, 1), ctx.rank, 2), sft_loss);
    const std::string one = ctx.shared_dir + "/global_step_1", two = ctx.shared_dir + "/global_step_2";
    engine.save_checkpoint(one, 1, 1);
    const auto saved = full_state(engine);
    train_batch(engine, rank_slice(make_batch(4, 8, 512, 2), ctx.rank, 2), sft_loss);

    struct rlimit old_limit;
    ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
    if (ctx.rank == 1) {
      // The FileStore file is written by this process too: leave it room, the shard none.
      const auto limit = static_cast<rlim_t>(fs::file_size(ctx.store_path) + 32 * 1024);
      ASSERT_LT(limit, fs::file_size(one + "/model_rank_1.bin"));
      std::signal(SIGXFSZ, SIG_IGN);  // write() then fails with EFBIG instead of killing the process
      struct rlimit small = old_limit;
      small.rlim_cur = limit;
      ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
    }
    const std::string err = error_of([&] { engine.save_checkpoint(two, 2, 1); });
    if (ctx.rank == 1) {
      ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old_limit), 0);
      EXPECT_NE(err.find("model_rank_1.bin"), std::string::npos) << err;
      EXPECT_NE(err.find("File too large"), std::string::npos) << err;
    } else {
      EXPECT_NE(err.find("rank 1 failed"), std::string::npos) << err;
    }
    EXPECT_FALSE(fs::exists(two));
    EXPECT_FALSE(fs::exists(ctx.shared_dir + "/.global_step_2.tmp"));
    ASSERT_TRUE(fs::exists(one + "/metadata.json"));  // retention did not run

    auto fresh_args = args;
    fresh_args.engine.seed = 3;
    fsdp::FSDPEngine fresh(fresh_args, tiny_builder(big));
    fresh.initialize();
    fresh.load_checkpoint(one);
    expect_bitwise_equal(full_state(fresh), saved, "the previous checkpoint after a failed save");
  });
}

// A save into a directory holding a user's files is refused on every rank, by name, and deletes nothing; an empty
// directory or an earlier checkpoint of ours is replaced (verl's workers save each step into a fresh directory).
TEST(FsdpCheckpoint, SaveIntoAUsersDirectoryIsRefusedAndKeepsItsFiles) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    auto args = make_args("fsdp2", "fp32", ctx.rank, 2, ctx.group, ctx.store);
    fsdp::FSDPEngine engine(args, tiny_builder(TinyConfig{}));
    engine.initialize();
    const fs::path users = fs::path(ctx.shared_dir) / "users", empty = fs::path(ctx.shared_dir) / "empty";
    if (ctx.rank == 0) {
      fs::create_directories(users / "data");
      std::ofstream(users / "notes.txt") << "mine";
      fs::create_directories(empty);
    }
    ctx.group->barrier()->wait();
    const std::string err = error_of([&] { engine.save_checkpoint(users.string(), 1, 0); });
    // The rank that looked (0) names the cause; the others name that rank, as every failed save does.
    EXPECT_NE(err.find(ctx.rank == 0 ? users.string() + " holds files enginery did not write (no metadata.json)"
                                     : std::string("rank 0 failed")),
              std::string::npos)
        << err;
    EXPECT_TRUE(fs::exists(users / "notes.txt") && fs::is_directory(users / "data"));
    engine.save_checkpoint(empty.string(), 1, 0);
    engine.save_checkpoint(empty.string(), 2, 0);  // our own checkpoint: replaced
    EXPECT_TRUE(fs::exists(empty / "metadata.json"));
  });
}

// The same checkpoint saved again replaces only what its save wrote (metadata.json names every file, huggingface/
// with hf_model): a file put into it since is named and kept with the checkpoint it sits in; once it is moved out,
// the save goes through.
TEST(FsdpCheckpoint, ReplacingACheckpointKeepsFilesItsSaveDidNotWrite) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    auto args = make_args("fsdp2", "fp32", ctx.rank, 2, ctx.group, ctx.store);
    args.model.path = "builtin:qwen2-tiny";
    args.checkpoint.save_contents = {"model", "optimizer", "extra", "hf_model"};
    fsdp::FSDPEngine engine(args);
    engine.initialize();
    const fs::path dir = fs::path(ctx.shared_dir) / "ckpt";
    engine.save_checkpoint(dir.string(), 1, 0);
    if (ctx.rank == 0) std::ofstream(dir / "notes.txt") << "mine";
    ctx.group->barrier()->wait();
    const std::string err = error_of([&] { engine.save_checkpoint(dir.string(), 2, 0); });
    EXPECT_NE(err.find(ctx.rank == 0 ? dir.string() + " holds files its checkpoint did not write (notes.txt)"
                                     : std::string("rank 0 failed")),
              std::string::npos)
        << err;
    ctx.group->barrier()->wait();
    EXPECT_TRUE(fs::exists(dir / "notes.txt"));
    EXPECT_EQ(fsdp::ckpt::read_metadata(dir.string()).global_step, 1);
    ctx.group->barrier()->wait();
    if (ctx.rank == 0) fs::rename(dir / "notes.txt", fs::path(ctx.shared_dir) / "notes.txt");
    ctx.group->barrier()->wait();
    engine.save_checkpoint(dir.string(), 2, 0);
    EXPECT_EQ(fsdp::ckpt::read_metadata(dir.string()).global_step, 2);
    EXPECT_TRUE(fs::exists(dir / "huggingface" / "model.safetensors"));
  });
}

// A kill during retention leaves a half-removed .global_step_<N>.deleting; the next save into that directory
// (another process, as after a restart) removes it. A directory only the user could have named is left alone.
TEST(FsdpCheckpoint, TheNextSaveFinishesAnInterruptedPruning) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    auto args = make_args("fsdp", "fp32", ctx.rank, 2, ctx.group, ctx.store);
    args.checkpoint.save_contents = {"model"};
    const fs::path root = ctx.shared_dir;
    {
      fsdp::FSDPEngine engine(args, tiny_builder(TinyConfig{}));
      engine.initialize();
      for (int s = 1; s <= 2; ++s) engine.save_checkpoint((root / ("global_step_" + std::to_string(s))).string(), s, 0);
    }
    if (ctx.rank == 0) {
      fs::rename(root / "global_step_1", root / ".global_step_1.deleting");
      fs::remove(root / ".global_step_1.deleting" / "metadata.json");
      fs::create_directories(root / ".notes.deleting");
    }
    ctx.group->barrier()->wait();
    fsdp::FSDPEngine restarted(args, tiny_builder(TinyConfig{}));
    restarted.initialize();
    restarted.save_checkpoint((root / "global_step_3").string(), 3, 0);
    EXPECT_FALSE(fs::exists(root / ".global_step_1.deleting"));
    EXPECT_TRUE(fs::exists(root / ".notes.deleting"));
    EXPECT_TRUE(fs::exists(root / "global_step_2/metadata.json"));
    EXPECT_TRUE(fs::exists(root / "global_step_3/metadata.json"));
  });
}

// max_ckpt_to_keep counts complete checkpoints on disk, so it holds across restarts (a new engine), and never
// touches directories that are not global_step_<N> checkpoints.
TEST(FsdpCheckpoint, RetentionCountsCompleteCheckpointsOnDisk) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    auto args = make_args("fsdp", "fp32", ctx.rank, 2, ctx.group, ctx.store);
    args.checkpoint.save_contents = {"model"};
    const fs::path root = ctx.shared_dir;
    {
      fsdp::FSDPEngine engine(args, tiny_builder(TinyConfig{}));
      engine.initialize();
      for (int s = 1; s <= 3; ++s) engine.save_checkpoint((root / ("global_step_" + std::to_string(s))).string(), s, 0);
      engine.save_checkpoint((root / "keep_me").string(), 3, 0);
    }
    if (ctx.rank == 0) fs::create_directories(root / "global_step_9");  // incomplete: neither counted nor removed
    ctx.group->barrier()->wait();
    fsdp::FSDPEngine restarted(args, tiny_builder(TinyConfig{}));
    restarted.initialize();
    restarted.save_checkpoint((root / "global_step_4").string(), 4, 2);
    EXPECT_FALSE(fs::exists(root / "global_step_1"));
    EXPECT_FALSE(fs::exists(root / "global_step_2"));
    EXPECT_TRUE(fs::exists(root / "global_step_3/metadata.json"));
    EXPECT_TRUE(fs::exists(root / "global_step_4/metadata.json"));
    EXPECT_TRUE(fs::exists(root / "global_step_9"));
    EXPECT_TRUE(fs::exists(root / "keep_me/metadata.json"));
    restarted.save_checkpoint((root / "global_step_4").string(), 4, 1);  // the same step again replaces it
    EXPECT_FALSE(fs::exists(root / "global_step_3"));
    EXPECT_TRUE(fs::exists(root / "global_step_4/metadata.json"));
  });
}

// save_contents "hf_model" writes a Hugging Face directory inside the checkpoint; export_hf shards above a size;
// both load back (models::build_model, as a run started from model.path does) with the engine's weights.
TEST(FsdpCheckpoint, HuggingFaceExportLoadsBack) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    auto args = make_args("fsdp2", "fp32", ctx.rank, 2, ctx.group, ctx.store);
    args.model.path = "builtin:qwen2-tiny";
    args.checkpoint.save_contents = {"model", "hf_model"};
    fsdp::FSDPEngine engine(args);
    engine.initialize();
    Batch batch = make_batch(4, 8, 64, 5);
    train_batch(engine, rank_slice(batch, ctx.rank, 2), sft_loss);
    const std::string ckpt_dir = ctx.shared_dir + "/global_step_1", sharded = ctx.shared_dir + "/hf_sharded";
    engine.save_checkpoint(ckpt_dir, 1, 0);
    engine.export_hf(sharded, 64 * 1024);
    const auto want = engine_params(engine);
    EXPECT_TRUE(fs::exists(sharded + "/model.safetensors.index.json"));
    EXPECT_TRUE(fs::exists(ckpt_dir + "/huggingface/model.safetensors"));
    for (const std::string dir : {ckpt_dir + "/huggingface", sharded}) {
      ModelConfig from_dir;
      from_dir.path = dir;
      auto model = models::build_model(from_dir, "language_model");
      size_t n = 0;
      for (const auto& p : model->named_parameters()) {
        EXPECT_TRUE(torch::equal(p.value(), want.at(p.key()))) << dir << ": " << p.key();
        ++n;
      }
      EXPECT_EQ(n, want.size()) << dir;
    }
    // A new run starting from the exported directory starts from these weights.
    auto from_hf = args;
    from_hf.model.path = sharded;
    fsdp::FSDPEngine started(from_hf);
    started.initialize();
    const auto got = engine_params(started);
    for (const auto& [name, t] : want) EXPECT_TRUE(torch::equal(t, got.at(name))) << name;
  });
}

}  // namespace
}  // namespace fsdp_test
}  // namespace enginery
