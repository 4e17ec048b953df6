// Key-value stores for rendezvous and control between the ranks of a job.
//
// A Store holds byte strings under string keys. Ranks use it to find each
// other (Gloo exchanges its addresses through it), to agree on small facts
// and to report failures. Three implementations share this interface:
// MemoryStore (ranks as threads of one process), FileStore (a directory all
// ranks see, e.g. NFS) and TcpStore (a server on the launcher, every message
// authenticated with the job secret).
//
// Every method is thread-safe. Every blocking method takes a timeout and, when
// it runs out, raises Timeout naming the keys it waited for.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"

namespace hpct::store {

class Store {
 public:
  virtual ~Store() = default;

  // Creates or replaces key.
  virtual void set(const std::string& key, const std::string& value) = 0;

  // Blocks until key exists, then returns its value.
  virtual std::string get(const std::string& key, Millis timeout) = 0;

  // Adds delta to the integer stored at key (0 when absent) and returns the
  // new value; atomic across all clients.
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;

  // The keys still absent after waiting up to timeout for all of them to
  // exist (Millis(0): a look, no wait); empty when every key exists. The one
  // blocking primitive that wait() and check() share.
  virtual std::vector<std::string> missing(const std::vector<std::string>& keys, Millis timeout) = 0;

  // Deletes key; true when it existed.
  virtual bool remove(const std::string& key) = 0;

  // Blocks until every key exists; Timeout naming the keys still missing.
  void wait(const std::vector<std::string>& keys, Millis timeout);

  // True when every key exists now; never blocks.
  bool check(const std::vector<std::string>& keys) { return missing(keys, Millis(0)).empty(); }

  // Where the keys live, for messages (" in /shared/store", " at the store
  // host:port"); empty for a store in this process.
  virtual std::string where() const { return {}; }

  // For a caller whose own wait must end by a deadline whatever the store's
  // transport does (a rank cut off from the launcher that reports its
  // failure, comm/gloo/failure_report.h): set_by creates or replaces key;
  // peek_by returns key's value, or nullopt when it is absent (it does not
  // wait for the key). Both return or raise Timeout (naming the key and the
  // store) by deadline.end(). The defaults call set, check and get: right
  // for stores whose calls do not wait on a network.
  virtual void set_by(const std::string& key, const std::string& value, const Deadline& deadline);
  virtual std::optional<std::string> peek_by(const std::string& key, const Deadline& deadline);
};

// Puts every key of an inner store under "prefix/", so several communicators
// or jobs can share one store.
class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> inner);
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, Millis timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  std::vector<std::string> missing(const std::vector<std::string>& keys, Millis timeout) override;
  bool remove(const std::string& key) override;
  std::string where() const override { return inner_->where(); }
  void set_by(const std::string& key, const std::string& value, const Deadline& deadline) override;
  std::optional<std::string> peek_by(const std::string& key, const Deadline& deadline) override;

 private:
  std::string full(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> full(const std::vector<std::string>& keys) const;
  std::string prefix_;
  std::shared_ptr<Store> inner_;
};

// The integer add() keeps at a key: empty is 0. False when value is not
// a whole decimal int64.
bool parse_counter(const std::string& value, std::int64_t* out);

// A printable form of a key for messages (keys may hold any bytes): bytes
// outside printable ASCII as \xNN.
std::string printable_key(const std::string& key);

// "timed out after 2000 ms waiting for store keys [a, b] (missing: b)", the
// keys printable.
std::string describe_wait(const std::vector<std::string>& keys,
                          const std::vector<std::string>& missing, Millis timeout);

}  // namespace hpct::store
