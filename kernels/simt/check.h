// Argument checks shared by the SIMT kernels' launchers: they throw std::invalid_argument
// "cuda <op>: <what>", as the reference kernels do for "reference <op>".
#pragma once

#include <stdexcept>
#include <string>

#include "ringflow/kernels/simt/simt.h"
#include "ringflow/kernels/view.h"

namespace ringflow::simt {

inline void check(bool ok, const char* op, const std::string& what) {
  if (!ok) throw std::invalid_argument(std::string("cuda ") + op + ": " + what);
}
inline void check_same_shape(const View& a, const View& b, const char* op) {
  check(a.shape == b.shape, op, "shape mismatch " + shape_str(a.shape) + " vs " +
                                    shape_str(b.shape));
}
inline void check_same_dtype(const View& a, const View& b, const char* op) {
  check(a.dtype == b.dtype, op, std::string("dtype mismatch ") + dtype_name(a.dtype) + " vs " +
                                    dtype_name(b.dtype));
}
inline void check_floating(const View& v, const char* op) {
  check(is_floating(v.dtype), op, std::string("needs a floating dtype, got ") +
                                      dtype_name(v.dtype));
}
inline void check_rank(const View& v, int rank, const char* op) {
  check(v.dim() == rank, op, "expected a " + std::to_string(rank) + "-D tensor, got " +
                                 shape_str(v.shape));
}

// Calls fn(T{}) with the stored type of a floating dtype; throws naming the op otherwise.
template <class Fn>
void visit_floating(DType dtype, const char* op, Fn&& fn) {
  check(is_floating(dtype), op, std::string("needs a floating dtype, got ") + dtype_name(dtype));
  visit_dtype(dtype, [&](auto tag) {
    if constexpr (is_float_v<acc_t<decltype(tag)>>) fn(tag);
  });
}

}  // namespace ringflow::simt
