// ATen entry points that tch 0.24 does not bind (see native.rs for why each
// is needed). A tch `Tensor` wraps a heap `at::Tensor*` (torch-sys's
// `C_tensor`), so results are returned the same way and freed by tch.
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>

#include <exception>
#include <string>

namespace {
thread_local std::string last_error;

at::DeviceType device_type(int cuda) { return cuda ? at::kCUDA : at::kCPU; }
}  // namespace

extern "C" {

const char *tricklab_last_error() { return last_error.c_str(); }

// One elu kernel with alpha, scale 1 and input scale 1/alpha, forward and
// backward (CELU's autograd formula is elu_backward).
at::Tensor *tricklab_celu(const at::Tensor *x, double alpha) {
  try {
    return new at::Tensor(at::celu(*x, alpha));
  } catch (const std::exception &e) {
    last_error = e.what();
    return nullptr;
  }
}

// Enters an autocast region to `half` (0 = fp16, 1 = bf16) on the CPU or
// CUDA and returns whether autocast was on before.
int tricklab_autocast_enter(int cuda, int half) {
  const auto dev = device_type(cuda);
  const bool prev = at::autocast::is_autocast_enabled(dev);
  at::autocast::set_autocast_dtype(dev, half ? at::kBFloat16 : at::kHalf);
  at::autocast::set_autocast_enabled(dev, true);
  at::autocast::increment_nesting();
  return prev ? 1 : 0;
}

// Leaves the region: the cast cache lives as long as the outermost region.
void tricklab_autocast_exit(int cuda, int prev) {
  if (at::autocast::decrement_nesting() == 0) {
    at::autocast::clear_cache();
  }
  at::autocast::set_autocast_enabled(device_type(cuda), prev != 0);
}
}
