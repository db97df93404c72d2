#include "ringflow/bench/command_output.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include <fmt/core.h>

extern char** environ;

namespace ringflow::bench {

std::optional<std::string> command_output(const std::string& command, const std::string& who) {
  std::fflush(stdout);  // what was printed so far comes first
  FILE* p = ::popen(command.c_str(), "r");
  if (!p) {
    fmt::print(stderr, "{}: cannot run: {}\n", who, command);
    return std::nullopt;
  }
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  if (status != 0) {
    fmt::print(stderr, "{}: `{}` failed (status {}):\n{}\n", who, command, status, out);
    return std::nullopt;
  }
  return out;
}

Coprocess::Coprocess(const std::string& command, std::string who) : command_(command), who_(std::move(who)) {
  // A helper that died must not kill us with SIGPIPE on the next request: send() says so instead.
  std::signal(SIGPIPE, SIG_IGN);
  std::fflush(stdout);
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0) throw std::runtime_error(fmt::format("{}: pipe: cannot run {}", who_, command));
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::close(in[0]);
    ::close(in[1]);
    throw std::runtime_error(fmt::format("{}: pipe: cannot run {}", who_, command));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);  // dup2 clears O_CLOEXEC
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  const char* argv[] = {"sh", "-c", command.c_str(), nullptr};
  const int failed = ::posix_spawn(&pid_, "/bin/sh", &actions, nullptr, const_cast<char**>(argv), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(in[0]);
  ::close(out[1]);
  if (failed != 0) {
    pid_ = -1;
    ::close(in[1]);
    ::close(out[0]);
    throw std::runtime_error(fmt::format("{}: cannot run {}", who_, command));
  }
  to_ = ::fdopen(in[1], "w");
  from_ = ::fdopen(out[0], "r");
}

Coprocess::~Coprocess() {
  if (to_) std::fclose(to_);
  if (from_) std::fclose(from_);
  wait();
}

int Coprocess::wait() {
  if (pid_ < 0) return -1;
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

bool Coprocess::send(const std::string& line) {
  if (to_ && std::fputs(line.c_str(), to_) >= 0 && std::fputc('\n', to_) != EOF && std::fflush(to_) == 0) return true;
  fmt::print(stderr, "{}: `{}` no longer reads its input (it ended)\n", who_, command_);
  return false;
}

std::optional<std::string> Coprocess::read_line() {
  std::string line;
  for (int c; (c = std::fgetc(from_)) != EOF;) {
    if (c == '\n') return line;
    line.push_back(static_cast<char>(c));
  }
  if (!line.empty()) return line;  // a last line without its newline
  if (pid_ < 0) return std::nullopt;  // said so before
  std::fclose(to_);  // an end of input ends the helper if only its output was closed
  to_ = nullptr;
  fmt::print(stderr, "{}: `{}` ended (status {}) before answering\n", who_, command_, wait());
  return std::nullopt;
}

}  // namespace ringflow::bench
