// hpctrain's store interface over a torch.distributed store (c10d::Store):
// under torchrun, which starts no hpctrain launcher, the ranks meet through
// the store that init_process_group made (torchrun's TCPStore at
// MASTER_ADDR:MASTER_PORT), as torch's own gloo backend does.
//
// Waits poll c10d's check() (every 5-50 ms) until their own timeout, so every
// wait is bounded by the caller's timeout whatever the c10d store's is.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <string>
#include <vector>

#include "store/store.h"

namespace hpct::py {

class C10dStore final : public store::Store {
 public:
  // where: how messages name the store ("torch.distributed's store at host:port").
  C10dStore(c10::intrusive_ptr<c10d::Store> inner, std::string where);

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, Millis timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  std::vector<std::string> missing(const std::vector<std::string>& keys, Millis timeout) override;
  bool remove(const std::string& key) override;
  std::string where() const override { return " in " + where_; }

 private:
  c10::intrusive_ptr<c10d::Store> inner_;
  std::string where_;
};

}  // namespace hpct::py
