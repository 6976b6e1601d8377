// Prints the run option table as tab-separated rows (key, section, value, default), for
// tools/front_ends.py, which generates docs/options.md.
#include <cstdio>

#include "core/train/run/run_options.h"

int main() {
  for (const ddpspawn::RunOptionRow& row : ddpspawn::RunOptionRows()) {
    std::printf("%s\t%s\t%s\t%s\n", row.key.c_str(), row.section.c_str(), row.value.c_str(),
                row.default_value.c_str());
  }
  return 0;
}
