// The loop of ../plain/LinearRegression.java on 2 ranks under ddpspawn's Fabric: each rank trains
// on its share of every epoch, and the gradients are averaged over the ranks at each backward; rank
// 0's result is printed by the launching JVM. Five lines differ from the plain loop
// (docs/fabric.md).

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
    System.out.println(dev.ddpspawn.Fabric.of(2).launch(LinearRegression::train));
  }

  static String train(dev.ddpspawn.Fabric fabric) {
    try (Arena arena = Arena.ofConfined()) {
      MemorySegment w = arena.allocate(JAVA_FLOAT, 4); // w0, w1, w2, bias
      MemorySegment g = arena.allocate(JAVA_FLOAT, 4); // their gradient
      var model = fabric.setup(List.of(dev.ddpspawn.Parameter.of("weight", w, g, 4)));
      for (int epoch = 0; epoch < 20; epoch++) {
        long[] order = fabric.epochIndices(N, epoch);
        for (int start = 0; start < order.length; start += 32) {
          List<Long> batch = batch(order, start, 32);
          g.fill((byte) 0);
          fabric.backward(model, () -> addGradient(w, g, batch));
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
