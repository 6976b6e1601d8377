// Checking that each Gloo connection reaches its peer (see connection_check.h).
#include "core/comm/connection_check.h"

#include <ATen/ATen.h>
#include <sys/random.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/comm/guarded.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

// A tag no other point-to-point call of ddpspawn uses.
constexpr int kTag = 0x64647073;  // "ddps"

std::string TokenKey(int rank) { return absl::StrCat("connection_token/", rank); }

std::string Hint() {
  return "; another local process may have connected to this job's Gloo port while the group "
         "formed (Gloo's listener accepts any local connection): see docs/reliability.md";
}

}  // namespace

absl::Status CheckEveryConnection(c10d::Backend& group, c10d::Store& store, int rank,
                                  int world_size, absl::Duration deadline) {
  if (world_size < 2) return absl::OkStatus();
  uint64_t token = 0;
  if (getrandom(&token, sizeof token, 0) != static_cast<ssize_t>(sizeof token)) {
    return absl::UnavailableError(absl::StrCat("getrandom: ", std::strerror(errno)));
  }
  std::vector<uint8_t> token_bytes(sizeof token);
  std::memcpy(token_bytes.data(), &token, sizeof token);
  const std::chrono::milliseconds limit = absl::ToChronoMilliseconds(deadline);
  std::vector<at::Tensor> sent(world_size);
  std::vector<at::Tensor> received(world_size);
  std::vector<c10::intrusive_ptr<c10d::Work>> sends(world_size);
  std::vector<c10::intrusive_ptr<c10d::Work>> receives(world_size);
  RETURN_IF_ERROR(Guarded("publishing this rank's connection token", [&] {
    store.set(TokenKey(rank), token_bytes);
    for (int peer = 0; peer < world_size; ++peer) {
      if (peer == rank) continue;
      received[peer] = at::zeros({1}, at::kLong);
      std::vector<at::Tensor> into{received[peer]};
      receives[peer] = group.recv(into, peer, kTag);
    }
    for (int peer = 0; peer < world_size; ++peer) {
      if (peer == rank) continue;
      sent[peer] = at::full({1}, static_cast<int64_t>(token), at::kLong);
      std::vector<at::Tensor> from{sent[peer]};
      sends[peer] = group.send(from, peer, kTag);
    }
  }));
  for (int peer = 0; peer < world_size; ++peer) {
    if (peer == rank) continue;
    const absl::Status heard = Guarded(absl::StrCat("exchanging tokens with rank ", peer), [&] {
      receives[peer]->wait(limit);
      sends[peer]->wait(limit);
    });
    if (!heard.ok()) {
      return absl::UnavailableError(
          absl::StrCat("rank ", rank, ": the process group's connection with rank ", peer,
                       " carried nothing within ", absl::FormatDuration(deadline), " (",
                       heard.message(), ")", Hint()));
    }
    std::vector<uint8_t> expected;
    RETURN_IF_ERROR(Guarded(absl::StrCat("reading rank ", peer, "'s connection token"),
                            [&] { expected = store.get(TokenKey(peer)); }));
    const auto got = static_cast<uint64_t>(received[peer].item<int64_t>());
    if (expected.size() != sizeof got || std::memcmp(expected.data(), &got, sizeof got) != 0) {
      return absl::PermissionDeniedError(
          absl::StrCat("rank ", rank, ": the process group's connection with rank ", peer,
                       " carried bytes that rank ", peer, " did not send", Hint()));
    }
  }
  return absl::OkStatus();
}

}  // namespace ddpspawn
