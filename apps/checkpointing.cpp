#include "ringflow/apps/checkpointing.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <vector>

#include "ringflow/comm/group/device_choice.h"

namespace ringflow::apps {
namespace fs = std::filesystem;
namespace {

// Every rank gets rank 0's answer: `decide` runs on rank 0 alone (it looks at the disk), and
// an exception it throws is thrown on every rank, so that all stop with the same message
// instead of the others waiting for rank 0 in the next collective.
std::string from_rank0(comm::ProcessGroup* pg, comm::Timeout timeout,
                       const std::function<std::string()>& decide) {
  nlohmann::json answer;
  if (!pg || pg->rank() == 0) {
    try {
      answer["value"] = decide();
    } catch (const std::exception& e) {
      answer["error"] = e.what();
    }
  }
  if (pg && pg->size() > 1)
    answer = nlohmann::json::parse(comm::allgather_strings(*pg, answer.dump(), timeout).front());
  if (answer.contains("error")) throw std::invalid_argument(answer["error"].get<std::string>());
  return answer["value"].get<std::string>();
}

// --- The epoch's progress as text in the checkpoint's metadata: numbers that round-trip.

std::string progress_text(const EpochProgress& p) {
  const EpochStats& s = p.stats;
  const EpochTraffic& t = s.traffic;
  std::string text;
  for (double v : {s.loss_sum, static_cast<double>(s.correct), static_cast<double>(s.seen),
                   static_cast<double>(s.batches), static_cast<double>(s.skipped), t.sent,
                   t.received, t.model_sent, t.model_received, t.rounds, p.window_loss,
                   static_cast<double>(p.window)})
    text += fmt::format("{}{:.17g}", text.empty() ? "" : ",", v);
  return text;
}

EpochProgress parse_progress(const std::string& text, const std::string& path, const std::string& key) {
  std::vector<double> v;
  for (const char* at = text.data(); at <= text.data() + text.size();) {
    double x = 0;
    const auto [end, error] = std::from_chars(at, text.data() + text.size(), x);
    const bool last = end == text.data() + text.size();
    if (error != std::errc() || !std::isfinite(x) || (!last && *end != ','))
      throw std::invalid_argument(fmt::format("checkpoint '{}': metadata 'info.{}' = '{}' is not a "
                                              "list of finite numbers", path, key, text));
    v.push_back(x);
    at = end + 1;
  }
  const auto count = [&](size_t k) {
    if (!(v[k] >= 0 && v[k] <= 9007199254740992.0 && v[k] == std::floor(v[k])))
      throw std::invalid_argument(fmt::format("checkpoint '{}': metadata 'info.{}': value {} is "
                                              "{:g}, not a count", path, key, k, v[k]));
    return static_cast<int64_t>(v[k]);
  };
  if (v.size() != 12)
    throw std::invalid_argument(fmt::format("checkpoint '{}': metadata 'info.{}' holds {} numbers, "
                                            "not 12", path, key, v.size()));
  EpochProgress p;
  EpochStats& s = p.stats;
  s.loss_sum = v[0];
  s.correct = count(1), s.seen = count(2), s.batches = count(3), s.skipped = count(4);
  s.traffic = {v[5], v[6], v[7], v[8], v[9]};
  p.window_loss = v[10];
  p.window = count(11);
  return p;
}

std::string progress_key(int rank) { return fmt::format("progress.rank{}", rank); }

// A whole number kept in the info, in [0, max].
int64_t info_count(const Checkpoint& c, const std::string& path, const std::string& key, int64_t max) {
  const auto it = c.info.find(key);
  int64_t v = -1;
  if (it != c.info.end()) {
    const auto [end, error] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
    if (error != std::errc() || end != it->second.data() + it->second.size()) v = -1;
  }
  if (v < 0 || v > max)
    throw std::invalid_argument(fmt::format("checkpoint '{}': metadata 'info.{}' is {}, not a count "
                                            "in [0, {}]", path, key,
                                            it == c.info.end() ? "missing" : "'" + it->second + "'", max));
  return v;
}

// --- The loss scaler's state travels as "info.amp.scale", ...; an fp32 or bf16 run's
// checkpoint has none, and the scaler then starts afresh.

void put_scaler(std::map<std::string, std::string>& info, const optim::GradScaler* scaler) {
  if (!scaler) return;
  for (const auto& [key, value] : scaler->state_dict()) info["amp." + key] = fmt::format("{:.17g}", value);
}

void restore_scaler(optim::GradScaler& scaler, const std::map<std::string, std::string>& info,
                    const std::string& path) {
  std::map<std::string, double> state;
  for (const auto& [key, value] : info) {
    if (key.rfind("amp.", 0) != 0) continue;
    double v = 0;
    const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (value.empty() || error != std::errc() || end != value.data() + value.size())
      throw std::invalid_argument(fmt::format("checkpoint '{}': metadata 'info.{}' = '{}' is not a "
                                              "number", path, key, value));
    state[key.substr(4)] = v;
  }
  if (state.empty()) return;
  try {
    scaler.load_state_dict(state);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("checkpoint '{}': {}", path, e.what()));
  }
}

}  // namespace

