// The table of every run option (the CLI's flags, the C ABI's key=value options): internal to
// run_options.cc, which parses, resolves and lists the options by it. The table is built once and
// never changes: thread-safe.
#ifndef DDPSPAWN_CORE_TRAIN_RUN_RUN_OPTION_TABLE_H_
#define DDPSPAWN_CORE_TRAIN_RUN_RUN_OPTION_TABLE_H_

#include <string>
#include <vector>

#include "core/train/run/run_option_access.h"

namespace ddpspawn {

// One run option: its key (a CLI flag with '-' for '_'), the help section it is listed in, what its
// value looks like, what it does, and how it is read and shown. RunOptionsHelp() lists them in this
// order, with the default that a fresh RunConfig holds.
struct RunOption {
  std::string key;
  std::string section;
  std::string value;
  std::string help;
  option_access::Access access;
};

// Every option, in RunOptionsHelp()'s order.
const std::vector<RunOption>& RunOptionTable();
// The option named `key` (underscores), or null.
const RunOption* FindRunOption(const std::string& key);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_TRAIN_RUN_RUN_OPTION_TABLE_H_
