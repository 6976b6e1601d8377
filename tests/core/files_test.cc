// The files ddpspawn writes: never through a symbolic link (a link at the target is refused and its
// target left alone; a link planted at a guessable temporary name redirects nothing), temporary
// files of dead writers swept, and output directories another user controls refused.
#include "core/util/files.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/util/output_dir.h"
#include "core/util/temp_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/skip.h"

namespace ddpspawn {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A fresh directory of this test's own.
std::string NewDir(const std::string& name) {
  std::string dir = absl::StrCat(testing::TempDir(), "/files_test_", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

void Write(const std::string& path, const std::string& text) {
  ASSERT_TRUE(WriteFileAtomically(path, text, /*durable=*/false).ok()) << path;
}

std::string Read(const std::string& path) { return ReadWholeFile(path).value_or("<missing>"); }

bool IsLink(const std::string& path) {
  struct stat info {};
  return lstat(path.c_str(), &info) == 0 && S_ISLNK(info.st_mode);
}

bool Exists(const std::string& path) {
  struct stat info {};
  return lstat(path.c_str(), &info) == 0;
}

// A pid that no process has now: a child that has exited and been reaped.
pid_t DeadPid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  return child;
}

TEST(FilesTest, AtomicWriteRefusesALinkAndLeavesItsTargetAlone) {
  const std::string dir = NewDir("link_target");
  const std::string victim = dir + "/victim", target = dir + "/last.ckpt";
  Write(victim, "precious");
  ASSERT_EQ(symlink(victim.c_str(), target.c_str()), 0);
  absl::Status status = WriteFileAtomically(target, "checkpoint", /*durable=*/true);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr(target + " is a symbolic link (to " + victim + ")"));
  EXPECT_EQ(Read(victim), "precious");
  EXPECT_TRUE(IsLink(target));
}

TEST(FilesTest, ALinkPlantedAtTheOldTemporaryNameRedirectsNothing) {
  const std::string dir = NewDir("planted");
  const std::string victim = dir + "/victim", path = dir + "/last.ckpt";
  Write(victim, "precious");
  // The name the temporary file used to have: path.tmp.<pid>.
  const std::string planted = absl::StrCat(path, ".tmp.", getpid());
  ASSERT_EQ(symlink(victim.c_str(), planted.c_str()), 0);
  ASSERT_TRUE(WriteFileAtomically(path, "checkpoint", /*durable=*/true).ok());
  EXPECT_EQ(Read(victim), "precious");
  EXPECT_EQ(Read(path), "checkpoint");
  EXPECT_FALSE(IsLink(path));
  EXPECT_TRUE(IsLink(planted));  // not ours to remove: not a regular file
}

TEST(FilesTest, AtomicWritesGetTheModeAskedForAndLeaveNoTemporaryFile) {
  const std::string dir = NewDir("mode");
  struct stat info {};
  Write(dir + "/a", "a");
  ASSERT_EQ(stat((dir + "/a").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  ASSERT_TRUE(WriteFileAtomically(dir + "/b", "b", false, 0644).ok());
  ASSERT_EQ(stat((dir + "/b").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0644u);
  int entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) entries += entry.exists();
  EXPECT_EQ(entries, 2);  // a and b
}

TEST(FilesTest, AppendRefusesALinkAndLeavesItsTargetAlone) {
  const std::string dir = NewDir("append_link");
  const std::string victim = dir + "/root_only", metrics = dir + "/metrics.csv";
  Write(victim, "precious\n");
  ASSERT_EQ(symlink(victim.c_str(), metrics.c_str()), 0);
  absl::Status status = AppendToFile(metrics, "1,2,loss,0.5\n", "epoch,step,name,value\n");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr(metrics + " is a symbolic link"));
  EXPECT_EQ(Read(victim), "precious\n");
}

TEST(FilesTest, AppendWritesTheHeaderOnceAndRefusesHardLinks) {
  const std::string dir = NewDir("append");
  const std::string path = dir + "/metrics.csv";
  ASSERT_TRUE(AppendToFile(path, "a\n", "header\n").ok());
  ASSERT_TRUE(AppendToFile(path, "b\n", "header\n").ok());
  EXPECT_EQ(Read(path), "header\na\nb\n");
  const std::string other = dir + "/other.csv";
  Write(other, "precious\n");
  ASSERT_EQ(link(other.c_str(), (dir + "/linked.csv").c_str()), 0);
  EXPECT_THAT(AppendToFile(dir + "/linked.csv", "c\n").message(), HasSubstr("hard link"));
  EXPECT_EQ(Read(other), "precious\n");
}

// The same refusals, ahead of time (before a job starts), without writing.
TEST(FilesTest, CheckAppendableRefusesWhatAppendWouldAndAcceptsNothingYet) {
  const std::string dir = NewDir("appendable");
  EXPECT_TRUE(CheckAppendable(dir + "/metrics.csv").ok());
  EXPECT_TRUE(CheckAppendable(dir + "/missing/metrics.csv").ok());
  ASSERT_TRUE(AppendToFile(dir + "/metrics.csv", "a\n").ok());
  EXPECT_TRUE(CheckAppendable(dir + "/metrics.csv").ok());
  ASSERT_EQ(symlink((dir + "/metrics.csv").c_str(), (dir + "/soft.csv").c_str()), 0);
  EXPECT_THAT(CheckAppendable(dir + "/soft.csv").message(), HasSubstr("is a symbolic link"));
  ASSERT_EQ(link((dir + "/metrics.csv").c_str(), (dir + "/hard.csv").c_str()), 0);
  EXPECT_THAT(CheckAppendable(dir + "/hard.csv").message(), HasSubstr("hard link"));
  EXPECT_THAT(CheckAppendable(dir).message(), HasSubstr("is not a regular file"));
  EXPECT_EQ(Read(dir + "/metrics.csv"), "a\n");
}

TEST(FilesTest, TemporaryFilesOfDeadWritersAreSweptAndNoOthers) {
  const std::string dir = NewDir("sweep");
  const std::string path = dir + "/last.ckpt";
  // A writer killed half way with a named temporary file (where O_TMPFILE is not available): its
  // file stays behind.
  const pid_t killed = fork();
  if (killed == 0) {
    absl::StatusOr<TempFile> temp = CreateNamedTempFileFor(path);
    _exit(temp.ok() && write(temp->fd, "half", 4) == 4 ? 0 : 1);
  }
  int exit_status = -1;
  waitpid(killed, &exit_status, 0);
  ASSERT_EQ(exit_status, 0);
  std::string leftover;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) leftover = entry.path();
  ASSERT_THAT(leftover, HasSubstr(absl::StrCat("last.ckpt.tmp.", killed, ".")));

  const pid_t dead = DeadPid();
  const std::string old_style = absl::StrCat(path, ".tmp.", dead);  // before random suffixes
  const std::string alive = absl::StrCat(path, ".tmp.", getpid(), ".Xy9876");
  const std::string locked = absl::StrCat(path, ".tmp.", dead, ".LoCkEd");
  const std::string planted = absl::StrCat(path, ".tmp.", dead, ".link01");
  const std::string other_file = absl::StrCat(dir, "/other.tmp.", dead, ".AbC123");
  const std::string not_ours = absl::StrCat(path, ".tmp.", dead, ".toolong7");
  for (const std::string& name : {old_style, alive, locked, other_file, not_ours}) {
    Write(name, "x");
  }
  ASSERT_EQ(symlink(other_file.c_str(), planted.c_str()), 0);
  // A writer in another pid namespace: its pid means nothing here, its lock does.
  const int lock_fd = open(locked.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_EQ(flock(lock_fd, LOCK_EX), 0);

  Write(path, "checkpoint");
  EXPECT_FALSE(Exists(leftover));
  EXPECT_FALSE(Exists(old_style));
  for (const std::string& name : {alive, locked, planted, other_file, not_ours}) {
    EXPECT_TRUE(Exists(name)) << name;
  }
  EXPECT_EQ(Read(path), "checkpoint");
  close(lock_fd);
  EXPECT_EQ(SweepStaleTempFiles(path), 1);  // the lock is gone: now it is stale
  EXPECT_FALSE(Exists(locked));
}

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename());
  }
  return names;
}

