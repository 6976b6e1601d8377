// The membership file between an elastic job's launcher and its ranks (core/launch/membership.h): a
// change survives its encoding whole, a malformed one is refused, a rank whose collective failed
// waits past a change that only admits a replacement, and a replacement's requests are taken once.
#include "core/launch/membership.h"

#include <stdlib.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "core/env/run_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddpspawn {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

class MembershipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "membership.XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    run_dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(run_dir_); }

  std::string run_dir_;
};

MembershipChange Change(int number, std::vector<int> ranks, std::vector<int> left,
                        std::vector<int> joined, int latest_loss) {
  MembershipChange change;
  change.number = number;
  change.ranks = std::move(ranks);
  change.left = std::move(left);
  change.joined = std::move(joined);
  change.latest_loss = latest_loss;
  return change;
}

TEST_F(MembershipTest, AChangeSurvivesItsEncodingWhole) {
  MembershipChange change = Change(3, {0, 2, 3, 1}, {}, {1}, 2);
  change.why = "rank 1 (pid 7) was killed\nrank 4 (pid 9) crashed\n";
  absl::StatusOr<MembershipChange> back = DecodeMembershipChange(EncodeMembershipChange(change));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->number, 3);
  EXPECT_THAT(back->ranks, ElementsAre(0, 2, 3, 1));
  EXPECT_THAT(back->left, IsEmpty());
  EXPECT_THAT(back->joined, ElementsAre(1));
  EXPECT_EQ(back->latest_loss, 2);
  EXPECT_EQ(back->why, change.why);
  EXPECT_FALSE(back->ends_job);
  change.ends_job = true;
  back = DecodeMembershipChange(EncodeMembershipChange(change));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->ends_job);
}

TEST_F(MembershipTest, AMalformedChangeIsRefused) {
  EXPECT_FALSE(DecodeMembershipChange("ranks=0,1\n").ok());            // no number
  EXPECT_FALSE(DecodeMembershipChange("number=1\n").ok());             // no ranks
  EXPECT_FALSE(DecodeMembershipChange("number=1\nranks=0,x\n").ok());  // a rank that is not one
  EXPECT_FALSE(DecodeMembershipChange("number=1\nranks=0\nlatest_loss=-1\n").ok());
  ASSERT_TRUE(PublishMembershipChange(run_dir_, Change(1, {0}, {1}, {}, 1)).ok());
  std::filesystem::resize_file(RunDirMembershipFile(run_dir_), 3);
  EXPECT_FALSE(ReadMembershipChange(run_dir_).ok());
}

TEST_F(MembershipTest, AFailedRankWaitsPastAChangeThatOnlyAdmitsAReplacement) {
  ASSERT_TRUE(PublishMembershipChange(run_dir_, Change(2, {0, 2, 3}, {1}, {}, 2)).ok());
  ASSERT_TRUE(PublishMembershipChange(run_dir_, Change(3, {0, 2, 3, 1}, {}, {1}, 2)).ok());
  EXPECT_FALSE(
      AwaitMembershipChange(run_dir_, 2, absl::Milliseconds(20), AwaitedChange::kAfterALoss)
          .has_value());
  std::optional<MembershipChange> any = AwaitMembershipChange(run_dir_, 2, absl::Milliseconds(20));
  ASSERT_TRUE(any.has_value());
  EXPECT_EQ(any->number, 3);
  // A loss after the admission: the failed rank joins the latest group, the replacement in it.
  ASSERT_TRUE(PublishMembershipChange(run_dir_, Change(4, {0, 3, 1}, {2}, {}, 4)).ok());
  std::optional<MembershipChange> after_loss =
      AwaitMembershipChange(run_dir_, 2, absl::Milliseconds(20), AwaitedChange::kAfterALoss);
  ASSERT_TRUE(after_loss.has_value());
  EXPECT_EQ(after_loss->number, 4);
  EXPECT_THAT(after_loss->ranks, ElementsAre(0, 3, 1));
}

TEST_F(MembershipTest, AReplacementsRequestsAreTakenOnce) {
  EXPECT_FALSE(TakeJoinRequest(run_dir_, 1));
  ASSERT_TRUE(RequestToJoin(run_dir_, 1).ok());
  EXPECT_FALSE(TakeJoinRequest(run_dir_, 2));
  EXPECT_TRUE(TakeJoinRequest(run_dir_, 1));
  EXPECT_FALSE(TakeJoinRequest(run_dir_, 1));
  EXPECT_FALSE(TakeJoined(run_dir_, 1));
  ASSERT_TRUE(ConfirmJoined(run_dir_, 1).ok());
  EXPECT_TRUE(TakeJoined(run_dir_, 1));
  EXPECT_FALSE(TakeJoined(run_dir_, 1));
}

TEST_F(MembershipTest, ARankSaysWhichChangesGroupItLastFormed) {
  EXPECT_EQ(FormedChange(run_dir_, 2), 0);
  ASSERT_TRUE(ConfirmFormed(run_dir_, 2, 1).ok());
  ASSERT_TRUE(ConfirmFormed(run_dir_, 2, 3).ok());
  EXPECT_EQ(FormedChange(run_dir_, 2), 3);
  EXPECT_EQ(FormedChange(run_dir_, 1), 0);
}

}  // namespace
}  // namespace ddpspawn
