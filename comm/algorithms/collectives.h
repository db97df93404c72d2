// The collectives other than allreduce, by our own algorithms over a Transport, for the
// process groups that run without MPI (TransportProcessGroup) and for the hierarchical
// allreduce's steps within a host. In place or between host buffers; every rank calls them
// with matching arguments.
#pragma once

#include "ringflow/comm/base/reduce.h"
#include "ringflow/comm/transport/transport.h"

namespace ringflow::comm {

// Down a binomial tree rooted at root: log2(n) steps, every rank receives the bytes once.
void broadcast_tree(Transport& t, Buffer b, int root);
// Every rank's buffer straight to the root, reduced there in rank order (avg: divided once).
void reduce_to_root(Transport& t, Buffer b, ReduceOp op, int root);
// Rank r's block of m = in.count elements lands at out[r * m] on every rank: n-1 steps
// around a ring.
void allgather_ring(Transport& t, Buffer out, Buffer in);
// Block r of the op over every rank's input (n blocks of out.count) lands in out: n-1
// reduce steps around a ring, each sending the block it reduced the step before.
void reduce_scatter_ring(Transport& t, Buffer out, Buffer in, ReduceOp op);
// Rank r's in (m elements) lands at out[r * m] on the root (out unused elsewhere).
void gather_to_root(Transport& t, Buffer out, Buffer in, int root);
// Block r of the root's in (n blocks of out.count) lands in rank r's out.
void scatter_from_root(Transport& t, Buffer out, Buffer in, int root);
// Zero-byte messages to r + 2^k and from r - 2^k: no rank leaves before every rank came.
void barrier_dissemination(Transport& t);

}  // namespace ringflow::comm
