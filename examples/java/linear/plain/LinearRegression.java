// A training loop in one process, before ddpspawn: a linear regression written by hand (no tensor
// library), its weights and gradient in native memory as a framework's tensors keep them, trained
// by
// mini-batch SGD. ../fabric/LinearRegression.java is the same loop on 2 ranks under Fabric, in five
// changed lines (docs/fabric.md shows the diff).

import static java.lang.foreign.ValueLayout.JAVA_FLOAT;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.List;
import java.util.Random;

final class LinearRegression {
  static final int N = 512;
  static final float[][] X = new float[N][3];
  static final float[] Y = new float[N];

  static {
    Random random = new Random(0); // the same data in every process
    for (int i = 0; i < N; i++) {
      for (int j = 0; j < 3; j++) {
        X[i][j] = (float) random.nextGaussian();
      }
      Y[i] = 2.0f * X[i][0] - 1.0f * X[i][1] + 0.5f * X[i][2] + 3.0f;
    }
  }

  public static void main(String[] args) {
    System.out.println(train());
  }

  static String train() {
    try (Arena arena = Arena.ofConfined()) {
      MemorySegment w = arena.allocate(JAVA_FLOAT, 4); // w0, w1, w2, bias
      MemorySegment g = arena.allocate(JAVA_FLOAT, 4); // their gradient
      for (int epoch = 0; epoch < 20; epoch++) {
        long[] order = shuffled(N, epoch);
        for (int start = 0; start < order.length; start += 32) {
          List<Long> batch = batch(order, start, 32);
          g.fill((byte) 0);
          addGradient(w, g, batch);
          for (int j = 0; j < 4; j++) { // SGD
            w.setAtIndex(
                JAVA_FLOAT, j, w.getAtIndex(JAVA_FLOAT, j) - 0.1f * g.getAtIndex(JAVA_FLOAT, j));
          }
        }
      }
      float[] v = w.toArray(JAVA_FLOAT);
      return String.format("learned: weights %.3f %.3f %.3f, bias %.3f", v[0], v[1], v[2], v[3]);
    }
  }

  /** Adds the mean squared error's gradient over {@code batch} into {@code g}. */
  static void addGradient(MemorySegment w, MemorySegment g, List<Long> batch) {
    float[] v = w.toArray(JAVA_FLOAT);
    float[] sum = g.toArray(JAVA_FLOAT);
    for (long row : batch) {
      float[] x = X[(int) row];
      float error = v[0] * x[0] + v[1] * x[1] + v[2] * x[2] + v[3] - Y[(int) row];
      for (int j = 0; j < 3; j++) {
        sum[j] += 2 * error * x[j] / batch.size();
      }
      sum[3] += 2 * error / batch.size();
    }
    MemorySegment.copy(sum, 0, g, JAVA_FLOAT, 0, 4);
  }

  /** 0..n-1 in an order drawn anew each epoch. */
  static long[] shuffled(int n, int epoch) {
    List<Long> order = new java.util.ArrayList<>();
    for (long i = 0; i < n; i++) {
      order.add(i);
    }
    java.util.Collections.shuffle(order, new Random(epoch));
    return order.stream().mapToLong(Long::longValue).toArray();
  }

  static List<Long> batch(long[] order, int start, int size) {
    List<Long> rows = new java.util.ArrayList<>();
    for (int i = start; i < Math.min(order.length, start + size); i++) {
      rows.add(order[i]);
    }
    return rows;
  }
}
