// A rank's flight recorder: the collectives of one process group, numbered in the order the rank
// starts them, kept in a small file of the run directory that the rank maps (a record is a few
// memory stores). When a collective times out, the rank that noticed, and the launcher, read every
// rank's file and say what each was last doing, and which ranks never reached the call. Outside one
// launcher's ranks on one host (a job of several nodes, torchrun, SLURM) the record stays in memory
// and names this rank's call only.
//
// Thread-safe: Start() and Finish() may come from any thread (DDP's all-reduces start in backward).
// The readers are plain functions. Ownership: it owns its mapping of the file (or the in-memory
// record), undone when it goes; the file stays in the run directory for the launcher.
#ifndef DDPSPAWN_CORE_TRACE_FLIGHT_RECORDER_H_
#define DDPSPAWN_CORE_TRACE_FLIGHT_RECORDER_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/trace/call_signature.h"

namespace ddpspawn {

class FlightRecorder {
 public:
  // Creates `path` exclusively (mode 0600, no link followed); an empty path keeps the record in
  // memory only.
  static absl::StatusOr<std::unique_ptr<FlightRecorder>> Create(const std::string& path);
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  // Records that call number N (returned; 1, 2, ...) started now. Copies a few bytes: no
  // allocation.
  uint64_t Start(const CallSignature& call);
  // Records that call `seq` ended, successfully or not.
  void Finish(uint64_t seq, bool ok);

  // The description of call `seq` if it is among the last ones kept. Takes the writers' lock:
  // another thread's Start() may be reusing the slot.
  std::string DescribeOwn(uint64_t seq) const;

  struct File;

 private:
  explicit FlightRecorder(File* file, bool mapped);
  File* const file_;  // mapped from the run directory, or in memory
  const bool mapped_;
  // Orders writers and DescribeOwn(); other processes' readers need no lock.
  mutable absl::Mutex mutex_;
};

// One rank's record as read from its file by any process.
struct RecordedRank {
  int rank = -1;
  pid_t pid = 0;
  uint64_t started = 0;   // the number of the last call it started
  uint64_t finished = 0;  // of the last call it finished
  // The last call it started: what, and whether and when it ended.
  std::string last_what;
  bool last_ended = false, last_ok = false;
  absl::Time last_start, last_end;
};

// Reads the flight recorders of `world_size` ranks' `generation`-th groups (NotFound for a rank
// that has none).
std::vector<absl::StatusOr<RecordedRank>> ReadFlightRecorders(const std::string& run_dir,
                                                              int world_size, int generation);

// One line per rank of what it was last doing, for an error about call `seq` ("rank 1 never reached
// call #57: its last, #56 broadcast ..., finished 31.2 s ago; its process (pid 123) is stopped").
// `seq` 0: each rank's last call.
std::string DescribeRecordedRanks(const std::vector<absl::StatusOr<RecordedRank>>& ranks,
                                  uint64_t seq, absl::Time now);

// The same for the newest group of a launcher's job (the launcher's view after a whole-job
// timeout); empty when no rank recorded anything.
std::string DescribeNewestGroup(const std::string& run_dir, int world_size, absl::Time now);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRACE_FLIGHT_RECORDER_H_
