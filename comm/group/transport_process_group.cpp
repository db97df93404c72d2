#include "ringflow/comm/group/transport_process_group.h"

#include <cstring>
#include <vector>

#include "ringflow/comm/algorithms/allreduce.h"
#include "ringflow/comm/algorithms/collectives.h"
#include "ringflow/comm/transport/counting_transport.h"
#include "ringflow/framework/error.h"

namespace ringflow::comm {
namespace {

using Kind = CollectiveKind;

size_t bytes_of(Buffer b) { return static_cast<size_t>(b.count) * dtype_size(b.dtype); }

struct P2pHeader {  // what precedes a send's data, so that the receiver can check the tag
  int64_t tag = 0;
  int64_t count = 0;
};

}  // namespace

TransportProcessGroup::TransportProcessGroup(Bootstrap& bootstrap,
                                             TransportProcessGroupOptions options)
    : QueuedProcessGroup(bootstrap.rank(), bootstrap.size(), options.checking) {
  set_hosts(host_indices(bootstrap.allgather(node_identity())));
  OpenedTransport opened = open_transport(
      bootstrap, host_of(), {.kind = options.shared_memory ? TransportKind::automatic : TransportKind::tcp,
                  .shm = {},
                  .tcp = {.interface = options.socket_interface,
                          .setup_timeout = options.setup_timeout}});
  if (!opened.transport) {
    throw std::runtime_error(
        cat("TransportProcessGroup on rank ", rank(), ": no transport: ", opened.why_not));
  }
  transport_ = std::move(opened.transport);
  transport_name_ = transport_kind_name(opened.kind);
  transport_kind_ = opened.kind;
  transport_->set_waiters(waiters());
  watch_peers(std::make_unique<PeerWatch>(bootstrap, options.socket_interface, options.setup_timeout));
  start();
}

TransportProcessGroup::~TransportProcessGroup() { stop(); }

void TransportProcessGroup::check_device(const char*, const char*, Device) const {
  // The CPU, or any CUDA device: staged through host memory (CudaStaging).
}

Transport& TransportProcessGroup::transport_for(const Op& op) {
  transport_->set_deadline(op.deadline);
  return *transport_;
}

std::shared_ptr<Work> TransportProcessGroup::enqueue_on_transport(Fingerprint fp,
                                                                  const CollectiveOptions& o,
                                                                  std::vector<CollectiveArg> args,
                                                                  Body body) {
  return enqueue_collective(fp, o, std::move(args), [this, body = std::move(body)](Op& op) {
    CountingTransport counted(transport_for(op));
    try {
      body(op, counted);
    } catch (const std::exception& e) {  // named by the collective and its sequence number
      throw CommError(cat(op.work->description(), " failed on rank ", rank(), " (timeout ",
                          op.timeout.count(), " ms): ", e.what()));
    }
    op.work->set_traffic(counted.traffic());
  });
}

std::vector<QueuedProcessGroup::Fingerprint> TransportProcessGroup::exchange_fingerprints(Op& op) {
  const int n = size(), r = rank();
  std::vector<Fingerprint> theirs(n);
  theirs[r] = op.fp;
  Transport& t = transport_for(op);
  for (int k = 1; k < n; ++k) {
    const int from = (r - k + n) % n;
    op.work->set_status(cat("waiting for rank ", from, "'s fingerprint: not yet at this collective"));
    try {
      t.sendrecv(&op.fp, sizeof op.fp, (r + k) % n, &theirs[from], sizeof op.fp, from);
    } catch (const std::exception& e) {
      const std::string reason =
          cat(op.work->description(), " timed out after ", op.timeout.count(), " ms on rank ",
              r, ": rank ", from, " did not arrive (no fingerprint received): ", e.what());
      mark_broken(reason);
      throw CommError(reason);
    }
  }
  return theirs;
}

std::shared_ptr<Work> TransportProcessGroup::do_broadcast(const Tensor& t, const CollectiveOptions& o) {
  const bool root = rank() == o.root;
  return enqueue_on_transport(make_fp(Kind::broadcast, t.dtype(), t.numel(), o), o,
                              {{t, /*in=*/root, /*out=*/!root}},
                              [root = o.root](Op& op, Transport& tr) { broadcast_tree(tr, op.host(0), root); });
}

std::shared_ptr<Work> TransportProcessGroup::do_reduce(const Tensor& t, const CollectiveOptions& o) {
  const bool root = rank() == o.root;
  return enqueue_on_transport(make_fp(Kind::reduce, t.dtype(), t.numel(), o), o,
                              {{t, /*in=*/true, /*out=*/root}}, [o](Op& op, Transport& tr) {
                                reduce_to_root(tr, op.host(0), o.op, o.root);
                              });
}

// Native means the backend's own: ours are all there is.
Algorithm TransportProcessGroup::resolve_allreduce(size_t bytes, Algorithm algo) const {
  return QueuedProcessGroup::resolve_allreduce(
      bytes, algo == Algorithm::native ? Algorithm::automatic : algo);
}

std::shared_ptr<Work> TransportProcessGroup::do_allreduce(const Tensor& t, const CollectiveOptions& o) {
  Fingerprint fp = make_fp(Kind::allreduce, t.dtype(), t.numel(), o);
  const Algorithm algo =
      resolve_allreduce(static_cast<size_t>(t.numel()) * dtype_size(t.dtype()), o.algorithm);
  fp.algorithm = static_cast<int32_t>(algo);
  return enqueue_on_transport(fp, o, {{t, /*in=*/true, /*out=*/true}}, [this, o, algo](Op& op, Transport& tr) {
    run_allreduce(tr, op.host(0), algo, o.op, o.root, &host_of());
  });
}

std::shared_ptr<Work> TransportProcessGroup::do_allgather(const Tensor& out, const Tensor& in,
                                                          const CollectiveOptions& o) {
  return enqueue_on_transport(make_fp(Kind::allgather, in.dtype(), in.numel(), o), o,
                              {{out, /*in=*/false, /*out=*/true}, {in, /*in=*/true, /*out=*/false}},
                              [](Op& op, Transport& tr) { allgather_ring(tr, op.host(0), op.host(1)); });
}

std::shared_ptr<Work> TransportProcessGroup::do_reduce_scatter(const Tensor& out, const Tensor& in,
                                                               const CollectiveOptions& o) {
  return enqueue_on_transport(make_fp(Kind::reduce_scatter, out.dtype(), out.numel(), o), o,
                              {{out, /*in=*/false, /*out=*/true}, {in, /*in=*/true, /*out=*/false}},
                              [o](Op& op, Transport& tr) {
                                reduce_scatter_ring(tr, op.host(0), op.host(1), o.op);
                              });
}

std::shared_ptr<Work> TransportProcessGroup::do_gather(const Tensor& out, const Tensor& in,
                                                       const CollectiveOptions& o) {
  const bool root = rank() == o.root;
  return enqueue_on_transport(
      make_fp(Kind::gather, in.dtype(), in.numel(), o), o,
      {{out, /*in=*/false, /*out=*/root}, {in, /*in=*/true, /*out=*/false}},
      [root = o.root](Op& op, Transport& tr) { gather_to_root(tr, op.host(0), op.host(1), root); });
}

std::shared_ptr<Work> TransportProcessGroup::do_scatter(const Tensor& out, const Tensor& in,
                                                        const CollectiveOptions& o) {
  const bool root = rank() == o.root;
  return enqueue_on_transport(
      make_fp(Kind::scatter, out.dtype(), out.numel(), o), o,
      {{out, /*in=*/false, /*out=*/true}, {in, /*in=*/root, /*out=*/false}},
      [root = o.root](Op& op, Transport& tr) { scatter_from_root(tr, op.host(0), op.host(1), root); });
}

std::shared_ptr<Work> TransportProcessGroup::do_barrier(const CollectiveOptions& o) {
  Fingerprint fp;
  fp.kind = static_cast<int32_t>(Kind::barrier);
  return enqueue_on_transport(fp, o, {}, [](Op&, Transport& tr) { barrier_dissemination(tr); });
}

std::shared_ptr<Work> TransportProcessGroup::do_send(const Tensor& t, int peer, int tag,
                                                     const CollectiveOptions& o) {
  auto op = std::make_shared<Op>();
  op->timeout = o.timeout;
  op->args = {{t, /*in=*/true, /*out=*/false}};
  op->body = [this, peer, tag](Op& op) {
    CountingTransport tr(transport_for(op));
    const Buffer b = op.host(0);
    const P2pHeader header{tag, b.count};
    tr.send(&header, sizeof header, peer);
    tr.send(b.data, bytes_of(b), peer);
    op.work->set_traffic(tr.traffic());
  };
  return enqueue_p2p(std::move(op), [&](int64_t seq) {
    return cat("send #", seq, " to rank ", peer, " (", dtype_name(t.dtype()), ", ", t.numel(),
               " elements, tag ", tag, ")");
  });
}

std::shared_ptr<Work> TransportProcessGroup::do_recv(const Tensor& t, int peer, int tag,
                                                     const CollectiveOptions& o) {
  auto op = std::make_shared<Op>();
  op->timeout = o.timeout;
  op->args = {{t, /*in=*/false, /*out=*/true}};
  op->body = [this, peer, tag](Op& op) {
    CountingTransport tr(transport_for(op));
    const Buffer b = op.host(0);
    P2pHeader header;
    tr.recv(&header, sizeof header, peer);
    if (header.tag != tag || header.count != b.count) {
      throw CommError(cat(op.work->description(), " on rank ", rank(), ": rank ", peer,
                          " sent ", header.count, " elements with tag ", header.tag,
                          "; the sender and receiver must agree"));
    }
    tr.recv(b.data, bytes_of(b), peer);
    op.work->set_traffic(tr.traffic());
  };
  return enqueue_p2p(std::move(op), [&](int64_t seq) {
    return cat("recv #", seq, " from rank ", peer, " (", dtype_name(t.dtype()), ", ", t.numel(),
               " elements, tag ", tag, ")");
  });
}

}  // namespace ringflow::comm
