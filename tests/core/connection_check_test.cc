// A stranger who connects to a forming Gloo group's listeners and sends the pairs' sequence numbers
// first stands in for a peer; CheckEveryConnection turns that into an error on both ranks that
// names the cause, within its deadline, and passes an untouched group. The last test does the same
// to ProcessGroup::Create as a launcher's ranks call it: the check is on that path.
#include "core/comm/connection_check.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "core/comm/process_group.h"
#include "core/env/cluster_environment.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddpspawn {
namespace {

using ::testing::HasSubstr;

constexpr int kWorldSize = 2;
constexpr absl::Duration kDeadline = absl::Seconds(3);

struct Rank {
  pid_t pid = -1;
  int ready = -1;   // the rank writes a byte once its Gloo listener is up
  int go = -1;      // the test writes a byte when the rank may connect
  int result = -1;  // the rank writes its check's status text ("OK" or the error)
};

// In the child: make the Gloo device (its listener starts now), wait for the word, join the group
// and check it. Never returns.
[[noreturn]] void RunRank(int rank, const std::string& store_path, int ready, int go, int result) {
  auto store = c10::make_intrusive<c10d::FileStore>(store_path, kWorldSize);
  auto options = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(30));
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  char byte = 'r';
  if (write(ready, &byte, 1) != 1 || read(go, &byte, 1) != 1) _exit(3);
  std::string text;
  try {
    auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, kWorldSize, options);
    text = CheckEveryConnection(*group, *store, rank, kWorldSize, kDeadline).ToString();
  } catch (const std::exception& e) {
    text = absl::StrCat("joining threw: ", e.what());
  }
  const bool written = write(result, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  _exit(written ? 0 : 4);  // no destructors: a refused group may still wait on a stranger
}

Rank StartRank(int rank, const std::string& store_path) {
  int ready[2], go[2], result[2];
  EXPECT_EQ(pipe(ready), 0);
  EXPECT_EQ(pipe(go), 0);
  EXPECT_EQ(pipe(result), 0);
  const pid_t pid = fork();
  if (pid == 0) RunRank(rank, store_path, ready[1], go[0], result[1]);
  close(ready[1]);
  close(go[0]);
  close(result[1]);
  return Rank{pid, ready[0], go[1], result[0]};
}

// The TCP ports `pid` listens on: its socket inodes matched against /proc/net/tcp.
std::vector<int> ListeningPorts(pid_t pid) {
  std::set<std::string> inodes;
  const std::string fd_dir = absl::StrCat("/proc/", pid, "/fd");
  if (DIR* dir = opendir(fd_dir.c_str())) {
    while (dirent* entry = readdir(dir)) {
      char target[64] = {};
      const std::string link = fd_dir + "/" + entry->d_name;
      if (readlink(link.c_str(), target, sizeof target - 1) <= 0) continue;
      absl::string_view text(target);
      if (absl::ConsumePrefix(&text, "socket:[") && absl::ConsumeSuffix(&text, "]")) {
        inodes.emplace(text);
      }
    }
    closedir(dir);
  }
  std::vector<int> ports;
  std::ifstream tcp("/proc/net/tcp");
  std::string line;
  std::getline(tcp, line);  // the header
  while (std::getline(tcp, line)) {
    std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (fields.size() < 10 || fields[3] != "0A" || inodes.count(fields[9]) == 0) continue;
    int port = 0;
    std::vector<std::string> address = absl::StrSplit(fields[1], ':');
    if (address.size() == 2 && absl::SimpleHexAtoi(address[1], &port)) ports.push_back(port);
  }
  return ports;
}

// What a stranger does: for every sequence number a pair may wait for, a connection to `port` that
// sends it, held open.
std::vector<int> ClaimSequenceNumbers(int port) {
  std::vector<int> sockets;
  for (uint64_t sequence = 0; sequence < 16; ++sequence) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0) << port;
    EXPECT_EQ(write(fd, &sequence, sizeof sequence), static_cast<ssize_t>(sizeof sequence));
    sockets.push_back(fd);
  }
  return sockets;
}

