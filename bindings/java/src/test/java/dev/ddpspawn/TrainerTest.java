// The library's Trainer from Java: fit, test and predict in 2 forked ranks, and refusals.
package dev.ddpspawn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Random;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class TrainerTest {
  @TempDir Path dir;

  /** {@code n} rows of 4 features in [-1, 1) and a learnable class of 3. */
  private static void writeCsv(Path path, int n, long seed) throws IOException {
    Random random = new Random(seed);
    StringBuilder text = new StringBuilder();
    for (int i = 0; i < n; i++) {
      double[] x = new double[4];
      for (int j = 0; j < 4; j++) {
        x[j] = Math.round((random.nextDouble() * 2 - 1) * 1e6) / 1e6;
        text.append(String.format("%.6f,", x[j]));
      }
      double s = x[0] + x[1] - 0.5 * x[2];
      text.append(s < -0.4 ? 0 : s < 0.4 ? 1 : 2).append('\n');
    }
    Files.writeString(path, text);
  }

  private Map<String, String> options() throws IOException {
    writeCsv(dir.resolve("train.csv"), 200, 1);
    writeCsv(dir.resolve("val.csv"), 100, 2);
    Map<String, String> options = new LinkedHashMap<>();
    options.put("model", "mlp:4,16,3");
    options.put("train", dir.resolve("train.csv").toString());
    options.put("val", dir.resolve("val.csv").toString());
    options.put("nproc_per_node", "2");
    options.put("max_epochs", "20");
    options.put("lr", "0.1");
    options.put("default_root_dir", dir.resolve("logs").toString());
    options.put("progress", "false");
    return options;
  }

  @Test
  void fitLearnsThenTestAndPredictUseItsCheckpoint() throws IOException {
    Map<String, String> fit = Trainer.run("fit", options());
    assertEquals("20", fit.get("epoch"));
    Path checkpoint = Path.of(fit.get("checkpoint"));
    assertTrue(Files.isRegularFile(checkpoint), checkpoint.toString());
    // Observed 0.86 (chance is about 0.33).
    double accuracy = Double.parseDouble(fit.get("metric.val_accuracy"));
    assertTrue(accuracy >= 0.7, "val_accuracy " + accuracy);

    Map<String, String> test = new LinkedHashMap<>();
    test.put("model", "mlp:4,16,3");
    test.put("data", dir.resolve("val.csv").toString());
    test.put("checkpoint", checkpoint.toString());
    test.put("nproc_per_node", "2");
    Map<String, String> tested = Trainer.run("test", test);
    assertEquals(accuracy, Double.parseDouble(tested.get("metric.test_accuracy")), 1e-6);

    test.put("default_root_dir", dir.resolve("predict").toString());
    Map<String, String> predicted = Trainer.run("predict", test);
    assertEquals("100", predicted.get("count"));
    assertTrue(Files.isRegularFile(Path.of(predicted.get("predictions"))), predicted.toString());
  }

  @Test
  void aMissingFileIsRefusedBeforeAnyRankStarts() throws IOException {
    Map<String, String> options = options();
    options.put("train", dir.resolve("missing.csv").toString());
    DdpspawnException.InvalidArgument failure =
        assertThrows(DdpspawnException.InvalidArgument.class, () -> Trainer.run("fit", options));
    assertTrue(failure.getMessage().contains("missing.csv"), failure.getMessage());
  }

  @Test
  void anUnknownOptionIsNamed() throws IOException {
    Map<String, String> options = options();
    options.put("max_epoch", "3");
    DdpspawnException.InvalidArgument failure =
        assertThrows(DdpspawnException.InvalidArgument.class, () -> Trainer.run("fit", options));
    assertTrue(failure.getMessage().contains("max_epoch"), failure.getMessage());
  }
}
