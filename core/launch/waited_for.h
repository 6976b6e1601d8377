// The ranks the others wait for: the launcher's notes, from the flight recorders and the processes'
// states, on the ranks that a failing job's message names first, and that an elastic job drops when
// stopped. Internal to core/launch. A free function; thread-compatible (it changes the outcomes).
#ifndef DDPSPAWN_CORE_LAUNCH_WAITED_FOR_H_
#define DDPSPAWN_CORE_LAUNCH_WAITED_FOR_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/launch/launcher.h"

namespace ddpspawn {

// When a rank's failure ends the job: a note of the launcher's (RankOutcome::error_text, not
// reported) on each rank still running that the others were waiting for: one stopped (SIGSTOP, a
// debugger), or one that never reached the newest group's furthest call, which another rank had
// been in for half a second or more (the flight recorders say so). It is the rank a collective's
// timeout waited for, and the job's message names it first. Taken now: the stop about to come lets
// a stopped rank run on. Each note ends with `when` it was taken. Also what an elastic job's
// launcher kills when the others ask (KillHungRanks). Returns, for each outcome, whether it was
// noted as behind while running its own code: its last call had ended, so no collective holds it up
// (a rank behind but inside a call may be one a lost rank held up).
std::vector<bool> NoteRanksWaitedFor(const std::string& run_dir, std::vector<RankOutcome>& outcomes,
                                     int first_global_rank, absl::Time now, absl::string_view when);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_LAUNCH_WAITED_FOR_H_
