// Checkpoints: model + optimizer + position + generator round trip, strict loading with
// errors naming the file, a write killed half-way leaving the previous file loadable, and
// every kind of bad file refused with one line naming the file and the tensor or key.
#include <signal.h>
#include <sys/stat.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "ringflow/models/registry.h"
#include "ringflow/tests/testing.h"

using namespace ringflow;
namespace fs = std::filesystem;

namespace {

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("ringflow_ckpt_" + std::to_string(getpid()) + "_" + name)).string();
}

// One SGD step with momentum on a batch, so that the optimizer has state.
void train_step(nn::Module& model, optim::Optimizer& opt, uint64_t seed) {
  Generator gen(seed);
  const Tensor x = randn({4, 1, 28, 28}, &gen);
  const Tensor y = from_vector({1, 3, 5, 7}, {4}, DType::i64);
  cross_entropy(model(x), y).backward();
  opt.step();
  opt.zero_grad();
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         a.to_vector<double>() == b.to_vector<double>();
}

}  // namespace

TEST_CASE("a checkpoint restores model, optimizer, position and generator exactly") {
  manual_seed(3);
  auto model = models::make_model("small_cnn");
  optim::SGD sgd(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  train_step(*model, sgd, 1);
  const std::string path = temp_path("roundtrip.safetensors");
  save_checkpoint(path, *model, sgd, {2, 17}, {{"model", "small_cnn"}});
  const uint64_t counter = default_generator().counter();

  manual_seed(99);  // a different model, optimizer state and generator
  auto other = models::make_model("small_cnn");
  optim::SGD other_sgd(other->parameters(), {.lr = 0.1, .momentum = 0.9});
  train_step(*other, other_sgd, 2);
  const Checkpoint c = load_checkpoint(path, *other, other_sgd);
  CHECK(c.position.epoch == 2);
  CHECK(c.position.iteration == 17);
  CHECK(c.info.at("model") == "small_cnn");
  CHECK(default_generator().seed() == 3);
  CHECK(default_generator().counter() == counter);
  const auto a = model->state_dict(), b = other->state_dict();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK_MESSAGE(same_bits(a[i].second, b[i].second), a[i].first);
  const auto sa = sgd.state_dict(), sb = other_sgd.state_dict();
  for (const auto& [name, t] : sa) CHECK_MESSAGE(same_bits(t, sb.at(name)), name);

  // The same next step from both.
  train_step(*model, sgd, 5);
  train_step(*other, other_sgd, 5);
  CHECK(same_bits(model->parameters()[0], other->parameters()[0]));
  fs::remove(path);
}

TEST_CASE("loading a checkpoint of another model names the file and the keys") {
  auto model = models::make_model("small_cnn");
  optim::SGD sgd(model->parameters(), {.lr = 0.1});
  const std::string path = temp_path("mlp.safetensors");
  auto mlp = models::make_model("mlp");
  optim::SGD mlp_sgd(mlp->parameters(), {.lr = 0.1});
  save_checkpoint(path, *mlp, mlp_sgd, {1, 1});
  CHECK_THROWS_WITH(load_checkpoint(path, *model, sgd), doctest::Contains(path.c_str()));
  CHECK_THROWS_WITH(load_checkpoint(path, *model, sgd), doctest::Contains("conv1.weight"));
  CHECK_THROWS_WITH(load_checkpoint(temp_path("missing.safetensors"), *model, sgd),
                    doctest::Contains("missing.safetensors"));
  fs::remove(path);
}

// Run by the next test in a child process (fork() would copy a process whose OpenMP
// threads do not exist in the child): rewrites the checkpoint at $RINGFLOW_CKPT_PATH with
// a large tensor, over and over, until killed.
TEST_CASE("checkpoint rewriter (child process of the next test)" * doctest::skip()) {
  const char* path = std::getenv("RINGFLOW_CKPT_PATH");
  REQUIRE(path != nullptr);
  NamedTensors big{{"model.big", zeros({64, 1024, 1024})}};
  for (;;) save_safetensors(path, big, {{"epoch", "2"}});
}

TEST_CASE("a write killed half-way leaves the previous checkpoint loadable") {
  auto model = models::make_model("small_cnn");
  optim::SGD sgd(model->parameters(), {.lr = 0.1});
  const std::string path = temp_path("killed.safetensors");
  save_checkpoint(path, *model, sgd, {1, 10});

  // The child is killed while a rewrite is in progress (its temporary file exists).
  const std::string env = "RINGFLOW_CKPT_PATH=" + path;
  const char* argv[] = {"checkpoint_test", "--no-skip", "-tc=checkpoint rewriter*", nullptr};
  const char* envp[] = {env.c_str(), nullptr};
  pid_t child = 0;
  REQUIRE(posix_spawn(&child, "/proc/self/exe", nullptr, nullptr, const_cast<char**>(argv),
                      const_cast<char**>(envp)) == 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!fs::exists(path + ".tmp") && std::chrono::steady_clock::now() < deadline) usleep(100);
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  REQUIRE_MESSAGE(fs::exists(path + ".tmp"), "the child never started a rewrite");
  CHECK(WIFSIGNALED(status));

  // Whatever moment the kill hit, the file at `path` is a whole checkpoint: either the
  // first one, or (if a rewrite had completed) a whole rewrite, never a torn one.
  const SafetensorsFile f = load_safetensors(path);
  if (f.tensors.count("model.big")) {
    CHECK(f.tensors.at("model.big").numel() == 64 * 1024 * 1024);
  } else {
    CHECK(load_checkpoint(path, *model, sgd).position.iteration == 10);
  }
  fs::remove(path);
  fs::remove(path + ".tmp");
}

// ---------------------------------------------------------------- refusing bad checkpoints

namespace {

// A safetensors file with this header and data, bytes as given (no checksum).
void write_raw(const std::string& path, const std::string& header, const std::string& data) {
  std::string json = header;
  json.append((8 - json.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary);
  const uint64_t len = json.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(len >> (8 * i)));
  out << json << data;
}

// The file rewritten by `edit` (tensors and metadata), saved again as a whole.
template <class Edit>
void rewrite(const std::string& path, Edit edit) {
  SafetensorsFile f = load_safetensors(path);
  edit(f.tensors, f.metadata);
  NamedTensors tensors(f.tensors.begin(), f.tensors.end());
  save_safetensors(path, tensors, f.metadata);
}

struct Trained {
  nn::ModulePtr model = models::make_model("small_cnn");
  optim::SGD sgd{model->parameters(), {.lr = 0.1, .momentum = 0.9}};
  Trained() { train_step(*model, sgd, 1); }
};

}  // namespace

TEST_CASE("a directory or a FIFO is refused at once, naming it") {
  Trained t;
  const std::string dir = temp_path("dir.safetensors"), fifo = temp_path("fifo.safetensors");
  fs::create_directory(dir);
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(load_checkpoint(dir, *t.model, t.sgd), doctest::Contains((dir + ": not a regular file").c_str()));
  CHECK_THROWS_WITH(load_checkpoint(fifo, *t.model, t.sgd), doctest::Contains((fifo + ": not a regular file").c_str()));
  fs::remove(dir);
  fs::remove(fifo);
}

TEST_CASE("a shape too large to exist, and overlapping byte ranges, are refused") {
  const std::string path = temp_path("header.safetensors");
  write_raw(path, R"({"model.w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})", "");
  CHECK_THROWS_WITH(load_safetensors(path), doctest::Contains("'model.w' has shape (4611686018427387904, 4), too large"));
  write_raw(path, R"({"model.a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                  R"("model.b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
            std::string(12, '\0'));
  CHECK_THROWS_WITH(load_safetensors(path), doctest::Contains("'model.a' and 'model.b' overlap"));
  fs::remove(path);
}

