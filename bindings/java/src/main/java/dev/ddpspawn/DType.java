// Element types of the buffers that collectives and reducers work on (DDPSPAWN_FLOAT32 ...).
package dev.ddpspawn;

import java.lang.foreign.MemorySegment;

/** An element type: its C ABI code and its size in bytes. */
public enum DType {
  FLOAT32(0, 4),
  FLOAT64(1, 8),
  INT32(2, 4),
  INT64(3, 8);

  final int code;
  final int bytes;

  DType(int code, int bytes) {
    this.code = code;
    this.bytes = bytes;
  }

  /** The element type of a C ABI code. */
  static DType ofCode(int code) {
    for (DType dtype : values()) {
      if (dtype.code == code) {
        return dtype;
      }
    }
    throw new IllegalArgumentException("ddpspawn: no element type of code " + code);
  }

  /** The number of elements in {@code data}, which must be native memory of whole elements. */
  long count(MemorySegment data, String what) {
    if (!data.isNative()) {
      throw new IllegalArgumentException(
          "ddpspawn: " + what + " must be native memory (an Arena's segment), not a heap array's");
    }
    if (data.byteSize() % bytes != 0) {
      throw new IllegalArgumentException(
          "ddpspawn: "
              + what
              + " holds "
              + data.byteSize()
              + " bytes, not a whole number of "
              + this
              + " elements");
    }
    return data.byteSize() / bytes;
  }
}
