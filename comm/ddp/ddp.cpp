#include "ringflow/comm/ddp/ddp.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <unordered_set>

#include "ringflow/framework/autograd.h"
#include "ringflow/framework/ops.h"

namespace ringflow::comm {
namespace {

using Clock = std::chrono::steady_clock;

CollectiveOptions with_timeout(Timeout timeout, int root = 0) {
  CollectiveOptions o;
  o.root = root;
  o.timeout = timeout;
  return o;
}

std::vector<std::string> split_lines(const char* data, size_t bytes) {
  std::vector<std::string> lines;
  std::string line;
  for (size_t i = 0; i < bytes && data[i] != '\0'; ++i) {
    if (data[i] == '\n') {
      lines.push_back(std::move(line));
      line.clear();
    } else {
      line += data[i];
    }
  }
  return lines;
}

std::string describe(const std::string& kind, const std::string& name, const Tensor& t) {
  std::string s = cat(kind, " ", name, " ", dtype_name(t.dtype()), " ", shape_str(t.shape()));
  if (kind == "parameter" && !t.requires_grad()) s += " (requires_grad false)";
  return s;
}

// The device of the module's tensors: its first parameter's (the CPU without any).
Device device_of(nn::Module& module) {
  const std::vector<Tensor> params = module.parameters();
  return params.empty() ? Device::cpu() : params.front().device();
}

}  // namespace

// Two allgathers: the lengths, then the lists packed into i64 words (the process group moves
// no bytes type). Every rank then holds every list and builds the same message.
void verify_same_across_ranks(ProcessGroup& pg, const std::vector<std::string>& entries,
                              const std::string& what, Timeout timeout, Device device) {
  const int n = pg.size();
  if (n == 1) return;
  std::string mine;
  for (const std::string& e : entries) {
    RF_CHECK(e.find('\n') == std::string::npos && e.find('\0') == std::string::npos,
             "verify_same_across_ranks: an entry holds a newline or NUL: ", e);
    mine += e;
    mine += '\n';
  }
  const CollectiveOptions o = with_timeout(timeout);
  Tensor length = full({1}, static_cast<double>(mine.size()), DType::i64, device);
  Tensor lengths = zeros({n}, DType::i64, device);
  pg.allgather(lengths, length, o)->wait();
  lengths = lengths.to(Device::cpu());
  const int64_t* len = lengths.data<int64_t>();
  const int64_t longest = *std::max_element(len, len + n);
  const int64_t words = (longest + 7) / 8;
  Tensor packed = zeros({words}, DType::i64);
  std::memcpy(packed.raw_data(), mine.data(), mine.size());
  packed = packed.to(device);
  Tensor all = zeros({n * words}, DType::i64, device);
  pg.allgather(all, packed, o)->wait();
  all = all.to(Device::cpu());

  std::vector<std::vector<std::string>> lists(n);
  const auto* bytes = static_cast<const char*>(all.raw_data());
  for (int q = 0; q < n; ++q) {
    lists[q] = split_lines(bytes + q * words * 8, static_cast<size_t>(len[q]));
  }
  std::vector<int> differing;
  size_t first = SIZE_MAX;  // the first entry at which some rank differs from rank 0
  for (int q = 1; q < n; ++q) {
    if (lists[q] == lists[0]) continue;
    differing.push_back(q);
    size_t k = 0;
    while (k < lists[0].size() && k < lists[q].size() && lists[0][k] == lists[q][k]) ++k;
    first = std::min(first, k);
  }
  if (differing.empty()) return;
  auto entry = [&](int q) {
    return first < lists[q].size()
               ? cat("'", lists[q][first], "'")
               : cat("nothing (", lists[q].size(), " entries in all)");
  };
  std::string msg = cat(what, ": they differ at entry #", first, ": rank 0 has ", entry(0));
  for (int q : differing) {
    const bool differs_here = first >= lists[q].size() || first >= lists[0].size() ||
                              lists[q][first] != lists[0][first];
    if (differs_here) msg += cat(", rank ", q, " has ", entry(q));
  }
  msg += "; the ranks that differ from rank 0:";
  for (int q : differing) msg += cat(" ", q);
  throw std::invalid_argument(msg);
}

Traffic broadcast_coalesced(ProcessGroup& pg, const std::vector<Tensor>& tensors, int root,
                            Timeout timeout, Traffic* model) {
  Traffic total;
  if (pg.size() == 1) return total;
  std::map<DType, std::vector<Tensor>> by_dtype;  // ordered: the same collectives everywhere
  for (const Tensor& t : tensors) {
    if (t.numel() > 0) by_dtype[t.dtype()].push_back(t);
  }
  NoGradGuard no_grad;  // copies into parameters
  struct Flat {
    Tensor buffer;
    const std::vector<Tensor>* members;
    std::shared_ptr<Work> work;
  };
  std::vector<Flat> flats;
  for (const auto& [dtype, members] : by_dtype) {
    int64_t count = 0;
    for (const Tensor& t : members) count += t.numel();
    Tensor buffer = empty({count}, dtype, members.front().device());
    if (pg.rank() == root) {
      int64_t offset = 0;
      for (const Tensor& t : members) {
        buffer.narrow(0, offset, t.numel()).view(t.shape()).copy_(t);
        offset += t.numel();
      }
    }
    flats.push_back({buffer, &members, pg.broadcast(buffer, with_timeout(timeout, root))});
    if (model) {
      *model += broadcast_traffic(count * static_cast<int64_t>(dtype_size(dtype)), pg.size(),
                                  pg.rank(), root);
    }
  }
  for (Flat& f : flats) {
    f.work->wait();
    total += f.work->traffic();
    if (pg.rank() == root) continue;
    int64_t offset = 0;
    for (const Tensor& t : *f.members) {
      Tensor dst = t;  // a handle to the same tensor
      dst.copy_(f.buffer.narrow(0, offset, t.numel()).view(t.shape()));
      offset += t.numel();
    }
  }
  return total;
}

Traffic DdpStats::traffic() const {
  Traffic t = backward.traffic;
  t += broadcast.traffic;
  return t;
}

double DdpStats::overlap() const {
  const double total = comm_ms();
  if (total <= 0) return 0;
  return std::clamp(1.0 - exposed_ms() / total, 0.0, 1.0);
}

DistributedDataParallel::DistributedDataParallel(nn::ModulePtr module,
                                                 std::shared_ptr<ProcessGroup> pg,
                                                 DdpOptions options)
    : module_(std::move(module)), pg_(std::move(pg)), options_(std::move(options)) {
  RF_CHECK(module_, "DistributedDataParallel: null module");
  RF_CHECK(pg_, "DistributedDataParallel: null process group");
  verify_same_model();
  broadcast_state();
  std::vector<Tensor> params;
  std::unordered_set<const TensorImpl*> seen;  // a tied weight is synchronised once
  for (const auto& [name, p] : module_->named_parameters()) {
    if (!p.requires_grad() || !seen.insert(p.impl()).second) continue;
    params.push_back(p);
    names_.push_back(name);
  }
  ReducerOptions r;
  r.bucket_cap_mb = options_.bucket_cap_mb;
  r.first_bucket_cap_mb = options_.first_bucket_cap_mb;
  r.tune_bucket_caps = options_.tune_bucket_caps;
  r.tuner = options_.bucket_tuner;
  r.rebuild_buckets = options_.rebuild_buckets;
  r.find_unused_parameters = options_.find_unused_parameters;
  r.algorithm = options_.algorithm;
  r.timeout = options_.timeout;
  r.comm_hook = options_.comm_hook;
  reducer_ = Reducer::create(std::move(params), names_, pg_, std::move(r));
}

void DistributedDataParallel::verify_same_model() {
  std::vector<std::string> entries;
  for (const auto& [name, p] : module_->named_parameters()) entries.push_back(describe("parameter", name, p));
  for (const auto& [name, b] : module_->named_buffers()) entries.push_back(describe("buffer", name, b));
  verify_same_across_ranks(*pg_, entries,
                           cat("DistributedDataParallel: the model (", module_->type_name(),
                               ") is not the same on every rank of the ", pg_->size()),
                           options_.timeout, device_of(*module_));
}

void DistributedDataParallel::broadcast_state() {
  std::vector<Tensor> state = module_->parameters();
  for (const Tensor& b : module_->buffers()) state.push_back(b);
  broadcast_coalesced(*pg_, state, /*root=*/0, options_.timeout);
}

void DistributedDataParallel::broadcast_buffers() {
  const std::vector<Tensor> buffers = module_->buffers();
  if (buffers.empty() || pg_->size() == 1) return;
  // One event for the coalesced broadcast (a collective per dtype), waited for as a whole.
  broadcast_.collective = "broadcast";
  broadcast_.launched = broadcast_.ready = broadcast_.started = Clock::now();
  for (const Tensor& b : buffers) broadcast_.bytes += b.numel() * static_cast<int64_t>(dtype_size(b.dtype()));
  broadcast_.traffic =
      broadcast_coalesced(*pg_, buffers, /*root=*/0, options_.timeout, &broadcast_.model);
  broadcast_.finished = Clock::now();
}

Tensor DistributedDataParallel::forward(const Tensor& x) {
  // Evaluation is local: rank 0 alone may run it without the others.
  if (!module_->is_training() || !grad_mode_enabled()) return module_->forward(x);
  broadcast_ = CommEvent();
  broadcast_.name = "buffers";
  if (options_.broadcast_buffers) broadcast_buffers();
  return reducer_->prepare_for_backward(module_->forward(x), require_sync_);
}

void DistributedDataParallel::register_comm_hook(std::shared_ptr<CommHook> hook) {
  reducer_->set_comm_hook(std::move(hook));
}

DdpStats DistributedDataParallel::stats() const {
  return {reducer_->stats(), broadcast_};
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_parameter_names() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& bucket : reducer_->bucket_assignment()) {
    out.emplace_back();
    for (size_t i : bucket) out.back().push_back(names_[i]);
  }
  return out;
}

}  // namespace ringflow::comm