TEST_CASE("flipped data bytes are found by the checksum; a file without one still loads") {
  Trained t;
  const std::string path = temp_path("flipped.safetensors");
  save_checkpoint(path, *t.model, t.sgd, {1, 1});
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-5, std::ios::end);
    const char c = static_cast<char>(f.peek());
    f.seekp(-5, std::ios::end);
    f.put(static_cast<char>(c ^ 0x40));
  }
  CHECK_THROWS_WITH(load_checkpoint(path, *t.model, t.sgd), doctest::Contains("checksum"));
  CHECK_THROWS_WITH(load_checkpoint(path, *t.model, t.sgd), doctest::Contains(path.c_str()));
  write_raw(path, R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0'));
  CHECK(load_safetensors(path).tensors.at("x").item() == 0.0);
  fs::remove(path);
}

TEST_CASE("a tensor of another dtype than the model's is refused, not converted") {
  Trained t;
  const std::string path = temp_path("dtype.safetensors");
  save_checkpoint(path, *t.model, t.sgd, {1, 1});
  rewrite(path, [](auto& tensors, auto&) {
    tensors["model.conv1.weight"] = tensors["model.conv1.weight"].to(DType::f64);
  });
  CHECK_THROWS_WITH(load_checkpoint(path, *t.model, t.sgd),
                    doctest::Contains("'model.conv1.weight' is f64 but the model holds f32"));
  rewrite(path, [](auto& tensors, auto&) {
    tensors["model.conv1.weight"] = tensors["model.conv1.weight"].to(DType::f32);
    tensors["optimizer.state.0.momentum_buffer"] = tensors["optimizer.state.0.momentum_buffer"].to(DType::f64);
  });
  CHECK_THROWS_WITH(load_checkpoint(path, *t.model, t.sgd),
                    doctest::Contains("'state.0.momentum_buffer': dtype f64 but parameter 0 is f32"));
  fs::remove(path);
}

