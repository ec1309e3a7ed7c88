#include <gtest/gtest.h>

#include "host_api/error.h"
#include "registry/engine_registry.h"
#include "engine_driver/config_checks.h"
#include "engine_driver/step_loop.h"
#include "tests/registry/fake_engine.h"

namespace enginery::test {
namespace {

EngineRegistration fake(EngineKey key, const std::string& plugin, int id, std::shared_ptr<const void> keep = {},
                        std::atomic<int>* live = nullptr) {
  return {std::move(key),
          [id, live](const EngineArgs& args) { return std::make_shared<FakeEngine>(args, id, live); },
          {plugin, "/plugins/" + plugin + "/plugin.toml"},
          std::move(keep),
          {}};
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const EngineryError& e) {
    return e.what();
  }
  return "(no EngineryError)";
}

TEST(EngineRegistry, RegisterHasCreateList) {
  EngineRegistry registry;
  registry.register_engine(fake({"value_model", "fsdp", "cpu"}, "p1", 1));
  registry.register_engine(fake({"language_model", "fsdp", "cpu"}, "p1", 2));
  EXPECT_TRUE(registry.has({"language_model", "fsdp", "cpu"}));
  EXPECT_FALSE(registry.has({"language_model", "fsdp", "cuda"}));
  auto list = registry.list();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].key.str(), "(language_model, fsdp, cpu)");  // sorted by key
  EXPECT_EQ(list[1].origin.str(), "plugin 'p1' (/plugins/p1/plugin.toml)");

  EngineArgs args;
  args.model_type = "language_model";  // the key wins over what the caller left in args
  args.device = "cuda";
  args.rank = 5;
  auto engine = registry.create("value_model", "fsdp", "cpu", args);
  auto* fake_engine = dynamic_cast<FakeEngine*>(engine.get());
  ASSERT_NE(fake_engine, nullptr);
  EXPECT_EQ(fake_engine->plugin_id(), 1);
  EXPECT_EQ(fake_engine->args().model_type, "value_model");
  EXPECT_EQ(fake_engine->args().device, "cpu");
  EXPECT_EQ(fake_engine->args().rank, 5);
}

TEST(EngineRegistry, DuplicateKeyNamesBothManifestsAndChangesNothing) {
  EngineRegistry registry;
  registry.register_engine(fake({"language_model", "fsdp", "cpu"}, "first", 1));
  std::vector<EngineRegistration> batch;
  batch.push_back(fake({"value_model", "fsdp", "cpu"}, "second", 2));
  batch.push_back(fake({"language_model", "fsdp", "cpu"}, "second", 2));
  std::string message = message_of([&] { registry.register_all(std::move(batch)); });
  EXPECT_NE(message.find("/plugins/first/plugin.toml"), std::string::npos) << message;
  EXPECT_NE(message.find("/plugins/second/plugin.toml"), std::string::npos) << message;
  EXPECT_NE(message.find("(language_model, fsdp, cpu)"), std::string::npos) << message;
  ASSERT_EQ(registry.list().size(), 1u);  // all or nothing: value_model was not registered either
  EXPECT_EQ(registry.list()[0].origin.plugin, "first");
}

TEST(EngineRegistry, UnknownPartsListWhatIsRegisteredAndWhere) {
  EngineRegistry registry;
  registry.register_engine(fake({"language_model", "fsdp", "cpu"}, "pf", 1));
  registry.register_engine(fake({"language_model", "veomni", "cuda"}, "pv", 2));
  registry.register_engine(fake({"value_model", "fsdp", "cpu"}, "pf2", 3));

  std::string backend = message_of([&] { registry.create({"language_model", "megatron", "cpu"}, {}); });
  EXPECT_NE(backend.find("unknown backend 'megatron' for model_type language_model"), std::string::npos) << backend;
  EXPECT_NE(backend.find("(language_model, fsdp, cpu) from plugin 'pf' (/plugins/pf/plugin.toml)"), std::string::npos);
  EXPECT_NE(backend.find("(language_model, veomni, cuda) from plugin 'pv'"), std::string::npos);
  EXPECT_EQ(backend.find("value_model, fsdp"), std::string::npos) << "lists only the asked model_type: " << backend;

  std::string model = message_of([&] { registry.create({"reward_model", "fsdp", "cpu"}, {}); });
  EXPECT_NE(model.find("unknown model_type 'reward_model'"), std::string::npos) << model;
  EXPECT_NE(model.find("(value_model, fsdp, cpu) from plugin 'pf2'"), std::string::npos) << model;

  std::string device = message_of([&] { registry.create({"language_model", "veomni", "cpu"}, {}); });
  EXPECT_NE(device.find("unknown device 'cpu' for language_model / veomni"), std::string::npos) << device;
  EXPECT_NE(device.find("(allowed: (language_model, veomni, cuda) from plugin 'pv'"), std::string::npos) << device;

  EngineRegistry empty;
  EXPECT_NE(message_of([&] { empty.create({"language_model", "fsdp", "cpu"}, {}); }).find("no engine is registered"),
            std::string::npos);
}

