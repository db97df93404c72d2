// The one oneDNN engine and stream of the process, the primitive cache and the reordered
// weights of the CPU backend, and the helpers every oneDNN-backed kernel shares.
// Only kernels/cpu/ includes this header (all oneDNN calls live in kernels/cpu/).
//
// Threading: the primitive cache is guarded by one mutex, each reordered weight buffer by
// its own; primitives are executed outside them (oneDNN CPU primitives may run concurrently
// on one stream).
//
// Note [primitive cache]: a primitive is built once per key (op, every operand's dims,
// strides and dtype, and the op's attributes) and kept for the process. Keys are byte
// strings built with KeyBuilder; creating a primitive costs orders of magnitude more than
// a lookup (docs/kernels.md).
//
// Note [weight cache]: conv weights are reordered into the layout the primitive prefers
// at most once per (data pointer, user layout, target layout) and View::version, into a
// buffer kept in the View's DerivedCache, which dies with the weights' Storage; a new
// version overwrites the same buffer in place. Buffers come from the caching allocator, so
// the 16-bit weights autocast casts anew every step reuse warm memory. Such a weight holds
// its forward layout until backward has used it too (one more 16-bit copy at the peak; with
// the Winograd convolutions, two transformed copies of 16/9 its size). DerivedBuffer
// (derived_buffer.h) keeps each such buffer.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include <oneapi/dnnl/dnnl.hpp>

#include "ringflow/kernels/cpu/derived_buffer.h"
#include "ringflow/kernels/view.h"

namespace ringflow::cpu {

dnnl::engine& dnnl_engine();
// Whether the ISA oneDNN runs (the CPU's, or below where ONEDNN_MAX_CPU_ISA holds it) includes
// `want`. The ISA values are bit sets (AVX2_VNNI's is larger than AMX's), so this tests bits,
// not order.
bool onednn_isa_has(dnnl::cpu_isa want);
dnnl::stream& dnnl_stream();

// Throws std::runtime_error("file:line: CALL failed in OP: oneDNN message (status)").
[[noreturn]] void throw_dnnl_error(const char* file, int line, const char* call,
                                   const std::string& context, const dnnl::error& e);

// Runs `expr`, turning a dnnl::error into std::runtime_error with the op's context.
#define RF_CHECK_DNNL(expr, context)                                              \
  do {                                                                            \
    try {                                                                         \
      expr;                                                                       \
    } catch (const dnnl::error& rf_dnnl_e_) {                                     \
      ::ringflow::cpu::throw_dnnl_error(__FILE__, __LINE__, #expr, (context), rf_dnnl_e_); \
    }                                                                             \
  } while (0)

// Cache statistics, for tests (a repeated call must not build a new primitive).
struct DnnlCacheStats {
  size_t primitives = 0;        // primitives held
  size_t primitive_misses = 0;  // primitives built since start
  size_t weight_entries = 0;    // reordered weight buffers held (by live Storages)
  size_t weight_reorders = 0;   // weight (and weight-gradient) reorders run since start
  size_t activation_reorders = 0;  // reorders of everything else run since start: activations,
                                   // their gradients, layout conversions (copy)
};
DnnlCacheStats dnnl_cache_stats();

// Builds a cache key from integers and strings.
class KeyBuilder {
 public:
  explicit KeyBuilder(const char* op) { add(op); }
  KeyBuilder& add(int64_t v) {
    key_.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  KeyBuilder& add(const char* s) {
    key_.append(s);
    key_.push_back('\0');
    return *this;
  }
  KeyBuilder& add(const View& v);  // dtype, shape, strides
  KeyBuilder& add_md(const dnnl::memory::desc& md);
  const std::string& str() const { return key_; }

 private:
  std::string key_;
};

// A cached primitive; `aux` holds the op's typed primitive_desc(s) and whatever else it
// needs (e.g. the forward pd used as a hint by backward).
struct CachedPrimitive {
  dnnl::primitive prim;
  std::shared_ptr<void> aux;
  template <class T> T& get() const { return *static_cast<T*>(aux.get()); }
};

// Returns the primitive for `key`, calling make() (under the cache lock) on a miss.
const CachedPrimitive& cached_primitive(const std::string& key,
                                        const std::function<CachedPrimitive()>& make);

dnnl::memory::data_type to_dnnl(DType dtype);
bool dnnl_supports(DType dtype);  // f32, bf16 (what the backend sends to oneDNN)

// A memory desc for a View: format_tag nhwc/nchw when the View is dense in that layout
// (so oneDNN recognises it), its strides otherwise. Size-1 dims and zero strides are
// left to oneDNN, which may reject them (callers catch that and fall back).
dnnl::memory::desc md_of(const View& v);
dnnl::memory::desc md_of(const View& v, dnnl::memory::format_tag tag);
dnnl::memory::dims dims_of(const View& v);

// MemoryLayout tag for a 4-D activation: its blocked layout's tag (nChw8c, nChw16c) when blocked,
// nhwc when channels-last, nchw when contiguous, undef otherwise.
dnnl::memory::format_tag layout_of(const View& v);

// Host memory for scratch copies, from the caching allocator; freed on destruction.
class ScratchBuffer {
 public:
  ScratchBuffer() = default;
  explicit ScratchBuffer(size_t nbytes);
  ~ScratchBuffer();
  ScratchBuffer(ScratchBuffer&& o) noexcept : ptr_(o.ptr_), nbytes_(o.nbytes_) {
    o.ptr_ = nullptr;
    o.nbytes_ = 0;
  }
  ScratchBuffer& operator=(ScratchBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(nbytes_, o.nbytes_);
    return *this;
  }
  void* data() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
  size_t nbytes_ = 0;
};

// What a reorder moves, for the counts in DnnlCacheStats.
enum class Moved { activation, weights };

// An activation operand in a required layout: the View's own memory when it already has
// that layout, else a scratch copy (reordered in for inputs; written back by finish()
// for outputs). A weight gradient is one too, counted as weights.
class Operand {
 public:
  Operand(const View& v, const dnnl::memory::desc& want, bool is_input, const char* op,
          Moved moved = Moved::activation);
  Operand(const Operand&) = delete;
  Operand& operator=(const Operand&) = delete;
  const dnnl::memory& mem() const { return mem_; }
  void finish();  // outputs: copy the scratch back into the View (no-op when direct)

 private:
  View view_;
  dnnl::memory mem_;
  dnnl::memory user_;
  ScratchBuffer scratch_;
  const char* op_;
  Moved moved_;
  bool copied_ = false;
};

// dst_md <- src (a reorder primitive from the cache), counted as `moved`.
void reorder(const dnnl::memory& src, const dnnl::memory& dst, const char* op, Moved moved);

// dst = src laid out otherwise, for weights and their gradients (counted as weight reorders,
// not as the activation reorders a copy counts). Both views dnnl_friendly.
void move_weights(const View& dst, const View& src, const char* op);

// Weights in the layout `want`, reordered at most once per version (Note [weight cache]).
class WeightOperand {
 public:
  WeightOperand(const View& w, const dnnl::memory::desc& want, const char* op);
  WeightOperand(const WeightOperand&) = delete;
  WeightOperand& operator=(const WeightOperand&) = delete;
  const dnnl::memory& mem() const;

 private:
  std::optional<DerivedBuffer> buffer_;  // empty when the View is used as it is
  dnnl::memory mem_;
};

// Context for error messages: "conv2d_forward x (1, 3, 5, 5) f32 ..."
std::string describe(const char* op, std::initializer_list<const View*> views);

}  // namespace ringflow::cpu