TEST_CASE("a missing optimizer tensor is refused unless the model alone is asked for") {
  Trained t;
  const std::string path = temp_path("partial.safetensors");
  save_checkpoint(path, *t.model, t.sgd, {3, 30});
  rewrite(path, [](auto& tensors, auto&) { tensors.erase("optimizer.state.2.momentum_buffer"); });
  CHECK_THROWS_WITH_AS(load_checkpoint(path, *t.model, t.sgd),
                       doctest::Contains("'optimizer.state.2.momentum_buffer' is missing"),
                       OptimizerStateMissing);
  rewrite(path, [](auto& tensors, auto&) { tensors.erase("optimizer.lr"); });
  CHECK_THROWS_WITH_AS(load_checkpoint(path, *t.model, t.sgd),
                       doctest::Contains("'optimizer.lr' is missing"), OptimizerStateMissing);

  // Model only: the weights load, the optimizer keeps its own state.
  Trained other;
  const auto before = other.sgd.state_dict();
  const Checkpoint c = load_checkpoint(path, *other.model, other.sgd, {.model_only = true});
  CHECK(c.position.epoch == 3);
  CHECK(same_bits(other.model->parameters()[0], t.model->parameters()[0]));
  for (const auto& [name, v] : other.sgd.state_dict()) CHECK(same_bits(v, before.at(name)));
  fs::remove(path);
}

TEST_CASE("metadata that is not a whole number is refused, naming the key and the file") {
  Trained t;
  const std::string path = temp_path("meta.safetensors");
  for (const char* epoch : {"1x", "-1", ""}) {
    CAPTURE(epoch);
    save_checkpoint(path, *t.model, t.sgd, {1, 1});
    rewrite(path, [&](auto&, auto& metadata) { metadata["epoch"] = epoch; });
    CHECK_THROWS_WITH(load_checkpoint(path, *t.model, t.sgd),
                      doctest::Contains(("metadata 'epoch' = '" + std::string(epoch) + "' is not a non-negative integer").c_str()));
    CHECK_THROWS_WITH(load_checkpoint(path, *t.model, t.sgd), doctest::Contains(path.c_str()));
  }
  fs::remove(path);
}

// ---------------------------------------------------------------- positions, coverage, escapes

