// ringflow-report: train's --metrics files as PNG plots and a one-page report.md linking
// them (apps/run_report.h), several runs side by side:
//   ringflow-report run.jsonl [other.jsonl ...] --out report/
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <exception>
#include <string>
#include <vector>

#include "ringflow/apps/run_report.h"
#include "ringflow/apps/step_metrics.h"

int main(int argc, char** argv) {
  using namespace ringflow::apps;
  CLI::App app{"Plots and a one-page report (report.md) of train's --metrics files: loss and "
               "accuracy, images/s, the phases of each iteration, communication and overlap, bytes "
               "against the closed form; several files side by side. Needs gnuplot."};
  std::vector<std::string> files;
  ReportOptions options;
  app.add_option("metrics", files, "metrics files written by train --metrics (JSON lines)")
      ->required()->check(CLI::ExistingFile);
  app.add_option("-o,--out", options.out, "folder for report.md and the plots (made where missing)")
      ->required();
  app.add_option("--gnuplot", options.gnuplot, "the gnuplot program")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    std::vector<Run> runs;
    for (const std::string& file : files)
      for (Run& run : read_runs(file)) runs.push_back(std::move(run));
    const std::vector<std::string> written = write_report(runs, step_metrics().schema, options);
    fmt::print("ringflow-report: wrote {} and {} plots\n", written.front(), written.size() - 1);
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "ringflow-report: {}\n", e.what());
    return 1;
  }
}