// The test directory's file system (ext4 or tmpfs) has unnamed temporary files (O_TMPFILE): a
// writer killed before it commits leaves nothing there, and one that commits leaves only the
// target.
TEST(FilesTest, AWriterKilledBeforeItCommitsLeavesNothing) {
  const std::string dir = NewDir("unnamed");
  const std::string path = dir + "/last.ckpt";
  const int probe = open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
  if (probe < 0) {
    DDPSPAWN_SKIP_OR_FAIL(absl::StrCat("the file system of ", dir,
                                       " has no O_TMPFILE: atomic writes name their temporary "
                                       "file there (the named kind is tested below)"));
  }
  close(probe);
  Write(path, "previous");
  const pid_t killed = fork();
  if (killed == 0) {
    absl::StatusOr<TempFile> temp = CreateTempFileFor(path);
    if (!temp.ok() || !temp->path.empty() || write(temp->fd, "half", 4) != 4) _exit(1);
    raise(SIGKILL);
  }
  int wait_status = 0;
  ASSERT_EQ(waitpid(killed, &wait_status, 0), killed);
  ASSERT_TRUE(WIFSIGNALED(wait_status))
      << "the writer got no unnamed temporary file in " << dir << " (O_TMPFILE)";
  EXPECT_THAT(Names(dir), ElementsAre("last.ckpt"));
  EXPECT_EQ(Read(path), "previous");

  absl::StatusOr<TempFile> temp = CreateTempFileFor(path);
  ASSERT_TRUE(temp.ok()) << temp.status();
  ASSERT_EQ(write(temp->fd, "next", 4), 4);
  EXPECT_THAT(Names(dir), ElementsAre("last.ckpt"));
  ASSERT_TRUE(CommitTempFile(*temp, path).ok());
  DiscardTempFile(*temp);
  EXPECT_THAT(Names(dir), ElementsAre("last.ckpt"));
  EXPECT_EQ(Read(path), "next");
}

