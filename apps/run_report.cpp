#include "ringflow/apps/run_report.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/core.h>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace ringflow::apps {
namespace fs = std::filesystem;
namespace {

constexpr double kMissing = std::numeric_limits<double>::quiet_NaN();

// A record's figure; NaN where it has none (gnuplot leaves such points out).
double figure(const nlohmann::json& r, const std::string& key) {
  const auto it = r.find(key);
  return it != r.end() && it->is_number() ? it->get<double>() : kMissing;
}

int64_t global_iteration(const nlohmann::json& r) {
  const auto it = r.find("global_iteration");
  return it != r.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

int64_t last_global_iteration(const Run& run) {
  int64_t last = 0;
  for (const auto* records : {&run.iterations, &run.epochs})
    for (const nlohmann::json& r : *records) last = std::max(last, global_iteration(r));
  return last;
}

bool has_records(const Run& run) { return !run.iterations.empty() || !run.epochs.empty(); }

}  // namespace

std::vector<Run> read_runs(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument(fmt::format("{}: cannot open it: {}", path, std::strerror(errno)));
  std::vector<Run> runs(1);
  nlohmann::json header;  // read, not yet known to start a run or to continue one
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json r = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!r.is_object())
      throw std::invalid_argument(fmt::format("{}:{}: not a JSON object: {:.60}", path, n, line));
    const std::string type = r.value("type", "");
    if (type == "header") {
      header = std::move(r);
      continue;
    }
    if (type != "iteration" && type != "epoch") continue;
    if (!header.is_null()) {
      if (has_records(runs.back()) && global_iteration(r) <= last_global_iteration(runs.back()))
        runs.emplace_back();  // the same path given to another run
      Run& run = runs.back();
      if (run.header.is_null()) run.header = std::move(header);
      else ++run.restarts;
      header = nullptr;
    }
    (type == "iteration" ? runs.back().iterations : runs.back().epochs).push_back(std::move(r));
  }
  if (!has_records(runs.front()))
    throw std::invalid_argument(fmt::format("{}: no iteration or epoch records (train --metrics "
                                            "FILE writes them)", path));
  const std::string stem = fs::path(path).stem().string();
  for (size_t k = 0; k < runs.size(); ++k) {
    runs[k].path = path;
    runs[k].name = k == 0 ? stem : fmt::format("{}#{}", stem, k + 1);
    for (auto* records : {&runs[k].iterations, &runs[k].epochs})
      std::stable_sort(records->begin(), records->end(), [](const auto& a, const auto& b) {
        return global_iteration(a) < global_iteration(b);
      });
  }
  return runs;
}

namespace {

// A gnuplot string: single-quoted, a quote doubled.
std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    q += c;
    if (c == '\'') q += c;
  }
  q += '\'';
  return q;
}

// Runs `gnuplot script`; its error output lands in script + ".log".
void run_gnuplot(const std::string& program, const fs::path& script) {
  const std::string log = script.string() + ".log";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
  std::string script_arg = script.string(), program_arg = program;
  char* argv[] = {program_arg.data(), script_arg.data(), nullptr};
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, program.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0)
    throw std::runtime_error(fmt::format("cannot run {}: {} (Debian: apt-get install gnuplot-nox)",
                                         program, std::strerror(spawned)));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  throw std::runtime_error(fmt::format("{} failed on {}{}", program, script.string(),
                                       WIFEXITED(status) && WEXITSTATUS(status) == 127
                                           ? ": not found (Debian: apt-get install gnuplot-nox)"
                                           : ":\n" + text.str()));
}

std::string number(double x) { return std::isnan(x) ? "NaN" : fmt::format("{:.9g}", x); }

// A metric's key in `record`, by its name in the schema.
std::string key(const Schema& schema, const char* name, Records record) {
  return schema[schema.id(name)].key(record);
}

