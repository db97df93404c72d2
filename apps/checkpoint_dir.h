// train's checkpoint places on disk: the folder of --checkpoint-dir (one file per checkpoint,
// named by its iteration, the newest --checkpoint-keep kept) and the single file of
// --checkpoint, each checked before the first step, with the temporary files that an
// interrupted write of an earlier run left behind removed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ringflow::apps {

// DIR/checkpoint-<iteration>.safetensors (9 digits at least, so that they list in order).
// Only whole files count: a write in progress is DIR/...safetensors.tmp until its rename.
class CheckpointDir {
 public:
  explicit CheckpointDir(std::string dir) : dir_(std::move(dir)) {}
  const std::string& dir() const { return dir_; }

  std::string path_for(int64_t iteration) const;
  struct Entry {
    int64_t iteration;
    std::string path;
  };
  // The checkpoints in the folder, oldest first (none where the folder does not exist).
  std::vector<Entry> list() const;
  std::optional<Entry> newest() const;
  // Removes all but the newest `keep`; returns the paths removed.
  std::vector<std::string> prune(int keep) const;

  // Before the first step: makes the folder where missing, refuses a file in its place or a
  // folder that cannot be written (std::invalid_argument naming --checkpoint-dir), and
  // removes the temporary files of interrupted writes. Returns a log line per file removed.
  std::vector<std::string> prepare() const;

 private:
  std::string dir_;
};

// The same checks for --checkpoint FILE: not a folder, in a folder that exists and can be
// written; FILE.tmp of an interrupted write removed (its log line returned).
std::vector<std::string> prepare_checkpoint_file(const std::string& path);

}  // namespace ringflow::apps
