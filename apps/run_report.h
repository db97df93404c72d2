// The run report of ringflow-report: train's --metrics files (JSON lines, apps/report.h) as
// PNG plots drawn by gnuplot, and a one-page report.md that links them: loss and accuracy
// per epoch, images/s, the phases of each iteration (stacked), exposed communication and
// overlap, bytes per epoch against the closed form, and, given several runs, the runs side
// by side. The figures' keys, labels and units, and which of them are the iteration's
// phases, come from the schema (train's: apps/step_metrics.h).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "ringflow/apps/telemetry.h"

namespace ringflow::apps {

// One training run as its metrics file holds it.
struct Run {
  std::string name;  // the file's name without folder and extension (#2, #3 for later runs in it)
  std::string path;
  nlohmann::json header;  // its header record (arguments, world_size, hosts, ...); null if none
  std::vector<nlohmann::json> iterations, epochs;  // in order of global_iteration
  int restarts = 0;  // headers after the first that continued it (a resumed run)
};

// The runs of a metrics file: one, or more where the same path was given to several runs
// (a header followed by an iteration that does not come after the last one starts the
// next). Throws std::invalid_argument naming the file and line of a line that is not a
// JSON object, and for a file without any iteration or epoch record.
std::vector<Run> read_runs(const std::string& path);

struct ReportOptions {
  std::string out;                  // the folder (made where missing)
  std::string gnuplot = "gnuplot";  // the program, looked up on PATH
};

// Writes out/report.md and the PNG plots it links (their data and gnuplot scripts in
// out/plot-data/); returns the files written, report.md first. Throws std::runtime_error
// where gnuplot is missing or fails (with its message).
std::vector<std::string> write_report(const std::vector<Run>& runs, const Schema& schema,
                                      const ReportOptions& options);

}  // namespace ringflow::apps
