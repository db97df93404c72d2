#include "ringflow/kernels/cpu/dnnl_context.h"

#include <mutex>
#include <sstream>
#include <unordered_map>

#include "ringflow/kernels/cpu/allocator.h"
#include "ringflow/kernels/cpu/derived_buffer.h"
#include "ringflow/kernels/derived_cache.h"

namespace ringflow::cpu {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

struct Caches {
  std::mutex mutex;
  std::unordered_map<std::string, CachedPrimitive> primitives;
  DnnlCacheStats stats;
};

Caches& caches() {
  static Caches* c = new Caches;  // never destroyed: kernels may run during static teardown
  return *c;
}

}  // namespace

dnnl::engine& dnnl_engine() {
  static dnnl::engine* e = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *e;
}

dnnl::stream& dnnl_stream() {
  static dnnl::stream* s = new dnnl::stream(dnnl_engine());
  return *s;
}

void throw_dnnl_error(const char* file, int line, const char* call, const std::string& context,
                      const dnnl::error& e) {
  std::ostringstream os;
  os << file << ":" << line << ": " << call << " failed in " << context << ": oneDNN: "
     << e.what() << " (status " << static_cast<int>(e.status) << ")";
  throw std::runtime_error(os.str());
}

KeyBuilder& KeyBuilder::add(const View& v) {
  add(static_cast<int64_t>(v.dtype));
  add(static_cast<int64_t>(v.dim()));
  add(static_cast<int64_t>(v.layout));
  for (int64_t s : v.shape) add(s);
  for (int64_t s : v.strides) add(s);
  return *this;
}

KeyBuilder& KeyBuilder::add_md(const dnnl::memory::desc& md) {
  key_.append(reinterpret_cast<const char*>(&md.data), sizeof md.data);
  return *this;
}

DnnlCacheStats dnnl_cache_stats() {
  Caches& c = caches();
  std::lock_guard lock(c.mutex);
  DnnlCacheStats s = c.stats;
  s.primitives = c.primitives.size();
  s.weight_entries = DerivedCache::live_entries();
  return s;
}

const CachedPrimitive& cached_primitive(const std::string& key,
                                        const std::function<CachedPrimitive()>& make) {
  Caches& c = caches();
  std::lock_guard lock(c.mutex);
  auto it = c.primitives.find(key);
  if (it != c.primitives.end()) return it->second;
  CachedPrimitive p = make();
  ++c.stats.primitive_misses;
  // unordered_map never moves its nodes: the reference stays valid after the lock.
  return c.primitives.emplace(key, std::move(p)).first->second;
}

dnnl::memory::data_type to_dnnl(DType dtype) {
  switch (dtype) {
    case DType::f32: return dt::f32;
    case DType::bf16: return dt::bf16;
    case DType::f16: return dt::f16;
    case DType::i32: return dt::s32;
    default: break;
  }
  throw std::runtime_error(std::string("ringflow cpu: no oneDNN data type for ") +
                           dtype_name(dtype));
}

bool dnnl_supports(DType dtype) { return dtype == DType::f32 || dtype == DType::bf16; }

dnnl::memory::dims dims_of(const View& v) { return dnnl::memory::dims(v.shape.begin(), v.shape.end()); }

dnnl::memory::format_tag layout_of(const View& v) {
  if (v.dim() != 4) return tag::undef;
  if (v.layout == MemoryLayout::nChw16c) return tag::nChw16c;
  if (v.layout == MemoryLayout::nChw8c) return tag::nChw8c;
  if (v.is_channels_last()) return tag::nhwc;
  if (v.is_contiguous()) return tag::nchw;
  return tag::undef;
}

dnnl::memory::desc md_of(const View& v, dnnl::memory::format_tag t) {
  return dnnl::memory::desc(dims_of(v), to_dnnl(v.dtype), t);
}

