// Lets Gloo's rendezvous (gloo::rendezvous::Context::connectFullMesh) meet
// through an hpctrain Store, so Gloo ranks find each other through the same
// memory, file or TCP store that the launcher set up for the job.
//
// Every key Gloo writes is put under "gloo/" so it cannot collide with the
// keys the communicator itself keeps in the same store (see communicator.h).
//
// Blocking: get() and wait() block for at most the timeout (the one Gloo
// passes, or the adapter's default for the overloads that take none) and
// then raise hpct::Error(kTimeout) naming the missing keys; nothing waits
// forever. Thread-safe as far as the wrapped Store is (every Store is).
// The adapter shares ownership of the store.
#pragma once

#include <gloo/rendezvous/store.h>

#include <memory>
#include <string>
#include <vector>

#include "core/clock.h"
#include "store/store.h"

namespace hpct::comm {

class GlooStoreAdapter final : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(std::shared_ptr<store::Store> store, Millis default_timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  // The store key under which Gloo's key is kept ("gloo/" + key).
  static std::string store_key(const std::string& gloo_key) { return "gloo/" + gloo_key; }

 private:
  std::vector<std::string> store_keys(const std::vector<std::string>& keys) const;

  std::shared_ptr<store::Store> store_;
  Millis default_timeout_;
};

}  // namespace hpct::comm
