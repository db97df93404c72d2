// bench::Coprocess, the helper kept running that answers a line per request (train_step's
// PyTorch side on a GPU): answers in order, a helper that ended says so instead of hanging or
// killing the caller with SIGPIPE, the destructor waits for it, but not for ever.
#include <doctest/doctest.h>

#include <signal.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "ringflow/bench/command_output.h"

using ringflow::bench::Coprocess;

TEST_CASE("a coprocess answers each request in order, passing chatter through as lines") {
  Coprocess echo(R"(while read -r line; do echo "note"; echo "got $line"; done)", "coprocess_test");
  for (const std::string request : {"first", "second request", ""}) {
    REQUIRE(echo.send(request));
    CHECK(echo.read_line() == std::optional<std::string>("note"));
    CHECK(echo.read_line() == std::optional<std::string>("got " + request));
  }
}

TEST_CASE("a coprocess that ended gives no line and refuses requests") {
  Coprocess once("read -r line; echo \"only $line\"; exit 3", "coprocess_test");
  REQUIRE(once.send("one"));
  CHECK(once.read_line() == std::optional<std::string>("only one"));
  CHECK_FALSE(once.read_line().has_value());  // ended: status 3 on stderr
  CHECK_FALSE(once.send("two"));
  CHECK_FALSE(once.read_line().has_value());
}

TEST_CASE("a request to a helper that closed its input fails without SIGPIPE") {
  Coprocess deaf("exec <&-; echo closed; sleep 1", "coprocess_test");
  REQUIRE(deaf.read_line() == std::optional<std::string>("closed"));
  CHECK_FALSE(deaf.send("anyone?"));  // EPIPE: this process would die of SIGPIPE otherwise
}

TEST_CASE("a helper that writes on after we stop reading dies of SIGPIPE: the destructor returns") {
  // SIGPIPE is ignored here (the first Coprocess): the helper must get its default back.
  Coprocess chatty("while :; do echo line; done", "coprocess_test");
  CHECK(chatty.read_line() == std::optional<std::string>("line"));
}  // a helper that ignored SIGPIPE would loop on EPIPE, and this test would hang

TEST_CASE("a helper that ignores the end of its input and SIGTERM is killed by the destructor") {
  Coprocess stubborn("trap '' TERM; echo ready; while :; do sleep 0.05; done", "coprocess_test",
                     std::chrono::milliseconds(200));
  REQUIRE(stubborn.read_line() == std::optional<std::string>("ready"));
}  // SIGTERM after 200 ms, SIGKILL after 200 more: without them this test would hang

// Whether process `pid` is gone or dead (a zombie nobody reaped yet).
bool dead(const std::string& pid) {
  std::ifstream stat("/proc/" + pid + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t name_end = line.rfind(')');
  return name_end != std::string::npos && line.compare(name_end, 4, ") Z ") == 0;
}

TEST_CASE("the signals past the grace reach what the helper's shell started too") {
  std::string child;
  {
    Coprocess parent("trap '' TERM; (trap '' TERM; while :; do sleep 0.05; done) & echo $!; wait",
                     "coprocess_test", std::chrono::milliseconds(200));
    const std::optional<std::string> line = parent.read_line();
    REQUIRE(line.has_value());
    child = *line;
    CHECK_FALSE(dead(child));
  }
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {
    gone = dead(child);
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK_MESSAGE(gone, "process " << child << " outlived its coprocess");
  if (!gone) ::kill(std::stoi(child), SIGKILL);
}

TEST_CASE("a coprocess that never starts its program ends at the first read") {
  Coprocess missing("/nonexistent/helper --serve", "coprocess_test");
  // The shell may still be reading when the line goes: sending can succeed or not.
  (void)missing.send("request");
  CHECK_FALSE(missing.read_line().has_value());
}

TEST_CASE("a last line without its newline is still a line") {
  Coprocess printf_helper("printf 'no newline'", "coprocess_test");
  CHECK(printf_helper.read_line() == std::optional<std::string>("no newline"));
  CHECK_FALSE(printf_helper.read_line().has_value());
}
