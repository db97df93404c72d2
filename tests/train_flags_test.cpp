// apps/train's flags as users of PyTorch's ImageNet example and of torchrun expect them:
// --version against what the system and the build say, --config files, --max-iters and
// what the epoch line reports, the progress line with or without a terminal, --quiet, the
// rank prefix of error lines, the metrics header and wall times, the short aliases,
// --optimizer's names, --memory-format, and --weights / --export-weights / --evaluate round trips (the
// comparison with PyTorch and torchvision is tests/weights_test.py's).
#include <doctest/doctest.h>

#include <oneapi/dnnl/dnnl_version.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app_run.h"
#include "ringflow/framework/serialize.h"

namespace {

// The lines of text that contain part.
std::vector<std::string> lines_with(const std::string& text, const std::string& part) {
  std::vector<std::string> found;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (contains(line, part)) found.push_back(line);
  return found;
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(in, line);) records.push_back(nlohmann::json::parse(line));
  return records;
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = temp_path(name);
  std::ofstream(path) << text;
  return path;
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The flags of /proc/cpuinfo's first processor, as the kernel reports them.
std::set<std::string> cpu_flags() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string w; words >> w;) flags.insert(w);
    return flags;
  }
  return {};
}

std::string host_name() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

// One short epoch on one thread, without evaluation.
const std::string kShort = " --threads 1 --epochs 1 --eval-every 0 ";

}  // namespace

TEST_CASE("train --version: version, commit, build options, the CPU's ISA, the libraries' versions") {
  const Result r = run_train("--version");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(contains(r.output, std::string("ringflow ") + RINGFLOW_PROJECT_VERSION + " (commit "));
  // The commit git names now (meson test rebuilds first, so the build saw the same).
  const Result head = run_command("git -C " RINGFLOW_SOURCE_DIR " rev-parse --short=12 HEAD");
  const std::string commit = field(r.output, "(commit ");
  if (head.status == 0) {
    CHECK(contains(commit, head.output.substr(0, 12)));
  } else {
    CHECK(commit == "unknown)");
  }
  CHECK(contains(r.output, std::string("build: ") + RINGFLOW_BUILD_TYPE_EXPECTED + ", "));
  CHECK(contains(r.output, std::string("CUDA ") + (RINGFLOW_CUDA_EXPECTED ? "on" : "off")));
  CHECK(contains(lines_with(r.output, "MPI: ").at(0), RINGFLOW_MPI_VERSION_EXPECTED));
  // oneDNN as its header says (the library loaded is the one the build found).
  CHECK(contains(r.output, "oneDNN: " + std::to_string(DNNL_VERSION_MAJOR) + "." +
                               std::to_string(DNNL_VERSION_MINOR) + "." +
                               std::to_string(DNNL_VERSION_PATCH)));
  CHECK(contains(r.output, "NCCL: ") == RINGFLOW_CUDA_EXPECTED);
  CHECK(contains(r.output, "CUDA runtime: ") == RINGFLOW_CUDA_EXPECTED);
  // The instruction sets against the kernel's flags.
  const std::set<std::string> flags = cpu_flags();
  REQUIRE(!flags.empty());
  const bool avx2 = flags.count("avx2") && flags.count("fma");
  const bool avx512 = flags.count("avx512f") && flags.count("avx512bw") && flags.count("avx512dq") &&
                      flags.count("avx512vl");
  CHECK(contains(r.output, std::string("AVX2 ") + (avx2 ? "on" : "off")));
  CHECK(contains(r.output, std::string("AVX-512 ") + (avx512 ? "on" : "off")));
  // AVX512-BF16 counts only where oneDNN may use it: not under an ONEDNN_MAX_CPU_ISA below
  // AVX512_CORE_BF16 (the *_avx2 tests' emulation of an AVX2-only CPU).
  const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
  const std::set<std::string> below_bf16 = {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2",
                                            "AVX512_CORE", "AVX512_CORE_VNNI"};
  const bool bf16 = flags.count("avx512_bf16") && !(cap && below_bf16.count(cap));
  CHECK(contains(r.output, std::string("AVX512-BF16 ") + (bf16 ? "on" : "off")));
  if (!flags.count("amx_tile")) CHECK(contains(r.output, "AMX off"));
}