void check_checkpoint_flags(const Flags& f) {
  const bool somewhere = !f.checkpoint.empty() || !f.checkpoint_dir.empty();
  if (f.checkpoint_every > 0 && !somewhere)
    throw std::invalid_argument("--checkpoint-every needs a place to write: --checkpoint-dir DIR "
                                "(a file per checkpoint) or --checkpoint FILE");
  if (f.resume == "auto" && !somewhere)
    throw std::invalid_argument("--resume auto resumes the newest checkpoint of --checkpoint-dir "
                                "DIR (or --checkpoint FILE): give one of them");
  if (f.checkpoint_every > 0 && f.sync == "fedavg")
    throw std::invalid_argument("--checkpoint-every does not go with --sync fedavg: its ranks hold "
                                "different models between rounds; its checkpoints are written at "
                                "the epochs' ends");
}

void prepare_checkpoint_places(const Flags& f) {
  std::vector<std::string> log;
  if (!f.checkpoint.empty()) log = prepare_checkpoint_file(f.checkpoint);
  if (!f.checkpoint_dir.empty()) {
    for (std::string& line : CheckpointDir(f.checkpoint_dir).prepare()) log.push_back(std::move(line));
  }
  for (const std::string& line : log) fmt::print("{}\n", line);
  std::fflush(stdout);  // a job killed soon after still shows what was removed
}

Checkpointer::Checkpointer(const Flags& f, comm::ProcessGroup* pg, comm::Timeout timeout,
                           std::map<std::string, std::string> info)
    : f_(f), pg_(pg), timeout_(timeout), info_(std::move(info)), rank_(pg ? pg->rank() : 0),
      world_(pg ? pg->size() : 1) {
  if (!f.checkpoint_dir.empty()) dir_.emplace(f.checkpoint_dir);
}

// Rank 0: the file --resume names, or auto's choice ("": a fresh start), with a log line.
std::string Checkpointer::resume_target() const {
  if (f_.resume != "auto") return f_.resume;
  std::optional<std::string> found;
  if (dir_) {
    if (const auto newest = dir_->newest()) found = newest->path;
  } else if (fs::exists(f_.checkpoint)) {
    found = f_.checkpoint;
  }
  const std::string where = dir_ ? dir_->dir() : f_.checkpoint;
  fmt::print("--resume auto: {}\n", found ? fmt::format("resuming {}, the newest checkpoint in {}", *found, where)
                                          : fmt::format("no checkpoint in {}: starting afresh", where));
  return found.value_or("");
}

// Rank 0: --checkpoint-dir holds no checkpoint past `iteration` (-1: a fresh start), which
// --resume auto would later take for this run's.
void Checkpointer::check_no_newer(int64_t iteration) const {
  if (!dir_) return;
  const auto newest = dir_->newest();
  if (!newest || newest->iteration <= iteration) return;
  if (iteration < 0)
    throw std::invalid_argument(fmt::format(
        "--checkpoint-dir {} holds checkpoints of an earlier run (newest: {}): continue it with "
        "--resume auto, or give an empty folder", dir_->dir(), newest->path));
  throw std::invalid_argument(fmt::format(
      "--checkpoint-dir {} holds {}, past the resumed checkpoint's iteration {}: --resume auto "
      "would take it for this run's; move it away, or give another folder", dir_->dir(),
      newest->path, iteration));
}

std::optional<Resumed> Checkpointer::resume(nn::Module& model, optim::Optimizer& optimizer,
                                            optim::GradScaler* scaler, int64_t epoch_iterations) {
  if (f_.resume.empty() && !dir_) return std::nullopt;  // the same on every rank: no collective
  const std::string path = from_rank0(pg_, timeout_, [&] {
    const std::string target = resume_target();
    if (target.empty()) check_no_newer(-1);
    return target;
  });
  std::fflush(stdout);  // what a restarted job resumed is in its log even if it is killed soon
  if (path.empty()) return std::nullopt;
  // The model alone may go on under another optimizer.
  std::map<std::string, std::string> expect = info_;
  if (f_.resume_model_only) expect.erase("optimizer");
  const Checkpoint c = load_checkpoint(path, model, optimizer,
                                       {.model_only = f_.resume_model_only, .expect_info = expect});
  if (dir_) {
    from_rank0(pg_, timeout_, [&] {
      check_no_newer(c.position.iteration);
      return std::string();
    });
  }
  Resumed r{path, c.position, {}};
  if (rank_ == 0)
    for (const std::string& w : c.warnings) fmt::print(stderr, "train: warning: {}\n", w);
  restore_run_state(r, c, scaler, epoch_iterations);
  return r;
}

