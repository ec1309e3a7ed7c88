// One source, several test plugins: compile definitions choose the backend it registers and, for the mismatch
// plugins, which field of PluginInfo lies (TEST_CONTRACT_VERSION, TEST_HEADER_FINGERPRINT, TEST_TORCH_VERSION,
// TEST_CXX11_ABI), or how registration goes wrong (TEST_THROWS, and for the crash probe TEST_SEGFAULT, TEST_ABORT,
// TEST_EXIT, TEST_HANG).
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <stdexcept>

#include "host_api/plugin_api.h"
#include "tests/registry/fake_engine.h"

#ifndef TEST_PLUGIN_NAME
#error "TEST_PLUGIN_NAME must be defined"
#endif

namespace {

#ifdef TEST_SEGFAULT
// Read at run time, so the compiler cannot see the store below goes through a null pointer and turn it into a trap.
volatile std::uintptr_t null_address = 0;
#endif

enginery::EngineTraits traits() {
  enginery::EngineTraits t;
  t.capabilities.multi_rank = true;
  return t;
}

void register_engines(enginery::Registrar& registrar) {
#ifdef TEST_SEGFAULT
  *reinterpret_cast<volatile int*>(null_address) = 1;
#endif
#ifdef TEST_ABORT
  std::abort();
#endif
#ifdef TEST_EXIT
  _exit(3);  // not exit(): the host's static destructors would then run in the probe and could crash first
#endif
#ifdef TEST_HANG
  for (;;) pause();
#endif
#ifdef TEST_THROWS
  throw std::runtime_error("test plugin refuses to register");
#endif
#ifdef TEST_BACKEND
  for (const char* model_type : {"language_model", "value_model"}) {
    registrar.register_engine({model_type, TEST_BACKEND, "cpu"}, [](const enginery::EngineArgs& args) {
      return std::make_shared<enginery::test::FakeEngine>(args, TEST_PLUGIN_ID);
    }, traits());
  }
#else
  (void)registrar;
  (void)traits;
#endif
}

}  // namespace

#if defined(TEST_NO_ENTRY)
// A library that is a valid shared object but not a plugin.
extern "C" __attribute__((visibility("default"))) int enginery_not_a_plugin() { return 1; }
#elif defined(TEST_CONTRACT_VERSION) || defined(TEST_HEADER_FINGERPRINT) || defined(TEST_TORCH_VERSION) || \
    defined(TEST_CXX11_ABI)
#ifndef TEST_CONTRACT_VERSION
#define TEST_CONTRACT_VERSION enginery::kContractVersion
#endif
#ifndef TEST_HEADER_FINGERPRINT
#define TEST_HEADER_FINGERPRINT enginery_header_fingerprint
#endif
#ifndef TEST_TORCH_VERSION
#define TEST_TORCH_VERSION ENGINERY_TORCH_VERSION_STRING
#endif
#ifndef TEST_CXX11_ABI
#define TEST_CXX11_ABI _GLIBCXX_USE_CXX11_ABI
#endif
extern "C" __attribute__((visibility("default"))) const enginery::PluginInfo* enginery_plugin_info() {
  static const enginery::PluginInfo info{TEST_CONTRACT_VERSION, TEST_PLUGIN_NAME, TEST_HEADER_FINGERPRINT,
                                         TEST_TORCH_VERSION,    TEST_CXX11_ABI,   &register_engines};
  return &info;
}
#else
ENGINERY_DEFINE_PLUGIN(TEST_PLUGIN_NAME, register_engines)
#endif