TEST_CASE("train --config: a TOML or INI file sets flags, the command line overrides it") {
  const std::string ckpt = temp_path("config.safetensors");
  const std::string toml = write_file("config.toml",
                                      "# a TOML file\nmodel = \"mlp\"\nepochs = 1\nmax-iters = 6\n"
                                      "log-every = 3\neval-every = 0\noptimizer = \"adamw\"\n"
                                      "batch-size = 16\nthreads = 1\n");
  {
    const Result r = run_train("--config " + toml + " --checkpoint " + ckpt);
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(count(r.output, "Epoch [1], Iteration [") == 2);
    CHECK(contains(r.output, "Iteration [6/6], Loss: "));
    CHECK(contains(r.output, "/96 ("));  // 6 x 16 images
    CHECK(contains(r.output, "mlp ("));
    CHECK(ringflow::load_safetensors(ckpt).tensors.count("optimizer.state.0.exp_avg") == 1);  // adamw
  }
  {  // the command line wins over the file
    const Result r = run_train("--config " + toml + " --max-iters 4 -b 8 --optimizer sgd --checkpoint " + ckpt);
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(contains(r.output, "Iteration [3/4], Loss: "));
    CHECK(contains(r.output, "/32 ("));  // 4 x 8 images
    CHECK(ringflow::load_safetensors(ckpt).tensors.count("optimizer.state.0.momentum_buffer") == 1);
  }
  {  // INI: a [default] section, ';' comments
    const std::string ini = write_file("config.ini", "; an INI file\n[default]\nmodel=mlp\nmax-iters=2\n"
                                                     "log-every=2\nquiet=true\n");
    const Result r = run_train("--config " + ini + kShort);
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(contains(r.output, "/64 ("));  // 2 x 32
    CHECK(!contains(r.output, "Iteration ["));  // quiet
    std::filesystem::remove(ini);
  }
  {  // a key that is no flag, a value that does not fit, a missing file
    const std::string bad = write_file("bad.toml", "max-iter = 3\n");
    const Result r = run_train("--config " + bad);
    CHECK(r.status > 0);
    CHECK(contains(r.output, "--config: 'max-iter' is no flag"));
    const std::string worse = write_file("worse.toml", "epochs = zero\n");
    CHECK(contains(run_train("--config " + worse).output, "--epochs: not a number: zero"));
    CHECK(contains(run_train("--config /nonexistent/c.toml").output, "/nonexistent/c.toml"));
    std::filesystem::remove(bad);
    std::filesystem::remove(worse);
  }
  std::filesystem::remove(toml);
  std::filesystem::remove(ckpt);
}

TEST_CASE("train --max-iters N: N iterations per epoch, and the epoch line says which it timed") {
  const std::string metrics = temp_path("max_iters.jsonl");
  for (const int n : {1, 3}) {
    CAPTURE(n);
    std::filesystem::remove(metrics);
    const Result r = run_train("--model mlp --epochs 2 -p 1 --threads 1 --eval-every 0 --max-iters " +
                               std::to_string(n) + " --metrics " + metrics);
    INFO(r.output);
    REQUIRE(r.status == 0);
    for (const int epoch : {1, 2})
      CHECK(count(r.output, "Epoch [" + std::to_string(epoch) + "], Iteration [") == n);
    if (n == 1) {
      CHECK(count(r.output, "ms for its one iteration, the first (with its one-time set-up") == 2);
      CHECK(!contains(r.output, "over 0 iterations"));
    } else {
      CHECK(count(r.output, "ms/iteration over 2 iterations after the first") == 2);
    }
    double first_step_ms = 0;
    int epochs = 0;
    for (const nlohmann::json& j : read_jsonl(metrics)) {
      if (j["type"] == "iteration" && j["iteration"] == 1) first_step_ms = j["step_ms"].get<double>();
      if (j["type"] != "epoch") continue;
      ++epochs;
      CHECK(j["timed_iterations"] == n - 1);
      CHECK(j["timing_includes_first"] == (n == 1));
      CHECK(j["ms_per_iteration"].get<double>() > 0);
      // One iteration: the epoch's figure is that iteration's.
      if (n == 1) CHECK(j["ms_per_iteration"].get<double>() == first_step_ms);
    }
    CHECK(epochs == 2);
  }
  std::filesystem::remove(metrics);
}

