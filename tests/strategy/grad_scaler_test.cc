// The loss scaler of "16-mixed": scaling, unscaling, skipping a step on non-finite gradients,
// backing off and growing the scale, and its state in a checkpoint. The arithmetic is the same on
// any device, so the CPU checks it.
#include "core/strategy/grad_scaler.h"

#include <ATen/ATen.h>

#include <limits>

#include "core/model/checkpoint.h"
#include "core/train/models/mlp_module.h"
#include "gtest/gtest.h"

namespace ddpspawn {
namespace {

at::Tensor ParameterWithGrad(const std::vector<float>& grad) {
  at::Tensor p = at::zeros({static_cast<int64_t>(grad.size())});
  p.mutable_grad() = at::tensor(grad);
  return p;
}

TEST(GradScalerTest, ScalesTheLossAndUnscalesFiniteGradients) {
  GradScaler scaler({/*init_scale=*/8.0});
  EXPECT_FLOAT_EQ(scaler.Scale(at::tensor(1.5f)).item<float>(), 12.0f);
  at::Tensor p = ParameterWithGrad({8.0f, -16.0f});
  EXPECT_TRUE(scaler.Unscale({p, at::zeros({2})}));  // no grad: skipped
  EXPECT_FLOAT_EQ(p.grad()[0].item<float>(), 1.0f);
  EXPECT_FLOAT_EQ(p.grad()[1].item<float>(), -2.0f);
}

TEST(GradScalerTest, NonFiniteGradientsSkipTheStepAndShrinkTheScale) {
  GradScaler scaler({/*init_scale=*/1024.0});
  for (float bad :
       {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    at::Tensor good = ParameterWithGrad({1.0f});
    at::Tensor poisoned = ParameterWithGrad({1.0f, bad});
    EXPECT_FALSE(scaler.Unscale({good, poisoned}));
  }
  scaler.Update(/*found_non_finite=*/true);
  EXPECT_DOUBLE_EQ(scaler.scale(), 512.0);
  EXPECT_EQ(scaler.state().growth_tracker, 0);
}

TEST(GradScalerTest, GrowsAfterTheIntervalOfGoodSteps) {
  GradScaler scaler({/*init_scale=*/4.0, /*growth_factor=*/2.0,
                     /*backoff_factor=*/0.5, /*growth_interval=*/3});
  scaler.Update(false);
  scaler.Update(false);
  EXPECT_DOUBLE_EQ(scaler.scale(), 4.0);
  scaler.Update(true);  // a bad step resets the count
  EXPECT_DOUBLE_EQ(scaler.scale(), 2.0);
  for (int i = 0; i < 3; ++i) scaler.Update(false);
  EXPECT_DOUBLE_EQ(scaler.scale(), 4.0);
  EXPECT_EQ(scaler.state().growth_tracker, 0);
}

TEST(GradScalerTest, StateSurvivesACheckpoint) {
  absl::StatusOr<std::shared_ptr<LightningModule>> module =
      MakeMlpModule("mlp:4,3", /*classifier=*/true, {});
  ASSERT_TRUE(module.ok()) << module.status();
  TrainingState saved;
  saved.grad_scale = 2048.0;
  saved.grad_scale_growth_tracker = 17;
  absl::StatusOr<std::string> bytes = SerializeCheckpoint(**module, nullptr, saved);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  TrainingState restored;
  ASSERT_TRUE(RestoreCheckpoint(*bytes, **module, nullptr, &restored).ok());
  EXPECT_DOUBLE_EQ(restored.grad_scale, 2048.0);
  EXPECT_EQ(restored.grad_scale_growth_tracker, 17);

  GradScaler scaler;
  scaler.Restore({restored.grad_scale, restored.grad_scale_growth_tracker});
  EXPECT_DOUBLE_EQ(scaler.scale(), 2048.0);
  scaler.Restore({});  // a checkpoint without a scaler leaves it alone
  EXPECT_DOUBLE_EQ(scaler.scale(), 2048.0);
}

}  // namespace
}  // namespace ddpspawn