// What the report draws, made from the runs and the schema.
class Report {
 public:
  Report(const std::vector<Run>& runs, const Schema& schema, const ReportOptions& o)
      : runs_(runs), schema_(schema), o_(o), out_(fs::absolute(o.out)), data_(out_ / "plot-data") {
    for (const Metric& m : schema.metrics()) {
      if (m.part_of.empty()) continue;
      if (whole_.empty()) whole_ = m.part_of;
      if (m.part_of == whole_) phases_.push_back(&m);
    }
  }
  std::vector<std::string> write();

 private:
  using Rows = std::vector<std::vector<double>>;
  std::string data_file(const std::string& name, const Rows& rows);
  void draw(const std::string& name, int width, int height, const std::string& script);
  void section(const std::string& title, const std::string& png, const std::string& text);
  void loss_accuracy();
  void throughput();
  void phases();
  void communication();
  void bytes();
  void side_by_side();
  std::string runs_table() const;
  std::string results_table() const;
  const std::vector<nlohmann::json>& per_iteration(const Run& run) const {
    return run.iterations.empty() ? run.epochs : run.iterations;
  }
  bool distributed(const Run& run) const {
    return !run.epochs.empty() && run.epochs.back().contains("ranks");
  }

  const std::vector<Run>& runs_;
  const Schema& schema_;
  const ReportOptions& o_;
  const fs::path out_, data_;
  std::string whole_;                   // the metric the phases are parts of
  std::vector<const Metric*> phases_;   // in declaration order
  std::vector<std::string> files_;
  std::string sections_;                // report.md's plots
};

std::string Report::data_file(const std::string& name, const Rows& rows) {
  const fs::path path = data_ / (name + ".dat");
  std::ofstream f(path);
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) f << (i ? " " : "") << number(row[i]);
    f << "\n";
  }
  if (!f) throw std::runtime_error(fmt::format("cannot write {}", path.string()));
  return quoted(path.string());
}

void Report::draw(const std::string& name, int width, int height, const std::string& script) {
  const fs::path gp = data_ / (name + ".gp");
  const fs::path png = out_ / (name + ".png");
  std::ofstream f(gp);
  f << fmt::format("set terminal pngcairo size {},{} noenhanced font ',10'\nset output {}\n"
                   "set datafile missing 'NaN'\nset grid\nset key below\nset autoscale xfix\n"
                   "set offsets graph 0.03, graph 0.03, 0, 0\n",
                   width, height, quoted(png.string()))
    << script;
  f.close();
  if (!f) throw std::runtime_error(fmt::format("cannot write {}", gp.string()));
  run_gnuplot(o_.gnuplot, gp);
  files_.push_back(png.string());
}

void Report::section(const std::string& title, const std::string& png, const std::string& text) {
  sections_ += fmt::format("## {}\n\n{}\n\n![{}]({}.png)\n\n", title, text, title, png);
}