TEST_CASE("train: every -p iterations a loss line with speed and ETA off a terminal; on one, the live line") {
  const std::string args = "--model mlp --max-iters 4 -p 2 --epochs 2 --threads 1 --eval-every 0";
  const Result r = run_train(args);  // popen: no terminal
  INFO(r.output);
  REQUIRE(r.status == 0);
  const std::regex progress(R"(Epoch \[\d\], Iteration \[\d/4\], Loss: \d+\.\d{4} \(\d+ images/s, )"
                            R"(epoch ETA \d+ s, run ETA \d+ s\))");
  int lines = 0;
  for (const std::string& line : lines_with(r.output, "Iteration [")) {
    CAPTURE(line);
    CHECK(std::regex_match(line, progress));
    ++lines;
  }
  CHECK(lines == 4);
  CHECK(!contains(r.output, "\r"));
  // A terminal (script(1) gives the run one): the line redrawn each iteration, plain loss lines.
  const Result tty = run_command("script -qec '" + std::string(RINGFLOW_TRAIN) + " " + args + "' /dev/null");
  if (tty.status != 0 && !contains(tty.output, "Iteration [")) {
    MESSAGE("SKIP the terminal case: script(1) could not run it: " << tty.output);
    return;
  }
  INFO(tty.output);
  CHECK(contains(tty.output, "\r\033[K  [1/4] "));
  CHECK(contains(tty.output, " images/s, ETA "));
  for (const std::string& line : lines_with(tty.output, "], Loss: "))
    CHECK(!contains(line.substr(line.find("], Loss: ")), "ETA"));
}

TEST_CASE("train --quiet: the epochs' results and nothing else; the metrics as ever") {
  const std::string metrics = temp_path("quiet.jsonl");
  std::filesystem::remove(metrics);
  const Result r = run_train("--quiet --model mlp --max-iters 3 -p 1 --threads 1 --epochs 1 --metrics " + metrics);
  INFO(r.output);
  REQUIRE(r.status == 0);
  std::istringstream in(r.output);
  int lines = 0;
  for (std::string line; std::getline(in, line); ++lines) {
    CAPTURE(line);
    CHECK((line.rfind("Training set: ", 0) == 0 || line.rfind("Test set: ", 0) == 0));
  }
  CHECK(lines == 2);
  int iterations = 0;
  for (const nlohmann::json& j : read_jsonl(metrics)) iterations += j["type"] == "iteration";
  CHECK(iterations == 3);
  std::filesystem::remove(metrics);
}

