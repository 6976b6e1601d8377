// The launchers' rendezvous on node 0's TCPStore (see node_rendezvous.h).
//
// Liveness: a launcher that waits for another (its failure report, its answer to a restart, its
// reading of rank 0's result) waits only while that one lives. Every launcher adds to a counter of
// its own twice a second; one whose counter stood still for kGoneAfter, as this launcher watched
// it, is gone (killed, or its host unreachable). One that still counts is waited for, up to the
// caller's limit: its ranks may be in a long step.
#include "core/job/node_rendezvous.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/comm/guarded.h"

namespace ddpspawn {
namespace {

// The launchers' keys; the ranks' groups use "ddpspawn/attempt<k>/...".
constexpr char kPrefix[] = "ddpspawn/nodes/";

std::string Key(absl::string_view name) { return absl::StrCat(kPrefix, name); }

std::vector<uint8_t> Bytes(absl::string_view text) {
  return std::vector<uint8_t>(text.begin(), text.end());
}

std::string Text(const std::vector<uint8_t>& bytes) {
  return std::string(bytes.begin(), bytes.end());
}

std::chrono::milliseconds Millis(absl::Duration d) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

// A node's answer to the next generation: kReady, or kRefused and why.
constexpr char kReady[] = "ready";
constexpr char kRefused[] = "refused ";

// How often a launcher says it is alive, and how long a launcher that did not counts as gone
// (killed, or its host unreachable).
constexpr absl::Duration kHeartbeatEvery = absl::Milliseconds(500);
constexpr absl::Duration kGoneAfter = absl::Seconds(5);
// How long node 0 keeps the store for the others to read what it wrote last.
constexpr absl::Duration kLastWordsWait = absl::Seconds(10);

}  // namespace

// Owned by its NodeRendezvous; the launching thread uses everything but the heartbeat, which has a
// thread and a store connection of its own.
struct NodeRendezvous::Impl {
  NodeRendezvousOptions options;
  c10::intrusive_ptr<c10d::TCPStore> store;
  int generation = 0;
  // Liveness: a counter under "node<n>/beat" that grows twice a second while this launcher lives,
  // added to by a thread on a connection of its own.
  c10::intrusive_ptr<c10d::TCPStore> beat_store;
  std::thread heartbeat;
  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;  // guarded by mutex
  // Another node's last counter and when it last changed, as this one saw it.
  std::map<int, std::pair<int64_t, absl::Time>> seen_beats;

  // Waits for the heartbeat's current add, at most its store's timeout (kGoneAfter) should node 0's
  // host have vanished.
  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    wake.notify_all();
    if (heartbeat.joinable()) heartbeat.join();
  }

  std::string Where() const { return absl::StrCat(options.master_addr, ":", options.master_port); }
  // A key of generation `of` (the current one by default): each generation's failures and result
  // are its own.
  std::string GenerationKey(absl::string_view name, int of = -1) const {
    return Key(absl::StrCat("gen", of < 0 ? generation : of, "/", name));
  }
  std::string NodeKey(int node, absl::string_view name, int of = -1) const {
    return GenerationKey(absl::StrCat("node", node, "/", name), of);
  }
  bool Has(const std::string& key) { return store->check({key}); }

  // Connects the heartbeat's store here, on the launching thread (before any rank is forked), then
  // starts its thread.
  void StartHeartbeat() {
    c10d::TCPStoreOptions beat_options;
    beat_options.port = static_cast<std::uint16_t>(options.master_port);
    beat_options.isServer = false;
    beat_options.waitWorkers = false;
    beat_options.timeout = Millis(kGoneAfter);
    beat_store = c10::make_intrusive<c10d::TCPStore>(options.master_addr, beat_options);
    heartbeat = std::thread([this] {
      const std::string key = Key(absl::StrCat("node", options.node_rank, "/beat"));
      std::unique_lock<std::mutex> lock(mutex);
      while (!stopping) {
        lock.unlock();
        try {
          beat_store->add(key, 1);
        } catch (const std::exception&) {
          // A slow store, or node 0's gone: the next beat tries again.
        }
        lock.lock();
        wake.wait_for(lock, absl::ToChronoMilliseconds(kHeartbeatEvery),
                      [this] { return stopping; });
      }
    });
  }