void Checkpointer::restore_run_state(Resumed& r, const Checkpoint& c, optim::GradScaler* scaler,
                                     int64_t epoch_iterations) const {
  const TrainingPosition& p = r.position;
  if (p.epoch >= f_.epochs) return;  // nothing left to train: the caller says so
  if (scaler) restore_scaler(*scaler, c.info, r.path);
  if (p.epoch_iteration > 0) {
    // The same ranks and epoch length, or the data would not continue where it stopped.
    const int64_t world = info_count(c, r.path, "run.world", 1 << 24);
    const int64_t steps = info_count(c, r.path, "run.epoch_iterations", kMaxCheckpointIteration);
    if (world != world_ || steps != epoch_iterations || p.epoch_iteration >= epoch_iterations)
      throw std::invalid_argument(fmt::format(
          "checkpoint '{}' was written in the middle of epoch {} (after its iteration {} of {}) by "
          "{} ranks; it resumes with as many ranks and iterations an epoch (--batch-size, "
          "--global-batch, --grad-accum, --max-iters and the data as then), here {} ranks and {}",
          r.path, p.epoch + 1, p.epoch_iteration, steps, world, world_, epoch_iterations));
    const std::string key = progress_key(rank_);
    const auto it = c.info.find(key);
    if (it == c.info.end())
      throw std::invalid_argument(fmt::format("checkpoint '{}': metadata 'info.{}' is missing", r.path, key));
    r.progress = parse_progress(it->second, r.path, key);
  }
  if (rank_ != 0) return;
  trim_metrics(c, r.path);
  if (p.epoch_iteration == 0)
    fmt::print("Resumed from {} after epoch {} (iteration {})\n", r.path, p.epoch, p.iteration);
  else
    fmt::print("Resumed from {} in epoch {} after its iteration {} of {} (iteration {} in all)\n",
               r.path, p.epoch + 1, p.epoch_iteration, epoch_iterations, p.iteration);
  std::fflush(stdout);
}

// Rank 0: the metrics file back to its length at the checkpoint, where it is the same file
// and longer: what was written after the checkpoint is trained again, and would be twice in it.
void Checkpointer::trim_metrics(const Checkpoint& c, const std::string& path) const {
  const auto it = c.info.find("metrics.path");
  if (f_.metrics.empty() || it == c.info.end() || it->second != fs::absolute(f_.metrics).string()) return;
  const auto bytes = static_cast<uintmax_t>(info_count(c, path, "metrics.bytes", INT64_MAX));
  std::error_code error;
  const uintmax_t size = fs::file_size(f_.metrics, error);
  if (error || size <= bytes) return;
  fs::resize_file(f_.metrics, bytes);
  fmt::print("--metrics {}: dropped the last {} bytes, written after the checkpoint (those "
             "iterations are trained again)\n", f_.metrics, size - bytes);
}

bool Checkpointer::due_in_epoch(const TrainingPosition& p, int64_t epoch_iterations) const {
  const bool somewhere = !f_.checkpoint.empty() || dir_;
  return somewhere && f_.checkpoint_every > 0 && p.iteration % f_.checkpoint_every == 0 &&
         p.epoch_iteration > 0 && p.epoch_iteration < epoch_iterations;
}

// Rank 0: what the checkpoint's info holds besides model and data set.
std::map<std::string, std::string> Checkpointer::run_state(const TrainingPosition& p,
                                                           const optim::GradScaler* scaler,
                                                           const EpochProgress& progress,
                                                           int64_t epoch_iterations) const {
  std::map<std::string, std::string> info = info_;
  put_scaler(info, scaler);
  if (p.epoch_iteration > 0) {
    const std::vector<std::string> every =
        pg_ && world_ > 1 ? comm::allgather_strings(*pg_, progress_text(progress), timeout_)
                          : std::vector<std::string>{progress_text(progress)};
    for (int r = 0; r < world_; ++r) info[progress_key(r)] = every[static_cast<size_t>(r)];
    info["run.world"] = std::to_string(world_);
    info["run.epoch_iterations"] = std::to_string(epoch_iterations);
  }
  if (!f_.metrics.empty()) {
    std::error_code error;
    const uintmax_t bytes = fs::file_size(f_.metrics, error);
    if (!error) {
      info["metrics.path"] = fs::absolute(f_.metrics).string();
      info["metrics.bytes"] = std::to_string(bytes);
    }
  }
  return info;
}

bool Checkpointer::save(const TrainingPosition& p, const nn::Module& model,
                        const optim::Optimizer& optimizer, const optim::GradScaler* scaler,
                        const EpochProgress& progress, int64_t epoch_iterations) {
  if (!wanted()) return false;
  const std::map<std::string, std::string> info = run_state(p, scaler, progress, epoch_iterations);
  if (rank_ != 0) return false;
  if (!f_.checkpoint.empty()) save_checkpoint(f_.checkpoint, model, optimizer, p, info);
  if (dir_) {
    save_checkpoint(dir_->path_for(p.iteration), model, optimizer, p, info);
    dir_->prune(f_.checkpoint_keep);
  }
  return true;
}

}  // namespace ringflow::apps