namespace {

// The file at `path` with its header edited by `edit` (the JSON object) and written back with
// the same data: how a file from elsewhere, or a hand-edited one, looks.
template <class Edit>
void edit_header(const std::string& path, Edit edit) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t len = 0;
  for (int i = 0; i < 8; ++i) len |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, len));
  edit(header);
  write_raw(path, header.dump(), bytes.substr(8 + len));
}

}  // namespace

TEST_CASE("a position out of range is refused, naming the file and the key") {
  Trained t;
  const std::string path = temp_path("range.safetensors");
  const struct {
    const char *key, *value, *message;
  } cases[] = {
      {"epoch", "9223372036854775808", "metadata 'epoch' = '9223372036854775808' is out of range (at most 2147483647)"},
      {"epoch", "18446744073709551615", "metadata 'epoch' = '18446744073709551615' is out of range (at most 2147483647)"},
      {"epoch", "18446744073709551616", "metadata 'epoch' = '18446744073709551616' is out of range"},
      {"epoch", "2147483648", "metadata 'epoch' = '2147483648' is out of range (at most 2147483647)"},
      {"iteration", "9223372036854775807", "metadata 'iteration' = '9223372036854775807' is out of range (at most 9007199254740992)"},
      {"epoch_iteration", "31", "metadata 'epoch_iteration' = '31' is out of range (at most 30)"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.value);
    save_checkpoint(path, *t.model, t.sgd, {3, 30, 0});
    rewrite(path, [&](auto&, auto& metadata) { metadata[c.key] = c.value; });
    CHECK_THROWS_WITH(load_checkpoint(path, *t.model, t.sgd), doctest::Contains(c.message));
    CHECK_THROWS_WITH(load_checkpoint(path, *t.model, t.sgd), doctest::Contains(path.c_str()));
  }
  // The largest of each loads.
  save_checkpoint(path, *t.model, t.sgd, {kMaxCheckpointEpoch, kMaxCheckpointIteration, 5});
  const Checkpoint c = load_checkpoint(path, *t.model, t.sgd);
  CHECK(c.position.epoch == kMaxCheckpointEpoch);
  CHECK(c.position.iteration == kMaxCheckpointIteration);
  CHECK(c.position.epoch_iteration == 5);
  fs::remove(path);
}

TEST_CASE("an optimizer state missing a parameter's tensor is refused, also where its list was edited") {
  Trained t;
  const std::string path = temp_path("coverage.safetensors");
  const auto drop_state_2 = [](auto& tensors, auto& metadata) {
    tensors.erase("optimizer.state.2.momentum_buffer");
    std::string& list = metadata["ringflow.optimizer_tensors"];
    const std::string entry = "state.2.momentum_buffer,";
    REQUIRE(list.find(entry) != std::string::npos);
    list.erase(list.find(entry), entry.size());
  };
  save_checkpoint(path, *t.model, t.sgd, {1, 1});
  rewrite(path, drop_state_2);
  const std::string name = t.model->named_parameters()[2].first;
  CHECK_THROWS_WITH(load_checkpoint(path, *t.model, t.sgd),
                    doctest::Contains(("parameter 2 (" + name + ") has no optimizer state: tensor "
                                       "'optimizer.state.2.momentum_buffer' is missing").c_str()));
  // A file without the coverage lists (an older writer): state for all parameters or none.
  save_checkpoint(path, *t.model, t.sgd, {1, 1});
  rewrite(path, [&](auto& tensors, auto& metadata) {
    drop_state_2(tensors, metadata);
    metadata.erase("ringflow.optimizer_parameters");
    metadata.erase("ringflow.optimizer_stateless");
  });
  CHECK_THROWS_WITH(load_checkpoint(path, *t.model, t.sgd), doctest::Contains("parameter 2 ("));
  // State of another parameter count.
  save_checkpoint(path, *t.model, t.sgd, {1, 1});
  rewrite(path, [](auto&, auto& metadata) { metadata["ringflow.optimizer_parameters"] = "7"; });
  CHECK_THROWS_WITH(load_checkpoint(path, *t.model, t.sgd),
                    doctest::Contains("the optimizer state is of 7 parameters, but this optimizer has"));
  fs::remove(path);
}

