// The flight recorder without ranks: what a rank writes is what others read, and the description
// names a rank that never reached a call, one still in it whose process is stopped, and one whose
// process has exited; process states read from /proc (a zombie counts as exited).
#include "core/trace/flight_recorder.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/env/run_dir.h"
#include "core/util/process_state.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddpspawn {
namespace {

using ::testing::HasSubstr;

// A child that sleeps until killed.
pid_t Sleeper() {
  const pid_t pid = fork();
  if (pid == 0) {
    while (true) pause();
  }
  return pid;
}

void WaitForState(pid_t pid, ProcessState wanted) {
  for (int i = 0; i < 500 && ReadProcessState(pid) != wanted; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
}

TEST(ProcessStateTest, StoppedZombieAndGone) {
  const pid_t pid = Sleeper();
  kill(pid, SIGSTOP);
  WaitForState(pid, ProcessState::kStopped);
  EXPECT_EQ(ReadProcessState(pid), ProcessState::kStopped);
  kill(pid, SIGKILL);
  WaitForState(pid, ProcessState::kZombie);  // not reaped yet
  EXPECT_EQ(ReadProcessState(pid), ProcessState::kZombie);
  EXPECT_TRUE(HasExited(ReadProcessState(pid)));
  waitpid(pid, nullptr, 0);
  EXPECT_EQ(ReadProcessState(pid), ProcessState::kGone);
  EXPECT_FALSE(HasExited(ReadProcessState(getpid())));
}

TEST(FlightRecorderTest, WhatOneRankWritesTheOthersRead) {
  const std::string run_dir = testing::TempDir();
  auto rank0 = FlightRecorder::Create(RunDirCallsFile(run_dir, 0, 7));
  auto rank1 = FlightRecorder::Create(RunDirCallsFile(run_dir, 1, 7));
  ASSERT_TRUE(rank0.ok() && rank1.ok());
  // The file is created exclusively: a second recorder for it is refused.
  EXPECT_FALSE(FlightRecorder::Create(RunDirCallsFile(run_dir, 0, 7)).ok());
  CallSignature all_reduce;
  all_reduce.kind = "all_reduce";
  all_reduce.dtype = "float32";
  all_reduce.op = "sum";
  all_reduce.count = 4;
  CallSignature broadcast;
  broadcast.kind = "broadcast";
  broadcast.dtype = "int64";
  broadcast.count = 1;
  broadcast.root = 0;
  for (int i = 0; i < 20; ++i) (*rank0)->Finish((*rank0)->Start(all_reduce), true);
  const uint64_t last = (*rank1)->Start(broadcast);
  (*rank1)->Finish(last, false);
  EXPECT_EQ((*rank0)->DescribeOwn(20), "all_reduce (sum) of 4 float32");
  EXPECT_EQ((*rank0)->DescribeOwn(1), "");  // long overwritten

  auto read = ReadFlightRecorders(run_dir, 3, 7);
  ASSERT_EQ(read.size(), 3u);
  ASSERT_TRUE(read[0].ok() && read[1].ok());
  EXPECT_EQ(read[0]->started, 20u);
  EXPECT_EQ(read[0]->finished, 20u);
  EXPECT_EQ(read[0]->pid, getpid());
  EXPECT_EQ(read[1]->last_what, "broadcast of 1 int64, root rank 0");
  EXPECT_TRUE(read[1]->last_ended);
  EXPECT_FALSE(read[1]->last_ok);
  EXPECT_TRUE(absl::IsNotFound(read[2].status()));
}

TEST(FlightRecorderTest, DescriptionsNameStoppedAndExitedRanks) {
  const pid_t stopped = Sleeper(), exited = Sleeper();
  kill(stopped, SIGSTOP);
  WaitForState(stopped, ProcessState::kStopped);
  kill(exited, SIGKILL);
  waitpid(exited, nullptr, 0);
  const absl::Time now = absl::Now();
  RecordedRank inside;  // in call #5 and stopped there
  inside.pid = stopped;
  inside.started = 5;
  inside.last_what = "all_reduce (sum) of 4 float32";
  inside.last_start = now - absl::Seconds(2);
  RecordedRank behind;  // never reached #5, and gone
  behind.pid = exited;
  behind.started = 4;
  behind.finished = 4;
  behind.last_what = "barrier";
  behind.last_ended = behind.last_ok = true;
  behind.last_end = now - absl::Seconds(3);
  RecordedRank waiting;  // in #5, running: nothing notable
  waiting.pid = getpid();
  waiting.started = 5;
  waiting.last_what = "all_reduce (sum) of 4 float32";
  waiting.last_start = now;
  const std::string text = DescribeRecordedRanks({inside, behind, waiting}, 5, now);
  EXPECT_THAT(text, HasSubstr(absl::StrCat("rank 0: last call #5 all_reduce (sum) of 4 float32, "
                                           "running for 2.0 s; its process (pid ",
                                           stopped, ") is stopped")));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("rank 1: never reached call #5; its last: #4 barrier, "
                                           "finished 3.0 s ago; its process (pid ",
                                           exited, ") has exited")));
  EXPECT_THAT(text, testing::EndsWith("rank 2: last call #5 all_reduce (sum) of 4 float32, "
                                      "running for 0.0 s"));
  kill(stopped, SIGKILL);
  waitpid(stopped, nullptr, 0);
}

}  // namespace
}  // namespace ddpspawn
