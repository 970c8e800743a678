// ATen entry points that tch 0.24 does not bind (see native.rs for why each
// is needed). A tch `Tensor` wraps a heap `at::Tensor*` (torch-sys's
// `C_tensor`), so results are returned the same way and freed by tch.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <ATen/detail/CUDAHooksInterface.h>

#ifdef TRICKLAB_C10D_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/default_comm_hooks.hpp>
#include <torch/csrc/distributed/c10d/logger.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>
#endif
#ifdef TRICKLAB_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#ifdef TRICKLAB_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/core/Event.h>
#include <c10/cuda/CUDAStream.h>
#endif
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {
thread_local std::string last_error;

at::DeviceType device_type(int cuda) { return cuda ? at::kCUDA : at::kCPU; }

at::Device device(int cuda, int index) {
  return cuda ? at::Device(at::kCUDA, static_cast<at::DeviceIndex>(index))
              : at::Device(at::kCPU);
}

void reseed(at::Generator g, uint64_t seed) {
  std::lock_guard<std::mutex> lock(g.mutex());
  g.set_current_seed(seed);
}

std::vector<at::Tensor> list(const at::Tensor *const *ts, int n) {
  std::vector<at::Tensor> v;
  v.reserve(n);
  for (int i = 0; i < n; ++i) v.push_back(*ts[i]);
  return v;
}

template <typename F>
int status(F f) {
  try {
    f();
    return 1;
  } catch (const std::exception &e) {
    last_error = e.what();
    return 0;
  }
}

template <typename F>
at::Tensor *guarded(F f) {
  try {
    return new at::Tensor(f());
  } catch (const std::exception &e) {
    last_error = e.what();
    return nullptr;
  }
}
}  // namespace

