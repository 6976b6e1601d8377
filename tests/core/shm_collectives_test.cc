// The shared-memory collectives' segments: a segment that another user could have made or can open
// is refused, and no name stays in /dev/shm once every rank has mapped it (so nothing is left
// however the ranks end). And the reduce-scatter and all-gather on their own, three ranks as three
// threads of this process.
#include "core/comm/shm_collectives.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

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

// The setup channel of ranks that are threads of one process: rank 0's value reaches the others,
// and every rank's `ok` is ANDed, each round once all `world_size` ranks have called. Thread-safe.
class ThreadChannel {
 public:
  explicit ThreadChannel(int world_size) : world_size_(world_size) {}

  SharedMemoryCollectives::SetupChannel For(int rank) {
    SharedMemoryCollectives::SetupChannel channel;
    channel.broadcast_from_rank0 = [this, rank](const std::string& value) {
      return Meet(rank, value, true).first;
    };
    channel.all = [this, rank](bool ok) { return Meet(rank, "", ok).second; };
    return channel;
  }

 private:
  // Waits for every rank's call of this round; rank 0's value, and whether every rank's ok was.
  std::pair<std::string, bool> Meet(int rank, const std::string& value, bool ok) {
    std::unique_lock<std::mutex> lock(mutex_);
    const int round = round_;
    if (rank == 0) value_ = value;
    all_ok_ = all_ok_ && ok;
    if (++arrived_ == world_size_) {
      result_ = {value_, all_ok_};
      arrived_ = 0, all_ok_ = true, ++round_;
      changed_.notify_all();
    } else {
      changed_.wait(lock, [&] { return round_ != round; });
    }
    return result_;
  }

  const int world_size_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int round_ = 0;  // the rest guarded by mutex_ too
  int arrived_ = 0;
  bool all_ok_ = true;
  std::string value_;
  std::pair<std::string, bool> result_;
};

TEST(SharedMemoryShardsTest, ReduceScatterAndAllGatherOnThreeRanks) {
  constexpr int kWorld = 3;
  constexpr size_t kShard = 37;  // not a multiple of a cache line's floats
  const std::string prefix = absl::StrCat("ddpspawn-test-", getpid(), "-shards");
  ThreadChannel channel(kWorld);
  std::vector<std::string> failures(kWorld);
  std::vector<std::thread> ranks;
  ranks.reserve(kWorld);
  for (int rank = 0; rank < kWorld; ++rank) {
    ranks.emplace_back([&, rank] {
      auto shm = SharedMemoryCollectives::Create(prefix, rank, kWorld, kCapacity, absl::Seconds(20),
                                                 channel.For(rank));
      if (!shm.ok()) {
        failures[rank] = shm.status().ToString();
        return;
      }
      // Rank q's element i is q * 1000 + i: the mean of element i over the ranks is i + 1000.
      std::vector<double> input(kShard * kWorld);
      for (size_t i = 0; i < input.size(); ++i) input[i] = rank * 1000.0 + static_cast<double>(i);
      const std::vector<double> before = input;
      std::vector<double> output(kShard, -1);
      CallSignature call;
      call.kind = "reduce_scatter";
      absl::Status status =
          (*shm)->ReduceScatterDouble(input.data(), output.data(), kShard, kWorld, call);
      for (size_t i = 0; status.ok() && i < kShard; ++i) {
        const double want = 1000.0 + static_cast<double>(rank * kShard + i);
        if (output[i] != want) {
          status = absl::InternalError(absl::StrCat("element ", i, ": ", output[i], " not ", want));
        }
      }
      if (status.ok() && input != before) status = absl::InternalError("the input changed");
      std::vector<float> gathered(size_t{2} * kWorld, -1);
      const float mine[2] = {static_cast<float>(rank), -static_cast<float>(rank)};
      call.kind = "all_gather";
      if (status.ok()) status = (*shm)->AllGather(mine, sizeof mine, gathered.data(), call);
      for (int q = 0; status.ok() && q < kWorld; ++q) {
        const size_t at = size_t{2} * static_cast<size_t>(q);
        if (gathered[at] != static_cast<float>(q) || gathered[at + 1] != -static_cast<float>(q)) {
          status = absl::InternalError(absl::StrCat("rank ", q, "'s gathered pair is wrong"));
        }
      }
      if (!status.ok()) failures[rank] = status.ToString();
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int rank = 0; rank < kWorld; ++rank) EXPECT_EQ(failures[rank], "") << "rank " << rank;
  EXPECT_THAT(NamesStartingWith(prefix), testing::IsEmpty());
}

}  // namespace
}  // namespace ddpspawn