// Loss per iteration, and loss and accuracy per epoch (train solid, test dashed), a colour per run.
void Report::loss_accuracy() {
  const std::string loss = key(schema_, "loss", kIterationRecord);
  const std::string train_loss = key(schema_, "train_loss", kEpochRecord);
  const std::string train_accuracy = key(schema_, "accuracy", kEpochRecord);
  std::vector<std::string> per_iteration, epoch_loss, epoch_accuracy;
  for (size_t k = 0; k < runs_.size(); ++k) {
    const Run& run = runs_[k];
    const std::string t = quoted(run.name);
    if (!run.iterations.empty()) {
      Rows rows;
      for (const auto& r : run.iterations) rows.push_back({static_cast<double>(global_iteration(r)), figure(r, loss)});
      per_iteration.push_back(fmt::format("{} u 1:2 w l lc {} t {}", data_file(fmt::format("loss-{}", k), rows), k + 1, t));
    }
    if (run.epochs.empty()) continue;
    Rows rows;
    for (const auto& r : run.epochs)
      rows.push_back({figure(r, "epoch"), figure(r, train_loss), figure(r, "test_loss"),
                      100 * figure(r, train_accuracy), 100 * figure(r, "test_accuracy")});
    const std::string f = data_file(fmt::format("epochs-{}", k), rows);
    epoch_loss.push_back(fmt::format("{0} u 1:2 w lp pt 7 lc {1} t {2}.' train', {0} u 1:3 w lp pt 6 dt 2 lc {1} t {2}.' test'", f, k + 1, t));
    epoch_accuracy.push_back(fmt::format("{0} u 1:4 w lp pt 7 lc {1} t {2}.' train', {0} u 1:5 w lp pt 6 dt 2 lc {1} t {2}.' test'", f, k + 1, t));
  }
  const int panels = (per_iteration.empty() ? 0 : 1) + (epoch_loss.empty() ? 0 : 2);
  std::string s = fmt::format("set multiplot layout 1,{}\n", panels);
  if (!per_iteration.empty())
    s += "set title 'loss per iteration'\nset xlabel 'iteration'\nplot " + fmt::format("{}", fmt::join(per_iteration, ", ")) + "\n";
  if (!epoch_loss.empty()) {
    s += "set title 'loss per epoch'\nset xlabel 'epoch'\nset xtics 1\nplot " + fmt::format("{}", fmt::join(epoch_loss, ", ")) + "\n";
    s += "set title 'accuracy per epoch (%)'\nplot " + fmt::format("{}", fmt::join(epoch_accuracy, ", ")) + "\n";
  }
  draw("loss_accuracy", 500 * panels, 420, s + "unset multiplot\n");
  section("Loss and accuracy", "loss_accuracy",
          "The training loss of each logged iteration (the mean since the previous one, over the "
          "ranks), and per epoch the training set's (solid) and the test set's (dashed).");
}

// Images per second: each logged iteration's (lines) and each epoch's (points).
void Report::throughput() {
  const std::string key = schema_[schema_.id("images_per_s")].name;
  std::vector<std::string> plots;
  for (size_t k = 0; k < runs_.size(); ++k) {
    Rows its, epochs;
    for (const auto& r : runs_[k].iterations) its.push_back({static_cast<double>(global_iteration(r)), figure(r, key)});
    for (const auto& r : runs_[k].epochs) epochs.push_back({static_cast<double>(global_iteration(r)), figure(r, key)});
    if (!its.empty())
      plots.push_back(fmt::format("{} u 1:2 w l lc {} t {}", data_file(fmt::format("throughput-{}", k), its), k + 1, quoted(runs_[k].name)));
    if (!epochs.empty())
      plots.push_back(fmt::format("{} u 1:2 w p pt 7 ps 1.5 lc {} t {}", data_file(fmt::format("throughput-epochs-{}", k), epochs),
                                  k + 1, quoted(runs_[k].name + " (epoch)")));
  }
  draw("throughput", 1000, 420, "set title 'images per second, all ranks'\nset xlabel 'iteration'\n"
                                "set yrange [0:*]\nplot " + fmt::format("{}", fmt::join(plots, ", ")) + "\n");
  section("Throughput", "throughput",
          "Images per second over all ranks: each logged iteration's (lines) and each epoch's mean "
          "over its iterations after the first (points, at the epoch's last iteration).");
}

