// One named parameter of a loop's own model, for Fabric: its values and its gradient in native
// memory.
package dev.ddpspawn;

import java.lang.foreign.MemorySegment;
import java.util.Arrays;

/**
 * A model's parameter as Fabric sees it: its {@code name} (a checkpoint's key, e.g. {@code
 * "0.weight"}), element type, shape, and two native buffers of that many elements, its {@code
 * value} and its {@code gradient}, which the caller's framework owns and writes (a DJL or JavaCPP
 * tensor's memory, or an Arena's segment). Immutable; the buffers must stay alive while a model set
 * up over them is in use.
 */
public record Parameter(
    String name, DType dtype, long[] shape, MemorySegment value, MemorySegment gradient) {

  /** Checks that both buffers are native and hold exactly the shape's elements. */
  public Parameter {
    if (name == null || name.isEmpty()) {
      throw new IllegalArgumentException("ddpspawn: a parameter needs a name");
    }
    shape = shape.clone();
    long elements = 1;
    for (long size : shape) {
      if (size < 0) {
        throw new IllegalArgumentException(
            "ddpspawn: parameter " + name + " has a negative size in " + Arrays.toString(shape));
      }
      elements *= size;
    }
    for (MemorySegment buffer : new MemorySegment[] {value, gradient}) {
      String what = "parameter " + name + "'s " + (buffer == value ? "value" : "gradient");
      if (dtype.count(buffer, what) != elements) {
        throw new IllegalArgumentException(
            "ddpspawn: "
                + what
                + " holds "
                + dtype.count(buffer, what)
                + " elements, not the "
                + elements
                + " of shape "
                + Arrays.toString(shape));
      }
    }
  }

  /** A float32 parameter. */
  public static Parameter of(
      String name, MemorySegment value, MemorySegment gradient, long... shape) {
    return new Parameter(name, DType.FLOAT32, shape, value, gradient);
  }

  @Override
  public long[] shape() {
    return shape.clone();
  }
}
