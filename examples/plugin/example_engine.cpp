// The smallest plugin: one engine class and the entry point. It shows the boundary (what a plugin includes,
// links and exports); it does not train. Real engines: plugin/fsdp, plugin/veomni.
#include <host_api/error.h>
#include <host_api/plugin_api.h>

namespace example {

class ExampleEngine : public enginery::BaseEngine {
 public:
  explicit ExampleEngine(enginery::EngineArgs args) : args_(std::move(args)) {}

  void initialize() override {}
  enginery::BatchOutput forward_backward_batch(const enginery::Batch&, const enginery::LossFn&, bool) override {
    unsupported("forward_backward_batch");
  }
  std::pair<torch::Tensor, enginery::ModelOutput> forward_step(const enginery::Batch&, const enginery::LossFn&,
                                                               const enginery::LossContext&, bool) override {
    unsupported("forward_step");
  }
  void optimizer_zero_grad() override {}
  torch::Tensor optimizer_step() override { return torch::zeros({}); }
  double lr_scheduler_step() override { return args_.optim.lr; }
  void get_per_tensor_param(const std::function<void(const std::string&, const torch::Tensor&)>&) override {}
  void save_checkpoint(const std::string&, int64_t, int64_t) override { unsupported("save_checkpoint"); }
  void load_checkpoint(const std::string&) override { unsupported("load_checkpoint"); }
  void to(const std::string&, bool, bool, bool) override {}
  int64_t get_data_parallel_rank() const override { return args_.rank; }
  int64_t get_data_parallel_size() const override { return args_.world_size; }
  c10::intrusive_ptr<enginery::compat::CommGroup> get_data_parallel_group() const override {
    return args_.world_group;
  }

 private:
  [[noreturn]] static void unsupported(const char* method) {
    throw enginery::EngineryError(std::string(method) + " is not implemented by the example engine",
                                  "plugin 'example_plugin'");
  }

  enginery::EngineArgs args_;
};

void register_engines(enginery::Registrar& registrar) {
  registrar.register_engine({"language_model", "example", "cpu"}, [](const enginery::EngineArgs& args) {
    return std::make_shared<ExampleEngine>(args);
  });
}

}  // namespace example

ENGINERY_DEFINE_PLUGIN("example_plugin", example::register_engines)