// Per run a panel: each logged iteration's phases stacked (ms), its whole time a line.
void Report::phases() {
  const std::string whole = schema_[schema_.id(whole_)].name;
  double top = 0;
  for (const Run& run : runs_)
    for (const auto& r : per_iteration(run)) top = std::max(top, figure(r, whole));
  const int columns = runs_.size() > 1 ? 2 : 1;
  const int rows = static_cast<int>((runs_.size() + 1) / static_cast<size_t>(columns));
  std::string s = fmt::format("set multiplot layout {},{}\nset style data histograms\n"
                              "set style histogram rowstacked\nset style fill solid 0.85 border -1\n"
                              "set boxwidth 0.8 relative\nset yrange [0:{}]\nset ylabel 'ms'\n",
                              rows, columns, number(top > 0 ? 1.1 * top : 1));
  for (size_t k = 0; k < runs_.size(); ++k) {
    const Run& run = runs_[k];
    const bool epochs = run.iterations.empty();
    Rows data;
    for (const auto& r : per_iteration(run)) {
      std::vector<double> row{epochs ? figure(r, "epoch") : static_cast<double>(global_iteration(r))};
      for (const Metric* m : phases_) row.push_back(figure(r, m->key(epochs ? kEpochRecord : kIterationRecord)));
      row.push_back(figure(r, schema_[schema_.id(whole_)].key(epochs ? kEpochRecord : kIterationRecord)));
      data.push_back(row);
    }
    const size_t stride = std::max<size_t>(1, (data.size() + 9) / 10);  // about 10 labels
    const std::string f = data_file(fmt::format("phases-{}", k), data);
    std::vector<std::string> plots;
    for (size_t p = 0; p < phases_.size(); ++p) {
      plots.push_back(fmt::format("{} u {}{} t {} lc {}", p == 0 ? f : "''", p + 2,
                                  p == 0 ? fmt::format(":xtic(int($0) % {} == 0 ? sprintf('%d', $1) : '')", stride) : "",
                                  quoted(phases_[p]->label), p + 1));
    }
    plots.push_back(fmt::format("'' u 0:{} w l lw 2 lc rgb 'black' t {}", phases_.size() + 2,
                                quoted(schema_[schema_.id(whole_)].label)));
    s += fmt::format("set title {}\nset xlabel '{}'\nplot {}\n",
                     quoted(run.name + (epochs ? ": per epoch (no iteration records)" : ": per logged iteration")),
                     epochs ? "epoch" : "iteration", fmt::join(plots, ", "));
  }
  draw("phases", columns * 700, rows * 420, s + "unset multiplot\n");
  section("Phases of each iteration", "phases",
          "Where each logged iteration's time went (the mean over the ranks, stacked), and the "
          "iteration's whole time (black); the communication bar is the time the training thread "
          "waited for it (exposed).");
}

// Exposed and total communication per iteration, and the share that computation hid.
void Report::communication() {
  const Metric& exposed = schema_[schema_.id("comm_ms")];
  const Metric& total = schema_[schema_.id("comm_total_ms")];
  const Metric& overlap = schema_[schema_.id("overlap")];
  const Metric& cpu = schema_[schema_.id("comm_cpu_ms")];
  std::vector<std::string> times, shares;
  for (size_t k = 0; k < runs_.size(); ++k) {
    const Run& run = runs_[k];
    if (!distributed(run)) continue;
    const Records record = run.iterations.empty() ? kEpochRecord : kIterationRecord;
    Rows rows;
    for (const auto& r : per_iteration(run))
      rows.push_back({static_cast<double>(global_iteration(r)), figure(r, exposed.key(record)),
                      figure(r, total.key(record)), 100 * figure(r, overlap.key(record)),
                      figure(r, cpu.key(record))});
    const std::string f = data_file(fmt::format("communication-{}", k), rows), t = quoted(run.name);
    times.push_back(fmt::format("{0} u 1:2 w lp pt 7 ps 0.5 lc {1} t {2}.' {3}', {0} u 1:3 w l dt 2 lc {1} t {2}.' {4}', "
                                "{0} u 1:5 w l dt 3 lc {1} t {2}.' {5}'",
                                f, k + 1, t, exposed.label, total.label, cpu.label));
    shares.push_back(fmt::format("{} u 1:4 w lp pt 7 ps 0.5 lc {} t {}", f, k + 1, t));
  }
  draw("communication", 1200, 420,
       fmt::format("set multiplot layout 1,2\nset xlabel 'iteration'\nset title 'communication per "
                   "iteration (ms, mean over the ranks)'\nset yrange [0:*]\nplot {}\nset title {}\n"
                   "set yrange [0:100]\nplot {}\nunset multiplot\n",
                   fmt::join(times, ", "), quoted(overlap.label + ", %"), fmt::join(shares, ", ")));
  section("Communication", "communication",
          "Per logged iteration: the time the training thread waited for communication (exposed) "
          "against the communication thread's whole time and the CPU time that thread used, and "
          "the share of the communication that backward's computation hid.");
}

