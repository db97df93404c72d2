// SubBootstrap: a Bootstrap over some of another bootstrap's ranks (the ranks of one host),
// so that a transport made collectively over a whole group can be made over a part of one.
// Every exchange is still one of the inner bootstrap's, over all its ranks: the ranks of
// every part must make the same exchanges at the same time (as each host's ranks do when
// every host makes its own shared-memory transport at once).
#pragma once

#include <string>
#include <vector>

#include "ringflow/comm/base/types.h"
#include "ringflow/comm/bootstrap/bootstrap.h"

namespace ringflow::comm {

class SubBootstrap final : public Bootstrap {
 public:
  // members: ranks of `inner`, the caller's among them. Borrows inner.
  SubBootstrap(Bootstrap& inner, std::vector<int> members)
      : inner_(inner),
        members_(std::move(members)),
        rank_(position_among(members_, inner.rank(), "SubBootstrap")) {}

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  std::vector<std::string> allgather(const std::string& mine) override {
    std::vector<std::string> all = inner_.allgather(mine), ours;
    ours.reserve(members_.size());
    for (int r : members_) ours.push_back(std::move(all.at(static_cast<size_t>(r))));
    return ours;
  }

 private:
  Bootstrap& inner_;
  std::vector<int> members_;
  int rank_ = 0;
};

}  // namespace ringflow::comm
