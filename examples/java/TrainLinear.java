// ddpspawn from Java: 2 ranks train a linear regression written by hand (no tensor library), each
// on its own data, with the gradients averaged in place by a Reducer over native memory; rank 0
// hands the learned weights back to the launcher.
import static java.lang.foreign.ValueLayout.JAVA_FLOAT;

import dev.ddpspawn.Context;
import dev.ddpspawn.DType;
import dev.ddpspawn.JobReport;
import dev.ddpspawn.Launcher;
import dev.ddpspawn.Reducer;
import dev.ddpspawn.Worker;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Random;

public final class TrainLinear {
  public static void main(String[] args) {
    if (Worker.isWorker()) { // a rank: train, averaging the gradients with the others
      Worker.run(TrainLinear::train);
    } else { // this JVM, twice
      JobReport report =
          new Launcher(2).timeout(Duration.ofMinutes(2)).spawnJava(TrainLinear.class);
      byte[] learned = report.result().orElseThrow();
      System.out.println("rank 0 learned: " + new String(learned, StandardCharsets.UTF_8));
    }
  }

  static void train() {
    try (Context context = Context.fromEnvironment();
        Arena arena = Arena.ofConfined()) {
      MemorySegment gradient = arena.allocate(JAVA_FLOAT, 4); // d/dw0, d/dw1, d/dw2, d/dbias
      try (Reducer reducer = Reducer.create(context, List.of(gradient), DType.FLOAT32)) {
        Random random = new Random(context.rank()); // each rank its own data
        int n = 256;
        float[][] x = new float[n][3];
        float[] y = new float[n];
        for (int i = 0; i < n; i++) {
          for (int j = 0; j < 3; j++) {
            x[i][j] = (float) random.nextGaussian();
          }
          y[i] = 2.0f * x[i][0] - 1.0f * x[i][1] + 0.5f * x[i][2] + 3.0f;
        }
        float[] w = new float[4];
        for (int step = 0; step < 200; step++) {
          float[] g = new float[4]; // the mean squared error's gradient on this rank's data
          for (int i = 0; i < n; i++) {
            float error = w[0] * x[i][0] + w[1] * x[i][1] + w[2] * x[i][2] + w[3] - y[i];
            for (int j = 0; j < 3; j++) {
              g[j] += 2 * error * x[i][j] / n;
            }
            g[3] += 2 * error / n;
          }
          MemorySegment.copy(g, 0, gradient, JAVA_FLOAT, 0, 4);
          reducer.markReady(0);
          reducer.finish(); // gradient now holds the mean over the ranks, in place
          for (int j = 0; j < 4; j++) {
            w[j] -= 0.1f * gradient.getAtIndex(JAVA_FLOAT, j);
          }
        }
        if (context.rank() == 0) {
          String learned =
              String.format("weights %.3f %.3f %.3f, bias %.3f", w[0], w[1], w[2], w[3]);
          Worker.setResult(learned.getBytes(StandardCharsets.UTF_8));
        }
      }
    }
  }
}