TEST_CASE("train --metrics: a header record opens each run; every record has its wall_time") {
  const std::string metrics = temp_path("header.jsonl");
  std::filesystem::remove(metrics);
  const Result version = run_train("--version");
  const std::string args = "--model mlp --max-iters 2 -p 1" + kShort + "--metrics " + metrics;
  std::vector<double> started, ended;
  for (int run = 0; run < 2; ++run) {  // appended: two runs, two headers
    started.push_back(unix_now());
    const Result r = run_train(args);
    ended.push_back(unix_now());
    REQUIRE(r.status == 0);
  }
  const std::vector<nlohmann::json> records = read_jsonl(metrics);
  REQUIRE(records.size() == 8);  // per run: header, 2 iterations, epoch
  for (size_t k = 0; k < records.size(); ++k) {
    const nlohmann::json& j = records[k];
    CAPTURE(j.dump());
    const size_t run = k / 4;
    CHECK(j["type"] == (k % 4 == 0 ? "header" : k % 4 == 3 ? "epoch" : "iteration"));
    const double t = j["wall_time"].get<double>();  // Unix seconds
    CHECK(t >= started[run] - 1e-3);
    CHECK(t <= ended[run] + 1e-3);
    if (k % 4 != 0) CHECK(t >= records[k - 1]["wall_time"].get<double>());
  }
  const nlohmann::json& h = records[0];
  std::vector<std::string> argv{RINGFLOW_TRAIN};
  std::istringstream words(args);
  for (std::string w; words >> w;) argv.push_back(w);
  CHECK(h["arguments"] == argv);
  CHECK(h["version"] == RINGFLOW_PROJECT_VERSION);
  CHECK(contains(version.output, "(commit " + h["commit"].get<std::string>() + ")"));
  CHECK(h["hosts"] == std::vector<std::string>{host_name()});
  CHECK(h["world_size"] == 1);
  CHECK(h["build"]["cuda"] == static_cast<bool>(RINGFLOW_CUDA_EXPECTED));
  CHECK(h["libraries"].contains("oneDNN"));
  CHECK(h["libraries"].contains("MPI"));
  // Under mpiexec: the world, and the iteration records (written at the epoch's end) carry
  // the time they were logged, not the time they were written.
  std::filesystem::remove(metrics);
  const Result mpi = run_train_mpi(2, "--sync ddp --model mlp --epochs 1 --max-iters 2 -p 1 "
                                      "--eval-every 0 --metrics " + metrics);
  INFO(mpi.output);
  REQUIRE(mpi.status == 0);
  const std::vector<nlohmann::json> ddp = read_jsonl(metrics);
  REQUIRE(ddp.size() == 4);
  CHECK(ddp[0]["world_size"] == 2);
  CHECK(ddp[0]["hosts"] == std::vector<std::string>{host_name()});
  CHECK(ddp[1]["wall_time"].get<double>() < ddp[2]["wall_time"].get<double>());
  CHECK(ddp[2]["wall_time"].get<double>() <= ddp[3]["wall_time"].get<double>());
  std::filesystem::remove(metrics);
}

TEST_CASE("train: every error line a rank prints begins with its rank where there are several") {
  {  // refused by every rank
    const Result r = run_train_mpi(2, "--max-iters 1");
    INFO(r.output);
    CHECK(count(r.output, "[rank 0] train: --sync none trains one process") == 1);
    CHECK(count(r.output, "[rank 1] train: --sync none trains one process") == 1);
  }
  {  // a bad flag: CLI11's lines too
    const Result r = run_train_mpi(2, "--batch-size -3");
    INFO(r.output);
    CHECK(count(r.output, "[rank 1] --batch-size: must be > 0, got -3") == 1);
    CHECK(count(r.output, "[rank 0] Run with --help for more information.") == 1);
  }
  {  // one process: no prefix
    const Result r = run_train("--batch-size -3");
    CHECK(!contains(r.output, "[rank"));
  }
  // A message of several lines: --weights of another model (the mlp's weights into the
  // small CNN) lists what is missing and what is extra, each line with its rank.
  const std::string weights = temp_path("mlp_weights.safetensors");
  REQUIRE(run_train("--model mlp --max-iters 1" + kShort + "--export-weights " + weights).status == 0);
  const Result r = run_train_mpi(2, "--sync ddp --model small_cnn --weights " + weights);
  INFO(r.output);
  CHECK(r.status > 0);
  for (const std::string rank : {"0", "1"}) {
    CHECK(count(r.output, "[rank " + rank + "] train: --weights " + weights + ": load_state_dict into SmallCnn:") == 1);
    CHECK(count(r.output, "[rank " + rank + "]   missing keys: conv1.weight, conv1.bias, bn1.weight") == 1);
    CHECK(count(r.output, "[rank " + rank + "]   unexpected keys: fc1.bias, fc1.weight") == 1);
  }
  std::filesystem::remove(weights);
}

