// UnitOrder, full_shard's guess of which unit to gather ahead: the next unit of the last forward,
// the previous unit of this one in backward, and a root unit that wraps the others.
#include "core/ddp/unit_order.h"

#include "gtest/gtest.h"

namespace ddpspawn {
namespace {

constexpr size_t kNone = UnitOrder::kNone;

TEST(UnitOrderTest, ForwardGuessesTheNextUnitOfTheLastForward) {
  UnitOrder order(3);
  // The first forward has nothing to go by.
  EXPECT_EQ(order.NoteForward(0, 0), kNone);
  EXPECT_EQ(order.NoteForward(1, 0), kNone);
  EXPECT_EQ(order.NoteForward(2, 0), kNone);
  order.EndBackward();
  EXPECT_EQ(order.NoteForward(0, 0), 1u);
  EXPECT_EQ(order.NoteForward(1, 0), 2u);
  EXPECT_EQ(order.NoteForward(2, 0), kNone);  // the last
}

TEST(UnitOrderTest, AForwardThatLeavesTheLastOrderGuessesNothing) {
  UnitOrder order(3);
  for (size_t unit : {0, 1, 2}) order.NoteForward(unit, 0);
  order.EndBackward();
  EXPECT_EQ(order.NoteForward(0, 0), 1u);
  EXPECT_EQ(order.NoteForward(2, 0), kNone);  // skipped unit 1: off the last order
}

TEST(UnitOrderTest, BackwardGuessesThePreviousUnitOfThisForward) {
  UnitOrder order(3);
  for (size_t unit : {0, 1, 2}) order.NoteForward(unit, 0);
  EXPECT_EQ(order.NoteBackward(2), 1u);
  EXPECT_EQ(order.NoteBackward(1), 0u);
  EXPECT_EQ(order.NoteBackward(0), kNone);
}

TEST(UnitOrderTest, ARootUnitsBackwardGuessesNothingAndLeavesItsChildrensGuesses) {
  // Unit 2 is the root: its forward wraps units 0 and 1, and its backward begins first.
  UnitOrder order(3);
  order.NoteForward(2, 0);
  order.NoteForward(0, 1);
  order.NoteForward(1, 1);
  EXPECT_EQ(order.NoteBackward(2), kNone);
  EXPECT_EQ(order.NoteBackward(1), 0u);
  EXPECT_EQ(order.NoteBackward(0), 2u);  // FullShard skips it: the root's backward began already
}

TEST(UnitOrderTest, AUnitRunTwiceIsFoundWhereTheBackwardHasReached) {
  // Unit 0 runs twice (shared weights): backward meets its second run first.
  UnitOrder order(2);
  for (size_t unit : {0, 1, 0}) order.NoteForward(unit, 0);
  EXPECT_EQ(order.NoteBackward(0), 1u);
  EXPECT_EQ(order.NoteBackward(1), 0u);
  EXPECT_EQ(order.NoteBackward(0), kNone);
}

}  // namespace
}  // namespace ddpspawn
