// What a launcher does in a child it just forked, before the child runs a worker or execs a
// program: the steps shared by the spawn, fork and forkserver start methods. Each runs in a child
// forked from a process that may have many threads, so they use system calls only (no allocation,
// no locks).
#ifndef DDPSPAWN_CORE_LAUNCH_CHILD_PROCESS_H_
#define DDPSPAWN_CORE_LAUNCH_CHILD_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/functional/function_ref.h"

namespace ddpspawn {

// NULL-terminated char* views of `strings`, which must outlive the result (and the fork that uses
// it). Allocates: call it before forking.
std::vector<char*> CStringArray(const std::vector<std::string>& strings);

// First thing in the child: its own process group (so that its starter can signal it and its
// descendants together), death with `parent` (SIGKILL; it exits at once should `parent` already be
// gone), no blocked signals and, with `reset_signals`, the default action for the signals a
// launcher handles or ignores.
void PrepareChild(pid_t parent, bool reset_signals);

// Calls `visit` with the name of each entry ("." and ".." too) of the open directory `dir`, read
// with getdents64 into a stack buffer.
void ForEachDirectoryEntry(int dir, absl::FunctionRef<void(const char* name)> visit);

// Closes every descriptor above 2 except `keep` (-1: none), whether or not it is close-on-exec
// (Gloo's sockets, a caller's files are not).
void CloseDescriptorsAbove2(int keep);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_LAUNCH_CHILD_PROCESS_H_