TEST_CASE("train: PyTorch ImageNet example's short flags; --optimizer's names") {
  {
    const Result r = run_train("--model mlp -b 8 -j 0 -p 2 --wd 0.0001 --learning-rate 0.01 "
                               "--max-iters 4" + kShort);
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(count(r.output, "], Loss: ") == 2);  // -p 2 of 4
    CHECK(contains(r.output, "/32 ("));        // -b 8 x 4
    const Result print_freq = run_train("--model mlp --print-freq 4 --max-iters 4" + kShort);
    CHECK(count(print_freq.output, "], Loss: ") == 1);
  }
  const Result help = run_train("--help");
  CHECK(contains(help.output, "--optimizer ENUM:{sgd,adam,adamw}=sgd"));
  for (const char* flag : {"-b,--batch-size", "-j,--workers", "-p,--log-every,--print-freq",
                           "-e,--evaluate", "--weight-decay,--wd", "--lr,--learning-rate",
                           "--label-smoothing", "--clip-grad-norm", "--weights", "--export-weights",
                           "--quiet", "--config", "--version"})
    CHECK_MESSAGE(contains(help.output, flag), flag);
  for (const char* bad : {"rmsprop", "1", ""}) {
    const Result r = run_train(std::string("--optimizer '") + bad + "'");
    CHECK(r.status > 0);
    CHECK(contains(r.output, std::string("--optimizer: ") + bad + " not in {sgd,adam,adamw}"));
  }
  const std::string ckpt = temp_path("adam.safetensors");
  CHECK(run_train("--model mlp --optimizer AdamW --max-iters 1" + kShort + "--checkpoint " + ckpt).status == 0);
  CHECK(ringflow::load_safetensors(ckpt).tensors.count("optimizer.state.0.exp_avg_sq") == 1);
  const Result other = run_train("--model mlp --optimizer sgd --max-iters 1 --epochs 2 --resume " + ckpt);
  CHECK(other.status > 0);
  CHECK(contains(other.output, ckpt + "': the checkpoint is of optimizer 'adamw', not 'sgd'"));
  CHECK(run_train("--model mlp --optimizer sgd --max-iters 1 --epochs 2 --resume-model-only --resume " +
                  ckpt).status == 0);
  // A file without the optimizer's state: the library's refusal, and the flag that loads the
  // model alone.
  ringflow::SafetensorsFile file = ringflow::load_safetensors(ckpt);
  file.tensors.erase("optimizer.lr");
  ringflow::save_safetensors(ckpt, ringflow::NamedTensors(file.tensors.begin(), file.tensors.end()), file.metadata);
  const Result partial = run_train("--model mlp --optimizer adamw --max-iters 1 --epochs 2 --resume " + ckpt);
  CHECK(partial.status > 0);
  CHECK(contains(partial.output, "tensor 'optimizer.lr' is missing (--resume-model-only loads the model alone)"));
  std::filesystem::remove(ckpt);
  const Result evaluate = run_train("-e");
  CHECK(evaluate.status > 0);
  CHECK(contains(evaluate.output, "--evaluate evaluates the model of --weights FILE or --resume FILE"));
  for (const char* flag : {"--clip-grad-norm -1", "--label-smoothing 1.5"}) {
    const Result r = run_train(flag);
    CHECK(r.status > 0);
    CHECK(contains(r.output, std::string(flag).substr(0, std::string(flag).find(' ')) + ":"));
  }
}

