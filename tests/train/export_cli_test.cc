// `ddpspawn export` end to end with the torch 2.11 Python: a checkpoint's weights exported as a
// state dict and as safetensors load into the matching torch.nn module with strict=True and
// reproduce ddpspawn's predictions and loss; weights Python saved both ways come back through
// --checkpoint and give the loss Python computes (an OrderedDict, which LibTorch cannot read, is
// refused with what to do); another model's weights and damaged files are refused.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/util/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/train/cli_testing.h"

namespace ddpspawn {
namespace {

using ::testing::HasSubstr;

TEST(ExportCliTest, ExportedWeightsLoadIntoTorchAndComeBack) {
  const std::string data = WriteClassification("export.csv", 240);
  CliRun fit = Cli(absl::StrCat("fit --model ", kModel, " --train ", data,
                                " --nproc-per-node 2 --max-epochs 3 --lr 0.3 --batch-size 16 "
                                "--default-root-dir ",
                                Dir("export")));
  ASSERT_EQ(fit.exit_code, 0) << fit.output;
  CliRun predict = Cli(absl::StrCat("predict --model ", kModel, " --data ", data,
                                    " --nproc-per-node 2 --checkpoint ", fit.values["checkpoint"],
                                    " --default-root-dir ", Dir("export_predict")));
  ASSERT_EQ(predict.exit_code, 0) << predict.output;
  const std::string pt = Dir("weights.pt"), safetensors = Dir("weights.safetensors");
  for (const auto& [format, output] :
       {std::pair{"torch", pt}, std::pair{"safetensors", safetensors}}) {
    CliRun exported = Cli(absl::StrCat("export --checkpoint ", fit.values["checkpoint"],
                                       " --format ", format, " --output ", output));
    ASSERT_EQ(exported.exit_code, 0) << exported.output;
    EXPECT_EQ(exported.values["tensors"], "4");  // two Linear layers' weights and biases
    EXPECT_EQ(exported.values["format"], format);
  }
  const std::string back_pt = Dir("back.pt"), back_safetensors = Dir("back.safetensors"),
                    ordered_pt = Dir("ordered.pt");
  const std::map<std::string, std::string> python = RunPython(
      "export_check",
      absl::StrCat(
          "import numpy as np, torch\n"
          "from safetensors.torch import load_file, save_file\n"
          "rows = np.loadtxt('",
          data, "', delimiter=',', dtype=np.float64)\n",
          "x = torch.tensor(rows[:, :4], dtype=torch.float32)\n"
          "y = torch.tensor(rows[:, 4], dtype=torch.long)\n"
          "preds = torch.tensor(np.loadtxt('",
          predict.values["predictions"], "', delimiter=','), dtype=torch.float64)\n",
          "def model():\n"
          "    return torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), "
          "torch.nn.Linear(16, "
          "3))\n"
          "for name, state in (('torch', torch.load('",
          pt, "')), ('safetensors', load_file('", safetensors, "'))):\n",
          "    m = model()\n"
          "    m.load_state_dict(state, strict=True)\n"
          "    with torch.no_grad():\n"
          "        out = m(x)\n"
          "    print(f'{name}_mismatches={(out.argmax(1) != preds.long()).sum().item()}')\n"
          "    loss = torch.nn.functional.cross_entropy(out, y)\n"
          "    print(f'{name}_loss={loss.item():.17g}')\n"
          "m = model()\n"
          "m.load_state_dict(torch.load('",
          pt, "'), strict=True)\n",
          "with torch.no_grad():\n"
          "    for p in m.parameters():\n"
          "        p.mul_(0.5)\n"
          "    loss = torch.nn.functional.cross_entropy(m(x), y)\n"
          "torch.save(dict(m.state_dict()), '",
          back_pt, "')\n", "torch.save(m.state_dict(), '", ordered_pt, "')\n",
          "save_file(m.state_dict(), '", back_safetensors, "')\n",
          "print(f'python_loss={loss.item():.17g}')\n"));
  // The exported weights reproduce ddpspawn's predictions and its loss (float32 sums in another
  // order: 5e-8 apart seen).
  CliRun trained = Cli(absl::StrCat("validate --model ", kModel, " --data ", data,
                                    " --nproc-per-node 2 --checkpoint ", fit.values["checkpoint"],
                                    " --default-root-dir ", Dir("export_validate")));
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  for (const std::string format : {"torch", "safetensors"}) {
    EXPECT_EQ(NumberOf(python, format + "_mismatches"), 0) << format;
    EXPECT_NEAR(NumberOf(python, format + "_loss"), trained.Number("metric.val_loss"),
                3e-7 * trained.Number("metric.val_loss"))
        << format;
  }
  // Python's weights come back through --checkpoint, both ways.
  std::map<std::string, double> losses;
  for (const std::string& file : {back_pt, back_safetensors}) {
    CliRun validated = Cli(absl::StrCat("validate --model ", kModel, " --data ", data,
                                        " --nproc-per-node 2 --checkpoint ", file,
                                        " --default-root-dir ", Dir("export_validate")));
    ASSERT_EQ(validated.exit_code, 0) << validated.output;
    losses[file] = validated.Number("metric.val_loss");
  }
  std::printf("loss: ddpspawn %.17g, torch %.17g (trained); ddpspawn %.17g, torch %s (halved)\n",
              trained.Number("metric.val_loss"), NumberOf(python, "torch_loss"), losses[back_pt],
              python.at("python_loss").c_str());
  EXPECT_EQ(losses[back_pt], losses[back_safetensors]);
  EXPECT_NEAR(losses[back_pt], NumberOf(python, "python_loss"),
              3e-7 * NumberOf(python, "python_loss"));
  // state_dict() as it is (an OrderedDict) is refused with what to do.
  CliRun ordered = Cli(
      absl::StrCat("validate --model ", kModel, " --data ", data, " --checkpoint ", ordered_pt));
  EXPECT_NE(ordered.exit_code, 0);
  EXPECT_THAT(ordered.output, HasSubstr("save dict(model.state_dict())"));
  // A halved model no longer scores like the trained one.
  EXPECT_GT(std::abs(losses[back_pt] - trained.Number("metric.val_loss")), 1e-3);
}

TEST(ExportCliTest, AnotherModelsWeightsAndDamagedFilesAreRefused) {
  const std::string data = WriteClassification("export_refused.csv", 60);
  CliRun fit = Cli(absl::StrCat("fit --model mlp:4,8,3 --train ", data,
                                " --max-epochs 1 --default-root-dir ", Dir("export_other")));
  ASSERT_EQ(fit.exit_code, 0) << fit.output;
  const std::string other = Dir("other.safetensors");
  ASSERT_EQ(Cli(absl::StrCat("export --checkpoint ", fit.values["checkpoint"],
                             " --format safetensors --output ", other))
                .exit_code,
            0);
  const std::string validate =
      absl::StrCat("validate --model ", kModel, " --data ", data, " --checkpoint ");
  CliRun wrong_shape = Cli(absl::StrCat(validate, other));
  EXPECT_NE(wrong_shape.exit_code, 0);
  EXPECT_THAT(wrong_shape.output,
              HasSubstr("tensor '0.weight' has shape [8, 4] in the weights but [16, 4] in the "
                        "model"));
  // Cut short: the offsets point past the end.
  const std::string bytes = ReadWholeFile(other).value_or("");
  const std::string truncated = Dir("truncated.safetensors");
  std::ofstream(truncated) << bytes.substr(0, bytes.size() - 8);
  CliRun damaged = Cli(absl::StrCat(validate, truncated));
  EXPECT_NE(damaged.exit_code, 0);
  EXPECT_THAT(damaged.output, HasSubstr("not a valid safetensors file"));
  CliRun bad_format = Cli(absl::StrCat("export --checkpoint ", fit.values["checkpoint"],
                                       " --format onnx --output ", Dir("x.onnx")));
  EXPECT_NE(bad_format.exit_code, 0);
  EXPECT_THAT(bad_format.output, HasSubstr("expected 'torch' or 'safetensors'"));
}

}  // namespace
}  // namespace ddpspawn
