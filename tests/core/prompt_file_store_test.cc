// The launcher's rendezvous store: values set by another thread reach a waiting get, and a wait for
// a key nobody sets ends in a timeout error.
#include "core/comm/prompt_file_store.h"

#include <stdlib.h>

#include <chrono>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddpspawn {
namespace {

std::string NewStorePath() {
  std::string dir = testing::TempDir() + "/storeXXXXXX";
  EXPECT_NE(mkdtemp(dir.data()), nullptr);
  return dir + "/store";
}

TEST(PromptFileStoreTest, GetWaitsForAValueSetLater) {
  PromptFileStore store(NewStorePath(), 1);
  std::thread setter([&store] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    store.set("key", std::vector<uint8_t>{1, 2, 3});
  });
  EXPECT_EQ(store.get("key"), (std::vector<uint8_t>{1, 2, 3}));
  setter.join();
  EXPECT_TRUE(store.check({"key"}));
  EXPECT_EQ(store.add("counter", 2), 2);
  EXPECT_EQ(store.add("counter", 3), 5);
}

TEST(PromptFileStoreTest, WaitForAMissingKeyTimesOut) {
  PromptFileStore store(NewStorePath(), 1);
  store.setTimeout(std::chrono::milliseconds(100));
  try {
    store.wait({"never-set"});
    ADD_FAILURE() << "wait returned for a key nobody set";
  } catch (const c10::Error& e) {
    EXPECT_THAT(e.what_without_backtrace(),
                testing::HasSubstr("Wait timeout after 100 ms for keys never-set"));
  }
  EXPECT_THROW(store.get("never-set"), c10::Error);
}

}  // namespace
}  // namespace ddpspawn