TEST_CASE("train: options of fixed names list them in --help; the library's refusals name the flag") {
  const Result help = run_train("--help");
  for (const char* option : {"--precision ENUM:{fp32,bf16,fp16}=fp32", "--backend ENUM:{auto,mpi,nccl}=auto",
                             "--transport ENUM:{auto,shm,hybrid,tcp,mpi}=auto",
                             "--algo ENUM:{auto,ring,tree,rd,native,naive,hierarchical}=auto",
                             "--sync ENUM:{none,gather-scatter,allreduce,ddp,fedavg}=none",
                             "--launcher ENUM:{auto,mpi,env}=auto", "--conv-algo ENUM:{auto,direct}=auto",
                             "--comm-hook ENUM:{allreduce,fp16,noop}=allreduce", "--device TEXT=auto"})
    CHECK_MESSAGE(contains(help.output, option), option);
  // comm::launch_group refuses MPI point to point without an MPI launch (a TransportError of
  // the transport asked for); train says which flag asked for it.
  const Result mpi = run_command("env RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 " +
                                 std::string(RINGFLOW_TRAIN) + " --sync allreduce --launcher env "
                                 "--transport MPI" + kShort);
  INFO(mpi.output);
  CHECK(mpi.status > 0);
  CHECK(contains(mpi.output, "--transport mpi: MPI point to point needs an MPI launch"));
}

TEST_CASE("train: a RINGFLOW_CPU_LOOP_ISA it does not know is named, and the run ends non-zero") {
  const Result r = run_command("env RINGFLOW_CPU_LOOP_ISA=avx1024 " + std::string(RINGFLOW_TRAIN) + kShort);
  INFO(r.output);
  CHECK(r.status > 0);
  CHECK(contains(r.output, "RINGFLOW_CPU_LOOP_ISA='avx1024' is none of baseline, avx2, avx512"));
}

TEST_CASE("train --export-weights, --weights, --evaluate: the trained model's state_dict, evaluated again") {
  const std::string weights = temp_path("exported.safetensors"), ckpt = temp_path("trained.safetensors");
  const std::string metrics = temp_path("exported.jsonl");
  std::filesystem::remove(metrics);
  const Result trained = run_train("--max-iters 5 --threads 1 --epochs 1 --label-smoothing 0.1 "
                                   "--export-weights " + weights + " --checkpoint " + ckpt +
                                   " --metrics " + metrics);
  INFO(trained.output);
  REQUIRE(trained.status == 0);
  CHECK(contains(trained.output, "Wrote the model's weights to " + weights));
  // The file: the model's tensors under PyTorch's names, nothing else.
  const ringflow::SafetensorsFile w = ringflow::load_safetensors(weights);
  const ringflow::SafetensorsFile c = ringflow::load_safetensors(ckpt);
  CHECK(w.metadata.at("format") == "pt");
  size_t model_tensors = 0;
  for (const auto& [name, t] : c.tensors) {
    if (name.rfind("model.", 0) != 0) continue;
    ++model_tensors;
    CAPTURE(name);
    REQUIRE(w.tensors.count(name.substr(6)) == 1);
    CHECK(w.tensors.at(name.substr(6)).to_vector<double>() == t.to_vector<double>());
  }
  CHECK(w.tensors.size() == model_tensors);
  CHECK(w.tensors.count("bn1.num_batches_tracked") == 1);
  double test_loss = -1;
  for (const nlohmann::json& j : read_jsonl(metrics))
    if (j["type"] == "epoch") test_loss = j["test_loss"].get<double>();
  REQUIRE(test_loss > 0);
  // Evaluated from the weights, from the checkpoint as --weights, from --resume: the same
  // model on the same test set, so the same loss to the bit.
  for (const std::string& from : {"--weights " + weights, "--weights " + ckpt, "--resume " + ckpt}) {
    CAPTURE(from);
    std::filesystem::remove(metrics);
    const Result r = run_train("-e --threads 1 --label-smoothing 0.1 --metrics " + metrics + " " + from);
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(count(r.output, "Test set: Average loss: ") == 1);
    CHECK(!contains(r.output, "Iteration ["));
    const std::vector<nlohmann::json> records = read_jsonl(metrics);
    REQUIRE(records.size() == 2);
    CHECK(records[1]["type"] == "evaluation");
    CHECK(records[1]["test_loss"].get<double>() == test_loss);
    CHECK(records[1]["test_images"] == 10000);
  }
  std::filesystem::remove(weights);
  std::filesystem::remove(ckpt);
  std::filesystem::remove(metrics);
}

