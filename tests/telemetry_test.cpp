// The telemetry schema (apps/telemetry.h) under mpiexec -n 1, 2 and 3 (issue 30): one metric
// added to train's schema in one line reaches every output (the epoch's tally, the
// reduction across ranks, the JSON lines, the console table, the trace's counters, the
// checkpoint's sums and ringflow-report's plot data), and each combining rule gives its
// closed form: rank r (of n) contributes multiples of r + 1, so the sum over the ranks is
// n(n+1)/2 times the multiple, the mean (n+1)/2 times it, the largest n times it.
#include <doctest/doctest.h>
#include <fmt/core.h>
#include <mpi.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ringflow/apps/report.h"
#include "ringflow/apps/run_report.h"
#include "ringflow/apps/step_metrics.h"
#include "ringflow/apps/telemetry.h"
#include "ringflow/comm/group/mpi_process_group.h"

namespace ringflow::apps {
namespace {

namespace fs = std::filesystem;
constexpr comm::Timeout kTimeout = std::chrono::seconds(60);  // fail instead of hanging

fs::path temp_dir(int rank) {
  const fs::path d = fs::temp_directory_path() / ("ringflow_telemetry_" + std::to_string(rank));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Iteration i (from 0) of rank r: every figure a multiple of r + 1.
Values iteration(const StepMetrics& m, MetricId io_ms, int r, int i) {
  Values v(m.schema);
  const double k = r + 1;
  v[io_ms] = k * (i + 1);
  v[m.step_ms] = 10 * k;
  v[m.images] = v[m.seen] = 4 * k;
  v[m.correct] = k;
  v[m.loss_sum] = k * (i + 1);
  v[m.batches] = 1;
  v[m.loss] = k;
  v[m.lr] = k;
  v[m.peak_memory] = k * (i == 1 ? 100 : 1);  // the peak in the middle
  v.derive();
  return v;
}

TEST_CASE("a metric added in one line reaches the tally, the ranks, JSON, table, trace, checkpoint, report") {
  auto pg = std::make_shared<comm::MpiProcessGroup>(MPI_COMM_WORLD, comm::MpiProcessGroupOptions{});
  const int r = pg->rank(), n = pg->size();
  const double k = r + 1, sum = n * (n + 1) / 2.0, mean = (n + 1) / 2.0;
  StepMetrics m;  // train's schema, and one figure more:
  const MetricId io_ms = m.schema.add({.name = "io_ms", .unit = Unit::ms, .label = "io wait", .part_of = "step_ms"});

  Tally tally(m.schema);
  for (int i = 0; i < 3; ++i) tally.add_iteration(iteration(m, io_ms, r, i));
  const Values mine = tally.figures();
  CHECK(mine[io_ms] == 2.5 * k);  // the mean after the first: (2k + 3k) / 2
  CHECK(mine[m.seen] == 12 * k);  // the sum of every iteration's
  CHECK(mine[m.peak_memory] == 100 * k);
  CHECK(mine[m.lr] == k);

  const std::vector<Combined> job = combine_ranks({mine}, pg.get(), kTimeout);
  REQUIRE(job.size() == 1);
  const Combined& c = job.front();
  CHECK(c.value[io_ms] == doctest::Approx(2.5 * mean));
  CHECK(c.max[io_ms] == 2.5 * n);
  CHECK(c.value[m.seen] == 12 * sum);                        // Across::sum
  CHECK(c.value[m.lr] == n);                                 // Across::max
  CHECK(c.value[m.train_loss] == doctest::Approx(6 * sum / (3 * n)));  // Across::job: sums' ratio
  CHECK(c.value[m.images_per_s] == doctest::Approx(4 * sum / (10 * mean) * 1e3));

  nlohmann::json j;
  put_figures(j, kEpochRecord, c.value, n > 1 ? &c.max : nullptr);
  CHECK(j["io_ms"].get<double>() == doctest::Approx(2.5 * mean));
  CHECK(j.contains("max_io_ms") == (n > 1));
  CHECK(j.contains("ms_per_iteration"));  // the epoch records' name for step_ms

  const std::string table = epoch_table(c, n, n > 1);
  const double share = 100 * 2.5 * mean / (10 * mean);
  CHECK_MESSAGE(table.find(fmt::format("\n  {:<28}{:>10.1f} ms ({:3.0f}%)", "io wait", 2.5 * mean, share)) !=
                    std::string::npos, table);

  const fs::path dir = temp_dir(r);
  {
    TraceWriter trace((dir / "trace.json").string(), r, TraceWriter::Clock::now());
    trace_counters(trace, TraceWriter::Clock::now(), iteration(m, io_ms, r, 2));
  }
  const auto events = nlohmann::json::parse(std::ifstream(dir / "trace.json"))["traceEvents"];
  int counters = 0;
  for (const auto& e : events)
    counters += e["ph"] == "C" && e["name"] == "io_ms" && e["args"]["io_ms"] == 3 * k;
  CHECK(counters == 1);

  const Tally back = Tally::from_json(m.schema, nlohmann::json::parse(tally.to_json().dump()), "test");
  CHECK(back.figures()[io_ms] == mine[io_ms]);
  CHECK(back.iterations() == 3);

  if (r == 0) {  // ringflow-report's stacked phases carry it, from a metrics file that holds it
    const fs::path metrics = dir / "run.jsonl";
    {
      std::ofstream f(metrics);
      for (int i = 0; i < 3; ++i) {
        nlohmann::json it{{"type", "iteration"}, {"epoch", 1}, {"global_iteration", i + 1}};
        put_figures(it, kIterationRecord, iteration(m, io_ms, 0, i), nullptr);
        f << it.dump() << "\n";
      }
      nlohmann::json epoch = j;
      epoch.update({{"type", "epoch"}, {"epoch", 1}, {"global_iteration", 3}});
      f << epoch.dump() << "\n";
    }
    ReportOptions o{.out = (dir / "report").string()};
    if (std::system("command -v gnuplot >/dev/null") == 0) {
      write_report(read_runs(metrics.string()), m.schema, o);
      std::ifstream phases(dir / "report" / "plot-data" / "phases-0.dat");
      std::string line;
      std::getline(phases, line);  // iteration 1: the phases, io_ms after them, then step_ms
      CHECK(line == "1 0 0 0 0 0 1 10");
    } else {
      MESSAGE("gnuplot is not installed: the report's part skipped");
    }
  }
  fs::remove_all(dir);
}

TEST_CASE("the schema refuses a name twice, a job-level figure without its derivation; a checkpoint's unknown figure") {
  Schema s;
  s.add({.name = "a"});
  CHECK_THROWS_WITH(s.add({.name = "a"}), "telemetry: metric 'a' declared twice");
  CHECK_THROWS_WITH(s.add({.name = "b", .across = Across::job}),
                    "telemetry: metric 'b' is derived from the job's figures but has no derivation");
  CHECK_THROWS_WITH(s.id("c"), "telemetry: no metric 'c'");
  CHECK_THROWS_WITH(Tally::from_json(s, {{"iterations", 1}, {"sums", {{"c", 1}}}, {"first", nlohmann::json::object()}},
                                     "checkpoint 'x'"),
                    "checkpoint 'x': 'c' names no figure of this build");
  CHECK_THROWS_WITH(Tally::from_json(s, {{"iterations", 1}, {"sums", {{"a", "1"}}}, {"first", nlohmann::json::object()}},
                                     "checkpoint 'x'"),
                    "checkpoint 'x': 'a' is \"1\", not a number");
}

TEST_CASE("a tally: the first iteration alone, and figures between iterations into the sums only") {
  const StepMetrics& m = step_metrics();
  Tally t(m.schema);
  Values v(m.schema);
  v[m.step_ms] = 7;
  v[m.epoch_bytes_sent] = 5;
  t.add_iteration(v);
  CHECK(t.timed() == 0);
  CHECK(t.figures()[m.step_ms] == 7);  // the first's, the epoch ran no other
  Values round(m.schema);
  round[m.epoch_bytes_sent] = 3;
  round[m.step_ms] = 1000;  // not an iteration: no time of one
  t.add_between(round);
  CHECK(t.figures()[m.epoch_bytes_sent] == 8);
  CHECK(t.figures()[m.step_ms] == 7);
  CHECK(t.iterations() == 1);
}

}  // namespace
}  // namespace ringflow::apps