// The named kind (no O_TMPFILE): committing leaves only the target; a commit that fails (the target
// is a directory) leaves no temporary file once discarded.
TEST(FilesTest, ANamedTemporaryFileCommitsOrIsDiscarded) {
  const std::string dir = NewDir("named");
  const std::string path = dir + "/last.ckpt";
  absl::StatusOr<TempFile> temp = CreateNamedTempFileFor(path);
  ASSERT_TRUE(temp.ok()) << temp.status();
  ASSERT_FALSE(temp->path.empty());
  ASSERT_EQ(write(temp->fd, "next", 4), 4);
  ASSERT_TRUE(CommitTempFile(*temp, path).ok());
  DiscardTempFile(*temp);
  EXPECT_THAT(Names(dir), ElementsAre("last.ckpt"));
  EXPECT_EQ(Read(path), "next");

  const std::string taken = dir + "/taken";
  std::filesystem::create_directories(taken + "/inside");
  for (auto create : {&CreateNamedTempFileFor, &CreateTempFileFor}) {
    absl::StatusOr<TempFile> refused = create(taken);
    ASSERT_TRUE(refused.ok()) << refused.status();
    EXPECT_FALSE(CommitTempFile(*refused, taken).ok());
    DiscardTempFile(*refused);
    EXPECT_THAT(Names(dir), testing::UnorderedElementsAre("last.ckpt", "taken"));
  }
}

TEST(FilesTest, OutputDirectoriesOthersCouldSwapAreRefused) {
  const std::string dir = NewDir("outputs");
  EXPECT_TRUE(PrepareOutputDirectory(dir + "/a/b").ok());
  EXPECT_TRUE(std::filesystem::is_directory(dir + "/a/b"));
  ASSERT_EQ(chmod((dir + "/a/b").c_str(), 0777), 0);
  absl::Status open_to_all = PrepareOutputDirectory(dir + "/a/b");
  EXPECT_THAT(open_to_all.message(), HasSubstr(dir + "/a/b is writable by every user"));
  ASSERT_EQ(chmod((dir + "/a/b").c_str(), 01777), 0);  // sticky, like /tmp
  EXPECT_TRUE(PrepareOutputDirectory(dir + "/a/b").ok());
  Write(dir + "/file", "x");
  EXPECT_THAT(PrepareOutputDirectory(dir + "/file").message(), HasSubstr("is not a directory"));
  if (geteuid() != 0) {
    DDPSPAWN_SKIP_OR_FAIL(
        "making a directory that another user owns needs root (run as root); the checks above "
        "passed");
  }
  const std::string theirs = dir + "/theirs";
  ASSERT_TRUE(PrepareOutputDirectory(theirs).ok());
  ASSERT_EQ(chown(theirs.c_str(), 65534, 65534), 0);
  EXPECT_THAT(PrepareOutputDirectory(theirs).message(),
              HasSubstr(theirs + " belongs to another user (uid 65534"));
  const std::string their_link = dir + "/their_link";
  ASSERT_EQ(symlink((dir + "/a").c_str(), their_link.c_str()), 0);
  ASSERT_EQ(lchown(their_link.c_str(), 65534, 65534), 0);
  EXPECT_THAT(PrepareOutputDirectory(their_link).message(),
              HasSubstr("is a symbolic link made by another user"));
}

}  // namespace
}  // namespace ddpspawn