TEST(EngineRegistry, EngineHoldsItsLibraryUntilItIsDestroyed) {
  std::atomic<int> live{0};
  bool engine_alive_when_library_released = true;
  std::weak_ptr<const void> library_watch;
  std::shared_ptr<BaseEngine> engine;
  {
    auto library = std::shared_ptr<const void>(new int(0), [&](const void* p) {
      engine_alive_when_library_released = live.load() > 0;
      delete static_cast<const int*>(p);
    });
    library_watch = library;
    EngineRegistry registry;
    registry.register_engine(fake({"language_model", "fsdp", "cpu"}, "p", 1, library, &live));
    engine = registry.create({"language_model", "fsdp", "cpu"}, {});
  }
  EXPECT_EQ(live.load(), 1);
  EXPECT_FALSE(library_watch.expired()) << "registry and its handle are gone; only the engine holds the library";
  engine.reset();
  EXPECT_EQ(live.load(), 0);
  EXPECT_TRUE(library_watch.expired());
  EXPECT_FALSE(engine_alive_when_library_released) << "the library was released before the engine died";
}

// host_api 2.0: a key set beyond what the engine declares never reaches the factory; the error names the key,
// the engine and what it supports. Every knob an engine may leave out is refused by name, one at a time.
TEST(EngineRegistry, RefusesConfigurationTheEngineDoesNotDeclare) {
  EngineRegistry registry;
  std::atomic<int> live{0};
  registry.register_engine(fake({"language_model", "fsdp", "cpu"}, "p1", 1, {}, &live));
  const ConfigSupport declared;  // fake() registers the defaults: no knob beyond them
  for (const ConfigKnob& knob : config_knobs()) {
    EngineArgs args;
    args.world_size = 2;  // at world size 1 every engine.fsdp_size means the whole world
    ASSERT_TRUE(knob.set_unsupported(declared, args)) << knob.key;
    const std::string message = message_of([&] { registry.create({"language_model", "fsdp", "cpu"}, args); });
    const bool option = knob.key == "engine.<backend>";
    EXPECT_NE(message.find(option ? "engine.fsdp.no_such_option is not an option" : knob.key + " = "),
              std::string::npos)
        << message;
    EXPECT_NE(message.find(std::string(option ? "of" : "is not implemented by") +
                           " engine (language_model, fsdp, cpu) of plugin 'p1'"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("(allowed: "), std::string::npos) << message;
    EXPECT_EQ(live.load(), 0) << "the factory ran for " << knob.key;
  }
  // The keys the RL issues make real are among them, each refused by its own name.
  for (const char* key : {"engine.param_offload", "engine.optimizer_offload", "engine.forward_prefetch",
                          "engine.use_dynamic_bsz",
                          "engine.entropy_from_logits_with_chunking", "model.use_remove_padding",
                          "checkpoint.async_save", "engine.model_dtype", "engine.forward_only"}) {
    bool found = false;
    for (const ConfigKnob& knob : config_knobs()) found = found || knob.key == key;
    EXPECT_TRUE(found) << key;
  }
}

TEST(EngineRegistry, DeclaredConfigurationReachesTheFactory) {
  EngineRegistry registry;
  EngineRegistration r = fake({"language_model", "fsdp", "cpu"}, "p1", 1);
  r.traits.config.param_offload = true;
  r.traits.config.param_dtypes.push_back(c10::kHalf);
  registry.register_engine(std::move(r));
  EngineArgs args;
  args.engine.param_offload = true;
  args.engine.mixed_precision.param_dtype = c10::kHalf;
  auto engine = registry.create({"language_model", "fsdp", "cpu"}, args);
  EXPECT_TRUE(engine->args().engine.param_offload);
  args.engine.mixed_precision.reduce_dtype = c10::kBFloat16;
  EXPECT_NE(message_of([&] { registry.create({"language_model", "fsdp", "cpu"}, args); })
                .find("engine.mixed_precision.reduce_dtype = bf16 is not implemented"),
            std::string::npos);
}

// verl reads engine.max_token_len_per_gpu only with use_dynamic_bsz and accepts any value without it (its workers
// send it with every call either way): so does the registry, for an engine with dynamic batch sizes or without.
TEST(EngineRegistry, TokenBudgetWithoutDynamicBatchSizeIsAcceptedAsVerlAcceptsIt) {
  for (const bool dynamic : {true, false}) {
    EngineRegistry registry;
    EngineRegistration r = fake({"language_model", "fsdp", "cpu"}, "p1", 1);
    r.traits.config.dynamic_bsz = dynamic;
    registry.register_engine(std::move(r));
    EngineArgs args;
    args.engine.max_token_len_per_gpu = 128;
    EXPECT_EQ(registry.create({"language_model", "fsdp", "cpu"}, args)->args().engine.max_token_len_per_gpu, 128);
  }
}

// verl's create_device_mesh: an fsdp_size as large as the world or larger shards over the whole world, so an engine
// without HSDP accepts it; a smaller one is HSDP and is refused by name.
TEST(EngineRegistry, FsdpSizeOfTheWorldOrMoreIsWholeWorldSharding) {
  EngineRegistry registry;
  registry.register_engine(fake({"language_model", "fsdp", "cpu"}, "p1", 1));
  EngineArgs args;
  args.world_size = 2;
  for (const int64_t size : {-1, 2, 4, 8}) {
    args.engine.fsdp_size = size;
    EXPECT_EQ(registry.create({"language_model", "fsdp", "cpu"}, args)->args().engine.fsdp_size, size);
  }
  args.engine.fsdp_size = 1;
  EXPECT_NE(message_of([&] { registry.create({"language_model", "fsdp", "cpu"}, args); })
                .find("engine.fsdp_size = 1 is not implemented"),
            std::string::npos);
}

// Hosts hand the batch temperature only to engines that declared it (docs/ARCHITECTURE.md, "One step"): the
// registry tells each engine it creates what its registration declared, and the loop refuses a temperature other
// than 1 to an engine that did not declare it, by name and before any work; one that did gets it.
TEST(EngineRegistry, TheLoopRefusesATemperatureTheEngineDidNotDeclare) {
  EngineRegistry registry;
  for (const bool declared : {false, true}) {
    EngineRegistration r = fake({"language_model", declared ? "warm" : "plain", "cpu"}, "p", 1);
    r.traits.capabilities.temperature = declared;
    registry.register_engine(std::move(r));
  }
  Batch batch;
  batch.set("input_ids", torch::ones({1, 4}, torch::kLong));
  batch.set("attention_mask", torch::ones({1, 4}, torch::kLong));
  auto plain = registry.create("language_model", "plain", "cpu", EngineArgs{});
  auto warm = registry.create("language_model", "warm", "cpu", EngineArgs{});
  EXPECT_NO_THROW(infer_batch(*plain, batch)) << "no temperature";
  batch.set_meta("temperature", 1.0);
  EXPECT_NO_THROW(infer_batch(*plain, batch)) << "temperature 1 is what every engine applies";
  batch.set_meta("temperature", 0.5);
  const std::string refusal = message_of([&] { infer_batch(*plain, batch); });
  EXPECT_EQ(refusal.rfind("batch metadata 'temperature': is 0.500000, but engine fsdp (language_model, cpu) does not "
                          "apply a temperature: its registration does not declare the capability 'temperature'",
                          0),
            0u)
      << refusal;
  EXPECT_NO_THROW(infer_batch(*warm, batch));
  EXPECT_EQ(registry.list()[1].capabilities, (std::vector<std::string>{"precision-cpu-fp32", "temperature"}));
}

}  // namespace
}  // namespace enginery::test
