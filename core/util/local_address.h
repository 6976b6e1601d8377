// The address of this host's interface that traffic to a peer leaves from (as routing decides), for
// binding a transport that the peer can reach.
#ifndef DDPSPAWN_CORE_UTIL_LOCAL_ADDRESS_H_
#define DDPSPAWN_CORE_UTIL_LOCAL_ADDRESS_H_

#include <string>

#include "absl/status/statusor.h"

namespace ddpspawn {

// The local IPv4 or IPv6 address (numeric) from which `host`:`port` is reached. Sends nothing: a
// UDP socket is connected (routing only) and asked for its address. NotFound when `host` does not
// resolve, Unavailable when no route leads there.
absl::StatusOr<std::string> LocalAddressTowards(const std::string& host, int port);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_UTIL_LOCAL_ADDRESS_H_
