// Ranks as threads of one process meeting over loopback TCP (bootstrap_test, tcp_store_test):
// a port for their rendezvous, and run_ranks, which gives each rank's error text.
#pragma once

#include <doctest/doctest.h>
#include <netinet/in.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ringflow/comm/base/socket.h"

namespace ringflow {

// A port nobody listens on now (the kernel's pick, released at once: another process may
// take it before the test binds it again, a race the tests accept).
inline int free_port() {
  std::string error;
  sockaddr_in bound{};
  comm::Fd fd = comm::detail::listen_on(in_addr{htonl(INADDR_LOOPBACK)}, 0, 1, &bound, &error);
  REQUIRE_MESSAGE(fd, error);
  return ntohs(bound.sin_port);
}

// Runs body(rank) on `size` threads; the error text of each rank ("" when it returned).
inline std::vector<std::string> run_ranks(int size, const std::function<void(int)>& body) {
  std::vector<std::string> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace ringflow