std::string ReadResult(const Rank& rank) {
  pollfd waiting{rank.result, POLLIN, 0};
  std::string text;
  char buffer[4096];
  // Well past the check's deadline and the group's 30 s: a rank that hangs fails the test.
  while (poll(&waiting, 1, 60000) == 1) {
    const ssize_t n = read(rank.result, buffer, sizeof buffer);
    if (n <= 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  int status = 0;
  if (text.empty()) kill(rank.pid, SIGKILL);
  waitpid(rank.pid, &status, 0);
  return text.empty() ? "no answer within 60 s" : text;
}

// Both ranks' check results, after a stranger claimed their listeners' sequence numbers (or not).
std::vector<std::string> JoinTwoRanks(bool stranger_first) {
  std::string dir = testing::TempDir() + "/connXXXXXX";
  EXPECT_NE(mkdtemp(dir.data()), nullptr);
  std::vector<Rank> ranks;
  ranks.reserve(kWorldSize);
  for (int rank = 0; rank < kWorldSize; ++rank) ranks.push_back(StartRank(rank, dir + "/store"));
  std::vector<int> stranger;
  for (const Rank& rank : ranks) {
    char byte = 0;
    EXPECT_EQ(read(rank.ready, &byte, 1), 1);
    if (!stranger_first) continue;
    const std::vector<int> ports = ListeningPorts(rank.pid);
    EXPECT_FALSE(ports.empty()) << "rank pid " << rank.pid << " listens on no TCP port";
    for (int port : ports) {
      for (int fd : ClaimSequenceNumbers(port)) stranger.push_back(fd);
    }
  }
  for (const Rank& rank : ranks) EXPECT_EQ(write(rank.go, "g", 1), 1);
  std::vector<std::string> results;
  results.reserve(ranks.size());
  for (const Rank& rank : ranks) results.push_back(ReadResult(rank));
  for (int fd : stranger) close(fd);
  return results;
}

TEST(ConnectionCheckTest, AnUntouchedGroupPasses) {
  for (const std::string& result : JoinTwoRanks(/*stranger_first=*/false)) {
    EXPECT_EQ(result, "OK");
  }
}

// Each rank's error names its connection with the other and the likely cause.
void ExpectBothRanksNameTheStranger(const std::vector<std::string>& results) {
  for (int rank = 0; rank < kWorldSize; ++rank) {
    EXPECT_THAT(results[rank], HasSubstr(absl::StrCat("rank ", rank,
                                                      ": the process group's "
                                                      "connection with rank ",
                                                      1 - rank)));
    EXPECT_THAT(results[rank], HasSubstr("another local process may have connected"));
  }
}

TEST(ConnectionCheckTest, AStrangerStandingInForAPeerFailsBothRanksNamingTheCause) {
  const absl::Time start = absl::Now();
  const std::vector<std::string> results = JoinTwoRanks(/*stranger_first=*/true);
  ExpectBothRanksNameTheStranger(results);
  // The deadline, not the group's 30 s timeout, ended the wait.
  EXPECT_LT(absl::Now() - start, absl::Seconds(25));
}

// In the child: ProcessGroup::Create as a launcher's rank calls it (its run directory's store, Gloo
// on 127.0.0.1, the connection check, shared memory); writes "OK" or the error. Never returns.
[[noreturn]] void CreateRank(int rank, const std::string& run_dir, int result) {
  ClusterInfo cluster;
  cluster.kind = ClusterKind::kDdpspawn;
  cluster.rank = cluster.local_rank = rank;
  cluster.world_size = cluster.local_world_size = kWorldSize;
  cluster.run_dir = run_dir;
  GroupOptions options;
  options.timeout = absl::Seconds(10);  // also the check's deadline
  absl::StatusOr<std::unique_ptr<ProcessGroup>> group = ProcessGroup::Create(cluster, options);
  const std::string text = group.ok() ? "OK" : group.status().ToString();
  const bool written = write(result, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  _exit(written ? 0 : 4);  // no destructors: a refused group may still wait on a stranger
}

Rank StartCreatingRank(int rank, const std::string& run_dir) {
  int result[2];
  EXPECT_EQ(pipe(result), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(result[0]);
    CreateRank(rank, run_dir, result[1]);
  }
  close(result[1]);
  return Rank{pid, -1, -1, result[0]};
}

// The ports `pid` listens on, once it listens on any (its Gloo device is up); empty after 10 s.
std::vector<int> WaitUntilListening(pid_t pid) {
  for (int i = 0; i < 1000; ++i) {
    std::vector<int> ports = ListeningPorts(pid);
    if (!ports.empty()) return ports;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return {};
}

// A rank's Gloo listener is up before it reads its peers' addresses from the store, and it connects
// only once it has them all. Rank 1 starts alone (it waits for rank 0's address), the stranger
// claims its sequence numbers, and it is stopped; then rank 0 starts, and the stranger claims its
// numbers before rank 1 runs again. Whichever side of the pair listens, the stranger holds it, with
// no race.
TEST(ConnectionCheckTest, ProcessGroupCreateRunsTheCheck) {
  std::string run_dir = testing::TempDir() + "/runXXXXXX";
  ASSERT_NE(mkdtemp(run_dir.data()), nullptr);
  const absl::Time start = absl::Now();
  std::vector<int> stranger;
  auto claim = [&](pid_t pid) {
    const std::vector<int> ports = WaitUntilListening(pid);
    EXPECT_FALSE(ports.empty()) << "rank pid " << pid << " listens on no TCP port";
    for (int port : ports) {
      for (int fd : ClaimSequenceNumbers(port)) stranger.push_back(fd);
    }
    absl::SleepFor(absl::Milliseconds(200));  // its listener reads the numbers first
  };
  const Rank one = StartCreatingRank(1, run_dir);
  claim(one.pid);
  ASSERT_EQ(kill(one.pid, SIGSTOP), 0);
  const Rank zero = StartCreatingRank(0, run_dir);
  claim(zero.pid);
  ASSERT_EQ(kill(one.pid, SIGCONT), 0);
  const std::vector<std::string> results = {ReadResult(zero), ReadResult(one)};
  for (int fd : stranger) close(fd);
  ExpectBothRanksNameTheStranger(results);
  EXPECT_LT(absl::Now() - start, absl::Seconds(25));
}

}  // namespace
}  // namespace ddpspawn