// Bytes per epoch and rank as the transport counted them (points) against the closed
// forms of the collectives (dashed).
void Report::bytes() {
  std::vector<std::string> sent, received;
  for (size_t k = 0; k < runs_.size(); ++k) {
    if (!distributed(runs_[k])) continue;
    Rows rows;
    for (const auto& r : runs_[k].epochs)
      rows.push_back({figure(r, "epoch"), figure(r, "epoch_bytes_sent") / 1e6,
                      figure(r, "epoch_bytes_sent_closed_form") / 1e6,
                      figure(r, "epoch_bytes_received") / 1e6,
                      figure(r, "epoch_bytes_received_closed_form") / 1e6});
    const std::string f = data_file(fmt::format("bytes-{}", k), rows), t = quoted(runs_[k].name);
    for (auto [plots, column] : {std::pair{&sent, 2}, std::pair{&received, 4}})
      plots->push_back(fmt::format("{0} u 1:{3} w p pt 7 ps 1.5 lc {1} t {2}.' counted', "
                                   "{0} u 1:{4} w l dt 2 lw 2 lc {1} t {2}.' closed form'",
                                   f, k + 1, t, column, column + 1));
  }
  draw("bytes", 1200, 420,
       fmt::format("set multiplot layout 1,2\nset xlabel 'epoch'\nset xtics 1\nset ylabel 'MB'\n"
                   "set yrange [0:*]\nset title 'bytes sent per epoch, mean rank'\nplot {}\n"
                   "set title 'bytes received per epoch, mean rank'\nplot {}\nunset multiplot\n",
                   fmt::join(sent, ", "), fmt::join(received, ", ")));
  section("Bytes per epoch", "bytes",
          "The bytes one rank sent and received in each epoch (the mean over the ranks), as the "
          "transport counted them, against the closed forms of the collectives that ran.");
}

// The runs side by side: the last epoch's time per iteration by phase, and its images/s.
void Report::side_by_side() {
  std::ofstream f(data_ / "runs.dat");
  for (const Run& run : runs_) {
    if (run.epochs.empty()) continue;
    const nlohmann::json& e = run.epochs.back();
    f << '"' << run.name << '"';
    for (const Metric* m : phases_) f << " " << number(figure(e, m->key(kEpochRecord)));
    f << " " << number(figure(e, key(schema_, "images_per_s", kEpochRecord))) << "\n";
  }
  f.close();
  std::vector<std::string> plots;
  for (size_t p = 0; p < phases_.size(); ++p)
    plots.push_back(fmt::format("{} u {}{} t {} lc {}", p == 0 ? quoted((data_ / "runs.dat").string()) : "''",
                                p + 2, p == 0 ? ":xtic(1)" : "", quoted(phases_[p]->label), p + 1));
  draw("runs", 1200, 420,
       fmt::format("set multiplot layout 1,2\nset style data histograms\nset style fill solid 0.85 "
                   "border -1\nset boxwidth 0.7 relative\nset yrange [0:*]\nset style histogram "
                   "rowstacked\nset title 'ms per iteration, last epoch'\nplot {}\nset style "
                   "histogram clustered\nset title 'images per second, last epoch'\nplot {} u {}:xtic(1) "
                   "lc 3 notitle\nunset multiplot\n",
                   fmt::join(plots, ", "), quoted((data_ / "runs.dat").string()), phases_.size() + 2));
  section("The runs side by side", "runs",
          "Each run's last epoch: its mean time per iteration by phase, and its images per second.");
}

std::string cell(double x, const char* format, double scale = 1) {
  return std::isnan(x) ? "–" : fmt::format(fmt::runtime(format), x * scale);
}

