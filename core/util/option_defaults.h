/* ddpspawn's option defaults, each defined once: the *_INIT macros of ddpspawn.h, the library's
 * *_init functions (which the Python and Rust bindings call) and the C++ core all read them from
 * here. Plain C macros; this header includes nothing, so any layer may include it. */
#ifndef DDPSPAWN_CORE_UTIL_OPTION_DEFAULTS_H_
#define DDPSPAWN_CORE_UTIL_OPTION_DEFAULTS_H_

/* After a rank fails: seconds between SIGTERM and SIGKILL for the others. */
#define DDPSPAWN_DEFAULT_GRACE_PERIOD_S 5.0
/* The size cap of a gradient bucket, and of the first one (small, so that communication starts
 * early), in MiB: PyTorch DDP's. */
#define DDPSPAWN_DEFAULT_BUCKET_CAP_MB 25.0
#define DDPSPAWN_DEFAULT_FIRST_BUCKET_CAP_MB 1.0
/* PowerSGD's matrix approximation rank, and the iteration before which it runs plain all-reduce. */
#define DDPSPAWN_DEFAULT_POWERSGD_RANK 1
#define DDPSPAWN_DEFAULT_POWERSGD_START_ITERATION 10

#endif /* DDPSPAWN_CORE_UTIL_OPTION_DEFAULTS_H_ */
