// Checkpoints: model + optimizer + position + generator round trip, strict loading with
// errors naming the file, and a write killed half-way leaving the previous file loadable.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

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