TEST_CASE("train --memory-format: the same step in every layout; checkpoints in PyTorch's layout") {
  // The small CNN (conv, batch norm, relu, pooling): nchw, nhwc and auto (nhwc on the cpu)
  // train alike, and their checkpoints hold the same tensors, in PyTorch's (N, C, H, W) order.
  // Synthetic (normal) images: Fashion-MNIST's flat regions make max-pool ties, which rounding
  // in the last bit breaks one way or the other in each layout.
  std::map<std::string, ringflow::SafetensorsFile> saved;
  for (const std::string format : {"nchw", "nhwc", "auto"}) {
    const std::string ckpt = temp_path("memory_format_" + format + ".safetensors");
    const Result r = run_train("--model small_cnn --dataset synthetic -b 16 -j 0 --max-iters 3 --seed 3 --memory-format " + format +
                               kShort + "--checkpoint " + ckpt);
    INFO(r.output);
    REQUIRE(r.status == 0);
    saved.emplace(format, ringflow::load_safetensors(ckpt));
    std::filesystem::remove(ckpt);
  }
  const auto& want = saved.at("nchw").tensors;
  for (const std::string format : {"nhwc", "auto"}) {
    const auto& got = saved.at(format).tensors;
    REQUIRE(got.size() == want.size());
    for (const auto& [name, t] : want) {
      CAPTURE(format);
      CAPTURE(name);
      REQUIRE(got.count(name) == 1);
      const std::vector<double> a = got.at(name).to_vector<double>(), b = t.to_vector<double>();
      REQUIRE(a.size() == b.size());
      double worst = 0, scale = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        worst = std::max(worst, std::fabs(a[i] - b[i]));
        scale = std::max(scale, std::fabs(b[i]));
      }
      CHECK(worst <= 1e-4 * std::max(scale, 1.0));
    }
  }
  const Result bad = run_train("--memory-format channels_last");
  CHECK(bad.status > 0);
  CHECK(contains(bad.output, "--memory-format: channels_last not in {auto,nchw,nhwc}"));
}

TEST_CASE("train --cuda-graphs: where a step cannot be captured, one line says why and it trains eagerly") {
  const std::string line = "cuda graphs: the step is not captured (";
  const Result cpu = run_train("--model mlp -b 8 -j 0 --max-iters 6 --device cpu --cuda-graphs" + kShort);
  INFO(cpu.output);
  CHECK(cpu.status == 0);
  CHECK(count(cpu.output, line) == 1);
  CHECK(contains(cpu.output, line + "CUDA graphs need a CUDA device, not cpu); it runs eagerly"));
  CHECK(contains(cpu.output, "Iteration [6/6]"));
  const Result accum = run_train("--model mlp -b 8 -j 0 --max-iters 2 --grad-accum 2 --cuda-graphs" + kShort);
  CHECK(accum.status == 0);
  CHECK(contains(accum.output, line + "--grad-accum: a step's micro-batches accumulate their gradients)"));
  const Result plain = run_train("--model mlp -b 8 -j 0 --max-iters 2" + kShort);
  CHECK(count(plain.output, line) == 0);
}