  // Whether `node`'s launcher stopped beating for kGoneAfter, as far as this one has watched it.
  bool Gone(int node) {
    const int64_t beats = store->add(Key(absl::StrCat("node", node, "/beat")), 0);
    const absl::Time now = absl::Now();
    auto [it, first] = seen_beats.try_emplace(node, beats, now);
    if (!first && it->second.first != beats) it->second = {beats, now};
    return now - it->second.second > kGoneAfter;
  }

  // The other nodes' ranks, for messages.
  std::string Ranks(int node) const {
    const int first = node * options.nprocs_per_node;
    return absl::StrCat("ranks ", first, "..", first + options.nprocs_per_node - 1);
  }

  // Waits until `done(node)` for every other node, or that node is gone, or `wait` passed; returns
  // the nodes left undone (gone or late).
  template <typename Done>
  std::vector<int> AwaitOthers(absl::Duration wait, Done done) {
    const absl::Time deadline = absl::Now() + wait;
    std::vector<int> undone;
    for (;;) {
      undone.clear();
      bool waiting = false;
      for (int node = 0; node < options.nnodes; ++node) {
        if (node == options.node_rank || done(node)) continue;
        undone.push_back(node);
        const bool gone = Gone(node);  // watched every round
        waiting = waiting || !gone;
      }
      if (!waiting || absl::Now() >= deadline) return undone;
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
};

NodeRendezvous::NodeRendezvous(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
NodeRendezvous::~NodeRendezvous() = default;

absl::StatusOr<std::unique_ptr<NodeRendezvous>> NodeRendezvous::Join(
    const NodeRendezvousOptions& options) {
  if (options.nnodes < 2 || options.node_rank < 0 || options.node_rank >= options.nnodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("node rank ", options.node_rank, " is outside [0, ", options.nnodes, ")"));
  }
  if (options.master_addr.empty() || options.master_port <= 0 || options.master_port > 65535) {
    return absl::InvalidArgumentError(
        "a job of several nodes needs the master address and port (node 0's launcher's)");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  const bool serve = options.node_rank == 0;
  const std::string where = impl->Where();
  absl::Status connected = Guarded(
      serve ? absl::StrCat("serving the rendezvous store at ", where)
            : absl::StrCat("reaching the rendezvous at ", where, " (node 0's launcher) within ",
                           absl::FormatDuration(options.timeout)),
      [&] {
        c10d::TCPStoreOptions store_options;
        store_options.port = static_cast<std::uint16_t>(options.master_port);
        store_options.isServer = serve;
        store_options.waitWorkers = false;
        store_options.timeout = Millis(options.timeout);
        impl->store = c10::make_intrusive<c10d::TCPStore>(options.master_addr, store_options);
      });
  if (!connected.ok()) return absl::UnavailableError(connected.message());
  c10d::Store& store = *impl->store;
  std::string job;
  int64_t claims = 0;
  absl::Status registered = Guarded(absl::StrCat("the rendezvous at ", where), [&] {
    if (serve) store.set(Key("job"), Bytes(options.job));
    job = Text(store.get(Key("job")));  // waits until node 0 has said which job this is
    if (job != options.job) return;
    claims = store.add(Key(absl::StrCat("node", options.node_rank)), 1);
    if (claims == 1) store.set(Key(absl::StrCat("node", options.node_rank, "/ready")), Bytes("1"));
  });
  if (!registered.ok()) return absl::UnavailableError(registered.message());
  if (job != options.job) {
    return absl::FailedPreconditionError(absl::StrCat("the rendezvous at ", where,
                                                      " belongs to another job (", job,
                                                      "); this node runs ", options.job));
  }
  if (claims != 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("node rank ", options.node_rank, " is already taken at ", where,
                     ": give each node's launcher its own --node-rank"));
  }
  // Every node, or the names of those that never came.
  const absl::Time deadline = absl::Now() + options.timeout;
  std::vector<int> missing;
  absl::Status waited = Guarded(absl::StrCat("the rendezvous at ", where), [&] {
    do {
      missing.clear();
      for (int node = 0; node < options.nnodes; ++node) {
        if (!store.check({Key(absl::StrCat("node", node, "/ready"))})) missing.push_back(node);
      }
      if (missing.empty()) return;
      absl::SleepFor(absl::Milliseconds(20));
    } while (absl::Now() < deadline);
  });
  if (!waited.ok()) return absl::UnavailableError(waited.message());
  if (!missing.empty()) {
    return absl::DeadlineExceededError(
        absl::StrCat(missing.size() == 1 ? "node " : "nodes ", absl::StrJoin(missing, ", "),
                     " did not join the rendezvous at ", where, " within ",
                     absl::FormatDuration(options.timeout)));
  }
  absl::Status beating =
      Guarded(absl::StrCat("the rendezvous at ", where), [&] { impl->StartHeartbeat(); });
  if (!beating.ok()) return absl::UnavailableError(beating.message());
  return std::unique_ptr<NodeRendezvous>(new NodeRendezvous(std::move(impl)));
}

void NodeRendezvous::ReportFailure(absl::Time at, const std::string& message) {
  const int node = impl_->options.node_rank;
  try {
    impl_->store->setTimeout(std::chrono::seconds(2));
    impl_->store->set(impl_->NodeKey(node, "failure"),
                      Bytes(absl::StrCat(absl::ToUnixNanos(at), " ", message)));
    impl_->store->set(impl_->NodeKey(node, "ended"), Bytes("failed"));
  } catch (const std::exception&) {
    // The store went with node 0: nobody is left to tell.
  }
}

std::optional<NodeFailure> NodeRendezvous::FirstFailure(absl::Duration wait) {
  std::optional<NodeFailure> first;
  try {
    // Every other node's ranks end soon after this node's (they lose their peers); wait for those
    // whose launchers live.
    impl_->AwaitOthers(wait, [&](int node) { return impl_->Has(impl_->NodeKey(node, "ended")); });
    for (int node = 0; node < impl_->options.nnodes; ++node) {
      const std::string key = impl_->NodeKey(node, "failure");
      if (!impl_->Has(key)) continue;
      const std::string text = Text(impl_->store->get(key));
      const size_t space = text.find(' ');
      int64_t nanos = 0;
      if (space == std::string::npos || !absl::SimpleAtoi(text.substr(0, space), &nanos)) continue;
      NodeFailure failure{node, absl::FromUnixNanos(nanos), text.substr(space + 1)};
      if (!first.has_value() || failure.at < first->at) first = std::move(failure);
    }
  } catch (const std::exception&) {
    return std::nullopt;
  }
  return first;
}

absl::Status NodeRendezvous::ShareFailure(const absl::Status& status, absl::Time failed_at,
                                          absl::Duration wait, std::string* unreported) {
  const NodeRendezvousOptions& options = impl_->options;
  ReportFailure(failed_at, std::string(status.message()));
  std::optional<NodeFailure> first = FirstFailure(wait);
  std::string text;
  if (first.has_value() && first->node != options.node_rank) {
    text = absl::StrCat("the job failed on node ", first->node, " first: ", first->message,
                        "\nand then on node ", options.node_rank, ": ", status.message());
  } else {
    text = absl::StrCat("node ", options.node_rank, ": ", status.message());
  }
  unreported->clear();
  for (int node : SilentNodes()) {
    bool gone = true;
    try {
      gone = impl_->Gone(node);
    } catch (const std::exception&) {
    }
    const std::string silent =
        gone ? absl::StrCat("node ", node, " (", impl_->Ranks(node),
                            ") never said how it ended: its launcher stopped answering (it was "
                            "killed, or its host is unreachable)")
             : absl::StrCat("node ", node, " (", impl_->Ranks(node),
                            ") had not said how it ended after ", absl::FormatDuration(wait));
    absl::StrAppend(&text, "\n", silent);
    if (unreported->empty()) *unreported = silent;
  }
  return absl::Status(status.code(), text);
}

std::vector<int> NodeRendezvous::SilentNodes() {
  std::vector<int> silent;
  try {
    impl_->store->setTimeout(std::chrono::seconds(2));
    for (int node = 0; node < impl_->options.nnodes; ++node) {
      if (node == impl_->options.node_rank) continue;
      if (!impl_->Has(impl_->NodeKey(node, "ended"))) silent.push_back(node);
    }
  } catch (const std::exception&) {
    return {};
  }
  return silent;
}

absl::StatusOr<std::string> NodeRendezvous::Finish(absl::Duration wait, const std::string& result) {
  const NodeRendezvousOptions& options = impl_->options;
  const int self = options.node_rank;
  const std::string result_key = impl_->GenerationKey("result");
  auto failed = [&](int node) { return impl_->Has(impl_->NodeKey(node, "failure")); };
  auto another_failed = [&] {
    for (int node = 0; node < options.nnodes; ++node) {
      if (node != self && failed(node)) return true;
    }
    return false;
  };
  std::string from_node0;
  bool got_result = false;
  bool node0_gone = false;
  bool failure = false;
  absl::Status finished =
      Guarded(self == 0 ? std::string("handing rank 0's result to the other nodes")
                        : std::string("waiting for rank 0's result from node 0's launcher"),
              [&] {
                impl_->store->setTimeout(std::chrono::seconds(2));
                // Said first, so that another node whose ranks fail now waits for this one's word,
                // not for its result.
                impl_->store->set(impl_->NodeKey(self, "ended"), Bytes("ok"));
                if (self == 0) {
                  impl_->store->set(result_key, Bytes(result));
                  // The store outlives the others' reading of the result.
                  impl_->AwaitOthers(wait, [&](int node) {
                    return impl_->Has(impl_->NodeKey(node, "received")) || failed(node);
                  });
                  failure = another_failed();
                  return;
                }
                const absl::Time deadline = absl::Now() + wait;
                for (;;) {
                  got_result = impl_->Has(result_key);
                  failure = !got_result && another_failed();
                  if (got_result || failure || absl::Now() >= deadline) break;
                  node0_gone = impl_->Gone(0);
                  if (node0_gone) break;
                  absl::SleepFor(absl::Milliseconds(20));
                }
                if (got_result) {
                  from_node0 = Text(impl_->store->get(result_key));
                  impl_->store->set(impl_->NodeKey(self, "received"), Bytes("1"));
                }
              });
  if (!finished.ok()) {
    // Node 0's own result stands: the others learn from their own errors.
    if (self == 0) return result;
    return absl::UnavailableError(finished.message());
  }
  if (failure) {
    std::optional<NodeFailure> first = FirstFailure(wait);
    return absl::AbortedError(absl::StrCat(
        "the job failed on node ", first.has_value() ? first->node : -1,
        " after this node's ranks ended: ", first.has_value() ? first->message : "(unread)"));
  }
  if (self == 0) return result;
  if (got_result) return from_node0;
  if (node0_gone) {
    return absl::UnavailableError(
        "node 0's launcher stopped answering before it handed over rank 0's result (it was "
        "killed, or its host is unreachable)");
  }
  return absl::DeadlineExceededError(
      absl::StrCat("node 0 did not hand over rank 0's result within ", absl::FormatDuration(wait)));
}

absl::StatusOr<std::string> NodeRendezvous::Restart(
    const std::string& resume_from,
    const std::function<std::string(const std::string& resume_from)>& refusal) {
  const NodeRendezvousOptions& options = impl_->options;
  const int self = options.node_rank;
  const int next = impl_->generation + 1;
  c10d::Store& store = *impl_->store;
  auto answer_key = [&](int node) { return impl_->NodeKey(node, "answer", next); };
  std::string resume;
  std::vector<int> silent;
  std::vector<std::string> refused;
  absl::Status agreed = Guarded(
      absl::StrCat("restarting with the other nodes through the rendezvous at ", impl_->Where()),
      [&] {
        impl_->store->setTimeout(std::chrono::seconds(2));
        const std::string resume_key = impl_->GenerationKey("resume_from", next);
        if (self == 0) store.set(resume_key, Bytes(resume_from));
        // Node 0's choice, unless it declined (or is gone).
        const absl::Time deadline = absl::Now() + options.timeout;
        while (!impl_->Has(resume_key) && !impl_->Has(answer_key(0)) && !impl_->Gone(0) &&
               absl::Now() < deadline) {
          absl::SleepFor(absl::Milliseconds(20));
        }
        std::string why_not;
        if (impl_->Has(resume_key)) {
          resume = Text(store.get(resume_key));
          why_not = refusal(resume);
        } else if (impl_->Has(answer_key(0))) {
          // Node 0 declined: its answer below names why.
        } else {
          why_not = absl::StrCat(
              "node 0 did not name the checkpoint to continue from (",
              impl_->Gone(0) ? "its launcher stopped answering"
                             : absl::StrCat(absl::FormatDuration(options.timeout), " passed"),
              ")");
        }
        if (!why_not.empty()) {
          refused.push_back(absl::StrCat("node ", self, " does not restart: ", why_not));
        }
        if (!why_not.empty() || impl_->Has(resume_key)) {
          store.set(answer_key(self),
                    Bytes(why_not.empty() ? kReady : absl::StrCat(kRefused, why_not)));
        }
        // Every other node's answer; the first refusal ends the wait.
        silent = impl_->AwaitOthers(options.timeout, [&](int node) {
          if (!refused.empty()) return true;
          if (!impl_->Has(answer_key(node))) return false;
          const std::string answer = Text(store.get(answer_key(node)));
          if (answer != kReady) {
            refused.push_back(absl::StrCat("node ", node, " does not restart: ",
                                           absl::string_view(answer).substr(strlen(kRefused))));
          }
          return true;
        });
        if (!refused.empty()) silent.clear();
        store.set(impl_->NodeKey(self, "concluded", next), Bytes("1"));
        // Node 0 keeps the store until the others have read what they need.
        if (self == 0) {
          impl_->AwaitOthers(kLastWordsWait, [&](int node) {
            return impl_->Has(impl_->NodeKey(node, "concluded", next));
          });
        }
      });
  if (!agreed.ok()) return absl::UnavailableError(agreed.message());
  if (!refused.empty()) return absl::FailedPreconditionError(absl::StrJoin(refused, "; "));
  if (!silent.empty()) {
    return absl::DeadlineExceededError(
        absl::StrCat(silent.size() == 1 ? "node " : "nodes ", absl::StrJoin(silent, ", "),
                     " did not say whether they restart (the launcher stopped answering, or ",
                     absl::FormatDuration(options.timeout), " passed)"));
  }
  impl_->generation = next;
  return resume;
}

void NodeRendezvous::DeclineRestart(const std::string& why) {
  const int self = impl_->options.node_rank;
  const int next = impl_->generation + 1;
  try {
    impl_->store->setTimeout(std::chrono::seconds(2));
    impl_->store->set(impl_->NodeKey(self, "answer", next), Bytes(absl::StrCat(kRefused, why)));
    impl_->store->set(impl_->NodeKey(self, "concluded", next), Bytes("1"));
    // Node 0 keeps the store until the others have read why.
    if (self == 0) {
      impl_->AwaitOthers(kLastWordsWait, [&](int node) {
        return impl_->Has(impl_->NodeKey(node, "concluded", next)) ||
               impl_->Has(impl_->NodeKey(node, "answer", next));
      });
    }
  } catch (const std::exception&) {
    // The store went with node 0: nobody is left to tell.
  }
}

int NodeRendezvous::generation() const { return impl_->generation; }

}  // namespace ddpspawn
