// gather and scatter_add along one dim with an i64 index (torch.gather / Tensor.scatter_add_).
// The index has the iteration shape; in/src/out are addressed with the index's position in
// every dim except `dim`, where the index value is used instead.
#include <vector>

#include "ringflow/kernels/reference/reference_kernels.h"
#include "ringflow/kernels/reference/strided.h"

namespace ringflow::reference {

// Checks PyTorch's rule: index.size(d) <= t.size(d) for every d != dim.
static void check_index(const View& index, const View& t, int64_t dim, const char* op) {
  check(index.dtype == DType::i64, op, "index must be i64");
  check(index.dim() == t.dim(), op, "index and tensor ranks differ");
  check(dim >= 0 && dim < t.dim(), op, "dim " + std::to_string(dim) + " out of range");
  for (int d = 0; d < t.dim(); ++d) {
    check(d == dim || index.shape[d] <= t.shape[d], op,
          "index " + shape_str(index.shape) + " larger than " + shape_str(t.shape));
  }
}

void gather(const View& out, const View& in, int64_t dim, const View& index) {
  check_same_shape(out, index, "gather");
  check_index(index, in, dim, "gather");
  // in's strides with dim zeroed: the index value supplies that coordinate.
  Shape in_strides = in.strides;
  in_strides[dim] = 0;
  const bool ints = !is_floating(out.dtype);
  strided::for_each_offset(out.shape, [&](const auto& o) {
    const int64_t i = strided::load_i64(index, o[1]);
    check(i >= 0 && i < in.shape[dim], "gather", "index " + std::to_string(i) +
                                                     " out of range for size " +
                                                     std::to_string(in.shape[dim]));
    const int64_t src = o[2] + i * in.strides[dim];
    if (ints) strided::store_i64(out, o[0], strided::load_i64(in, src));
    else strided::store_f64(out, o[0], strided::load_f64(in, src));
  }, out.strides, index.strides, in_strides);
}

void scatter_add(const View& out, int64_t dim, const View& index, const View& src) {
  check_index(index, out, dim, "scatter_add");
  check_index(index, src, dim, "scatter_add");
  for (int d = 0; d < src.dim(); ++d) {
    check(index.shape[d] <= src.shape[d], "scatter_add", "index larger than src");
  }
  // Sum every contribution into a double (int64) copy of out, then round once: the
  // result does not depend on the order of duplicates, even for f16.
  const Shape scratch = contiguous_strides(out.shape);
  Shape scratch_no_dim = scratch;
  scratch_no_dim[dim] = 0;
  const bool ints = !is_floating(out.dtype);
  const int64_t n = out.numel();
  std::vector<double> acc(ints ? 0 : n);
  std::vector<int64_t> acc_i(ints ? n : 0);
  strided::for_each_offset(out.shape, [&](const auto& o) {
    if (ints) acc_i[o[1]] = strided::load_i64(out, o[0]);
    else acc[o[1]] = strided::load_f64(out, o[0]);
  }, out.strides, scratch);
  strided::for_each_offset(index.shape, [&](const auto& o) {
    const int64_t i = strided::load_i64(index, o[0]);
    check(i >= 0 && i < out.shape[dim], "scatter_add", "index " + std::to_string(i) +
                                                           " out of range for size " +
                                                           std::to_string(out.shape[dim]));
    const int64_t dst = o[2] + i * scratch[dim];
    if (ints) acc_i[dst] += strided::load_i64(src, o[1]);
    else acc[dst] += strided::load_f64(src, o[1]);
  }, index.strides, src.strides, scratch_no_dim);
  strided::for_each_offset(out.shape, [&](const auto& o) {
    if (ints) strided::store_i64(out, o[0], acc_i[o[1]]);
    else strided::store_f64(out, o[0], acc[o[1]]);
  }, out.strides, scratch);
}

}  // namespace ringflow::reference
