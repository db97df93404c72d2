#include "ringflow/apps/checkpoint_dir.h"

#include <fmt/core.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <stdexcept>

#include "ringflow/apps/setup.h"

namespace ringflow::apps {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kPrefix = "checkpoint-", kSuffix = ".safetensors";

// "checkpoint-000000075.safetensors" -> 75; nothing for any other name.
std::optional<int64_t> iteration_of(const std::string& name) {
  if (name.size() <= kPrefix.size() + kSuffix.size() || !name.starts_with(kPrefix) ||
      !name.ends_with(kSuffix))
    return std::nullopt;
  const char* begin = name.data() + kPrefix.size();
  const char* end = name.data() + name.size() - kSuffix.size();
  int64_t iteration = 0;
  const auto [stop, error] = std::from_chars(begin, end, iteration);
  if (error != std::errc() || stop != end || iteration < 0) return std::nullopt;
  return iteration;
}

// Removes `tmp`, a temporary file an interrupted write left; the log line says so.
std::string remove_stale(const char* flag, const std::string& target, const fs::path& tmp) {
  std::error_code error;
  const auto bytes = fs::file_size(tmp, error);
  if (!fs::remove(tmp, error) || error)
    throw std::invalid_argument(fmt::format("{} {}: cannot remove {}, left by an interrupted "
                                            "write: {}", flag, target, tmp.string(), error.message()));
  return fmt::format("{} {}: removed {} ({} bytes), left by an interrupted checkpoint write of "
                     "an earlier run", flag, target, tmp.string(),
                     bytes == static_cast<uintmax_t>(-1) ? "?" : std::to_string(bytes));
}

}  // namespace

std::string CheckpointDir::path_for(int64_t iteration) const {
  return (fs::path(dir_) / fmt::format("{}{:09d}{}", kPrefix, iteration, kSuffix)).string();
}

std::vector<CheckpointDir::Entry> CheckpointDir::list() const {
  std::vector<Entry> entries;
  std::error_code error;
  for (const fs::directory_entry& e : fs::directory_iterator(dir_, error)) {
    if (!e.is_regular_file(error)) continue;
    if (const auto iteration = iteration_of(e.path().filename().string()))
      entries.push_back({*iteration, e.path().string()});
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.iteration < b.iteration; });
  return entries;
}

std::optional<CheckpointDir::Entry> CheckpointDir::newest() const {
  const std::vector<Entry> entries = list();
  if (entries.empty()) return std::nullopt;
  return entries.back();
}

std::vector<std::string> CheckpointDir::prune(int keep) const {
  std::vector<Entry> entries = list();
  std::vector<std::string> removed;
  const size_t kept = static_cast<size_t>(std::max(keep, 1));
  for (size_t k = 0; k + kept < entries.size(); ++k) {
    std::error_code error;
    if (fs::remove(entries[k].path, error)) removed.push_back(entries[k].path);
  }
  return removed;
}

std::vector<std::string> CheckpointDir::prepare() const {
  const char* flag = "--checkpoint-dir";
  std::error_code error;
  if (fs::exists(dir_, error) && !fs::is_directory(dir_, error))
    throw std::invalid_argument(fmt::format("{} {}: is a file, not a folder", flag, dir_));
  if (!fs::is_directory(dir_, error) && (!fs::create_directories(dir_, error) || error))
    throw std::invalid_argument(fmt::format("{} {}: cannot make the folder: {}", flag, dir_,
                                            error.message()));
  std::vector<std::string> log;
  for (const fs::directory_entry& e : fs::directory_iterator(dir_, error)) {
    const std::string name = e.path().filename().string();
    if (name.ends_with(".tmp") && iteration_of(name.substr(0, name.size() - 4)))
      log.push_back(remove_stale(flag, dir_, e.path()));
  }
  check_writable(flag, (fs::path(dir_) / "checkpoint-write-test").string());
  return log;
}

std::vector<std::string> prepare_checkpoint_file(const std::string& path) {
  const char* flag = "--checkpoint";
  const fs::path p(path);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : ".";
  std::error_code error;
  if (fs::is_directory(p, error))
    throw std::invalid_argument(fmt::format(
        "{} {}: is a folder; name a file in it ({}), or pass --checkpoint-dir {} for a "
        "checkpoint per --checkpoint-every", flag, path, (p / "checkpoint.safetensors").string(), path));
  std::vector<std::string> log;
  const fs::path tmp = path + ".tmp";
  if (fs::is_directory(dir, error) && fs::exists(fs::symlink_status(tmp, error)))
    log.push_back(remove_stale(flag, path, tmp));
  check_writable(flag, path);
  return log;
}

}  // namespace ringflow::apps
