// Internal to comm/ (not installed): the TCP plumbing that the TCP transport and the TCP
// bootstrap share: addresses, non-blocking connect and listen, and whole-message sends and
// receives, each bounded by a deadline so that a missing peer is an error, never a hang.
#pragma once

#include <netinet/in.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "ringflow/comm/base/fd.h"

namespace ringflow::comm::detail {

using Deadline = std::chrono::steady_clock::time_point;

// "10.0.0.1:29500" (addr and port in network byte order).
std::string endpoint_text(uint32_t addr, uint16_t port);

// The IPv4 address of `interface`; "" for the first that is up and is not loopback,
// docker* or virbr* (as NCCL_SOCKET_IFNAME's default), else loopback. False and *error
// where the named interface has no address.
bool pick_address(const std::string& interface, in_addr* out, std::string* error);

// host: a dotted IPv4 address or a name (getaddrinfo). False and *error where it does
// not resolve.
bool resolve_ipv4(const std::string& host, in_addr* out, std::string* error);

// Milliseconds until deadline for poll(): -1 for none (Deadline::max()), 0 once passed.
int poll_timeout(Deadline deadline);
// Waits for `events` on fd; false once the deadline passes first. A poll() error counts
// as ready: the call that follows reports it.
bool wait_for(int fd, short events, Deadline deadline);

// A non-blocking socket listening on addr:port (port 0: any); *bound gets the address.
// Invalid and *error (naming the address) on failure.
Fd listen_on(in_addr addr, uint16_t port, int backlog, sockaddr_in* bound, std::string* error);
// A non-blocking socket connected to addr:port, or invalid with *err (errno) set.
Fd connect_to(in_addr addr, uint16_t port, Deadline deadline, int* err);
// connect_to, tried again every 20 ms until the deadline: for a listener that may not be up
// yet (rank 0, a store; launchers start processes in no particular order). Calls
// refused(err) after each failed try.
Fd connect_retrying(in_addr addr, uint16_t port, Deadline deadline,
                    const std::function<void(int err)>& refused, int* err);

// All of `bytes` sent or received; "" on success, else what went wrong ("timed out",
// "the connection was closed", strerror).
std::string send_all(int fd, const void* data, size_t bytes, Deadline deadline);
std::string recv_all(int fd, void* data, size_t bytes, Deadline deadline);

}  // namespace ringflow::comm::detail
