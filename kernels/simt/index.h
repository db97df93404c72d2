// gather and scatter_add along one dim with an i64 index (torch.gather / Tensor.scatter_add_),
// one thread per index element. A kernel cannot throw: an index out of range reads as NaN
// (0 for integers) in gather and is skipped by scatter_add. scatter_add adds atomically, in
// the output's dtype, in whatever order the threads run.
#pragma once

#include "ringflow/kernels/backend.h"
#include "ringflow/kernels/simt/check.h"
#include "ringflow/kernels/simt/indexer.h"
#include "ringflow/kernels/simt/simt.h"

namespace ringflow::simt {

template <class T>
struct GatherBody {
  T* out;
  const int64_t* index;
  const T* in;
  Indexer<3> ix;  // (out, index, in with dim's stride 0)
  int64_t size, stride;  // in's size and stride along dim

  RF_HD void operator()(int64_t k) const {
    int64_t off[3];
    ix.offsets(k, off);
    const int64_t i = index[off[1]];
    out[off[0]] = (i >= 0 && i < size) ? in[off[2] + i * stride] : store<T>(quiet_nan<acc_t<T>>());
  }
};

template <class T>
struct ScatterAddBody {
  T* out;
  const int64_t* index;
  const T* src;
  Indexer<3> ix;  // (index, src, out with dim's stride 0)
  int64_t size, stride;  // out's size and stride along dim

  RF_HD void operator()(int64_t k) const {
    int64_t off[3];
    ix.offsets(k, off);
    const int64_t i = index[off[0]];
    if (i >= 0 && i < size) atomic_add(out + off[2] + i * stride, load(src[off[1]]));
  }
};

// PyTorch's rule: index.size(d) <= t.size(d) for every d != dim.
inline void check_index(const View& index, const View& t, int64_t dim, const char* op) {
  check(index.dtype == DType::i64, op, "index must be i64");
  check(index.dim() == t.dim(), op, "index and tensor ranks differ");
  check(dim >= 0 && dim < t.dim(), op, "dim " + std::to_string(dim) + " out of range");
  for (int d = 0; d < t.dim(); ++d)
    check(d == dim || index.shape[d] <= t.shape[d], op,
          "index " + shape_str(index.shape) + " larger than " + shape_str(t.shape));
}

// t restricted to index's shape, with dim's stride 0: the index value supplies that coordinate.
inline View along_index(const View& t, const View& index, int64_t dim) {
  View v = t;
  v.shape = index.shape;
  v.strides[dim] = 0;
  return v;
}

template <class Exec>
void gather(const Exec& exec, const View& out, const View& in, int64_t dim, const View& index) {
  check_same_shape(out, index, "gather");
  check_index(index, in, dim, "gather");
  check_same_dtype(out, in, "gather");
  if (out.numel() == 0) return;
  const View src = along_index(in, index, dim);
  const Indexer<3> ix = make_indexer<3>({&out, &index, &src}, "gather");
  visit_dtype(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    exec.elementwise(ix.numel, GatherBody<T>{out.ptr<T>(), index.ptr<const int64_t>(),
                                             in.ptr<const T>(), ix, in.shape[dim],
                                             in.strides[dim]});
  });
}

template <class Exec>
void scatter_add(const Exec& exec, const View& out, int64_t dim, const View& index,
                 const View& src) {
  check_index(index, out, dim, "scatter_add");
  check_index(index, src, dim, "scatter_add");
  check_same_dtype(out, src, "scatter_add");
  for (int d = 0; d < src.dim(); ++d)
    check(index.shape[d] <= src.shape[d], "scatter_add", "index larger than src");
  if (index.numel() == 0) return;
  View from = src;
  from.shape = index.shape;
  const View to = along_index(out, index, dim);
  const Indexer<3> ix = make_indexer<3>({&index, &from, &to}, "scatter_add");
  visit_dtype(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    exec.elementwise(ix.numel, ScatterAddBody<T>{out.ptr<T>(), index.ptr<const int64_t>(),
                                                 src.ptr<const T>(), ix, out.shape[dim],
                                                 out.strides[dim]});
  });
}

template <class Exec>
void set_index_kernels(Backend& b) {
  b.gather = [](const View& out, const View& in, int64_t dim, const View& index) {
    gather(Exec{}, out, in, dim, index);
  };
  b.scatter_add = [](const View& out, int64_t dim, const View& index, const View& src) {
    scatter_add(Exec{}, out, dim, index, src);
  };
}

}  // namespace ringflow::simt
