// TcpStoreClient (comm/bootstrap/tcp_store_client.h) against PyTorch's own TCPStore server,
// which tests/tcp_store_test.py starts and names in RINGFLOW_TCPSTORE (host:port), after
// setting keys through torch's client that these cases read; it then reads through torch's
// client what these cases set. Also TcpBootstrap meeting through that store, ranks as
// threads. Without RINGFLOW_TCPSTORE every case is skipped, saying why.
#include <doctest/doctest.h>
#include <netinet/in.h>

#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ringflow/comm/base/socket.h"
#include "ringflow/comm/bootstrap/tcp_bootstrap.h"
#include "ringflow/comm/bootstrap/tcp_store_client.h"
#include "ringflow/tests/skip_listener.h"
#include "ringflow/tests/loopback_ranks.h"

using namespace ringflow::comm;
using ringflow::free_port;
using ringflow::run_ranks;
using std::chrono::milliseconds;

namespace {

struct Server {
  std::string host;
  int port = 0;
  std::string dialect;  // what the script expects from torch's version: torch1, torch2 or any
};

const Server& server() {
  static const Server s = [] {
    Server out;
    const char* address = std::getenv("RINGFLOW_TCPSTORE");
    const char* dialect = std::getenv("RINGFLOW_TCPSTORE_DIALECT");
    if (!address) return out;
    const std::string text = address;
    out.host = text.substr(0, text.rfind(':'));
    out.port = std::stoi(text.substr(text.rfind(':') + 1));
    out.dialect = dialect ? dialect : "";
    return out;
  }();
  return s;
}

const bool kNoServer = server().port == 0;

struct NoServerWhy {
  std::string operator()(const std::string&) const {
    return "RINGFLOW_TCPSTORE is not set: tests/tcp_store_test.py runs this with a PyTorch "
           "TCPStore server";
  }
};
DOCTEST_REGISTER_LISTENER("tcp_store_skip_reason", 1, ringflow::SkipReasonListener<NoServerWhy>);

TcpStoreOptions options(int timeout_ms = 10000) {
  return {.host = server().host, .port = server().port, .timeout = milliseconds(timeout_ms)};
}

}  // namespace

TEST_SUITE_BEGIN("tcp_store" * doctest::skip(kNoServer));

TEST_CASE("TcpStoreClient: learns the dialect that the server's PyTorch version speaks") {
  TcpStoreClient store(options());
  const std::string dialect = store.dialect() == TcpStoreDialect::torch1 ? "torch1" : "torch2";
  CHECK((dialect == server().dialect || server().dialect == "any"));
}

TEST_CASE("TcpStoreClient: set and get bytes of any kind; reads what torch's client set") {
  TcpStoreClient store(options());
  const std::string value("set by ringflow\0\xff", 17);
  store.set("cpp/value", value);
  CHECK(store.get("cpp/value") == value);
  store.set("cpp/empty", "");
  CHECK(store.get("cpp/empty").empty());
  CHECK(store.get("py/greeting") == "set by torch");
  CHECK(store.check({"py/greeting", "cpp/value"}));
  CHECK_FALSE(store.check({"py/greeting", "cpp/never"}));
}

TEST_CASE("TcpStoreClient: add counts on from what torch's client added") {
  TcpStoreClient store(options());
  CHECK(store.add("py/counter", 3) == 5 + 3);  // the script added 5
  CHECK(store.add("cpp/counter", -2) == -2);
  CHECK(store.add("cpp/counter", 7) == 5);
  CHECK(store.get("cpp/counter") == "5");  // kept as text, as torch's server keeps it
}

TEST_CASE("TcpStoreClient: get waits for a key that another client sets later") {
  TcpStoreClient store(options());
  std::thread later([] {
    std::this_thread::sleep_for(milliseconds(300));
    TcpStoreClient(options()).set("cpp/later", "arrived");
  });
  CHECK(store.get("cpp/later") == "arrived");
  later.join();
}

