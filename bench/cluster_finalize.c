// Preloaded into every rank by bench/cluster (compiled there, at run time, with cc): works
// around a deadlock in MPI_Finalize of MPICH 4.0-4.1 over UCX's TCP transport.
//
// Note [MPICH finalize deadlock]: MPICH's ch4/ucx finalize calls ucp_disconnect_nb() on
// the endpoint of every rank, progresses UCX until all of those requests complete, then
// waits in a PMI barrier without progressing UCX. Closing an endpoint that carried
// traffic needs the peer's answer over TCP, so a rank already in the barrier can leave
// a peer waiting forever: under bench/cluster with 4 hosts most runs of a program whose
// ranks exchanged messages hung, 2 hosts never did (docs/emulated-cluster.md). MPICH 4.2
// removed that barrier (pmodels/mpich pull request 6596).
//
// Here ucp_disconnect_nb() returns "done" without closing anything: the endpoints are
// then destroyed with the worker by ucp_worker_destroy(), after the barrier, when every
// rank has finished its MPI communication (MPI_Finalize requires it) and nothing of the
// program's data is left in flight. With it, the same 4-host runs finished.
// libmpich imports no other endpoint-closing function of UCX, so nothing else changes.
#include <ucp/api/ucp.h>

ucs_status_ptr_t ucp_disconnect_nb(ucp_ep_h ep) {
  (void)ep;
  return UCS_STATUS_PTR(UCS_OK);
}