// A markdown table cell: '|' escaped.
std::string md_escape(const std::string& s) {
  std::string e;
  for (char c : s) {
    if (c == '|') e += '\\';
    e += c;
  }
  return e;
}

// The strings of a header's array field, joined.
std::string joined(const nlohmann::json& header, const char* field, const char* separator) {
  std::vector<std::string> parts;
  if (header.is_object() && header.contains(field) && header[field].is_array())
    for (const auto& x : header[field]) parts.push_back(x.is_string() ? x.get<std::string>() : x.dump());
  return fmt::format("{}", fmt::join(parts, separator));
}

// The command line of a run: its program without the folder, and the arguments.
std::string command(const nlohmann::json& header) {
  const std::string line = joined(header, "arguments", " ");
  const size_t end = line.find(' ');
  const size_t slash = line.rfind('/', end);
  return slash == std::string::npos ? line : line.substr(slash + 1);
}

std::string Report::runs_table() const {
  std::string t = "| run | command | ranks | hosts | commit | epochs | iterations |\n"
                  "|---|---|---:|---|---|---:|---:|\n";
  for (const Run& run : runs_) {
    const nlohmann::json& h = run.header;
    const bool known = h.is_object();
    t += fmt::format("| {} | `{}` | {} | {} | {} | {} | {} |\n", md_escape(run.name),
                     md_escape(command(h)), known ? h.value("world_size", 1) : 1,
                     md_escape(joined(h, "hosts", ", ")), known ? h.value("commit", std::string()) : "",
                     run.epochs.size(), last_global_iteration(run));
  }
  return t;
}

std::string Report::results_table() const {
  std::string t = "| run | train loss | train accuracy | test loss | test accuracy | images/s | ms/iteration "
                  "| overlap | MB sent per epoch and rank (closed form) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const Run& run : runs_) {
    if (run.epochs.empty()) continue;
    const nlohmann::json& e = run.epochs.back();
    const auto f = [&](const char* name) { return figure(e, key(schema_, name, kEpochRecord)); };
    t += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", md_escape(run.name),
                     cell(f("train_loss"), "{:.4f}"), cell(f("accuracy"), "{:.1f}%", 100),
                     cell(figure(e, "test_loss"), "{:.4f}"), cell(figure(e, "test_accuracy"), "{:.1f}%", 100),
                     cell(f("images_per_s"), "{:.0f}"), cell(f("step_ms"), "{:.1f}"),
                     distributed(run) ? cell(f("overlap"), "{:.0f}%", 100) : "–",
                     distributed(run) ? cell(f("epoch_bytes_sent"), "{:.2f}", 1e-6) + " (" +
                                            cell(f("epoch_bytes_sent_closed_form"), "{:.2f}", 1e-6) + ")"
                                      : "–");
  }
  return t;
}

std::vector<std::string> Report::write() {
  fs::create_directories(data_);
  loss_accuracy();
  throughput();
  if (!phases_.empty()) phases();
  if (std::any_of(runs_.begin(), runs_.end(), [&](const Run& r) { return distributed(r); })) {
    communication();
    bytes();
  }
  if (runs_.size() > 1) side_by_side();
  const fs::path md = out_ / "report.md";
  std::ofstream f(md);
  f << "# Training report\n\n"
    << fmt::format("{} run{} from train's metrics (the last epoch's figures; plots below, their data "
                   "and gnuplot scripts in plot-data/).\n\n", runs_.size(), runs_.size() == 1 ? "" : "s")
    << runs_table() << "\n" << results_table() << "\n" << sections_;
  f.close();
  if (!f) throw std::runtime_error(fmt::format("cannot write {}", md.string()));
  files_.insert(files_.begin(), md.string());
  return files_;
}

}  // namespace

std::vector<std::string> write_report(const std::vector<Run>& runs, const Schema& schema,
                                      const ReportOptions& options) {
  if (runs.empty()) throw std::invalid_argument("no runs to report");
  return Report(runs, schema, options).write();
}

}  // namespace ringflow::apps
