// The shared-memory collectives' segments: a segment that another user could have made or can open
// is refused, and no name stays in /dev/shm once every rank has mapped it (so nothing is left
// however the ranks end).
#include "core/comm/shm_collectives.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/skip.h"

namespace ddpspawn {
namespace {

constexpr size_t kCapacity = 1 << 16;
constexpr size_t kHeaderBytes = 8192;  // shm_collectives.cc's

// The names in /dev/shm that start with `prefix`.
std::vector<std::string> NamesStartingWith(const std::string& prefix) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string name = entry.path().filename().string();
    if (absl::StartsWith(name, prefix)) names.push_back(name);
  }
  return names;
}

// A channel for one process playing `rank`: rank 0's name is `rank0_name`, and every rank succeeds
// as this one does.
SharedMemoryCollectives::SetupChannel ChannelWithRank0Name(const std::string& rank0_name) {
  SharedMemoryCollectives::SetupChannel channel;
  channel.broadcast_from_rank0 = [rank0_name](const std::string& value) {
    return rank0_name.empty() ? value : rank0_name;
  };
  channel.all = [](bool ok) { return ok; };
  return channel;
}

// Makes /dev/shm/<name> as a stranger might: the right size, then `mode` and (as root) `owner`.
void PreCreate(const std::string& name, mode_t mode, uid_t owner) {
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0) << name;
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(kHeaderBytes + 2 * kCapacity)), 0);
  ASSERT_EQ(fchmod(fd, mode), 0);
  if (owner != geteuid()) {
    ASSERT_EQ(fchown(fd, owner, owner), 0);
  }
  close(fd);
}

TEST(SharedMemorySegmentTest, OneOthersMayOpenIsRefused) {
  const std::string name = absl::StrCat("/ddpspawn-test-", getpid(), "-world-readable");
  PreCreate(name, 0666, geteuid());
  auto shm = SharedMemoryCollectives::Create("unused", /*rank=*/1, /*world_size=*/2, kCapacity,
                                             absl::Seconds(5), ChannelWithRank0Name(name));
  shm_unlink(name.c_str());
  ASSERT_TRUE(absl::IsPermissionDenied(shm.status())) << shm.status();
  EXPECT_THAT(shm.status().message(), testing::HasSubstr("mode 0666"));
}

// CI runs as root, which can make a segment that another user owns.
TEST(SharedMemorySegmentTest, AnotherUsersIsRefused) {
  if (geteuid() != 0) {
    DDPSPAWN_SKIP_OR_FAIL("making a segment that another user owns needs root (run as root)");
  }
  const std::string name = absl::StrCat("/ddpspawn-test-", getpid(), "-nobody");
  PreCreate(name, 0600, 65534);
  auto shm = SharedMemoryCollectives::Create("unused", /*rank=*/1, /*world_size=*/2, kCapacity,
                                             absl::Seconds(5), ChannelWithRank0Name(name));
  shm_unlink(name.c_str());
  ASSERT_TRUE(absl::IsPermissionDenied(shm.status())) << shm.status();
  EXPECT_THAT(shm.status().message(), testing::HasSubstr("belongs to uid 65534"));
}

TEST(SharedMemorySegmentTest, OneOfAnotherSizeIsRefused) {
  const std::string name = absl::StrCat("/ddpspawn-test-", getpid(), "-small");
  PreCreate(name, 0600, geteuid());
  auto shm = SharedMemoryCollectives::Create("unused", /*rank=*/1, /*world_size=*/4, kCapacity,
                                             absl::Seconds(5), ChannelWithRank0Name(name));
  shm_unlink(name.c_str());
  ASSERT_TRUE(absl::IsPermissionDenied(shm.status())) << shm.status();
}

// Rank 0 of a one-rank group: the staging segment and a shared buffer are mapped, and their names
// are gone.
TEST(SharedMemorySegmentTest, NoNameOutlivesTheMapping) {
  const std::string prefix = absl::StrCat("ddpspawn-test-", getpid(), "-names");
  auto shm = SharedMemoryCollectives::Create(prefix, /*rank=*/0, /*world_size=*/1, kCapacity,
                                             absl::Seconds(5), ChannelWithRank0Name(""));
  ASSERT_TRUE(shm.ok()) << shm.status();
  absl::StatusOr<std::shared_ptr<void>> buffer = (*shm)->AllocateShared(1000);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_THAT(NamesStartingWith(prefix), testing::IsEmpty());
  // Both work: a sum in the shared buffer, and one staged.
  float* shared = static_cast<float*>(buffer->get());
  shared[0] = 3.0f;
  CallSignature call;
  call.kind = "all_reduce";
  ASSERT_TRUE((*shm)->SumFloat(shared, 1, 1, call).ok());
  float staged = 2.0f;
  ASSERT_TRUE((*shm)->SumFloat(&staged, 1, 2, call).ok());
  EXPECT_EQ(shared[0], 3.0f);
  EXPECT_EQ(staged, 1.0f);
}

}  // namespace
}  // namespace ddpspawn