extern "C" {

const char *tricklab_last_error() { return last_error.c_str(); }

// One elu kernel with alpha, scale 1 and input scale 1/alpha, forward and
// backward (CELU's autograd formula is elu_backward).
at::Tensor *tricklab_celu(const at::Tensor *x, double alpha) {
  return guarded([&] { return at::celu(*x, alpha); });
}

// Page-locked host memory for a non-blocking copy to the GPU. tch binds only
// the form with a device argument, which libtorch 2.11 deprecates with a
// warning on every call (one per batch of a streaming run).
at::Tensor *tricklab_pin_memory(const at::Tensor *x) {
  return guarded([&] { return x->pin_memory(); });
}

// A generator of the run's own (tch binds only the process-wide defaults,
// which every worker thread would share).
at::Generator *tricklab_generator_new(int cuda, int index, uint64_t seed) {
  try {
    at::Generator g =
        cuda ? at::detail::getCUDAHooks().getNewGenerator(
                   static_cast<at::DeviceIndex>(index))
             : at::detail::createCPUGenerator(seed);
    reseed(g, seed);
    return new at::Generator(std::move(g));
  } catch (const std::exception &e) {
    last_error = e.what();
    return nullptr;
  }
}

void tricklab_generator_free(at::Generator *g) { delete g; }

at::Tensor *tricklab_randperm(at::Generator *g, int64_t n, int cuda,
                              int index) {
  return guarded([&] {
    return at::randperm(n, *g, at::TensorOptions(at::kLong).device(device(cuda, index)));
  });
}

at::Tensor *tricklab_randint(at::Generator *g, int64_t high,
                             const int64_t *shape, int ndim, int cuda,
                             int index) {
  return guarded([&] {
    return at::randint(high, at::IntArrayRef(shape, ndim), *g,
                       at::TensorOptions(at::kLong).device(device(cuda, index)));
  });
}

at::Tensor *tricklab_rand(at::Generator *g, const int64_t *shape, int ndim,
                          int cuda, int index) {
  return guarded([&] {
    return at::rand(at::IntArrayRef(shape, ndim), *g,
                    at::TensorOptions(at::kFloat).device(device(cuda, index)));
  });
}

// Seeds the default generators that parameter inits draw from: the CPU's and
// this device's (not every device's, as torch.manual_seed does, which would
// reseed other workers' GPUs mid-run).
int tricklab_seed_defaults(int cuda, int index, uint64_t seed) {
  try {
    reseed(at::detail::getDefaultCPUGenerator(), seed);
    if (cuda) {
      reseed(at::detail::getCUDAHooks().getDefaultGenerator(
                 static_cast<at::DeviceIndex>(index)),
             seed);
    }
    return 1;
  } catch (const std::exception &e) {
    last_error = e.what();
    return 0;
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

// PyTorch's SGD (coupled weight decay, momentum, Nesterov) over a list of
// parameters of one device and type in one fused kernel, as torch.optim.SGD
// with fused=True runs it: buf = g + wd w on the first step, else
// mu buf + (g + wd w); w -= lr (g + wd w + mu buf) (Nesterov) or lr buf.
int tricklab_fused_sgd(const at::Tensor *const *params,
                       const at::Tensor *const *grads,
                       const at::Tensor *const *bufs, int n, double wd,
                       double momentum, double lr, int nesterov, int first) {
  return status([&] {
    at::_fused_sgd_(list(params, n), list(grads, n),
                    momentum != 0.0 ? list(bufs, n) : std::vector<at::Tensor>{},
                    wd, momentum, lr, 0.0, nesterov != 0, false, first != 0);
  });
}

// Page's Nesterov form (CF:tb `nesterov_update`) with multi-tensor kernels:
// dw = -lr (g + wd w); v = mu v + dw; w += dw + mu v.
int tricklab_page_sgd(const at::Tensor *const *params,
                      const at::Tensor *const *grads,
                      const at::Tensor *const *bufs, int n, double wd,
                      double momentum, double lr) {
  return status([&] {
    auto w = list(params, n);
    auto v = list(bufs, n);
    auto dw = wd != 0.0 ? at::_foreach_add(list(grads, n), w, wd)
                        : at::_foreach_mul(list(grads, n), 1.0);
    at::_foreach_mul_(dw, -lr);
    at::_foreach_mul_(v, momentum);
    at::_foreach_add_(v, dw);
    at::_foreach_add_(dw, v, momentum);
    at::_foreach_add_(w, dw);
  });
}

// Drops the gradients (PyTorch's zero_grad(set_to_none=True)): no fill
// kernel, and the next backward writes fresh gradients instead of adding.
void tricklab_grads_to_none(const at::Tensor *const *ts, int n) {
  for (int i = 0; i < n; ++i) {
    const_cast<at::Tensor *>(ts[i])->mutable_grad().reset();
  }
}

// c10d: the TCPStore rendezvous and the process groups of PyTorch's own
// distributed engine (libtorch_cpu exports Gloo's, libtorch_cuda NCCL's).
// Handles are heap intrusive_ptrs; every call turns an exception into 0 or
// nullptr with the message in tricklab_last_error().

// Which collectives this binary was built with: "gloo", "gloo,nccl" or "".
const char *tricklab_collectives() {
  return ""
#ifdef TRICKLAB_C10D_GLOO
         "gloo"
#endif
#if defined(TRICKLAB_C10D_GLOO) && defined(TRICKLAB_C10D_NCCL)
         ","
#endif
#ifdef TRICKLAB_C10D_NCCL
         "nccl"
#endif
      ;
}

using StorePtr = c10::intrusive_ptr<c10d::Store>;
using GroupPtr = c10::intrusive_ptr<c10d::Backend>;

// Rank 0 serves the store and waits (up to the timeout) for the others;
// under torchrun's agent store every rank is a client, its keys under
// `prefix` (torch's env:// rendezvous wraps it in the same PrefixStore).
StorePtr *tricklab_store_new(const char *host, int port, int is_server,
                             int world, int64_t timeout_ms,
                             const char *prefix) {
  try {
    c10d::TCPStoreOptions o;
    o.port = static_cast<std::uint16_t>(port);
    o.isServer = is_server != 0;
    o.numWorkers = static_cast<std::size_t>(world);
    o.waitWorkers = true;
    o.timeout = std::chrono::milliseconds(timeout_ms);
    StorePtr tcp = c10::make_intrusive<c10d::TCPStore>(host, o);
    if (prefix && *prefix) {
      return new StorePtr(c10::make_intrusive<c10d::PrefixStore>(prefix, tcp));
    }
    return new StorePtr(tcp);
  } catch (const std::exception &e) {
    last_error = e.what();
    return nullptr;
  }
}

void tricklab_store_free(StorePtr *s) { delete s; }

int tricklab_store_set(StorePtr *s, const char *key, const char *value,
                       int64_t len) {
  return status([&] {
    std::vector<uint8_t> v(value, value + len);
    (*s)->set(key, v);
  });
}

// The value under `key`, waiting up to the store's timeout; malloc'ed, freed
// by tricklab_buf_free.
char *tricklab_store_get(StorePtr *s, const char *key, int64_t *len) {
  try {
    auto v = (*s)->get(key);
    char *out = static_cast<char *>(std::malloc(v.size() + 1));
    if (!v.empty()) std::memcpy(out, v.data(), v.size());
    *len = static_cast<int64_t>(v.size());
    return out;
  } catch (const std::exception &e) {
    last_error = e.what();
    return nullptr;
  }
}

// Whether `key` is in the store now, without waiting: 1 yes, 0 no, -1 the
// store did not answer (last_error says why).
int tricklab_store_check(StorePtr *s, const char *key) {
  try {
    return (*s)->check({std::string(key)}) ? 1 : 0;
  } catch (const std::exception &e) {
    last_error = e.what();
    return -1;
  }
}

void tricklab_buf_free(char *b) { std::free(b); }

// A process group of `size` ranks over the store: NCCL (nccl != 0, CUDA
// tensors) or Gloo (CPU tensors). `iface`: the network interface Gloo binds
// ("" = this host's name, or the loopback when `loopback`).
GroupPtr *tricklab_pg_new(StorePtr *s, int nccl, int rank, int size,
                          int64_t timeout_ms, const char *iface,
                          int loopback) {
  try {
    const auto timeout = std::chrono::milliseconds(timeout_ms);
    if (nccl) {
#ifdef TRICKLAB_C10D_NCCL
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = timeout;
      return new GroupPtr(
          c10::make_intrusive<c10d::ProcessGroupNCCL>(*s, rank, size, opts));
#else
      throw std::runtime_error(
          "this binary was built without NCCL (no CUDA headers at build "
          "time): rebuild with them (docs/gpu.md) or run on the CPU");
#endif
    }
#ifdef TRICKLAB_C10D_GLOO
    auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
    if (iface && *iface) {
      opts->devices.push_back(
          c10d::ProcessGroupGloo::createDeviceForInterface(iface));
    } else if (loopback) {
      opts->devices.push_back(
          c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    } else {
      opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
    return new GroupPtr(
        c10::make_intrusive<c10d::ProcessGroupGloo>(*s, rank, size, opts));
#else
    throw std::runtime_error(
        "this binary was built without Gloo (no gloo headers at build time): "
        "install libgloo-dev (scripts/system-deps.sh) and rebuild");
#endif
  } catch (const std::exception &e) {
    last_error = e.what();
    return nullptr;
  }
}

void tricklab_pg_free(GroupPtr *g) { delete g; }

// Sums each tensor across the ranks, in place, and waits for it (on a GPU
// the wait orders the current stream after NCCL's; the host goes on).
int tricklab_pg_allreduce(GroupPtr *g, const at::Tensor *const *ts, int n) {
  return status([&] {
    auto v = list(ts, n);
    (*g)->allreduce(v)->wait();
  });
}

int tricklab_pg_broadcast(GroupPtr *g, const at::Tensor *const *ts, int n,
                          int root) {
  return status([&] {
    auto v = list(ts, n);
    c10d::BroadcastOptions o;
    o.rootRank = root;
    (*g)->broadcast(v, o)->wait();
  });
}

int tricklab_pg_barrier(GroupPtr *g) {
  return status([&] { (*g)->barrier()->wait(); });
}
}

// Synchronised BatchNorm (torch.nn.SyncBatchNorm's arithmetic, over any
// c10d group): the batch statistics are summed over every rank's share in
// forward, and so are the two sums BN's input gradient needs in backward,
// so N ranks normalise and differentiate as one process over the whole
// batch. Generic ATen ops: runs wherever the group's tensors live (Gloo on
// the CPU, NCCL on GPUs). Statistics in float32, as cuDNN keeps them.
namespace {
std::vector<int64_t> reduce_dims(const at::Tensor &x) {
  std::vector<int64_t> d{0};
  for (int64_t i = 2; i < x.dim(); ++i) d.push_back(i);
  return d;
}

std::vector<int64_t> channel_shape(const at::Tensor &x) {
  std::vector<int64_t> s(x.dim(), 1);
  s[1] = x.size(1);
  return s;
}

void allreduce_one(GroupPtr *g, at::Tensor &t) {
  std::vector<at::Tensor> v{t};
  (*g)->allreduce(v)->wait();
}

struct SyncBn : public torch::autograd::Function<SyncBn> {
  static at::Tensor forward(torch::autograd::AutogradContext *ctx,
                            const at::Tensor &x, const at::Tensor &weight,
                            const at::Tensor &bias, at::Tensor running_mean,
                            at::Tensor running_var, double momentum,
                            double eps, int64_t group) {
    auto *g = reinterpret_cast<GroupPtr *>(group);
    const auto dims = reduce_dims(x);
    const auto shape = channel_shape(x);
    const int64_t c = x.size(1);
    auto xf = x.to(at::kFloat);
    const double local = static_cast<double>(x.numel() / c);
    // Each rank's count, mean and (biased) variance in its own row, summed
    // into every rank's table (an all-gather through all-reduce), then
    // combined by the parallel-variance formula (Chan et al. 1979, as
    // torch's batch_norm_gather_stats_with_counts): no E[x²] − E[x]²
    // cancellation.
    auto [var_r, mean_r] = at::var_mean(xf, dims, /*correction=*/0, false);
    auto rows = at::zeros({(*g)->getSize(), 2 * c + 1}, xf.options());
    rows[(*g)->getRank()].copy_(
        at::cat({mean_r, var_r, at::full({1}, local, xf.options())}));
    allreduce_one(g, rows);
    auto counts = rows.narrow(1, 2 * c, 1);
    auto count = counts.sum();
    auto means = rows.narrow(1, 0, c);
    auto mean = (means * counts).sum(0) / count;
    auto var =
        ((rows.narrow(1, c, c) + (means - mean).pow(2)) * counts).sum(0) /
        count;
    auto invstd = (var + eps).rsqrt();
    {
      at::NoGradGuard no_grad;
      running_mean.mul_(1 - momentum).add_(mean, momentum);
      running_var.mul_(1 - momentum)
          .add_(var * count / (count - 1).clamp_min(1), momentum);
    }
    auto xhat = (xf - mean.view(shape)) * invstd.view(shape);
    ctx->save_for_backward({xhat, invstd, weight, count});
    ctx->saved_data["group"] = group;
    auto y = weight.defined() ? xhat * weight.view(shape) : xhat;
    if (bias.defined()) y = y + bias.view(shape);
    return y.to(x.scalar_type());
  }

  static torch::autograd::variable_list backward(
      torch::autograd::AutogradContext *ctx,
      torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto xhat = saved[0], invstd = saved[1], weight = saved[2],
         count = saved[3];
    auto *g = reinterpret_cast<GroupPtr *>(ctx->saved_data["group"].toInt());
    auto dy = grads[0].to(at::kFloat);
    const auto dims = reduce_dims(dy);
    const auto shape = channel_shape(dy);
    const int64_t c = dy.size(1);
    // This rank's parameter gradients (DDP averages them with the rest).
    auto db = dy.sum(dims);
    auto dw = (dy * xhat).sum(dims);
    auto sums = at::cat({db, dw});
    allreduce_one(g, sums);
    auto mean_dy = sums.narrow(0, 0, c) / count;
    auto mean_dy_xhat = sums.narrow(0, c, c) / count;
    auto scale = weight.defined() ? weight * invstd : invstd;
    auto dx = (dy - mean_dy.view(shape) - xhat * mean_dy_xhat.view(shape)) *
              scale.view(shape);
    return {dx.to(grads[0].scalar_type()),
            weight.defined() ? dw : at::Tensor(), db, at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};
}  // namespace

extern "C" {
// y = SyncBN(x) over `g`'s ranks; `weight` may be null (a frozen scale of 1).
at::Tensor *tricklab_sync_batch_norm(GroupPtr *g, const at::Tensor *x,
                                     const at::Tensor *weight,
                                     const at::Tensor *bias,
                                     const at::Tensor *running_mean,
                                     const at::Tensor *running_var,
                                     double momentum, double eps) {
  return guarded([&] {
    return SyncBn::apply(*x, weight ? *weight : at::Tensor(), *bias,
                         *running_mean, *running_var, momentum, eps,
                         reinterpret_cast<int64_t>(g));
  });
}
}

// PyTorch's own DDP engine (issue 50): c10d::Reducer, driven as
// torch/nn/parallel/distributed.py drives it. Its constructor registers
// hooks on the parameters' gradient accumulators, so each bucket's
// all-reduce starts as soon as the backward has filled it (overlapped with
// the rest of the backward), and the autograd engine's final callback waits
// for them and writes the averaged gradients back. Built with Gloo's
// headers only (the Reducer and its process group are in libtorch_cpu).
#ifdef TRICKLAB_C10D_GLOO
namespace {
// A bf16 compression hook: what torch's Python bf16_compress_hook does (cast
// the bucket, sum, divide by the ranks, cast back), which has no built-in
// C++ form (DDP's built-in C++ hook is fp16's).
class Bf16CompressHook
    : public c10d::CppCommHookInterface<c10::intrusive_ptr<c10d::ProcessGroup>> {
 public:
  explicit Bf16CompressHook(const c10::intrusive_ptr<c10d::ProcessGroup> &pg)
      : c10d::CppCommHookInterface<c10::intrusive_ptr<c10d::ProcessGroup>>(pg) {}

  c10::intrusive_ptr<c10::ivalue::Future> runHook(c10d::GradBucket &bucket) override {
    auto compressed = bucket.getBufferRef().to(at::kBFloat16);
    compressed.div_(state_->getSize());
    std::vector<at::Tensor> v{compressed};
    auto fut = state_->allreduce(v)->getFuture();
    auto out = bucket.getBufferRef();
    return fut->then(
        [out](c10::ivalue::Future &f) {
          auto reduced = f.value().toTensorVector()[0];
          out.copy_(reduced);
          return c10::IValue(out);
        },
        fut->elementType());
  }
};
}  // namespace

extern "C" {
struct tricklab_ddp {
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
  std::shared_ptr<c10d::Reducer> reducer;
  // DDP's own runtime statistics (its Logger's sampled iterations: the
  // first ten, then one in a hundred): backward compute, all-reduce, and
  // the all-reduce time that ran under the backward.
  std::shared_ptr<c10d::Logger> logger;
  // Backwards armed, and those whose times the logger has taken (once each).
  int64_t armed = 0, logged = 0;

  void log_last() {
    if (armed > logged) {
      logger->set_runtime_stats_and_log();
      logged = armed;
    }
  }
};

// A Reducer over `g`'s ranks for `params` (every trainable tensor, in the
// net's order), as DistributedDataParallel builds one: the params checked
// against rank 0's, buckets assigned over the reversed order with a first
// bucket of `first_cap` bytes and `cap` after it, `grad_view` for
// gradient_as_bucket_view, and `hook` 0 (all-reduce and average), 1 (fp16
// compression, DDP's built-in) or 2 (bf16 compression).
void *tricklab_ddp_new(GroupPtr *g, int cuda, const at::Tensor *const *params, int n,
                       int64_t first_cap, int64_t cap, int grad_view, int hook) {
  try {
    auto backend = *g;
    auto pg = c10::make_intrusive<c10d::ProcessGroup>(backend->getRank(),
                                                      backend->getSize());
    auto type = cuda ? c10d::ProcessGroup::BackendType::NCCL
                     : c10d::ProcessGroup::BackendType::GLOO;
    pg->setBackend(cuda ? at::kCUDA : at::kCPU, type, backend);
    pg->setDefaultBackend(type);
    auto ps = list(params, n);
    c10d::verify_params_across_processes(pg, ps, std::nullopt);
    std::vector<size_t> limits{static_cast<size_t>(first_cap),
                               static_cast<size_t>(cap)};
    std::vector<bool> sparse(ps.size(), false);
    auto [indices, per_bucket] =
        c10d::compute_bucket_assignment_by_size(ps, limits, sparse);
    // distributed.py hands them over in reverse: the last layers' gradients
    // are ready first.
    std::reverse(indices.begin(), indices.end());
    std::reverse(per_bucket.begin(), per_bucket.end());
    std::vector<int64_t> caps(per_bucket.begin(), per_bucket.end());
    auto d = new tricklab_ddp{pg, nullptr, nullptr, 0, 0};
    d->reducer = std::make_shared<c10d::Reducer>(
        ps, indices, pg, sparse, cap, /*find_unused_parameters=*/false,
        grad_view != 0, std::unordered_map<size_t, std::string>{}, first_cap,
        /*skip_all_reduce_unused_params=*/false, /*use_python_reducer=*/false,
        caps);
    if (hook == 1) {
      d->reducer->register_builtin_comm_hook(c10d::BuiltinCommHookType::FP16_COMPRESS);
    } else if (hook == 2) {
      d->reducer->register_comm_hook(std::make_unique<Bf16CompressHook>(pg));
    }
    d->logger = std::make_shared<c10d::Logger>(d->reducer);
    d->reducer->set_logger(d->logger);
    return d;
  } catch (const std::exception &e) {
    last_error = e.what();
    return nullptr;
  }
}

// Before the backward whose gradients are to be reduced (DDP's forward):
// the buckets rebuilt in the order the first backward filled them (once,
// as DDP's _rebuild_buckets), then the reducer armed for this backward.
// Backwards without it (accumulation's micro-batches, DDP's no_sync) leave
// the gradients local.
int tricklab_ddp_prepare(void *d) {
  return status([&] {
    auto *ddp = static_cast<tricklab_ddp *>(d);
    auto &r = *ddp->reducer;
    // The last reduced backward's times, where it was a sampled one (as
    // distributed.py's _pre_forward records them).
    ddp->log_last();
    r.rebuild_buckets();
    r.prepare_for_forward();
    r.prepare_for_backward({});
    ddp->armed++;
  });
}

// DDP's averages over its sampled backwards, in nanoseconds: compute,
// all-reduce, and the all-reduce that overlapped the compute (-1 where it
// has none yet).
int tricklab_ddp_stats(void *d, int64_t *compute_ns, int64_t *comm_ns,
                       int64_t *overlap_ns) {
  return status([&] {
    auto *ddp = static_cast<tricklab_ddp *>(d);
    ddp->log_last();
    auto data = ddp->logger->get_ddp_logging_data();
    auto get = [&](const char *k) {
      auto it = data.ints_map.find(k);
      return it == data.ints_map.end() ? int64_t{-1} : it->second;
    };
    *compute_ns = get("avg_backward_compute_time");
    *comm_ns = get("avg_backward_comm_time");
    *overlap_ns = get("avg_backward_compute_comm_overlap_time");
  });
}

// The buckets and their sizes in bytes, as "n:b1,b2,...": what `doctor` and
// the tests read of the assignment.
char *tricklab_ddp_buckets(void *d) {
  try {
    auto &r = *static_cast<tricklab_ddp *>(d)->reducer;
    std::string out;
    for (auto b : r.get_grad_buckets(/*return_zero_tensors=*/true)) {
      if (!out.empty()) out += ",";
      out += std::to_string(b.getBufferRef().numel() *
                            b.getBufferRef().element_size());
    }
    char *buf = static_cast<char *>(std::malloc(out.size() + 1));
    std::memcpy(buf, out.c_str(), out.size() + 1);
    return buf;
  } catch (const std::exception &e) {
    last_error = e.what();
    return nullptr;
  }
}

void tricklab_ddp_free(void *d) {
  try {
    delete static_cast<tricklab_ddp *>(d);
  } catch (const std::exception &e) {
    // ~Reducer may throw (it is noexcept(false)); nothing to hand it to.
    last_error = e.what();
  }
}
}
#endif

// CUDA graphs (issue 48): the training step captured once and replayed.
// Everything goes through c10's and ATen's exported CUDA API (streams,
// events through the device guard, at::cuda::CUDAGraph), so the binary
// names no CUDA runtime library of its own. A build without the CUDA
// headers answers "no CUDA graphs in this build" to every call.
extern "C" {
#ifdef TRICKLAB_CUDA
struct tricklab_side {
  c10::cuda::CUDAStream prev;
  c10::cuda::CUDAStream side;
};

int tricklab_cuda_graphs_built() { return 1; }

// A stream of the pool made current on device `index`, after it waits for
// the current one (capture refuses the default stream, and PyTorch warms
// up a captured region on the same side stream first).
void *tricklab_side_stream_enter(int index) {
  try {
    auto dev = static_cast<c10::DeviceIndex>(index);
    auto prev = c10::cuda::getCurrentCUDAStream(dev);
    auto side = c10::cuda::getStreamFromPool(false, dev);
    c10::Event ev(c10::DeviceType::CUDA);
    ev.record(prev.unwrap());
    ev.block(side.unwrap());
    c10::cuda::setCurrentCUDAStream(side);
    return new tricklab_side{prev, side};
  } catch (const std::exception &e) {
    last_error = e.what();
    return nullptr;
  }
}

// The previous stream made current again, waiting for the side stream's work.
int tricklab_side_stream_exit(void *h) {
  auto *s = static_cast<tricklab_side *>(h);
  int ok = status([&] {
    c10::Event ev(c10::DeviceType::CUDA);
    ev.record(s->side.unwrap());
    ev.block(s->prev.unwrap());
    c10::cuda::setCurrentCUDAStream(s->prev);
  });
  delete s;
  return ok;
}

// One memory pool that every graph of a run shares (each phase's graph
// allocates from it, and only one replays at a time).
void *tricklab_graph_pool_new() {
  try {
    return new c10::MempoolId_t(at::cuda::graph_pool_handle());
  } catch (const std::exception &e) {
    last_error = e.what();
    return nullptr;
  }
}

void tricklab_graph_pool_free(void *p) {
  delete static_cast<c10::MempoolId_t *>(p);
}

void *tricklab_graph_new() {
  try {
    return new at::cuda::CUDAGraph();
  } catch (const std::exception &e) {
    last_error = e.what();
    return nullptr;
  }
}

void tricklab_graph_free(void *g) { delete static_cast<at::cuda::CUDAGraph *>(g); }

// Thread-local capture: another worker's thread (one process may train
// on several GPUs) keeps allocating while this one captures.
int tricklab_graph_capture_begin(void *g, void *pool) {
  return status([&] {
    static_cast<at::cuda::CUDAGraph *>(g)->capture_begin(
        *static_cast<c10::MempoolId_t *>(pool),
        cudaStreamCaptureModeThreadLocal);
  });
}

int tricklab_graph_capture_end(void *g) {
  return status([&] { static_cast<at::cuda::CUDAGraph *>(g)->capture_end(); });
}

int tricklab_graph_replay(void *g) {
  return status([&] { static_cast<at::cuda::CUDAGraph *>(g)->replay(); });
}
// A timing event on CUDA device `index` (c10::Event with the backend's
// default flags, which time), recorded on that device's current stream.
void *tricklab_event_new(int index) {
  try {
    (void)index;
    return new c10::Event(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
  } catch (const std::exception &e) {
    last_error = e.what();
    return nullptr;
  }
}

int tricklab_event_record(void *ev, int index) {
  return status([&] {
    auto stream = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(index));
    static_cast<c10::Event *>(ev)->record(stream.unwrap());
  });
}

// Milliseconds from `a` to `b`, both recorded and complete; -1 on error.
double tricklab_event_elapsed_ms(void *a, void *b) {
  try {
    return static_cast<c10::Event *>(a)->elapsedTime(*static_cast<c10::Event *>(b));
  } catch (const std::exception &e) {
    last_error = e.what();
    return -1.0;
  }
}

void tricklab_event_free(void *ev) { delete static_cast<c10::Event *>(ev); }
#else
int tricklab_cuda_graphs_built() { return 0; }
void *tricklab_event_new(int) {
  last_error = "no CUDA events in this build (no CUDA headers at build time)";
  return nullptr;
}
int tricklab_event_record(void *, int) { return 0; }
double tricklab_event_elapsed_ms(void *, void *) { return -1.0; }
void tricklab_event_free(void *) {}
void *tricklab_side_stream_enter(int) {
  last_error = "no CUDA graphs in this build (no CUDA headers at build time)";
  return nullptr;
}
int tricklab_side_stream_exit(void *) { return 0; }
void *tricklab_graph_pool_new() {
  last_error = "no CUDA graphs in this build (no CUDA headers at build time)";
  return nullptr;
}
void tricklab_graph_pool_free(void *) {}
void *tricklab_graph_new() {
  last_error = "no CUDA graphs in this build (no CUDA headers at build time)";
  return nullptr;
}
void tricklab_graph_free(void *) {}
int tricklab_graph_capture_begin(void *, void *) { return 0; }
int tricklab_graph_capture_end(void *) { return 0; }
int tricklab_graph_replay(void *) { return 0; }
#endif
}
