// Proof that each of a Gloo group's connections reaches the rank it is meant for. Gloo's TCP
// listener takes any local connection that sends a pair's sequence number first (small integers a
// stranger can guess), so a local user who connects while the group forms can stand in for a peer:
// the group then hangs, or reads the stranger's bytes. Free functions; internal to core/comm.
#ifndef DDPSPAWN_CORE_COMM_CONNECTION_CHECK_H_
#define DDPSPAWN_CORE_COMM_CONNECTION_CHECK_H_

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace c10d {
class Backend;
class Store;
}  // namespace c10d

namespace ddpspawn {

// Every rank puts a fresh random token in `store`, sends it to every peer over `group`, and
// compares what each peer sent with the peer's token in the store. Only as strong as the store is
// private (a launcher's file store in its run directory is; a TCPStore is not). Collective: every
// rank of `group` calls it at once. Fails within `deadline` naming the peer whose connection was
// silent or carried bytes that peer did not send.
absl::Status CheckEveryConnection(c10d::Backend& group, c10d::Store& store, int rank,
                                  int world_size, absl::Duration deadline);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_COMM_CONNECTION_CHECK_H_