TEST_CASE("a parameter that never had a gradient has no optimizer state, and that loads") {
  manual_seed(4);
  auto model = models::make_model("small_cnn");
  optim::SGD sgd(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  Generator gen(1);
  cross_entropy((*model)(randn({4, 1, 28, 28}, &gen)), from_vector({1, 3, 5, 7}, {4}, DType::i64)).backward();
  model->parameters()[1].set_grad(Tensor());  // as a parameter the loss does not reach
  sgd.step();
  REQUIRE(sgd.state_dict().count("state.1.momentum_buffer") == 0);
  const std::string path = temp_path("unused.safetensors");
  save_checkpoint(path, *model, sgd, {1, 1});
  Trained other;
  load_checkpoint(path, *other.model, other.sgd);
  const auto loaded = other.sgd.state_dict();
  CHECK(loaded.count("state.1.momentum_buffer") == 0);
  CHECK(same_bits(loaded.at("state.0.momentum_buffer"), sgd.state_dict().at("state.0.momentum_buffer")));
  fs::remove(path);
}

TEST_CASE("step counts and the learning rate in optimizer and scaler state are checked") {
  manual_seed(5);
  auto model = models::make_model("mlp");
  optim::Adam adam(model->parameters(), {.lr = 0.01});
  cross_entropy((*model)(randn({4, 1, 28, 28})), from_vector({1, 3, 5, 7}, {4}, DType::i64)).backward();
  adam.step();
  const std::string path = temp_path("adam.safetensors");
  for (double step : {-1.0, 1.5, 1e300}) {
    CAPTURE(step);
    save_checkpoint(path, *model, adam, {1, 1});
    rewrite(path, [&](auto& tensors, auto&) {
      tensors["optimizer.state.0.step"] = scalar_tensor(step, DType::f64);
    });
    CHECK_THROWS_WITH(load_checkpoint(path, *model, adam),
                      doctest::Contains("optimizer state 'state.0.step': "));
    CHECK_THROWS_WITH(load_checkpoint(path, *model, adam), doctest::Contains("is not a step count"));
  }
  save_checkpoint(path, *model, adam, {1, 1});
  rewrite(path, [](auto& tensors, auto&) {
    tensors["optimizer.lr"] = scalar_tensor(std::numeric_limits<double>::quiet_NaN(), DType::f64);
  });
  CHECK_THROWS_WITH(load_checkpoint(path, *model, adam), doctest::Contains("optimizer state 'lr': nan is not a learning rate"));
  fs::remove(path);

  optim::GradScaler scaler;
  for (double count : {1e300, 2.5}) {
    CAPTURE(count);
    CHECK_THROWS_WITH(scaler.load_state_dict({{"scale", 1024}, {"growth_tracker", count}, {"skipped_steps", 0}}),
                      doctest::Contains("'growth_tracker' is"));
    CHECK_THROWS_WITH(scaler.load_state_dict({{"scale", 1024}, {"growth_tracker", 0}, {"skipped_steps", count}}),
                      doctest::Contains("not a step count"));
  }
}

TEST_CASE("a checkpoint of another model is named as such before any tensor is compared") {
  auto mlp = models::make_model("mlp");
  optim::SGD mlp_sgd(mlp->parameters(), {.lr = 0.1});
  const std::string path = temp_path("other_model.safetensors");
  save_checkpoint(path, *mlp, mlp_sgd, {1, 1}, {{"model", "mlp"}, {"dataset", "fashion-mnist"}});
  Trained t;
  try {
    load_checkpoint(path, *t.model, t.sgd, {.expect_info = {{"model", "small_cnn"}, {"dataset", "fashion-mnist"}}});
    FAIL("loaded");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()) == "checkpoint '" + path + "': the checkpoint is of model 'mlp', not 'small_cnn'");
  }
  // Info the file does not hold is no reason to refuse it.
  CHECK_NOTHROW(load_checkpoint(path, *mlp, mlp_sgd, {.expect_info = {{"model", "mlp"}, {"seed", "3"}}}));
  fs::remove(path);
}

