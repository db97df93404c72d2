#include "ringflow/apps/report.h"

#include <fmt/core.h>

#include <span>
#include <tuple>

#include "ringflow/framework/ringflow.h"

namespace ringflow::apps {

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double unix_seconds(WallClock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

std::string duration_text(double seconds) {
  const auto s = static_cast<int64_t>(std::max(0.0, seconds) + 0.5);
  if (s < 60) return fmt::format("{} s", s);
  if (s < 3600) return fmt::format("{} min {} s", s / 60, s % 60);
  return fmt::format("{} h {} min", s / 3600, s % 3600 / 60);
}

nlohmann::json metrics_header(const std::vector<std::string>& arguments, const BuildInfo& build,
                              const std::vector<std::string>& hosts, int world_size) {
  nlohmann::json libraries = nlohmann::json::object();
  for (const LibraryVersion& l : build.libraries) libraries[l.name] = l.version;
  const CpuIsa& c = build.cpu;
  return {{"type", "header"},
          {"arguments", arguments},
          {"version", build.version},
          {"commit", build.commit},
          {"build", {{"build_type", build.build_type}, {"compiler", build.compiler},
                     {"cuda", build.cuda}, {"cuda_architectures", build.cuda_architectures},
                     {"cudnn", build.cudnn}, {"mpi", build.mpi}}},
          {"cpu", {{"model", c.model}, {"avx2", c.avx2}, {"avx512", c.avx512},
                   {"avx512_bf16", c.avx512_bf16}, {"amx", c.amx}, {"onednn_isa", c.onednn_isa},
                   {"bf16_winograd", c.bf16_winograd}}},
          {"libraries", libraries},
          {"hosts", hosts},
          {"world_size", world_size}};
}

double min_over_ranks(double value, comm::ProcessGroup* pg, comm::Timeout timeout) {
  if (!pg || pg->size() == 1) return value;
  Tensor t = from_vector({value}, {1}, DType::f64);
  comm::CollectiveOptions o;
  o.timeout = timeout;
  o.op = comm::ReduceOp::min;
  pg->allreduce(t, o)->wait();
  return t.item();
}

// The epoch's figures and the logged iterations' over every rank, in the two allreduces
// (sum, max) of one vector that the epoch's end runs anyway: the iteration records cost no
// collective of their own, which is why under mpiexec they reach the metrics file at the
// end of the epoch. Without a group, this rank's as mean and max.
AcrossRanks across_ranks(const EpochStats& s, comm::ProcessGroup* pg, comm::Timeout timeout) {
  // Ranks that train at their own pace (fedavg over unequal shares) log different numbers
  // of iterations: the first ones that every rank has go into the vector.
  const auto logged = static_cast<size_t>(
      min_over_ranks(static_cast<double>(s.logged.size()), pg, timeout));
  const std::span<const IterationRecord> records(s.logged.data(), logged);
  std::vector<double> v;
  v.reserve(Figures::kValues + EpochTraffic::kValues + 4 +
            records.size() * IterationRecord::kValues);
  const Figures mine = s.timed_steps ? s.sum.divided(static_cast<double>(s.timed_steps)).with_overlap()
                                     : s.first;
  mine.append_to(v);
  s.traffic.append_to(v);
  v.insert(v.end(), {s.loss_sum, static_cast<double>(s.correct), static_cast<double>(s.seen),
                     static_cast<double>(s.batches)});
  for (const IterationRecord& r : records) {
    r.figures.append_to(v);
    v.insert(v.end(), {r.loss, r.correct, r.seen});
  }
  std::vector<double> sum = v, max = v;
  double world = 1;
  if (pg && pg->size() > 1) {
    world = pg->size();
    const int64_t n = static_cast<int64_t>(v.size());
    Tensor sum_t = from_vector(v, {n}, DType::f64), max_t = sum_t.clone();
    comm::CollectiveOptions o;
    o.timeout = timeout;
    o.op = comm::ReduceOp::sum;
    auto a = pg->allreduce(sum_t, o);
    o.op = comm::ReduceOp::max;
    auto b = pg->allreduce(max_t, o);
    a->wait();
    b->wait();
    sum = sum_t.to_vector<double>();
    max = max_t.to_vector<double>();
  }
  AcrossRanks r;
  r.first_only = s.timed_steps == 0;
  const double* ps = sum.data();
  const double* pm = max.data();
  r.mean = Figures::read(ps).divided(world);
  r.max = Figures::read(pm);
  r.traffic_mean = EpochTraffic::read(ps);
  r.traffic_max = EpochTraffic::read(pm);
  for (double* x : {&r.traffic_mean.sent, &r.traffic_mean.received, &r.traffic_mean.model_sent,
                    &r.traffic_mean.model_received, &r.traffic_mean.rounds}) *x /= world;
  r.loss_sum = *ps++;
  r.correct = static_cast<int64_t>(*ps++);
  r.seen = static_cast<int64_t>(*ps++);
  r.batches = static_cast<int64_t>(*ps++);
  pm += 4;
  for (const IterationRecord& mine_it : records) {
    AcrossRanks::Iteration it{&mine_it, Figures::read(ps).divided(world), Figures::read(pm)};
    it.loss = *ps++ / world;
    it.correct = *ps++;
    it.seen = *ps++;
    pm += 3;
    r.logged.push_back(it);
  }
  return r;
}

// The phases, and with a group the communication figures: means under the plain names
// (data_ms, comm_total_ms, overlap, ...), max_* beside them.
void put_figures(nlohmann::json& j, const Figures& mean, const Figures* max) {
  for (int p = 0; p < kPhases; ++p) {
    j[std::string(kPhaseNames[p]) + "_ms"] = mean.phase_ms[p];
    if (max) j["max_" + std::string(kPhaseNames[p]) + "_ms"] = max->phase_ms[p];
  }
  if (!max) return;
  for (const auto& [key, a, b] : {std::tuple{"comm_total_ms", mean.comm_total_ms, max->comm_total_ms},
                                  std::tuple{"comm_cpu_ms", mean.comm_cpu_ms, max->comm_cpu_ms},
                                  std::tuple{"bytes_sent", mean.bytes_sent, max->bytes_sent},
                                  std::tuple{"bytes_received", mean.bytes_received, max->bytes_received},
                                  std::tuple{"overlap", mean.overlap, max->overlap}}) {
    j[key] = a;
    j[std::string("max_") + key] = b;
  }
}

namespace {

std::string caps_text(const comm::BucketCaps& c) {
  return c.first_mb == c.cap_mb ? fmt::format("{:g} MiB", c.cap_mb)
                                : fmt::format("{:g} MiB (first {:g})", c.cap_mb, c.first_mb);
}

nlohmann::json caps_json(const comm::BucketCaps& c) {
  return {{"first_mb", c.first_mb}, {"cap_mb", c.cap_mb}};
}

}  // namespace

std::string describe_bucket_tuning(const comm::BucketTuning& t) {
  std::string tried;
  for (size_t k = 0; k < t.tried.size(); ++k) {
    tried += fmt::format("{}{}: {:.1f} ms", k ? ", " : "", caps_text(t.tried[k]), t.ms[k]);
  }
  return fmt::format("ddp: bucket caps measured (backward with its communication, median, "
                     "slowest rank): {}; chose {}",
                     tried, caps_text(t.tried.at(static_cast<size_t>(t.chosen))));
}

nlohmann::json bucket_tuning_json(const comm::BucketTuning& t) {
  nlohmann::json tried = nlohmann::json::array();
  for (size_t k = 0; k < t.tried.size(); ++k) {
    nlohmann::json c = caps_json(t.tried[k]);
    c["backward_ms"] = t.ms[k];
    tried.push_back(c);
  }
  return {{"type", "bucket_tuning"},
          {"tried", tried},
          {"chosen", caps_json(t.tried.at(static_cast<size_t>(t.chosen)))}};
}

void put_epoch_traffic(nlohmann::json& j, const AcrossRanks& a) {
  const EpochTraffic& m = a.traffic_mean;
  j["epoch_bytes_sent"] = m.sent;
  j["epoch_bytes_received"] = m.received;
  j["epoch_bytes_sent_closed_form"] = m.model_sent;
  j["epoch_bytes_received_closed_form"] = m.model_received;
  j["max_epoch_bytes_sent"] = a.traffic_max.sent;
  j["max_epoch_bytes_received"] = a.traffic_max.received;
  j["rounds"] = m.rounds;
}

// Rank 0's table at the end of an epoch: per iteration, the mean over the ranks and the
// largest rank's figure (each row its own slowest rank). One process: its own figures.
void print_epoch_table(const AcrossRanks& a, int world, bool distributed) {
  const Figures& m = a.mean;
  const Figures& x = a.max;
  auto row = [&](const char* label, double mean, double max, const char* unit, bool share) {
    std::string line = fmt::format("  {:<28}{:>10.{}f} {:<2}", label, mean, unit[0] == 'M' ? 2 : 1, unit);
    line += share ? fmt::format(" ({:3.0f}%)", m.step_ms > 0 ? 100 * mean / m.step_ms : 0.0)
                  : std::string(7, ' ');
    if (distributed) line += fmt::format("{:>12.{}f} {}", max, unit[0] == 'M' ? 2 : 1, unit);
    line.erase(line.find_last_not_of(' ') + 1);
    fmt::print("{}\n", line);
  };
  if (distributed) {
    fmt::print("  {:<28}{:>12}{:>22}\n", fmt::format("per iteration, {} ranks", world), "mean",
               "max");
  }
  for (int p = 0; p < kPhases; ++p) {
    if (p == kComm && !distributed) continue;  // one process: nothing to wait for
    row(kPhaseLabels[p], m.phase_ms[p], x.phase_ms[p], "ms", /*share=*/true);
  }
  row("iteration", m.step_ms, x.step_ms, "ms", false);
  if (!distributed) return;
  row("comm total (comm thread)", m.comm_total_ms, x.comm_total_ms, "ms", false);
  row("comm thread cpu", m.comm_cpu_ms, x.comm_cpu_ms, "ms", false);
  row("sent", m.bytes_sent / 1e6, x.bytes_sent / 1e6, "MB", false);
  row("received", m.bytes_received / 1e6, x.bytes_received / 1e6, "MB", false);
  row("overlap (1 - exposed/total)", 100 * m.overlap, 100 * x.overlap, "%", false);
  const EpochTraffic& t = a.traffic_mean;
  fmt::print("  epoch, per rank: sent {:.2f} MB, received {:.2f} MB (closed form {:.2f} / {:.2f} MB){}\n",
             t.sent / 1e6, t.received / 1e6, t.model_sent / 1e6, t.model_received / 1e6,
             t.rounds > 0 ? fmt::format(", {:.0f} model averages", t.rounds) : "");
}

}  // namespace ringflow::apps
