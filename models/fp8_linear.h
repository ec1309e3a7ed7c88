#pragma once
// FP8 matmuls for training (`[engine.<backend>] fp8 = "tensorwise"`; docs/ARCHITECTURE.md, "FP8 matmuls").
#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace enginery {
namespace models {

// How the decoder layers' projections multiply ([engine.<backend>] fp8).
enum class Fp8Recipe {
  kOff,         // "off": bf16 GEMMs
  kTensorwise,  // "tensorwise": each operand's scale from its amax, measured right before its cast (one more pass)
  kDelayed,     // "delayed": each operand's scale from the largest amax of its last kAmaxHistory casts, which record
                // it in the cast's own pass (no separate reduction); the first cast measures it as "tensorwise"
};
constexpr int64_t kAmaxHistory = 16;

// The amaxes the casts of one operand recorded (delayed scaling). On the operand's device once used; never saved.
struct Fp8AmaxHistory {
  torch::Tensor amax;        // fp32 [kAmaxHistory]; undefined until a cast recorded into it
  int64_t next = 0;          // the slot the next cast records into
  torch::Tensor last_scale;  // the scale of the last recording cast
};

// How a cast uses its operand's history.
enum class Fp8HistoryUse {
  kRecord,  // scale from the history, this cast's amax recorded: a training forward, every backward cast
  kRead,    // scale from the history, nothing recorded: an eval forward (the training forward after it, e.g. on the
            // same RL batch, then scales alike)
  kReplay,  // the last recording cast's scale, nothing recorded: a recomputed forward (activation checkpointing)
            // repeats the forward it stands for
};
// One call site of fp8_linears (a layer's q/k/v group, its o projection, ...): its input, each weight and each
// output gradient.
struct Fp8SiteHistory {
  Fp8AmaxHistory input;
  std::vector<Fp8AmaxHistory> weights, grads;
};

// y_i = x @ w_i^T + b_i for linears that share their input (q/k/v, gate/up): x is quantized to float8 e4m3 once,
// each weight too, with one scale per tensor (amax maps to the format's largest value), and each GEMM runs in FP8
// with fp32 accumulation, its output in the autocast dtype (else x's). Backward quantizes each output gradient to
// e5m2 and computes both the input and the weight gradients with FP8 GEMMs. Saves x in FP8 (one byte per element,
// shared by the group) and the weights by reference, as aten's linear does. The master weights, the optimizer and
// everything outside these GEMMs keep their dtypes. Where fp8_linears_apply is false (a CPU tensor, a LibTorch
// without _scaled_mm, a dimension not a multiple of 16) the layers run as they are.
// `delayed` (the site's histories, kept by the caller for as long as the graph lives): delayed scaling, the forward
// casts using them as `use` says (the backward's always record); nullptr: tensor-wise.
bool fp8_linears_apply(const torch::Tensor& x, const std::vector<torch::nn::Linear>& layers);
std::vector<torch::Tensor> fp8_linears(const torch::Tensor& x, const std::vector<torch::nn::Linear>& layers,
                                       Fp8SiteHistory* delayed = nullptr,
                                       Fp8HistoryUse use = Fp8HistoryUse::kRecord);

// The tensor-wise quantization of a matrix x [R, C]: data * inv_scale approximates x. A GEMM operand is needed in
// one of two layouts (row-major, or column-major = the transpose stored row-major), so both can be produced from
// the one pass over x (enginery's CUDA kernel; the ATen composition elsewhere). Exposed for the tests.
struct Fp8Tensor {
  torch::Tensor data;       // float8 (e4m3 or e5m2) [R, C], when asked for
  torch::Tensor data_t;     // the same values transposed, [C, R] contiguous, when asked for
  torch::Tensor inv_scale;  // float32, one element
};
// With `history` (enginery's kernel only: a contiguous CUDA matrix) the scale comes from the history once it has a
// recorded amax (or, kReplay, is its last recording cast's), and a kRecord cast records x's amax into it.
Fp8Tensor quantize_tensorwise(const torch::Tensor& x, c10::ScalarType float8_type, bool row_major = true,
                              bool transposed = false, Fp8AmaxHistory* history = nullptr,
                              Fp8HistoryUse use = Fp8HistoryUse::kRecord);

}  // namespace models
}  // namespace enginery