TEST_CASE("TcpStoreClient: a wait that times out names the key and the store; the client goes on") {
  std::vector<std::string> waiting;
  TcpStoreOptions o = options();
  o.on_waiting = [&](const std::string& what) { waiting.push_back(what); };
  TcpStoreClient store(o);
  const std::string address = server().host + ":" + std::to_string(server().port);
  const std::string expected =
      "TCPStore at " + address + ": wait for key(s) cpp/never: timed out after 1500 ms";
  CHECK_THROWS_WITH_AS(store.wait({"cpp/never"}, milliseconds(1500)),
                       doctest::Contains(expected.c_str()), std::runtime_error);
  REQUIRE_FALSE(waiting.empty());
  CHECK(waiting.back() == "key(s) cpp/never in the TCPStore at " + address);
  store.set("cpp/after", "still usable");
  CHECK(store.get("cpp/after") == "still usable");
}

TEST_CASE("TcpStoreClient: no store at the address, or not a store, is named at the timeout") {
  const int port = free_port();
  std::vector<std::string> waiting;
  TcpStoreOptions o{.host = "127.0.0.1", .port = port, .timeout = milliseconds(500),
                    .on_waiting = [&](const std::string& what) { waiting.push_back(what); }};
  const std::string expected = "TCPStore at 127.0.0.1:" + std::to_string(port) +
                               ": connecting: nothing accepted a connection within 500 ms: "
                               "Connection refused";
  CHECK_THROWS_WITH_AS(TcpStoreClient{o}, doctest::Contains(expected.c_str()), std::runtime_error);
  REQUIRE_FALSE(waiting.empty());
  CHECK(waiting.back().find("to accept connections (Connection refused)") != std::string::npos);

  // A listener that never answers (the kernel accepts for it).
  std::string error;
  sockaddr_in bound{};
  Fd silent = detail::listen_on(in_addr{htonl(INADDR_LOOPBACK)}, 0, 4, &bound, &error);
  REQUIRE_MESSAGE(silent, error);
  o.port = ntohs(bound.sin_port);
  CHECK_THROWS_WITH_AS(TcpStoreClient{o}, doctest::Contains("is it a PyTorch TCPStore?"),
                       std::runtime_error);
}

TEST_CASE("TcpBootstrap through the store: ranks meet and allgather in rank order") {
  for (int size : {2, 3}) {
    CAPTURE(size);
    std::vector<std::vector<std::string>> seen(size);
    const auto errors = run_ranks(size, [&](int rank) {
      TcpBootstrap b({.master_addr = server().host, .master_port = server().port, .rank = rank,
                      .size = size, .timeout = milliseconds(20000), .through_store = true,
                      .store_prefix = "cpp/meet" + std::to_string(size)});
      seen[rank] = b.allgather(std::string(static_cast<size_t>(rank) + 1, 'a' + rank));
    });
    for (int r = 0; r < size; ++r) {
      CHECK_MESSAGE(errors[r].empty(), errors[r]);
      REQUIRE(seen[r].size() == static_cast<size_t>(size));
      for (int q = 0; q < size; ++q) CHECK(seen[r][q] == std::string(q + 1, 'a' + q));
    }
  }
}

TEST_CASE("TcpBootstrap through the store: a missing rank 0, or rank, is named at the timeout") {
  const TcpBootstrapOptions peer{.master_addr = server().host, .master_port = server().port,
                                 .rank = 1, .size = 2, .timeout = milliseconds(1500),
                                 .through_store = true, .store_prefix = "cpp/no_rank0"};
  CHECK_THROWS_WITH_AS(TcpBootstrap{peer},
                       doctest::Contains("rank 0 did not publish its address (key "
                                         "cpp/no_rank0/rank0_address) within 1500 ms"),
                       std::runtime_error);
  TcpBootstrapOptions root = peer;
  root.rank = 0;
  root.store_prefix = "cpp/no_rank1";
  CHECK_THROWS_WITH_AS(TcpBootstrap{root},
                       doctest::Contains("waiting for rank(s) 1 to connect to"),
                       std::runtime_error);
  // Rank 0 published where it listened, on this host.
  TcpStoreClient store(options());
  CHECK(store.get("cpp/no_rank1/rank0_address").rfind("127.0.0.1:", 0) == 0);
}

TEST_SUITE_END();