dnnl::memory::desc md_of(const View& v) {
  if (v.dim() == 4) {
    const tag t = layout_of(v);
    if (t != tag::undef) return md_of(v, t);
  } else if (v.is_contiguous()) {
    static const tag plain[] = {tag::undef, tag::a, tag::ab, tag::abc, tag::abcd, tag::abcde};
    if (v.dim() >= 1 && v.dim() <= 5) return md_of(v, plain[v.dim()]);
  }
  return dnnl::memory::desc(dims_of(v), to_dnnl(v.dtype),
                            dnnl::memory::dims(v.strides.begin(), v.strides.end()));
}

bool onednn_isa_has(dnnl::cpu_isa want) {
  const auto bits = static_cast<unsigned>(want);
  return (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & bits) == bits;
}

ScratchBuffer::ScratchBuffer(size_t nbytes) : ptr_(cpu_allocate(nbytes)), nbytes_(nbytes) {}
ScratchBuffer::~ScratchBuffer() {
  if (ptr_) cpu_deallocate(ptr_, nbytes_);
}

void reorder(const dnnl::memory& src, const dnnl::memory& dst, const char* op, Moved moved) {
  const dnnl::memory::desc smd = src.get_desc(), dmd = dst.get_desc();
  const std::string key = KeyBuilder("reorder").add_md(smd).add_md(dmd).str();
  const CachedPrimitive* p = nullptr;
  RF_CHECK_DNNL(p = &cached_primitive(key, [&] {
                  return CachedPrimitive{dnnl::reorder(src, dst), nullptr};
                }),
                std::string(op) + " (reorder)");
  RF_CHECK_DNNL(p->prim.execute(dnnl_stream(), {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}}),
                std::string(op) + " (reorder)");
  Caches& c = caches();
  std::lock_guard stats_lock(c.mutex);
  ++(moved == Moved::weights ? c.stats.weight_reorders : c.stats.activation_reorders);
}

void move_weights(const View& dst, const View& src, const char* op) {
  reorder(dnnl::memory(md_of(src), dnnl_engine(), src.data),
          dnnl::memory(md_of(dst), dnnl_engine(), dst.data), op, Moved::weights);
}

Operand::Operand(const View& v, const dnnl::memory::desc& want, bool is_input, const char* op,
                 Moved moved)
    : view_(v), op_(op), moved_(moved) {
  const dnnl::memory::desc have = md_of(v);
  if (have == want) {
    mem_ = dnnl::memory(want, dnnl_engine(), v.data);
    return;
  }
  copied_ = true;
  scratch_ = ScratchBuffer(want.get_size());
  mem_ = dnnl::memory(want, dnnl_engine(), scratch_.data());
  user_ = dnnl::memory(have, dnnl_engine(), v.data);
  if (is_input) reorder(user_, mem_, op, moved_);
}

void Operand::finish() {
  if (copied_) reorder(mem_, user_, op_, moved_);
}

WeightOperand::WeightOperand(const View& w, const dnnl::memory::desc& want, const char* op) {
  const dnnl::memory::desc have = md_of(w);
  if (have == want) {
    mem_ = dnnl::memory(want, dnnl_engine(), w.data);
    return;
  }
  const std::string key = KeyBuilder("weights")
                              .add(reinterpret_cast<int64_t>(w.data))
                              .add_md(have)
                              .add_md(want)
                              .str();
  buffer_.emplace(w, key, want.get_size(), [&](void* data) {
    reorder(dnnl::memory(have, dnnl_engine(), w.data), dnnl::memory(want, dnnl_engine(), data), op,
            Moved::weights);
  });
  mem_ = dnnl::memory(want, dnnl_engine(), buffer_->data());
}

const dnnl::memory& WeightOperand::mem() const { return mem_; }

std::string describe(const char* op, std::initializer_list<const View*> views) {
  std::ostringstream os;
  os << op;
  for (const View* v : views) {
    if (!v) continue;
    os << " " << shape_str(v->shape) << ":" << shape_str(v->strides) << " " << dtype_name(v->dtype);
  }
  return os.str();
}

}  // namespace ringflow::cpu