TEST_CASE("a checkpoint without its checksum loads, with a warning naming it") {
  Trained t;
  const std::string path = temp_path("no_crc.safetensors");
  save_checkpoint(path, *t.model, t.sgd, {2, 20});
  CHECK(load_checkpoint(path, *t.model, t.sgd).warnings.empty());
  edit_header(path, [](nlohmann::json& h) { h["__metadata__"].erase("ringflow.data_crc32"); });
  const Checkpoint c = load_checkpoint(path, *t.model, t.sgd);
  CHECK(c.position.iteration == 20);
  REQUIRE(c.warnings.size() == 1);
  CHECK(c.warnings[0].find(path) != std::string::npos);
  CHECK(c.warnings[0].find("has no integrity checksum") != std::string::npos);
  fs::remove(path);
}

TEST_CASE("bytes from the file reach the messages escaped") {
  const std::string path = temp_path("escaped.safetensors");
  // Control characters in the header's strings (JSON escapes, valid UTF-8).
  write_raw(path, R"({"model.w":{"dtype":"F\u001b[2J\u0085","shape":[1],"data_offsets":[0,4]}})",
            std::string(4, '\0'));
  CHECK_THROWS_WITH(load_safetensors(path), doctest::Contains("has unsupported dtype 'F\\x1b[2J\\xc2\\x85'"));
  // Bytes that are no UTF-8: the JSON parser's excerpt of them.
  write_raw(path, "{\"model.w\xfe\x01\":{}}", "");
  try {
    load_safetensors(path);
    FAIL("loaded");
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    CHECK(what.find("bad JSON header") != std::string::npos);
    CHECK(what.find("\\xfe") != std::string::npos);
    CHECK(what.find('\xfe') == std::string::npos);
  }
  Trained t;
  save_checkpoint(path, *t.model, t.sgd, {1, 1});
  edit_header(path, [](nlohmann::json& h) {
    h["junk\u001b\u0085"] = h["optimizer.lr"];
    h.erase("optimizer.lr");
  });
  CHECK_THROWS_WITH(load_checkpoint(path, *t.model, t.sgd),
                    doctest::Contains("tensor 'junk\\x1b\\xc2\\x85' is neither model.* nor optimizer.*"));
  fs::remove(path);
}

TEST_CASE("a failed write removes its temporary file and keeps the previous checkpoint") {
  Trained t;
  const std::string path = temp_path("full.safetensors");
  save_checkpoint(path, *t.model, t.sgd, {1, 10});
  // The temporary file's name leads to a device that is always full: the write fails
  // with ENOSPC, as on a full disk that statvfs did not foresee.
  fs::create_symlink("/dev/full", path + ".tmp");
  CHECK_THROWS_WITH(save_checkpoint(path, *t.model, t.sgd, {2, 20}),
                    doctest::Contains("write failed: No space left on device"));
  CHECK(!fs::exists(fs::symlink_status(path + ".tmp")));
  CHECK(load_checkpoint(path, *t.model, t.sgd).position.iteration == 10);
  // A folder where the file is to go is refused before anything is written.
  const std::string dir = temp_path("folder.safetensors");
  fs::create_directory(dir);
  CHECK_THROWS_WITH(save_checkpoint(dir, *t.model, t.sgd, {1, 1}), doctest::Contains((dir + ": is a folder").c_str()));
  CHECK(!fs::exists(dir + ".tmp"));
  fs::remove(dir);
  fs::remove(path);
}

TEST_CASE("free space is checked before a write, naming the folder, the bytes needed and free") {
  const std::string path = temp_path("space.safetensors");
  const std::string dir = fs::path(path).parent_path().string();
  CHECK_NOTHROW(check_free_space(path, 1));
  CHECK_THROWS_WITH(check_free_space(path, uint64_t{1} << 62),
                    doctest::Contains((path + ": not enough free space in " + dir +
                                       ": the file needs 4611686018427387904 bytes (4611686018427.4 MB), ").c_str()));
  CHECK_THROWS_WITH(check_free_space(path, uint64_t{1} << 62), doctest::Contains("are free"));
}
