// ddpspawn's environment settings: the switches' accepted values, and the documentation's table
// (docs/ARCHITECTURE.md) naming every setting.
#include "core/env/settings.h"

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddpspawn {
namespace {

TEST(SettingsTest, SwitchesAcceptZeroAndOneOnly) {
  const char* name = SettingName(Setting::kShmAllReduce);
  unsetenv(name);
  EXPECT_EQ(ReadSwitch(Setting::kShmAllReduce, true).value(), true);
  EXPECT_EQ(ReadSwitch(Setting::kShmAllReduce, false).value(), false);
  setenv(name, "0", 1);
  EXPECT_EQ(ReadSwitch(Setting::kShmAllReduce, true).value(), false);
  setenv(name, "1", 1);
  EXPECT_EQ(ReadSwitch(Setting::kShmAllReduce, false).value(), true);
  for (const char* bad : {"", "yes", "2", "true", " 1"}) {
    setenv(name, bad, 1);
    absl::StatusOr<bool> read = ReadSwitch(Setting::kShmAllReduce, true);
    ASSERT_FALSE(read.ok()) << "'" << bad << "'";
    EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(read.status().message(),
              absl::StrCat("DDPSPAWN_SHM_ALLREDUCE='", bad, "': expected 0 or 1"));
  }
  unsetenv(name);
}

TEST(SettingsTest, LaunchedWorkerIsTheRunDirectorysPresence) {
  unsetenv(kRunDirEnv);
  EXPECT_FALSE(IsLaunchedWorker());
  setenv(kRunDirEnv, "/nonexistent", 1);
  EXPECT_TRUE(IsLaunchedWorker());
  EXPECT_EQ(ReadSetting(Setting::kRunDir).value(), "/nonexistent");
  unsetenv(kRunDirEnv);
}

TEST(SettingsTest, EverySettingIsInTheDocumentationTable) {
  std::ifstream in("docs/ARCHITECTURE.md");
  ASSERT_TRUE(in.good()) << "docs/ARCHITECTURE.md is not in the test's data";
  std::stringstream text;
  text << in.rdbuf();
  std::set<std::string> names;
  for (const SettingInfo& info : AllSettings()) {
    EXPECT_TRUE(names.insert(info.name).second) << "duplicate " << info.name;
    EXPECT_STREQ(SettingName(info.setting), info.name);
    EXPECT_THAT(text.str(), testing::HasSubstr(absl::StrCat("| `", info.name, "` |")))
        << info.name << " has no row in docs/ARCHITECTURE.md's Environment settings table";
  }
}

}  // namespace
}  // namespace ddpspawn
