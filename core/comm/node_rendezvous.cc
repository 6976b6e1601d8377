// The launchers' rendezvous on node 0's TCPStore (see node_rendezvous.h).
#include "core/comm/node_rendezvous.h"

#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
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

}  // namespace

struct NodeRendezvous::Impl {
  NodeRendezvousOptions options;
  c10::intrusive_ptr<c10d::TCPStore> store;
  int generation = 0;

  std::string Where() const { return absl::StrCat(options.master_addr, ":", options.master_port); }
  // A key of generation `of` (the current one by default): each generation's
  // failures and result are its own.
  std::string GenerationKey(absl::string_view name, int of = -1) const {
    return Key(absl::StrCat("gen", of < 0 ? generation : of, "/", name));
  }
  std::string NodeKey(int node, absl::string_view name, int of = -1) const {
    return GenerationKey(absl::StrCat("node", node, "/", name), of);
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
  return std::unique_ptr<NodeRendezvous>(new NodeRendezvous(std::move(impl)));
}

void NodeRendezvous::ReportFailure(absl::Time at, const std::string& message) {
  const int node = impl_->options.node_rank;
  try {
    impl_->store->setTimeout(std::chrono::seconds(2));
    impl_->store->set(impl_->NodeKey(node, "failure"),
                      Bytes(absl::StrCat(absl::ToUnixNanos(at), " ", message)));
    impl_->store->set(impl_->NodeKey(node, "ended"), Bytes("1"));
  } catch (const std::exception&) {
    // The store went with node 0: nobody is left to tell.
  }
}

std::optional<NodeFailure> NodeRendezvous::FirstFailure(absl::Duration wait) {
  const absl::Time deadline = absl::Now() + wait;
  while (!SilentNodes().empty() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
  std::optional<NodeFailure> first;
  try {
    for (int node = 0; node < impl_->options.nnodes; ++node) {
      const std::string key = impl_->NodeKey(node, "failure");
      if (!impl_->store->check({key})) continue;
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
                                          std::string* unreported) {
  const NodeRendezvousOptions& options = impl_->options;
  ReportFailure(failed_at, std::string(status.message()));
  // The other nodes' launchers say how they ended within moments; one that
  // does not is gone.
  std::optional<NodeFailure> first = FirstFailure(absl::Seconds(3));
  std::string text;
  if (first.has_value() && first->node != options.node_rank) {
    text = absl::StrCat("the job failed on node ", first->node, " first: ", first->message,
                        "\nand then on node ", options.node_rank, ": ", status.message());
  } else {
    text = absl::StrCat("node ", options.node_rank, ": ", status.message());
  }
  unreported->clear();
  for (int node : SilentNodes()) {
    const int first_rank = node * options.nprocs_per_node;
    const std::string silent = absl::StrCat(
        "node ", node, " (ranks ", first_rank, "..", first_rank + options.nprocs_per_node - 1,
        ") never said how it ended: its launcher was killed or its host is unreachable");
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
      if (!impl_->store->check({impl_->NodeKey(node, "ended")})) silent.push_back(node);
    }
  } catch (const std::exception&) {
    return {};
  }
  return silent;
}

absl::StatusOr<std::string> NodeRendezvous::Finish(absl::Duration wait, const std::string& result) {
  const NodeRendezvousOptions& options = impl_->options;
  if (options.node_rank != 0) {
    std::string from_node0;
    absl::Status got = Guarded("waiting for rank 0's result from node 0's launcher", [&] {
      impl_->store->setTimeout(Millis(wait));
      from_node0 = Text(impl_->store->get(impl_->GenerationKey("result")));
      impl_->store->setTimeout(std::chrono::seconds(2));
      impl_->store->set(impl_->NodeKey(options.node_rank, "ended"), Bytes("1"));
    });
    if (!got.ok()) return absl::UnavailableError(got.message());
    return from_node0;
  }
  try {
    impl_->store->setTimeout(std::chrono::seconds(2));
    impl_->store->set(impl_->GenerationKey("result"), Bytes(result));
    const absl::Time deadline = absl::Now() + wait;
    for (int node = 1; node < options.nnodes; ++node) {
      const std::string key = impl_->NodeKey(node, "ended");
      while (!impl_->store->check({key}) && absl::Now() < deadline) {
        absl::SleepFor(absl::Milliseconds(20));
      }
    }
  } catch (const std::exception&) {
    // The others' launchers learn it from their own stores' errors.
  }
  return result;
}

absl::StatusOr<std::string> NodeRendezvous::Restart(
    const std::string& resume_from,
    const std::function<std::string(const std::string& resume_from)>& refusal) {
  const NodeRendezvousOptions& options = impl_->options;
  const int next = impl_->generation + 1;
  c10d::Store& store = *impl_->store;
  std::string resume;
  std::vector<int> missing;
  std::vector<std::string> refused;
  absl::Status agreed = Guarded(
      absl::StrCat("restarting with the other nodes through the rendezvous at ", impl_->Where()),
      [&] {
        impl_->store->setTimeout(std::chrono::seconds(2));
        const std::string resume_key = impl_->GenerationKey("resume_from", next);
        if (options.node_rank == 0) store.set(resume_key, Bytes(resume_from));
        // Node 0's choice, unless it declined.
        const absl::Time deadline = absl::Now() + options.timeout;
        const std::string node0_answer = impl_->NodeKey(0, "answer", next);
        while (!store.check({resume_key}) && !store.check({node0_answer}) &&
               absl::Now() < deadline) {
          absl::SleepFor(absl::Milliseconds(20));
        }
        if (store.check({resume_key})) {
          resume = Text(store.get(resume_key));
          const std::string why_not = refusal(resume);
          store.set(impl_->NodeKey(options.node_rank, "answer", next),
                    Bytes(why_not.empty() ? kReady : absl::StrCat(kRefused, why_not)));
        }
        for (int node = 0; node < options.nnodes; ++node) {
          const std::string key = impl_->NodeKey(node, "answer", next);
          while (!store.check({key}) && absl::Now() < deadline) {
            absl::SleepFor(absl::Milliseconds(20));
          }
          if (!store.check({key})) {
            missing.push_back(node);
            continue;
          }
          const std::string answer = Text(store.get(key));
          if (answer != kReady) {
            refused.push_back(absl::StrCat("node ", node, " does not restart: ",
                                           absl::string_view(answer).substr(strlen(kRefused))));
          }
        }
      });
  if (!agreed.ok()) return absl::UnavailableError(agreed.message());
  if (!refused.empty()) return absl::FailedPreconditionError(absl::StrJoin(refused, "; "));
  if (!missing.empty()) {
    return absl::DeadlineExceededError(absl::StrCat(
        missing.size() == 1 ? "node " : "nodes ", absl::StrJoin(missing, ", "),
        " did not say within ", absl::FormatDuration(options.timeout), " whether they restart"));
  }
  impl_->generation = next;
  return resume;
}

void NodeRendezvous::DeclineRestart(const std::string& why) {
  try {
    impl_->store->setTimeout(std::chrono::seconds(2));
    impl_->store->set(impl_->NodeKey(impl_->options.node_rank, "answer", impl_->generation + 1),
                      Bytes(absl::StrCat(kRefused, why)));
  } catch (const std::exception&) {
    // The store went with node 0: nobody is left to tell.
  }
}

int NodeRendezvous::generation() const { return impl_->generation; }

}  // namespace ddpspawn
