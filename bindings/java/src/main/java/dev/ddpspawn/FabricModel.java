// A model set up by Fabric: the caller's parameters and the reducer that averages their gradients.
package dev.ddpspawn;

import java.util.List;

/**
 * What {@link Fabric#setup} returns: the model's {@link Parameter}s (rank 0's values on every rank
 * since setup) and the {@link Reducer} over their gradient buffers. Not thread-safe. Close it to
 * free the reducer's buckets (the buffers stay the caller's).
 */
public final class FabricModel implements AutoCloseable {
  private final List<Parameter> parameters;
  private final Reducer reducer;

  FabricModel(List<Parameter> parameters, Reducer reducer) {
    this.parameters = List.copyOf(parameters);
    this.reducer = reducer;
  }

  public List<Parameter> parameters() {
    return parameters;
  }

  /** The reducer (for its compression figures or written flags). */
  public Reducer reducer() {
    return reducer;
  }

  /** Averages the gradients over the ranks, in place (under no-sync: nothing). */
  void syncGradients() {
    for (long i = parameters.size() - 1; i >= 0; i--) {
      reducer.markReady(i);
    }
    reducer.finish();
  }

  @Override
  public void close() {
    reducer.close();
  }
}
