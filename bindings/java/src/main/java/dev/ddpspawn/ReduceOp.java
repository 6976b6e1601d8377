// Reduce operations of the collectives (DDPSPAWN_SUM ...).
package dev.ddpspawn;

/** How a reduction combines the ranks' elements; MEAN is the sum over the world size. */
public enum ReduceOp {
  SUM(0),
  MEAN(1),
  MIN(2),
  MAX(3),
  PRODUCT(4);

  final int code;

  ReduceOp(int code) {
    this.code = code;
  }
}
